/*
 * A CPU emulation of the CUDA subset that src/model/model_gpt_kernels.cu uses, so that
 * its kernels compile as C++ (g++ -std=c++20) and run on a machine without a GPU
 * (run.sh). Each launch runs its blocks one after another, each block as blockDim real
 * threads: __shared__ is a static (one block lives at a time), dynamic shared memory
 * (extern __shared__, rewritten by launches.py) one buffer of the launch's size, filled
 * with NaN bytes first and refused above 48 KiB unless cudaFuncSetAttribute raised the
 * kernel's limit (as on a GPU; the opt-in limit is sm_90's 227 KiB, or EMU_SMEM_OPTIN
 * bytes), __syncthreads a barrier
 * over the block, __syncwarp one over the warp, __shfl_xor_sync an exchange through
 * memory between barriers over the warp, the _rn intrinsics plain IEEE operations
 * (compiled with -ffp-contract=off, as nvcc keeps them; fmaf is the C library's fused
 * one, as on the GPU). Races and memory ordering are those of the host, not of a GPU, so a
 * pass here is evidence about the arithmetic and indexing, not about timing.
 */
#pragma once
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __launch_bounds__(...)
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#undef __forceinline__ /* host_defines.h's, for nvcc */
#define __forceinline__ inline
#include <math.h>
#include <barrier>
#include <thread>
#include <vector>
#include <functional>
#include <string.h>
struct emu_ctx { uint3 t, b; dim3 bd, gd; };
extern thread_local emu_ctx emu_c;
extern std::barrier<> *emu_block_bar;
extern std::barrier<> *emu_warp_bar[32];
extern unsigned long long emu_xch[1024];
extern void *emu_dyn_smem;
#define threadIdx (emu_c.t)
#define blockIdx (emu_c.b)
#define blockDim (emu_c.bd)
#define gridDim (emu_c.gd)
static inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }
static inline void __syncwarp(unsigned = 0xffffffffu)
{
    emu_warp_bar[(threadIdx.x + threadIdx.y * blockDim.x) / 32]->arrive_and_wait();
}
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int o)
{
    unsigned tid = threadIdx.x + threadIdx.y * blockDim.x;
    unsigned long long u = 0;
    memcpy(&u, &v, sizeof(T));
    emu_warp_bar[tid / 32]->arrive_and_wait();
    emu_xch[tid] = u;
    emu_warp_bar[tid / 32]->arrive_and_wait();
    unsigned long long r = emu_xch[(tid & ~31u) | ((tid & 31u) ^ (unsigned)o)];
    emu_warp_bar[tid / 32]->arrive_and_wait();
    T out;
    memcpy(&out, &r, sizeof(T));
    return out;
}
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
void emu_run(dim3 g, dim3 b, size_t shm, const void *kernel, std::function<void()> f);
template <typename F> struct emu_launcher {
    dim3 g, b; F f; size_t shm;
    template <typename... A> void operator()(A... a)
    {
        F ff = f;
        emu_run(g, b, shm, (const void *)f, [=] { ff(a...); });
    }
};
template <typename F> emu_launcher<F> emu_launch(dim3 g, dim3 b, F f, size_t shm)
{
    return {g, b, f, shm};
}
// cuda_kernels.h's __CUDACC__ part
#define DSL_CUDA_THREADS 256
#define DSL_CUDA_MAX_BLOCKS 8192
static inline unsigned int dsl_cuda_blocks(size_t n)
{
    size_t b = (n + DSL_CUDA_THREADS - 1) / DSL_CUDA_THREADS;
    return (unsigned int)(b < DSL_CUDA_MAX_BLOCKS ? b : DSL_CUDA_MAX_BLOCKS);
}
#define DSL_GRID_STRIDE(i, n)                                                           \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);             \
         i += (size_t)gridDim.x * blockDim.x)
static inline float dsl_tof(float x) { return x; }
static inline float dsl_tof(__half x) { return __half2float(x); }
static inline float dsl_tof(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> T dsl_fromf(float x);
template <> inline float dsl_fromf<float>(float x) { return x; }
template <> inline __half dsl_fromf<__half>(float x) { return __float2half_rn(x); }
template <> inline __nv_bfloat16 dsl_fromf<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
