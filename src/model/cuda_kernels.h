/*
 * Inside the CUDA path of dstrain: the kernel launchers of model_mlp_kernels.cu (the
 * MLP's elementwise parts) and model_gpt_kernels.cu and model_gpt_attention.cu (the
 * GPT's), callable from C, on the launch shape and the rules of the device's kernels
 * (dslaunch/device/cuda_kernels.h): each enqueues on the stream s it is given, returns
 * cudaGetLastError() read right after its launch and does nothing for empty input;
 * pointers are device pointers, kernel symbols are prefixed dsl_k_, and each kernel
 * mirrors its CPU loop (the test oracle) operation by operation.
 */
#ifndef DSL_CUDA_KERNELS_H
#define DSL_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "dslaunch/device/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- model_mlp_kernels.cu: the MLP (model_mlp_cuda.c) ---- */

/** z[i][k] = z[i][k] + b[k] over n rows of out, then ReLU if relu */
cudaError_t dsl_cuda_mlp_bias_act(cudaStream_t s, float *z, const float *b, size_t n, size_t out,
                                  int relu);
/** Softmax cross-entropy per sample over n rows of c logits: loss[i], correct[i]
 *  (argmax == y[i]) and, if dz is not NULL, dz = (softmax - onehot) x scale (the
 *  loss scale; 1 for the plain gradient) */
cudaError_t dsl_cuda_mlp_loss(cudaStream_t s, const float *logits, const int32_t *y, size_t n,
                              size_t c, float *loss, int32_t *correct, float *dz, float scale);
/** db[k] = sum over rows i of dz[i][k] (a fixed-order column reduction) */
cudaError_t dsl_cuda_mlp_bias_grad(cudaStream_t s, const float *dz, size_t n, size_t out,
                                   float *db);
/** d[i] = 0 where a[i] <= 0 (the ReLU's gradient), over len elements */
cudaError_t dsl_cuda_mlp_relu_mask(cudaStream_t s, float *d, const float *a, size_t len);
/** out[0] = sum of the n losses (in double, rounded to float), out[stride] = the number
 *  of non-zero correct[i]: the micro batch's stats, left in device memory */
cudaError_t dsl_cuda_mlp_loss_stats(cudaStream_t s, const float *loss, const int32_t *correct,
                                    size_t n, float *out, size_t stride);
/** The same four on 16-bit buffers (bf16 or fp16), with fp32 arithmetic inside: the
 *  bias add and the bias gradient's column sum in fp32, rounded once at the end; the
 *  loss from the widened logits, in fp32 (loss[] stays fp32), dz rounded to 16 bits
 *  after the multiply by the scale. */
cudaError_t dsl_cuda_mlp_half_bias_act(cudaStream_t s, int bf16, void *z, const void *b, size_t n,
                                       size_t out, int relu);
cudaError_t dsl_cuda_mlp_half_loss(cudaStream_t s, int bf16, const void *logits, const int32_t *y,
                                   size_t n, size_t c, float *loss, int32_t *correct, void *dz,
                                   float scale);
cudaError_t dsl_cuda_mlp_half_bias_grad(cudaStream_t s, int bf16, const void *dz, size_t n,
                                        size_t out, void *db);
cudaError_t dsl_cuda_mlp_half_relu_mask(cudaStream_t s, int bf16, void *d, const void *a,
                                        size_t len);

/* ---- model_gpt_kernels.cu and model_gpt_attention.cu: the GPT (model_gpt_cuda.c) ---- */

/* the element type of a GPT launcher's void * buffers (activations, parameters and
 * their gradients); statistics (LayerNorm mean and 1/std, losses) are always fp32 */
enum dsl_cuda_etype { DSL_CUDA_FP32 = 0, DSL_CUDA_FP16 = 1, DSL_CUDA_BF16 = 2 };

/** out[i] = wte[inp[i]] + wpe[i % T] over N rows of C */
cudaError_t dsl_cuda_gpt_encoder(cudaStream_t s, int et, void *out, const int32_t *inp,
                                 const void *wte, const void *wpe, size_t N, size_t T, size_t C);
/** dwpe[t] = sum over the B samples of d[b T + t], in sample order (fp32 out) */
cudaError_t dsl_cuda_gpt_wpe_grad(cudaStream_t s, int et, float *dwpe, const void *d, size_t B,
                                  size_t T, size_t C);
/** dwte[tok[u]] += d[rows[off[u]]] + ... + d[rows[off[u+1] - 1]] in that order, for the
 *  nu distinct tokens tok[] (dwte fp32; one block owns each token's row: no atomics) */
cudaError_t dsl_cuda_gpt_wte_scatter(cudaStream_t s, int et, float *dwte, const void *d,
                                     const int32_t *tok, const int32_t *off, const int32_t *rows,
                                     size_t nu, size_t C);
/** out = LayerNorm(x) w + b per row (eps 1e-5); mean and 1/std of each row kept */
cudaError_t dsl_cuda_gpt_layernorm(cudaStream_t s, int et, void *out, float *mean, float *rstd,
                                   const void *x, const void *w, const void *b, size_t N,
                                   size_t C);
/** dx += the gradient of LayerNorm's input per row, from dy and the saved mean/rstd */
cudaError_t dsl_cuda_gpt_ln_back(cudaStream_t s, int et, void *dx, const void *x, const void *dy,
                                 const void *w, const float *mean, const float *rstd, size_t N,
                                 size_t C);
/** The number of row chunks of a column sum over N rows (part needs 2 x chunks x cols
 *  floats). */
size_t dsl_cuda_gpt_colsum_chunks(size_t N);
/** out[c] = sum over rows of dy[i][c]; with x (LayerNorm), also out2[c] = sum of
 *  (x[i][c] - mean[i]) rstd[i] dy[i][c]. Fixed order: per chunk, then chunk by chunk. */
cudaError_t dsl_cuda_gpt_colsum(cudaStream_t s, int et, void *out, void *out2, const void *dy,
                                const void *x, const float *mean, const float *rstd, size_t N,
                                size_t cols, float *part);
/** o[i] = x[i] + b (x NULL: o[i] = b) over N rows of C */
cudaError_t dsl_cuda_gpt_resbias(cudaStream_t s, int et, void *o, const void *x, const void *b,
                                 size_t N, size_t C);
/** back 0: o = gelu(x) (tanh approximation, dsl_gpt_tanh's rational tanh);
 *  back 1: o *= gelu'(x) */
cudaError_t dsl_cuda_gpt_gelu(cudaStream_t s, int et, void *o, const void *x, size_t n, int back);
/** The largest head size (dim / heads) of the fused attention; the CUDA GPT refuses
 *  larger ones. */
#define DSL_CUDA_GPT_MAX_HEAD 128
/** *tc = 1 when the attention's tensor-core kernels (WMMA, 16-bit inputs, fp32
 *  accumulators) serve element type et on the current device: fp16 on sm_70 and later,
 *  bf16 on sm_80 and later, judged by the architecture of the kernels' code the device
 *  runs; 0 for fp32 (whose attention stays scalar fp32) and older devices. */
cudaError_t dsl_cuda_gpt_attention_tc(int et, int *tc);
/** The shared memory per block (bytes) that the attention's largest kernel takes at head
 *  size hs, tensor-core kernels (tc 1) or scalar (tc 0); 0 for hs 0 or above
 *  DSL_CUDA_GPT_MAX_HEAD. Above 48 KiB the device's cudaDevAttrMaxSharedMemoryPerBlockOptin
 *  must allow it. */
size_t dsl_cuda_gpt_attention_smem(size_t hs, int tc);
/** Lets the attention kernels of element type et at head size hs (tensor-core ones when
 *  tc) use their dynamic shared memory (cudaFuncSetAttribute); once per device, before
 *  their first launch. */
cudaError_t dsl_cuda_gpt_attention_setup(int et, size_t hs, int tc);
/** Causal self-attention, flash-style (no T x T matrix): from qkv [B, T, 3, NH, hs] (the
 *  qkv projection's rows), o [B, T, NH, hs] = softmax(q k^T / sqrt(hs), causal) v and
 *  lse [B NH, T] (fp32) the log-sum-exp of each query row's scaled scores, kept for the
 *  backward. tc: the tensor-core kernels (16-bit et only, where dsl_cuda_gpt_attention_tc
 *  says so), else the scalar fp32 ones. cudaErrorInvalidValue for hs 0 or above
 *  DSL_CUDA_GPT_MAX_HEAD, or tc with fp32. */
cudaError_t dsl_cuda_gpt_attention(cudaStream_t s, int et, int tc, void *o, float *lse,
                                   const void *qkv, size_t B, size_t T, size_t NH, size_t hs);
/** Its backward: dqkv [B, T, 3, NH, hs] (every element written) from the forward's qkv, o
 *  and lse and dout = dL/do [B, T, NH, hs]; D is fp32 scratch of B NH T (rowsum(dout o)).
 *  Deterministic: no atomics, one writer per element, fixed summation orders. tc as the
 *  forward's. */
cudaError_t dsl_cuda_gpt_attention_back(cudaStream_t s, int et, int tc, void *dqkv,
                                        const void *qkv, const void *o, const void *dout,
                                        const float *lse, float *D, size_t B, size_t T,
                                        size_t NH, size_t hs);
/** Per row of rows x V logits, rows ld >= V elements apart (rows r0.. of the micro
 *  batch): loss[r0 + i], arg[r0 + i] (argmax) and, when back, the logits overwritten with
 *  (softmax - onehot(tgt)) x f; the ld - V columns after each row are not touched */
cudaError_t dsl_cuda_gpt_classifier(cudaStream_t s, int et, void *logits, const int32_t *tgt,
                                    size_t rows, size_t V, size_t ld, size_t r0, float *loss,
                                    int32_t *arg, int back, float f);
/** out[0] = sum over B samples of their mean loss over T positions (double inside),
 *  out[stride] = samples whose last argmax equals their last target */
cudaError_t dsl_cuda_gpt_loss_stats(cudaStream_t s, const float *loss, const int32_t *arg,
                                    const int32_t *tgt, size_t B, size_t T, float *out,
                                    size_t stride);

#ifdef __cplusplus
}
#endif

#endif
