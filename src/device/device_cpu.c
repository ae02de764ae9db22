/*
 * The CPU device (device.h): model state in host memory and the trainer's buffer loops.
 *
 * Theory of operation. These are the loops trainer.c has always run, moved here
 * unchanged so that CPU results stay bit for bit what they were: elementwise scale and
 * add (no reductions, so the vectorizer changes no result bits; C11 mode keeps
 * -ffp-contract=off), the optimizer of optimizer.c, and the two order-free reductions
 * of the global norm (an integer maximum of bit patterns and a wrapping integer sum).
 * Nothing here can fail except alloc; the device object is one static instance shared
 * by every trainer of the process, and it keeps no state.
 *
 * The optimizer, the one loop that runs over all of the rank's parameters every step,
 * is split over the rank's BLAS threads (cpupool.h) when it was given more than one:
 * contiguous pieces, each element updated by exactly the operations it always was, so
 * the bits do not depend on the thread count. The other loops stay on the calling
 * thread.
 */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/device/cpupool.h"
#include "dslaunch/device/device.h"
#include "dslaunch/common/halfvec.h"
#include "dslaunch/common/banned.h"

static void *cpu_alloc(struct dsl_device *d, size_t bytes)
{
    (void)d;
    return calloc(bytes ? bytes : 1, 1);
}

static void cpu_free(struct dsl_device *d, void *p)
{
    (void)d;
    free(p);
}

static int cpu_copy(struct dsl_device *d, void *dst, const void *src, size_t bytes,
                    enum dsl_copy_dir dir)
{
    (void)d;
    (void)dir;
    if (bytes)
        memcpy(dst, src, bytes);
    return 0;
}

static int cpu_set_zero(struct dsl_device *d, float *p, size_t n)
{
    (void)d;
    if (n)
        memset(p, 0, n * sizeof(float));
    return 0;
}

static int cpu_scale(struct dsl_device *d, float *p, size_t n, float f)
{
    (void)d;
    for (size_t i = 0; i < n; i++)
        p[i] *= f;
    return 0;
}

static int cpu_add(struct dsl_device *d, float *dst, const float *src, size_t n)
{
    (void)d;
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
    return 0;
}

static int cpu_absmax_bits(struct dsl_device *d, const float *g, size_t n, uint32_t *out)
{
    /* max |g| on the bit patterns: for non-negative floats the unsigned order is the
     * numeric one, and NaN sorts above inf, so it sticks (and the loop vectorizes) */
    uint32_t mb = 0;
    (void)d;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &g[i], sizeof(b));
        b &= 0x7fffffffu;
        mb = b > mb ? b : mb;
    }
    *out = mb;
    return 0;
}

static int cpu_sumsq_fixed(struct dsl_device *d, const float *g, size_t n, double k,
                           uint64_t *out)
{
    uint64_t sum = 0;
    (void)d;
    for (size_t i = 0; i < n; i++)
        sum += (uint64_t)(int64_t)((double)g[i] * (double)g[i] * k + 0.5);
    *out = sum;
    return 0;
}

struct optim_job {
    const struct dsl_optim_hparams *h;
    float lr, gscale;
    uint64_t t;
    float *p, *m, *v;
    const float *g;
};

static void optim_piece(void *arg, size_t lo, size_t hi)
{
    const struct optim_job *j = arg;
    dsl_optim_step(j->h, j->lr, j->t, j->gscale, j->p + lo, j->g + lo, j->m ? j->m + lo : NULL,
                   j->v ? j->v + lo : NULL, hi - lo);
}

static int cpu_optim_step(struct dsl_device *d, const struct dsl_optim_hparams *h, float lr,
                          uint64_t t, float gscale, float *p, const float *g, float *m,
                          float *v, size_t len)
{
    (void)d;
    struct optim_job j = {.h = h, .lr = lr, .gscale = gscale, .t = t, .p = p, .m = m, .v = v,
                          .g = g};
    /* chunks of 256 KiB per buffer (whole cache lines): a few per bucket, each long
     * enough to be worth a claim */
    dsl_cpupool_for(len, 1 << 16, optim_piece, &j);
    return 0;
}

/* ---- mixed precision: 16-bit buffers through fp32 blocks on the stack */

#define HBLK 1024 /* floats per block: 4 KiB, well inside L1 */

static void widen(enum dsl_dtype ht, float *dst, const void *src, size_t n)
{
    dsl_hv_widen(ht == DSL_BFLOAT16, dst, src, n);
}

static void narrow(enum dsl_dtype ht, void *dst, const float *src, size_t n)
{
    dsl_hv_narrow(ht == DSL_BFLOAT16, dst, src, n);
}

static uint16_t *hel(void *p, size_t i)
{
    return (uint16_t *)p + i;
}

static const uint16_t *chel(const void *p, size_t i)
{
    return (const uint16_t *)p + i;
}

static int cpu_to_half(struct dsl_device *d, enum dsl_dtype ht, void *dst, const float *src,
                       size_t n)
{
    (void)d;
    narrow(ht, dst, src, n);
    return 0;
}

/* Apply op to the n 16-bit elements at hp in place, HBLK of them at a time widened to
 * float (op gets the block, where it starts and how long it is, and arg). */
static void in_float_blocks(struct dsl_device *d, enum dsl_dtype ht, void *hp, size_t n,
                            void (*op)(struct dsl_device *d, enum dsl_dtype ht, float *a,
                                       size_t i, size_t k, const void *arg),
                            const void *arg)
{
    float a[HBLK];
    for (size_t i = 0; i < n; i += HBLK) {
        size_t k = n - i < HBLK ? n - i : HBLK;
        widen(ht, a, hel(hp, i), k);
        op(d, ht, a, i, k, arg);
        narrow(ht, hel(hp, i), a, k);
    }
}

/* a += the 16-bit src's block at i */
static void add_half_block(struct dsl_device *d, enum dsl_dtype ht, float *a, size_t i, size_t k,
                           const void *src)
{
    float b[HBLK];
    widen(ht, b, chel(src, i), k);
    cpu_add(d, a, b, k);
}

/* a += the float src's block at i */
static void add_f32_block(struct dsl_device *d, enum dsl_dtype ht, float *a, size_t i, size_t k,
                          const void *src)
{
    (void)ht;
    cpu_add(d, a, (const float *)src + i, k);
}

/* a *= *f */
static void scale_block(struct dsl_device *d, enum dsl_dtype ht, float *a, size_t i, size_t k,
                        const void *f)
{
    (void)ht;
    (void)i;
    cpu_scale(d, a, k, *(const float *)f);
}

static int cpu_half_add(struct dsl_device *d, enum dsl_dtype ht, void *dst, const void *src,
                        size_t n)
{
    in_float_blocks(d, ht, dst, n, add_half_block, src);
    return 0;
}

static int cpu_widen(struct dsl_device *d, enum dsl_dtype ht, float *dst, const void *src,
                     size_t n)
{
    (void)d;
    widen(ht, dst, src, n);
    return 0;
}

static int cpu_widen_add(struct dsl_device *d, enum dsl_dtype ht, float *dst, const void *src,
                         size_t n)
{
    for (size_t i = 0; i < n; i += HBLK)
        add_half_block(d, ht, dst + i, i, n - i < HBLK ? n - i : HBLK, src);
    return 0;
}

static int cpu_half_add_f32(struct dsl_device *d, enum dsl_dtype ht, void *dst, const float *src,
                            size_t n)
{
    in_float_blocks(d, ht, dst, n, add_f32_block, src);
    return 0;
}

static int cpu_half_scale(struct dsl_device *d, enum dsl_dtype ht, void *p, size_t n, float f)
{
    in_float_blocks(d, ht, p, n, scale_block, &f);
    return 0;
}

static int cpu_half_absmax_bits(struct dsl_device *d, enum dsl_dtype ht, const void *p,
                                size_t n, uint32_t *out)
{
    float a[HBLK];
    uint32_t mb = 0;
    for (size_t i = 0; i < n; i += HBLK) {
        size_t k = n - i < HBLK ? n - i : HBLK;
        uint32_t b;
        widen(ht, a, chel(p, i), k);
        cpu_absmax_bits(d, a, k, &b);
        mb = b > mb ? b : mb;
    }
    *out = mb;
    return 0;
}

static int cpu_half_sumsq_fixed(struct dsl_device *d, enum dsl_dtype ht, const void *p,
                                size_t n, double k, uint64_t *out)
{
    float a[HBLK];
    uint64_t sum = 0; /* wrapping, so the blocks' order does not matter */
    for (size_t i = 0; i < n; i += HBLK) {
        size_t c = n - i < HBLK ? n - i : HBLK;
        uint64_t s;
        widen(ht, a, chel(p, i), c);
        cpu_sumsq_fixed(d, a, c, k, &s);
        sum += s;
    }
    *out = sum;
    return 0;
}

struct half_optim_job {
    struct optim_job o;
    enum dsl_dtype ht;
    float ga;
    void *hp;
    const void *hg;
};

static void half_optim_piece(void *arg, size_t lo, size_t hi)
{
    const struct half_optim_job *j = arg;
    const struct optim_job *o = &j->o;
    float g[HBLK];
    for (size_t i = lo; i < hi; i += HBLK) {
        size_t k = hi - i < HBLK ? hi - i : HBLK;
        widen(j->ht, g, chel(j->hg, i), k);
        for (size_t e = 0; e < k; e++)
            g[e] *= j->ga;
        dsl_optim_step(o->h, o->lr, o->t, o->gscale, o->p + i, g, o->m ? o->m + i : NULL,
                       o->v ? o->v + i : NULL, k);
        narrow(j->ht, hel(j->hp, i), o->p + i, k);
    }
}

static int cpu_half_optim_step(struct dsl_device *d, const struct dsl_optim_hparams *h,
                               float lr, uint64_t t, enum dsl_dtype ht, float ga, float gscale,
                               float *p, void *hp, const void *g, float *m, float *v, size_t len)
{
    (void)d;
    struct half_optim_job j = {
        .o = {.h = h, .lr = lr, .gscale = gscale, .t = t, .p = p, .m = m, .v = v, .g = NULL},
        .ht = ht, .ga = ga, .hp = hp, .hg = g};
    dsl_cpupool_for(len, 1 << 16, half_optim_piece, &j);
    return 0;
}

static int cpu_synchronize(struct dsl_device *d)
{
    (void)d;
    return 0;
}

static void cpu_release(struct dsl_device *d)
{
    (void)d;
}

static const struct dsl_device_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .set_zero = cpu_set_zero,
    .scale = cpu_scale,
    .add = cpu_add,
    .absmax_bits = cpu_absmax_bits,
    .sumsq_fixed = cpu_sumsq_fixed,
    .optim_step = cpu_optim_step,
    .to_half = cpu_to_half,
    .half_add = cpu_half_add,
    .widen = cpu_widen,
    .widen_add = cpu_widen_add,
    .half_add_f32 = cpu_half_add_f32,
    .half_scale = cpu_half_scale,
    .half_absmax_bits = cpu_half_absmax_bits,
    .half_sumsq_fixed = cpu_half_sumsq_fixed,
    .half_optim_step = cpu_half_optim_step,
    .synchronize = cpu_synchronize,
    .release = cpu_release,
};

static struct dsl_device cpu_device = {
    .ops = &cpu_ops, .name = "cpu", .host_memory = 1, .id = -1,
};

struct dsl_device *dsl_device_cpu(void)
{
    return &cpu_device;
}

void dsl_device_release(struct dsl_device *d)
{
    if (d && d->ops && d->ops->release)
        d->ops->release(d);
}
