/*
 * Inside the CUDA path of dstrain: the kernel launchers of device_kernels.cu (the
 * device's buffer operations), model_mlp_kernels.cu (the MLP's elementwise parts) and
 * model_gpt_kernels.cu and model_gpt_attention.cu (the GPT's), callable from C. Every launcher enqueues on the stream s it is given (the device's
 * stream, which the model's cuBLAS handle and the nccl comm's ordering events use too),
 * returns cudaGetLastError() read right after its launch (the caller names the kernel
 * in the message) and does nothing for empty input. Pointers are device pointers.
 * Kernel symbols are prefixed dsl_k_ so that they cannot clash with another library's.
 *
 * Each kernel mirrors a CPU loop, its test oracle, with the same float operations in
 * the same order, written with round-to-nearest intrinsics so that nvcc cannot
 * contract a multiply and an add into an FMA: the CPU reference is then the exact
 * oracle for the elementwise kernels (see test_gpu_trainer.c).
 */
#ifndef DSL_CUDA_KERNELS_H
#define DSL_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __CUDACC__
/* The launch shape of every kernel: DSL_CUDA_THREADS per block, and grid-stride loops
 * over at most DSL_CUDA_MAX_BLOCKS blocks, so any n fits one launch. */
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
