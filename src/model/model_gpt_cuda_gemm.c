/*
 * The CUDA GPT's matrix products (model_gpt_cuda.h): cublasGemmEx for the plain ones and
 * cublasLtMatmul for those with an epilogue, each (shape, epilogue, operand alignment)
 * planned once and kept.
 *
 * Theory of operation. Both run in the caller's thread on the model's stream (the
 * handles are bound to it at creation), with fp32 compute for every element type.
 * dsl_gpt_gemm_lt looks its product up among the last GPT_CUDA_LT_PLANS plans; a new
 * one gets its descriptors, layouts and the heuristic's first algorithm that fits the
 * fixed workspace and reduces split-K partial products, if at all, in fp32, so the bits
 * never depend on free memory or on when a shape was first seen. A plan without such an
 * algorithm is kept too and answers 1, every time: the caller runs the GEMM and the
 * kernels the epilogue would have replaced. model_gpt_cuda.c's "Epilogues" says which
 * products take which epilogue and how their roundings differ from the kernels'.
 * Not thread-safe (one workspace); errors go to the model's err.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/gpuprof.h"
#include "dslaunch/model/model.h"
#include "dslaunch/device/gemm_dims.h"
#include "model_cuda_impl.h"
#include "model_gpt_cuda.h"
#include "dslaunch/common/banned.h"

int dsl_gpt_gemm_run(struct dsl_model *mo, const char *what, cublasOperation_t ta,
                     cublasOperation_t tb, size_t m, size_t n, size_t k, const void *A,
                     size_t lda, const void *B, size_t ldb, float beta, void *C, size_t ldc,
                     int c32)
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
int dsl_gpt_gemm_lt(struct dsl_model *mo, const char *what, cublasLtEpilogue_t epi,
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

void dsl_gpt_gemm_release(struct gpt_cuda *p)
{
    for (size_t i = 0; i < GPT_CUDA_LT_PLANS; i++)
        lt_plan_free(&p->plans[i]);
}
