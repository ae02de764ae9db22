/*
 * Mixed precision for the trainer (trainer.h, trainer_mixed.h): DeepSpeed's fp16/bf16
 * with fp32 master weights, on a device that has the 16-bit ops (device.h: the CUDA
 * device, and the CPU device for dstrain.cpu_half, where the model widens the 16-bit
 * values and computes in fp32), for ZeRO stages 0, 1 and 2.
 *
 * Theory of operation. The model computes with 16-bit parameters (t->params, P
 * elements, identical on every rank) and delivers 16-bit gradients; the trainer's
 * buckets reduce them over the comm as DSL_FLOAT16 / DSL_BFLOAT16 (half the bytes of
 * fp32), accumulate micro steps in fp32 levels (widened, one fp32 addition per micro
 * step, so accumulation adds no 16-bit rounding), and look for inf/NaN in the final
 * pieces (fp16 loss scaling). The model already scaled a 16-bit gradient to the mean
 * over the global batch (trainer.c), so the 16-bit values have DeepSpeed's magnitudes. Nothing ever scales a 16-bit gradient in
 * place (except prescale_gradients, as DeepSpeed): the division by the global batch,
 * 1/loss scale and the clipping coefficient are fp32 multiplies inside the optimizer
 * kernel, after widening, and the global norm is taken on the raw 16-bit values and
 * multiplied afterwards. The optimizer updates this rank's fp32 master piece
 * (t->master: S floats, the whole model at stage 0, indexed like m and v) and writes
 * its 16-bit rounding into the rank's piece of t->params, which stages 1/2 then
 * all-gather as 16-bit elements. Model-state bytes: 16-bit params and gradients, and
 * 4 + 4 x (optimizer vectors) bytes per shard element of fp32 state (master + m + v),
 * the ZeRO paper's accounting (halfprec.h dsl_zero_state_formula).
 *
 * Everything is ordered on the device's stream like the fp32 ops; nothing here waits
 * except through the ops that return values.
 */
#include <string.h>

#include "dslaunch/device/device.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/dtype.h"
#include "trainer_mixed.h"
#include "dslaunch/common/banned.h"

void *dsl_mixed_el(const struct dsl_trainer *t, const void *base, size_t off)
{
    return (char *)(uintptr_t)base + off * t->esz;
}

int dsl_mixed_add(struct dsl_trainer *t, void *dst, const void *src, size_t n)
{
    struct dsl_device *d = t->dev;
    if (t->gtype == DSL_FLOAT32)
        return d->ops->add(d, dst, src, n);
    return d->ops->half_add(d, t->gtype, dst, src, n);
}

int dsl_mixed_scale(struct dsl_trainer *t, void *p, size_t n, float f)
{
    struct dsl_device *d = t->dev;
    if (t->gtype == DSL_FLOAT32)
        return d->ops->scale(d, p, n, f);
    return d->ops->half_scale(d, t->gtype, p, n, f);
}

int dsl_mixed_copy(struct dsl_trainer *t, void *dst, const void *src, size_t n)
{
    return t->dev->ops->copy(t->dev, dst, src, n * t->esz, DSL_COPY_D2D);
}

void *dsl_mixed_acc_el(const struct dsl_trainer *t, const void *base, size_t off)
{
    return (char *)(uintptr_t)base + off * dsl_dtype_size(t->atype);
}

int dsl_mixed_acc_level(struct dsl_trainer *t, void *acc, const void *src, size_t n,
                        int first)
{
    struct dsl_device *d = t->dev;
    if (first)
        return d->ops->copy(d, acc, src, n * dsl_dtype_size(t->atype), DSL_COPY_D2D);
    if (t->atype == DSL_FLOAT32)
        return d->ops->add(d, acc, src, n);
    return d->ops->half_add(d, t->atype, acc, src, n);
}

int dsl_mixed_acc_in(struct dsl_trainer *t, void *acc, const void *g, size_t n, int first)
{
    struct dsl_device *d = t->dev;
    if (t->atype == t->gtype)
        return dsl_mixed_acc_level(t, acc, g, n, first);
    return first ? d->ops->widen(d, t->gtype, acc, g, n)
                 : d->ops->widen_add(d, t->gtype, acc, g, n);
}

int dsl_mixed_acc_out(struct dsl_trainer *t, void *g, const void *acc, size_t n)
{
    struct dsl_device *d = t->dev;
    if (t->atype == t->gtype)
        return dsl_mixed_add(t, g, acc, n);
    return d->ops->half_add_f32(d, t->gtype, g, acc, n);
}

int dsl_mixed_absmax(struct dsl_trainer *t, enum dsl_dtype ty, const void *p, size_t n,
                     uint32_t *out)
{
    struct dsl_device *d = t->dev;
    if (ty == DSL_FLOAT32)
        return d->ops->absmax_bits(d, p, n, out);
    return d->ops->half_absmax_bits(d, ty, p, n, out);
}

int dsl_mixed_sumsq(struct dsl_trainer *t, enum dsl_dtype ty, const void *p, size_t n,
                    double k, uint64_t *out)
{
    struct dsl_device *d = t->dev;
    if (ty == DSL_FLOAT32)
        return d->ops->sumsq_fixed(d, p, n, k, out);
    return d->ops->half_sumsq_fixed(d, ty, p, n, k, out);
}

int dsl_mixed_optim(struct dsl_trainer *t, size_t j, enum dsl_dtype gty, void *g, float lr,
                    uint64_t step, float ga, float gscale)
{
    struct dsl_device *d = t->dev;
    const struct dsl_bucket *b = &t->bk[j];
    void *p = dsl_mixed_el(t, t->params, t->o.zero_stage == 3 ? b->soff : b->lo + b->poff);
    float *m = t->m ? t->m + b->soff : NULL, *v = t->v ? t->v + b->soff : NULL;
    int r;
    if (t->gtype == DSL_FLOAT32)
        return d->ops->optim_step(d, &t->o.optim, lr, step, gscale, p, g, m, v, b->plen);
    if (gty == DSL_FLOAT32) {
        /* an fp32 accumulation level: the fp32 step on the master piece, then round */
        float *mp = t->master + b->soff;
        if ((ga != 1.0f && (r = d->ops->scale(d, g, b->plen, ga)) < 0) ||
            (r = d->ops->optim_step(d, &t->o.optim, lr, step, gscale, mp, g, m, v,
                                    b->plen)) < 0)
            return r;
        return d->ops->to_half(d, t->gtype, p, mp, b->plen);
    }
    return d->ops->half_optim_step(d, &t->o.optim, lr, step, t->gtype, ga, gscale,
                                   t->master + b->soff, p, g, m, v, b->plen);
}

int dsl_mixed_load(struct dsl_trainer *t, const float *full)
{
    struct dsl_device *d = t->dev;
    int r;
    if (t->gtype == DSL_FLOAT32 && t->o.zero_stage < 3)
        return d->ops->copy(d, t->params, full, t->P * sizeof(float), DSL_COPY_D2D);
    for (size_t j = 0; j < t->nbk; j++) {
        const struct dsl_bucket *b = &t->bk[j];
        if ((r = d->ops->copy(d, t->gtype == DSL_FLOAT32 ? (float *)t->params + b->soff
                                                         : t->master + b->soff,
                              full + b->lo + b->poff, b->plen * sizeof(float),
                              DSL_COPY_D2D)) < 0)
            return r;
        /* stage 3: the 16-bit rounding of this rank's piece only */
        if (t->gtype != DSL_FLOAT32 && t->o.zero_stage == 3 &&
            (r = d->ops->to_half(d, t->gtype, dsl_mixed_el(t, t->params, b->soff),
                                 full + b->lo + b->poff, b->plen)) < 0)
            return r;
    }
    if (t->o.zero_stage == 3)
        return 0;
    return d->ops->to_half(d, t->gtype, t->params, full, t->P);
}

int dsl_mixed_setup(struct dsl_trainer *t, char *err)
{
    enum dsl_dtype want = t->o.dtype;
    const struct dsl_device_ops *ops = t->dev->ops;
    t->gtype = DSL_FLOAT32;
    t->esz = sizeof(float);
    if (want != DSL_FLOAT32 && want != DSL_FLOAT16 && want != DSL_BFLOAT16)
        return dsl_seterr(err, DSL_ECONFIG, "unsupported parameter type %d", (int)want);
    if (want != DSL_FLOAT32 && (!ops->to_half || !ops->half_add || !ops->half_scale ||
                                !ops->half_absmax_bits || !ops->half_sumsq_fixed ||
                                !ops->half_optim_step || !ops->widen || !ops->widen_add ||
                                !ops->half_add_f32))
        return dsl_seterr(err, DSL_ENOTSUP, "%s compute is not available on device '%s'",
                          want == DSL_FLOAT16 ? "fp16" : "bf16", t->dev->name);
    if (t->model->dtype != want)
        return dsl_seterr(err, DSL_ECONFIG,
                          "the model computes in %s but the trainer was asked for %s",
                          t->model->dtype == DSL_FLOAT32   ? "fp32"
                          : t->model->dtype == DSL_FLOAT16 ? "fp16"
                                                           : "bf16",
                          want == DSL_FLOAT32 ? "fp32" : want == DSL_FLOAT16 ? "fp16" : "bf16");
    t->gtype = want;
    t->esz = dsl_dtype_size(want);
    return 0;
}

/* halfprec.h: model-state bytes of the ZeRO paper's accounting */
double dsl_zero_state_formula(int stage, size_t P, int N, size_t spp, size_t hsz)
{
    double p = (double)P, n = (double)N, h = (double)hsz;
    /* the optimizer's fp32 vectors per parameter: its state, plus the master copy in
     * mixed precision */
    double opt = 4.0 * (double)spp + (hsz < 4 ? 4.0 : 0.0);
    switch (stage) {
    case 0: return (2.0 * h + opt) * p;
    case 1: return 2.0 * h * p + opt * p / n;
    case 2: return h * p + (h + opt) * p / n;
    default: return (2.0 * h + opt) * p / n;
    }
}
