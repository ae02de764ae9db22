/*
 * The CUDA GPT's causal self-attention (model_gpt_cuda.c calls it): flash-style, forward
 * and backward, with scalar fp32 kernels for every element type here and tensor-core
 * (WMMA) kernels for fp16 and bf16 in model_gpt_attention_tc.cu; the launchers here
 * take either, and dsl_cuda_gpt_attention_tc says which a device runs. The section
 * below says how the scalar kernels work. The rest of the GPT's kernels are in
 * model_gpt_kernels.cu.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_kernels.h"
#include "model_gpt_kernels.cuh"

/* ---- attention: flash-style causal attention ----
 *
 * q, k and v are read where the qkv projection wrote them, the flat [B, T, 3, NH, hs]
 * rows (row stride 3C), and O, dO, dq, dk, dv live in the flat [B, T, NH, hs] / [B, T,
 * 3, NH, hs] layouts of the projections beside them, so no permute and no T x T matrix:
 * per (sample, head) pair the forward keeps O and each query row's log-sum-exp
 * L = max + log(sum of exp) (fp32), the backward recomputes the probabilities from it,
 * P = exp(scale q.k - L), and never stores them either.
 *
 * Tiles. FA_TILE = 32 queries or keys: one per lane of a warp, so a row's max and sum
 * over a key tile are warp shuffles; FA_WARPS = 4 warps own FA_ROWS = 8 rows each
 * (128 threads). Head sizes up to FA_HS_MAX = 128: the head is padded with zeros to
 * HS = 32, 64, 96 or 128 columns in shared memory (the padding adds exact zeros); a
 * lane's accumulators hold columns lane, lane + 32, ... The tiles are staged in
 * shared memory as fp32 (widened once), rows a lane walks along padded by one float
 * so that the 32 lanes hit 32 banks. The shared memory is dynamic (FA_SM_*): the
 * dk/dv kernel, the largest, takes 41,472 bytes at HS 64, 57,856 at HS 96 and 74,240
 * at HS 128 (the forward 28,800 / 41,088 / 53,376, dq 37,120 / 53,504 / 69,888).
 * Above 48 KiB a kernel needs the per-function opt-in (dsl_cuda_gpt_attention_setup,
 * cudaFuncSetAttribute) and a device whose opt-in limit is that large (sm_80 163 KiB,
 * sm_86/89 99 KiB, sm_90 227 KiB; sm_75's 64 KiB takes head sizes up to 96):
 * model_gpt_cuda.c checks cudaDevAttrMaxSharedMemoryPerBlockOptin when it creates the
 * model. The per-thread state is 8 x HS/32 (forward, dq) or 16 x HS/32 (dk/dv) fp32
 * accumulators plus 8 or 16 row scores: at HS 128, 64 accumulators in dk/dv, within
 * sm_90's 255 registers at 128 threads without spills (ptxas -v, docs/gpt.md). These
 * are scalar fp32 FMAs (CUDA cores), not tensor-core MMAs.
 *
 * Work. Forward: one block per (pair, query tile) streams the key tiles 0..diagonal,
 * keeping per row a running max m, sum l and the unnormalised output (online softmax:
 * when m grows, l and the output are rescaled by exp(m_old - m_new)). Backward, without
 * atomics: D = rowsum(dO * O) per row (a warp per row); then one block per (pair, key
 * tile) walks the query tiles from the diagonal on and owns its keys' dk and dv
 * (dv += P^T dO, dk += scale dS^T Q with dS = P (dO.v - D)); one block per (pair, query
 * tile) walks the key tiles up to the diagonal and owns its rows' dq (dq += scale dS K).
 * Every sum runs in a fixed order (the head columns ascending in every dot product, the
 * same in the three kernels so that the backward's P has the forward's bits; tiles and
 * rows ascending), each output element is written by one thread once: the same bits on
 * every run. The dot products use fmaf (fused, the same on the emulator and the GPU);
 * the CPU oracle's products are sgemm, so agreement is within rounding.
 */
#include "model_gpt_attention.cuh"
/* each kernel's dynamic shared memory in floats at HS padded head columns: the q/k/v/dO
 * tiles (rows of HS, or HS + 1 where a lane walks along them), the per-warp score
 * tiles and, in dk/dv, the tile's lse and D */
#define FA_PS (FA_WARPS * FA_ROWS * FA_TILE)
#define FA_SM_FWD(HS) (FA_TILE * (3 * (HS) + 1) + FA_PS)
#define FA_SM_DKV(HS) (FA_TILE * (4 * (HS) + 2) + 2 * FA_PS + 2 * FA_TILE)
#define FA_SM_DQ(HS) (FA_TILE * (4 * (HS) + 2) + FA_PS)

/* a float (*)[N] view of the dynamic shared memory from float off on */
#define FA_SM(name, N, off) float(*name)[N] = reinterpret_cast<float(*)[N]>(fa_sm + (off))

/* stage rows r0.. of one head (row stride ld, hs columns) as fp32 rows of HS + pad
 * columns, zeros past the T rows and the hs columns */
template <typename T, int HS, int LD>
static __device__ __forceinline__ void fa_load(float (*dst)[LD], const T *src, size_t r0,
                                               size_t Tc, size_t ld, size_t hs)
{
    for (unsigned i = threadIdx.x; i < FA_TILE * HS; i += FA_THREADS) {
        unsigned r = i / HS, d = i % HS;
        size_t t = r0 + r;
        dst[r][d] = t < Tc && d < hs ? dsl_tof(src[t * ld + d]) : 0.0f;
    }
}

/* acc[r][c] += sum over j ascending of p[r][j] x[j][lane + 32 c]: warp w's FA_ROWS rows
 * of a score tile times a staged tile (the forward's P V, dq's dS K) */
template <int HS, int LD>
static __device__ __forceinline__ void fa_rows_times_tile(float (&acc)[FA_ROWS][HS / 32],
                                                          const float (*p)[FA_TILE],
                                                          const float (*x)[LD], unsigned lane)
{
    for (int j = 0; j < FA_TILE; j++) {
        float xj[HS / 32];
#pragma unroll
        for (int c = 0; c < HS / 32; c++)
            xj[c] = x[j][lane + 32 * c];
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) {
            float pj = p[r][j];
#pragma unroll
            for (int c = 0; c < HS / 32; c++)
                acc[r][c] = fmaf(pj, xj[c], acc[r][c]);
        }
    }
}

/* row[lane + 32 c] = acc[c] x f, for the head's hs columns this lane holds */
template <typename T, int HS>
static __device__ __forceinline__ void fa_store(T *row, const float (&acc)[HS / 32], float f,
                                                unsigned lane, size_t hs)
{
#pragma unroll
    for (int c = 0; c < HS / 32; c++)
        if (lane + 32 * c < hs)
            row[lane + 32 * c] = dsl_fromf<T>(acc[c] * f);
}

/* O [B, T, NH, hs] and lse [B NH, T] from qkv [B, T, 3, NH, hs]; grid (B NH, query tiles) */
template <typename T, int HS>
__global__ void __launch_bounds__(FA_THREADS)
    dsl_k_gpt_attn_fwd(T *o, float *lse, const T *qkv, size_t Tc, size_t NH, size_t hs,
                       float scale)
{
    extern __shared__ float fa_sm[]; /* FA_SM_FWD(HS) */
    FA_SM(qs, HS, 0);
    FA_SM(ks, HS + 1, FA_TILE * HS);
    FA_SM(vs, HS, FA_TILE * (2 * HS + 1));
    float(*ps)[FA_ROWS][FA_TILE] =
        reinterpret_cast<float(*)[FA_ROWS][FA_TILE]>(fa_sm + FA_TILE * (3 * HS + 1));
    const unsigned lane = threadIdx.x & 31u, w = threadIdx.x >> 5;
    const size_t C = NH * hs, bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const size_t t0 = (size_t)blockIdx.y * FA_TILE;
    const T *q = qkv + b * Tc * 3 * C + h * hs, *k = q + C, *v = q + 2 * C;
    fa_load<T, HS, HS>(qs, q, t0, Tc, 3 * C, hs);
    float m[FA_ROWS], l[FA_ROWS], acc[FA_ROWS][HS / 32];
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < HS / 32; c++)
            acc[r][c] = 0.0f;
    }
    for (size_t k0 = 0; k0 <= t0; k0 += FA_TILE) {
        __syncthreads(); /* the previous tile's readers are done */
        fa_load<T, HS, HS + 1>(ks, k, k0, Tc, 3 * C, hs);
        fa_load<T, HS, HS>(vs, v, k0, Tc, 3 * C, hs);
        __syncthreads();
        float s[FA_ROWS];
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++)
            s[r] = 0.0f;
        for (int d = 0; d < HS; d++) {
            float kd = ks[lane][d];
#pragma unroll
            for (int r = 0; r < FA_ROWS; r++)
                s[r] = fmaf(qs[w * FA_ROWS + r][d], kd, s[r]);
        }
        const size_t u = k0 + lane;
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) {
            const size_t t = t0 + w * FA_ROWS + r;
            /* u < Tc is implied for a row t < Tc; rows past T are computed, not stored */
            float sc = u <= t && u < Tc ? s[r] * scale : -INFINITY;
            float mn = fmaxf(m[r], warp_max(sc)); /* finite: key 0 is in the first tile */
            float pr = expf(sc - mn), a = expf(m[r] - mn);
            l[r] = fmaf(l[r], a, warp_sum(pr));
            m[r] = mn;
#pragma unroll
            for (int c = 0; c < HS / 32; c++)
                acc[r][c] *= a;
            ps[w][r][lane] = pr;
        }
        __syncwarp();
        fa_rows_times_tile<HS, HS>(acc, ps[w], vs, lane);
    }
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        const size_t t = t0 + w * FA_ROWS + r;
        if (t >= Tc)
            continue;
        fa_store<T, HS>(o + (b * Tc + t) * C + h * hs, acc[r], 1.0f / l[r], lane, hs);
        if (lane == 0)
            lse[bh * Tc + t] = m[r] + logf(l[r]);
    }
}

/* D[(b NH + h) T + t] = sum over the head's columns of dO * O, one warp per (row, head) */
template <typename T>
__global__ void dsl_k_gpt_attn_rowdot(float *D, const T *o, const T *dout, size_t N, size_t Tc,
                                      size_t NH, size_t hs)
{
    WARP_ROWS(i, N * NH)
    {
        size_t row = i / NH, h = i % NH, off = row * NH * hs + h * hs;
        float s = 0.0f;
        for (size_t d = lane; d < hs; d += 32)
            s = fmaf(dsl_tof(dout[off + d]), dsl_tof(o[off + d]), s);
        s = warp_sum(s);
        if (lane == 0)
            D[((row / Tc) * NH + h) * Tc + row % Tc] = s;
    }
}

/* dk, dv (the k and v parts of dqkv [B, T, 3, NH, hs]) of one key tile: grid (B NH, key
 * tiles); lane i takes query i of each query tile, warp w keys w FA_ROWS.. */
template <typename T, int HS>
__global__ void __launch_bounds__(FA_THREADS)
    dsl_k_gpt_attn_dkv(T *dqkv, const T *qkv, const T *dout, const float *lse, const float *D,
                       size_t Tc, size_t NH, size_t hs, float scale)
{
    extern __shared__ float fa_sm[]; /* FA_SM_DKV(HS) */
    FA_SM(qs, HS + 1, 0);
    FA_SM(dos, HS + 1, FA_TILE * (HS + 1));
    FA_SM(ks, HS, FA_TILE * (2 * HS + 2));
    FA_SM(vs, HS, FA_TILE * (3 * HS + 2));
    float(*ps)[FA_ROWS][FA_TILE] =
        reinterpret_cast<float(*)[FA_ROWS][FA_TILE]>(fa_sm + FA_TILE * (4 * HS + 2));
    float(*dss)[FA_ROWS][FA_TILE] = ps + FA_WARPS;
    float *sl = fa_sm + FA_TILE * (4 * HS + 2) + 2 * FA_PS, *sd = sl + FA_TILE;
    const unsigned lane = threadIdx.x & 31u, w = threadIdx.x >> 5;
    const size_t C = NH * hs, bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const size_t k0 = (size_t)blockIdx.y * FA_TILE;
    const T *q = qkv + b * Tc * 3 * C + h * hs, *k = q + C, *v = q + 2 * C;
    const T *dor = dout + b * Tc * C + h * hs;
    fa_load<T, HS, HS>(ks, k, k0, Tc, 3 * C, hs);
    fa_load<T, HS, HS>(vs, v, k0, Tc, 3 * C, hs);
    float dk[FA_ROWS][HS / 32], dv[FA_ROWS][HS / 32];
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++)
#pragma unroll
        for (int c = 0; c < HS / 32; c++)
            dk[r][c] = dv[r][c] = 0.0f;
    for (size_t t0 = k0; t0 < Tc; t0 += FA_TILE) {
        __syncthreads();
        fa_load<T, HS, HS + 1>(qs, q, t0, Tc, 3 * C, hs);
        fa_load<T, HS, HS + 1>(dos, dor, t0, Tc, C, hs);
        if (threadIdx.x < FA_TILE) {
            size_t t = t0 + threadIdx.x;
            sl[threadIdx.x] = t < Tc ? lse[bh * Tc + t] : 0.0f;
            sd[threadIdx.x] = t < Tc ? D[bh * Tc + t] : 0.0f;
        }
        __syncthreads();
        float s[FA_ROWS], dp[FA_ROWS];
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++)
            s[r] = dp[r] = 0.0f;
        for (int d = 0; d < HS; d++) {
            float qd = qs[lane][d], dod = dos[lane][d];
#pragma unroll
            for (int r = 0; r < FA_ROWS; r++) {
                s[r] = fmaf(qd, ks[w * FA_ROWS + r][d], s[r]);
                dp[r] = fmaf(dod, vs[w * FA_ROWS + r][d], dp[r]);
            }
        }
        const size_t t = t0 + lane;
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) {
            const size_t u = k0 + w * FA_ROWS + r;
            float pr = u <= t && t < Tc ? expf(s[r] * scale - sl[lane]) : 0.0f;
            ps[w][r][lane] = pr;
            dss[w][r][lane] = pr * (dp[r] - sd[lane]);
        }
        __syncwarp();
        for (int i = 0; i < FA_TILE; i++) {
            float qi[HS / 32], doi[HS / 32];
#pragma unroll
            for (int c = 0; c < HS / 32; c++) {
                qi[c] = qs[i][lane + 32 * c];
                doi[c] = dos[i][lane + 32 * c];
            }
#pragma unroll
            for (int r = 0; r < FA_ROWS; r++) {
                float pi = ps[w][r][i], di = dss[w][r][i];
#pragma unroll
                for (int c = 0; c < HS / 32; c++) {
                    dv[r][c] = fmaf(pi, doi[c], dv[r][c]);
                    dk[r][c] = fmaf(di, qi[c], dk[r][c]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        const size_t u = k0 + w * FA_ROWS + r;
        if (u >= Tc)
            continue;
        T *row = dqkv + (b * Tc + u) * 3 * C + h * hs;
        fa_store<T, HS>(row + C, dk[r], scale, lane, hs);
        fa_store<T, HS>(row + 2 * C, dv[r], 1.0f, lane, hs); /* x 1: exact */
    }
}

/* dq (the q part of dqkv) of one query tile: grid (B NH, query tiles); warp w rows
 * w FA_ROWS.., lane j key j of each key tile */
template <typename T, int HS>
__global__ void __launch_bounds__(FA_THREADS)
    dsl_k_gpt_attn_dq(T *dqkv, const T *qkv, const T *dout, const float *lse, const float *D,
                      size_t Tc, size_t NH, size_t hs, float scale)
{
    extern __shared__ float fa_sm[]; /* FA_SM_DQ(HS) */
    FA_SM(qs, HS, 0);
    FA_SM(dos, HS, FA_TILE * HS);
    FA_SM(ks, HS + 1, FA_TILE * 2 * HS);
    FA_SM(vs, HS + 1, FA_TILE * (3 * HS + 1));
    float(*dss)[FA_ROWS][FA_TILE] =
        reinterpret_cast<float(*)[FA_ROWS][FA_TILE]>(fa_sm + FA_TILE * (4 * HS + 2));
    const unsigned lane = threadIdx.x & 31u, w = threadIdx.x >> 5;
    const size_t C = NH * hs, bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const size_t t0 = (size_t)blockIdx.y * FA_TILE;
    const T *q = qkv + b * Tc * 3 * C + h * hs, *k = q + C, *v = q + 2 * C;
    fa_load<T, HS, HS>(qs, q, t0, Tc, 3 * C, hs);
    fa_load<T, HS, HS>(dos, dout + b * Tc * C + h * hs, t0, Tc, C, hs);
    float lr[FA_ROWS], dr[FA_ROWS], dq[FA_ROWS][HS / 32];
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        const size_t t = t0 + w * FA_ROWS + r;
        lr[r] = t < Tc ? lse[bh * Tc + t] : 0.0f;
        dr[r] = t < Tc ? D[bh * Tc + t] : 0.0f;
#pragma unroll
        for (int c = 0; c < HS / 32; c++)
            dq[r][c] = 0.0f;
    }
    for (size_t k0 = 0; k0 <= t0; k0 += FA_TILE) {
        __syncthreads();
        fa_load<T, HS, HS + 1>(ks, k, k0, Tc, 3 * C, hs);
        fa_load<T, HS, HS + 1>(vs, v, k0, Tc, 3 * C, hs);
        __syncthreads();
        float s[FA_ROWS], dp[FA_ROWS];
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++)
            s[r] = dp[r] = 0.0f;
        for (int d = 0; d < HS; d++) {
            float kd = ks[lane][d], vd = vs[lane][d];
#pragma unroll
            for (int r = 0; r < FA_ROWS; r++) {
                s[r] = fmaf(qs[w * FA_ROWS + r][d], kd, s[r]);
                dp[r] = fmaf(dos[w * FA_ROWS + r][d], vd, dp[r]);
            }
        }
        const size_t u = k0 + lane;
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) {
            const size_t t = t0 + w * FA_ROWS + r;
            float pr = u <= t && t < Tc ? expf(s[r] * scale - lr[r]) : 0.0f;
            dss[w][r][lane] = pr * (dp[r] - dr[r]);
        }
        __syncwarp();
        fa_rows_times_tile<HS, HS + 1>(dq, dss[w], ks, lane);
    }
#pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        const size_t t = t0 + w * FA_ROWS + r;
        if (t >= Tc)
            continue;
        fa_store<T, HS>(dqkv + (b * Tc + t) * 3 * C + h * hs, dq[r], scale, lane, hs);
    }
}

/* ---- launchers ---- */

extern "C" size_t dsl_cuda_gpt_attention_smem(size_t hs, int tc)
{
    if (!hs || hs > FA_HS_MAX)
        return 0;
    size_t H = FA_HSP(hs);
    if (tc)
        return dsl_cuda_gpt_attn_tc_smem(H);
    size_t a = FA_SM_FWD(H) * sizeof(float), b = FA_SM_DKV(H) * sizeof(float),
           c = FA_SM_DQ(H) * sizeof(float);
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

extern "C" cudaError_t dsl_cuda_gpt_attention_tc(int et, int *tc)
{
    *tc = 0;
    if (et == DSL_CUDA_FP32)
        return cudaSuccess;
    /* the architecture of the code the device runs: the binary's (or, through the
     * PTX JIT, the PTX's), which decides whether the bf16 kernels are a trap */
    cudaFuncAttributes a;
    cudaError_t e = dsl_cuda_gpt_attn_tc_arch(et, &a);
    if (e != cudaSuccess)
        return e;
    int v = a.binaryVersion < a.ptxVersion ? a.binaryVersion : a.ptxVersion;
    *tc = v >= (et == DSL_CUDA_BF16 ? 80 : 70);
    return cudaSuccess;
}

/* the three kernels of element type T at HS columns may take their shared memory */
template <typename T, int HS>
static cudaError_t fa_opt_in()
{
    cudaError_t e;
    if ((e = fa_set(dsl_k_gpt_attn_fwd<T, HS>, FA_SM_FWD(HS) * sizeof(float))) != cudaSuccess ||
        (e = fa_set(dsl_k_gpt_attn_dkv<T, HS>, FA_SM_DKV(HS) * sizeof(float))) != cudaSuccess)
        return e;
    return fa_set(dsl_k_gpt_attn_dq<T, HS>, FA_SM_DQ(HS) * sizeof(float));
}

extern "C" cudaError_t dsl_cuda_gpt_attention_setup(int et, size_t hs, int tc)
{
    if (!hs || hs > FA_HS_MAX || (tc && et == DSL_CUDA_FP32))
        return cudaErrorInvalidValue;
    if (tc)
        return dsl_cuda_gpt_attn_tc_setup(et, hs);
#define S_(ty, hsp) fa_opt_in<ty, hsp>()
#define L_(ty) FA_DISPATCH(S_, ty)
    return DISPATCH(et, L_);
#undef L_
#undef S_
}

extern "C" cudaError_t dsl_cuda_gpt_attention(cudaStream_t s, int et, int tc, void *o,
                                              float *lse, const void *qkv, size_t B, size_t T,
                                              size_t NH, size_t hs)
{
    if (!B || !T || !NH)
        return cudaSuccess;
    if (!hs || hs > FA_HS_MAX || (tc && et == DSL_CUDA_FP32))
        return cudaErrorInvalidValue;
    dim3 g((unsigned)(B * NH), (unsigned)((T + FA_TILE - 1) / FA_TILE));
    float scale = 1.0f / sqrtf((float)hs);
    if (tc)
        return dsl_cuda_gpt_attn_tc_fwd(s, et, o, lse, qkv, B, T, NH, hs);
#define F_(ty, hsp)                                                                          \
    (dsl_k_gpt_attn_fwd<ty, hsp><<<g, FA_THREADS, FA_SM_FWD(hsp) * sizeof(float), s>>>(       \
         (ty *)o, lse, (const ty *)qkv, T, NH, hs, scale),                                    \
     0)
#define L_(ty) FA_DISPATCH(F_, ty)
    DISPATCH(et, L_);
#undef L_
#undef F_
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_gpt_attention_back(cudaStream_t s, int et, int tc, void *dqkv,
                                                   const void *qkv, const void *o,
                                                   const void *dout, const float *lse,
                                                   float *D, size_t B, size_t T, size_t NH,
                                                   size_t hs)
{
    if (!B || !T || !NH)
        return cudaSuccess;
    if (!hs || hs > FA_HS_MAX || (tc && et == DSL_CUDA_FP32))
        return cudaErrorInvalidValue;
    cudaError_t e;
    size_t N = B * T;
#define L_(ty)                                                                               \
    (dsl_k_gpt_attn_rowdot<ty><<<row_blocks(N * NH), THREADS, 0, s>>>(                        \
         D, (const ty *)o, (const ty *)dout, N, T, NH, hs),                                   \
     0)
    DISPATCH(et, L_);
#undef L_
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    dim3 g((unsigned)(B * NH), (unsigned)((T + FA_TILE - 1) / FA_TILE));
    float scale = 1.0f / sqrtf((float)hs);
    if (tc)
        return dsl_cuda_gpt_attn_tc_back(s, et, dqkv, qkv, dout, lse, D, B, T, NH, hs);
#define KV_(ty, hsp)                                                                         \
    (dsl_k_gpt_attn_dkv<ty, hsp><<<g, FA_THREADS, FA_SM_DKV(hsp) * sizeof(float), s>>>(      \
         (ty *)dqkv, (const ty *)qkv, (const ty *)dout, lse, D, T, NH, hs, scale),            \
     0)
#define L_(ty) FA_DISPATCH(KV_, ty)
    DISPATCH(et, L_);
#undef L_
#undef KV_
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
#define Q_(ty, hsp)                                                                          \
    (dsl_k_gpt_attn_dq<ty, hsp><<<g, FA_THREADS, FA_SM_DQ(hsp) * sizeof(float), s>>>(        \
         (ty *)dqkv, (const ty *)qkv, (const ty *)dout, lse, D, T, NH, hs, scale),            \
     0)
#define L_(ty) FA_DISPATCH(Q_, ty)
    DISPATCH(et, L_);
#undef L_
#undef Q_
    return cudaGetLastError();
}
