/*
 * What the GPT's two kernel files (model_gpt_kernels.cu, model_gpt_attention.cu) share:
 * the launch width, the element-type dispatch of their launchers, the warp reductions
 * (a fixed xor-shuffle tree, so the same bits on every run) and the warp-per-row loop.
 * Internal to src/model; include it after cuda_kernels.h.
 */
#ifndef DSL_MODEL_GPT_KERNELS_CUH
#define DSL_MODEL_GPT_KERNELS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_kernels.h"

#define THREADS DSL_CUDA_THREADS
#define WARPS (THREADS / 32)

/* the launchers' element type: 0 fp32, 1 fp16, 2 bf16 (enum dsl_cuda_etype) */
#define DISPATCH(et, call)                                                                   \
    ((et) == DSL_CUDA_BF16 ? call(__nv_bfloat16) : (et) == DSL_CUDA_FP16 ? call(__half)      \
                                                                         : call(float))

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static inline unsigned int row_blocks(size_t rows)
{
    size_t b = (rows + WARPS - 1) / WARPS;
    return (unsigned int)(b < DSL_CUDA_MAX_BLOCKS ? b : DSL_CUDA_MAX_BLOCKS);
}

/* the warp's row loop: warp w of the grid takes rows w, w + nwarps, ... */
#define WARP_ROWS(i, n)                                                                      \
    const unsigned lane = threadIdx.x & 31u;                                                 \
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; i < (n);           \
         i += ((size_t)gridDim.x * blockDim.x) >> 5)

#endif
