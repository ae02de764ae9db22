/*
 * Inside the CUDA path of dstrain: what every kernel file shares (the launch shape, the
 * 16-bit conversions) and the launchers of device_kernels.cu (the device's buffer
 * operations, device.h), callable from C. The models' own launchers
 * (src/model/cuda_kernels.h) follow the same rules. Every launcher enqueues on the
 * stream s it is given (the device's stream, which the model's cuBLAS handle and the
 * nccl comm's ordering events use too), returns cudaGetLastError() read right after its
 * launch (the caller names the kernel in the message) and does nothing for empty input.
 * Pointers are device pointers. Kernel symbols are prefixed dsl_k_ so that they cannot
 * clash with another library's.
 *
 * Each kernel mirrors a CPU loop, its test oracle, with the same float operations in
 * the same order, written with round-to-nearest intrinsics so that nvcc cannot
 * contract a multiply and an add into an FMA: the CPU reference is then the exact
 * oracle for the elementwise kernels (see test_gpu_trainer.c).
 */
#ifndef DSLAUNCH_DEVICE_CUDA_KERNELS_H
#define DSLAUNCH_DEVICE_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#if defined(__CUDACC__) || defined(DSL_CUDA_EMU)
/* The launch shape of every kernel: DSL_CUDA_THREADS per block, and grid-stride loops
 * over at most DSL_CUDA_MAX_BLOCKS blocks, so any n fits one launch. (DSL_CUDA_EMU:
 * scripts/cuda-emu/emu.h, the kernels compiled as C++ for the CPU, takes it from here.) */
#define DSL_CUDA_THREADS 256
#ifndef DSL_CUDA_MAX_BLOCKS
#define DSL_CUDA_MAX_BLOCKS 8192
#endif
static inline unsigned int dsl_cuda_blocks(size_t n)
{
    size_t b = (n + DSL_CUDA_THREADS - 1) / DSL_CUDA_THREADS;
    return (unsigned int)(b < DSL_CUDA_MAX_BLOCKS ? b : DSL_CUDA_MAX_BLOCKS);
}
#define DSL_GRID_STRIDE(i, n)                                                           \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);             \
         i += (size_t)gridDim.x * blockDim.x)
#endif

#ifdef __CUDACC__
/* 16-bit elements of mixed precision: dsl_tof() widens (exact), dsl_fromf<T>() narrows
 * with round to nearest even; for float both are the identity, so a kernel templated
 * on its element type does the fp32 arithmetic it always did. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
static __device__ __forceinline__ float dsl_tof(float x) { return x; }
static __device__ __forceinline__ float dsl_tof(__half x) { return __half2float(x); }
static __device__ __forceinline__ float dsl_tof(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T dsl_fromf(float x);
template <> __device__ __forceinline__ float dsl_fromf<float>(float x) { return x; }
template <> __device__ __forceinline__ __half dsl_fromf<__half>(float x)
{
    return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 dsl_fromf<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- device_kernels.cu: the device ops (device.h) ---- */

/** p[i] *= f */
cudaError_t dsl_cuda_scale(cudaStream_t s, float *p, size_t n, float f);
/** dst[i] += src[i] */
cudaError_t dsl_cuda_add(cudaStream_t s, float *dst, const float *src, size_t n);
/** *dmax = max(*dmax, max_i bits(|p[i]|)); *dmax must be initialised */
cudaError_t dsl_cuda_absmax_bits(cudaStream_t s, const float *p, size_t n, unsigned int *dmax);
/** *dsum += sum_i (uint64)(int64)(p[i]*p[i]*k + 0.5) in double; *dsum initialised */
cudaError_t dsl_cuda_sumsq_fixed(cudaStream_t s, const float *p, size_t n, double k,
                                 unsigned long long *dsum);

/** dsl_cuda_sumsq_fixed with k = frac / (m x m), m the float of the bits *dmax (device
 *  memory); nothing when m is 0, inf or NaN. type: 0 fp32, 1 fp16, 2 bf16 elements. */
cudaError_t dsl_cuda_sumsq_fixed_dev(cudaStream_t s, int type, const void *p, size_t n,
                                     const unsigned int *dmax, double frac,
                                     unsigned long long *dsum);
/** limb[] = fixedsum split of *dsum; *flag = (*dmax >= inf bits) unless flag is NULL */
cudaError_t dsl_cuda_scalars_finish(cudaStream_t s, const unsigned long long *dsum,
                                    int32_t *limb, const unsigned int *dmax, float *flag);

/** The per-step constants of Adam, computed on the host as optimizer.c does. */
struct dsl_cuda_adam {
    float lr, b1, b2, eps, wd;
    float step; /* lr / (1 - b1^t) */
    float bc2s; /* sqrtf(1 - b2^t) */
    float gscale; /* the gradient is g * gscale (dsl_optim_step) */
    int adam_w_mode;
};
cudaError_t dsl_cuda_adam_step(cudaStream_t s, const struct dsl_cuda_adam *a, float *p,
                               const float *g, float *m, float *v, size_t n);
/** SGD: momentum mu (0: none; m unused), first step t == 1 */
cudaError_t dsl_cuda_sgd_step(cudaStream_t s, float lr, float wd, float mu, int first, float gscale,
                              float *p, const float *g, float *m, size_t n);

/* mixed precision: 16-bit buffers (void *) hold bf16 when bf16 is non-zero, else fp16 */
/** dst[i] = half(src[i]) */
cudaError_t dsl_cuda_to_half(cudaStream_t s, int bf16, void *dst, const float *src, size_t n);
/** dst[i] = half(float(dst[i]) + float(src[i])) */
cudaError_t dsl_cuda_half_add(cudaStream_t s, int bf16, void *dst, const void *src, size_t n);
/** dst[i] = float(src[i]), or dst[i] += float(src[i]) when add (fp32 accumulation) */
cudaError_t dsl_cuda_widen(cudaStream_t s, int bf16, float *dst, const void *src, size_t n,
                           int add);
/** dst[i] = half(float(dst[i]) + src[i]) (src fp32) */
cudaError_t dsl_cuda_half_add_f32(cudaStream_t s, int bf16, void *dst, const float *src,
                                  size_t n);
/** p[i] = half(float(p[i]) * f) */
cudaError_t dsl_cuda_half_scale(cudaStream_t s, int bf16, void *p, size_t n, float f);
/** dsl_cuda_absmax_bits / dsl_cuda_sumsq_fixed of float(p[i]) */
cudaError_t dsl_cuda_half_absmax_bits(cudaStream_t s, int bf16, const void *p, size_t n,
                                      unsigned int *dmax);
cudaError_t dsl_cuda_half_sumsq_fixed(cudaStream_t s, int bf16, const void *p, size_t n, double k,
                                      unsigned long long *dsum);
/** Adam / SGD on fp32 p with the gradient (float(g[i]) * ga) * a->gscale, then
 *  hp[i] = half(p[i]) */
cudaError_t dsl_cuda_half_adam_step(cudaStream_t s, int bf16, const struct dsl_cuda_adam *a,
                                    float ga, float *p, void *hp, const void *g, float *m, float *v,
                                    size_t n);
cudaError_t dsl_cuda_half_sgd_step(cudaStream_t s, int bf16, float lr, float wd, float mu,
                                   int first, float ga, float gscale, float *p, void *hp,
                                   const void *g, float *m, size_t n);

#ifdef __cplusplus
}
#endif

#endif
