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
 * Parameters come a layer at a time (model_gpt_layout.c: the embeddings, each block,
 * ln_f), from the flat buffer after the sink's need() at stages 0-2, or at ZeRO stage
 * 3 from the sink's layer(), one held at a time: forward takes the embeddings, the
 * blocks and ln_f in order and the embeddings again for the tied LM head, whose
 * chunks also give backward's d lnf and the head's part of wte's gradient; backward
 * takes ln_f and the blocks from the last, each again, and nothing for the
 * embeddings' gradients. Each take names the next, so the trainer can fetch it
 * meanwhile. The values are the same either way, so are the bits.
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

#include "model_gpt_cpu.h"

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

/* layer l's fp32 parameters for forward: at stages 0-2 after the sink's need() for
 * its range (stages 1/2 gather and update it bucket by bucket) and, 16-bit, widened
 * into w32; at stage 3 from the sink's layer() (gpt_layer) */
static const float *gpt_take(struct gpt *p, const float *params, const float *wp,
                             const struct dsl_grad_sink *sink, size_t l, int next)
{
    if (sink && sink->layer)
        return gpt_layer(p, wp, sink, l, next);
    size_t lo = p->L.lo[l], n = p->L.lo[l + 1] - lo;
    if (sink && sink->need)
        sink->need(sink->ctx, lo, n);
    if (p->s.w32)
        dsl_hv_widen(p->dtype == DSL_BFLOAT16, p->s.w32 + lo,
                     (const uint16_t *)(const void *)params + lo, n);
    return wp + lo;
}

/* forward of the embeddings, the blocks and ln_f over B samples, a layer at a time
 * (model_gpt_layout.c: each is given back before the next is taken, and ln_f names
 * the embeddings, which the LM head reads next, as its successor); returns the fp32
 * flat parameters it used (the caller's, or the widened copy of 16-bit ones), NULL
 * at stage 3 */
static const float *gpt_forward(struct gpt *p, const float *params, size_t B,
                                const struct dsl_grad_sink *sink)
{
    const struct dsl_gpt_layout *L = &p->L;
    size_t T = L->T, C = L->C, N = B * T;
    const float *wp = sink && sink->layer ? NULL : p->s.w32 ? p->s.w32 : params;
    const float *we = gpt_take(p, params, wp, sink, 0, GPT_LAYER_BLOCK(0));
    struct job j = {.p = p, .w = GPT_AT(p, we, 0, GPT_WTE), .b = GPT_AT(p, we, 0, GPT_WPE),
                    .o = p->enc, .C = C, .T = T};
    par(N, encoder_rows, &j);
    gpt_unlayer(sink, 0);
    const float *res = p->enc;
    for (size_t l = 0; l < L->L; l++) {
        size_t ly = GPT_LAYER_BLOCK(l);
        const float *wl = gpt_take(p, params, wp, sink, ly, (int)ly + 1);
        struct gpt_block *h = &p->h[l];
#define W(k) GPT_AT(p, wl, ly, GPT_BLOCK(l, k))
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
        gpt_unlayer(sink, ly);
        res = h->res3;
    }
    size_t lf = GPT_LAYER_LNF(L->L);
    const float *wf = gpt_take(p, params, wp, sink, lf, 0);
    layernorm(p, res, GPT_AT(p, wf, lf, GPT_LNF_W(L->L)), GPT_AT(p, wf, lf, GPT_LNF_B(L->L)),
              p->lnf, p->lnfm, p->lnfr, N);
    gpt_unlayer(sink, lf);
    return wp;
}

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

/* logits, loss and (backward) dC = d lnf and dwte (the head's part), chunk by chunk;
 * the tied wte from layer 0 (gpt_layer: the stage 3 pass takes the embeddings a second
 * time, naming ln_f as next when backward follows) */
static void gpt_head(struct gpt *p, const float *wp, const struct dsl_grad_sink *sink,
                     size_t B, int backward, float scale)
{
    const struct dsl_gpt_layout *L = &p->L;
    size_t C = L->C, V = L->V, N = B * L->T;
    const float *we = gpt_layer(p, wp, sink, 0, backward ? GPT_LAYER_LNF((int)L->L) : -1);
    const float *wte = GPT_AT(p, we, 0, GPT_WTE);
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
    gpt_unlayer(sink, 0);
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

/* the micro batch's tokens, or the error in m->err */
static int gpt_batch(struct dsl_model *m, const float *x, size_t n)
{
    struct gpt *p = m->impl;
    int r = gpt_tokens(p, x, n);
    if (r < 0)
        return dsl_seterr(m->err, r, "gpt: a sample holds a token id outside 0..%zu or the "
                          "batch exceeds %zu", p->L.V - 1, m->max_batch);
    return 0;
}

static int gpt_forward_backward(struct dsl_model *m, const float *params, const float *x,
                                const int32_t *y, size_t n, float loss_scale,
                                const struct dsl_grad_sink *sink, struct dsl_model_stats *st)
{
    struct gpt *p = m->impl;
    (void)y;
    int r = gpt_batch(m, x, n);
    if (r < 0)
        return r;
    const float *wp = gpt_forward(p, params, n, sink);
    gpt_head(p, wp, sink, n, 1, loss_scale);
    gpt_stats(p, n, st);
    dsl_gpt_cpu_backward(p, wp, n, sink);
    return 0;
}

/* forward only, with params (src NULL) or the layers from src (stage 3) */
static int gpt_eval(struct dsl_model *m, const float *params, const struct dsl_grad_sink *src,
                    const float *x, size_t n, struct dsl_model_stats *st)
{
    struct gpt *p = m->impl;
    int r = gpt_batch(m, x, n);
    if (r < 0)
        return r;
    const float *wp = gpt_forward(p, params, n, src);
    gpt_head(p, wp, src, n, 0, 1.0f);
    gpt_stats(p, n, st);
    return 0;
}

static int gpt_evaluate(struct dsl_model *m, const float *params, const float *x,
                        const int32_t *y, size_t n, struct dsl_model_stats *st)
{
    (void)y;
    return gpt_eval(m, params, NULL, x, n, st);
}

static int gpt_evaluate_src(struct dsl_model *m, const struct dsl_grad_sink *src,
                            const float *x, const int32_t *y, size_t n,
                            struct dsl_model_stats *st)
{
    (void)y;
    return gpt_eval(m, NULL, src, x, n, st);
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
    dsl_cpu_scratch_release(&p->s);
    free(p);
    m->impl = NULL;
}

static const struct dsl_model_ops gpt_ops = {
    .name = "gpt",
    .init_params = gpt_init_params,
    .forward_backward = gpt_forward_backward,
    .evaluate = gpt_evaluate,
    .evaluate_src = gpt_evaluate_src,
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
    if (!fail)
        fail = dsl_cpu_scratch_init(&p->s, m, spec) < 0;
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
