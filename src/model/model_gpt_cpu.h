/*
 * What the CPU GPT's two files share (model_gpt.c: forward, the LM head, the ops;
 * model_gpt_backward.c: backward): the model object, the row-parallel job, the
 * vectorised sums, and the product and pool wrappers. Private to src/model.
 */
#ifndef DSL_MODEL_GPT_CPU_H
#define DSL_MODEL_GPT_CPU_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dslaunch/common/halfvec.h"
#include "dslaunch/device/cpugemm.h"
#include "dslaunch/device/cpupool.h"
#include "dslaunch/model/model.h"
#include "model_cpu_scratch.h"
#include "model_gpt_impl.h"

#define LOGIT_BUDGET (16u << 20) /* floats of logits alive at a time, at most */
#define LN_EPS 1e-5f

/*
 * Vectorisation. The per-element loops below are plain C that gcc vectorises (-O3);
 * VEC_CLONES builds each of them twice, for AVX2 and for the portable x86-64 baseline
 * (SSE2), and the loader picks one per machine. Neither clone may change a bit: the
 * flags never contract a * b + c into an FMA (-ffp-contract=off for this file, and
 * the AVX2 clone does not enable FMA), and every sum along a row is written as LANES
 * interleaved partial sums folded in one fixed order (lanes_fold), which a vector of
 * 8, two vectors of 4 or scalar code compute alike. exp is exp8 below rather than
 * libm's expf, whose x86-64 build picks an FMA variant at run time.
 */
#if defined(__x86_64__) && defined(__has_attribute) && !defined(DSL_GPT_NO_CLONES)
#if __has_attribute(target_clones)
#define VEC_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef VEC_CLONES
#define VEC_CLONES
#endif

#define LANES 8

/* the LANES partial sums a[] into one, in a fixed order: halves, then quarters, ... */
static inline float lanes_fold(const float *a)
{
    float h[4], q[2];
    for (size_t l = 0; l < 4; l++)
        h[l] = a[l] + a[l + 4];
    q[0] = h[0] + h[2];
    q[1] = h[1] + h[3];
    return q[0] + q[1];
}

/* sum of x[0..n): element c into partial sum c % LANES, in order, then lanes_fold */
static inline float lanes_sum(const float *x, size_t n)
{
    float a[LANES] = {0};
    size_t c = 0;
    for (; c + LANES <= n; c += LANES)
        for (size_t l = 0; l < LANES; l++)
            a[l] += x[c + l];
    for (size_t l = 0; c < n; c++, l++)
        a[l] += x[c];
    return lanes_fold(a);
}

/* the largest of x[0..n) (n >= 1; exact, so any order) */
static inline float lanes_max(const float *x, size_t n)
{
    float a[LANES];
    for (size_t l = 0; l < LANES; l++)
        a[l] = x[0];
    size_t c = 0;
    for (; c + LANES <= n; c += LANES)
        for (size_t l = 0; l < LANES; l++)
            a[l] = x[c + l] > a[l] ? x[c + l] : a[l];
    for (size_t l = 0; c < n; c++, l++)
        a[l] = x[c] > a[l] ? x[c] : a[l];
    float m = a[0];
    for (size_t l = 1; l < LANES; l++)
        m = a[l] > m ? a[l] : m;
    return m;
}

/* sum of (x[c] - m) (y[c] - m) over c < n, in lanes as lanes_sum */
static inline float lanes_dot(const float *x, const float *y, float m, size_t n)
{
    float a[LANES] = {0};
    size_t c = 0;
    for (; c + LANES <= n; c += LANES)
        for (size_t l = 0; l < LANES; l++)
            a[l] += (x[c + l] - m) * (y[c + l] - m);
    for (size_t l = 0; c < n; c++, l++)
        a[l] += (x[c] - m) * (y[c] - m);
    return lanes_fold(a);
}

/*
 * exp(x) for x <= 0 as softmax needs it (x > 0 is fine too, up to 88): 2^n e^r with n
 * = round(x / ln 2) (by the 1.5 x 2^23 shift, so no rounding call), r = x - n ln 2 in
 * two parts (Cody-Waite), e^r by its degree-6 Taylor polynomial in Horner form
 * (|r| <= 0.35: within 2 ulp of expf), 2^n through the exponent bits. Below -87.3 it
 * gives exp(-87.3) = 1.2e-38 instead of 0 or a denormal; a sum of softmax terms
 * holds a 1 and cannot tell. Mul and add only, so it vectorises and gives the same
 * bits on every machine.
 */
static inline float exp8(float x)
{
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.0f ? 88.0f : x;
    const float shift = 12582912.0f; /* 1.5 x 2^23 */
    float t = x * 1.44269504088896341f + shift;
    float n = t - shift;
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float e = 1.0f / 720.0f;
    e = e * r + 1.0f / 120.0f;
    e = e * r + 1.0f / 24.0f;
    e = e * r + 1.0f / 6.0f;
    e = e * r + 0.5f;
    e = e * r + 1.0f;
    e = e * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof(two_n));
    return e * two_n;
}

struct gpt_block {
    float *ln1, *ln1m, *ln1r, *qkv, *att, *atty, *res2, *ln2, *ln2m, *ln2r, *fch, *fchg, *res3;
};

struct gpt {
    struct dsl_gpt_layout L;
    struct dsl_model *m;
    size_t maxN, R;  /* largest row count; rows per logits chunk */
    int32_t *inp, *tgt, *rowarg;
    float *enc, *lnf, *lnfm, *lnfr, *logits, *rowloss;
    struct gpt_block h[DSL_GPT_MAX_LAYERS];
    float *dres, *dC, *d3C, *d4C, *datt, *dwte, *dwpe, *gsmall, *gsmall2;
    enum dsl_dtype dtype;
    struct dsl_cpu_scratch s; /* 16-bit parameters' fp32 copies, bf16 products */
};

/* ---- helpers ---------------------------------------------------------------------- */

static inline void par(size_t n, void (*fn)(void *, size_t, size_t), void *arg)
{
    size_t th = (size_t)dsl_cpupool_threads();
    size_t chunk = (n + 4 * th - 1) / (4 * th);
    dsl_cpupool_for(n, chunk ? chunk : 1, fn, arg);
}

/* fn over n columns, one block of whole cache lines per thread: for the sums over rows,
 * which stay serial in row order per column, so any cut gives the same bits */
static inline void par_cols(size_t n, void (*fn)(void *, size_t, size_t), void *arg)
{
    size_t th = (size_t)dsl_cpupool_threads();
    size_t chunk = ((n + th - 1) / th + 15) / 16 * 16;
    dsl_cpupool_for(n, chunk, fn, arg);
}

/* a projection's product: fp32 sgemm, or bf16 inputs with spec.gemm_bf16 (cpugemm.h) */
static inline void gemm(const struct gpt *p, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda,
                 const float *b, size_t ldb, float beta, float *c, size_t ldc,
                 const float *bias, int by_rows)
{
    struct dsl_gemm g = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .a = a, .lda = lda,
                         .b = b, .ldb = ldb, .alpha = alpha, .beta = beta, .c = c,
                         .ldc = ldc, .bias = bias, .by_rows = by_rows, .bf16 = p->s.b16};
    dsl_gemm_run(&g);
}

/* one job description for the row-parallel loops below */
struct job {
    struct gpt *p;
    const float *x, *w, *b, *y;
    float *o, *o2, *o3;
    size_t C, T;
    float f;
    int back; /* loss_rows: write dlogits */
};


#define GELU_S 0.7978845608028654f /* sqrt(2 / pi) */

/*
 * tanh as a rational function of x^2 on [-7.905, 7.905] (beyond it tanh is +-1 in
 * float): Eigen's fast float tanh, within a few ulp of tanhf. Mul, add and one divide,
 * no branch and no call, so the GELU loops vectorise; tanhf from libm was 40% of a
 * step. Bits differ from tanhf, so a GPU kernel that is tested against this path uses
 * the same polynomial (dsl_gpt_tanh).
 */
static inline float fast_tanh(float x)
{
    const float c = 7.90531110763549805f;
    x = x > c ? c : x;
    x = x < -c ? -c : x;
    float x2 = x * x;
    float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
    p = x2 * p + -8.60467152213735e-11f;
    p = x2 * p + 5.12229709037114e-08f;
    p = x2 * p + 1.48572235717979e-05f;
    p = x2 * p + 6.37261928875436e-04f;
    p = x2 * p + 4.89352455891786e-03f;
    p = x * p;
    float q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
    q = x2 * q + 2.26843463243900e-03f;
    q = x2 * q + 4.89352518554385e-03f;
    return p / q;
}

/*
 * Causal attention in row tiles of ATT_TILE positions. Row tile [r0, r1) of the scores
 * needs only the keys 0..r1-1 (those after r1 are masked for all its rows), and its
 * output only those values, so each tile is one sgemm over r1 columns instead of T:
 * (1 + 2 + ... + T/ATT_TILE) / (T/ATT_TILE)^2 of the full products, 5/8 at T = 128.
 * In the tile the masked entries right of the diagonal are written as zeros and take
 * part in the products as exact zeros; P right of r1 is never written nor read. The
 * unmasked scores are the same hs-long dot products as before; what moves is the
 * order of the sums over positions in P V and the backward products (OpenBLAS's
 * blocking of a shorter K), so bits differ from the untiled products but not between
 * thread counts or world sizes (the tiles depend on T alone).
 */
#define ATT_TILE 32

/* Layer l's fp32 parameters (model_gpt_layout.c's layers), element 0 at flat offset
 * p->L.lo[l]: at stages 0-2 the place in wp, the fp32 flat parameters the forward
 * widened; at stage 3 (the sink has layer()) the layer whole from the sink, 16-bit
 * ones widened into w32 at its place, held until gpt_unlayer() and with `next` the
 * layer the pass asks for after it (model.h). */
static inline const float *gpt_layer(const struct gpt *p, const float *wp,
                                     const struct dsl_grad_sink *sink, size_t l, int next)
{
    if (!sink || !sink->layer)
        return wp + p->L.lo[l];
    const float *lw = sink->layer(sink->ctx, (int)l, next);
    if (!p->s.w32)
        return lw;
    dsl_hv_widen(p->dtype == DSL_BFLOAT16, p->s.w32 + p->L.lo[l],
                 (const uint16_t *)(const void *)lw, p->L.lo[l + 1] - p->L.lo[l]);
    return p->s.w32 + p->L.lo[l];
}

static inline void gpt_unlayer(const struct dsl_grad_sink *sink, size_t l)
{
    if (sink && sink->layer)
        sink->unlayer(sink->ctx, (int)l);
}

/* tensor ti of layer l, whose parameters start at w (gpt_layer) */
#define GPT_AT(p, w, l, ti) ((w) + ((p)->L.t[ti].off - (p)->L.lo[l]))

/* backward from the head's dC (model_gpt_backward.c): every gradient to the sink; wp
 * as gpt_layer's (NULL at stage 3) */
void dsl_gpt_cpu_backward(struct gpt *p, const float *wp, size_t B,
                          const struct dsl_grad_sink *sink);

#endif
