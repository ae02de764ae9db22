/*
 * The elementwise parts of the CUDA MLP (model_mlp_cuda.c): bias + ReLU after each
 * layer's GEMM, softmax cross-entropy with its gradient, the bias gradient, the ReLU's
 * gradient mask, and the micro batch's loss and hit sums. The loss kernel multiplies dz
 * by the loss factor it is given (the trainer's loss scale, for 16-bit gradients over
 * the micro batch too; x 1 is exact, so it does so unconditionally).
 *
 * Theory of operation. One template per kernel serves fp32 and the 16-bit types: each
 * element is widened to fp32 (dsl_tof), the arithmetic is fp32 with round-to-nearest
 * intrinsics (no FMA contraction), and a 16-bit result is rounded once (dsl_fromf).
 *   - bias_act: a 2-D grid, x over the columns (coalesced), y over the rows, so the
 *     bias is loaded once per thread and no element needs a 64-bit modulo;
 *   - loss: one warp per sample, the classes strided over its lanes (coalesced), the
 *     maximum and argmax (first index among equal maxima, as the CPU's strict '>') and
 *     the sum of exponentials by warp shuffles; each lane keeps the exponentials of its
 *     first LOSS_CACHE classes in registers, so dz needs no second expf for up to
 *     32 x LOSS_CACHE = 256 classes;
 *   - bias_grad: a column reduction, 32 columns per block (coalesced rows), BG_ROWS
 *     row-threads per column summing strided rows, their partial sums added in a fixed
 *     order in shared memory;
 *   - loss_stats: one block sums the per-sample losses (in double) and hits, so the
 *     host reads nothing per micro step.
 * Summation orders differ from the CPU's sequential loops (and expf/logf are CUDA's,
 * within 2 ulp of glibc's), so the loss, dz and the bias gradient agree with the CPU
 * within rounding, not bit for bit; tests/train/test_gpu_trainer.c compares with a
 * tolerance. Every result is deterministic: no atomics, fixed reduction trees.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_kernels.h"
#include "model_loss_stats.cuh"

#define THREADS DSL_CUDA_THREADS
#define GRID_STRIDE DSL_GRID_STRIDE

#define LOSS_CACHE 8
#define BG_ROWS 16

template <typename T>
__global__ void dsl_k_bias_act(T *z, const T *b, size_t n, size_t out, int relu)
{
    size_t col = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= out)
        return;
    float bj = dsl_tof(b[col]);
    for (size_t i = blockIdx.y; i < n; i += gridDim.y) {
        T *zi = z + i * out + col;
        float v = __fadd_rn(dsl_tof(*zi), bj);
        *zi = dsl_fromf<T>(relu ? (v > 0.0f ? v : 0.0f) : v);
    }
}

/* (value, index) of the larger value, the smaller index among equal ones */
static __device__ __forceinline__ void argmax_merge(float &v, size_t &k, float ov, size_t ok)
{
    if (ov > v || (ov == v && ok < k)) {
        v = ov;
        k = ok;
    }
}

template <typename T>
__global__ void dsl_k_loss(const T *logits, const int32_t *y, size_t n, size_t c, float *loss,
                           int32_t *correct, T *dz, float scale)
{
    const unsigned lane = threadIdx.x & 31u;
    size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    size_t nwarps = ((size_t)gridDim.x * blockDim.x) >> 5;
    for (size_t i = warp; i < n; i += nwarps) {
        const T *zi = logits + i * c;
        float mx = -INFINITY;
        size_t am = ~(size_t)0;
        for (size_t k = lane; k < c; k += 32) {
            float v = dsl_tof(zi[k]);
            if (am == ~(size_t)0 || v > mx) {
                mx = v;
                am = k;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, mx, o);
            size_t ok = __shfl_xor_sync(0xffffffffu, am, o);
            argmax_merge(mx, am, ov, ok);
        }
        float e[LOSS_CACHE], sum = 0.0f;
#pragma unroll
        for (int j = 0; j < LOSS_CACHE; j++) {
            size_t k = lane + 32u * (size_t)j;
            e[j] = k < c ? expf(__fsub_rn(dsl_tof(zi[k]), mx)) : 0.0f;
            sum = __fadd_rn(sum, e[j]);
        }
        for (size_t k = lane + 32u * LOSS_CACHE; k < c; k += 32)
            sum = __fadd_rn(sum, expf(__fsub_rn(dsl_tof(zi[k]), mx)));
        for (int o = 16; o > 0; o >>= 1)
            sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, o));
        size_t yi = (size_t)y[i];
        if (lane == 0) {
            float lse = __fadd_rn(mx, logf(sum));
            loss[i] = __fsub_rn(lse, dsl_tof(zi[yi]));
            correct[i] = am == yi;
        }
        if (dz) {
            float inv = __fdiv_rn(1.0f, sum);
            T *di = dz + i * c;
#pragma unroll
            for (int j = 0; j < LOSS_CACHE; j++) {
                size_t k = lane + 32u * (size_t)j;
                if (k < c)
                    di[k] = dsl_fromf<T>(__fmul_rn(
                        __fsub_rn(__fmul_rn(e[j], inv), k == yi ? 1.0f : 0.0f), scale));
            }
            for (size_t k = lane + 32u * LOSS_CACHE; k < c; k += 32)
                di[k] = dsl_fromf<T>(__fmul_rn(
                    __fsub_rn(__fmul_rn(expf(__fsub_rn(dsl_tof(zi[k]), mx)), inv),
                              k == yi ? 1.0f : 0.0f),
                    scale));
        }
    }
}

/* block (32, BG_ROWS): 32 columns; row-thread ty sums rows ty, ty + BG_ROWS, ... */
template <typename T>
__global__ void dsl_k_bias_grad(const T *dz, size_t n, size_t out, T *db)
{
    __shared__ float part[BG_ROWS][33];
    size_t col = (size_t)blockIdx.x * 32u + threadIdx.x;
    float acc = 0.0f;
    if (col < out)
        for (size_t i = threadIdx.y; i < n; i += BG_ROWS)
            acc = __fadd_rn(acc, dsl_tof(dz[i * out + col]));
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < out) {
        float s = part[0][threadIdx.x];
        for (int r = 1; r < BG_ROWS; r++)
            s = __fadd_rn(s, part[r][threadIdx.x]);
        db[col] = dsl_fromf<T>(s);
    }
}

template <typename T> __global__ void dsl_k_relu_mask(T *d, const T *a, size_t len)
{
    GRID_STRIDE(i, len)
    if (dsl_tof(a[i]) <= 0.0f)
        d[i] = dsl_fromf<T>(0.0f);
}

/* out[0] = sum of loss[0..n) (in double, then rounded to float), out[stride] = hits */
__global__ void dsl_k_loss_stats(const float *loss, const int32_t *correct, size_t n, float *out,
                                 size_t stride)
{
    double l = 0.0;
    unsigned long long h = 0;
    for (size_t i = threadIdx.x; i < n; i += THREADS) {
        l = __dadd_rn(l, (double)loss[i]);
        h += correct[i] != 0;
    }
    dsl_block_loss_stats(l, h, out, stride);
}

/* ---- launchers ---- */

template <typename T>
static cudaError_t bias_act_t(cudaStream_t s, void *z, const void *b, size_t n, size_t out,
                              int relu)
{
    dim3 grid((unsigned)((out + THREADS - 1) / THREADS), (unsigned)(n < 65535 ? n : 65535));
    dsl_k_bias_act<T><<<grid, THREADS, 0, s>>>((T *)z, (const T *)b, n, out, relu);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t loss_t(cudaStream_t s, const void *logits, const int32_t *y, size_t n,
                          size_t c, float *loss, int32_t *correct, void *dz, float scale)
{
    size_t blocks = (n + THREADS / 32 - 1) / (THREADS / 32);
    dsl_k_loss<T><<<(unsigned)(blocks < DSL_CUDA_MAX_BLOCKS ? blocks : DSL_CUDA_MAX_BLOCKS),
                    THREADS, 0, s>>>((const T *)logits, y, n, c, loss, correct, (T *)dz, scale);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t bias_grad_t(cudaStream_t s, const void *dz, size_t n, size_t out, void *db)
{
    dsl_k_bias_grad<T><<<(unsigned)((out + 31) / 32), dim3(32, BG_ROWS), 0, s>>>(
        (const T *)dz, n, out, (T *)db);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t relu_mask_t(cudaStream_t s, void *d, const void *a, size_t len)
{
    dsl_k_relu_mask<T><<<dsl_cuda_blocks(len), THREADS, 0, s>>>((T *)d, (const T *)a, len);
    return cudaGetLastError();
}

/* out and c are at most INT_MAX (the model checks its GEMM sizes), so the grid fits */
extern "C" cudaError_t dsl_cuda_mlp_bias_act(cudaStream_t s, float *z, const float *b, size_t n,
                                             size_t out, int relu)
{
    return !n || !out ? cudaSuccess : bias_act_t<float>(s, z, b, n, out, relu);
}

extern "C" cudaError_t dsl_cuda_mlp_loss(cudaStream_t s, const float *logits, const int32_t *y,
                                         size_t n, size_t c, float *loss, int32_t *correct,
                                         float *dz, float scale)
{
    return !n ? cudaSuccess : loss_t<float>(s, logits, y, n, c, loss, correct, dz, scale);
}

extern "C" cudaError_t dsl_cuda_mlp_bias_grad(cudaStream_t s, const float *dz, size_t n,
                                              size_t out, float *db)
{
    return !out ? cudaSuccess : bias_grad_t<float>(s, dz, n, out, db);
}

extern "C" cudaError_t dsl_cuda_mlp_relu_mask(cudaStream_t s, float *d, const float *a,
                                              size_t len)
{
    return !len ? cudaSuccess : relu_mask_t<float>(s, d, a, len);
}

extern "C" cudaError_t dsl_cuda_mlp_half_bias_act(cudaStream_t s, int bf16, void *z,
                                                  const void *b, size_t n, size_t out, int relu)
{
    if (!n || !out)
        return cudaSuccess;
    return bf16 ? bias_act_t<__nv_bfloat16>(s, z, b, n, out, relu)
                : bias_act_t<__half>(s, z, b, n, out, relu);
}

extern "C" cudaError_t dsl_cuda_mlp_half_loss(cudaStream_t s, int bf16, const void *logits,
                                              const int32_t *y, size_t n, size_t c, float *loss,
                                              int32_t *correct, void *dz, float scale)
{
    if (!n)
        return cudaSuccess;
    return bf16 ? loss_t<__nv_bfloat16>(s, logits, y, n, c, loss, correct, dz, scale)
                : loss_t<__half>(s, logits, y, n, c, loss, correct, dz, scale);
}

extern "C" cudaError_t dsl_cuda_mlp_half_bias_grad(cudaStream_t s, int bf16, const void *dz,
                                                   size_t n, size_t out, void *db)
{
    if (!out)
        return cudaSuccess;
    return bf16 ? bias_grad_t<__nv_bfloat16>(s, dz, n, out, db)
                : bias_grad_t<__half>(s, dz, n, out, db);
}

extern "C" cudaError_t dsl_cuda_mlp_half_relu_mask(cudaStream_t s, int bf16, void *d,
                                                   const void *a, size_t len)
{
    if (!len)
        return cudaSuccess;
    return bf16 ? relu_mask_t<__nv_bfloat16>(s, d, a, len) : relu_mask_t<__half>(s, d, a, len);
}

extern "C" cudaError_t dsl_cuda_mlp_loss_stats(cudaStream_t s, const float *loss,
                                               const int32_t *correct, size_t n, float *out,
                                               size_t stride)
{
    dsl_k_loss_stats<<<1, THREADS, 0, s>>>(loss, correct, n, out, stride);
    return cudaGetLastError();
}
