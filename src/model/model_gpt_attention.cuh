/*
 * What the GPT attention's two kernel files share (model_gpt_attention.cu: the scalar
 * fp32 kernels and the public launchers; model_gpt_attention_tc.cu: the tensor-core
 * kernels and their launchers): the tile geometry, the head-size dispatch and the
 * tensor-core launchers the public ones call. Internal to src/model; include it after
 * model_gpt_kernels.cuh.
 */
#ifndef DSL_MODEL_GPT_ATTENTION_CUH
#define DSL_MODEL_GPT_ATTENTION_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#include "cuda_kernels.h"

#define FA_TILE 32
#define FA_WARPS 4
#define FA_ROWS (FA_TILE / FA_WARPS)
#define FA_THREADS (FA_WARPS * 32)
#define FA_HS_MAX DSL_CUDA_GPT_MAX_HEAD
/* the padded head columns of head size hs (1..FA_HS_MAX) */
#define FA_HSP(hs) ((hs) <= 32 ? 32 : (hs) <= 64 ? 64 : (hs) <= 96 ? 96 : 128)

/* the attention's launches at head size hs: call(ty, HS) for its padded columns */
#define FA_DISPATCH(call, ty)                                                                \
    (FA_HSP(hs) == 32   ? call(ty, 32)                                                       \
     : FA_HSP(hs) == 64 ? call(ty, 64)                                                       \
     : FA_HSP(hs) == 96 ? call(ty, 96)                                                       \
                        : call(ty, 128))

/* kernel k may take bytes of dynamic shared memory (the runtime's C entry point, which
 * the CPU emulation provides too) */
template <typename K>
static inline cudaError_t fa_set(K *k, size_t bytes)
{
    return cudaFuncSetAttribute((const void *)k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)bytes);
}

/* the tensor-core kernels (model_gpt_attention_tc.cu), 16-bit et only, hs checked by
 * the caller: the largest kernel's shared memory at padded head columns H; the
 * attributes of the bf16 (et DSL_CUDA_BF16) or fp16 forward kernel's binary; the
 * shared-memory opt-in; the forward; the backward's dk/dv and dq kernels (after the
 * caller's row dots D) */
size_t dsl_cuda_gpt_attn_tc_smem(size_t H);
cudaError_t dsl_cuda_gpt_attn_tc_arch(int et, cudaFuncAttributes *a);
cudaError_t dsl_cuda_gpt_attn_tc_setup(int et, size_t hs);
cudaError_t dsl_cuda_gpt_attn_tc_fwd(cudaStream_t s, int et, void *o, float *lse,
                                     const void *qkv, size_t B, size_t T, size_t NH,
                                     size_t hs);
cudaError_t dsl_cuda_gpt_attn_tc_back(cudaStream_t s, int et, void *dqkv, const void *qkv,
                                      const void *dout, const float *lse, const float *D,
                                      size_t B, size_t T, size_t NH, size_t hs);

#endif
