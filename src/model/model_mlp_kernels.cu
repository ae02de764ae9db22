/*
 * The elementwise parts of the CUDA MLP (model_mlp_cuda.c): bias + ReLU after each
 * layer's sgemm, softmax cross-entropy with its gradient, the bias gradient and the
 * ReLU's gradient mask. The loss kernel multiplies dz by the trainer's loss scale (x 1
 * is exact, so it does so unconditionally; the CPU skips the multiply at 1).
 *
 * Theory of operation. Each kernel is the CPU loop of model_mlp.c with one thread per
 * element (bias_act, relu_mask), per sample (loss: classes are few) or per output
 * column (bias_grad: the column sum runs over the samples in order, exactly as the CPU
 * adds them, so the bias gradient of a given dz is bit-identical to the CPU's). All run
 * on the legacy default stream with cuBLAS. expf/logf are CUDA's (within 2 ulp of
 * glibc's), so the loss and dz differ from the CPU's in the last bits; the GPU test
 * compares with a tolerance.
 *
 * The 16-bit versions (k_half_*, for fp16 and bf16 compute) are the same loops over
 * 16-bit buffers: each element is widened to fp32, the arithmetic is the fp32 kernel's,
 * and the result is rounded to 16 bits once (nearest even). The softmax cross-entropy
 * reads 16-bit logits but computes and stores the loss in fp32; only dz is rounded,
 * after the multiply by the loss scale (with fp16 a large scale overflows to inf there,
 * which the trainer's overflow check sees); the bias gradient sums the column in fp32.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_kernels.h"

#define THREADS DSL_CUDA_THREADS
#define GRID_STRIDE DSL_GRID_STRIDE

__global__ void k_bias_act(float *z, const float *b, size_t n, size_t out, int relu)
{
    GRID_STRIDE(i, n * out)
    {
        float v = __fadd_rn(z[i], b[i % out]);
        z[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
    }
}

__global__ void k_loss(const float *logits, const int32_t *y, size_t n, size_t c, float *loss,
                       int32_t *correct, float *dz, float scale)
{
    GRID_STRIDE(i, n)
    {
        const float *zi = logits + i * c;
        size_t am = 0;
        for (size_t k = 1; k < c; k++)
            if (zi[k] > zi[am])
                am = k;
        float mx = zi[am], sum = 0.0f;
        for (size_t k = 0; k < c; k++)
            sum = __fadd_rn(sum, expf(__fsub_rn(zi[k], mx)));
        float lse = __fadd_rn(mx, logf(sum));
        size_t yi = (size_t)y[i];
        loss[i] = __fsub_rn(lse, zi[yi]);
        correct[i] = am == yi;
        if (dz) {
            float inv = __fdiv_rn(1.0f, sum);
            for (size_t k = 0; k < c; k++)
                dz[i * c + k] = __fmul_rn(__fsub_rn(__fmul_rn(expf(__fsub_rn(zi[k], mx)),
                                                              inv),
                                                    k == yi ? 1.0f : 0.0f),
                                          scale);
        }
    }
}

__global__ void k_bias_grad(const float *dz, size_t n, size_t out, float *db)
{
    GRID_STRIDE(k, out)
    {
        float acc = 0.0f;
        for (size_t i = 0; i < n; i++)
            acc = __fadd_rn(acc, dz[i * out + k]);
        db[k] = acc;
    }
}

__global__ void k_relu_mask(float *d, const float *a, size_t len)
{
    GRID_STRIDE(i, len)
    if (a[i] <= 0.0f)
        d[i] = 0.0f;
}

template <typename H>
__global__ void k_half_bias_act(H *z, const H *b, size_t n, size_t out, int relu)
{
    GRID_STRIDE(i, n * out)
    {
        float v = __fadd_rn(dsl_tof(z[i]), dsl_tof(b[i % out]));
        z[i] = dsl_fromf<H>(relu ? (v > 0.0f ? v : 0.0f) : v);
    }
}

template <typename H>
__global__ void k_half_loss(const H *logits, const int32_t *y, size_t n, size_t c, float *loss,
                            int32_t *correct, H *dz, float scale)
{
    GRID_STRIDE(i, n)
    {
        const H *zi = logits + i * c;
        size_t am = 0;
        float mx = dsl_tof(zi[0]), sum = 0.0f;
        for (size_t k = 1; k < c; k++)
            if (dsl_tof(zi[k]) > mx) {
                am = k;
                mx = dsl_tof(zi[k]);
            }
        for (size_t k = 0; k < c; k++)
            sum = __fadd_rn(sum, expf(__fsub_rn(dsl_tof(zi[k]), mx)));
        float lse = __fadd_rn(mx, logf(sum));
        size_t yi = (size_t)y[i];
        loss[i] = __fsub_rn(lse, dsl_tof(zi[yi]));
        correct[i] = am == yi;
        if (dz) {
            float inv = __fdiv_rn(1.0f, sum);
            for (size_t k = 0; k < c; k++)
                dz[i * c + k] = dsl_fromf<H>(
                    __fmul_rn(__fsub_rn(__fmul_rn(expf(__fsub_rn(dsl_tof(zi[k]), mx)), inv),
                                        k == yi ? 1.0f : 0.0f),
                              scale));
        }
    }
}

template <typename H> __global__ void k_half_bias_grad(const H *dz, size_t n, size_t out, H *db)
{
    GRID_STRIDE(k, out)
    {
        float acc = 0.0f;
        for (size_t i = 0; i < n; i++)
            acc = __fadd_rn(acc, dsl_tof(dz[i * out + k]));
        db[k] = dsl_fromf<H>(acc);
    }
}

template <typename H> __global__ void k_half_relu_mask(H *d, const H *a, size_t len)
{
    GRID_STRIDE(i, len)
    if (dsl_tof(a[i]) <= 0.0f)
        d[i] = dsl_fromf<H>(0.0f);
}

extern "C" cudaError_t dsl_cuda_mlp_bias_act(float *z, const float *b, size_t n, size_t out,
                                             int relu)
{
    if (!n || !out)
        return cudaSuccess;
    k_bias_act<<<dsl_cuda_blocks(n * out), THREADS, 0, cudaStreamLegacy>>>(z, b, n, out, relu);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_mlp_loss(const float *logits, const int32_t *y, size_t n,
                                         size_t c, float *loss, int32_t *correct, float *dz,
                                         float scale)
{
    if (!n)
        return cudaSuccess;
    k_loss<<<dsl_cuda_blocks(n), THREADS, 0, cudaStreamLegacy>>>(logits, y, n, c, loss, correct,
                                                             dz, scale);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_mlp_bias_grad(const float *dz, size_t n, size_t out,
                                              float *db)
{
    if (!out)
        return cudaSuccess;
    k_bias_grad<<<dsl_cuda_blocks(out), THREADS, 0, cudaStreamLegacy>>>(dz, n, out, db);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_mlp_relu_mask(float *d, const float *a, size_t len)
{
    if (!len)
        return cudaSuccess;
    k_relu_mask<<<dsl_cuda_blocks(len), THREADS, 0, cudaStreamLegacy>>>(d, a, len);
    return cudaGetLastError();
}

/* ---- 16-bit launchers: the element type from bf16 ---- */

template <typename H>
static cudaError_t half_bias_act_t(void *z, const void *b, size_t n, size_t out, int relu)
{
    k_half_bias_act<H><<<dsl_cuda_blocks(n * out), THREADS, 0, cudaStreamLegacy>>>(
        (H *)z, (const H *)b, n, out, relu);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_mlp_half_bias_act(int bf16, void *z, const void *b, size_t n,
                                                  size_t out, int relu)
{
    if (!n || !out)
        return cudaSuccess;
    return bf16 ? half_bias_act_t<__nv_bfloat16>(z, b, n, out, relu)
                : half_bias_act_t<__half>(z, b, n, out, relu);
}

template <typename H>
static cudaError_t half_loss_t(const void *logits, const int32_t *y, size_t n, size_t c,
                               float *loss, int32_t *correct, void *dz, float scale)
{
    k_half_loss<H><<<dsl_cuda_blocks(n), THREADS, 0, cudaStreamLegacy>>>(
        (const H *)logits, y, n, c, loss, correct, (H *)dz, scale);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_mlp_half_loss(int bf16, const void *logits, const int32_t *y,
                                              size_t n, size_t c, float *loss,
                                              int32_t *correct, void *dz, float scale)
{
    if (!n)
        return cudaSuccess;
    return bf16 ? half_loss_t<__nv_bfloat16>(logits, y, n, c, loss, correct, dz, scale)
                : half_loss_t<__half>(logits, y, n, c, loss, correct, dz, scale);
}

template <typename H>
static cudaError_t half_bias_grad_t(const void *dz, size_t n, size_t out, void *db)
{
    k_half_bias_grad<H><<<dsl_cuda_blocks(out), THREADS, 0, cudaStreamLegacy>>>(
        (const H *)dz, n, out, (H *)db);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_mlp_half_bias_grad(int bf16, const void *dz, size_t n,
                                                   size_t out, void *db)
{
    if (!out)
        return cudaSuccess;
    return bf16 ? half_bias_grad_t<__nv_bfloat16>(dz, n, out, db)
                : half_bias_grad_t<__half>(dz, n, out, db);
}

template <typename H> static cudaError_t half_relu_mask_t(void *d, const void *a, size_t len)
{
    k_half_relu_mask<H><<<dsl_cuda_blocks(len), THREADS, 0, cudaStreamLegacy>>>(
        (H *)d, (const H *)a, len);
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_mlp_half_relu_mask(int bf16, void *d, const void *a, size_t len)
{
    if (!len)
        return cudaSuccess;
    return bf16 ? half_relu_mask_t<__nv_bfloat16>(d, a, len) : half_relu_mask_t<__half>(d, a, len);
}
