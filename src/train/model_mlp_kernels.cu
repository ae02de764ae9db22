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
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "train/cuda_kernels.h"

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
