/*
 * The data-parallel step of dstrain: ZeRO stages 0, 1, 2 and 3 over flat buffers.
 *
 * Theory of operation. The model hands its gradient over in segments, last layer
 * first (model.h); the trainer groups consecutive segments into buckets of at most
 * reduce_bucket_size elements (a segment is never split, so a bucket is at least one
 * segment). A bucket is complete when its last segment in backward order (the one at
 * its lowest offset) is done. Then, per stage:
 *   0: the bucket is all-reduced in place in the full gradient buffer;
 *   1: the bucket is reduce-scattered in place: this rank's piece of the bucket in
 *      the full gradient buffer receives the sum;
 *   2: backward wrote the bucket into a staging buffer (one, or two alternating with
 *      overlap_comm); it is reduce-scattered into the rank's shard buffer, and the
 *      staging buffer is reused for a later bucket once that call has completed;
 *   3: as 2; the parameters are sharded too, and forward and backward get each layer
 *      whole from the sink's layer() (trainer_zero3.c), gathered from the shards.
 *      Bucket boundaries fall on layer boundaries, so the shard is per bucket as at
 *      stages 1/2, and the optimizer updates the shard in place; after the step
 *      every gathered copy is stale and the next forward gathers again.
 * With overlap_comm the calls are the asynchronous ones (dsl_comm_i*), issued from
 * inside backward and executed by the comm's progress thread while backward goes on
 * with the next layers; every rank issues the same calls in the same order because
 * the bucket list is the same on every rank. Without overlap_comm stages 0/1 reduce
 * all buckets after backward and stage 2 reduces each bucket with a blocking call as
 * it completes.
 *
 * After the last micro step the gradient pieces are divided by the global batch (the
 * model gives fp32 gradients of the summed loss; 16-bit ones already of the mean, see
 * lavg in dsl_trainer_step), optionally clipped with the global L2
 * norm, and the optimizer runs over this rank's pieces (stage 0: everything). Stages
 * 1/2 then all-gather the parameters bucket by bucket, in place. Stage 0 on the CPU
 * with overlap, one micro step and neither clipping nor loss scaling streams instead:
 * each bucket is updated as soon as its all-reduce completes, while the later ones are
 * still on the wire (streams_optimizer). When the model hands its loss over before
 * backward (the sink's loss()), the loss goes out ahead of the buckets and the step
 * ends as soon as it is back; the buckets' waits and updates move into the next
 * forward, just before it reads each bucket's parameters (stream_end), so the first
 * layer, whose gradient comes out of backward last, is reduced while the next forward
 * already runs on its blocks that are in.
 *
 * fp16 loss scaling (trainer.h) adds three things to that: the model is asked for the
 * gradient of scale x loss; before the per-step loss reduction every rank looks for
 * inf/NaN in its final gradient pieces (absmax_bits) and the flag travels with the
 * loss sums, so all ranks see the same sum and take the same decision from
 * dsl_lossscale_update(); and 1/scale joins the division by the global batch. A
 * skipped step returns before clipping and the optimizer and issues no all-gather
 * (the parameters did not change). Without loss scaling none of this runs, and the
 * arithmetic is what it always was.
 *
 * In deterministic mode every micro step is reduced over the ranks, and the micro steps
 * are combined afterwards in a pairwise tree; see trainer.h for why this gives the same
 * bits at every world size. Outside it, stages 0/1 sum the micro steps locally in one
 * full-size buffer (acc[0], P floats) and reduce once, at the last micro step, whose
 * buckets add that sum in just before they are reduced (t->defer; grad_accum times
 * fewer bytes on the wire, as in DeepSpeed); stage 2 keeps reducing every micro step
 * into its shard (no rank holds a full gradient there) and sums the pieces.
 *
 * Memory (allocated in trainer_setup.c). Every model-state buffer (params, grads, the shard, staging buckets,
 * accumulation levels, optimizer state) lives on t->dev (device.h) and is allocated,
 * copied, scaled, summed and updated only through its ops: host memory and plain loops
 * on the CPU device (the loops this file always ran, so CPU results are unchanged), GPU
 * memory and kernels on the CUDA device, whose calls run on the device's stream with
 * the model's cuBLAS work; the nccl comm orders its collectives after that stream with
 * events, and every dsl_comm_wait() makes the stream wait for a collective with an
 * event, so the step never waits on the host for a bucket, a staging slot or a
 * parameter all-gather (device.h, comm.h). The comm is handed the same buffers: host
 * memory for tcp, device memory for nccl. On the CPU the small host arrays that are
 * reduced (per micro step loss/accuracy and the stop flag, the norm's maximum and
 * integer limbs) go straight to the comm. On a GPU they never leave the device during
 * the step: the model sums each micro step's loss and hits into device memory, the
 * overflow check and the norm accumulate over the buckets on the device, the ranks
 * reduce them there, and device_scalars() reads the whole block back with the step's
 * one host synchronisation, bounded by the comm's timeout (res->host_syncs counts the
 * waits; --metrics reports them). Evaluation counts still go through a small device
 * scratch buffer (dsl_trainer_allreduce_host). The micro batch is gathered on the
 * host; the model uploads it asynchronously from page-locked memory while the host
 * gathers the next one.
 *
 * Mixed precision (fp16/bf16 on a GPU, or on the CPU with dstrain.cpu_half): params,
 * grads, shard, staging and accumulation hold 16-bit elements and go over the comm as
 * such; the buffer ops above go through trainer_mixed.c, which picks the device's
 * fp32 or 16-bit op, and the optimizer updates fp32 master weights there. A 16-bit gradient is never averaged or unscaled
 * in place: those factors ride with the optimizer in fp32, and the norm is scaled.
 *
 * A comm or device failure inside backward is recorded in comm_err and reported when
 * backward returns; the trainer never exits on its own (dstrain decides).
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/model/device.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/fixedsum.h"
#include "dslaunch/common/gpuprof.h"
#include "dslaunch/common/hostsync.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/progress.h"
#include "dslaunch/train/trainer.h"
#include "dslaunch/common/xalloc.h"
#include "trainer_mixed.h"
#include "dslaunch/common/banned.h"

/* the device ops on gradient elements (fp32 or 16-bit: trainer_mixed.h), short */
#define dscale dsl_mixed_scale
#define dadd dsl_mixed_add
#define dcopy dsl_mixed_copy
#define EL(base, off) dsl_mixed_el(t, (base), (off))
#define ACC(base, off) dsl_mixed_acc_el(t, (base), (off)) /* levels: t->atype */


static int comm_fail(struct dsl_trainer *t, int r, const char *what, char *err);

const char *dsl_trainer_last_error(const struct dsl_trainer *t)
{
    if (t->dev && t->dev->failed)
        return t->dev->err;
    return dsl_comm_last_error(t->comm);
}

/* ---- gradient sink: where backward writes, and what happens when a bucket is done */

static void *slot_of(struct dsl_trainer *t, size_t j)
{
    return t->staging[j % (size_t)t->nslots];
}

/* this rank's reduced gradient piece of bucket j after the micro step's reduction */
static void *leaf_ptr(struct dsl_trainer *t, size_t j)
{
    const struct dsl_bucket *b = &t->bk[j];
    if (t->o.zero_stage >= 2)
        return EL(t->gshard, b->soff);
    return EL(t->grads, b->lo + b->poff);
}

/* Bucket j's update that the last step left to this one (stream_end): wait for its
 * all-reduce, then run the optimizer over it with the last step's settings */
static int apply_pending(struct dsl_trainer *t, size_t j)
{
    struct dsl_bucket *b = &t->bk[j];
    if (!b->pend)
        return 0;
    b->pend = 0;
    t->npend--;
    double w0 = dsl_now();
    int r = dsl_comm_wait(t->comm, b->req);
    b->req = -1;
    double w1 = dsl_now();
    t->pend_wait += w1 - w0;
    if (r < 0)
        return r;
    r = dsl_mixed_optim(t, j, t->gtype, leaf_ptr(t, j), t->pend_lr, t->pend_t, 1.0f,
                        t->pend_inv);
    t->pend_optim += dsl_now() - w1;
    return r;
}

static int apply_all_pending(struct dsl_trainer *t)
{
    for (size_t j = 0; j < t->nbk && t->npend; j++) {
        int r = apply_pending(t, j);
        if (r < 0)
            return r;
    }
    return 0;
}

static float *sink_dest(void *ctx, size_t seg)
{
    struct dsl_trainer *t = ctx;
    const struct dsl_model_seg *s = &t->model->segs[seg];
    if (t->npend && !t->comm_err) {
        /* the last step's reduced gradient of this bucket is still to be applied
         * (a model that did not need() these parameters): before it is overwritten */
        int r = apply_pending(t, t->seg_bucket[seg]);
        if (r < 0)
            t->comm_err = r;
    }
    if (t->o.zero_stage < 2)
        return EL(t->grads, s->off);
    size_t j = t->seg_bucket[seg];
    struct dsl_bucket *b = &t->bk[j];
    if (seg == b->seg_first && j >= (size_t)t->nslots) {
        /* the slot's previous bucket must have left before we overwrite it */
        struct dsl_bucket *prev = &t->bk[j - (size_t)t->nslots];
        if (prev->req >= 0 && !t->comm_err) {
            int r = dsl_comm_wait(t->comm, prev->req);
            if (r < 0)
                t->comm_err = r;
        }
        prev->req = -1;
    }
    return EL(slot_of(t, j), s->off - b->lo);
}

/* reduce bucket j: asynchronously (issue) or blocking; with deferred reduction the
 * earlier micro steps' local sum is added in first */
static int reduce_bucket(struct dsl_trainer *t, size_t j, int async)
{
    struct dsl_bucket *b = &t->bk[j];
    void *src = t->o.zero_stage >= 2 ? slot_of(t, j) : EL(t->grads, b->lo);
    void *dst = t->o.zero_stage >= 2 ? EL(t->gshard, b->soff) : EL(src, b->poff);
    enum dsl_dtype ty = t->gtype;
    int r;
    if (t->defer && (r = dsl_mixed_acc_out(t, src, ACC(t->acc[0], b->lo), b->len)) < 0)
        return r;
    if (t->o.prescale && t->o.predivide != 1.0f &&
        (r = dscale(t, src, b->len, 1.0f / t->o.predivide)) < 0)
        return r;
    if (!async && !t->dev->host_memory) {
        /* GPU: never a host wait inside the step; the compute stream waits instead */
        int req;
        r = t->o.zero_stage == 0
                ? dsl_comm_iallreduce(t->comm, src, src, b->len, ty, DSL_SUM, &req)
                : dsl_comm_ireduce_scatter(t->comm, src, dst, b->len, ty, DSL_SUM, &req);
        return r < 0 ? r : dsl_comm_wait(t->comm, req);
    }
    if (t->o.zero_stage == 0)
        return async ? dsl_comm_iallreduce(t->comm, src, src, b->len, ty, DSL_SUM, &b->req)
                     : dsl_comm_allreduce(t->comm, src, src, b->len, ty, DSL_SUM);
    return async ? dsl_comm_ireduce_scatter(t->comm, src, dst, b->len, ty, DSL_SUM, &b->req)
                 : dsl_comm_reduce_scatter(t->comm, src, dst, b->len, ty, DSL_SUM);
}

static void sink_done(void *ctx, size_t seg)
{
    struct dsl_trainer *t = ctx;
    size_t j = t->seg_bucket[seg];
    if (seg != t->bk[j].seg_last || t->comm_err || (t->defer && !t->last_micro))
        return;
    dsl_gpuprof_mark(DSL_PROF_GRAD); /* GPU timers: the bucket's work, until the model's next */
    int r = 0;
    if (t->o.overlap_comm)
        r = reduce_bucket(t, j, 1);
    else if (t->o.zero_stage >= 2)
        r = reduce_bucket(t, j, 0);
    if (r < 0)
        t->comm_err = r;
}

/* wait until the k-th issued all-gather (and every earlier one) is complete */
static int gather_wait_upto(struct dsl_trainer *t, size_t k)
{
    if (k < t->gather_done)
        return 0;
    double w0 = dsl_now();
    dsl_gpuprof_mark(DSL_PROF_GATHER_WAIT);
    int r = dsl_comm_wait(t->comm, t->gq[k]);
    t->gather_wait += dsl_now() - w0;
    t->gather_done = k + 1;
    return r;
}

static void sink_need(void *ctx, size_t off, size_t len)
{
    struct dsl_trainer *t = ctx;
    /* the last step's buckets complete in issue order: waiting for the last one this
     * range needs is waiting for every earlier one too, so those are updated on the way
     * (while the later ones are still on the wire) rather than left for later */
    size_t upto = 0;
    for (size_t j = 0; j < t->nbk && t->npend; j++) {
        const struct dsl_bucket *b = &t->bk[j];
        if (b->pend && b->lo < off + len && off < b->lo + b->len)
            upto = j + 1;
    }
    for (size_t j = 0; j < upto && t->npend && !t->comm_err; j++) {
        int r = apply_pending(t, j);
        if (r < 0)
            t->comm_err = r;
    }
    if (t->gather_done >= t->ngather || t->comm_err)
        return;
    size_t need = 0;
    int any = 0;
    for (size_t k = 0; k < t->ngather; k++) {
        const struct dsl_bucket *b = &t->bk[t->gb[k]];
        if (b->lo < off + len && off < b->lo + b->len) {
            need = k;
            any = 1;
        }
    }
    if (any) {
        int r = gather_wait_upto(t, need);
        if (r < 0)
            t->comm_err = r;
    }
}

/* A rank's requests for the step (DSL_STEP_STOP, DSL_STEP_SAVE), as a number the loss
 * reduction sums: 1 for a stop, 2^21 for a save. A world has at most 2^20 ranks and
 * only rank 0 asks for saves, so the sum is exact in a float and both can be read
 * back (request_of). */
#define SAVE_UNIT 2097152.0f
static float request_word(int req)
{
    return (req & DSL_STEP_STOP ? 1.0f : 0.0f) + (req & DSL_STEP_SAVE ? SAVE_UNIT : 0.0f);
}

static void request_of(float sum, struct dsl_step_result *res)
{
    res->save = sum >= SAVE_UNIT;
    res->stop = sum - (res->save ? SAVE_UNIT : 0.0f) > 0.0f;
}

/* A streamed step's loss, hits (stats[0], stats[1]) and stop flag, reduced over the
 * ranks in one asynchronous call (stats_req) */
static int issue_stats(struct dsl_trainer *t)
{
    t->stats[2] = request_word(t->stop_flag);
    int r = dsl_comm_iallreduce(t->comm, t->stats, t->stats, 3, DSL_FLOAT32, DSL_SUM,
                                &t->stats_req);
    t->stats_issued = r == 0;
    return r;
}

/* The model's loss of a streamed step, before backward's first bucket: reduced from
 * here, ahead of every bucket, so that it completes first (stream_end) */
static void sink_loss(void *ctx, const struct dsl_model_stats *st)
{
    struct dsl_trainer *t = ctx;
    if (t->comm_err)
        return;
    /* forward has read every parameter; anything still pending goes before the
     * statistics so that the requests stay in the order every rank issues them */
    int r = apply_all_pending(t);
    if (r < 0) {
        t->comm_err = r;
        return;
    }
    t->stats[0] = (float)st->loss_sum;
    t->stats[1] = (float)st->correct;
    if ((r = issue_stats(t)) < 0)
        t->comm_err = r;
}

int dsl_trainer_sync(struct dsl_trainer *t, char *err)
{
    int r;
    if (t->npend && (r = apply_all_pending(t)) < 0)
        return comm_fail(t, r, "gradient reduction", err);
    if (t->gather_done >= t->ngather)
        return 0;
    r = gather_wait_upto(t, t->ngather - 1);
    if (r < 0)
        return comm_fail(t, r, "parameter all-gather", err);
    return 0;
}

/* ---- accumulation over micro steps ---------------------------------------------- */

/* Combine this micro step's reduced gradient into the accumulation levels: a binary
 * counter (pairwise tree) in deterministic mode, a running sum otherwise. */
static int accumulate(struct dsl_trainer *t)
{
    const void *carry_acc = NULL; /* NULL: the carry is the leaf */
    int r;
    for (int i = 0; i < t->nacc; i++) {
        void *lv = t->acc[i];
        int deterministic = t->o.deterministic;
        for (size_t j = 0; j < t->nbk; j++) {
            const struct dsl_bucket *b = &t->bk[j];
            r = !carry_acc ? dsl_mixed_acc_in(t, ACC(lv, b->soff), leaf_ptr(t, j), b->plen,
                                              !t->acc_used[i])
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
static int fold_levels(struct dsl_trainer *t)
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
static enum dsl_dtype final_type(const struct dsl_trainer *t)
{
    return t->o.grad_accum == 1 || t->defer ? t->gtype : t->atype;
}

/* The final gradient of this step, per bucket piece (after fold_levels). */
static void *final_grads(struct dsl_trainer *t, size_t j)
{
    if (t->o.grad_accum == 1 || t->defer)
        return leaf_ptr(t, j);
    int top = -1;
    for (int i = 0; i < t->nacc; i++)
        if (t->acc_used[i])
            top = i;
    return ACC(t->acc[top], t->bk[j].soff);
}

/* ---- the step --------------------------------------------------------------------- */

/* a comm (or device) failure: the text is the device's when it failed, else the comm's */
static int comm_fail(struct dsl_trainer *t, int r, const char *what, char *err)
{
    t->ngather = t->gather_done = 0; /* the comm is unusable now: nothing to wait for */
    const char *why = dsl_trainer_last_error(t);
    return dsl_seterr(err, r, "%s failed at step %llu: %s", what,
                      (unsigned long long)t->step + 1, why && *why ? why : dsl_strerror(r));
}

static float tree_sum(const float *v, size_t n)
{
    /* pairwise tree in index order, odd element carried up: the comm's order */
    float tmp[64];
    if (n == 0)
        return 0.0f;
    if (n > 64) {
        size_t h = 1;
        while (h * 2 < n)
            h *= 2;
        return tree_sum(v, h) + tree_sum(v + h, n - h);
    }
    memcpy(tmp, v, n * sizeof(float));
    while (n > 1) {
        size_t k = 0;
        for (size_t i = 0; i + 1 < n; i += 2)
            tmp[k++] = tmp[i] + tmp[i + 1];
        if (n & 1)
            tmp[k++] = tmp[n - 1];
        n = k;
    }
    return tmp[0];
}

/* The bit pattern of this rank's largest |g| over its final gradient pieces (device.h:
 * absmax_bits; NaN sorts above inf); with stop_at_inf the scan ends at the first piece
 * holding inf or NaN. */
static int local_absmax(struct dsl_trainer *t, int stop_at_inf, uint32_t *out)
{
    *out = 0;
    for (size_t j = 0; j < t->nbk && !(stop_at_inf && *out >= 0x7f800000u); j++) {
        uint32_t b;
        int r = dsl_mixed_absmax(t, final_type(t), final_grads(t, j), t->bk[j].plen, &b);
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
static int global_norm(struct dsl_trainer *t, float *norm, const uint32_t *local_max)
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
            if ((r = dsl_mixed_sumsq(t, final_type(t), final_grads(t, j), t->bk[j].plen, k,
                                     &part)) < 0)
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
static int grad_overflow(struct dsl_trainer *t, int *overflow, uint32_t *max_bits)
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
 * element's fixed-point square relative to it (the same integers global_norm() sums on
 * the host, k computed from the agreed maximum on the device in the same double
 * arithmetic) and the sum's limbs summed over the ranks; the collectives are
 * asynchronous and the compute stream waits for them. Then one copy of the whole block
 * to page-locked memory, whose wait (the comm's bounded one) is the step's only host
 * synchronisation. Out: t->stats (host), *gmax (the agreed maximum's bits) and *sum.
 */
static int device_scalars(struct dsl_trainer *t, int stop_request, int clip, size_t nstats,
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
    float stop = request_word(stop_request);
    /* the host's flag (staged before the call returns), max and sum from zero */
    if ((r = d->ops->copy(d, dstats + 2 * ga, &stop, sizeof(stop), DSL_COPY_H2D)) < 0 ||
        (r = d->ops->set_zero(d, (float *)(void *)dmax, (t->off_limb - t->off_max) / 4)) < 0)
        return r;
    if (t->o.loss_scaling || clip)
        for (size_t j = 0; j < t->nbk; j++)
            if ((r = d->ops->absmax_bits_acc(d, final_type(t), final_grads(t, j),
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
            if ((r = d->ops->sumsq_fixed_acc(d, final_type(t), final_grads(t, j),
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

/* the norm from the agreed maximum and the fixed-point sum, as global_norm() ends */
static float norm_of(uint32_t gmax, uint64_t sum)
{
    float mx;
    memcpy(&mx, &gmax, sizeof(mx));
    if (!isfinite(mx) || mx == 0.0f)
        return mx;
    double m2 = (double)mx * (double)mx;
    return (float)sqrt((double)sum / NORM_FRAC * m2);
}

/* A step skipped on gradient overflow: drop the gradients (the accumulation levels
 * start over; the leaves are overwritten by the next backward) and leave parameters,
 * optimizer state and the applied-step count alone. Nothing to all-gather. */
static void skip_step(struct dsl_trainer *t, struct dsl_step_result *res, uint64_t sent0)
{
    for (int i = 0; i < t->nacc; i++)
        t->acc_used[i] = 0;
    t->ngather = t->gather_done = 0;
    res->skipped = 1;
    t->step++;
    res->bytes_sent = dsl_comm_bytes_sent(t->comm) - sent0;
}

/* loss, accuracy and the stop flag of the step from the reduced statistics (ga micro
 * steps), and the loss scale it ran with */
static void read_stats(const struct dsl_trainer *t, size_t ga, struct dsl_step_result *res)
{
    res->loss = (double)tree_sum(t->stats, ga) / (double)t->G;
    res->accuracy = (double)tree_sum(t->stats + ga, ga) / (double)t->G;
    request_of(t->stats[2 * ga], res);
    res->loss_scale = res->next_scale = t->ls.cur_scale;
}

/* The learning rate of the next applied step (skipped fp16 steps do not count) */
static float step_lr(const struct dsl_trainer *t, uint64_t applied)
{
    return t->o.lr_fn ? t->o.lr_fn(t->o.lr_ctx, applied) : t->o.optim.lr;
}

/*
 * Whether this step's optimizer streams: stage 0 on host memory with overlapped
 * reduction, one micro step, fp32, and nothing that needs the whole reduced gradient
 * before an update (no clipping, no loss scaling). Then each bucket is updated as soon
 * as its all-reduce has completed (inside the step, or in the next forward), and the
 * loss statistics ride with the buckets instead of taking a round trip of their own
 * (stream_end). The optimizers are elementwise, so the order in which the buckets are
 * updated changes no bit.
 */
static int streams_optimizer(const struct dsl_trainer *t)
{
    return t->dev->host_memory && t->o.overlap_comm && t->o.zero_stage == 0 &&
           t->o.grad_accum == 1 && !t->o.loss_scaling && t->o.grad_clip <= 0.0f &&
           t->gtype == DSL_FLOAT32;
}

/*
 * The end of a streamed step (streams_optimizer): backward has issued every bucket.
 * Every bucket is marked for its update with this step's settings (pend_*). When the
 * model handed its loss over before backward (sink_loss), the statistics went out
 * ahead of every bucket, so they are the first request to complete: the step reports
 * its loss and stop flag as soon as they are in, and leaves each bucket's wait and
 * update to the point where the next forward reads those parameters (sink_need). The
 * first layer's gradient, the last to come out of backward, is then reduced while the
 * next step's forward already runs on the blocks that are in; dsl_trainer_sync
 * finishes the updates for anything else that reads the parameters (evaluation,
 * checkpoints, the end of training). Otherwise the statistics go out behind the last
 * bucket, and each bucket is updated here as soon as its reduction completes. The
 * optimizer is elementwise, so when each bucket is updated changes no bit.
 */
static int stream_end(struct dsl_trainer *t, struct dsl_step_result *res, char *err)
{
    int deferred = t->stats_issued, r;
    if (!deferred && (r = issue_stats(t)) < 0)
        return comm_fail(t, r, "loss reduction", err);
    uint64_t applied = t->step - t->ls.skipped;
    t->pend_lr = res->lr = step_lr(t, applied);
    t->pend_t = applied + 1;
    /* the mean over the global batch rides with the optimizer, as in the full step */
    t->pend_inv = (t->o.prescale ? t->o.predivide : 1.0f) / (float)t->G;
    for (size_t j = 0; j < t->nbk; j++)
        t->bk[j].pend = 1;
    t->npend = t->nbk;
    if (!deferred) {
        double w0 = t->pend_wait, o0 = t->pend_optim;
        r = apply_all_pending(t);
        res->t_reduce += t->pend_wait - w0;
        res->t_optim += t->pend_optim - o0;
        if (r < 0)
            return comm_fail(t, r, "gradient reduction", err);
    }
    double s0 = dsl_now();
    r = dsl_comm_wait(t->comm, t->stats_req);
    t->stats_issued = 0;
    if (r < 0)
        return comm_fail(t, r, "loss reduction", err);
    res->t_small = dsl_now() - s0;
    read_stats(t, 1, res);
    return 0;
}

int dsl_trainer_step(struct dsl_trainer *t, const struct dsl_dataset *train,
                     const size_t *idx, int stop_request, struct dsl_step_result *res,
                     char *err)
{
    struct dsl_model *m = t->model;
    size_t mb = t->o.micro_batch, ga = t->o.grad_accum, N = (size_t)t->world;
    struct dsl_grad_sink sink = {.dest = sink_dest, .done = sink_done, .need = sink_need,
                                 .ctx = t};
    uint64_t sent0 = dsl_comm_bytes_sent(t->comm), syncs0 = dsl_hostsync_count();
    int gpu = !t->dev->host_memory;
    /* the loss scale of this step; one beyond fp32's range (a dynamic scale doubled
     * past 2^127) becomes inf, so the gradient overflows and the scaler halves it */
    float scale = t->o.loss_scaling ? (float)t->ls.cur_scale : 1.0f;
    /* 16-bit gradients are those of the mean loss over the global batch, times the
     * scale (DeepSpeed's magnitudes: the mean over the micro batch, divided by the
     * accumulation steps, and, as with its prescale_gradients, by the world size
     * before the reduction), so that a 16-bit gradient is not G times too large and
     * fp16 does not overflow at the default scale; 1/G is the same at every world
     * size, so deterministic mode keeps its bits across them. fp32 gradients stay
     * those of the summed loss (bit for bit what the CPU trainer always computed):
     * the division by G happens once, after the reduction. */
    float lavg = t->gtype != DSL_FLOAT32 ? 1.0f / (float)t->G : 1.0f;
    int streamed = streams_optimizer(t), r;
    memset(res, 0, sizeof(*res));

    double c0, c1 = dsl_now();
    dsl_gpuprof_step_begin(t->step + 1); /* GPU timers (gpuprof.h): no-ops on the CPU */
    t->gather_wait = t->pend_wait = t->pend_optim = 0.0;
    t->stop_flag = stop_request;
    if (streamed)
        sink.loss = sink_loss;
    if (t->o.zero_stage == 3) { /* the layers come whole from the shards */
        sink.need = NULL;
        sink.layer = dsl_z3_layer;
        sink.unlayer = dsl_z3_unlayer;
    }
    if (gpu && (r = t->dev->ops->set_zero(t->dev, t->dscal, t->scal_bytes / 4)) < 0)
        return comm_fail(t, r, "step setup", err);
    for (size_t k = 0; k < ga; k++) {
        c0 = c1;
        size_t chunk = k * N + (size_t)t->rank;
        dsl_dataset_gather(train, idx + chunk * mb, mb, t->xb, t->yb);
        struct dsl_model_stats st = {0}; /* a model that knows nothing of deferred leaves it 0 */
        for (size_t j = 0; j < t->nbk; j++)
            if (!t->bk[j].pend) /* the last step's, still running (stream_end) */
                t->bk[j].req = -1;
        t->last_micro = k + 1 == ga;
        if (gpu) { /* the micro step's loss and hits stay on the device */
            sink.dev_stats = (float *)t->dscal + k;
            sink.dev_stats_stride = ga;
        }
        /* stage 3: the model reads no flat buffer (the layers come from the sink) */
        const float *fp = t->o.zero_stage == 3 ? NULL : (const float *)t->params;
        r = m->ops->forward_backward(m, fp, t->xb, t->yb, mb, scale * lavg, &sink, &st);
        if (r < 0)
            return dsl_seterr(err, r, "forward/backward failed at step %llu%s%s",
                              (unsigned long long)t->step + 1, *m->err ? ": " : "", m->err);
        if (t->comm_err)
            return comm_fail(t, t->comm_err, "gradient reduction", err);
        c1 = dsl_now();
        res->t_compute += c1 - c0;
        dsl_gpuprof_mark(t->defer && !t->last_micro ? DSL_PROF_GRAD : DSL_PROF_COMM_WAIT);
        if (t->defer && !t->last_micro) {
            /* deferred: keep a local sum of the micro steps, reduce at the last one */
            r = dsl_mixed_acc_in(t, t->acc[0], t->grads, t->P, k == 0);
            if (r < 0)
                return comm_fail(t, r, "gradient accumulation", err);
        } else if (streamed) {
            /* stream_end waits for each bucket just before its update */
        } else if (t->o.overlap_comm) {
            /* requests complete in issue order: the last bucket's wait covers all */
            if ((r = dsl_comm_wait(t->comm, t->bk[t->nbk - 1].req)) < 0)
                return comm_fail(t, r, "gradient reduction", err);
        } else if (t->o.zero_stage < 2) {
            for (size_t j = 0; j < t->nbk; j++)
                if ((r = reduce_bucket(t, j, 0)) < 0)
                    return comm_fail(t, r, "gradient reduction", err);
        }
        c0 = dsl_now();
        res->t_reduce += c0 - c1;
        dsl_gpuprof_mark(DSL_PROF_GRAD);
        if (ga > 1 && !t->defer && (r = accumulate(t)) < 0)
            return comm_fail(t, r, "gradient accumulation", err);
        c1 = dsl_now();
        res->t_compute += c1 - c0;
        if (!st.deferred && !t->stats_issued) {
            t->stats[k] = (float)st.loss_sum;
            t->stats[ga + k] = (float)st.correct;
            if (gpu && ((r = t->dev->ops->copy(t->dev, (float *)t->dscal + k, &t->stats[k],
                                               sizeof(float), DSL_COPY_H2D)) < 0 ||
                        (r = t->dev->ops->copy(t->dev, (float *)t->dscal + ga + k,
                                               &t->stats[ga + k], sizeof(float),
                                               DSL_COPY_H2D)) < 0))
                return comm_fail(t, r, "loss statistics", err);
        }
    }

    /* forward's waits for the last step's buckets and their updates (stream_end) */
    res->t_compute -= t->gather_wait + t->pend_wait + t->pend_optim;
    res->t_reduce += t->pend_wait;
    res->t_optim += t->pend_optim;
    if (streamed) {
        if ((r = stream_end(t, res, err)) < 0)
            return r;
        t->step++;
        res->bytes_sent = dsl_comm_bytes_sent(t->comm) - sent0;
        res->host_syncs = dsl_hostsync_count() - syncs0;
        dsl_gpuprof_step_end();
        return 0;
    }
    dsl_gpuprof_mark(DSL_PROF_COMM_WAIT);
    if ((r = dsl_trainer_sync(t, err)) < 0)
        return r;
    if ((r = fold_levels(t)) < 0)
        return comm_fail(t, r, "gradient accumulation", err);
    /* loss, accuracy, the stop flag and (loss scaling) the overflow flag, summed over
     * the ranks per micro step */
    size_t nstats = 2 * ga + 1 + (t->o.loss_scaling ? 1 : 0);
    uint32_t lmax = 0; /* loss scaling: this rank's largest |g| (bits), still scaled */
    uint32_t gmax = 0; /* GPU: the agreed max |g| (bits) of the raw gradient */
    uint64_t gsum = 0; /* GPU: its fixed-point sum of squares over every rank */
    dsl_gpuprof_mark(DSL_PROF_SCALARS);
    if (gpu) {
        if ((r = device_scalars(t, stop_request, t->o.grad_clip > 0.0f, nstats, &gmax,
                                &gsum)) < 0)
            return comm_fail(t, r, "loss, overflow and norm reduction", err);
    } else {
        t->stats[2 * ga] = request_word(stop_request);
        if (t->o.loss_scaling) {
            int overflow;
            if ((r = grad_overflow(t, &overflow, &lmax)) < 0)
                return comm_fail(t, r, "gradient overflow check", err);
            t->stats[2 * ga + 1] = overflow ? 1.0f : 0.0f;
        }
        if ((r = dsl_trainer_allreduce_host(t, t->stats, nstats, DSL_FLOAT32, DSL_SUM)) < 0)
            return comm_fail(t, r, "loss reduction", err);
    }
    read_stats(t, ga, res);
    uint64_t applied = t->step - t->ls.skipped;
    float lr = step_lr(t, applied);
    res->lr = lr;
    if (t->o.loss_scaling) {
        char why[DSL_ERR_LEN];
        if ((r = dsl_lossscale_update(&t->ls, t->stats[2 * ga + 1] > 0.0f, why)) < 0)
            return dsl_seterr(err, r, "step %llu: %s", (unsigned long long)t->step + 1, why);
        res->next_scale = t->ls.cur_scale;
        if (r == 1) {
            skip_step(t, res, sent0);
            res->t_small = dsl_now() - c1;
            res->host_syncs = dsl_hostsync_count() - syncs0;
            dsl_gpuprof_step_end();
            return 0;
        }
    }

    /* mean over the global batch and 1/scale in one factor, then clipping with the
     * global norm of the true gradient */
    float inv = (t->o.prescale ? t->o.predivide : 1.0f) / (lavg != 1.0f ? 1.0f : (float)t->G),
          pre = 1.0f;
    if (scale != 1.0f) {
        /* inv / scale is exact for a power-of-two scale unless it is subnormal: then
         * divide by the scale first (exact for a power of two), inv second */
        float f = inv / scale;
        if (f >= FLT_MIN)
            inv = f;
        else
            pre = 1.0f / scale;
    }
    /* Without clipping nothing needs the averaged gradient before the optimizer, which
     * then applies inv itself (gscale): one pass over the gradient fewer, the same
     * bits (g * inv rounded either way). A 16-bit gradient is never scaled in place
     * (it would lose bits or underflow): the optimizer applies the factors in fp32,
     * and the norm is taken on the raw gradient and scaled (trainer_mixed.c). */
    int half = t->gtype != DSL_FLOAT32;
    int fold = (t->o.grad_clip <= 0.0f && pre == 1.0f) || half;
    for (size_t j = 0; j < t->nbk && !fold; j++) {
        if (pre != 1.0f && (r = dscale(t, final_grads(t, j), t->bk[j].plen, pre)) < 0)
            return comm_fail(t, r, "gradient unscaling", err);
        if ((r = dscale(t, final_grads(t, j), t->bk[j].plen, inv)) < 0)
            return comm_fail(t, r, "gradient averaging", err);
    }
    float coef = 1.0f;
    if (t->o.grad_clip > 0.0f) {
        /* with loss scaling the local max is known from the overflow check: multiplying
         * by positive factors and rounding are monotonic, so the largest unscaled
         * element is the largest scaled one put through the same multiplies (host
         * floats round as the device's scale op does); one pass over the gradient
         * saved */
        uint32_t umax;
        if (gpu) {
            /* the norm of the raw gradient, reduced with the step's one wait; scaled
             * like the 16-bit one below */
            res->grad_norm = norm_of(gmax, gsum);
        } else if (t->o.loss_scaling) {
            float mx;
            memcpy(&mx, &lmax, sizeof(mx));
            if (pre != 1.0f && !half)
                mx *= pre;
            if (!half)
                mx *= inv;
            memcpy(&umax, &mx, sizeof(umax));
        }
        if (!gpu &&
            (r = global_norm(t, &res->grad_norm, t->o.loss_scaling ? &umax : NULL)) < 0)
            return comm_fail(t, r, "gradient norm", err);
        if (half || gpu)
            res->grad_norm = (float)((double)res->grad_norm * (double)pre * (double)inv);
        float c = t->o.grad_clip / (res->grad_norm + 1e-6f);
        if (c < 1.0f)
            coef = c;
    }

    c0 = dsl_now();
    res->t_small = c0 - c1;
    /* the optimizer bucket by bucket, in forward order (buckets are listed in
     * backward order); with a shard (stages 1/2) each bucket's all-gather is issued
     * right after its update and left running: the next forward waits for each
     * layer's buckets just before it needs them (sink_need) */
    int gather = (t->o.zero_stage == 1 || t->o.zero_stage == 2) && t->world > 1;
    double t_issue = 0.0;
    dsl_gpuprof_mark(DSL_PROF_OPTIM);
    t->ngather = t->gather_done = 0;
    for (size_t jj = t->nbk; jj-- > 0;) {
        struct dsl_bucket *b = &t->bk[jj];
        /* the last multiply (averaging, or the clipping coefficient) rides along with
         * the optimizer; 16-bit: all of them, in fp32 (pre, when there is one, first) */
        float g1 = !half ? 1.0f : pre != 1.0f ? pre : inv;
        float gs = !half ? (fold ? inv : coef) : pre != 1.0f ? inv * coef : coef;
        if ((r = dsl_mixed_optim(t, jj, final_type(t), final_grads(t, jj), lr, applied + 1, g1,
                                 gs)) < 0)
            return comm_fail(t, r, "optimizer", err);
        if (gather) {
            double i0 = dsl_now();
            void *p = EL(t->params, b->lo);
            if ((r = dsl_comm_iallgather(t->comm, EL(p, b->poff), p, b->len, t->gtype,
                                         &t->gq[t->ngather])) < 0)
                return comm_fail(t, r, "parameter all-gather", err);
            t->gb[t->ngather++] = jj;
            t_issue += dsl_now() - i0;
        }
    }
    for (int i = 0; i < t->nacc; i++)
        t->acc_used[i] = 0;
    /* stage 3: the next forward gathers the updated layers */
    if (t->o.zero_stage == 3 && (r = dsl_z3_invalidate(t)) < 0)
        return comm_fail(t, r, "parameter all-gather", err);
    /* GPU: no wait here: the optimizer's kernels and the all-gathers run on while the
     * host gathers the next batch; a fault shows up at the next step's one wait */
    res->t_optim = dsl_now() - c0 - t_issue;
    /* the all-gather's cost shows up as the next forward's wait; count it here */
    res->t_gather = t_issue + t->gather_wait;
    t->step++;
    res->bytes_sent = dsl_comm_bytes_sent(t->comm) - sent0;
    res->host_syncs = dsl_hostsync_count() - syncs0;
    dsl_gpuprof_step_end();
    return 0;
}

int dsl_trainer_evaluate(struct dsl_trainer *t, const struct dsl_dataset *d, double *acc,
                         double *loss, char *err)
{
    return dsl_trainer_evaluate_n(t, d, 0, acc, loss, err);
}

int dsl_trainer_evaluate_n(struct dsl_trainer *t, const struct dsl_dataset *d, size_t limit,
                           double *acc, double *loss, char *err)
{
    struct dsl_model *m = t->model;
    size_t off, len, bs = m->max_batch;
    size_t total = limit && limit < d->n ? limit : d->n;
    int r0 = dsl_trainer_sync(t, err);
    if (r0 < 0)
        return r0;
    dsl_shard_of(total, t->rank, t->world, &off, &len);
    /* a lazy split (token data read from its runs, data.h) is gathered a chunk at a
     * time into scratch; the chunks are the same as over rows, so are the bits */
    float *xs = NULL;
    int32_t *ys = NULL;
    size_t *ix = NULL;
    if (!d->x && len) {
        xs = malloc(bs * d->dim * sizeof(float));
        if (!xs)
            return dsl_seterr(err, -ENOMEM, "evaluation: cannot allocate %zu windows of %zu",
                              bs, d->dim);
        ys = dsl_xcalloc(bs, sizeof(int32_t));
        ix = dsl_xmalloc(bs * sizeof(size_t));
    }
    double correct = 0.0, lsum = 0.0;
    int r = 0;
    for (size_t i = 0; i < len; i += bs) {
        size_t n = len - i < bs ? len - i : bs;
        const float *x = d->x ? d->x + (off + i) * d->dim : xs;
        const int32_t *y = d->x ? d->y + off + i : ys;
        if (!d->x) {
            for (size_t j = 0; j < n; j++)
                ix[j] = off + i + j;
            dsl_dataset_gather(d, ix, n, xs, ys);
        }
        struct dsl_model_stats st = {0}; /* a model that knows nothing of deferred leaves it 0 */
        if (t->o.zero_stage == 3) {
            struct dsl_grad_sink src = {.layer = dsl_z3_layer, .unlayer = dsl_z3_unlayer,
                                        .ctx = t};
            r = m->ops->evaluate_src(m, &src, x, y, n, &st);
            if (r >= 0 && t->comm_err) {
                r = comm_fail(t, t->comm_err, "evaluation's parameter all-gather", err);
                break;
            }
        } else {
            r = m->ops->evaluate(m, (const float *)t->params, x, y, n, &st);
        }
        if (r < 0) {
            dsl_seterr(err, r, "evaluation failed%s%s", *m->err ? ": " : "", m->err);
            break;
        }
        correct += (double)st.correct;
        lsum += st.loss_sum;
        dsl_progress_beat(dsl_progress_self(NULL)); /* a long evaluation is progress too */
    }
    free(xs);
    free(ys);
    free(ix);
    if (r < 0)
        return r;
    float v[2] = {(float)correct, (float)lsum};
    r = dsl_trainer_allreduce_host(t, v, 2, DSL_FLOAT32, DSL_SUM);
    if (r < 0)
        return comm_fail(t, r, "evaluation reduction", err);
    *acc = (double)v[0] / (double)total;
    *loss = (double)v[1] / (double)total;
    return 0;
}
