/*
 * The non-GEMM parts of the CUDA GPT (model_gpt_cuda.c): the embedding and its
 * backward scatter, LayerNorm forward and backward, the bias/residual broadcast, the
 * tanh GELU and its gradient, the fused classifier (softmax, cross-entropy
 * and its gradient per row, in place over the logits), the deterministic column sums
 * (bias and LayerNorm parameter gradients) and the micro batch's loss statistics. The
 * causal self-attention has a file of its own, model_gpt_attention.cu, which follows
 * the same rules except that its dot products use fmaf (its oracle is sgemm).
 *
 * Theory of operation. One template per kernel serves fp32 and the 16-bit types: each
 * element is widened to fp32 (dsl_tof), the arithmetic is fp32 with round-to-nearest
 * intrinsics (no FMA contraction, as the CPU loops in model_gpt.c, their oracle, are
 * compiled), and a 16-bit result is rounded once (dsl_fromf). Statistics that backward
 * reuses (LayerNorm's mean and 1/std, the per-row loss) stay fp32.
 *   - row kernels (LayerNorm and its input gradient): one warp per row,
 *     the columns strided over the lanes (coalesced), sums by a fixed xor-shuffle tree;
 *   - the classifier: one block per row over the vocabulary (256 to 65536 entries),
 *     max/argmax (first index among equal maxima, as the CPU's strict '>') and the sum
 *     of exponentials by warp shuffles and then a fixed tree over the block's warps;
 *     it overwrites the row's logits with (softmax - onehot) x f; rows lie ld elements
 *     apart (the vocabulary padded for aligned GEMMs, model_gpt_cuda.c) and only their
 *     first V columns are classes;
 *   - column sums (bias, LayerNorm weight/bias gradients): rows cut into chunks of
 *     COL_ROWS fixed by the row count alone, each chunk's partial sum written to an
 *     fp32 scratch, the chunks then added in chunk order by a second kernel;
 *   - the token embedding's gradient: the host sorts the micro batch's row indices by
 *     token (a stable counting sort, model_gpt_cuda.c); one block per distinct token
 *     owns its row of the fp32 gradient and adds its rows in row order, exactly the
 *     CPU's order, so no atomics and bit-identical results run to run;
 *   - the position embedding's gradient: one thread per (position, column) adding the
 *     samples in sample order.
 * Every result is deterministic (no atomics, fixed reduction trees). Summation orders
 * differ from the CPU's sequential loops, and expf/logf are CUDA's, so results agree
 * with the CPU within rounding, not bit for bit (tests/model/test_gpu_gpt.c).
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_kernels.h"
#include "model_loss_stats.cuh"
#include "model_gpt_kernels.cuh"

#define COL_ROWS 256 /* rows per partial column sum */
#define LN_EPS 1e-5f
#define GELU_S 0.7978845608028654f

/* ---- embedding ---- */

/* out[i][c] = wte[inp[i]][c] + wpe[i % T][c]; grid x over columns, y over rows */
template <typename T>
__global__ void dsl_k_gpt_encoder(T *out, const int32_t *inp, const T *wte, const T *wpe,
                                  size_t N, size_t Tc, size_t C)
{
    size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    for (size_t i = blockIdx.y; i < N; i += gridDim.y) {
        float v = __fadd_rn(dsl_tof(wte[(size_t)inp[i] * C + c]), dsl_tof(wpe[(i % Tc) * C + c]));
        out[i * C + c] = dsl_fromf<T>(v);
    }
}

/* dwpe[t][c] = sum over samples b of d[b T + t][c], in sample order (fp32) */
template <typename T>
__global__ void dsl_k_gpt_wpe_grad(float *dwpe, const T *d, size_t B, size_t Tc, size_t C)
{
    size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    for (size_t t = blockIdx.y; t < Tc; t += gridDim.y) {
        float s = 0.0f;
        for (size_t b = 0; b < B; b++)
            s = __fadd_rn(s, dsl_tof(d[(b * Tc + t) * C + c]));
        dwpe[t * C + c] = s;
    }
}

/* dwte[tok[u]] += d[rows[off[u]]], d[rows[off[u] + 1]], ... in that order: block u owns
 * the row of token tok[u] (fp32) */
template <typename T>
__global__ void dsl_k_gpt_wte_scatter(float *dwte, const T *d, const int32_t *tok,
                                      const int32_t *off, const int32_t *rows, size_t nu,
                                      size_t C)
{
    for (size_t u = blockIdx.x; u < nu; u += gridDim.x) {
        float *dst = dwte + (size_t)tok[u] * C;
        int32_t r0 = off[u], r1 = off[u + 1];
        for (size_t c = threadIdx.x; c < C; c += blockDim.x) {
            float acc = dst[c];
            for (int32_t r = r0; r < r1; r++)
                acc = __fadd_rn(acc, dsl_tof(d[(size_t)rows[r] * C + c]));
            dst[c] = acc;
        }
    }
}

/* ---- LayerNorm ---- */

template <typename T>
__global__ void dsl_k_gpt_layernorm(T *out, float *mean, float *rstd, const T *x, const T *w,
                                    const T *b, size_t N, size_t C)
{
    WARP_ROWS(i, N)
    {
        const T *xi = x + i * C;
        float m = 0.0f;
        for (size_t c = lane; c < C; c += 32)
            m = __fadd_rn(m, dsl_tof(xi[c]));
        m = __fdiv_rn(warp_sum(m), (float)C);
        float v = 0.0f;
        for (size_t c = lane; c < C; c += 32) {
            float d = __fsub_rn(dsl_tof(xi[c]), m);
            v = __fadd_rn(v, __fmul_rn(d, d));
        }
        v = __fdiv_rn(warp_sum(v), (float)C);
        float s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(v, LN_EPS)));
        T *o = out + i * C;
        for (size_t c = lane; c < C; c += 32) {
            float n = __fmul_rn(__fsub_rn(dsl_tof(xi[c]), m), s);
            o[c] = dsl_fromf<T>(__fadd_rn(__fmul_rn(n, dsl_tof(w[c])), dsl_tof(b[c])));
        }
        if (lane == 0) {
            mean[i] = m;
            rstd[i] = s;
        }
    }
}

/* dx[i] += (w dy - mean(w dy) - xhat mean(w dy xhat)) / std, per row */
template <typename T>
__global__ void dsl_k_gpt_ln_back(T *dx, const T *x, const T *dy, const T *w, const float *mean,
                                  const float *rstd, size_t N, size_t C)
{
    WARP_ROWS(i, N)
    {
        const T *xi = x + i * C, *di = dy + i * C;
        float m = mean[i], s = rstd[i], a = 0.0f, bb = 0.0f;
        for (size_t c = lane; c < C; c += 32) {
            float dn = __fmul_rn(dsl_tof(w[c]), dsl_tof(di[c]));
            a = __fadd_rn(a, dn);
            bb = __fadd_rn(bb, __fmul_rn(__fmul_rn(dn, __fsub_rn(dsl_tof(xi[c]), m)), s));
        }
        a = __fdiv_rn(warp_sum(a), (float)C);
        bb = __fdiv_rn(warp_sum(bb), (float)C);
        T *o = dx + i * C;
        for (size_t c = lane; c < C; c += 32) {
            float dn = __fmul_rn(dsl_tof(w[c]), dsl_tof(di[c]));
            float xh = __fmul_rn(__fsub_rn(dsl_tof(xi[c]), m), s);
            float g = __fmul_rn(__fsub_rn(__fsub_rn(dn, a), __fmul_rn(xh, bb)), s);
            o[c] = dsl_fromf<T>(__fadd_rn(dsl_tof(o[c]), g));
        }
    }
}

/* ---- column sums: partials per chunk of COL_ROWS rows, then the chunks in order ---- */

/* part[k][col] = sum of dy[i][col] over chunk k's rows; with x (LayerNorm), also
 * part2[k][col] = sum of (x[i][col] - mean[i]) rstd[i] dy[i][col]. Block (32, 8). */
template <typename T>
__global__ void dsl_k_gpt_colsum_part(float *part, float *part2, const T *dy, const T *x,
                                      const float *mean, const float *rstd, size_t N,
                                      size_t cols)
{
    __shared__ float s1[8][33], s2[8][33];
    size_t col = (size_t)blockIdx.x * 32u + threadIdx.x;
    size_t k = blockIdx.y, r0 = k * COL_ROWS, r1 = r0 + COL_ROWS < N ? r0 + COL_ROWS : N;
    float a = 0.0f, b = 0.0f;
    if (col < cols)
        for (size_t i = r0 + threadIdx.y; i < r1; i += 8) {
            float d = dsl_tof(dy[i * cols + col]);
            a = __fadd_rn(a, d);
            if (x)
                b = __fadd_rn(b, __fmul_rn(__fmul_rn(__fsub_rn(dsl_tof(x[i * cols + col]),
                                                               mean[i]),
                                                     rstd[i]),
                                           d));
        }
    s1[threadIdx.y][threadIdx.x] = a;
    s2[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        for (int r = 1; r < 8; r++) {
            a = __fadd_rn(a, s1[r][threadIdx.x]);
            b = __fadd_rn(b, s2[r][threadIdx.x]);
        }
        part[k * cols + col] = a;
        if (x)
            part2[k * cols + col] = b;
    }
}

template <typename T>
__global__ void dsl_k_gpt_colsum_finish(T *out, T *out2, const float *part, const float *part2,
                                        size_t nchunk, size_t cols)
{
    for (size_t col = (size_t)blockIdx.x * blockDim.x + threadIdx.x; col < cols;
         col += (size_t)gridDim.x * blockDim.x) {
        float a = 0.0f, b = 0.0f;
        for (size_t k = 0; k < nchunk; k++) {
            a = __fadd_rn(a, part[k * cols + col]);
            if (out2)
                b = __fadd_rn(b, part2[k * cols + col]);
        }
        out[col] = dsl_fromf<T>(a);
        if (out2)
            out2[col] = dsl_fromf<T>(b);
    }
}

/* ---- elementwise ---- */

/* o[i][c] = (x ? x[i][c] : 0) + b[c]; grid x over columns, y over rows */
template <typename T>
__global__ void dsl_k_gpt_resbias(T *o, const T *x, const T *b, size_t N, size_t C)
{
    size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float bc = dsl_tof(b[c]);
    for (size_t i = blockIdx.y; i < N; i += gridDim.y)
        o[i * C + c] = dsl_fromf<T>(x ? __fadd_rn(dsl_tof(x[i * C + c]), bc) : bc);
}

/* model_gpt.c's fast_tanh (dsl_gpt_tanh), operation for operation */
static __device__ __forceinline__ float gpt_tanh(float x)
{
    const float c = 7.90531110763549805f;
    x = x > c ? c : x;
    x = x < -c ? -c : x;
    float x2 = __fmul_rn(x, x);
    float p = __fadd_rn(__fmul_rn(x2, -2.76076847742355e-16f), 2.00018790482477e-13f);
    p = __fadd_rn(__fmul_rn(x2, p), -8.60467152213735e-11f);
    p = __fadd_rn(__fmul_rn(x2, p), 5.12229709037114e-08f);
    p = __fadd_rn(__fmul_rn(x2, p), 1.48572235717979e-05f);
    p = __fadd_rn(__fmul_rn(x2, p), 6.37261928875436e-04f);
    p = __fadd_rn(__fmul_rn(x2, p), 4.89352455891786e-03f);
    p = __fmul_rn(x, p);
    float q = __fadd_rn(__fmul_rn(x2, 1.19825839466702e-06f), 1.18534705686654e-04f);
    q = __fadd_rn(__fmul_rn(x2, q), 2.26843463243900e-03f);
    q = __fadd_rn(__fmul_rn(x2, q), 4.89352518554385e-03f);
    return __fdiv_rn(p, q);
}

/* GELU's inner argument sqrt(2/pi) (x + 0.044715 x^3), as the CPU: ((0.044715 x) x) x */
static __device__ __forceinline__ float gelu_u(float x)
{
    float x3 = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, x), x), x);
    return __fmul_rn(GELU_S, __fadd_rn(x, x3));
}

template <typename T> __global__ void dsl_k_gpt_gelu(T *o, const T *x, size_t n)
{
    DSL_GRID_STRIDE(i, n)
    {
        float v = dsl_tof(x[i]);
        float t = gpt_tanh(gelu_u(v));
        o[i] = dsl_fromf<T>(__fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.0f, t)));
    }
}

/* d[i] *= gelu'(x[i]) */
template <typename T> __global__ void dsl_k_gpt_gelu_back(T *d, const T *x, size_t n)
{
    DSL_GRID_STRIDE(i, n)
    {
        float v = dsl_tof(x[i]);
        float th = gpt_tanh(gelu_u(v));
        float sech2 = __fsub_rn(1.0f, __fmul_rn(th, th));
        float inner = __fadd_rn(1.0f, __fmul_rn(__fmul_rn(__fmul_rn(3.0f, 0.044715f), v), v));
        float g = __fadd_rn(__fmul_rn(0.5f, __fadd_rn(1.0f, th)),
                            __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(v, 0.5f), sech2), GELU_S),
                                      inner));
        d[i] = dsl_fromf<T>(__fmul_rn(dsl_tof(d[i]), g));
    }
}

/* ---- the classifier ---- */

/* (value, index) of the larger value, the smaller index among equal ones */
static __device__ __forceinline__ void argmax_merge(float &v, int &k, float ov, int ok)
{
    if (ov > v || (ov == v && ok < k)) {
        v = ov;
        k = ok;
    }
}

/* one block per row: loss[r0 + i] = logsumexp - z[y], arg[r0 + i] = argmax and, when
 * back, the row overwritten with (softmax - onehot) x f. Rows are ld >= V elements apart;
 * the ld - V padding columns after each row are neither read nor written (they are no
 * class) */
template <typename T>
__global__ void dsl_k_gpt_classifier(T *logits, const int32_t *tgt, size_t rows, size_t V,
                                     size_t ld, size_t r0, float *loss, int32_t *arg, int back,
                                     float f)
{
    __shared__ float sv[WARPS];
    __shared__ int sk[WARPS];
    const unsigned lane = threadIdx.x & 31u, wid = threadIdx.x >> 5;
    for (size_t i = blockIdx.x; i < rows; i += gridDim.x) {
        T *z = logits + i * ld;
        float mx = -INFINITY;
        int am = 0x7fffffff;
        for (size_t k = threadIdx.x; k < V; k += THREADS)
            argmax_merge(mx, am, dsl_tof(z[k]), (int)k);
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, mx, o);
            int ok = __shfl_xor_sync(0xffffffffu, am, o);
            argmax_merge(mx, am, ov, ok);
        }
        if (lane == 0) {
            sv[wid] = mx;
            sk[wid] = am;
        }
        __syncthreads();
        mx = sv[0];
        am = sk[0];
        for (int w = 1; w < WARPS; w++)
            argmax_merge(mx, am, sv[w], sk[w]);
        __syncthreads();
        float sum = 0.0f;
        for (size_t k = threadIdx.x; k < V; k += THREADS)
            sum = __fadd_rn(sum, expf(__fsub_rn(dsl_tof(z[k]), mx)));
        sum = warp_sum(sum);
        if (lane == 0)
            sv[wid] = sum;
        __syncthreads();
        sum = sv[0];
        for (int w = 1; w < WARPS; w++)
            sum = __fadd_rn(sum, sv[w]);
        __syncthreads();
        size_t y = (size_t)tgt[r0 + i];
        if (threadIdx.x == 0) {
            loss[r0 + i] = __fsub_rn(__fadd_rn(mx, logf(sum)), dsl_tof(z[y]));
            arg[r0 + i] = am;
        }
        __syncthreads(); /* z[y] is read before it is overwritten */
        if (back) {
            float inv = __fdiv_rn(1.0f, sum);
            for (size_t k = threadIdx.x; k < V; k += THREADS) {
                float e = expf(__fsub_rn(dsl_tof(z[k]), mx));
                z[k] = dsl_fromf<T>(__fmul_rn(__fsub_rn(__fmul_rn(e, inv), k == y ? 1.0f : 0.0f),
                                              f));
            }
        }
    }
}

/* out[0] = sum over samples of (sum of the sample's T losses, in double) / T, rounded to
 * float; out[stride] = samples whose last position's argmax is its last target */
__global__ void dsl_k_gpt_loss_stats(const float *loss, const int32_t *arg, const int32_t *tgt,
                                     size_t B, size_t Tc, float *out, size_t stride)
{
    double l = 0.0;
    unsigned long long h = 0;
    for (size_t b = threadIdx.x; b < B; b += THREADS) {
        double s = 0.0;
        for (size_t t = 0; t < Tc; t++)
            s = __dadd_rn(s, (double)loss[b * Tc + t]);
        l = __dadd_rn(l, __ddiv_rn(s, (double)Tc));
        h += arg[b * Tc + Tc - 1] == tgt[b * Tc + Tc - 1];
    }
    dsl_block_loss_stats(l, h, out, stride);
}

/* ---- launchers ---- */

static dim3 grid2(size_t cols, size_t rows)
{
    return dim3((unsigned)((cols + THREADS - 1) / THREADS), (unsigned)(rows < 65535 ? rows : 65535));
}

extern "C" cudaError_t dsl_cuda_gpt_encoder(cudaStream_t s, int et, void *out, const int32_t *inp,
                                            const void *wte, const void *wpe, size_t N, size_t T,
                                            size_t C)
{
    if (!N || !C)
        return cudaSuccess;
#define L_(ty)                                                                               \
    (dsl_k_gpt_encoder<ty><<<grid2(C, N), THREADS, 0, s>>>((ty *)out, inp, (const ty *)wte,   \
                                                           (const ty *)wpe, N, T, C),         \
     0)
    DISPATCH(et, L_);
#undef L_
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_gpt_wpe_grad(cudaStream_t s, int et, float *dwpe, const void *d,
                                             size_t B, size_t T, size_t C)
{
    if (!T || !C)
        return cudaSuccess;
#define L_(ty) (dsl_k_gpt_wpe_grad<ty><<<grid2(C, T), THREADS, 0, s>>>(dwpe, (const ty *)d, B, T, C), 0)
    DISPATCH(et, L_);
#undef L_
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_gpt_wte_scatter(cudaStream_t s, int et, float *dwte, const void *d,
                                                const int32_t *tok, const int32_t *off,
                                                const int32_t *rows, size_t nu, size_t C)
{
    if (!nu || !C)
        return cudaSuccess;
    unsigned g = (unsigned)(nu < 65535 ? nu : 65535);
#define L_(ty)                                                                               \
    (dsl_k_gpt_wte_scatter<ty><<<g, THREADS, 0, s>>>(dwte, (const ty *)d, tok, off, rows, nu, C), 0)
    DISPATCH(et, L_);
#undef L_
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_gpt_layernorm(cudaStream_t s, int et, void *out, float *mean,
                                              float *rstd, const void *x, const void *w,
                                              const void *b, size_t N, size_t C)
{
    if (!N)
        return cudaSuccess;
#define L_(ty)                                                                               \
    (dsl_k_gpt_layernorm<ty><<<row_blocks(N), THREADS, 0, s>>>(                               \
         (ty *)out, mean, rstd, (const ty *)x, (const ty *)w, (const ty *)b, N, C),           \
     0)
    DISPATCH(et, L_);
#undef L_
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_gpt_ln_back(cudaStream_t s, int et, void *dx, const void *x,
                                            const void *dy, const void *w, const float *mean,
                                            const float *rstd, size_t N, size_t C)
{
    if (!N)
        return cudaSuccess;
#define L_(ty)                                                                               \
    (dsl_k_gpt_ln_back<ty><<<row_blocks(N), THREADS, 0, s>>>(                                 \
         (ty *)dx, (const ty *)x, (const ty *)dy, (const ty *)w, mean, rstd, N, C),           \
     0)
    DISPATCH(et, L_);
#undef L_
    return cudaGetLastError();
}

extern "C" size_t dsl_cuda_gpt_colsum_chunks(size_t N)
{
    return (N + COL_ROWS - 1) / COL_ROWS;
}

extern "C" cudaError_t dsl_cuda_gpt_colsum(cudaStream_t s, int et, void *out, void *out2,
                                           const void *dy, const void *x, const float *mean,
                                           const float *rstd, size_t N, size_t cols,
                                           float *part)
{
    if (!cols)
        return cudaSuccess;
    size_t nk = dsl_cuda_gpt_colsum_chunks(N);
    float *part2 = part + nk * cols;
    cudaError_t e;
    if (nk) {
        dim3 g((unsigned)((cols + 31) / 32), (unsigned)nk);
#define L_(ty)                                                                               \
    (dsl_k_gpt_colsum_part<ty><<<g, dim3(32, 8), 0, s>>>(part, part2, (const ty *)dy,         \
                                                         (const ty *)x, mean, rstd, N, cols), \
     0)
        DISPATCH(et, L_);
#undef L_
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
#define L_(ty)                                                                               \
    (dsl_k_gpt_colsum_finish<ty><<<dsl_cuda_blocks(cols), THREADS, 0, s>>>(                   \
         (ty *)out, x ? (ty *)out2 : (ty *)NULL, part, part2, nk, cols),                     \
     0)
    DISPATCH(et, L_);
#undef L_
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_gpt_resbias(cudaStream_t s, int et, void *o, const void *x,
                                            const void *b, size_t N, size_t C)
{
    if (!N || !C)
        return cudaSuccess;
#define L_(ty)                                                                               \
    (dsl_k_gpt_resbias<ty><<<grid2(C, N), THREADS, 0, s>>>((ty *)o, (const ty *)x,            \
                                                           (const ty *)b, N, C),              \
     0)
    DISPATCH(et, L_);
#undef L_
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_gpt_gelu(cudaStream_t s, int et, void *o, const void *x, size_t n,
                                         int back)
{
    if (!n)
        return cudaSuccess;
#define L_(ty)                                                                               \
    (back ? (dsl_k_gpt_gelu_back<ty><<<dsl_cuda_blocks(n), THREADS, 0, s>>>((ty *)o,          \
                                                                           (const ty *)x, n), \
             0)                                                                              \
          : (dsl_k_gpt_gelu<ty><<<dsl_cuda_blocks(n), THREADS, 0, s>>>((ty *)o, (const ty *)x, \
                                                                      n),                    \
             0))
    DISPATCH(et, L_);
#undef L_
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_gpt_classifier(cudaStream_t s, int et, void *logits,
                                               const int32_t *tgt, size_t rows, size_t V,
                                               size_t ld, size_t r0, float *loss, int32_t *arg,
                                               int back, float f)
{
    if (!rows)
        return cudaSuccess;
    if (ld < V)
        return cudaErrorInvalidValue;
    unsigned g = (unsigned)(rows < 65535 ? rows : 65535);
#define L_(ty)                                                                               \
    (dsl_k_gpt_classifier<ty><<<g, THREADS, 0, s>>>((ty *)logits, tgt, rows, V, ld, r0, loss, \
                                                    arg, back, f),                            \
     0)
    DISPATCH(et, L_);
#undef L_
    return cudaGetLastError();
}

extern "C" cudaError_t dsl_cuda_gpt_loss_stats(cudaStream_t s, const float *loss,
                                               const int32_t *arg, const int32_t *tgt, size_t B,
                                               size_t T, float *out, size_t stride)
{
    dsl_k_gpt_loss_stats<<<1, THREADS, 0, s>>>(loss, arg, tgt, B, T, out, stride);
    return cudaGetLastError();
}
