/*
 * The kernels of the CUDA device (device.h, device_cuda.c): scale, add, the two
 * order-free reductions of the global gradient norm, and Adam/SGD.
 *
 * Theory of operation. Every kernel is a grid-stride loop over flat float buffers,
 * launched on the caller's stream by a launcher that returns the launch error; add and
 * scale use 16-byte float4 loads and stores when the buffers are aligned (a scalar
 * kernel takes the last n % 4 elements), the same operations per element.
 * Each mirrors its CPU reference in device_cpu.c / optimizer.c operation for
 * operation, with __f*_rn / __d*_rn intrinsics where a plain expression would let nvcc
 * fuse a multiply and an add into an FMA (nvcc's default --fmad=true); sqrtf and
 * division are IEEE round-to-nearest under nvcc's defaults (-prec-sqrt, -prec-div),
 * which these launchers do not change. The CPU results are therefore bit-exact oracles,
 * except for what the host computes (Adam's bias-correction powers), which the host
 * also computes here and passes in. The reductions combine with atomicMax on uint32 and
 * atomicAdd on uint64, both exact and order-free, so any block order gives the CPU's
 * result.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "dslaunch/device/cuda_kernels.h"
#include "dslaunch/common/fixedsum.h"

#define THREADS DSL_CUDA_THREADS
#define GRID_STRIDE DSL_GRID_STRIDE

__global__ void dsl_k_scale(float *p, size_t n, float f)
{
    GRID_STRIDE(i, n)
    p[i] = __fmul_rn(p[i], f);
}

__global__ void dsl_k_add(float *dst, const float *src, size_t n)
{
    GRID_STRIDE(i, n)
    dst[i] = __fadd_rn(dst[i], src[i]);
}

/* the same two on float4 (16-byte loads and stores) for aligned buffers */
__global__ void dsl_k_scale4(float4 *p, size_t n4, float f)
{
    GRID_STRIDE(i, n4)
    {
        float4 a = p[i];
        a.x = __fmul_rn(a.x, f);
        a.y = __fmul_rn(a.y, f);
        a.z = __fmul_rn(a.z, f);
        a.w = __fmul_rn(a.w, f);
        p[i] = a;
    }
}

__global__ void dsl_k_add4(float4 *dst, const float4 *src, size_t n4)
{
    GRID_STRIDE(i, n4)
    {
        float4 a = dst[i], b = src[i];
        a.x = __fadd_rn(a.x, b.x);
        a.y = __fadd_rn(a.y, b.y);
        a.z = __fadd_rn(a.z, b.z);
        a.w = __fadd_rn(a.w, b.w);
        dst[i] = a;
    }
}

/* elements handled as float4: all whole groups of 4 when every pointer is 16-byte
 * aligned, else none */
static size_t vec4_count(size_t n, const void *a, const void *b)
{
    return ((uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0) ? n / 4 : 0;
}

template <typename T>
__global__ void dsl_k_absmax_bits(const T *p, size_t n, unsigned int *dmax)
{
    __shared__ unsigned int sh[THREADS];
    unsigned int mb = 0;
    GRID_STRIDE(i, n)
    {
        unsigned int b = __float_as_uint(dsl_tof(p[i])) & 0x7fffffffu;
        mb = b > mb ? b : mb;
    }
    sh[threadIdx.x] = mb;
    __syncthreads();
    for (unsigned int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && sh[threadIdx.x + s] > sh[threadIdx.x])
            sh[threadIdx.x] = sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0 && sh[0])
        atomicMax(dmax, sh[0]);
}

template <typename T>
static __device__ void sumsq_fixed_block(const T *p, size_t n, double k,
                                         unsigned long long *dsum)
{
    __shared__ unsigned long long sh[THREADS];
    unsigned long long acc = 0;
    GRID_STRIDE(i, n)
    {
        double x = (double)dsl_tof(p[i]);
        /* ((x * x) * k) + 0.5, each rounded, as the CPU's expression evaluates */
        double q = __dadd_rn(__dmul_rn(__dmul_rn(x, x), k), 0.5);
        acc += (unsigned long long)(long long)q;
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0 && sh[0])
        atomicAdd(dsum, sh[0]);
}

template <typename T>
__global__ void dsl_k_sumsq_fixed(const T *p, size_t n, double k, unsigned long long *dsum)
{
    sumsq_fixed_block(p, n, k, dsum);
}

/* k from the agreed maximum in device memory, as trainer.c computes it on the host:
 * m2 = (double)m * (double)m, k = frac / m2, both rounded once */
template <typename T>
__global__ void dsl_k_sumsq_fixed_dev(const T *p, size_t n, const unsigned int *dmax,
                                      double frac, unsigned long long *dsum)
{
    float m = __uint_as_float(*dmax);
    if (!(isfinite(m) && m > 0.0f))
        return;
    double m2 = __dmul_rn((double)m, (double)m);
    sumsq_fixed_block(p, n, __ddiv_rn(frac, m2), dsum);
}

/* the step's scalars: the fixed-point sum in int32 limbs (common/fixedsum.h), and the
 * overflow flag from the maximum's bits (inf and NaN sort at and above 0x7f800000) */
__global__ void dsl_k_scalars_finish(const unsigned long long *dsum, int32_t *limb,
                                     const unsigned int *dmax, float *flag)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    unsigned long long v = *dsum;
    for (int i = 0; i < DSL_FIXEDSUM_LIMBS; i++)
        limb[i] = (int32_t)((v >> (i * DSL_FIXEDSUM_BITS)) &
                            ((1ull << DSL_FIXEDSUM_BITS) - 1));
    if (flag)
        *flag = *dmax >= 0x7f800000u ? 1.0f : 0.0f;
}

/* optimizer.c, the AdamW loop: pi = p - lr*wd*p; m, v; p = pi - step*m/(sqrt(v)/bc2s + eps)
 * (one element; gi is the scaled gradient) */
static __device__ __forceinline__ float adamw_one(const struct dsl_cuda_adam &a, float omb1,
                                                  float omb2, float lrwd, float p0, float gi,
                                                  float *m, float *v)
{
    float pi = __fsub_rn(p0, __fmul_rn(lrwd, p0));
    float mi = __fadd_rn(__fmul_rn(a.b1, *m), __fmul_rn(omb1, gi));
    float vi = __fadd_rn(__fmul_rn(a.b2, *v), __fmul_rn(__fmul_rn(omb2, gi), gi));
    *m = mi;
    *v = vi;
    float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2s), a.eps);
    return __fsub_rn(pi, __fdiv_rn(__fmul_rn(a.step, mi), den));
}

/* optimizer.c, the Adam (L2) loop: g += wd*p; m, v; p -= step*m/(sqrt(v)/bc2s + eps) */
static __device__ __forceinline__ float adaml2_one(const struct dsl_cuda_adam &a, float omb1,
                                                   float omb2, float p0, float gs, float *m,
                                                   float *v)
{
    float gi = __fadd_rn(gs, __fmul_rn(a.wd, p0));
    float mi = __fadd_rn(__fmul_rn(a.b1, *m), __fmul_rn(omb1, gi));
    float vi = __fadd_rn(__fmul_rn(a.b2, *v), __fmul_rn(__fmul_rn(omb2, gi), gi));
    *m = mi;
    *v = vi;
    float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2s), a.eps);
    return __fsub_rn(p0, __fdiv_rn(__fmul_rn(a.step, mi), den));
}

/* The fp32 kernels read g as it is and write no 16-bit copy. The mixed-precision ones
 * (G, H 16-bit) widen g, multiply by ga first (the unscaling that the fp32 trainer
 * does in place, which a 16-bit gradient cannot take) and write hp[i] = half(p[i]). */
__global__ void dsl_k_adamw(struct dsl_cuda_adam a, float *p, const float *g, float *m, float *v,
                        size_t n)
{
    float omb1 = __fsub_rn(1.0f, a.b1), omb2 = __fsub_rn(1.0f, a.b2);
    float lrwd = __fmul_rn(a.lr, a.wd);
    GRID_STRIDE(i, n)
    p[i] = adamw_one(a, omb1, omb2, lrwd, p[i], __fmul_rn(g[i], a.gscale), &m[i], &v[i]);
}

__global__ void dsl_k_adam_l2(struct dsl_cuda_adam a, float *p, const float *g, float *m, float *v,
                          size_t n)
{
    float omb1 = __fsub_rn(1.0f, a.b1), omb2 = __fsub_rn(1.0f, a.b2);
    GRID_STRIDE(i, n)
    p[i] = adaml2_one(a, omb1, omb2, p[i], __fmul_rn(g[i], a.gscale), &m[i], &v[i]);
}

template <typename H>
__global__ void dsl_k_half_adam(struct dsl_cuda_adam a, float ga, float *p, H *hp, const H *g,
                            float *m, float *v, size_t n)
{
    float omb1 = __fsub_rn(1.0f, a.b1), omb2 = __fsub_rn(1.0f, a.b2);
    float lrwd = __fmul_rn(a.lr, a.wd);
    GRID_STRIDE(i, n)
    {
        float gi = __fmul_rn(__fmul_rn(dsl_tof(g[i]), ga), a.gscale);
        float pn = a.adam_w_mode ? adamw_one(a, omb1, omb2, lrwd, p[i], gi, &m[i], &v[i])
                                 : adaml2_one(a, omb1, omb2, p[i], gi, &m[i], &v[i]);
        p[i] = pn;
        hp[i] = dsl_fromf<H>(pn);
    }
}

/* optimizer.c, SGD: d = g + wd*p; with momentum m = t > 1 ? mu*m + d : d, d = m;
 * p -= lr*d */
static __device__ __forceinline__ float sgd_one(float lr, float wd, float mu, int first,
                                                float p0, float gs, float *m)
{
    float d = __fadd_rn(gs, __fmul_rn(wd, p0));
    if (mu != 0.0f) {
        *m = first ? d : __fadd_rn(__fmul_rn(mu, *m), d);
        d = *m;
    }
    return __fsub_rn(p0, __fmul_rn(lr, d));
}

__global__ void dsl_k_sgd(float lr, float wd, float mu, int first, float gs, float *p,
                      const float *g, float *m, size_t n)
{
    GRID_STRIDE(i, n)
    p[i] = sgd_one(lr, wd, mu, first, p[i], __fmul_rn(g[i], gs), m ? &m[i] : NULL);
}

template <typename H>
__global__ void dsl_k_half_sgd(float lr, float wd, float mu, int first, float ga, float gs,
                           float *p, H *hp, const H *g, float *m, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float pn = sgd_one(lr, wd, mu, first, p[i], __fmul_rn(__fmul_rn(dsl_tof(g[i]), ga), gs),
                           m ? &m[i] : NULL);
        p[i] = pn;
        hp[i] = dsl_fromf<H>(pn);
    }
}

template <typename H> __global__ void dsl_k_to_half(H *dst, const float *src, size_t n)
{
    GRID_STRIDE(i, n)
    dst[i] = dsl_fromf<H>(src[i]);
}

template <typename H> __global__ void dsl_k_half_add(H *dst, const H *src, size_t n)
{
    GRID_STRIDE(i, n)
    dst[i] = dsl_fromf<H>(__fadd_rn(dsl_tof(dst[i]), dsl_tof(src[i])));
}

template <typename H> __global__ void dsl_k_half_scale(H *p, size_t n, float f)
{
    GRID_STRIDE(i, n)
    p[i] = dsl_fromf<H>(__fmul_rn(dsl_tof(p[i]), f));
}

extern "C" cudaError_t dsl_cuda_scale(cudaStream_t s, float *p, size_t n, float f)
{
    size_t n4 = vec4_count(n, p, p), tail = n - 4 * n4;
    cudaError_t e;
    if (n4) {
        dsl_k_scale4<<<dsl_cuda_blocks(n4), THREADS, 0, s>>>((float4 *)p, n4, f);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
    if (!tail)
        return cudaSuccess;
    dsl_k_scale<<<dsl_cuda_blocks(tail), THREADS, 0, s>>>(p + 4 * n4, tail, f);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_add(cudaStream_t s, float *dst, const float *src, size_t n)
{
    size_t n4 = vec4_count(n, dst, src), tail = n - 4 * n4;
    cudaError_t e;
    if (n4) {
        dsl_k_add4<<<dsl_cuda_blocks(n4), THREADS, 0, s>>>((float4 *)dst, (const float4 *)src,
                                                           n4);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
    if (!tail)
        return cudaSuccess;
    dsl_k_add<<<dsl_cuda_blocks(tail), THREADS, 0, s>>>(dst + 4 * n4, src + 4 * n4, tail);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_absmax_bits(cudaStream_t s, const float *p, size_t n,
                                            unsigned int *dmax)
{
    if (!n)
        return cudaSuccess;
    dsl_k_absmax_bits<float><<<dsl_cuda_blocks(n), THREADS, 0, s>>>(p, n, dmax);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_sumsq_fixed(cudaStream_t s, const float *p, size_t n, double k,
                                            unsigned long long *dsum)
{
    if (!n)
        return cudaSuccess;
    dsl_k_sumsq_fixed<float><<<dsl_cuda_blocks(n), THREADS, 0, s>>>(p, n, k, dsum);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_adam_step(cudaStream_t s, const struct dsl_cuda_adam *a, float *p,
                                          const float *g, float *m, float *v, size_t n)
{
    if (!n)
        return cudaSuccess;
    if (a->adam_w_mode)
        dsl_k_adamw<<<dsl_cuda_blocks(n), THREADS, 0, s>>>(*a, p, g, m, v, n);
    else
        dsl_k_adam_l2<<<dsl_cuda_blocks(n), THREADS, 0, s>>>(*a, p, g, m, v, n);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_sgd_step(cudaStream_t s, float lr, float wd, float mu, int first,
                                         float gscale, float *p, const float *g, float *m, size_t n)
{
    if (!n)
        return cudaSuccess;
    dsl_k_sgd<<<dsl_cuda_blocks(n), THREADS, 0, s>>>(lr, wd, mu, first, gscale, p, g, m,
                                                                  n);
    return cudaGetLastError();
}

/* ---- mixed precision: one launcher per operation, the element type from bf16 ---- */

template <typename H>
static cudaError_t to_half_t(cudaStream_t s, void *dst, const float *src, size_t n)
{
    dsl_k_to_half<H><<<dsl_cuda_blocks(n), THREADS, 0, s>>>((H *)dst, src, n);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_to_half(cudaStream_t s, int bf16, void *dst, const float *src,
                                        size_t n)
{
    if (!n)
        return cudaSuccess;
    return bf16 ? to_half_t<__nv_bfloat16>(s, dst, src, n) : to_half_t<__half>(s, dst, src, n);
}

template <typename H>
static cudaError_t half_add_t(cudaStream_t s, void *dst, const void *src, size_t n)
{
    dsl_k_half_add<H><<<dsl_cuda_blocks(n), THREADS, 0, s>>>((H *)dst, (const H *)src, n);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_half_add(cudaStream_t s, int bf16, void *dst, const void *src,
                                         size_t n)
{
    if (!n)
        return cudaSuccess;
    return bf16 ? half_add_t<__nv_bfloat16>(s, dst, src, n) : half_add_t<__half>(s, dst, src, n);
}

template <typename H> static cudaError_t half_scale_t(cudaStream_t s, void *p, size_t n, float f)
{
    dsl_k_half_scale<H><<<dsl_cuda_blocks(n), THREADS, 0, s>>>((H *)p, n, f);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_half_scale(cudaStream_t s, int bf16, void *p, size_t n, float f)
{
    if (!n)
        return cudaSuccess;
    return bf16 ? half_scale_t<__nv_bfloat16>(s, p, n, f) : half_scale_t<__half>(s, p, n, f);
}

template <typename H>
static cudaError_t half_absmax_t(cudaStream_t s, const void *p, size_t n, unsigned int *dmax)
{
    dsl_k_absmax_bits<H><<<dsl_cuda_blocks(n), THREADS, 0, s>>>((const H *)p, n,
                                                                          dmax);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_half_absmax_bits(cudaStream_t s, int bf16, const void *p, size_t n,
                                                 unsigned int *dmax)
{
    if (!n)
        return cudaSuccess;
    return bf16 ? half_absmax_t<__nv_bfloat16>(s, p, n, dmax)
                : half_absmax_t<__half>(s, p, n, dmax);
}

template <typename H>
static cudaError_t half_sumsq_t(cudaStream_t s, const void *p, size_t n, double k,
                                unsigned long long *dsum)
{
    dsl_k_sumsq_fixed<H><<<dsl_cuda_blocks(n), THREADS, 0, s>>>((const H *)p, n, k, dsum);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_half_sumsq_fixed(cudaStream_t s, int bf16, const void *p, size_t n,
                                                 double k, unsigned long long *dsum)
{
    if (!n)
        return cudaSuccess;
    return bf16 ? half_sumsq_t<__nv_bfloat16>(s, p, n, k, dsum)
                : half_sumsq_t<__half>(s, p, n, k, dsum);
}

template <typename H>
static cudaError_t half_adam_t(cudaStream_t s, const struct dsl_cuda_adam *a, float ga, float *p,
                               void *hp, const void *g, float *m, float *v, size_t n)
{
    dsl_k_half_adam<H>
        <<<dsl_cuda_blocks(n), THREADS, 0, s>>>(*a, ga, p, (H *)hp, (const H *)g, m, v, n);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_half_adam_step(cudaStream_t s, int bf16,
                                               const struct dsl_cuda_adam *a, float ga, float *p,
                                               void *hp, const void *g, float *m, float *v,
                                               size_t n)
{
    if (!n)
        return cudaSuccess;
    return bf16 ? half_adam_t<__nv_bfloat16>(s, a, ga, p, hp, g, m, v, n)
                : half_adam_t<__half>(s, a, ga, p, hp, g, m, v, n);
}

template <typename H>
static cudaError_t half_sgd_t(cudaStream_t s, float lr, float wd, float mu, int first, float ga,
                              float gs, float *p, void *hp, const void *g, float *m, size_t n)
{
    dsl_k_half_sgd<H><<<dsl_cuda_blocks(n), THREADS, 0, s>>>(lr, wd, mu, first, ga, gs, p, (H *)hp,
                                                             (const H *)g, m, n);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_half_sgd_step(cudaStream_t s, int bf16, float lr, float wd,
                                              float mu, int first, float ga, float gscale, float *p,
                                              void *hp, const void *g, float *m, size_t n)
{
    if (!n)
        return cudaSuccess;
    return bf16 ? half_sgd_t<__nv_bfloat16>(s, lr, wd, mu, first, ga, gscale, p, hp, g, m, n)
                : half_sgd_t<__half>(s, lr, wd, mu, first, ga, gscale, p, hp, g, m, n);
}

template <typename T>
static cudaError_t sumsq_dev_t(cudaStream_t s, const void *p, size_t n, const unsigned int *dmax,
                               double frac, unsigned long long *dsum)
{
    dsl_k_sumsq_fixed_dev<T><<<dsl_cuda_blocks(n), THREADS, 0, s>>>((const T *)p, n, dmax, frac,
                                                                    dsum);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_sumsq_fixed_dev(cudaStream_t s, int type, const void *p,
                                                size_t n, const unsigned int *dmax, double frac,
                                                unsigned long long *dsum)
{
    if (!n)
        return cudaSuccess;
    switch (type) {
    case 2: return sumsq_dev_t<__nv_bfloat16>(s, p, n, dmax, frac, dsum);
    case 1: return sumsq_dev_t<__half>(s, p, n, dmax, frac, dsum);
    default: return sumsq_dev_t<float>(s, p, n, dmax, frac, dsum);
    }
}

extern "C" cudaError_t dsl_cuda_scalars_finish(cudaStream_t s, const unsigned long long *dsum,
                                               int32_t *limb, const unsigned int *dmax,
                                               float *flag)
{
    dsl_k_scalars_finish<<<1, 1, 0, s>>>(dsum, limb, dmax, flag);
    return cudaGetLastError();
}

/* fp32 accumulation of 16-bit gradients: dst = float(src) or dst += float(src) */
template <typename H> __global__ void dsl_k_widen(float *dst, const H *src, size_t n, int add)
{
    GRID_STRIDE(i, n)
    dst[i] = add ? __fadd_rn(dst[i], dsl_tof(src[i])) : dsl_tof(src[i]);
}

/* dst (16-bit) = half(float(dst) + src) */
template <typename H> __global__ void dsl_k_half_add_f32(H *dst, const float *src, size_t n)
{
    GRID_STRIDE(i, n)
    dst[i] = dsl_fromf<H>(__fadd_rn(dsl_tof(dst[i]), src[i]));
}

template <typename H>
static cudaError_t widen_t(cudaStream_t s, float *dst, const void *src, size_t n, int add)
{
    dsl_k_widen<H><<<dsl_cuda_blocks(n), THREADS, 0, s>>>(dst, (const H *)src, n, add);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_widen(cudaStream_t s, int bf16, float *dst, const void *src,
                                      size_t n, int add)
{
    if (!n)
        return cudaSuccess;
    return bf16 ? widen_t<__nv_bfloat16>(s, dst, src, n, add)
                : widen_t<__half>(s, dst, src, n, add);
}

template <typename H>
static cudaError_t half_add_f32_t(cudaStream_t s, void *dst, const float *src, size_t n)
{
    dsl_k_half_add_f32<H><<<dsl_cuda_blocks(n), THREADS, 0, s>>>((H *)dst, src, n);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_half_add_f32(cudaStream_t s, int bf16, void *dst,
                                             const float *src, size_t n)
{
    if (!n)
        return cudaSuccess;
    return bf16 ? half_add_f32_t<__nv_bfloat16>(s, dst, src, n)
                : half_add_f32_t<__half>(s, dst, src, n);
}
