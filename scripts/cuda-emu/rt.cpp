/*
 * The runtime side of the CPU emulation (emu.h): the block scheduler, and host-memory
 * versions of the CUDA runtime, cuBLAS and cuBLASLt calls that model_gpt_cuda.c and
 * model_mlp_cuda.c make (device memory is host memory, streams and events complete at
 * once, cublasGemmEx and cublasSgemm a reference column-major GEMM accumulating in
 * double and rounding to the output type once). dsl_cuda_to_half is device_kernels.cu's
 * conversion as a loop. A launch the GPU would refuse
 * (dynamic shared memory above the kernel's limit) runs nothing and leaves its error for
 * cudaGetLastError, as there. cudaFuncGetAttributes gives every kernel the binary
 * version EMU_CC (default 90: sm_90), which picks the GPT attention's kernels.
 */
#include "emu.h"
#include <cublas_v2.h>
#include <stdlib.h>
#include <stdio.h>
#include <map>
#include <vector>
thread_local emu_ctx emu_c;
std::barrier<> *emu_block_bar;
std::barrier<> *emu_warp_bar[32];
unsigned long long emu_xch[1024];
void *emu_dyn_smem;
static cudaError_t emu_err; /* the last launch's error, for cudaGetLastError */
static std::map<const void *, int> emu_smem_max; /* cudaFuncSetAttribute's, per kernel */
static int emu_smem_optin()
{
    const char *e = getenv("EMU_SMEM_OPTIN");
    return e ? atoi(e) : 232448; /* sm_90: 227 KiB */
}
void emu_run(dim3 g, dim3 b, size_t shm, const void *kernel, std::function<void()> f)
{
    unsigned nt = b.x * b.y * b.z;
    /* whole warps, or one thread (device_kernels.cu's scalars_finish: no warp calls) */
    if (nt % 32 && nt != 1) { fprintf(stderr, "emu: block of %u threads\n", nt); abort(); }
    auto lim = emu_smem_max.find(kernel);
    if (shm > (size_t)(lim == emu_smem_max.end() ? 48 * 1024 : lim->second)) {
        emu_err = cudaErrorInvalidValue;
        return;
    }
    emu_dyn_smem = aligned_alloc(128, (shm + 127) / 128 * 128 + 128); /* as a GPU's: aligned */
    memset(emu_dyn_smem, 0xff, shm); /* NaN floats: a read before a write shows */
    std::barrier<> bb(nt);
    std::vector<std::barrier<> *> wb;
    for (unsigned w = 0; w < nt / 32; w++) wb.push_back(new std::barrier<>(32));
    emu_block_bar = &bb;
    for (unsigned w = 0; w < nt / 32; w++) emu_warp_bar[w] = wb[w];
    std::vector<std::thread> th;
    for (unsigned t = 0; t < nt; t++)
        th.emplace_back([&, t] {
            emu_c.bd = b; emu_c.gd = g;
            emu_c.t = make_uint3(t % b.x, (t / b.x) % b.y, t / (b.x * b.y));
            for (unsigned z = 0; z < g.z; z++)
                for (unsigned y = 0; y < g.y; y++)
                    for (unsigned x = 0; x < g.x; x++) {
                        emu_c.b = make_uint3(x, y, z);
                        f();
                        bb.arrive_and_wait();
                    }
        });
    for (auto &x : th) x.join();
    for (auto *w : wb) delete w;
    free(emu_dyn_smem);
    emu_dyn_smem = NULL;
}
extern "C" {
cudaError_t cudaMalloc(void **p, size_t n) { *p = calloc(1, n ? n : 1); memset(*p, 0x7f, n); return cudaSuccess; }
cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMallocHost(void **p, size_t n) { *p = malloc(n ? n : 1); return cudaSuccess; }
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) { memmove(d, s, n); return cudaSuccess; }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) { memmove(d, s, n); return cudaSuccess; }
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) { memset(d, v, n); return cudaSuccess; }
cudaError_t cudaMemset(void *d, int v, size_t n) { memset(d, v, n); return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { *e = (cudaEvent_t)malloc(1); return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { cudaError_t e = emu_err; emu_err = cudaSuccess; return e; }
cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int)
{
    if (a != cudaDevAttrMaxSharedMemoryPerBlockOptin) return cudaErrorInvalidValue;
    *v = emu_smem_optin();
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *k, cudaFuncAttribute a, int v)
{
    if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || v < 0 || v > emu_smem_optin())
        return cudaErrorInvalidValue;
    emu_smem_max[k] = v;
    return cudaSuccess;
}
/* the architecture of every kernel's binary: EMU_CC (e.g. 75 for sm_75), default 90 */
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, const void *)
{
    const char *e = getenv("EMU_CC");
    memset(a, 0, sizeof(*a));
    a->binaryVersion = a->ptxVersion = e ? atoi(e) : 90;
    return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t e) { return e == cudaErrorInvalidValue ? "invalid argument" : "emu"; }
cublasStatus_t cublasCreate_v2(cublasHandle_t *h) { *h = (cublasHandle_t)malloc(1); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { free(h); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusString(cublasStatus_t) { return "emu"; }
}
static float ld(const void *p, cudaDataType_t t, size_t i)
{
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return __half2float(((const __half *)p)[i]);
}
static void st(void *p, cudaDataType_t t, size_t i, float v)
{
    if (t == CUDA_R_32F) ((float *)p)[i] = v;
    else if (t == CUDA_R_16BF) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else ((__half *)p)[i] = __float2half_rn(v);
}
static void gemm1(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float al,
                  const void *A, cudaDataType_t at, int lda, const void *B, cudaDataType_t bt,
                  int ldb, float be, void *C, cudaDataType_t ct, int ldc)
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                float a = ta == CUBLAS_OP_N ? ld(A, at, (size_t)i + (size_t)p * lda) : ld(A, at, (size_t)p + (size_t)i * lda);
                float b = tb == CUBLAS_OP_N ? ld(B, bt, (size_t)p + (size_t)j * ldb) : ld(B, bt, (size_t)j + (size_t)p * ldb);
                s += (double)a * b;
            }
            float c = be != 0.0f ? ld(C, ct, (size_t)i + (size_t)j * ldc) : 0.0f;
            st(C, ct, (size_t)i + (size_t)j * ldc, (float)(al * s + (double)be * c));
        }
}
static size_t esize(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
/* EMU_GEMM_ALIGN=BYTES: a GEMM with a matrix pointer or leading dimension that is not a
 * multiple of BYTES (16: what cuBLAS's fast kernels want) aborts, naming the operand */
static void check_align(const char *what, const void *p, cudaDataType_t t, long ld)
{
    const char *e = getenv("EMU_GEMM_ALIGN");
    size_t a = e ? (size_t)atoi(e) : 0;
    if (!a) return;
    if ((uintptr_t)p % a || (size_t)ld * esize(t) % a) {
        fprintf(stderr, "emu: GEMM operand %s at %p with leading dimension %ld (%zu-byte "
                "elements) is not %zu-byte aligned\n", what, p, ld, esize(t), a);
        abort();
    }
}
extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void *al, const void *A, cudaDataType_t at, int lda, const void *B, cudaDataType_t bt, int ldb,
    const void *be, void *C, cudaDataType_t ct, int ldc, cublasComputeType_t, cublasGemmAlgo_t)
{
    check_align("A", A, at, lda);
    check_align("B", B, bt, ldb);
    check_align("C", C, ct, ldc);
    gemm1(ta, tb, m, n, k, *(const float *)al, A, at, lda, B, bt, ldb, *(const float *)be, C, ct, ldc);
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" cudaError_t dsl_cuda_to_half(cudaStream_t, int bf16, void *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) st(dst, bf16 ? CUDA_R_16BF : CUDA_R_16F, i, src[i]);
    return cudaSuccess;
}
extern "C" cublasStatus_t cublasSgemm_v2(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
    int n, int k, const float *al, const float *A, int lda, const float *B, int ldb, const float *be,
    float *C, int ldc)
{
    gemm1(ta, tb, m, n, k, *al, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, *be, C, CUDA_R_32F, ldc);
    return CUBLAS_STATUS_SUCCESS;
}
/* no device unless EMU_DEVICES says (the multi-rank test's probe: cuda_worlds) */
extern "C" cudaError_t cudaGetDeviceCount(int *n)
{
    const char *e = getenv("EMU_DEVICES");
    *n = e ? atoi(e) : 0;
    return cudaSuccess;
}
/*
 * cuBLASLt, the subset model_gpt_cuda.c uses: matmul descriptors (fp32 compute and scale;
 * transposes, the epilogue, bias and aux pointers, aux leading dimension), matrix
 * layouts, preferences (workspace, reduction schemes, alignments), a heuristic that
 * returns four algorithms (see emu_lt_schemes), and cublasLtMatmul as the reference GEMM
 * above plus the epilogue in fp32: the product alpha op(A) op(B) + beta C accumulated in double and rounded to
 * fp32 once; BIAS adds the bias (D's type, widened) in fp32; GELU_AUX_BIAS stores the
 * fp32 pre-activation rounded to the aux type (D's) as aux and D = GELU of the unrounded
 * fp32 value, rounded once; DGELU multiplies the fp32 product by GELU's derivative at aux
 * (widened) and rounds once; DGELU_BGRAD does that and writes, through the bias pointer
 * in D's type, each row's sum over D's columns of those fp32 gradients (summed in double,
 * rounded once), the bias gradient the header documents. GELU is the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi)
 * (x + 0.044715 x^3))) with libm's tanhf, deliberately not the model's rational tanh:
 * the library's own tanh is undocumented, so the model must agree with the oracle within
 * the tests' tolerances whatever tanh it uses. Attributes, epilogues or types outside the
 * subset abort, as does an aux leading dimension cuBLASLt documents as invalid.
 */
#include <cublasLt.h>
struct emu_lt_desc {
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    uint32_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
    void *aux = nullptr;
    int64_t auxld = 0;
};
struct emu_lt_layout { cudaDataType_t t; uint64_t rows, cols; int64_t ld; };
static void lt_die(const char *what, long v)
{
    fprintf(stderr, "emu: cuBLASLt %s %ld is not emulated\n", what, v);
    abort();
}
static emu_lt_desc *D_(cublasLtMatmulDesc_t d) { return reinterpret_cast<emu_lt_desc *>(d); }
static emu_lt_layout *L_(cublasLtMatrixLayout_t l) { return reinterpret_cast<emu_lt_layout *>(l); }
extern "C" {
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = (cublasLtHandle_t)malloc(1); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { free(h); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct, cudaDataType_t st)
{
    if (ct != CUBLAS_COMPUTE_32F) lt_die("compute type", ct);
    if (st != CUDA_R_32F) lt_die("scale type", st);
    *d = reinterpret_cast<cublasLtMatmulDesc_t>(new emu_lt_desc);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete D_(d); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                              const void *buf, size_t n)
{
    emu_lt_desc *x = D_(d);
    size_t want = a == CUBLASLT_MATMUL_DESC_TRANSA || a == CUBLASLT_MATMUL_DESC_TRANSB ? sizeof(int32_t)
                  : a == CUBLASLT_MATMUL_DESC_EPILOGUE ? sizeof(uint32_t)
                  : a == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD ? sizeof(int64_t)
                  : sizeof(void *);
    if (!buf || n != want) return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: { int32_t v; memcpy(&v, buf, n); x->ta = (cublasOperation_t)v; break; }
    case CUBLASLT_MATMUL_DESC_TRANSB: { int32_t v; memcpy(&v, buf, n); x->tb = (cublasOperation_t)v; break; }
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        memcpy(&x->epi, buf, n);
        if (x->epi != CUBLASLT_EPILOGUE_DEFAULT && x->epi != CUBLASLT_EPILOGUE_BIAS &&
            x->epi != CUBLASLT_EPILOGUE_GELU_AUX_BIAS && x->epi != CUBLASLT_EPILOGUE_DGELU &&
            x->epi != CUBLASLT_EPILOGUE_DGELU_BGRAD)
            lt_die("epilogue", x->epi);
        break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: memcpy(&x->bias, buf, n); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: memcpy(&x->aux, buf, n); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: memcpy(&x->auxld, buf, n); break;
    default: lt_die("matmul descriptor attribute", a);
    }
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows,
                                          uint64_t cols, int64_t ld)
{
    if (t != CUDA_R_32F && t != CUDA_R_16BF && t != CUDA_R_16F) lt_die("data type", t);
    if (ld < (int64_t)rows) return CUBLAS_STATUS_INVALID_VALUE;
    *l = reinterpret_cast<cublasLtMatrixLayout_t>(new emu_lt_layout{t, rows, cols, ld});
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete L_(l); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = (cublasLtMatmulPreference_t)malloc(1);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { free(p); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *buf, size_t n)
{
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return buf && n == sizeof(uint64_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    if (a == CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK || a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES ||
        a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES || a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES ||
        a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
        return buf && n == sizeof(uint32_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    lt_die("preference attribute", a);
    return CUBLAS_STATUS_INVALID_VALUE;
}
/* The heuristic's candidates, best first: split-K reducing in the output type, in place
 * (in the output type too), then in fp32, then no split; the algorithm's data[0] holds
 * its reduction scheme, and cublasLtMatmul refuses the two 16-bit ones, so a caller that
 * takes the first candidate without looking at its scheme fails here. With
 * EMU_LT_16BIT_REDUCTIONS_ONLY=1 only those two are offered. */
static const uint32_t emu_lt_schemes[] = {CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE,
                                          CUBLASLT_REDUCTION_SCHEME_INPLACE,
                                          CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                                          CUBLASLT_REDUCTION_SCHEME_NONE};
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int req,
                                              cublasLtMatmulHeuristicResult_t r[], int *ret)
{
    if (req <= 0) return CUBLAS_STATUS_INVALID_VALUE;
    /* EMU_LT_16BIT_REDUCTIONS_ONLY=1: only the two candidates a caller must refuse */
    const char *e = getenv("EMU_LT_16BIT_REDUCTIONS_ONLY");
    int avail = e && atoi(e) ? 2 : 4;
    int n = req < avail ? req : avail;
    for (int i = 0; i < n; i++) {
        memset(&r[i], 0, sizeof(r[i]));
        r[i].algo.data[0] = emu_lt_schemes[i];
        r[i].state = CUBLAS_STATUS_SUCCESS;
        r[i].wavesCount = 1.0f;
    }
    *ret = n;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t *algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t a, void *buf,
                                                    size_t n, size_t *written)
{
    if (a != CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) lt_die("algorithm configuration attribute", a);
    if (!buf || n != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
    uint32_t v = (uint32_t)algo->data[0];
    memcpy(buf, &v, n);
    if (written) *written = n;
    return CUBLAS_STATUS_SUCCESS;
}
}
static float gelu_tanh(float x)
{
    const float s = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(s * (x + 0.044715f * x * x * x)));
}
static float dgelu_tanh(float x)
{
    const float s = 0.7978845608028654f;
    float th = tanhf(s * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * s * (1.0f + 3.0f * 0.044715f * x * x);
}
extern "C" cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void *alpha,
                                         const void *A, cublasLtMatrixLayout_t Ad, const void *B,
                                         cublasLtMatrixLayout_t Bd, const void *beta, const void *C,
                                         cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                                         const cublasLtMatmulAlgo_t *algo, void *, size_t, cudaStream_t)
{
    const emu_lt_desc *x = D_(desc);
    const emu_lt_layout *a = L_(Ad), *b = L_(Bd), *c = L_(Cd), *d = L_(Dd);
    if (!algo) lt_die("matmul without an algorithm from the heuristic", 0);
    if (algo->data[0] == CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE || algo->data[0] == CUBLASLT_REDUCTION_SCHEME_INPLACE)
        lt_die("matmul with a 16-bit split-K reduction, scheme", (long)algo->data[0]);
    uint64_t m = d->rows, n = d->cols, k = x->ta == CUBLAS_OP_N ? a->cols : a->rows;
    if ((x->ta == CUBLAS_OP_N ? a->rows : a->cols) != m || (x->tb == CUBLAS_OP_N ? b->rows : b->cols) != k ||
        (x->tb == CUBLAS_OP_N ? b->cols : b->rows) != n || c->rows != m || c->cols != n ||
        c->t != d->t || a->t != b->t)
        return CUBLAS_STATUS_INVALID_VALUE;
    check_align("A", A, a->t, a->ld);
    check_align("B", B, b->t, b->ld);
    check_align("C", C, c->t, c->ld);
    check_align("D", D, d->t, d->ld);
    int gelu = x->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bgrad = x->epi == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    int dgelu = x->epi == CUBLASLT_EPILOGUE_DGELU || bgrad;
    int bias = x->epi == CUBLASLT_EPILOGUE_BIAS || gelu;
    if ((bias || bgrad) && !x->bias) lt_die("bias epilogue without a bias pointer", x->epi);
    if (gelu || dgelu) {
        if (!x->aux || x->auxld % 8 || x->auxld < (int64_t)m) lt_die("aux leading dimension", (long)x->auxld);
        check_align("aux", x->aux, d->t, x->auxld);
    }
    float al = *(const float *)alpha, be = *(const float *)beta;
    std::vector<double> gsum(bgrad ? m : 0, 0.0);
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t i = 0; i < m; i++) {
            double s = 0;
            for (uint64_t p = 0; p < k; p++) {
                float av = x->ta == CUBLAS_OP_N ? ld(A, a->t, i + p * a->ld) : ld(A, a->t, p + i * a->ld);
                float bv = x->tb == CUBLAS_OP_N ? ld(B, b->t, p + j * b->ld) : ld(B, b->t, j + p * b->ld);
                s += (double)av * bv;
            }
            float cv = be != 0.0f ? ld(C, c->t, i + j * c->ld) : 0.0f;
            float v = (float)(al * s + (double)be * cv);
            if (bias) v += ld(x->bias, d->t, i);
            if (gelu) {
                st(x->aux, d->t, i + j * x->auxld, v);
                v = gelu_tanh(v);
            } else if (dgelu) {
                v *= dgelu_tanh(ld(x->aux, d->t, i + j * x->auxld));
                if (bgrad) gsum[i] += v;
            }
            st(D, d->t, i + j * d->ld, v);
        }
    /* DGELU_BGRAD: the bias gradient, D's row sums of the fp32 GELU gradient, in D's
     * type (the header: "the same type as the output elements") */
    for (uint64_t i = 0; i < (bgrad ? m : 0); i++)
        st(const_cast<void *>(x->bias), d->t, i, (float)gsum[i]);
    return CUBLAS_STATUS_SUCCESS;
}
