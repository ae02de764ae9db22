/*
 * The GPT of dstrain on the CPU: GPT-2's decoder (token and learned position
 * embeddings, pre-LayerNorm blocks of causal multi-head self-attention and a 4x MLP
 * with tanh GELU, residuals, a final LayerNorm and the LM head tied to the token
 * embedding) with softmax cross-entropy over the vocabulary. karpathy/llm.c's CPU
 * trainer is the model for the arithmetic; the layout (Hugging Face's tensors) is
 * model_gpt_layout.c's.
 *
 * Theory of operation. A sample is context + 1 token ids carried as floats (model.h);
 * the micro batch's B samples make N = B T rows of width C. Forward keeps, per block,
 * what backward needs (both LayerNorm outputs with their means and inverse standard
 * deviations, qkv, the attention probabilities, the attention output, both residual
 * streams, the MLP's pre- and post-GELU activations). The LM head and the loss run in
 * chunks of R rows (R fixed by the vocabulary and N, never by the thread count): a
 * chunk's logits are turned into dlogits in place, give their rows of the gradient of
 * the final LayerNorm's output, and add their part to the token embedding's gradient,
 * which is kept whole in the model's own buffer because the embedding's scatter adds
 * the rest at the very end of backward. So no more than R x V logits exist at a time.
 *
 * Backward walks the tensors in the reverse of the flat order (ln_f, the blocks from
 * the last, per block the MLP's output projection first and ln_1 last, then wpe and
 * wte), handing each finished tensor's segments to the sink. A projection's weight
 * gradient is written straight into the sink's destination, row block by row block;
 * biases, LayerNorm parameters and embeddings are summed into model scratch first.
 *
 * Determinism. Every reduction over rows (bias and LayerNorm parameter gradients, the
 * embedding scatter, the loss) runs in row order for each column (columns cut over the
 * pool, par_cols); everything else is sgemm
 * with shapes fixed by (micro batch, spec, seg_max) cut over the pool by output blocks
 * (cpugemm.h) or independent per-row and per-(sample, head) work, so a micro batch
 * gives the same bits at any thread count, world size or ZeRO stage.
 *
 * Loss: per sample the mean over its T positions (nats per token), summed over the
 * samples in sample order; dlogits = (softmax - onehot) x loss_scale / T.
 *
 * 16-bit parameters (dstrain.cpu_half): as the MLP, widened into an fp32 copy after
 * the sink's need() for each block, gradients computed in fp32 and rounded into the
 * sink's 16-bit destinations.
 *
 * bf16 products (spec.gemm_bf16, dstrain.cpu_gemm "bf16"): every product that goes
 * through gemm() below (the projections, the LM head and their gradients) rounds its
 * inputs to bf16 and sums in fp32 (cpugemm.h); attention's per-head products and
 * everything else stay fp32. Still the same bits at any thread count and world size.
 *
 * Not thread-safe: one model object per thread of computation.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/device/cpugemm.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/halfvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/device/cpupool.h"
#include "dslaunch/model/model.h"
#include "model_gpt_impl.h"
#include "dslaunch/common/banned.h"

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
    float *w32, *g32; /* 16-bit: the widened parameters; one segment in fp32 */
    struct dsl_gemm_bf16 *b16; /* spec.gemm_bf16: the bf16 copies of a product's inputs */
    struct dsl_gemm_carry carry; /* a weight gradient's tile row between two segments */
};

/* ---- helpers ---------------------------------------------------------------------- */

static void par(size_t n, void (*fn)(void *, size_t, size_t), void *arg)
{
    size_t th = (size_t)dsl_cpupool_threads();
    size_t chunk = (n + 4 * th - 1) / (4 * th);
    dsl_cpupool_for(n, chunk ? chunk : 1, fn, arg);
}

/* fn over n columns, one block of whole cache lines per thread: for the sums over rows,
 * which stay serial in row order per column, so any cut gives the same bits */
static void par_cols(size_t n, void (*fn)(void *, size_t, size_t), void *arg)
{
    size_t th = (size_t)dsl_cpupool_threads();
    size_t chunk = ((n + th - 1) / th + 15) / 16 * 16;
    dsl_cpupool_for(n, chunk, fn, arg);
}

/* a projection's product: fp32 sgemm, or bf16 inputs with spec.gemm_bf16 (cpugemm.h) */
static void gemm(const struct gpt *p, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda,
                 const float *b, size_t ldb, float beta, float *c, size_t ldc,
                 const float *bias, int by_rows)
{
    struct dsl_gemm g = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .a = a, .lda = lda,
                         .b = b, .ldb = ldb, .alpha = alpha, .beta = beta, .c = c,
                         .ldc = ldc, .bias = bias, .by_rows = by_rows, .bf16 = p->b16};
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

/* ---- forward pieces --------------------------------------------------------------- */

VEC_CLONES static void encoder_rows(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    size_t C = j->C;
    for (size_t i = lo; i < hi; i++) {
        const float *te = j->w + (size_t)j->p->inp[i] * C, *pe = j->b + (i % j->T) * C;
        float *o = j->o + i * C;
        for (size_t c = 0; c < C; c++)
            o[c] = te[c] + pe[c];
    }
}

/* o = LayerNorm(x) * w + b per row; o2 = mean, o3 = 1 / std */
VEC_CLONES static void layernorm_rows(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    size_t C = j->C;
    for (size_t i = lo; i < hi; i++) {
        const float *x = j->x + i * C;
        float *o = j->o + i * C;
        float m = lanes_sum(x, C) / (float)C;
        float v = lanes_dot(x, x, m, C) / (float)C;
        float s = 1.0f / sqrtf(v + LN_EPS);
        for (size_t c = 0; c < C; c++)
            o[c] = (x[c] - m) * s * j->w[c] + j->b[c];
        j->o2[i] = m;
        j->o3[i] = s;
    }
}

static void layernorm(struct gpt *p, const float *x, const float *w, const float *b, float *o,
                      float *mean, float *rstd, size_t N)
{
    struct job j = {.p = p, .x = x, .w = w, .b = b, .o = o, .o2 = mean, .o3 = rstd,
                    .C = p->L.C};
    par(N, layernorm_rows, &j);
}

/* o = x + b per row (the residual and the bias, before a projection adds to it) */
VEC_CLONES static void resbias_rows(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    size_t C = j->C;
    for (size_t i = lo; i < hi; i++) {
        const float *x = j->x + i * C;
        float *o = j->o + i * C;
        for (size_t c = 0; c < C; c++)
            o[c] = x[c] + j->b[c];
    }
}

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

float dsl_gpt_tanh(float x)
{
    return fast_tanh(x);
}

VEC_CLONES static void gelu_range(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    for (size_t i = lo; i < hi; i++) {
        float x = j->x[i];
        float u = GELU_S * (x + 0.044715f * x * x * x);
        j->o[i] = 0.5f * x * (1.0f + fast_tanh(u));
    }
}

/* o (the gradient of gelu's output, in place) *= gelu'(x) */
VEC_CLONES static void gelu_back_range(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    for (size_t i = lo; i < hi; i++) {
        float x = j->x[i];
        float u = GELU_S * (x + 0.044715f * x * x * x);
        float th = fast_tanh(u);
        float sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) + x * 0.5f * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
        j->o[i] *= g;
    }
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

static inline void softmax_causal_row(float *r, size_t t, size_t n)
{
    float mx = lanes_max(r, t + 1);
    for (size_t u = 0; u <= t; u++)
        r[u] = exp8(r[u] - mx);
    float inv = 1.0f / lanes_sum(r, t + 1);
    for (size_t u = 0; u <= t; u++)
        r[u] *= inv;
    for (size_t u = t + 1; u < n; u++)
        r[u] = 0.0f;
}

/* causal self-attention of one (sample, head) pair per index: qkv -> att, atty */
VEC_CLONES static void attn_fwd_pairs(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    const struct dsl_gpt_layout *L = &j->p->L;
    size_t T = L->T, C = L->C, NH = L->NH, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    int iT = (int)T, ihs = (int)hs, i3C = (int)(3 * C), iC = (int)C;
    for (size_t bh = lo; bh < hi; bh++) {
        size_t b = bh / NH, h = bh % NH;
        const float *q = j->x + b * T * 3 * C + h * hs, *k = q + C, *v = q + 2 * C;
        float *P = j->o + bh * T * T, *y = j->o2 + b * T * C + h * hs;
        for (size_t r0 = 0; r0 < T; r0 += ATT_TILE) {
            size_t r1 = r0 + ATT_TILE < T ? r0 + ATT_TILE : T;
            int m = (int)(r1 - r0), n = (int)r1;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, ihs, scale,
                        q + r0 * 3 * C, i3C, k, i3C, 0.0f, P + r0 * T, iT);
            for (size_t t = r0; t < r1; t++)
                softmax_causal_row(P + t * T, t, r1);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, ihs, n, 1.0f, P + r0 * T,
                        iT, v, i3C, 0.0f, y + r0 * C, iC);
        }
    }
}

/* forward of the blocks and ln_f over N rows; returns the fp32 parameters it used */
static const float *gpt_forward(struct gpt *p, const float *params, size_t B,
                                const struct dsl_grad_sink *sink)
{
    const struct dsl_gpt_layout *L = &p->L;
    size_t T = L->T, C = L->C, N = B * T;
    const float *wp = p->w32 ? p->w32 : params;
    /* need() and (16-bit) widening, group by group: the embeddings, each block, ln_f */
    size_t groups[DSL_GPT_MAX_LAYERS + 2][2];
    size_t ng = 0;
    groups[ng][0] = L->t[GPT_WTE].off;
    groups[ng++][1] = L->t[GPT_BLOCK(0, 0)].off;
    for (size_t l = 0; l < L->L; l++) {
        groups[ng][0] = L->t[GPT_BLOCK(l, 0)].off;
        groups[ng++][1] = L->t[GPT_BLOCK(l + 1, 0)].off; /* ln_f's offset after the last */
    }
    groups[ng][0] = L->t[GPT_LNF_W(L->L)].off;
    groups[ng++][1] = p->m->nparams;
    size_t gi = 0;
#define NEED()                                                                             \
    do {                                                                                   \
        size_t o_ = groups[gi][0], n_ = groups[gi][1] - o_;                                \
        if (sink && sink->need)                                                            \
            sink->need(sink->ctx, o_, n_);                                                 \
        if (p->w32)                                                                        \
            dsl_hv_widen(p->dtype == DSL_BFLOAT16, p->w32 + o_,                            \
                         (const uint16_t *)(const void *)params + o_, n_);                 \
        gi++;                                                                              \
    } while (0)

    NEED();
    struct job j = {.p = p, .w = wp + L->t[GPT_WTE].off, .b = wp + L->t[GPT_WPE].off,
                    .o = p->enc, .C = C, .T = T};
    par(N, encoder_rows, &j);
    const float *res = p->enc;
    for (size_t l = 0; l < L->L; l++) {
        NEED();
        struct gpt_block *h = &p->h[l];
#define W(k) (wp + L->t[GPT_BLOCK(l, k)].off)
        layernorm(p, res, W(GPT_LN1_W), W(GPT_LN1_B), h->ln1, h->ln1m, h->ln1r, N);
        gemm(p, CblasNoTrans, CblasNoTrans, N, 3 * C, C, 1.0f, h->ln1, C, W(GPT_QKV_W), 3 * C,
             1.0f, h->qkv, 3 * C, W(GPT_QKV_B), 0);
        struct job ja = {.p = p, .x = h->qkv, .o = h->att, .o2 = h->atty};
        dsl_cpupool_for(B * L->NH, 1, attn_fwd_pairs, &ja);
        struct job jr = {.p = p, .x = res, .b = W(GPT_PROJ_B), .o = h->res2, .C = C};
        par(N, resbias_rows, &jr);
        gemm(p, CblasNoTrans, CblasNoTrans, N, C, C, 1.0f, h->atty, C, W(GPT_PROJ_W), C, 1.0f,
             h->res2, C, NULL, 0);
        layernorm(p, h->res2, W(GPT_LN2_W), W(GPT_LN2_B), h->ln2, h->ln2m, h->ln2r, N);
        gemm(p, CblasNoTrans, CblasNoTrans, N, 4 * C, C, 1.0f, h->ln2, C, W(GPT_FC_W), 4 * C,
             1.0f, h->fch, 4 * C, W(GPT_FC_B), 0);
        struct job jg = {.p = p, .x = h->fch, .o = h->fchg};
        par(N * 4 * C, gelu_range, &jg);
        struct job jr2 = {.p = p, .x = h->res2, .b = W(GPT_FCPROJ_B), .o = h->res3, .C = C};
        par(N, resbias_rows, &jr2);
        gemm(p, CblasNoTrans, CblasNoTrans, N, C, 4 * C, 1.0f, h->fchg, 4 * C, W(GPT_FCPROJ_W), C,
             1.0f, h->res3, C, NULL, 0);
#undef W
        res = h->res3;
    }
    NEED();
#undef NEED
    layernorm(p, res, wp + L->t[GPT_LNF_W(L->L)].off, wp + L->t[GPT_LNF_B(L->L)].off, p->lnf,
              p->lnfm, p->lnfr, N);
    return wp;
}

/* ---- the LM head and the loss ----------------------------------------------------- */

/* per row of a logits chunk: loss, argmax and (back) dlogits = (softmax - onehot) f */
VEC_CLONES static void loss_rows(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    struct gpt *p = j->p;
    size_t V = p->L.V, r0 = j->T; /* T carries the chunk's first row */
    for (size_t i = lo; i < hi; i++) {
        float *z = p->logits + i * V;
        size_t am = 0;
        for (size_t k = 1; k < V; k++)
            if (z[k] > z[am])
                am = k;
        float mx = z[am];
        size_t y = (size_t)p->tgt[r0 + i];
        float zy = z[y];
        for (size_t k = 0; k < V; k++)
            z[k] = exp8(z[k] - mx);
        float sum = lanes_sum(z, V);
        p->rowloss[r0 + i] = mx + logf(sum) - zy;
        p->rowarg[r0 + i] = (int32_t)am;
        if (j->back) {
            float inv = 1.0f / sum;
            for (size_t k = 0; k < V; k++)
                z[k] = (z[k] * inv - (k == y ? 1.0f : 0.0f)) * j->f;
        }
    }
}

/* logits, loss and (backward) dC = d lnf and dwte (the head's part), chunk by chunk */
static void gpt_head(struct gpt *p, const float *wp, size_t B, int backward, float scale)
{
    const struct dsl_gpt_layout *L = &p->L;
    size_t C = L->C, V = L->V, N = B * L->T;
    const float *wte = wp + L->t[GPT_WTE].off;
    for (size_t r0 = 0; r0 < N; r0 += p->R) {
        size_t rows = N - r0 < p->R ? N - r0 : p->R;
        gemm(p, CblasNoTrans, CblasTrans, rows, V, C, 1.0f, p->lnf + r0 * C, C, wte, C, 0.0f,
             p->logits, V, NULL, 0);
        struct job j = {.p = p, .T = r0, .f = scale / (float)L->T, .back = backward};
        par(rows, loss_rows, &j);
        if (!backward)
            continue;
        gemm(p, CblasNoTrans, CblasNoTrans, rows, C, V, 1.0f, p->logits, V, wte, C, 0.0f,
             p->dC + r0 * C, C, NULL, 0);
        gemm(p, CblasTrans, CblasNoTrans, V, C, rows, 1.0f, p->logits, V, p->lnf + r0 * C, C,
             r0 ? 1.0f : 0.0f, p->dwte, C, NULL, 1);
    }
}

static void gpt_stats(const struct gpt *p, size_t B, struct dsl_model_stats *st)
{
    size_t T = p->L.T;
    st->loss_sum = 0.0;
    st->correct = 0;
    for (size_t b = 0; b < B; b++) {
        double s = 0.0;
        for (size_t t = 0; t < T; t++)
            s += (double)p->rowloss[b * T + t];
        st->loss_sum += s / (double)T;
        st->correct += p->rowarg[b * T + T - 1] == p->tgt[b * T + T - 1];
    }
}

/* ---- backward pieces -------------------------------------------------------------- */

/* the token ids of B samples into inp/tgt; DSL_EDATA for anything not an id < V */
static int gpt_tokens(struct gpt *p, const float *x, size_t B)
{
    size_t T = p->L.T;
    float V = (float)p->L.V;
    if (B > p->m->max_batch)
        return DSL_EDATA;
    for (size_t b = 0; b < B; b++) {
        const float *s = x + b * (T + 1);
        for (size_t t = 0; t <= T; t++)
            if (!(s[t] >= 0.0f && s[t] < V) || s[t] != floorf(s[t]))
                return DSL_EDATA;
        for (size_t t = 0; t < T; t++) {
            p->inp[b * T + t] = (int32_t)s[t];
            p->tgt[b * T + t] = (int32_t)s[t + 1];
        }
    }
    return 0;
}

/* column sums of dY [N, n] in row order */
struct colsum_job {
    float *db;
    const float *dy;
    size_t N, n;
};

VEC_CLONES static void colsum_cols(void *arg, size_t lo, size_t hi)
{
    const struct colsum_job *j = arg;
    float *db = j->db;
    memset(db + lo, 0, (hi - lo) * sizeof(float));
    for (size_t i = 0; i < j->N; i++) {
        const float *r = j->dy + i * j->n;
        for (size_t c = lo; c < hi; c++)
            db[c] += r[c];
    }
}

static void colsum(float *db, const float *dy, size_t N, size_t n)
{
    struct colsum_job j = {db, dy, N, n};
    par_cols(n, colsum_cols, &j);
}

/* dres (+)= the LayerNorm input's gradient per row */
VEC_CLONES static void ln_back_rows(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    size_t C = j->C;
    for (size_t i = lo; i < hi; i++) {
        const float *x = j->x + i * C, *dy = j->y + i * C;
        float m = j->b[i], s = j->o2[i];
        float la[LANES] = {0}, lb[LANES] = {0};
        size_t c0 = 0;
        for (; c0 + LANES <= C; c0 += LANES)
            for (size_t l = 0; l < LANES; l++) {
                size_t c = c0 + l;
                float dn = j->w[c] * dy[c];
                la[l] += dn;
                lb[l] += dn * (x[c] - m) * s;
            }
        for (size_t l = 0; c0 < C; c0++, l++) {
            float dn = j->w[c0] * dy[c0];
            la[l] += dn;
            lb[l] += dn * (x[c0] - m) * s;
        }
        float a = lanes_fold(la) / (float)C, bb = lanes_fold(lb) / (float)C;
        float *dx = j->o + i * C;
        for (size_t c = 0; c < C; c++) {
            float dn = j->w[c] * dy[c];
            dx[c] += (dn - a - (x[c] - m) * s * bb) * s;
        }
    }
}

/* LayerNorm's parameter gradients: per column a sum over the rows in row order (x: the
 * input, w: dy, b: mean, y: rstd, o: gw, o2: gb), columns lo..hi */
VEC_CLONES static void ln_params_cols(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    size_t C = j->C;
    float *gw = j->o, *gb = j->o2;
    memset(gw + lo, 0, (hi - lo) * sizeof(float));
    memset(gb + lo, 0, (hi - lo) * sizeof(float));
    for (size_t i = 0; i < j->T; i++) {
        const float *xi = j->x + i * C, *di = j->w + i * C;
        float m = j->b[i], s = j->y[i];
        for (size_t c = lo; c < hi; c++) {
            gw[c] += (xi[c] - m) * s * di[c];
            gb[c] += di[c];
        }
    }
}

/* LayerNorm backward: gw, gb (by columns, each in row order) and dx += (by rows) */
static void ln_backward(struct gpt *p, float *dx, float *gw, float *gb, const float *dy,
                        const float *x, const float *w, const float *mean, const float *rstd,
                        size_t N)
{
    size_t C = p->L.C;
    struct job jp = {.p = p, .x = x, .w = dy, .b = mean, .y = rstd, .o = gw, .o2 = gb, .C = C,
                     .T = N};
    par_cols(C, ln_params_cols, &jp);
    struct job j = {.p = p, .x = x, .y = dy, .w = w, .b = mean, .o = dx, .o2 = (float *)(uintptr_t)rstd, .C = C};
    par(N, ln_back_rows, &j);
}

/* attention backward of one (sample, head) pair per index: datty -> dqkv, in the
 * forward's row tiles; dK and dV by column tiles [u0, u1), whose rows t >= u0 are the
 * only ones with unmasked entries there */
VEC_CLONES static void attn_bwd_pairs(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    const struct gpt *p = j->p;
    size_t T = p->L.T, C = p->L.C, NH = p->L.NH, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    int iT = (int)T, ihs = (int)hs, i3C = (int)(3 * C), iC = (int)C;
    for (size_t bh = lo; bh < hi; bh++) {
        size_t b = bh / NH, h = bh % NH;
        const float *q = j->x + b * T * 3 * C + h * hs, *k = q + C, *v = q + 2 * C;
        const float *P = j->w + bh * T * T, *dy = j->y + b * T * C + h * hs;
        float *dP = j->o2 + bh * T * T;
        float *dq = j->o + b * T * 3 * C + h * hs, *dk = dq + C, *dv = dq + 2 * C;
        for (size_t r0 = 0; r0 < T; r0 += ATT_TILE) {
            size_t r1 = r0 + ATT_TILE < T ? r0 + ATT_TILE : T;
            int m = (int)(r1 - r0), n = (int)r1, kk = (int)(T - r0);
            /* dV rows r0..r1 from P's columns r0..r1 over rows r0..T */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, ihs, kk, 1.0f,
                        P + r0 * T + r0, iT, dy + r0 * C, iC, 0.0f, dv + r0 * 3 * C, i3C);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, ihs, 1.0f, dy + r0 * C,
                        iC, v, i3C, 0.0f, dP + r0 * T, iT);
            for (size_t t = r0; t < r1; t++) {
                const float *pr = P + t * T;
                float *dr = dP + t * T, dot = lanes_dot(pr, dr, 0.0f, t + 1);
                for (size_t u = 0; u <= t; u++)
                    dr[u] = pr[u] * (dr[u] - dot);
                for (size_t u = t + 1; u < r1; u++)
                    dr[u] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, ihs, n, scale,
                        dP + r0 * T, iT, k, i3C, 0.0f, dq + r0 * 3 * C, i3C);
        }
        /* dK needs every row tile's dS first */
        for (size_t r0 = 0; r0 < T; r0 += ATT_TILE) {
            size_t r1 = r0 + ATT_TILE < T ? r0 + ATT_TILE : T;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(r1 - r0), ihs,
                        (int)(T - r0), scale, dP + r0 * T + r0, iT, q + r0 * 3 * C, i3C, 0.0f,
                        dk + r0 * 3 * C, i3C);
        }
    }
}

/* hand tensor ti's gradient, whole in src, to the sink segment by segment */
static void deliver(struct gpt *p, const struct dsl_grad_sink *sink, size_t ti,
                    const float *src)
{
    const struct dsl_gpt_tensor *t = &p->L.t[ti];
    for (size_t s = t->seg0; s < t->seg0 + t->nseg; s++) {
        const struct dsl_model_seg *sg = &p->m->segs[s];
        float *dst = sink->dest(sink->ctx, s);
        const float *from = src + (sg->off - t->off);
        if (p->g32)
            dsl_hv_narrow(p->dtype == DSL_BFLOAT16, (uint16_t *)(void *)dst, from, sg->len);
        else
            memcpy(dst, from, sg->len * sizeof(float));
        sink->done(sink->ctx, s);
    }
}

/* a projection's weight gradient A^T dY ([rows, cols]) straight into the sink, row
 * block by row block (A: N x rows activations, dY: N x cols) */
static void deliver_weight(struct gpt *p, const struct dsl_grad_sink *sink, size_t ti,
                           const float *A, const float *dY, size_t N)
{
    const struct dsl_gpt_tensor *t = &p->L.t[ti];
    dsl_gemm_carry_reset(&p->carry);
    for (size_t s = t->seg0; s < t->seg0 + t->nseg; s++) {
        const struct dsl_model_seg *sg = &p->m->segs[s];
        size_t r0 = (sg->off - t->off) / t->cols, nr = sg->len / t->cols;
        float *dst = sink->dest(sink->ctx, s);
        float *c = p->g32 ? p->g32 : dst;
        /* rows r0.. of the whole gradient's product (cpugemm.h): the same bits
         * whatever the segment size */
        struct dsl_gemm g = {.ta = CblasTrans, .tb = CblasNoTrans, .m = t->rows,
                             .n = t->cols, .k = N, .a = A, .lda = t->rows, .b = dY,
                             .ldb = t->cols, .alpha = 1.0f, .beta = 0.0f, .by_rows = 1,
                             .bf16 = p->b16};
        dsl_gemm_rows(&g, r0, nr, c, t->cols, &p->carry);
        if (p->g32)
            dsl_hv_narrow(p->dtype == DSL_BFLOAT16, (uint16_t *)(void *)dst, c, sg->len);
        sink->done(sink->ctx, s);
    }
}

/* the embeddings' gradients, columns lo..hi: dres's rows (j->T of them) into their
 * position's and token's rows of dwpe (zeroed first) and dwte (holding the head's
 * part), in row order per column */
VEC_CLONES static void embed_back_cols(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    struct gpt *p = j->p;
    size_t C = j->C, T = p->L.T;
    for (size_t t = 0; t < T; t++)
        memset(p->dwpe + t * C + lo, 0, (hi - lo) * sizeof(float));
    for (size_t i = 0; i < j->T; i++) {
        const float *d = p->dres + i * C;
        float *pe = p->dwpe + (i % T) * C, *te = p->dwte + (size_t)p->inp[i] * C;
        for (size_t c = lo; c < hi; c++) {
            pe[c] += d[c];
            te[c] += d[c];
        }
    }
}

static void gpt_backward(struct gpt *p, const float *wp, size_t B,
                         const struct dsl_grad_sink *sink)
{
    const struct dsl_gpt_layout *L = &p->L;
    size_t T = L->T, C = L->C, N = B * T, nL = L->L;
    float *gw = p->gsmall, *gb = p->gsmall2;
    /* ln_f: dC holds d lnf from the head */
    memset(p->dres, 0, N * C * sizeof(float));
    const float *last = nL ? p->h[nL - 1].res3 : p->enc;
    ln_backward(p, p->dres, gw, gb, p->dC, last, wp + L->t[GPT_LNF_W(nL)].off, p->lnfm,
                p->lnfr, N);
    deliver(p, sink, GPT_LNF_B(nL), gb);
    deliver(p, sink, GPT_LNF_W(nL), gw);
    for (size_t l = nL; l-- > 0;) {
        struct gpt_block *h = &p->h[l];
        const float *res = l ? p->h[l - 1].res3 : p->enc;
#define W(k) (wp + L->t[GPT_BLOCK(l, k)].off)
#define TI(k) GPT_BLOCK(l, k)
        /* the MLP's output projection: dres is the gradient of res3 */
        colsum(gb, p->dres, N, C);
        deliver(p, sink, TI(GPT_FCPROJ_B), gb);
        deliver_weight(p, sink, TI(GPT_FCPROJ_W), h->fchg, p->dres, N);
        gemm(p, CblasNoTrans, CblasTrans, N, 4 * C, C, 1.0f, p->dres, C, W(GPT_FCPROJ_W), C, 0.0f,
             p->d4C, 4 * C, NULL, 0);
        struct job jg = {.p = p, .x = h->fch, .o = p->d4C};
        par(N * 4 * C, gelu_back_range, &jg);
        /* the MLP's input projection */
        colsum(gb, p->d4C, N, 4 * C);
        deliver(p, sink, TI(GPT_FC_B), gb);
        deliver_weight(p, sink, TI(GPT_FC_W), h->ln2, p->d4C, N);
        gemm(p, CblasNoTrans, CblasTrans, N, C, 4 * C, 1.0f, p->d4C, 4 * C, W(GPT_FC_W), 4 * C,
             0.0f, p->dC, C, NULL, 0);
        ln_backward(p, p->dres, gw, gb, p->dC, h->res2, W(GPT_LN2_W), h->ln2m, h->ln2r, N);
        deliver(p, sink, TI(GPT_LN2_B), gb);
        deliver(p, sink, TI(GPT_LN2_W), gw);
        /* attention's output projection: dres is now the gradient of res2 */
        colsum(gb, p->dres, N, C);
        deliver(p, sink, TI(GPT_PROJ_B), gb);
        deliver_weight(p, sink, TI(GPT_PROJ_W), h->atty, p->dres, N);
        gemm(p, CblasNoTrans, CblasTrans, N, C, C, 1.0f, p->dres, C, W(GPT_PROJ_W), C, 0.0f, p->dC,
             C, NULL, 0);
        struct job ja = {.p = p, .x = h->qkv, .w = h->att, .y = p->dC, .o = p->d3C,
                         .o2 = p->datt};
        dsl_cpupool_for(B * L->NH, 1, attn_bwd_pairs, &ja);
        colsum(gb, p->d3C, N, 3 * C);
        deliver(p, sink, TI(GPT_QKV_B), gb);
        deliver_weight(p, sink, TI(GPT_QKV_W), h->ln1, p->d3C, N);
        gemm(p, CblasNoTrans, CblasTrans, N, C, 3 * C, 1.0f, p->d3C, 3 * C, W(GPT_QKV_W), 3 * C,
             0.0f, p->dC, C, NULL, 0);
        ln_backward(p, p->dres, gw, gb, p->dC, res, W(GPT_LN1_W), h->ln1m, h->ln1r, N);
        deliver(p, sink, TI(GPT_LN1_B), gb);
        deliver(p, sink, TI(GPT_LN1_W), gw);
#undef W
#undef TI
    }
    /* the embeddings: position rows summed over the samples, token rows scattered into
     * the head's part of wte's gradient, both in row order */
    struct job je = {.p = p, .C = C, .T = N};
    par_cols(C, embed_back_cols, &je);
    deliver(p, sink, GPT_WPE, p->dwpe);
    deliver(p, sink, GPT_WTE, p->dwte);
}

/* ---- sampling --------------------------------------------------------------------- */

int dsl_gpt_next_logits(struct dsl_model *m, const float *params, const int32_t *tokens,
                        size_t n, float *logits)
{
    struct gpt *p = m->impl;
    const struct dsl_gpt_layout *L = &p->L;
    size_t T = L->T, C = L->C;
    if (!n || n > T)
        return dsl_seterr(m->err, DSL_EDATA, "gpt: %zu tokens of context, 1..%zu allowed", n,
                          T);
    /* one sample, the positions after n padded with token 0: attention is causal, so
     * they change nothing at position n - 1 */
    float *x = dsl_xcalloc(T + 1, sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)tokens[i];
    int r = gpt_tokens(p, x, 1);
    free(x);
    if (r < 0)
        return dsl_seterr(m->err, r, "gpt: a token id outside 0..%zu", L->V - 1);
    const float *wp = gpt_forward(p, params, 1, NULL);
    gemm(p, CblasNoTrans, CblasTrans, 1, L->V, C, 1.0f, p->lnf + (n - 1) * C, C,
         wp + L->t[GPT_WTE].off, C, 0.0f, logits, L->V, NULL, 0);
    return 0;
}

/* ---- the ops table ---------------------------------------------------------------- */

static int gpt_init_params(struct dsl_model *m, float *params, uint64_t seed)
{
    struct gpt *p = m->impl;
    dsl_gpt_layout_init(&p->L, params, seed);
    return 0;
}

static int gpt_forward_backward(struct dsl_model *m, const float *params, const float *x,
                                const int32_t *y, size_t n, float loss_scale,
                                const struct dsl_grad_sink *sink, struct dsl_model_stats *st)
{
    struct gpt *p = m->impl;
    (void)y;
    int r = gpt_tokens(p, x, n);
    if (r < 0)
        return dsl_seterr(m->err, r, "gpt: a sample holds a token id outside 0..%zu or the "
                          "batch exceeds %zu", p->L.V - 1, m->max_batch);
    const float *wp = gpt_forward(p, params, n, sink);
    gpt_head(p, wp, n, 1, loss_scale);
    gpt_stats(p, n, st);
    gpt_backward(p, wp, n, sink);
    return 0;
}

static int gpt_evaluate(struct dsl_model *m, const float *params, const float *x,
                        const int32_t *y, size_t n, struct dsl_model_stats *st)
{
    struct gpt *p = m->impl;
    (void)y;
    int r = gpt_tokens(p, x, n);
    if (r < 0)
        return dsl_seterr(m->err, r, "gpt: a sample holds a token id outside 0..%zu or the "
                          "batch exceeds %zu", p->L.V - 1, m->max_batch);
    const float *wp = gpt_forward(p, params, n, NULL);
    gpt_head(p, wp, n, 0, 1.0f);
    gpt_stats(p, n, st);
    return 0;
}

static void gpt_release(struct dsl_model *m)
{
    struct gpt *p = m->impl;
    if (!p)
        return;
    free(p->inp);
    free(p->tgt);
    free(p->rowarg);
    free(p->enc); /* one allocation holds every float buffer */
    free(p->w32);
    free(p->g32);
    dsl_gemm_bf16_free(p->b16);
    dsl_gemm_carry_release(&p->carry);
    free(p);
    m->impl = NULL;
}

static const struct dsl_model_ops gpt_ops = {
    .name = "gpt",
    .init_params = gpt_init_params,
    .forward_backward = gpt_forward_backward,
    .evaluate = gpt_evaluate,
    .release = gpt_release,
};

int dsl_gpt_create(struct dsl_model *m, const struct dsl_model_spec *spec, char *err)
{
    struct dsl_gpt_layout lay;
    int r = dsl_gpt_layout_build(&lay, m, spec, err);
    if (r < 0)
        return r;
    struct gpt *p = dsl_xcalloc(1, sizeof(*p));
    p->L = lay;
    p->m = m;
    p->b16 = spec->gemm_bf16 ? dsl_gemm_bf16_new() : NULL;
    m->ops = &gpt_ops;
    m->impl = p;
    m->dtype = p->dtype = spec->dtype;
    size_t B = spec->max_batch, T = lay.T, C = lay.C, V = lay.V, NH = lay.NH, N = B * T;
    p->maxN = N;
    p->R = LOGIT_BUDGET / V;
    p->R = p->R < 1 ? 1 : p->R > N ? N : p->R;
    /* every float buffer in one allocation, counted first */
    size_t per_block = 16 * N * C + 4 * N + B * NH * T * T;
    size_t sizes[] = {N * C,      /* enc */
                      N * C,      /* lnf */
                      N,          N, /* lnf mean, rstd */
                      p->R * V,   /* logits */
                      N,          /* rowloss */
                      N * C,      /* dres */
                      N * C,      /* dC */
                      3 * N * C,  /* d3C */
                      4 * N * C,  /* d4C */
                      B * NH * T * T, /* datt */
                      V * C,      /* dwte */
                      T * C,      /* dwpe */
                      4 * C, 4 * C, /* gsmall, gsmall2 */
                      per_block * lay.L};
    size_t total = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        total += sizes[i];
    float *mem = malloc(total * sizeof(float));
    p->inp = malloc(N * sizeof(int32_t));
    p->tgt = malloc(N * sizeof(int32_t));
    p->rowarg = malloc(N * sizeof(int32_t));
    int fail = !mem || !p->inp || !p->tgt || !p->rowarg;
    if (spec->dtype != DSL_FLOAT32 && !fail) {
        size_t gmax = 0;
        for (size_t i = 0; i < m->nsegs; i++)
            gmax = m->segs[i].len > gmax ? m->segs[i].len : gmax;
        p->w32 = malloc(m->nparams * sizeof(float));
        p->g32 = malloc(gmax * sizeof(float));
        fail = !p->w32 || !p->g32;
    }
    if (fail) {
        free(mem);
        gpt_release(m);
        free(m->segs);
        memset(m, 0, sizeof(*m));
        return dsl_seterr(err, -ENOMEM,
                          "gpt: cannot allocate %zu MiB of activations for a micro batch of "
                          "%zu x %zu tokens",
                          total * sizeof(float) >> 20, B, T);
    }
    float *q = mem;
#define TAKE(ptr, n) (ptr = q, q += (n))
    TAKE(p->enc, N * C);
    TAKE(p->lnf, N * C);
    TAKE(p->lnfm, N);
    TAKE(p->lnfr, N);
    TAKE(p->logits, p->R * V);
    TAKE(p->rowloss, N);
    TAKE(p->dres, N * C);
    TAKE(p->dC, N * C);
    TAKE(p->d3C, 3 * N * C);
    TAKE(p->d4C, 4 * N * C);
    TAKE(p->datt, B * NH * T * T);
    TAKE(p->dwte, V * C);
    TAKE(p->dwpe, T * C);
    TAKE(p->gsmall, 4 * C);
    TAKE(p->gsmall2, 4 * C);
    for (size_t l = 0; l < lay.L; l++) {
        struct gpt_block *h = &p->h[l];
        TAKE(h->ln1, N * C);
        TAKE(h->ln1m, N);
        TAKE(h->ln1r, N);
        TAKE(h->qkv, 3 * N * C);
        TAKE(h->att, B * NH * T * T);
        TAKE(h->atty, N * C);
        TAKE(h->res2, N * C);
        TAKE(h->ln2, N * C);
        TAKE(h->ln2m, N);
        TAKE(h->ln2r, N);
        TAKE(h->fch, 4 * N * C);
        TAKE(h->fchg, 4 * N * C);
        TAKE(h->res3, N * C);
    }
#undef TAKE
    return 0;
}
