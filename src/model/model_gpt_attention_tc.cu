/*
 * The CUDA GPT's causal self-attention on tensor cores (fp16 and bf16): the WMMA
 * kernels and their launchers, which model_gpt_attention.cu's public launchers call
 * when dsl_cuda_gpt_attention_tc says the device runs them. model_gpt_attention.cu
 * describes the scalar kernels these follow; the theory of operation of this file is
 * the section below.
 */
#include <cuda_runtime.h>
#include <mma.h>
#include <stdint.h>

#include <type_traits>

#include "cuda_kernels.h"
#include "model_gpt_kernels.cuh"
#include "model_gpt_attention.cuh"

/* ---- attention on tensor cores (fp16 and bf16) ----
 *
 * The same three kernels and the same work split (grid, tiles of 32, 4 warps, one writer
 * per output element, no atomics) with the products on tensor cores through WMMA
 * (nvcuda::wmma, m16n16k16, 16-bit inputs, fp32 accumulators): S = Q K^T, O += P V,
 * dP = dO V^T, dV += P^T dO, dK += dS^T Q, dQ += dS K. A 32 x 32 score tile is four
 * 16 x 16 fragments, one per warp (warp w: rows 16 (w / 2), columns 16 (w % 2)); an
 * output tile of 32 x HS is 2 x HS/16 fragments, warp w holding rows 16 (w / 2) and half
 * the columns (HS/32 fragments), which live in registers for the whole key or query loop.
 * The kernel never depends on how a fragment's elements are spread over the lanes (WMMA
 * leaves that unspecified): scores go to shared memory as fp32 (store_matrix_sync), the
 * row-wise softmax work runs there as in the scalar kernels (warp w rows 8 w.., lane j
 * key j: max and sum by warp shuffles), P and dS are written back as the 16-bit type and
 * loaded as matrix_a fragments, and the outputs leave through shared memory too, where
 * the threads scale, round and store them coalesced.
 *
 * The forward takes two passes over the key tiles: the first computes each row's max and
 * sum (online, in fp32, as the scalar kernel) and so lse; the second recomputes S and
 * adds P V with P = exp(scale S - lse) already normalised, so the accumulators are never
 * rescaled (a rescale would need the fragment layout). That costs one more Q K^T per
 * tile (three products forward instead of two) and a second read of the key tiles.
 *
 * Tiles in shared memory (FT_SM_*): Q, K, V, dO as the 16-bit type, rows of HS + 8
 * elements (ldm a multiple of 8 and every fragment's first element 32-byte aligned, as
 * WMMA requires; the 8 also spread the rows over the banks), the fp32 score tiles S and
 * dP in rows of 36, the 16-bit P and dS in rows of 40. The output staging (fp32, rows of
 * HS + 4) reuses the tile space after the loop.
 *
 * Roundings beyond the scalar kernel's: P (forward and dk/dv) and dS (dk/dv and dq) are
 * rounded to the 16-bit type before their products (the scalar kernel keeps them fp32);
 * the tensor core adds a fragment's 16 products in an order and with an internal
 * precision of its own (fp32 or better per NVIDIA; the emulator adds them in k order in
 * fp32). Q, K, V and dO are 16-bit in memory already, so their fragments are exact; the
 * accumulators, the scores, lse and D are fp32; each result is rounded once when stored.
 * dS = P (dP - D) is small where P is: in fp16, values below 2^-24 flush to zero (the
 * trainer's loss scale keeps gradients away from there, as for every fp16 gradient).
 *
 * bf16 WMMA needs sm_80: compiled for an older architecture the bf16 kernels are a trap,
 * and dsl_cuda_gpt_attention_tc reads the architecture of the binary that the device
 * runs (cudaFuncGetAttributes) so that such a device takes the scalar kernels. fp16 WMMA
 * runs on sm_70 and later, every architecture this project builds for.
 */
#define FT_LD(HS) ((HS) + 8) /* 16-bit tile rows */
#define FT_SLD 36            /* fp32 score tile rows */
#define FT_PLD 40            /* 16-bit P and dS rows */
#define FT_OLD(HS) ((HS) + 4) /* fp32 output staging rows */
/* shared memory in bytes: n 16-bit tiles, m fp32 score tiles, p 16-bit P/dS tiles, and in
 * dk/dv the query tile's lse and D */
#define FT_TILES(HS, n) ((n) * FA_TILE * FT_LD(HS) * 2)
#define FT_SM_FWD(HS) (FT_TILES(HS, 3) + FA_TILE * FT_SLD * 4 + FA_TILE * FT_PLD * 2)
#define FT_SM_DKV(HS) (FT_TILES(HS, 4) + 2 * FA_TILE * FT_SLD * 4 + 2 * FA_TILE * FT_PLD * 2 + \
                       2 * FA_TILE * 4)
#define FT_SM_DQ(HS) (FT_TILES(HS, 4) + 2 * FA_TILE * FT_SLD * 4 + FA_TILE * FT_PLD * 2)

/* whether WMMA takes T on the architecture being compiled (always on the host pass) */
template <typename T> struct ft_arch_ok {
    static constexpr bool v = true;
};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
template <> struct ft_arch_ok<__nv_bfloat16> {
    static constexpr bool v = false;
};
#endif

namespace wmma = nvcuda::wmma;
template <typename T> using ft_a_row = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T> using ft_a_col = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major>;
template <typename T> using ft_b_row = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <typename T> using ft_b_col = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using ft_acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/* stage rows r0.. of one head (row stride ld, hs columns) as 16-bit rows of FT_LD(HS),
 * zeros past the T rows and the hs columns (the bits are copied, not converted): in
 * 16-byte pieces of 8 elements where the head allows (hs and ld multiples of 8, src
 * 16-byte aligned: GPT-2's 64 does), else element by element */
template <typename T, int HS>
static __device__ __forceinline__ void ft_load(T *dst, const T *src, size_t r0, size_t Tc,
                                               size_t ld, size_t hs)
{
    if (hs % 8 == 0 && ld % 8 == 0 && (reinterpret_cast<uintptr_t>(src) & 15u) == 0) {
        for (unsigned i = threadIdx.x; i < FA_TILE * HS / 8; i += FA_THREADS) {
            unsigned r = i / (HS / 8), d = i % (HS / 8) * 8;
            size_t t = r0 + r;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (t < Tc && d < hs)
                v = *reinterpret_cast<const uint4 *>(src + t * ld + d);
            *reinterpret_cast<uint4 *>(dst + r * FT_LD(HS) + d) = v;
        }
        return;
    }
    for (unsigned i = threadIdx.x; i < FA_TILE * HS; i += FA_THREADS) {
        unsigned r = i / HS, d = i % HS;
        size_t t = r0 + r;
        dst[r * FT_LD(HS) + d] = t < Tc && d < hs ? src[t * ld + d] : dsl_fromf<T>(0.0f);
    }
}

/* this warp's 16 x 16 block of a x b^T (a, b: 32 x HS tiles, rows of FT_LD) into the fp32
 * tile s (rows of FT_SLD): rows 16 (w / 2) of a, rows 16 (w % 2) of b */
template <typename T, int HS>
static __device__ __forceinline__ void ft_abt(float *s, const T *a, const T *b, unsigned w)
{
    const unsigned rb = w >> 1, cb = w & 1;
    ft_acc acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll 2
    for (int k = 0; k < HS; k += 16) {
        ft_a_row<T> fa;
        ft_b_col<T> fb;
        wmma::load_matrix_sync(fa, a + rb * 16 * FT_LD(HS) + k, FT_LD(HS));
        wmma::load_matrix_sync(fb, b + cb * 16 * FT_LD(HS) + k, FT_LD(HS));
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(s + rb * 16 * FT_SLD + cb * 16, acc, FT_SLD, wmma::mem_row_major);
}

/* acc[j] += this warp's rows of p (32 x 32, rows of FT_PLD; transposed when A is col_major)
 * times columns 16 (HS/32 (w % 2) + j) of x (32 x HS, rows of FT_LD) */
template <typename T, int HS, typename A>
static __device__ __forceinline__ void ft_ptimes(ft_acc (&acc)[HS / 32], const T *p, const T *x,
                                                 unsigned w)
{
    const unsigned rb = w >> 1;
#pragma unroll
    for (int k = 0; k < FA_TILE; k += 16) {
        A fa;
        if constexpr (std::is_same<A, ft_a_row<T>>::value)
            wmma::load_matrix_sync(fa, p + rb * 16 * FT_PLD + k, FT_PLD);
        else
            wmma::load_matrix_sync(fa, p + k * FT_PLD + rb * 16, FT_PLD);
#pragma unroll
        for (int j = 0; j < HS / 32; j++) {
            ft_b_row<T> fb;
            wmma::load_matrix_sync(fb, x + k * FT_LD(HS) + ((w & 1) * (HS / 32) + j) * 16,
                                   FT_LD(HS));
            wmma::mma_sync(acc[j], fa, fb, acc[j]);
        }
    }
}

/* the warp's accumulators into the fp32 staging tile o (rows of FT_OLD) */
template <int HS>
static __device__ __forceinline__ void ft_stage(float *o, const ft_acc (&acc)[HS / 32], unsigned w)
{
#pragma unroll
    for (int j = 0; j < HS / 32; j++)
        wmma::store_matrix_sync(o + (w >> 1) * 16 * FT_OLD(HS) + ((w & 1) * (HS / 32) + j) * 16,
                                acc[j], FT_OLD(HS), wmma::mem_row_major);
}

/* rows r0.. (row stride ld) of one head = the staged tile x f, rounded once */
template <typename T, int HS>
static __device__ __forceinline__ void ft_write(T *dst, const float *o, float f, size_t r0,
                                                size_t Tc, size_t ld, size_t hs)
{
    for (unsigned i = threadIdx.x; i < FA_TILE * HS; i += FA_THREADS) {
        unsigned r = i / HS, d = i % HS;
        size_t t = r0 + r;
        if (t < Tc && d < hs)
            dst[t * ld + d] = dsl_fromf<T>(o[r * FT_OLD(HS) + d] * f);
    }
}

template <typename T, int HS>
static __device__ __forceinline__ void ft_fwd(T *o, float *lse, const T *qkv, size_t Tc,
                                              size_t NH, size_t hs, float scale)
{
    extern __shared__ __align__(128) float ft_sm[]; /* FT_SM_FWD(HS) bytes */
    T *qs = reinterpret_cast<T *>(ft_sm), *ks = qs + FA_TILE * FT_LD(HS),
      *vs = ks + FA_TILE * FT_LD(HS);
    float *ss = reinterpret_cast<float *>(vs + FA_TILE * FT_LD(HS));
    T *ps = reinterpret_cast<T *>(ss + FA_TILE * FT_SLD);
    const unsigned lane = threadIdx.x & 31u, w = threadIdx.x >> 5;
    const size_t C = NH * hs, bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const size_t t0 = (size_t)blockIdx.y * FA_TILE;
    const T *q = qkv + b * Tc * 3 * C + h * hs, *k = q + C, *v = q + 2 * C;
    ft_load<T, HS>(qs, q, t0, Tc, 3 * C, hs);
    /* pass 1: each row's max and sum of exponentials, online */
    float m[FA_ROWS], l[FA_ROWS];
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    const size_t u0 = lane;
    for (size_t k0 = 0; k0 <= t0; k0 += FA_TILE) {
        __syncthreads(); /* the previous tile's readers are done */
        ft_load<T, HS>(ks, k, k0, Tc, 3 * C, hs);
        __syncthreads();
        ft_abt<T, HS>(ss, qs, ks, w);
        __syncthreads();
        const size_t u = k0 + u0;
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) {
            const size_t t = t0 + w * FA_ROWS + r;
            float sc = u <= t && u < Tc ? ss[(w * FA_ROWS + r) * FT_SLD + lane] * scale : -INFINITY;
            float mn = fmaxf(m[r], warp_max(sc)); /* finite: key 0 is in the first tile */
            l[r] = fmaf(l[r], expf(m[r] - mn), warp_sum(expf(sc - mn)));
            m[r] = mn;
        }
    }
    float lr[FA_ROWS];
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++)
        lr[r] = m[r] + logf(l[r]);
    /* pass 2: O = sum over the key tiles of P V, P = exp(scale S - lse) */
    ft_acc acc[HS / 32];
#pragma unroll
    for (int j = 0; j < HS / 32; j++)
        wmma::fill_fragment(acc[j], 0.0f);
    for (size_t k0 = 0; k0 <= t0; k0 += FA_TILE) {
        __syncthreads();
        ft_load<T, HS>(ks, k, k0, Tc, 3 * C, hs);
        ft_load<T, HS>(vs, v, k0, Tc, 3 * C, hs);
        __syncthreads();
        ft_abt<T, HS>(ss, qs, ks, w);
        __syncthreads();
        const size_t u = k0 + u0;
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) {
            const size_t t = t0 + w * FA_ROWS + r, i = w * FA_ROWS + r;
            float pr = u <= t && t < Tc ? expf(ss[i * FT_SLD + lane] * scale - lr[r]) : 0.0f;
            ps[i * FT_PLD + lane] = dsl_fromf<T>(pr);
        }
        __syncthreads();
        ft_ptimes<T, HS, ft_a_row<T>>(acc, ps, vs, w);
    }
    __syncthreads(); /* the tiles are free: stage O over them */
    ft_stage<HS>(ft_sm, acc, w);
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        const size_t t = t0 + w * FA_ROWS + r;
        if (lane == 0 && t < Tc)
            lse[bh * Tc + t] = lr[r];
    }
    __syncthreads();
    ft_write<T, HS>(o + b * Tc * C + h * hs, ft_sm, 1.0f, t0, Tc, C, hs);
}

template <typename T, int HS>
static __device__ __forceinline__ void ft_dkv(T *dqkv, const T *qkv, const T *dout,
                                              const float *lse, const float *D, size_t Tc,
                                              size_t NH, size_t hs, float scale)
{
    extern __shared__ __align__(128) float ft_sm[]; /* FT_SM_DKV(HS) bytes */
    T *qs = reinterpret_cast<T *>(ft_sm), *dos = qs + FA_TILE * FT_LD(HS),
      *ks = dos + FA_TILE * FT_LD(HS), *vs = ks + FA_TILE * FT_LD(HS);
    float *ss = reinterpret_cast<float *>(vs + FA_TILE * FT_LD(HS)), *dps = ss + FA_TILE * FT_SLD;
    T *ps = reinterpret_cast<T *>(dps + FA_TILE * FT_SLD), *dss = ps + FA_TILE * FT_PLD;
    float *sl = reinterpret_cast<float *>(dss + FA_TILE * FT_PLD), *sd = sl + FA_TILE;
    const unsigned lane = threadIdx.x & 31u, w = threadIdx.x >> 5;
    const size_t C = NH * hs, bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const size_t k0 = (size_t)blockIdx.y * FA_TILE;
    const T *q = qkv + b * Tc * 3 * C + h * hs, *k = q + C, *v = q + 2 * C;
    const T *dor = dout + b * Tc * C + h * hs;
    ft_load<T, HS>(ks, k, k0, Tc, 3 * C, hs);
    ft_load<T, HS>(vs, v, k0, Tc, 3 * C, hs);
    ft_acc dk[HS / 32], dv[HS / 32];
#pragma unroll
    for (int j = 0; j < HS / 32; j++) {
        wmma::fill_fragment(dk[j], 0.0f);
        wmma::fill_fragment(dv[j], 0.0f);
    }
    for (size_t t0 = k0; t0 < Tc; t0 += FA_TILE) {
        __syncthreads();
        ft_load<T, HS>(qs, q, t0, Tc, 3 * C, hs);
        ft_load<T, HS>(dos, dor, t0, Tc, C, hs);
        if (threadIdx.x < FA_TILE) {
            size_t t = t0 + threadIdx.x;
            sl[threadIdx.x] = t < Tc ? lse[bh * Tc + t] : 0.0f;
            sd[threadIdx.x] = t < Tc ? D[bh * Tc + t] : 0.0f;
        }
        __syncthreads();
        ft_abt<T, HS>(ss, qs, ks, w);   /* S [query][key] */
        ft_abt<T, HS>(dps, dos, vs, w); /* dP [query][key] */
        __syncthreads();
        const size_t u = k0 + lane;
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) {
            const size_t i = w * FA_ROWS + r, t = t0 + i;
            float pr = u <= t && t < Tc ? expf(ss[i * FT_SLD + lane] * scale - sl[i]) : 0.0f;
            ps[i * FT_PLD + lane] = dsl_fromf<T>(pr);
            dss[i * FT_PLD + lane] = dsl_fromf<T>(pr * (dps[i * FT_SLD + lane] - sd[i]));
        }
        __syncthreads();
        ft_ptimes<T, HS, ft_a_col<T>>(dv, ps, dos, w); /* P^T dO */
        ft_ptimes<T, HS, ft_a_col<T>>(dk, dss, qs, w); /* dS^T Q */
    }
    __syncthreads(); /* stage dk, then dv, over the tiles */
    float *ok = ft_sm, *ov = ft_sm + FA_TILE * FT_OLD(HS);
    ft_stage<HS>(ok, dk, w);
    ft_stage<HS>(ov, dv, w);
    __syncthreads();
    T *row = dqkv + b * Tc * 3 * C + h * hs;
    ft_write<T, HS>(row + C, ok, scale, k0, Tc, 3 * C, hs);
    ft_write<T, HS>(row + 2 * C, ov, 1.0f, k0, Tc, 3 * C, hs); /* x 1: exact */
}

template <typename T, int HS>
static __device__ __forceinline__ void ft_dq(T *dqkv, const T *qkv, const T *dout,
                                             const float *lse, const float *D, size_t Tc,
                                             size_t NH, size_t hs, float scale)
{
    extern __shared__ __align__(128) float ft_sm[]; /* FT_SM_DQ(HS) bytes */
    T *qs = reinterpret_cast<T *>(ft_sm), *dos = qs + FA_TILE * FT_LD(HS),
      *ks = dos + FA_TILE * FT_LD(HS), *vs = ks + FA_TILE * FT_LD(HS);
    float *ss = reinterpret_cast<float *>(vs + FA_TILE * FT_LD(HS)), *dps = ss + FA_TILE * FT_SLD;
    T *dss = reinterpret_cast<T *>(dps + FA_TILE * FT_SLD);
    const unsigned lane = threadIdx.x & 31u, w = threadIdx.x >> 5;
    const size_t C = NH * hs, bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const size_t t0 = (size_t)blockIdx.y * FA_TILE;
    const T *q = qkv + b * Tc * 3 * C + h * hs, *k = q + C, *v = q + 2 * C;
    ft_load<T, HS>(qs, q, t0, Tc, 3 * C, hs);
    ft_load<T, HS>(dos, dout + b * Tc * C + h * hs, t0, Tc, C, hs);
    float lr[FA_ROWS], dr[FA_ROWS];
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        const size_t t = t0 + w * FA_ROWS + r;
        lr[r] = t < Tc ? lse[bh * Tc + t] : 0.0f;
        dr[r] = t < Tc ? D[bh * Tc + t] : 0.0f;
    }
    ft_acc dq[HS / 32];
#pragma unroll
    for (int j = 0; j < HS / 32; j++)
        wmma::fill_fragment(dq[j], 0.0f);
    for (size_t k0 = 0; k0 <= t0; k0 += FA_TILE) {
        __syncthreads();
        ft_load<T, HS>(ks, k, k0, Tc, 3 * C, hs);
        ft_load<T, HS>(vs, v, k0, Tc, 3 * C, hs);
        __syncthreads();
        ft_abt<T, HS>(ss, qs, ks, w);
        ft_abt<T, HS>(dps, dos, vs, w);
        __syncthreads();
        const size_t u = k0 + lane;
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) {
            const size_t i = w * FA_ROWS + r, t = t0 + i;
            float pr = u <= t && t < Tc ? expf(ss[i * FT_SLD + lane] * scale - lr[r]) : 0.0f;
            dss[i * FT_PLD + lane] = dsl_fromf<T>(pr * (dps[i * FT_SLD + lane] - dr[r]));
        }
        __syncthreads();
        ft_ptimes<T, HS, ft_a_row<T>>(dq, dss, ks, w); /* dS K */
    }
    __syncthreads();
    ft_stage<HS>(ft_sm, dq, w);
    __syncthreads();
    ft_write<T, HS>(dqkv + b * Tc * 3 * C + h * hs, ft_sm, scale, t0, Tc, 3 * C, hs);
}

/* the kernels: the bodies above where the architecture has WMMA for T, else a trap
 * (never launched: dsl_cuda_gpt_attention_tc says no) */
template <typename T, int HS>
__global__ void __launch_bounds__(FA_THREADS)
    dsl_k_gpt_attn_tc_fwd(T *o, float *lse, const T *qkv, size_t Tc, size_t NH, size_t hs,
                          float scale)
{
    if constexpr (ft_arch_ok<T>::v)
        ft_fwd<T, HS>(o, lse, qkv, Tc, NH, hs, scale);
    else
        __trap();
}

template <typename T, int HS>
__global__ void __launch_bounds__(FA_THREADS)
    dsl_k_gpt_attn_tc_dkv(T *dqkv, const T *qkv, const T *dout, const float *lse,
                          const float *D, size_t Tc, size_t NH, size_t hs, float scale)
{
    if constexpr (ft_arch_ok<T>::v)
        ft_dkv<T, HS>(dqkv, qkv, dout, lse, D, Tc, NH, hs, scale);
    else
        __trap();
}

template <typename T, int HS>
__global__ void __launch_bounds__(FA_THREADS)
    dsl_k_gpt_attn_tc_dq(T *dqkv, const T *qkv, const T *dout, const float *lse,
                         const float *D, size_t Tc, size_t NH, size_t hs, float scale)
{
    if constexpr (ft_arch_ok<T>::v)
        ft_dq<T, HS>(dqkv, qkv, dout, lse, D, Tc, NH, hs, scale);
    else
        __trap();
}

/* ---- launchers ---- */

#define TC_DISPATCH(et, call) ((et) == DSL_CUDA_BF16 ? call(__nv_bfloat16) : call(__half))

size_t dsl_cuda_gpt_attn_tc_smem(size_t H)
{
    size_t a = FT_SM_FWD(H), b = FT_SM_DKV(H), c = FT_SM_DQ(H);
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

cudaError_t dsl_cuda_gpt_attn_tc_arch(int et, cudaFuncAttributes *a)
{
    return et == DSL_CUDA_BF16
               ? cudaFuncGetAttributes(a, (const void *)dsl_k_gpt_attn_tc_fwd<__nv_bfloat16, 64>)
               : cudaFuncGetAttributes(a, (const void *)dsl_k_gpt_attn_tc_fwd<__half, 64>);
}

/* the three kernels of element type T at HS columns may take their shared memory */
template <typename T, int HS>
static cudaError_t ft_opt_in()
{
    cudaError_t e;
    if ((e = fa_set(dsl_k_gpt_attn_tc_fwd<T, HS>, FT_SM_FWD(HS))) != cudaSuccess ||
        (e = fa_set(dsl_k_gpt_attn_tc_dkv<T, HS>, FT_SM_DKV(HS))) != cudaSuccess)
        return e;
    return fa_set(dsl_k_gpt_attn_tc_dq<T, HS>, FT_SM_DQ(HS));
}

cudaError_t dsl_cuda_gpt_attn_tc_setup(int et, size_t hs)
{
#define S_(ty, hsp) ft_opt_in<ty, hsp>()
#define L_(ty) FA_DISPATCH(S_, ty)
    return TC_DISPATCH(et, L_);
#undef L_
#undef S_
}

cudaError_t dsl_cuda_gpt_attn_tc_fwd(cudaStream_t s, int et, void *o, float *lse,
                                     const void *qkv, size_t B, size_t T, size_t NH, size_t hs)
{
    dim3 g((unsigned)(B * NH), (unsigned)((T + FA_TILE - 1) / FA_TILE));
    float scale = 1.0f / sqrtf((float)hs);
#define F_(ty, hsp)                                                                          \
    (dsl_k_gpt_attn_tc_fwd<ty, hsp><<<g, FA_THREADS, FT_SM_FWD(hsp), s>>>(                    \
         (ty *)o, lse, (const ty *)qkv, T, NH, hs, scale),                                    \
     0)
#define L_(ty) FA_DISPATCH(F_, ty)
    TC_DISPATCH(et, L_);
#undef L_
#undef F_
    return cudaGetLastError();
}

cudaError_t dsl_cuda_gpt_attn_tc_back(cudaStream_t s, int et, void *dqkv, const void *qkv,
                                      const void *dout, const float *lse, const float *D,
                                      size_t B, size_t T, size_t NH, size_t hs)
{
    dim3 g((unsigned)(B * NH), (unsigned)((T + FA_TILE - 1) / FA_TILE));
    float scale = 1.0f / sqrtf((float)hs);
    cudaError_t e;
#define KV_(ty, hsp)                                                                         \
    (dsl_k_gpt_attn_tc_dkv<ty, hsp><<<g, FA_THREADS, FT_SM_DKV(hsp), s>>>(                    \
         (ty *)dqkv, (const ty *)qkv, (const ty *)dout, lse, D, T, NH, hs, scale),            \
     0)
#define L_(ty) FA_DISPATCH(KV_, ty)
    TC_DISPATCH(et, L_);
#undef L_
#undef KV_
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
#define Q_(ty, hsp)                                                                          \
    (dsl_k_gpt_attn_tc_dq<ty, hsp><<<g, FA_THREADS, FT_SM_DQ(hsp), s>>>(                      \
         (ty *)dqkv, (const ty *)qkv, (const ty *)dout, lse, D, T, NH, hs, scale),            \
     0)
#define L_(ty) FA_DISPATCH(Q_, ty)
    TC_DISPATCH(et, L_);
#undef L_
#undef Q_
    return cudaGetLastError();
}
