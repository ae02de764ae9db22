/*
 * The kernels of the CUDA device (device.h, device_cuda.c): scale, add, the two
 * order-free reductions of the global gradient norm, and Adam/SGD.
 *
 * Theory of operation. Every kernel is a grid-stride loop over flat float buffers,
 * launched on the legacy default stream by a launcher that returns the launch error.
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

#include "train/cuda_kernels.h"

#define THREADS DSL_CUDA_THREADS
#define GRID_STRIDE DSL_GRID_STRIDE

__global__ void k_scale(float *p, size_t n, float f)
{
    GRID_STRIDE(i, n)
    p[i] = __fmul_rn(p[i], f);
}

__global__ void k_add(float *dst, const float *src, size_t n)
{
    GRID_STRIDE(i, n)
    dst[i] = __fadd_rn(dst[i], src[i]);
}

__global__ void k_absmax_bits(const float *p, size_t n, unsigned int *dmax)
{
    __shared__ unsigned int sh[THREADS];
    unsigned int mb = 0;
    GRID_STRIDE(i, n)
    {
        unsigned int b = __float_as_uint(p[i]) & 0x7fffffffu;
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

__global__ void k_sumsq_fixed(const float *p, size_t n, double k, unsigned long long *dsum)
{
    __shared__ unsigned long long sh[THREADS];
    unsigned long long acc = 0;
    GRID_STRIDE(i, n)
    {
        double x = (double)p[i];
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

/* optimizer.c, the AdamW loop: pi = p - lr*wd*p; m, v; p = pi - step*m/(sqrt(v)/bc2s + eps) */
__global__ void k_adamw(struct dsl_cuda_adam a, float *p, const float *g, float *m, float *v,
                        size_t n)
{
    float omb1 = __fsub_rn(1.0f, a.b1), omb2 = __fsub_rn(1.0f, a.b2);
    float lrwd = __fmul_rn(a.lr, a.wd);
    GRID_STRIDE(i, n)
    {
        float gi = __fmul_rn(g[i], a.gscale), p0 = p[i];
        float pi = __fsub_rn(p0, __fmul_rn(lrwd, p0));
        float mi = __fadd_rn(__fmul_rn(a.b1, m[i]), __fmul_rn(omb1, gi));
        float vi = __fadd_rn(__fmul_rn(a.b2, v[i]), __fmul_rn(__fmul_rn(omb2, gi), gi));
        m[i] = mi;
        v[i] = vi;
        float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2s), a.eps);
        p[i] = __fsub_rn(pi, __fdiv_rn(__fmul_rn(a.step, mi), den));
    }
}

/* optimizer.c, the Adam (L2) loop: g += wd*p; m, v; p -= step*m/(sqrt(v)/bc2s + eps) */
__global__ void k_adam_l2(struct dsl_cuda_adam a, float *p, const float *g, float *m, float *v,
                          size_t n)
{
    float omb1 = __fsub_rn(1.0f, a.b1), omb2 = __fsub_rn(1.0f, a.b2);
    GRID_STRIDE(i, n)
    {
        float p0 = p[i];
        float gi = __fadd_rn(__fmul_rn(g[i], a.gscale), __fmul_rn(a.wd, p0));
        float mi = __fadd_rn(__fmul_rn(a.b1, m[i]), __fmul_rn(omb1, gi));
        float vi = __fadd_rn(__fmul_rn(a.b2, v[i]), __fmul_rn(__fmul_rn(omb2, gi), gi));
        m[i] = mi;
        v[i] = vi;
        float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2s), a.eps);
        p[i] = __fsub_rn(p0, __fdiv_rn(__fmul_rn(a.step, mi), den));
    }
}

/* optimizer.c, SGD: d = g + wd*p; with momentum m = t > 1 ? mu*m + d : d, d = m;
 * p -= lr*d */
__global__ void k_sgd(float lr, float wd, float mu, int first, float gs, float *p,
                      const float *g, float *m, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float p0 = p[i];
        float d = __fadd_rn(__fmul_rn(g[i], gs), __fmul_rn(wd, p0));
        if (mu != 0.0f) {
            m[i] = first ? d : __fadd_rn(__fmul_rn(mu, m[i]), d);
            d = m[i];
        }
        p[i] = __fsub_rn(p0, __fmul_rn(lr, d));
    }
}

extern "C" cudaError_t dsl_cuda_scale(float *p, size_t n, float f)
{
    if (!n)
        return cudaSuccess;
    k_scale<<<dsl_cuda_blocks(n), THREADS, 0, cudaStreamLegacy>>>(p, n, f);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_add(float *dst, const float *src, size_t n)
{
    if (!n)
        return cudaSuccess;
    k_add<<<dsl_cuda_blocks(n), THREADS, 0, cudaStreamLegacy>>>(dst, src, n);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_absmax_bits(const float *p, size_t n, unsigned int *dmax)
{
    if (!n)
        return cudaSuccess;
    k_absmax_bits<<<dsl_cuda_blocks(n), THREADS, 0, cudaStreamLegacy>>>(p, n, dmax);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_sumsq_fixed(const float *p, size_t n, double k,
                                            unsigned long long *dsum)
{
    if (!n)
        return cudaSuccess;
    k_sumsq_fixed<<<dsl_cuda_blocks(n), THREADS, 0, cudaStreamLegacy>>>(p, n, k, dsum);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_adam_step(const struct dsl_cuda_adam *a, float *p,
                                          const float *g, float *m, float *v, size_t n)
{
    if (!n)
        return cudaSuccess;
    if (a->adam_w_mode)
        k_adamw<<<dsl_cuda_blocks(n), THREADS, 0, cudaStreamLegacy>>>(*a, p, g, m, v, n);
    else
        k_adam_l2<<<dsl_cuda_blocks(n), THREADS, 0, cudaStreamLegacy>>>(*a, p, g, m, v, n);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_sgd_step(float lr, float wd, float mu, int first, float gscale,
                                         float *p, const float *g, float *m, size_t n)
{
    if (!n)
        return cudaSuccess;
    k_sgd<<<dsl_cuda_blocks(n), THREADS, 0, cudaStreamLegacy>>>(lr, wd, mu, first, gscale, p, g, m,
                                                                  n);
    return cudaGetLastError();
}
