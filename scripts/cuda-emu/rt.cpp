/*
 * The runtime side of the CPU emulation (emu.h): the block scheduler, and host-memory
 * versions of the CUDA runtime and cuBLAS calls that model_gpt_cuda.c makes (device
 * memory is host memory, streams and events complete at once, cublasGemmEx a reference
 * column-major GEMM accumulating in double and rounding to the output type once). dsl_cuda_to_half is device_kernels.cu's conversion as a
 * loop; dsl_mlp_create_cuda fails (the MLP is not emulated). A launch the GPU would refuse
 * (dynamic shared memory above the kernel's limit) runs nothing and leaves its error for
 * cudaGetLastError, as there.
 */
#include "emu.h"
#include <cublas_v2.h>
#include <stdlib.h>
#include <stdio.h>
#include <map>
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
    if (nt % 32) { fprintf(stderr, "emu: block of %u threads\n", nt); abort(); }
    auto lim = emu_smem_max.find(kernel);
    if (shm > (size_t)(lim == emu_smem_max.end() ? 48 * 1024 : lim->second)) {
        emu_err = cudaErrorInvalidValue;
        return;
    }
    emu_dyn_smem = malloc(shm ? shm : 1);
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
struct dsl_model; struct dsl_model_spec;
extern "C" int dsl_mlp_create_cuda(struct dsl_model *, const struct dsl_model_spec *, char *) { return -1; }
extern "C" cudaError_t cudaGetDeviceCount(int *n) { *n = 0; return cudaSuccess; }
