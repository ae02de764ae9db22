/*
 * A CPU emulation of the CUDA subset that src/model/model_gpt_kernels.cu and
 * model_gpt_attention.cu use, so that their kernels compile as C++ (g++ -std=c++20) and run on a machine without a GPU
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
 *
 * WMMA (nvcuda::wmma, the m16n16k16 shape with __half or __nv_bfloat16 inputs and float
 * accumulators; launches.py drops the .cu file's #include <mma.h>): each emulated thread's
 * fragment holds the whole 16 x 16 tile, the inputs as the 16-bit type (so they are
 * rounded, as in a GPU's registers), and no element access: a GPU spreads a fragment's
 * elements over the lanes in an unspecified order, so fragment.x and num_elements do not
 * exist here and code that reads them does not compile. load_matrix_sync,
 * store_matrix_sync, fill_fragment and mma_sync are warp-collective: a load reads after a
 * barrier over the warp (the lanes' shared memory writes before it are in), a store is
 * written by lane 0 between two barriers, so no lane reads it early. mma_sync adds the 16
 * products of each element in k order in fp32 (a product of two 16-bit numbers is exact
 * in fp32; a tensor core's internal order and rounding of the sum may differ in the last
 * bits). Misuse that a GPU leaves undefined aborts here: a pointer not 256-bit aligned,
 * ldm not a multiple of 8 elements (16-bit) or 4 (float).
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
#include <type_traits>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
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
static inline void __trap() { fprintf(stderr, "emu: __trap\n"); abort(); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
/* the device ops' reductions (device_kernels.cu): the block's threads run concurrently */
static inline unsigned atomicMax(unsigned *p, unsigned v)
{
    unsigned o = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (o < v && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return o;
}
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
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
// cuda_kernels.h (included right after this file) gives the launch shape
// (DSL_CUDA_THREADS, dsl_cuda_blocks, DSL_GRID_STRIDE) with DSL_CUDA_EMU; the rest of
// its __CUDACC__ part follows without __device__
#define DSL_CUDA_EMU 1
static inline float dsl_tof(float x) { return x; }
static inline float dsl_tof(__half x) { return __half2float(x); }
static inline float dsl_tof(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> T dsl_fromf(float x);
template <> inline float dsl_fromf<float>(float x) { return x; }
template <> inline __half dsl_fromf<__half>(float x) { return __float2half_rn(x); }
template <> inline __nv_bfloat16 dsl_fromf<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// nvcuda::wmma, m16n16k16 (see the top)
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <typename Use, int M, int N, int K, typename T, typename Layout = void> class fragment;
template <typename Use, typename T, typename Layout> class fragment<Use, 16, 16, 16, T, Layout> {
  public:
    T e[16][16]; /* [row][column] of the matrix this fragment holds */
};
static inline void emu_wmma_check(const void *p, unsigned ldm, size_t esz, const char *what)
{
    if ((uintptr_t)p % 32) {
        fprintf(stderr, "emu: wmma %s: pointer %p is not 256-bit aligned\n", what, p);
        abort();
    }
    if (ldm % (16 / esz) || ldm < 16) {
        fprintf(stderr, "emu: wmma %s: ldm %u is not a multiple of %zu elements (at least 16)\n",
                what, ldm, 16 / esz);
        abort();
    }
}
/* element (r, c) of a matrix stored row- or column-major with leading dimension ldm */
static inline size_t emu_wmma_at(bool rowmaj, unsigned r, unsigned c, unsigned ldm)
{
    return rowmaj ? (size_t)r * ldm + c : (size_t)c * ldm + r;
}
template <typename Use, typename T, typename L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm)
{
    static_assert(!std::is_same<Use, accumulator>::value, "accumulators take a layout_t");
    emu_wmma_check(p, ldm, sizeof(T), "load_matrix_sync");
    __syncwarp();
    for (unsigned r = 0; r < 16; r++)
        for (unsigned c = 0; c < 16; c++)
            f.e[r][c] = p[emu_wmma_at(std::is_same<L, row_major>::value, r, c, ldm)];
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                                    unsigned ldm, layout_t l)
{
    emu_wmma_check(p, ldm, sizeof(float), "load_matrix_sync");
    __syncwarp();
    for (unsigned r = 0; r < 16; r++)
        for (unsigned c = 0; c < 16; c++)
            f.e[r][c] = p[emu_wmma_at(l == mem_row_major, r, c, ldm)];
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                                     unsigned ldm, layout_t l)
{
    emu_wmma_check(p, ldm, sizeof(float), "store_matrix_sync");
    __syncwarp();
    if ((threadIdx.x + threadIdx.y * blockDim.x) % 32 == 0)
        for (unsigned r = 0; r < 16; r++)
            for (unsigned c = 0; c < 16; c++)
                p[emu_wmma_at(l == mem_row_major, r, c, ldm)] = f.e[r][c];
    __syncwarp();
}
template <typename Use, typename T, typename L, typename V>
void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, V v)
{
    T t = (T)v;
    for (unsigned r = 0; r < 16; r++)
        for (unsigned c = 0; c < 16; c++)
            f.e[r][c] = t;
}
template <typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, T, LA> &a,
              const fragment<matrix_b, 16, 16, 16, T, LB> &b,
              const fragment<accumulator, 16, 16, 16, float> &c)
{
    static_assert(std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value,
                  "the emulated wmma takes 16-bit inputs");
    float out[16][16];
    for (unsigned r = 0; r < 16; r++)
        for (unsigned n = 0; n < 16; n++) {
            float s = c.e[r][n];
            for (unsigned k = 0; k < 16; k++)
                s += dsl_tof(a.e[r][k]) * dsl_tof(b.e[k][n]);
            out[r][n] = s;
        }
    memcpy(d.e, out, sizeof(out));
}
} // namespace wmma
} // namespace nvcuda
