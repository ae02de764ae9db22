/*
 * What the CUDA GPT's three files share (model_gpt_cuda.c: the micro batch, the ops
 * table and creation; model_gpt_cuda_pass.c: forward, the LM head and backward;
 * model_gpt_cuda_gemm.c: the cuBLAS and cuBLASLt products): the model's state, its
 * sizes and the small accessors. Private to src/model; model_gpt_cuda.c's opening
 * comment is the theory of operation of all three.
 */
#ifndef DSL_MODEL_GPT_CUDA_H
#define DSL_MODEL_GPT_CUDA_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_kernels.h"
#include "dslaunch/model/model.h"
#include "model_gpt_impl.h"

/* elements of logits alive at a time, at most (the chunk's rows R = this / Vp) */
#define GPT_CUDA_LOGIT_BUDGET ((size_t)64 << 20)
/* the logits' row stride Vp: the vocabulary rounded up to a multiple of this many
 * elements (128 bytes in 16-bit), so that every row starts 16-byte aligned */
#define GPT_CUDA_VOCAB_PAD 64
/* cuBLASLt's workspace (fixed, so the heuristic's choice does not depend on free
 * memory) and the number of (shape, epilogue) plans kept */
#define GPT_CUDA_LT_WORKSPACE ((size_t)32 << 20)
#define GPT_CUDA_LT_PLANS 16
/* the heuristic's candidates looked at for one without a 16-bit split-K reduction */
#define GPT_CUDA_LT_CANDIDATES 8

/* one cuBLASLt matmul shape with its epilogue, its descriptors and the algorithm the
 * heuristic chose for it once */
struct lt_plan {
    int used;
    int none;               /* the heuristic offered no algorithm we take: use the kernels */
    cublasLtEpilogue_t epi;
    cublasOperation_t ta, tb;
    size_t m, n, k, lda, ldb, ldd, ldaux, align;
    float beta;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
};

struct gpt_cuda_block {
    void *ln1, *qkv, *atty, *res2, *ln2, *fch, *fchg, *res3;
    float *ln1m, *ln1r, *ln2m, *ln2r, *lse;
};

struct gpt_cuda {
    struct dsl_gpt_layout L;
    struct dsl_model *m;
    cublasHandle_t blas;
    cublasLtHandle_t lt;    /* the fused MLP epilogues (16-bit, even width); else NULL */
    void *ltws;             /* its workspace, GPT_CUDA_LT_WORKSPACE bytes */
    struct lt_plan plans[GPT_CUDA_LT_PLANS];
    size_t nplans;          /* plans made so far (the next one replaces plans[nplans % N]) */
    cudaStream_t stream;
    int et;                 /* enum dsl_cuda_etype of params, activations, gradients */
    size_t esz;             /* their element bytes */
    cudaDataType_t dt;      /* their cuBLAS type */
    size_t R;               /* rows per logits chunk */
    int attn_tc;            /* the attention runs on tensor cores (16-bit, see create) */
    size_t Vp;              /* the logits' row stride: V rounded up to GPT_CUDA_VOCAB_PAD */
    /* device */
    int32_t *ids;           /* 5N + 1: inp, tgt, tok, off (N + 1), rows */
    void *enc, *lnf, *logits, *dres, *dC, *d3C, *d4C, *g1, *g2;
    float *lnfm, *lnfr, *rowloss, *dwte, *dwpe, *part, *rowd;
    int32_t *rowarg;
    struct gpt_cuda_block h[DSL_GPT_MAX_LAYERS];
    /* host */
    int32_t *hids[2];       /* page-locked staging of ids, alternating */
    cudaEvent_t up[2];
    int slot;
    size_t nu;              /* distinct tokens of the current micro batch */
    int32_t *count;         /* V + 1 counters of the counting sort */
    float *hloss;           /* page-locked: rowloss, rowarg copies (evaluation) */
    int32_t *harg;
    int32_t *htgt;          /* the current batch's targets (host) */
};

#define TRY(expr)                                                              \
    do {                                                                       \
        int try_r_ = (expr);                                                   \
        if (try_r_ < 0)                                                        \
            return try_r_;                                                     \
    } while (0)

/* element off of a buffer of the model's element type */
static inline void *el(const struct gpt_cuda *p, const void *base, size_t off)
{
    return (char *)(uintptr_t)base + off * p->esz;
}

/* the parameters of tensor ti */
static inline const void *W(const struct gpt_cuda *p, const void *params, size_t ti)
{
    return el(p, params, p->L.t[ti].off);
}

/* ZeRO stage 3 (the sink has layer()): layer l whole from the sink, held until
 * gpt_cuda_give(), next being the layer the pass asks for after it (model.h); returned
 * as the flat base at which W() finds layer l's tensors in the gathered window (the
 * window's address less the layer's offset), so the passes index one way at every
 * stage. Without layer(): params itself. */
static inline const void *gpt_cuda_take(const struct gpt_cuda *p, const void *params,
                                        const struct dsl_grad_sink *sink, size_t l, int next)
{
    if (!sink || !sink->layer)
        return params;
    uintptr_t w = (uintptr_t)sink->layer(sink->ctx, (int)l, next);
    return (const void *)(w - p->L.lo[l] * p->esz);
}

/* the layer back, once the kernels that read it are queued (stage 3; else nothing) */
static inline void gpt_cuda_give(const struct dsl_grad_sink *sink, size_t l)
{
    if (sink && sink->layer)
        sink->unlayer(sink->ctx, (int)l);
}

#define OP_N CUBLAS_OP_N
#define OP_T CUBLAS_OP_T

/* the device copies of the current batch's index arrays (gpt_cuda_upload's layout) */
static inline int32_t *dev_inp(const struct gpt_cuda *p) { return p->ids; }
static inline int32_t *dev_tgt(const struct gpt_cuda *p, size_t N) { return p->ids + N; }

/* model_gpt_cuda_gemm.c */

/* C = op(A) op(B) + beta C, column-major, by cublasGemmEx. A and B are of the model's
 * type; C too, or fp32 when c32. fp32 compute (CUBLAS_COMPUTE_32F) for every type. */
int dsl_gpt_gemm_run(struct dsl_model *mo, const char *what, cublasOperation_t ta,
                     cublasOperation_t tb, size_t m, size_t n, size_t k, const void *A,
                     size_t lda, const void *B, size_t ldb, float beta, void *C, size_t ldc,
                     int c32);

/* D = epilogue(op(A) op(B) + beta C) by cuBLASLt (model_gpt_cuda_gemm.c says which
 * epilogues and what bias and aux are); 1, having done nothing, when the model keeps
 * its kernels for this product (the same answer every time), else 0 or an error */
int dsl_gpt_gemm_lt(struct dsl_model *mo, const char *what, cublasLtEpilogue_t epi,
                    cublasOperation_t ta, cublasOperation_t tb, size_t m, size_t n, size_t k,
                    const void *A, size_t lda, const void *B, size_t ldb, float beta,
                    const void *C, void *D, size_t ldd, const void *bias, void *aux,
                    size_t ldaux);

/* frees the cuBLASLt plans (descriptors and layouts) the model made */
void dsl_gpt_gemm_release(struct gpt_cuda *p);

/* model_gpt_cuda_pass.c, on the model's stream: forward through ln_f (sink's need()
 * calls in order; sink may be NULL); the LM head and loss by chunks (backward: dlogits,
 * d ln_f and the head's part of wte's gradient too); backward to the sink */
int dsl_gpt_cuda_forward(struct dsl_model *m, const void *params, size_t B,
                         const struct dsl_grad_sink *sink);
int dsl_gpt_cuda_head(struct dsl_model *m, const void *params, size_t B, int backward,
                      float scale, const struct dsl_grad_sink *sink);
int dsl_gpt_cuda_backward(struct dsl_model *m, const void *params, size_t B,
                          const struct dsl_grad_sink *sink);

#endif
