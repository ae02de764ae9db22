/*
 * Inside the trainer: the gradient and parameter buffers by element type, so that
 * trainer.c runs one code path for fp32 and for mixed precision (trainer.h). Only
 * trainer*.c include this.
 *
 * The "element" of t->params, t->grads, t->gshard and t->staging is t->gtype:
 * DSL_FLOAT32 (4 bytes; the device's fp32 ops, bit for bit what the trainer always
 * ran) or DSL_FLOAT16 / DSL_BFLOAT16 (2 bytes; the device's half_* ops). Offsets and
 * lengths count elements. t->master, t->m and t->v are always fp32; the accumulation
 * levels t->acc hold t->atype: fp32 (micro steps of a 16-bit gradient accumulate in
 * fp32), except for 16-bit gradients in deterministic mode (see trainer.h).
 */
#ifndef DSL_TRAINER_MIXED_H
#define DSL_TRAINER_MIXED_H

#include <stddef.h>
#include <stdint.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/device/device.h"
#include "dslaunch/train/trainer.h"

/** base + off elements */
void *dsl_mixed_el(const struct dsl_trainer *t, const void *base, size_t off);
/** dst[i] += src[i]; p[i] *= f; dst[i] = src[i] (n elements of t->gtype) */
int dsl_mixed_add(struct dsl_trainer *t, void *dst, const void *src, size_t n);
int dsl_mixed_scale(struct dsl_trainer *t, void *p, size_t n, float f);
int dsl_mixed_copy(struct dsl_trainer *t, void *dst, const void *src, size_t n);
/** accumulation level base + off elements of t->atype */
void *dsl_mixed_acc_el(const struct dsl_trainer *t, const void *base, size_t off);
/** acc[i] = g[i] (first) or acc[i] += g[i]: g of t->gtype, acc of t->atype (widened) */
int dsl_mixed_acc_in(struct dsl_trainer *t, void *acc, const void *g, size_t n, int first);
/** acc[i] = src[i] (first) or acc[i] += src[i], both levels of t->atype */
int dsl_mixed_acc_level(struct dsl_trainer *t, void *acc, const void *src, size_t n,
                        int first);
/** g[i] = g[i] + acc[i] (g of t->gtype, rounded once when 16-bit) */
int dsl_mixed_acc_out(struct dsl_trainer *t, void *g, const void *acc, size_t n);
/** absmax_bits / sumsq_fixed (device.h) of the fp32 values of n elements of type ty
 *  (t->gtype, or DSL_FLOAT32 for an accumulation level) */
int dsl_mixed_absmax(struct dsl_trainer *t, enum dsl_dtype ty, const void *p, size_t n,
                     uint32_t *out);
int dsl_mixed_sumsq(struct dsl_trainer *t, enum dsl_dtype ty, const void *p, size_t n,
                    double k, uint64_t *out);
/**
 * The optimizer on this rank's piece of bucket j with final gradient piece g of type
 * gty: fp32 updates params in place with gradient g * gscale (ga must be 1); mixed
 * precision updates the fp32 master piece with (float(g) * ga) * gscale and writes its
 * 16-bit rounding into the piece of t->params that the all-gather then sends. An fp32
 * gradient in mixed precision (an accumulation level) is multiplied by ga in place
 * first (it is fp32: nothing is lost), then the fp32 step, then the rounding.
 */
int dsl_mixed_optim(struct dsl_trainer *t, size_t j, enum dsl_dtype gty, void *g, float lr,
                    uint64_t step, float ga, float gscale);
/** Set the parameters from a full fp32 vector in device memory (P floats): fp32 copies
 *  it into t->params; mixed precision copies this rank's pieces into t->master and
 *  rounds all of it into t->params (so every rank holds the same 16-bit copy). At
 *  stage 3, where t->params is the rank's shard, only this rank's pieces go in (fp32
 *  or their 16-bit rounding); the caller marks the gathered layers stale
 *  (dsl_z3_invalidate). */
int dsl_mixed_load(struct dsl_trainer *t, const float *full);
/** Check that the model, the device and opts agree on the element type; fill t->gtype
 *  and t->esz. 0 or DSL_ECONFIG / DSL_ENOTSUP with err set. */
int dsl_mixed_setup(struct dsl_trainer *t, char *err);
/** A buffer collectives read or write (parameters, gradients, staging buckets, stage
 *  3's windows): on the CPU from the comm, which shares it with same-host peers so that
 *  reductions and gathers need no copies (comm.h dsl_comm_alloc); on a GPU from the
 *  device. NULL when out of memory. Free with dsl_trainer_coll_free (NULL is fine).
 *  Inline: trainer_setup.c and trainer_zero3.c both use them, and call each other. */
static inline void *dsl_trainer_coll_alloc(struct dsl_trainer *t, size_t bytes)
{
    bytes = bytes ? bytes : 1;
    return t->dev->host_memory ? dsl_comm_alloc(t->comm, bytes)
                               : t->dev->ops->alloc(t->dev, bytes);
}

static inline void dsl_trainer_coll_free(struct dsl_trainer *t, void *p)
{
    struct dsl_device *d = t->dev ? t->dev : dsl_device_cpu();
    if (d->host_memory && t->comm)
        dsl_comm_free(t->comm, p);
    else
        d->ops->free(d, p);
}

#endif
