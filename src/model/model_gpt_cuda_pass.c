/*
 * The CUDA GPT's passes over a micro batch (model_gpt_cuda.h): forward through ln_f, the
 * LM head with the loss by chunks of logits, and backward to the trainer's sink.
 *
 * Theory of operation: model_gpt_cuda.c's opening comment (the order of the need() and
 * done() calls, the epilogues, the alignment rule). Everything here is enqueued in the
 * caller's thread on the model's stream; nothing waits on the host. At ZeRO stage 3 each
 * pass takes its layers from the sink (gpt_cuda_take) in the CPU GPT's order and gives
 * each back once its kernels are queued.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_kernels.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/gpuprof.h"
#include "dslaunch/model/model.h"
#include "model_cuda_impl.h"
#include "model_gpt_cuda.h"
#include "dslaunch/common/banned.h"

static int gemm(struct dsl_model *mo, const char *what, cublasOperation_t ta,
                cublasOperation_t tb, size_t m, size_t n, size_t k, const void *A, size_t lda,
                const void *B, size_t ldb, float beta, void *C, size_t ldc)
{
    return dsl_gpt_gemm_run(mo, what, ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc, 0);
}

/* row-major out [N, cout] (+)= in [N, cin] W [cin, cout] */
static int proj_fwd(struct dsl_model *m, const void *in, const void *w, void *out, size_t N,
                    size_t cin, size_t cout, float beta)
{
    return gemm(m, "projection GEMM", OP_N, OP_N, cout, N, cin, w, cout, in, cin, beta, out,
                cout);
}

/* row-major din [N, cin] = dout [N, cout] W^T */
static int proj_bwd(struct dsl_model *m, const void *dout, const void *w, void *din, size_t N,
                    size_t cin, size_t cout)
{
    return gemm(m, "input gradient GEMM", OP_T, OP_N, cin, N, cout, w, cout, dout, cout, 0.0f,
                din, cin);
}

/* row-major out [N, cout] = resid + in [N, cin] W [cin, cout] + b (resid NULL: none): one
 * GEMM with a BIAS epilogue (resid as its C), or the broadcast of resid + b and a GEMM
 * onto it when the model keeps the kernels */
static int proj_bias_fwd(struct dsl_model *m, const char *what, const void *in, const void *w,
                         const void *b, const void *resid, void *out, size_t N, size_t cin,
                         size_t cout)
{
    struct gpt_cuda *p = m->impl;
    int sep = 1;
    MARK(FWD_MATMUL);
    if (p->lt)
        TRY(sep = dsl_gpt_gemm_lt(m, what, CUBLASLT_EPILOGUE_BIAS, OP_N, OP_N, cout, N, cin, w,
                                  cout, in, cin, resid ? 1.0f : 0.0f, resid, out, cout, b, NULL,
                                  0));
    if (!sep)
        return 0;
    CU(m, "launching dsl_k_gpt_resbias",
       dsl_cuda_gpt_resbias(p->stream, p->et, out, resid, b, N, cout));
    return proj_fwd(m, in, w, out, N, cin, cout, 1.0f);
}

/* ---- forward ---- */

/* the flat ranges the sink's need() is called for, in order: embeddings, blocks, ln_f */
static void need(const struct gpt_cuda *p, const struct dsl_grad_sink *sink, size_t g)
{
    if (!sink || !sink->need)
        return;
    const struct dsl_gpt_layout *L = &p->L;
    size_t lo, hi;
    if (g == 0) {
        lo = L->t[GPT_WTE].off;
        hi = L->t[GPT_BLOCK(0, 0)].off;
    } else if (g <= L->L) {
        lo = L->t[GPT_BLOCK(g - 1, 0)].off;
        hi = L->t[GPT_BLOCK(g, 0)].off; /* ln_f's offset after the last block */
    } else {
        lo = L->t[GPT_LNF_W(L->L)].off;
        hi = p->m->nparams;
    }
    sink->need(sink->ctx, lo, hi - lo);
}

int dsl_gpt_cuda_forward(struct dsl_model *m, const void *params, size_t B,
                         const struct dsl_grad_sink *sink)
{
    struct gpt_cuda *p = m->impl;
    const struct dsl_gpt_layout *L = &p->L;
    size_t T = L->T, C = L->C, N = B * T;
    need(p, sink, 0);
    const void *pw = gpt_cuda_take(p, params, sink, 0, GPT_LAYER_BLOCK(0));
    MARK(FWD_ELEM);
    CU(m, "launching dsl_k_gpt_encoder",
       dsl_cuda_gpt_encoder(p->stream, p->et, p->enc, dev_inp(p), W(p, pw, GPT_WTE),
                            W(p, pw, GPT_WPE), N, T, C));
    gpt_cuda_give(sink, 0);
    const void *res = p->enc;
    for (size_t l = 0; l < L->L; l++) {
        need(p, sink, l + 1);
        size_t ly = GPT_LAYER_BLOCK(l);
        pw = gpt_cuda_take(p, params, sink, ly, (int)ly + 1);
        struct gpt_cuda_block *h = &p->h[l];
#define WB(k) W(p, pw, GPT_BLOCK(l, k))
        MARK(FWD_NORM);
        CU(m, "launching dsl_k_gpt_layernorm",
           dsl_cuda_gpt_layernorm(p->stream, p->et, h->ln1, h->ln1m, h->ln1r, res, WB(GPT_LN1_W),
                                  WB(GPT_LN1_B), N, C));
        TRY(proj_bias_fwd(m, "qkv projection GEMM", h->ln1, WB(GPT_QKV_W), WB(GPT_QKV_B),
                          NULL, h->qkv, N, C, 3 * C));
        MARK(FWD_ATTN);
        CU(m, "launching dsl_k_gpt_attn_fwd",
           dsl_cuda_gpt_attention(p->stream, p->et, p->attn_tc, h->atty, h->lse, h->qkv, B, T,
                                  L->NH, C / L->NH));
        TRY(proj_bias_fwd(m, "attention output projection GEMM", h->atty, WB(GPT_PROJ_W),
                          WB(GPT_PROJ_B), res, h->res2, N, C, C));
        MARK(FWD_NORM);
        CU(m, "launching dsl_k_gpt_layernorm",
           dsl_cuda_gpt_layernorm(p->stream, p->et, h->ln2, h->ln2m, h->ln2r, h->res2,
                                  WB(GPT_LN2_W), WB(GPT_LN2_B), N, C));
        /* fchg = gelu(ln2 W + b) with fch = ln2 W + b kept for backward: one GEMM with
         * epilogues, or three passes */
        int sep = 1;
        MARK(FWD_MATMUL);
        if (p->lt)
            TRY(sep = dsl_gpt_gemm_lt(m, "MLP input projection GEMM (bias and GELU epilogue)",
                                      CUBLASLT_EPILOGUE_GELU_AUX_BIAS, OP_N, OP_N, 4 * C, N, C,
                                      WB(GPT_FC_W), 4 * C, h->ln2, C, 0.0f, NULL, h->fchg,
                                      4 * C, WB(GPT_FC_B), h->fch, 4 * C));
        if (sep) {
            CU(m, "launching dsl_k_gpt_resbias",
               dsl_cuda_gpt_resbias(p->stream, p->et, h->fch, NULL, WB(GPT_FC_B), N, 4 * C));
            TRY(proj_fwd(m, h->ln2, WB(GPT_FC_W), h->fch, N, C, 4 * C, 1.0f));
            MARK(FWD_ELEM);
            CU(m, "launching dsl_k_gpt_gelu",
               dsl_cuda_gpt_gelu(p->stream, p->et, h->fchg, h->fch, N * 4 * C, 0));
        }
        TRY(proj_bias_fwd(m, "MLP output projection GEMM", h->fchg, WB(GPT_FCPROJ_W),
                          WB(GPT_FCPROJ_B), h->res2, h->res3, N, 4 * C, C));
#undef WB
        gpt_cuda_give(sink, ly);
        res = h->res3;
    }
    need(p, sink, L->L + 1);
    size_t lf = GPT_LAYER_LNF(L->L);
    pw = gpt_cuda_take(p, params, sink, lf, 0); /* the LM head reads the embeddings next */
    MARK(FWD_NORM);
    CU(m, "launching dsl_k_gpt_layernorm",
       dsl_cuda_gpt_layernorm(p->stream, p->et, p->lnf, p->lnfm, p->lnfr, res,
                              W(p, pw, GPT_LNF_W(L->L)), W(p, pw, GPT_LNF_B(L->L)), N, C));
    gpt_cuda_give(sink, lf);
    return 0;
}

/* logits, loss and (backward) dC = d lnf and dwte (the head's part, fp32), by chunks */
int dsl_gpt_cuda_head(struct dsl_model *m, const void *params, size_t B, int backward,
                      float scale, const struct dsl_grad_sink *sink)
{
    struct gpt_cuda *p = m->impl;
    const struct dsl_gpt_layout *L = &p->L;
    size_t C = L->C, V = L->V, Vp = p->Vp, N = B * L->T;
    /* stage 3: the tied wte is the embeddings' layer, taken a second time, naming
     * backward's first layer (ln_f) as next */
    const void *wte = W(p, gpt_cuda_take(p, params, sink, 0,
                                         backward ? GPT_LAYER_LNF((int)L->L) : -1),
                        GPT_WTE);
    MARK(HEAD);
    for (size_t r0 = 0; r0 < N; r0 += p->R) {
        size_t rows = N - r0 < p->R ? N - r0 : p->R;
        const void *x = el(p, p->lnf, r0 * C);
        /* logits [rows, V] = lnf wte^T, rows Vp apart (the padding columns are never
         * written, read or counted as classes) */
        TRY(gemm(m, "LM head GEMM", OP_T, OP_N, V, rows, C, wte, C, x, C, 0.0f, p->logits, Vp));
        CU(m, "launching dsl_k_gpt_classifier",
           dsl_cuda_gpt_classifier(p->stream, p->et, p->logits, dev_tgt(p, N), rows, V, Vp, r0,
                                   p->rowloss, p->rowarg, backward, scale / (float)L->T));
        if (!backward)
            continue;
        /* dC [rows, C] = dlogits wte; dwte [V, C] (+)= dlogits^T lnf (fp32) */
        TRY(gemm(m, "LM head input gradient GEMM", OP_N, OP_N, C, rows, V, wte, C, p->logits,
                 Vp, 0.0f, el(p, p->dC, r0 * C), C));
        TRY(dsl_gpt_gemm_run(m, "LM head weight gradient GEMM", OP_N, OP_T, C, V, rows, x, C, p->logits,
                   Vp, r0 ? 1.0f : 0.0f, p->dwte, C, 1));
    }
    gpt_cuda_give(sink, 0);
    return 0;
}

/* ---- backward ---- */

/* hand tensor ti's gradient, whole in src (fp32 when f32, else the model's type), to
 * the sink segment by segment */
static int deliver(struct dsl_model *m, const struct dsl_grad_sink *sink, size_t ti,
                   const void *src, int f32)
{
    struct gpt_cuda *p = m->impl;
    const struct dsl_gpt_tensor *t = &p->L.t[ti];
    for (size_t s = t->seg0; s < t->seg0 + t->nseg; s++) {
        const struct dsl_model_seg *sg = &m->segs[s];
        void *dst = sink->dest(sink->ctx, s);
        size_t o = sg->off - t->off;
        MARK(BWD_ELEM); /* again after each done(): the trainer marks its own work */
        if (f32 && p->et != DSL_CUDA_FP32)
            CU(m, "launching dsl_k_to_half",
               dsl_cuda_to_half(p->stream, p->et == DSL_CUDA_BF16, dst, (const float *)src + o,
                                sg->len));
        else
            CU(m, "copying a gradient",
               cudaMemcpyAsync(dst, (const char *)src + o * (f32 ? sizeof(float) : p->esz),
                               sg->len * p->esz, cudaMemcpyDeviceToDevice, p->stream));
        sink->done(sink->ctx, s);
    }
    return 0;
}

/* a bias's gradient (the column sums of dY [N, cols]) straight into its one segment */
static int deliver_bias(struct dsl_model *m, const struct dsl_grad_sink *sink, size_t ti,
                        const void *dy, size_t N)
{
    struct gpt_cuda *p = m->impl;
    const struct dsl_gpt_tensor *t = &p->L.t[ti];
    for (size_t s = t->seg0; s < t->seg0 + t->nseg; s++) { /* one: a vector */
        const struct dsl_model_seg *sg = &m->segs[s];
        void *dst = sink->dest(sink->ctx, s);
        MARK(BWD_ELEM);
        CU(m, "launching dsl_k_gpt_colsum",
           dsl_cuda_gpt_colsum(p->stream, p->et, dst, NULL, el(p, dy, sg->off - t->off), NULL,
                               NULL, NULL, N, sg->len, p->part));
        sink->done(sink->ctx, s);
    }
    return 0;
}

/* a projection's weight gradient A^T dY ([rows, cols]) straight into the sink, row
 * block by row block (A: N x rows activations, dY: N x cols) */
static int deliver_weight(struct dsl_model *m, const struct dsl_grad_sink *sink, size_t ti,
                          const void *A, const void *dY, size_t N)
{
    struct gpt_cuda *p = m->impl;
    const struct dsl_gpt_tensor *t = &p->L.t[ti];
    for (size_t s = t->seg0; s < t->seg0 + t->nseg; s++) {
        const struct dsl_model_seg *sg = &m->segs[s];
        size_t r0 = (sg->off - t->off) / t->cols, nr = sg->len / t->cols;
        void *dst = sink->dest(sink->ctx, s);
        /* dW_blk^T [cols, nr] = dY^T A_blk */
        MARK(BWD_MATMUL);
        TRY(gemm(m, "weight gradient GEMM", OP_N, OP_T, t->cols, nr, N, dY, t->cols,
                 el(p, A, r0), t->rows, 0.0f, dst, t->cols));
        sink->done(sink->ctx, s);
    }
    return 0;
}

/* d4C = (dres W^T) gelu'(fch), and the column sums of d4C to the sink as bias tb's
 * gradient: one GEMM with the DGELU_BGRAD epilogue writing the sums straight into the
 * bias's one segment, or the DGELU epilogue and the column-sum kernels, or a GEMM, the
 * GELU-gradient kernel and the column sums. The bias comes after the output projection's
 * weight in backward order, so its dest() is asked for exactly where the kernels would */
static int mlp_dgelu(struct dsl_model *m, const struct dsl_grad_sink *sink, size_t tb,
                     const void *w, void *fch, size_t N)
{
    struct gpt_cuda *p = m->impl;
    size_t C = p->L.C;
    const struct dsl_gpt_tensor *t = &p->L.t[tb];
    int sep = 1;
    MARK(BWD_MATMUL);
    if (p->lt && t->nseg == 1) {
        void *dst = sink->dest(sink->ctx, t->seg0);
        TRY(sep = dsl_gpt_gemm_lt(m, "MLP output projection input gradient GEMM (GELU and bias "
                                  "gradient epilogue)", CUBLASLT_EPILOGUE_DGELU_BGRAD, OP_T,
                                  OP_N, 4 * C, N, C, w, C, p->dres, C, 0.0f, NULL, p->d4C,
                                  4 * C, dst, fch, 4 * C));
        if (!sep) {
            sink->done(sink->ctx, t->seg0);
            return 0;
        }
        /* the segment's dest() is asked for again below: the same pointer */
    }
    if (p->lt)
        TRY(sep = dsl_gpt_gemm_lt(m, "MLP output projection input gradient GEMM (GELU "
                                  "gradient epilogue)", CUBLASLT_EPILOGUE_DGELU, OP_T, OP_N,
                                  4 * C, N, C, w, C, p->dres, C, 0.0f, NULL, p->d4C, 4 * C,
                                  NULL, fch, 4 * C));
    if (sep) {
        TRY(proj_bwd(m, p->dres, w, p->d4C, N, 4 * C, C));
        MARK(BWD_ELEM);
        CU(m, "launching dsl_k_gpt_gelu (backward)",
           dsl_cuda_gpt_gelu(p->stream, p->et, p->d4C, fch, N * 4 * C, 1));
    }
    return deliver_bias(m, sink, tb, p->d4C, N);
}

/* LayerNorm backward: its bias then its weight to the sink, dx += */
static int ln_backward(struct dsl_model *m, const struct dsl_grad_sink *sink, size_t tw,
                       size_t tb, void *dx, const void *dy, const void *x, const void *w,
                       const float *mean, const float *rstd, size_t N)
{
    struct gpt_cuda *p = m->impl;
    size_t C = p->L.C;
    MARK(BWD_NORM);
    CU(m, "launching dsl_k_gpt_colsum (LayerNorm)",
       dsl_cuda_gpt_colsum(p->stream, p->et, p->g1, p->g2, dy, x, mean, rstd, N, C, p->part));
    CU(m, "launching dsl_k_gpt_ln_back",
       dsl_cuda_gpt_ln_back(p->stream, p->et, dx, x, dy, w, mean, rstd, N, C));
    TRY(deliver(m, sink, tb, p->g1, 0));
    return deliver(m, sink, tw, p->g2, 0);
}

int dsl_gpt_cuda_backward(struct dsl_model *m, const void *params, size_t B,
                          const struct dsl_grad_sink *sink)
{
    struct gpt_cuda *p = m->impl;
    const struct dsl_gpt_layout *L = &p->L;
    size_t T = L->T, C = L->C, N = B * T, nL = L->L;
    CU(m, "clearing the residual gradient",
       cudaMemsetAsync(p->dres, 0, N * C * p->esz, p->stream));
    const void *last = p->h[nL - 1].res3;
    /* stage 3: ln_f, then the blocks from the last down (the embeddings' gradients read
     * no parameter), as the CPU model asks for them */
    size_t lf = GPT_LAYER_LNF(nL);
    const void *pw = gpt_cuda_take(p, params, sink, lf, GPT_LAYER_BLOCK((int)nL - 1));
    TRY(ln_backward(m, sink, GPT_LNF_W(nL), GPT_LNF_B(nL), p->dres, p->dC, last,
                    W(p, pw, GPT_LNF_W(nL)), p->lnfm, p->lnfr, N));
    gpt_cuda_give(sink, lf);
    for (size_t l = nL; l-- > 0;) {
        struct gpt_cuda_block *h = &p->h[l];
        const void *res = l ? p->h[l - 1].res3 : p->enc;
        size_t ly = GPT_LAYER_BLOCK(l);
        pw = gpt_cuda_take(p, params, sink, ly, l ? (int)ly - 1 : -1);
#define WB(k) W(p, pw, GPT_BLOCK(l, k))
#define TI(k) GPT_BLOCK(l, k)
        /* the MLP's output projection: dres is the gradient of res3 */
        TRY(deliver_bias(m, sink, TI(GPT_FCPROJ_B), p->dres, N));
        TRY(deliver_weight(m, sink, TI(GPT_FCPROJ_W), h->fchg, p->dres, N));
        /* d4C = (dres W^T) gelu'(fch) and the MLP's input bias gradient */
        TRY(mlp_dgelu(m, sink, TI(GPT_FC_B), WB(GPT_FCPROJ_W), h->fch, N));
        /* the MLP's input projection */
        TRY(deliver_weight(m, sink, TI(GPT_FC_W), h->ln2, p->d4C, N));
        MARK(BWD_MATMUL);
        TRY(proj_bwd(m, p->d4C, WB(GPT_FC_W), p->dC, N, C, 4 * C));
        TRY(ln_backward(m, sink, TI(GPT_LN2_W), TI(GPT_LN2_B), p->dres, p->dC, h->res2,
                        WB(GPT_LN2_W), h->ln2m, h->ln2r, N));
        /* attention's output projection: dres is now the gradient of res2 */
        TRY(deliver_bias(m, sink, TI(GPT_PROJ_B), p->dres, N));
        TRY(deliver_weight(m, sink, TI(GPT_PROJ_W), h->atty, p->dres, N));
        MARK(BWD_MATMUL);
        TRY(proj_bwd(m, p->dres, WB(GPT_PROJ_W), p->dC, N, C, C));
        MARK(BWD_ATTN);
        CU(m, "launching dsl_k_gpt_attn_dkv and dsl_k_gpt_attn_dq",
           dsl_cuda_gpt_attention_back(p->stream, p->et, p->attn_tc, p->d3C, h->qkv, h->atty,
                                       p->dC, h->lse, p->rowd, B, T, L->NH, C / L->NH));
        TRY(deliver_bias(m, sink, TI(GPT_QKV_B), p->d3C, N));
        TRY(deliver_weight(m, sink, TI(GPT_QKV_W), h->ln1, p->d3C, N));
        MARK(BWD_MATMUL);
        TRY(proj_bwd(m, p->d3C, WB(GPT_QKV_W), p->dC, N, C, 3 * C));
        TRY(ln_backward(m, sink, TI(GPT_LN1_W), TI(GPT_LN1_B), p->dres, p->dC, res,
                        WB(GPT_LN1_W), h->ln1m, h->ln1r, N));
#undef WB
#undef TI
        gpt_cuda_give(sink, ly);
    }
    /* the embeddings: positions summed over the samples, tokens scattered into the
     * head's part of wte's gradient, both in row order (fp32) */
    MARK(BWD_ELEM);
    CU(m, "launching dsl_k_gpt_wpe_grad",
       dsl_cuda_gpt_wpe_grad(p->stream, p->et, p->dwpe, p->dres, B, T, C));
    TRY(deliver(m, sink, GPT_WPE, p->dwpe, 1));
    int32_t *tok = p->ids + 2 * N, *off = tok + N, *rows = off + N + 1;
    MARK(BWD_ELEM);
    CU(m, "launching dsl_k_gpt_wte_scatter",
       dsl_cuda_gpt_wte_scatter(p->stream, p->et, p->dwte, p->dres, tok, off, rows, p->nu, C));
    return deliver(m, sink, GPT_WTE, p->dwte, 1);
}
