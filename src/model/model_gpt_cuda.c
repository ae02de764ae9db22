/*
 * The GPT of dstrain on a GPU: model_gpt.c's model with cuBLAS GEMMs and the fused
 * kernels of model_gpt_kernels.cu and model_gpt_attention.cu, on device pointers. The
 * layout, the gradient segment list and the initial values are model_gpt_layout.c's,
 * shared with the CPU model, so the trainer's buckets and shards are the same on both and
 * both start from the same bits.
 *
 * Theory of operation. As the CUDA MLP (model_mlp_cuda.c): every call runs in the
 * caller's thread on the model's stream (spec.stream, the trainer's device stream;
 * cuBLAS is bound to it), so it is ordered with the device's buffer operations and the
 * nccl comm orders its collectives after it with events. A call checks the micro
 * batch's token ids on the host, writes the inputs, the targets and the token
 * embedding's scatter plan (the rows sorted by token with a stable counting sort: the
 * distinct tokens, their first sorted row, the row indices) into one of two page-locked
 * staging buffers (alternating, each guarded by an event recorded after its upload) and
 * sends them with one cudaMemcpyAsync, so the host goes on while the GPU computes.
 *
 * Forward, per group of parameters in flat order (the embeddings, each block, ln_f) the
 * sink's need() first, exactly where the CPU model calls it: the embedding kernel;
 * per block LayerNorm, the qkv projection (bias broadcast, then GEMM with beta 1), the
 * fused flash-style causal attention straight from the projection's rows (the output
 * and each query row's log-sum-exp; no T x T matrix, model_gpt_attention.cu), the output
 * projection onto residual + bias, LayerNorm, the MLP (GEMM, GELU, GEMM onto
 * residual + bias; in 16-bit the first GEMM, its bias and the GELU are one cuBLASLt
 * matmul with the GELU_AUX_BIAS epilogue, the second adds its bias by an epilogue too,
 * see Epilogues); the final LayerNorm. The LM
 * head and the loss run in chunks of R rows (R from the vocabulary and the batch
 * only): the chunk's logits by one GEMM against the tied token embedding, the fused
 * classifier turns them into dlogits in place, and backward's first two GEMMs take the
 * chunk's rows of d ln_f and add its part of wte's gradient into an fp32 buffer of the
 * model. So no more than R x V logits exist at a time (R x Vp elements with the
 * padding, see Alignment).
 *
 * Backward walks the tensors in the CPU model's order and hands each finished tensor's
 * segments to the sink: projection weight gradients are one GEMM per segment straight
 * into the sink's destination; biases and LayerNorm parameters are deterministic
 * column sums (into the destination, or a scratch for LayerNorm's pair); the embeddings
 * are summed in fp32 (positions in sample order; tokens by the per-token-row scatter
 * in row order, after the head's part) and rounded or copied into their segments. The
 * micro batch's loss sum and hit count are summed on the device into the sink's
 * dev_stats when the trainer gives one; otherwise (evaluation) the per-row losses and
 * argmaxes are copied back and summed on the host as the CPU model does, after one
 * (bounded, through m->wait) host wait.
 *
 * Precision. fp32: every GEMM is cublasGemmEx with fp32 data and CUBLAS_COMPUTE_32F (no
 * TF32). 16-bit (spec.dtype fp16 or bf16): parameters, activations and gradients are
 * 16-bit, the GEMMs take 16-bit inputs and outputs with CUBLAS_COMPUTE_32F (and the wte
 * gradient an fp32 output), the handle's math mode disallows reduced-precision split-K
 * reductions, and the kernels compute in fp32 and round once. LayerNorm statistics,
 * the attention's log-sum-exp and row dots, and losses are fp32.
 *
 * Epilogues. With a 16-bit dtype and 4C a multiple of 8 (the aux matrix's leading
 * dimension must be), the MLP's input projection is cublasLtMatmul with
 * CUBLASLT_EPILOGUE_GELU_AUX_BIAS: fchg = gelu(ln2 W + b) written and fch = ln2 W + b
 * kept as the aux matrix; backward, the output projection's input gradient uses
 * CUBLASLT_EPILOGUE_DGELU with fch as aux, so d4C = (dres W^T) gelu'(fch) in one GEMM;
 * and the MLP's output projection adds its bias by CUBLASLT_EPILOGUE_BIAS with the
 * residual res2 as the GEMM's C (beta 1) and res3 as D. That replaces the bias
 * broadcasts, the GELU kernel and the GELU-gradient kernel: three passes over N x 4C
 * and one over N x C. The residual and the bias are added to the fp32 product before
 * the one rounding (the kernels round res2 + b to 16 bits first). Roundings differ from
 * those kernels: the epilogue's GELU takes the
 * fp32 pre-activation (the kernels take it rounded to 16 bits), its gradient multiplies
 * the fp32 product (the kernels round it first), both evaluate gelu' at the 16-bit fch,
 * and the library's tanh is its own (the formula is the tanh approximation, the model's
 * rational tanh is not), so 16-bit results agree with the kernels within 16-bit
 * rounding. fp32, whose CPU-oracle tolerance is far tighter, and odd widths keep the
 * kernels. Determinism: each (shape, epilogue, operand alignment) takes the heuristic's
 * first algorithm that fits a fixed workspace and reduces split-K partial products, if
 * at all, in fp32, once, and keeps it (lt_gemm's plans), so the bits do not depend on
 * when a shape was first seen; without such an algorithm that GEMM keeps the kernels.
 *
 * Row-major with a column-major BLAS: a row-major r x c matrix is a column-major c x r
 * one, so every row-major product C = A B is issued as C^T = B^T A^T.
 *
 * Alignment. cuBLAS takes its fast tensor-core kernels only when every matrix pointer
 * and leading dimension is a multiple of 16 bytes (8 16-bit elements, 4 fp32); anything
 * else is still correct but slower. The rule here: every GEMM operand is 16-byte
 * aligned, at the shapes that matter, by construction:
 *   - the vocabulary: the logits chunk's rows lie Vp elements apart, V rounded up to a
 *     multiple of GPT_CUDA_VOCAB_PAD (GPT-2's 50257 to 50304), in the GPU's own buffer
 *     only (the parameters' layout, shared with the CPU model and the trainer, keeps V
 *     rows of wte). The LM head's three GEMMs keep their m/n/k at the true V, as their
 *     other operand is the unpadded wte (and the fp32 wte gradient, [V, C] with stride
 *     C); the classifier reads and writes only the first V columns of a row and the
 *     loss, argmax and evaluation see only those, so the padding is never a class and
 *     is never even initialised;
 *   - every other leading dimension is C, 3C or 4C, every activation pointer a
 *     cudaMalloc'd buffer (256-byte aligned) plus whole rows, every parameter pointer a
 *     layout offset (a sum of tensor sizes, each a multiple of C), every gradient
 *     destination a segment offset (whole rows) into the sink's buffer: all aligned
 *     when C is a multiple of 8 (GPT-2's 768; the tests' odd C run slower kernels);
 *   - the one exception: a weight gradient cut into several segments (rows r0.. of the
 *     weight; dstrain's reduce_bucket_size below the tensor) reads its activations from
 *     column r0, aligned only when each segment's row count seg_max / cols is a
 *     multiple of 8; the default bucket (500 M elements) keeps whole tensors.
 * The attention reads qkv's rows (stride 3C) in its own kernels, not through cuBLAS,
 * so head sizes do not enter this rule.
 *
 * Determinism: cuBLAS is deterministic for fixed shapes on one GPU model and every
 * kernel has a fixed reduction order (model_gpt_kernels.cu), so two runs give the same
 * bits. Not thread-safe (one workspace); failures return a negative code with the text
 * in m->err and never exit.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/model/model.h"
#include "dslaunch/device/gemm_dims.h"
#include "model_cuda_impl.h"
#include "model_gpt_impl.h"
#include "dslaunch/common/banned.h"

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
static void *el(const struct gpt_cuda *p, const void *base, size_t off)
{
    return (char *)(uintptr_t)base + off * p->esz;
}

/* the parameters of tensor ti */
static const void *W(const struct gpt_cuda *p, const void *params, size_t ti)
{
    return el(p, params, p->L.t[ti].off);
}

/*
 * C = op(A) op(B) + beta C, column-major. A and B are of the model's type; C too, or
 * fp32 when c32. fp32 compute (CUBLAS_COMPUTE_32F) for every type.
 */
static int gemm_c(struct dsl_model *mo, const char *what, cublasOperation_t ta,
                  cublasOperation_t tb, size_t m, size_t n, size_t k, const void *A, size_t lda,
                  const void *B, size_t ldb, float beta, void *C, size_t ldc, int c32)
{
    const struct gpt_cuda *p = mo->impl;
    int im, in, ik, ia, ib, ic;
    if (dsl_gemm_dim(m, "m", &im, mo->err) < 0 || dsl_gemm_dim(n, "n", &in, mo->err) < 0 ||
        dsl_gemm_dim(k, "k", &ik, mo->err) < 0 || dsl_gemm_dim(lda, "lda", &ia, mo->err) < 0 ||
        dsl_gemm_dim(ldb, "ldb", &ib, mo->err) < 0 || dsl_gemm_dim(ldc, "ldc", &ic, mo->err) < 0)
        return DSL_ECONFIG;
    if (!m || !n)
        return 0;
    const float alpha = 1.0f;
    dsl_gpuprof_launch("launching cublasGemmEx");
    cublasStatus_t st = cublasGemmEx(p->blas, ta, tb, im, in, ik, &alpha, A, p->dt, ia, B, p->dt,
                                     ib, &beta, C, c32 ? CUDA_R_32F : p->dt, ic,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : dsl_model_blas_err(mo, what, st);
}

static int gemm(struct dsl_model *mo, const char *what, cublasOperation_t ta,
                cublasOperation_t tb, size_t m, size_t n, size_t k, const void *A, size_t lda,
                const void *B, size_t ldb, float beta, void *C, size_t ldc)
{
    return gemm_c(mo, what, ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc, 0);
}

#define OP_N CUBLAS_OP_N
#define OP_T CUBLAS_OP_T

static void lt_plan_free(struct lt_plan *q)
{
    if (q->desc)
        cublasLtMatmulDescDestroy(q->desc);
    if (q->la)
        cublasLtMatrixLayoutDestroy(q->la);
    if (q->lb)
        cublasLtMatrixLayoutDestroy(q->lb);
    if (q->ld)
        cublasLtMatrixLayoutDestroy(q->ld);
    memset(q, 0, sizeof(*q));
}

/* the largest power of two up to 256 that divides every address */
static size_t lt_align(const void *const *ptrs, size_t n)
{
    uintptr_t u = 256;
    for (size_t i = 0; i < n; i++)
        if (ptrs[i])
            u |= (uintptr_t)ptrs[i];
    return (size_t)(u & (~u + 1));
}

#define LT(m, what, expr)                                                      \
    do {                                                                       \
        cublasStatus_t lt_st_ = (expr);                                        \
        if (lt_st_ != CUBLAS_STATUS_SUCCESS)                                   \
            return dsl_model_blas_err(m, what, lt_st_);                        \
    } while (0)

/* a new plan in q: descriptors, layouts, and the heuristic's first algorithm for operands
 * aligned to q->align bytes that fits the fixed workspace and reduces split-K partial
 * products, if it splits, in fp32 (CUBLASLT_REDUCTION_SCHEME_INPLACE and _OUTPUT_TYPE
 * reduce in the 16-bit output type, what the cuBLAS handle's math mode forbids too) */
static int lt_plan_make(struct dsl_model *mo, const char *what, struct lt_plan *q,
                        const void *bias, void *aux)
{
    struct gpt_cuda *p = mo->impl;
    const int32_t ta = q->ta, tb = q->tb;
    const uint32_t epi = q->epi;
    const int64_t ldaux = (int64_t)q->ldaux;
    LT(mo, what, cublasLtMatmulDescCreate(&q->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(mo, what, cublasLtMatmulDescSetAttribute(q->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                sizeof(ta)));
    LT(mo, what, cublasLtMatmulDescSetAttribute(q->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                sizeof(tb)));
    LT(mo, what, cublasLtMatmulDescSetAttribute(q->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                sizeof(epi)));
    if (bias)
        LT(mo, what, cublasLtMatmulDescSetAttribute(q->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias, sizeof(bias)));
    if (aux) {
        LT(mo, what, cublasLtMatmulDescSetAttribute(
                         q->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        LT(mo, what, cublasLtMatmulDescSetAttribute(q->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                    &ldaux, sizeof(ldaux)));
    }
    LT(mo, what, cublasLtMatrixLayoutCreate(&q->la, p->dt, q->ta == OP_N ? q->m : q->k,
                                            q->ta == OP_N ? q->k : q->m, (int64_t)q->lda));
    LT(mo, what, cublasLtMatrixLayoutCreate(&q->lb, p->dt, q->tb == OP_N ? q->k : q->n,
                                            q->tb == OP_N ? q->n : q->k, (int64_t)q->ldb));
    LT(mo, what, cublasLtMatrixLayoutCreate(&q->ld, p->dt, q->m, q->n, (int64_t)q->ldd));
    cublasLtMatmulPreference_t pref = NULL;
    LT(mo, what, cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t wsb = GPT_CUDA_LT_WORKSPACE;
    const uint32_t al = (uint32_t)q->align;
    cublasLtMatmulPreferenceAttributes_t aa[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
    for (size_t i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, aa[i], &al, sizeof(al));
    cublasLtMatmulHeuristicResult_t res[GPT_CUDA_LT_CANDIDATES];
    int nres = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(p->lt, q->desc, q->la, q->lb, q->ld, q->ld, pref,
                                            GPT_CUDA_LT_CANDIDATES, res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) /* no heuristic for this epilogue and types */
        nres = 0;
    else
        LT(mo, what, st);
    for (int i = 0; i < nres; i++) {
        uint32_t red = 0;
        size_t got = 0;
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > wsb)
            continue;
        LT(mo, what, cublasLtMatmulAlgoConfigGetAttribute(
                         &res[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red),
                         &got));
        if (red != CUBLASLT_REDUCTION_SCHEME_NONE && red != CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
            continue;
        q->algo = res[i].algo;
        q->ws = res[i].workspaceSize;
        q->used = 1;
        return 0;
    }
    q->used = q->none = 1;
    return 0;
}

/*
 * D = epilogue(op(A) op(B) + beta C) by cuBLASLt, every matrix of the model's type,
 * column-major (as gemm_c), C (when beta is not 0) shaped as D; epi CUBLASLT_EPILOGUE_BIAS
 * (bias: m elements, added last), CUBLASLT_EPILOGUE_GELU_AUX_BIAS (bias, aux: the
 * pre-activation written) or CUBLASLT_EPILOGUE_DGELU (aux: the pre-activation read).
 * The algorithm is the heuristic's first for the (shape, epilogue, alignment) the first
 * time it is asked for and the same one after that. Returns 1, having done nothing, when
 * the heuristic has no algorithm for it that lt_plan_make takes (the caller then runs
 * the GEMM and the kernels the epilogue replaces), the same answer every time.
 */
static int lt_gemm(struct dsl_model *mo, const char *what, cublasLtEpilogue_t epi,
                   cublasOperation_t ta, cublasOperation_t tb, size_t m, size_t n, size_t k,
                   const void *A, size_t lda, const void *B, size_t ldb, float beta,
                   const void *C, void *D, size_t ldd, const void *bias, void *aux,
                   size_t ldaux)
{
    struct gpt_cuda *p = mo->impl;
    int dim;
    if (dsl_gemm_dim(m, "m", &dim, mo->err) < 0 || dsl_gemm_dim(n, "n", &dim, mo->err) < 0 ||
        dsl_gemm_dim(k, "k", &dim, mo->err) < 0)
        return DSL_ECONFIG;
    if (!m || !n)
        return 0;
    if (beta == 0.0f)
        C = D;
    const void *ptrs[] = {A, B, C, D, bias, aux};
    struct lt_plan key = {.epi = epi, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda,
                          .ldb = ldb, .ldd = ldd, .ldaux = ldaux, .beta = beta,
                          .align = lt_align(ptrs, sizeof(ptrs) / sizeof(ptrs[0]))};
    struct lt_plan *q = NULL;
    for (size_t i = 0; i < GPT_CUDA_LT_PLANS && !q; i++) {
        struct lt_plan *c = &p->plans[i];
        if (c->used && c->epi == key.epi && c->ta == key.ta && c->tb == key.tb && c->m == m &&
            c->n == n && c->k == k && c->lda == lda && c->ldb == ldb && c->ldd == ldd &&
            c->ldaux == ldaux && c->align == key.align && c->beta == beta)
            q = c;
    }
    if (q && q->none)
        return 1;
    if (q) {
        if (bias)
            LT(mo, what, cublasLtMatmulDescSetAttribute(
                             q->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
        if (aux)
            LT(mo, what, cublasLtMatmulDescSetAttribute(
                             q->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                             sizeof(aux)));
    } else {
        q = &p->plans[p->nplans++ % GPT_CUDA_LT_PLANS];
        lt_plan_free(q);
        *q = key;
        int r = lt_plan_make(mo, what, q, bias, aux);
        if (r < 0) {
            lt_plan_free(q);
            return r;
        }
        if (q->none)
            return 1;
    }
    const float one = 1.0f;
    dsl_gpuprof_launch("launching cublasLtMatmul");
    LT(mo, what, cublasLtMatmul(p->lt, q->desc, &one, A, q->la, B, q->lb, &beta, C, q->ld, D,
                                q->ld, &q->algo, p->ltws, GPT_CUDA_LT_WORKSPACE, p->stream));
    return 0;
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

/* ---- the micro batch ---- */

static int gpt_cuda_upload(struct dsl_model *m, const float *x, size_t B)
{
    struct gpt_cuda *p = m->impl;
    size_t T = p->L.T, V = p->L.V, N = B * T;
    float fV = (float)V;
    if (B > m->max_batch)
        return dsl_seterr(m->err, DSL_EDATA, "gpt: a micro batch of %zu exceeds %zu", B,
                          m->max_batch);
    for (size_t i = 0; i < B * (T + 1); i++)
        if (!(x[i] >= 0.0f && x[i] < fV) || x[i] != floorf(x[i]))
            return dsl_seterr(m->err, DSL_EDATA, "gpt: a sample holds a token id outside "
                              "0..%zu", V - 1);
    if (!B)
        return 0;
    int k = p->slot;
    p->slot ^= 1;
    /* the staging buffer's previous upload must be done; it almost always is */
    cudaError_t q = cudaEventQuery(p->up[k]);
    if (q == cudaErrorNotReady)
        TRY(dsl_model_cuda_wait(m, p->stream));
    else if (q != cudaSuccess)
        CU(m, "checking the upload buffer", q);
    int32_t *inp = p->hids[k], *tgt = inp + N, *tok = tgt + N, *off = tok + N,
            *rows = off + N + 1;
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++) {
            inp[b * T + t] = (int32_t)x[b * (T + 1) + t];
            tgt[b * T + t] = (int32_t)x[b * (T + 1) + t + 1];
        }
    memcpy(p->htgt, tgt, N * sizeof(int32_t));
    /* stable counting sort of the rows by token: rows of one token in row order */
    memset(p->count, 0, (V + 1) * sizeof(int32_t));
    for (size_t i = 0; i < N; i++)
        p->count[inp[i] + 1]++;
    size_t nu = 0;
    for (size_t v = 0; v < V; v++) {
        if (p->count[v + 1]) {
            tok[nu] = (int32_t)v;
            off[nu++] = p->count[v];
        }
        p->count[v + 1] += p->count[v];
    }
    off[nu] = (int32_t)N;
    for (size_t i = 0; i < N; i++)
        rows[p->count[inp[i]]++] = (int32_t)i;
    p->nu = nu;
    CU(m, "uploading the tokens",
       cudaMemcpyAsync(p->ids, inp, (5 * N + 1) * sizeof(int32_t), cudaMemcpyHostToDevice,
                       p->stream));
    CU(m, "recording the upload", cudaEventRecord(p->up[k], p->stream));
    return 0;
}

/* the device copies of the current batch's index arrays (gpt_cuda_upload's layout) */
static int32_t *dev_inp(const struct gpt_cuda *p) { return p->ids; }
static int32_t *dev_tgt(const struct gpt_cuda *p, size_t N) { return p->ids + N; }

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

static int gpt_cuda_forward(struct dsl_model *m, const void *params, size_t B,
                            const struct dsl_grad_sink *sink)
{
    struct gpt_cuda *p = m->impl;
    const struct dsl_gpt_layout *L = &p->L;
    size_t T = L->T, C = L->C, N = B * T;
    need(p, sink, 0);
    MARK(FWD_ELEM);
    CU(m, "launching dsl_k_gpt_encoder",
       dsl_cuda_gpt_encoder(p->stream, p->et, p->enc, dev_inp(p), W(p, params, GPT_WTE),
                            W(p, params, GPT_WPE), N, T, C));
    const void *res = p->enc;
    for (size_t l = 0; l < L->L; l++) {
        need(p, sink, l + 1);
        struct gpt_cuda_block *h = &p->h[l];
#define WB(k) W(p, params, GPT_BLOCK(l, k))
        MARK(FWD_NORM);
        CU(m, "launching dsl_k_gpt_layernorm",
           dsl_cuda_gpt_layernorm(p->stream, p->et, h->ln1, h->ln1m, h->ln1r, res, WB(GPT_LN1_W),
                                  WB(GPT_LN1_B), N, C));
        MARK(FWD_MATMUL); /* the bias broadcast the GEMM accumulates onto with it */
        CU(m, "launching dsl_k_gpt_resbias",
           dsl_cuda_gpt_resbias(p->stream, p->et, h->qkv, NULL, WB(GPT_QKV_B), N, 3 * C));
        TRY(proj_fwd(m, h->ln1, WB(GPT_QKV_W), h->qkv, N, C, 3 * C, 1.0f));
        MARK(FWD_ATTN);
        CU(m, "launching dsl_k_gpt_attn_fwd",
           dsl_cuda_gpt_attention(p->stream, p->et, p->attn_tc, h->atty, h->lse, h->qkv, B, T,
                                  L->NH, C / L->NH));
        MARK(FWD_MATMUL);
        CU(m, "launching dsl_k_gpt_resbias",
           dsl_cuda_gpt_resbias(p->stream, p->et, h->res2, res, WB(GPT_PROJ_B), N, C));
        TRY(proj_fwd(m, h->atty, WB(GPT_PROJ_W), h->res2, N, C, C, 1.0f));
        MARK(FWD_NORM);
        CU(m, "launching dsl_k_gpt_layernorm",
           dsl_cuda_gpt_layernorm(p->stream, p->et, h->ln2, h->ln2m, h->ln2r, h->res2,
                                  WB(GPT_LN2_W), WB(GPT_LN2_B), N, C));
        /* fchg = gelu(ln2 W + b) with fch = ln2 W + b kept for backward: one GEMM with
         * epilogues, or three passes */
        int sep = 1;
        MARK(FWD_MATMUL);
        if (p->lt)
            TRY(sep = lt_gemm(m, "MLP input projection GEMM (bias and GELU epilogue)",
                              CUBLASLT_EPILOGUE_GELU_AUX_BIAS, OP_N, OP_N, 4 * C, N, C,
                              WB(GPT_FC_W), 4 * C, h->ln2, C, 0.0f, NULL, h->fchg, 4 * C,
                              WB(GPT_FC_B), h->fch, 4 * C));
        if (sep) {
            CU(m, "launching dsl_k_gpt_resbias",
               dsl_cuda_gpt_resbias(p->stream, p->et, h->fch, NULL, WB(GPT_FC_B), N, 4 * C));
            TRY(proj_fwd(m, h->ln2, WB(GPT_FC_W), h->fch, N, C, 4 * C, 1.0f));
            MARK(FWD_ELEM);
            CU(m, "launching dsl_k_gpt_gelu",
               dsl_cuda_gpt_gelu(p->stream, p->et, h->fchg, h->fch, N * 4 * C, 0));
        }
        /* res3 = res2 + fchg W + b: one GEMM with a bias epilogue (res2 as C), or the
         * broadcast of res2 + b and a GEMM onto it */
        sep = 1;
        MARK(FWD_MATMUL);
        if (p->lt)
            TRY(sep = lt_gemm(m, "MLP output projection GEMM (bias epilogue)",
                              CUBLASLT_EPILOGUE_BIAS, OP_N, OP_N, C, N, 4 * C, WB(GPT_FCPROJ_W),
                              C, h->fchg, 4 * C, 1.0f, h->res2, h->res3, C, WB(GPT_FCPROJ_B),
                              NULL, 0));
        if (sep) {
            CU(m, "launching dsl_k_gpt_resbias",
               dsl_cuda_gpt_resbias(p->stream, p->et, h->res3, h->res2, WB(GPT_FCPROJ_B), N,
                                    C));
            TRY(proj_fwd(m, h->fchg, WB(GPT_FCPROJ_W), h->res3, N, 4 * C, C, 1.0f));
        }
#undef WB
        res = h->res3;
    }
    need(p, sink, L->L + 1);
    MARK(FWD_NORM);
    CU(m, "launching dsl_k_gpt_layernorm",
       dsl_cuda_gpt_layernorm(p->stream, p->et, p->lnf, p->lnfm, p->lnfr, res,
                              W(p, params, GPT_LNF_W(L->L)), W(p, params, GPT_LNF_B(L->L)), N,
                              C));
    return 0;
}

/* logits, loss and (backward) dC = d lnf and dwte (the head's part, fp32), by chunks */
static int gpt_cuda_head(struct dsl_model *m, const void *params, size_t B, int backward,
                         float scale)
{
    struct gpt_cuda *p = m->impl;
    const struct dsl_gpt_layout *L = &p->L;
    size_t C = L->C, V = L->V, Vp = p->Vp, N = B * L->T;
    const void *wte = W(p, params, GPT_WTE);
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
        TRY(gemm_c(m, "LM head weight gradient GEMM", OP_N, OP_T, C, V, rows, x, C, p->logits,
                   Vp, r0 ? 1.0f : 0.0f, p->dwte, C, 1));
    }
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

static int gpt_cuda_backward(struct dsl_model *m, const void *params, size_t B,
                             const struct dsl_grad_sink *sink)
{
    struct gpt_cuda *p = m->impl;
    const struct dsl_gpt_layout *L = &p->L;
    size_t T = L->T, C = L->C, N = B * T, nL = L->L;
    CU(m, "clearing the residual gradient",
       cudaMemsetAsync(p->dres, 0, N * C * p->esz, p->stream));
    const void *last = p->h[nL - 1].res3;
    TRY(ln_backward(m, sink, GPT_LNF_W(nL), GPT_LNF_B(nL), p->dres, p->dC, last,
                    W(p, params, GPT_LNF_W(nL)), p->lnfm, p->lnfr, N));
    for (size_t l = nL; l-- > 0;) {
        struct gpt_cuda_block *h = &p->h[l];
        const void *res = l ? p->h[l - 1].res3 : p->enc;
#define WB(k) W(p, params, GPT_BLOCK(l, k))
#define TI(k) GPT_BLOCK(l, k)
        /* the MLP's output projection: dres is the gradient of res3 */
        TRY(deliver_bias(m, sink, TI(GPT_FCPROJ_B), p->dres, N));
        TRY(deliver_weight(m, sink, TI(GPT_FCPROJ_W), h->fchg, p->dres, N));
        /* d4C = (dres W^T) gelu'(fch): one GEMM with an epilogue, or two passes */
        int sep = 1;
        MARK(BWD_MATMUL);
        if (p->lt)
            TRY(sep = lt_gemm(m, "MLP output projection input gradient GEMM (GELU gradient "
                              "epilogue)", CUBLASLT_EPILOGUE_DGELU, OP_T, OP_N, 4 * C, N, C,
                              WB(GPT_FCPROJ_W), C, p->dres, C, 0.0f, NULL, p->d4C, 4 * C,
                              NULL, h->fch, 4 * C));
        if (sep) {
            TRY(proj_bwd(m, p->dres, WB(GPT_FCPROJ_W), p->d4C, N, 4 * C, C));
            MARK(BWD_ELEM);
            CU(m, "launching dsl_k_gpt_gelu (backward)",
               dsl_cuda_gpt_gelu(p->stream, p->et, p->d4C, h->fch, N * 4 * C, 1));
        }
        /* the MLP's input projection */
        TRY(deliver_bias(m, sink, TI(GPT_FC_B), p->d4C, N));
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

/* ---- the ops table ---------------------------------------------------------------- */

static int gpt_cuda_stats(struct dsl_model *m, size_t B, const struct dsl_grad_sink *sink,
                          struct dsl_model_stats *st)
{
    struct gpt_cuda *p = m->impl;
    size_t T = p->L.T, N = B * T;
    st->loss_sum = 0.0;
    st->correct = 0;
    st->deferred = 0;
    if (sink && sink->dev_stats) {
        MARK(HEAD);
        if (B)
            CU(m, "launching dsl_k_gpt_loss_stats",
               dsl_cuda_gpt_loss_stats(p->stream, p->rowloss, p->rowarg, dev_tgt(p, N), B, T,
                                       sink->dev_stats, sink->dev_stats_stride));
        else
            CU(m, "cudaMemsetAsync",
               cudaMemsetAsync(sink->dev_stats, 0, sizeof(float), p->stream));
        st->deferred = 1;
        return 0;
    }
    if (!B)
        return 0;
    CU(m, "copying the losses", cudaMemcpyAsync(p->hloss, p->rowloss, N * sizeof(float),
                                                cudaMemcpyDeviceToHost, p->stream));
    CU(m, "copying the predictions", cudaMemcpyAsync(p->harg, p->rowarg, N * sizeof(int32_t),
                                                     cudaMemcpyDeviceToHost, p->stream));
    TRY(dsl_model_cuda_wait(m, p->stream));
    /* as model_gpt.c's gpt_stats */
    for (size_t b = 0; b < B; b++) {
        double s = 0.0;
        for (size_t t = 0; t < T; t++)
            s += (double)p->hloss[b * T + t];
        st->loss_sum += s / (double)T;
        st->correct += p->harg[b * T + T - 1] == p->htgt[b * T + T - 1];
    }
    return 0;
}

static int gpt_cuda_init_params(struct dsl_model *m, float *params, uint64_t seed)
{
    struct gpt_cuda *p = m->impl;
    float *h = malloc(m->nparams * sizeof(float));
    if (!h)
        return dsl_seterr(m->err, -ENOMEM, "cannot allocate %zu bytes for the initial "
                          "parameters", m->nparams * sizeof(float));
    dsl_gpt_layout_init(&p->L, h, seed);
    /* from pageable memory the data is staged before the call returns: h may go */
    cudaError_t e = cudaMemcpyAsync(params, h, m->nparams * sizeof(float),
                                    cudaMemcpyHostToDevice, p->stream);
    free(h);
    CU(m, "copying the initial parameters", e);
    return 0;
}

/* an empty micro batch: zero gradients, in order */
static int zero_grads(struct dsl_model *m, const struct dsl_grad_sink *sink)
{
    struct gpt_cuda *p = m->impl;
    for (size_t s = 0; s < m->nsegs; s++) {
        void *dst = sink->dest(sink->ctx, s);
        CU(m, "cudaMemsetAsync", cudaMemsetAsync(dst, 0, m->segs[s].len * p->esz, p->stream));
        sink->done(sink->ctx, s);
    }
    return 0;
}

static int gpt_cuda_forward_backward(struct dsl_model *m, const float *params, const float *x,
                                     const int32_t *y, size_t n, float loss_scale,
                                     const struct dsl_grad_sink *sink,
                                     struct dsl_model_stats *st)
{
    (void)y;
    TRY(gpt_cuda_upload(m, x, n));
    if (!n) {
        TRY(zero_grads(m, sink));
        return gpt_cuda_stats(m, 0, sink, st);
    }
    TRY(gpt_cuda_forward(m, params, n, sink));
    TRY(gpt_cuda_head(m, params, n, 1, loss_scale));
    TRY(gpt_cuda_stats(m, n, sink, st));
    return gpt_cuda_backward(m, params, n, sink);
}

static int gpt_cuda_evaluate(struct dsl_model *m, const float *params, const float *x,
                             const int32_t *y, size_t n, struct dsl_model_stats *st)
{
    (void)y;
    TRY(gpt_cuda_upload(m, x, n));
    if (n) {
        TRY(gpt_cuda_forward(m, params, n, NULL));
        TRY(gpt_cuda_head(m, params, n, 0, 1.0f));
    }
    return gpt_cuda_stats(m, n, NULL, st);
}

static void gpt_cuda_release(struct dsl_model *m)
{
    struct gpt_cuda *p = m->impl;
    if (!p)
        return;
    void *dev[] = {p->ids, p->enc, p->lnf, p->logits, p->dres, p->dC, p->d3C, p->d4C, p->g1,
                   p->g2, p->lnfm, p->lnfr, p->rowloss, p->dwte, p->dwpe, p->part, p->rowd,
                   p->rowarg, p->ltws};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        cudaFree(dev[i]);
    for (size_t l = 0; l < p->L.L; l++) {
        struct gpt_cuda_block *h = &p->h[l];
        void *b[] = {h->ln1, h->qkv, h->atty, h->res2, h->ln2, h->fch, h->fchg, h->res3,
                     h->ln1m, h->ln1r, h->ln2m, h->ln2r, h->lse};
        for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++)
            cudaFree(b[i]);
    }
    for (int k = 0; k < 2; k++) {
        if (p->hids[k])
            cudaFreeHost(p->hids[k]);
        if (p->up[k])
            cudaEventDestroy(p->up[k]);
    }
    if (p->hloss)
        cudaFreeHost(p->hloss);
    if (p->harg)
        cudaFreeHost(p->harg);
    free(p->count);
    free(p->htgt);
    if (p->blas)
        cublasDestroy(p->blas);
    for (size_t i = 0; i < GPT_CUDA_LT_PLANS; i++)
        lt_plan_free(&p->plans[i]);
    if (p->lt)
        cublasLtDestroy(p->lt);
    free(p);
    m->impl = NULL;
}

static const struct dsl_model_ops gpt_cuda_ops = {
    .name = "gpt",
    .init_params = gpt_cuda_init_params,
    .forward_backward = gpt_cuda_forward_backward,
    .evaluate = gpt_cuda_evaluate,
    .release = gpt_cuda_release,
};

static void *dev_alloc(size_t bytes, size_t *total, int *fail)
{
    void *v = NULL;
    *total += bytes;
    if (*fail)
        return NULL;
    if (cudaMalloc(&v, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        *fail = 1;
        return NULL;
    }
    return v;
}

static void *host_alloc(size_t bytes, size_t *total, int *fail)
{
    void *v = NULL;
    *total += bytes;
    if (*fail)
        return NULL;
    if (cudaMallocHost(&v, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        *fail = 1;
        return NULL;
    }
    return v;
}

/* the message formatted before the model (whose state it may quote) is released */
__attribute__((format(printf, 4, 5))) static int create_fail(struct dsl_model *m, char *err,
                                                              int code, const char *fmt, ...)
{
    char text[DSL_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    dsl_model_release(m);
    return dsl_seterr(err, code, "%s", text);
}

int dsl_gpt_create_cuda(struct dsl_model *m, const struct dsl_model_spec *spec, char *err)
{
    struct dsl_gpt_layout lay;
    int r = dsl_gpt_layout_build(&lay, m, spec, err);
    if (r < 0)
        return r;
    struct gpt_cuda *p = dsl_xcalloc(1, sizeof(*p));
    p->L = lay;
    p->m = m;
    m->ops = &gpt_cuda_ops;
    m->impl = p;
    m->on_device = 1;
    m->dtype = spec->dtype;
    p->et = spec->dtype == DSL_BFLOAT16 ? DSL_CUDA_BF16
            : spec->dtype == DSL_FLOAT16 ? DSL_CUDA_FP16
                                         : DSL_CUDA_FP32;
    p->esz = p->et == DSL_CUDA_FP32 ? sizeof(float) : 2;
    p->dt = p->et == DSL_CUDA_BF16 ? CUDA_R_16BF : p->et == DSL_CUDA_FP16 ? CUDA_R_16F
                                                                           : CUDA_R_32F;
    p->stream = (cudaStream_t)spec->stream;
    m->stream = spec->stream;

    size_t B = spec->max_batch, T = lay.T, C = lay.C, V = lay.V, NH = lay.NH, N = B * T;
    /* the fused attention's head sizes; every GEMM size must fit cuBLAS's int and the
     * (sample, head) pairs the attention grid's x: refuse the model now, not mid-step */
    if (C / NH > DSL_CUDA_GPT_MAX_HEAD) {
        dsl_model_release(m);
        return dsl_seterr(err, DSL_ECONFIG, "gpt: head size %zu (dim %zu / %zu heads) is above "
                          "the GPU attention's %d; use more heads", C / NH, C, NH,
                          DSL_CUDA_GPT_MAX_HEAD);
    }
    {
        /* the attention's kernels: on tensor cores where the device has them for the
         * 16-bit type (bf16 sm_80+, fp16 sm_70+), else the scalar fp32 ones;
         * DSL_GPT_ATTENTION=scalar or =tensor picks one (a GPU session's A/B; tensor
         * refuses a model it cannot serve) */
        const char *want = getenv("DSL_GPT_ATTENTION");
        cudaError_t ce = dsl_cuda_gpt_attention_tc(p->et, &p->attn_tc);
        if (ce != cudaSuccess) {
            (void)cudaGetLastError();
            return create_fail(m, err, DSL_EREMOTE,
                               "cuda: cannot read the attention kernels' architecture: %s",
                               cudaGetErrorString(ce));
        }
        if (want && *want && strcmp(want, "auto") != 0) {
            if (strcmp(want, "scalar") == 0) {
                p->attn_tc = 0;
            } else if (strcmp(want, "tensor") != 0) {
                dsl_model_release(m);
                return dsl_seterr(err, DSL_ECONFIG, "gpt: DSL_GPT_ATTENTION '%s' is none of "
                                  "auto, scalar, tensor", want);
            } else if (!p->attn_tc) {
                dsl_model_release(m);
                return dsl_seterr(err, DSL_ECONFIG, "gpt: DSL_GPT_ATTENTION=tensor: the "
                                  "tensor-core attention needs bf16 (sm_80+) or fp16 (sm_70+), "
                                  "not %s on this device", p->et == DSL_CUDA_FP32 ? "fp32"
                                  : p->et == DSL_CUDA_BF16 ? "bf16" : "fp16");
            }
        }
    }
    {
        /* the attention's shared memory per block (above 48 KiB for heads above 64 at
         * least in dk/dv): within the device's opt-in limit, and opted in */
        int dev = 0, avail = 0;
        size_t need = dsl_cuda_gpt_attention_smem(C / NH, p->attn_tc);
        cudaError_t ce = cudaGetDevice(&dev);
        if (ce == cudaSuccess)
            ce = cudaDeviceGetAttribute(&avail, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        if (ce != cudaSuccess) {
            (void)cudaGetLastError();
            return create_fail(m, err, DSL_EREMOTE,
                               "cuda: cannot read the device's shared memory limit: %s",
                               cudaGetErrorString(ce));
        }
        if (need > (size_t)avail) {
            dsl_model_release(m);
            return dsl_seterr(err, DSL_ECONFIG, "gpt: head size %zu (dim %zu / %zu heads) needs "
                              "%zu bytes of shared memory per block for the GPU attention; "
                              "device %d allows %d; use more heads", C / NH, C, NH, need, dev,
                              avail);
        }
        if ((ce = dsl_cuda_gpt_attention_setup(p->et, C / NH, p->attn_tc)) != cudaSuccess) {
            (void)cudaGetLastError();
            return create_fail(m, err, DSL_EREMOTE,
                               "cuda: cannot give the attention kernels %zu bytes of shared "
                               "memory: %s",
                               need, cudaGetErrorString(ce));
        }
    }
    {
        int dim;
        size_t sizes[] = {N, 4 * C, V + GPT_CUDA_VOCAB_PAD, B * NH, V * C};
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
            if ((r = dsl_gemm_dim(sizes[i], "GPT dimension", &dim, err)) < 0) {
                dsl_model_release(m);
                return r;
            }
        if (5 * N + 1 > 0x7fffffff) {
            dsl_model_release(m);
            return dsl_seterr(err, DSL_ECONFIG, "gpt: a micro batch of %zu x %zu tokens is "
                              "too large for the GPU's int32 row indices", B, T);
        }
    }
    cublasStatus_t bs = cublasCreate(&p->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        p->blas = NULL;
        return create_fail(m, err, bs == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : DSL_EREMOTE,
                           "cublas: cannot create a handle: %s", cublasGetStatusString(bs));
    }
    if ((bs = cublasSetStream(p->blas, p->stream)) != CUBLAS_STATUS_SUCCESS) {
        return create_fail(m, err, DSL_EREMOTE, "cublas: cannot set the stream: %s",
                           cublasGetStatusString(bs));
    }
    /* fp32 without TF32 (the CPU model is the reference); 16-bit on tensor cores with
     * fp32 accumulation and no reduced-precision split-K reductions */
    if ((bs = cublasSetMathMode(p->blas, CUBLAS_DEFAULT_MATH |
                                             CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) !=
        CUBLAS_STATUS_SUCCESS) {
        return create_fail(m, err, DSL_EREMOTE, "cublas: cannot set the math mode: %s",
                           cublasGetStatusString(bs));
    }

    /* the MLP's bias, GELU and GELU gradient as cuBLASLt epilogues in 16-bit (fp32 keeps
     * the kernels with the CPU's tanh); its aux matrix needs a leading dimension 4C that
     * is a multiple of 8 */
    if (p->et != DSL_CUDA_FP32 && (4 * C) % 8 == 0) {
        if ((bs = cublasLtCreate(&p->lt)) != CUBLAS_STATUS_SUCCESS) {
            p->lt = NULL;
            return create_fail(m, err,
                               bs == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : DSL_EREMOTE,
                               "cublasLt: cannot create a handle: %s", cublasGetStatusString(bs));
        }
    }

    p->Vp = (V + GPT_CUDA_VOCAB_PAD - 1) / GPT_CUDA_VOCAB_PAD * GPT_CUDA_VOCAB_PAD;
    p->R = GPT_CUDA_LOGIT_BUDGET / p->Vp;
    p->R = p->R < 1 ? 1 : p->R > N ? N : p->R;
    size_t e = p->esz, BHT = B * NH * T, total = 0, nk = dsl_cuda_gpt_colsum_chunks(N);
    int fail = 0;
    p->ids = dev_alloc((5 * N + 1) * sizeof(int32_t), &total, &fail);
    p->enc = dev_alloc(N * C * e, &total, &fail);
    p->lnf = dev_alloc(N * C * e, &total, &fail);
    p->logits = dev_alloc(p->R * p->Vp * e, &total, &fail);
    p->dres = dev_alloc(N * C * e, &total, &fail);
    p->dC = dev_alloc(N * C * e, &total, &fail);
    p->d3C = dev_alloc(3 * N * C * e, &total, &fail);
    p->d4C = dev_alloc(4 * N * C * e, &total, &fail);
    p->rowd = dev_alloc(BHT * sizeof(float), &total, &fail);
    p->g1 = dev_alloc(C * e, &total, &fail);
    p->g2 = dev_alloc(C * e, &total, &fail);
    p->lnfm = dev_alloc(N * sizeof(float), &total, &fail);
    p->lnfr = dev_alloc(N * sizeof(float), &total, &fail);
    p->rowloss = dev_alloc(N * sizeof(float), &total, &fail);
    p->rowarg = dev_alloc(N * sizeof(int32_t), &total, &fail);
    p->dwte = dev_alloc(V * C * sizeof(float), &total, &fail);
    p->dwpe = dev_alloc(T * C * sizeof(float), &total, &fail);
    p->part = dev_alloc(2 * (nk ? nk : 1) * 4 * C * sizeof(float), &total, &fail);
    if (p->lt)
        p->ltws = dev_alloc(GPT_CUDA_LT_WORKSPACE, &total, &fail);
    for (size_t l = 0; l < lay.L; l++) {
        struct gpt_cuda_block *h = &p->h[l];
        h->ln1 = dev_alloc(N * C * e, &total, &fail);
        h->qkv = dev_alloc(3 * N * C * e, &total, &fail);
        h->lse = dev_alloc(BHT * sizeof(float), &total, &fail);
        h->atty = dev_alloc(N * C * e, &total, &fail);
        h->res2 = dev_alloc(N * C * e, &total, &fail);
        h->ln2 = dev_alloc(N * C * e, &total, &fail);
        h->fch = dev_alloc(4 * N * C * e, &total, &fail);
        h->fchg = dev_alloc(4 * N * C * e, &total, &fail);
        h->res3 = dev_alloc(N * C * e, &total, &fail);
        h->ln1m = dev_alloc(N * sizeof(float), &total, &fail);
        h->ln1r = dev_alloc(N * sizeof(float), &total, &fail);
        h->ln2m = dev_alloc(N * sizeof(float), &total, &fail);
        h->ln2r = dev_alloc(N * sizeof(float), &total, &fail);
    }
    size_t htotal = 0;
    for (int k = 0; k < 2; k++) {
        p->hids[k] = host_alloc((5 * N + 1) * sizeof(int32_t), &htotal, &fail);
        if (!fail && cudaEventCreateWithFlags(&p->up[k], cudaEventDisableTiming) != cudaSuccess)
            p->up[k] = NULL, fail = 1;
    }
    p->hloss = host_alloc(N * sizeof(float), &htotal, &fail);
    p->harg = host_alloc(N * sizeof(int32_t), &htotal, &fail);
    p->count = calloc(V + 1, sizeof(int32_t));
    p->htgt = calloc(N ? N : 1, sizeof(int32_t));
    if (fail || !p->count || !p->htgt) {
        (void)cudaGetLastError();
        return create_fail(m, err, -ENOMEM,
                           "gpt: cannot allocate %zu MiB of GPU workspace (and %zu MiB of "
                           "page-locked host memory) for a micro batch of %zu x %zu tokens",
                           total >> 20, htotal >> 20, B, T);
    }
    return 0;
}
