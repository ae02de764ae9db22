/*
 * The step's gradient after backward (trainer.c runs the step): where this rank's
 * reduced piece of each bucket lives, the accumulation of the micro steps into it, and
 * the final gradient's overflow check and global L2 norm, on the host or, for a GPU,
 * with every scalar of the step in one block read back once (device_scalars).
 *
 * Accumulation. In deterministic mode the micro steps are combined in a pairwise tree:
 * levels acc[0..nacc) form a binary counter, so the sum's order is the same at every
 * world size; otherwise a running sum. fold_levels() combines the levels a grad_accum
 * that is not a power of two leaves, and the highest used level is the final gradient.
 *
 * The norm is order-free by construction (global_norm below), so every stage and world
 * size gives the same bits; the overflow check reads the same magnitudes.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/device/device.h"
#include "dslaunch/common/fixedsum.h"
#include "dslaunch/train/trainer.h"
#include "trainer_grads.h"
#include "trainer_mixed.h"
#include "dslaunch/common/banned.h"

#define EL(base, off) dsl_mixed_el(t, (base), (off))
#define ACC(base, off) dsl_mixed_acc_el(t, (base), (off)) /* levels: t->atype */

/* this rank's reduced gradient piece of bucket j after the micro step's reduction */
void *dsl_grads_leaf(struct dsl_trainer *t, size_t j)
{
    const struct dsl_bucket *b = &t->bk[j];
    if (t->o.zero_stage >= 2)
        return EL(t->gshard, b->soff);
    return EL(t->grads, b->lo + b->poff);
}

/* ---- accumulation over micro steps ---------------------------------------------- */

/* Combine this micro step's reduced gradient into the accumulation levels: a binary
 * counter (pairwise tree) in deterministic mode, a running sum otherwise. */
int dsl_grads_accumulate(struct dsl_trainer *t)
{
    const void *carry_acc = NULL; /* NULL: the carry is the leaf */
    int r;
    for (int i = 0; i < t->nacc; i++) {
        void *lv = t->acc[i];
        int deterministic = t->o.deterministic;
        for (size_t j = 0; j < t->nbk; j++) {
            const struct dsl_bucket *b = &t->bk[j];
            r = !carry_acc ? dsl_mixed_acc_in(t, ACC(lv, b->soff), dsl_grads_leaf(t, j),
                                              b->plen, !t->acc_used[i])
                           : dsl_mixed_acc_level(t, ACC(lv, b->soff), ACC(carry_acc, b->soff),
                                                 b->plen, !t->acc_used[i]);
            if (r < 0)
                return r;
        }
        if (!t->acc_used[i] || !deterministic) {
            t->acc_used[i] = 1;
            return 0;
        }
        t->acc_used[i] = 0;
        carry_acc = lv;
    }
    return 0;
}

/* Fold leftover tree levels from low to high (grad_accum not a power of two), so that
 * the highest used level holds the step's gradient. */
int dsl_grads_fold(struct dsl_trainer *t)
{
    int top = -1, r;
    if (t->o.grad_accum == 1)
        return 0;
    for (int i = 0; i < t->nacc; i++) {
        if (!t->acc_used[i])
            continue;
        if (top >= 0)
            for (size_t k = 0; k < t->nbk; k++)
                if ((r = dsl_mixed_acc_level(t, ACC(t->acc[i], t->bk[k].soff),
                                             ACC(t->acc[top], t->bk[k].soff), t->bk[k].plen,
                                             0)) < 0)
                    return r;
        top = i;
    }
    return 0;
}

/* The element type of the final gradient: a leaf's, or an accumulation level's */
enum dsl_dtype dsl_grads_final_type(const struct dsl_trainer *t)
{
    return t->o.grad_accum == 1 || t->defer ? t->gtype : t->atype;
}

/* The final gradient of this step, per bucket piece (after fold_levels). */
void *dsl_grads_final(struct dsl_trainer *t, size_t j)
{
    if (t->o.grad_accum == 1 || t->defer)
        return dsl_grads_leaf(t, j);
    int top = -1;
    for (int i = 0; i < t->nacc; i++)
        if (t->acc_used[i])
            top = i;
    return ACC(t->acc[top], t->bk[j].soff);
}

/* The bit pattern of this rank's largest |g| over its final gradient pieces (device.h:
 * absmax_bits; NaN sorts above inf); with stop_at_inf the scan ends at the first piece
 * holding inf or NaN. */
static int local_absmax(struct dsl_trainer *t, int stop_at_inf, uint32_t *out)
{
    *out = 0;
    for (size_t j = 0; j < t->nbk && !(stop_at_inf && *out >= 0x7f800000u); j++) {
        uint32_t b;
        int r = dsl_mixed_absmax(t, dsl_grads_final_type(t), dsl_grads_final(t, j),
                                 t->bk[j].plen, &b);
        if (r < 0)
            return r;
        *out = b > *out ? b : *out;
    }
    return 0;
}

/*
 * The global L2 norm of the final gradient, the same bits at every world size and
 * stage: the largest magnitude is agreed first (MAX is order-free), then every
 * element's square, relative to it, is rounded to a fixed-point integer with 36
 * fraction bits; integer sums are exact in any order, so the partition over ranks
 * does not matter. Relative error at most P x 2^-37 (1.4e-5 for 1.9M parameters).
 */
#define NORM_FRAC 68719476736.0 /* 2^36 */
int dsl_grads_norm(struct dsl_trainer *t, float *norm, const uint32_t *local_max)
{
    int shared = t->o.zero_stage > 0 && t->world > 1, r;
    /* max |g| on the bit patterns, unless the caller knows it */
    uint32_t mb = local_max ? *local_max : 0;
    if (!local_max && (r = local_absmax(t, 0, &mb)) < 0)
        return r;
    float mx;
    memcpy(&mx, &mb, sizeof(mx));
    if (shared && (r = dsl_trainer_allreduce_host(t, &mx, 1, DSL_FLOAT32, DSL_MAX)) < 0)
        return r;
    double m2 = (double)mx * (double)mx, k = NORM_FRAC / m2;
    uint64_t sum = 0;
    if (isfinite(mx) && mx > 0.0f)
        for (size_t j = 0; j < t->nbk; j++) {
            uint64_t part;
            if ((r = dsl_mixed_sumsq(t, dsl_grads_final_type(t), dsl_grads_final(t, j),
                                     t->bk[j].plen, k, &part)) < 0)
                return r;
            sum += part;
        }
    if (shared) {
        /* int32 limb sums, exact up to 2^20 ranks (fixedsum.h; trainer_setup.c
         * refuses a larger world) */
        int32_t limb[DSL_FIXEDSUM_LIMBS];
        dsl_fixedsum_split(sum, limb);
        if ((r = dsl_trainer_allreduce_host(t, limb, DSL_FIXEDSUM_LIMBS, DSL_INT32,
                                            DSL_SUM)) < 0)
            return r;
        sum = dsl_fixedsum_join(limb);
    }
    if (!isfinite(mx) || mx == 0.0f)
        *norm = mx;
    else
        *norm = (float)sqrt((double)sum / NORM_FRAC * m2);
    return 0;
}

/* 1 in *overflow when a final gradient piece of this rank holds inf or NaN: their
 * magnitude bits are >= those of inf (absmax_bits sorts NaN above inf). Without an
 * overflow, *max_bits is the bit pattern of this rank's largest |g| (the norm reuses
 * it); with one the scan stops early. */
int dsl_grads_overflow(struct dsl_trainer *t, int *overflow, uint32_t *max_bits)
{
    int r = local_absmax(t, 1, max_bits);
    *overflow = *max_bits >= 0x7f800000u;
    return r;
}

/*
 * GPU: every scalar the step's decisions need, with one host synchronisation. On the
 * device, in stream order: this rank's max |g| bits over its final pieces (when loss
 * scaling or clipping needs it), the overflow flag from it, the sum of the per micro
 * step stats and flags over the ranks, then (clipping) the agreed maximum, each
 * element's fixed-point square relative to it (the same integers dsl_grads_norm() sums on
 * the host, k computed from the agreed maximum on the device in the same double
 * arithmetic) and the sum's limbs summed over the ranks; the collectives are
 * asynchronous and the compute stream waits for them. Then one copy of the whole block
 * to page-locked memory, whose wait (the comm's bounded one) is the step's only host
 * synchronisation. Out: t->stats (host), *gmax (the agreed maximum's bits) and *sum.
 */
int dsl_grads_device_scalars(struct dsl_trainer *t, float stop, int clip, size_t nstats,
                             uint32_t *gmax, uint64_t *sum)
{
    struct dsl_device *d = t->dev;
    size_t ga = t->o.grad_accum;
    char *ds = t->dscal;
    float *dstats = (float *)(void *)ds;
    uint32_t *dmax = (uint32_t *)(void *)(ds + t->off_max);
    uint64_t *dsum = (uint64_t *)(void *)(ds + t->off_sum);
    int32_t *dlimb = (int32_t *)(void *)(ds + t->off_limb);
    int shared = t->o.zero_stage > 0 && t->world > 1, req, r;
    /* the host's flag (staged before the call returns), max and sum from zero */
    if ((r = d->ops->copy(d, dstats + 2 * ga, &stop, sizeof(stop), DSL_COPY_H2D)) < 0 ||
        (r = d->ops->set_zero(d, (float *)(void *)dmax, (t->off_limb - t->off_max) / 4)) < 0)
        return r;
    if (t->o.loss_scaling || clip)
        for (size_t j = 0; j < t->nbk; j++)
            if ((r = d->ops->absmax_bits_acc(d, dsl_grads_final_type(t), dsl_grads_final(t, j),
                                             t->bk[j].plen, dmax)) < 0)
                return r;
    if (t->o.loss_scaling &&
        (r = d->ops->scalars_finish(d, dsum, dlimb, dmax, dstats + 2 * ga + 1)) < 0)
        return r;
    if ((r = dsl_comm_iallreduce(t->comm, dstats, dstats, nstats, DSL_FLOAT32, DSL_SUM,
                                 &req)) < 0 ||
        (r = dsl_comm_wait(t->comm, req)) < 0)
        return r;
    if (clip) {
        /* the bits of a non-negative float order as the float: MAX on them as floats */
        if (shared && ((r = dsl_comm_iallreduce(t->comm, dmax, dmax, 1, DSL_FLOAT32, DSL_MAX,
                                                &req)) < 0 ||
                       (r = dsl_comm_wait(t->comm, req)) < 0))
            return r;
        for (size_t j = 0; j < t->nbk; j++)
            if ((r = d->ops->sumsq_fixed_acc(d, dsl_grads_final_type(t), dsl_grads_final(t, j),
                                             t->bk[j].plen, dmax, NORM_FRAC, dsum)) < 0)
                return r;
        if ((r = d->ops->scalars_finish(d, dsum, dlimb, dmax, NULL)) < 0)
            return r;
        if (shared && ((r = dsl_comm_iallreduce(t->comm, dlimb, dlimb, DSL_FIXEDSUM_LIMBS,
                                                DSL_INT32, DSL_SUM, &req)) < 0 ||
                       (r = dsl_comm_wait(t->comm, req)) < 0))
            return r;
    }
    /* the one host synchronisation of the step */
    if ((r = d->ops->copy(d, t->hscal, t->dscal, t->scal_bytes, DSL_COPY_D2H)) < 0)
        return r;
    const char *hs = t->hscal;
    memcpy(t->stats, hs, nstats * sizeof(float));
    memcpy(gmax, hs + t->off_max, sizeof(*gmax));
    int32_t limb[DSL_FIXEDSUM_LIMBS];
    memcpy(limb, hs + t->off_limb, sizeof(limb));
    *sum = dsl_fixedsum_join(limb);
    return 0;
}

/* the norm from the agreed maximum and the fixed-point sum, as dsl_grads_norm() ends */
float dsl_grads_norm_of(uint32_t gmax, uint64_t sum)
{
    float mx;
    memcpy(&mx, &gmax, sizeof(mx));
    if (!isfinite(mx) || mx == 0.0f)
        return mx;
    double m2 = (double)mx * (double)mx;
    return (float)sqrt((double)sum / NORM_FRAC * m2);
}

