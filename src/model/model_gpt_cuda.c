/*
 * The GPT of dstrain on a GPU: model_gpt.c's model with cuBLAS GEMMs and the fused
 * kernels of model_gpt_kernels.cu and model_gpt_attention*.cu, on device pointers. The
 * layout, the gradient segment list and the initial values are model_gpt_layout.c's,
 * shared with the CPU model, so the trainer's buckets and shards are the same on both and
 * both start from the same bits. This file holds the micro batch's upload, the ops table
 * and creation; model_gpt_cuda_pass.c forward, the head and backward;
 * model_gpt_cuda_gemm.c the cuBLAS(Lt) products; model_gpt_cuda.h their shared state.
 *
 * Theory of operation. As the CUDA MLP (model_mlp_cuda.c): every call runs in the
 * caller's thread on the model's stream (spec.stream, the trainer's device stream;
 * cuBLAS is bound to it), so it is ordered with the device's buffer operations and the
 * nccl comm orders its collectives after it with events. A call checks the micro
 * batch's token ids on the host, writes the inputs, the targets and the token
 * embedding's scatter plan (the rows sorted by token with a stable counting sort: the
 * distinct tokens, their first sorted row, the row indices) into one of two page-locked
 * staging buffers (alternating, each guarded by an event recorded after its upload) and
 * sends them with one cudaMemcpyAsync, so the host goes on while the GPU computes.
 *
 * Forward, per group of parameters in flat order (the embeddings, each block, ln_f) the
 * sink's need() first, exactly where the CPU model calls it: the embedding kernel;
 * per block LayerNorm, the qkv projection (bias broadcast, then GEMM with beta 1), the
 * fused flash-style causal attention straight from the projection's rows (the output
 * and each query row's log-sum-exp; no T x T matrix, model_gpt_attention.cu), the output
 * projection onto residual + bias, LayerNorm, the MLP (GEMM, GELU, GEMM onto
 * residual + bias; in 16-bit the first GEMM, its bias and the GELU are one cuBLASLt
 * matmul with the GELU_AUX_BIAS epilogue, the second adds its bias by an epilogue too,
 * see Epilogues); the final LayerNorm. The LM
 * head and the loss run in chunks of R rows (R from the vocabulary and the batch
 * only): the chunk's logits by one GEMM against the tied token embedding, the fused
 * classifier turns them into dlogits in place, and backward's first two GEMMs take the
 * chunk's rows of d ln_f and add its part of wte's gradient into an fp32 buffer of the
 * model. So no more than R x V logits exist at a time (R x Vp elements with the
 * padding, see Alignment).
 *
 * ZeRO stage 3 (the sink has layer(), model.h): the parameters pointer is not read;
 * each pass takes its layers from the sink in the CPU model's order (forward: the
 * embeddings, each block, ln_f; the LM head the embeddings again for the tied wte;
 * backward: ln_f, then the blocks from the last down) and gives each back once its
 * kernels are queued. A layer's window is indexed as the flat buffer would be, from
 * the window's address less the layer's offset (gpt_cuda_take), so the kernels and
 * GEMMs are the same calls on the same values as at stages 0-2.
 *
 * Backward walks the tensors in the CPU model's order and hands each finished tensor's
 * segments to the sink: projection weight gradients are one GEMM per segment straight
 * into the sink's destination; biases and LayerNorm parameters are deterministic
 * column sums (into the destination, or a scratch for LayerNorm's pair); the embeddings
 * are summed in fp32 (positions in sample order; tokens by the per-token-row scatter
 * in row order, after the head's part) and rounded or copied into their segments. The
 * micro batch's loss sum and hit count are summed on the device into the sink's
 * dev_stats when the trainer gives one; otherwise (evaluation) the per-row losses and
 * argmaxes are copied back and summed on the host as the CPU model does, after one
 * (bounded, through m->wait) host wait.
 *
 * Precision. fp32: every GEMM is cublasGemmEx with fp32 data and CUBLAS_COMPUTE_32F (no
 * TF32). 16-bit (spec.dtype fp16 or bf16): parameters, activations and gradients are
 * 16-bit, the GEMMs take 16-bit inputs and outputs with CUBLAS_COMPUTE_32F (and the wte
 * gradient an fp32 output), the handle's math mode disallows reduced-precision split-K
 * reductions, and the kernels compute in fp32 and round once. LayerNorm statistics,
 * the attention's log-sum-exp and row dots, and losses are fp32.
 *
 * Epilogues. With a 16-bit dtype and 4C a multiple of 8 (the aux matrix's leading
 * dimension must be), the MLP's input projection is cublasLtMatmul with
 * CUBLASLT_EPILOGUE_GELU_AUX_BIAS: fchg = gelu(ln2 W + b) written and fch = ln2 W + b
 * kept as the aux matrix; backward, the output projection's input gradient uses
 * CUBLASLT_EPILOGUE_DGELU_BGRAD with fch as aux, so d4C = (dres W^T) gelu'(fch) in one
 * GEMM that also writes fc's bias gradient (d4C's column sums, from the fp32 values)
 * into its segment (DGELU and the column sums where the heuristic has nothing for it);
 * and every other projection adds its bias by CUBLASLT_EPILOGUE_BIAS: qkv with beta 0,
 * the attention's and the MLP's output projections with the residual as the GEMM's C
 * (beta 1). That replaces the bias broadcasts, the GELU kernel, the GELU-gradient
 * kernel and one bias gradient's column sums: per block four passes over N x 4C, one
 * over N x 3C and two over N x C. The residual and the bias are added to the fp32
 * product before the one rounding (the kernels round res + b to 16 bits first).
 * DSL_GPT_EPILOGUES=off keeps the kernels. Roundings differ from
 * those kernels: the epilogue's GELU takes the
 * fp32 pre-activation (the kernels take it rounded to 16 bits), its gradient multiplies
 * the fp32 product (the kernels round it first), both evaluate gelu' at the 16-bit fch,
 * and the library's tanh is its own (the formula is the tanh approximation, the model's
 * rational tanh is not), so 16-bit results agree with the kernels within 16-bit
 * rounding. fp32, whose CPU-oracle tolerance is far tighter, and odd widths keep the
 * kernels. Determinism: each (shape, epilogue, operand alignment) takes the heuristic's
 * first algorithm that fits a fixed workspace and reduces split-K partial products, if
 * at all, in fp32, once, and keeps it (lt_gemm's plans), so the bits do not depend on
 * when a shape was first seen; without such an algorithm that GEMM keeps the kernels.
 *
 * Row-major with a column-major BLAS: a row-major r x c matrix is a column-major c x r
 * one, so every row-major product C = A B is issued as C^T = B^T A^T.
 *
 * Alignment. cuBLAS takes its fast tensor-core kernels only when every matrix pointer
 * and leading dimension is a multiple of 16 bytes (8 16-bit elements, 4 fp32); anything
 * else is still correct but slower. The rule here: every GEMM operand is 16-byte
 * aligned, at the shapes that matter, by construction:
 *   - the vocabulary: the logits chunk's rows lie Vp elements apart, V rounded up to a
 *     multiple of GPT_CUDA_VOCAB_PAD (GPT-2's 50257 to 50304), in the GPU's own buffer
 *     only (the parameters' layout, shared with the CPU model and the trainer, keeps V
 *     rows of wte). The LM head's three GEMMs keep their m/n/k at the true V, as their
 *     other operand is the unpadded wte (and the fp32 wte gradient, [V, C] with stride
 *     C); the classifier reads and writes only the first V columns of a row and the
 *     loss, argmax and evaluation see only those, so the padding is never a class and
 *     is never even initialised;
 *   - every other leading dimension is C, 3C or 4C, every activation pointer a
 *     cudaMalloc'd buffer (256-byte aligned) plus whole rows, every parameter pointer a
 *     layout offset (a sum of tensor sizes, each a multiple of C), every gradient
 *     destination a segment offset (whole rows) into the sink's buffer: all aligned
 *     when C is a multiple of 8 (GPT-2's 768; the tests' odd C run slower kernels);
 *   - the one exception: a weight gradient cut into several segments (rows r0.. of the
 *     weight; dstrain's reduce_bucket_size below the tensor) reads its activations from
 *     column r0, aligned only when each segment's row count seg_max / cols is a
 *     multiple of 8; the default bucket (500 M elements) keeps whole tensors.
 * The attention reads qkv's rows (stride 3C) in its own kernels, not through cuBLAS,
 * so head sizes do not enter this rule.
 *
 * Determinism: cuBLAS is deterministic for fixed shapes on one GPU model and every
 * kernel has a fixed reduction order (model_gpt_kernels.cu), so two runs give the same
 * bits. Not thread-safe (one workspace); failures return a negative code with the text
 * in m->err and never exit.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/model/model.h"
#include "dslaunch/device/gemm_dims.h"
#include "model_cuda_impl.h"
#include "model_gpt_cuda.h"
#include "model_gpt_impl.h"
#include "dslaunch/common/banned.h"

/* ---- the micro batch ---- */

static int gpt_cuda_upload(struct dsl_model *m, const float *x, size_t B)
{
    struct gpt_cuda *p = m->impl;
    size_t T = p->L.T, V = p->L.V, N = B * T;
    float fV = (float)V;
    if (B > m->max_batch)
        return dsl_seterr(m->err, DSL_EDATA, "gpt: a micro batch of %zu exceeds %zu", B,
                          m->max_batch);
    for (size_t i = 0; i < B * (T + 1); i++)
        if (!(x[i] >= 0.0f && x[i] < fV) || x[i] != floorf(x[i]))
            return dsl_seterr(m->err, DSL_EDATA, "gpt: a sample holds a token id outside "
                              "0..%zu", V - 1);
    if (!B)
        return 0;
    int k = p->slot;
    p->slot ^= 1;
    /* the staging buffer's previous upload must be done; it almost always is */
    cudaError_t q = cudaEventQuery(p->up[k]);
    if (q == cudaErrorNotReady)
        TRY(dsl_model_cuda_wait(m, p->stream));
    else if (q != cudaSuccess)
        CU(m, "checking the upload buffer", q);
    int32_t *inp = p->hids[k], *tgt = inp + N, *tok = tgt + N, *off = tok + N,
            *rows = off + N + 1;
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++) {
            inp[b * T + t] = (int32_t)x[b * (T + 1) + t];
            tgt[b * T + t] = (int32_t)x[b * (T + 1) + t + 1];
        }
    memcpy(p->htgt, tgt, N * sizeof(int32_t));
    /* stable counting sort of the rows by token: rows of one token in row order */
    memset(p->count, 0, (V + 1) * sizeof(int32_t));
    for (size_t i = 0; i < N; i++)
        p->count[inp[i] + 1]++;
    size_t nu = 0;
    for (size_t v = 0; v < V; v++) {
        if (p->count[v + 1]) {
            tok[nu] = (int32_t)v;
            off[nu++] = p->count[v];
        }
        p->count[v + 1] += p->count[v];
    }
    off[nu] = (int32_t)N;
    for (size_t i = 0; i < N; i++)
        rows[p->count[inp[i]]++] = (int32_t)i;
    p->nu = nu;
    CU(m, "uploading the tokens",
       cudaMemcpyAsync(p->ids, inp, (5 * N + 1) * sizeof(int32_t), cudaMemcpyHostToDevice,
                       p->stream));
    CU(m, "recording the upload", cudaEventRecord(p->up[k], p->stream));
    return 0;
}

/* ---- the ops table ---------------------------------------------------------------- */

static int gpt_cuda_stats(struct dsl_model *m, size_t B, const struct dsl_grad_sink *sink,
                          struct dsl_model_stats *st)
{
    struct gpt_cuda *p = m->impl;
    size_t T = p->L.T, N = B * T;
    st->loss_sum = 0.0;
    st->correct = 0;
    st->deferred = 0;
    if (sink && sink->dev_stats) {
        MARK(HEAD);
        if (B)
            CU(m, "launching dsl_k_gpt_loss_stats",
               dsl_cuda_gpt_loss_stats(p->stream, p->rowloss, p->rowarg, dev_tgt(p, N), B, T,
                                       sink->dev_stats, sink->dev_stats_stride));
        else
            CU(m, "cudaMemsetAsync",
               cudaMemsetAsync(sink->dev_stats, 0, sizeof(float), p->stream));
        st->deferred = 1;
        return 0;
    }
    if (!B)
        return 0;
    CU(m, "copying the losses", cudaMemcpyAsync(p->hloss, p->rowloss, N * sizeof(float),
                                                cudaMemcpyDeviceToHost, p->stream));
    CU(m, "copying the predictions", cudaMemcpyAsync(p->harg, p->rowarg, N * sizeof(int32_t),
                                                     cudaMemcpyDeviceToHost, p->stream));
    TRY(dsl_model_cuda_wait(m, p->stream));
    /* as model_gpt.c's gpt_stats */
    for (size_t b = 0; b < B; b++) {
        double s = 0.0;
        for (size_t t = 0; t < T; t++)
            s += (double)p->hloss[b * T + t];
        st->loss_sum += s / (double)T;
        st->correct += p->harg[b * T + T - 1] == p->htgt[b * T + T - 1];
    }
    return 0;
}

static int gpt_cuda_init_params(struct dsl_model *m, float *params, uint64_t seed)
{
    struct gpt_cuda *p = m->impl;
    float *h = dsl_model_cuda_params_host(m);
    if (!h)
        return -ENOMEM;
    dsl_gpt_layout_init(&p->L, h, seed);
    return dsl_model_cuda_params_put(m, params, h, p->stream);
}

/* an empty micro batch: zero gradients, in order */
static int zero_grads(struct dsl_model *m, const struct dsl_grad_sink *sink)
{
    struct gpt_cuda *p = m->impl;
    for (size_t s = 0; s < m->nsegs; s++) {
        void *dst = sink->dest(sink->ctx, s);
        CU(m, "cudaMemsetAsync", cudaMemsetAsync(dst, 0, m->segs[s].len * p->esz, p->stream));
        sink->done(sink->ctx, s);
    }
    return 0;
}

static int gpt_cuda_forward_backward(struct dsl_model *m, const float *params, const float *x,
                                     const int32_t *y, size_t n, float loss_scale,
                                     const struct dsl_grad_sink *sink,
                                     struct dsl_model_stats *st)
{
    (void)y;
    TRY(gpt_cuda_upload(m, x, n));
    if (!n) {
        TRY(zero_grads(m, sink));
        return gpt_cuda_stats(m, 0, sink, st);
    }
    TRY(dsl_gpt_cuda_forward(m, params, n, sink));
    TRY(dsl_gpt_cuda_head(m, params, n, 1, loss_scale, sink));
    TRY(gpt_cuda_stats(m, n, sink, st));
    return dsl_gpt_cuda_backward(m, params, n, sink);
}

static int gpt_cuda_evaluate(struct dsl_model *m, const float *params, const float *x,
                             const int32_t *y, size_t n, struct dsl_model_stats *st)
{
    (void)y;
    TRY(gpt_cuda_upload(m, x, n));
    if (n) {
        TRY(dsl_gpt_cuda_forward(m, params, n, NULL));
        TRY(dsl_gpt_cuda_head(m, params, n, 0, 1.0f, NULL));
    }
    return gpt_cuda_stats(m, n, NULL, st);
}

/* forward only, each layer from src's layer() (ZeRO stage 3's evaluation) */
static int gpt_cuda_evaluate_src(struct dsl_model *m, const struct dsl_grad_sink *src,
                                 const float *x, const int32_t *y, size_t n,
                                 struct dsl_model_stats *st)
{
    (void)y;
    TRY(gpt_cuda_upload(m, x, n));
    if (n) {
        TRY(dsl_gpt_cuda_forward(m, NULL, n, src));
        TRY(dsl_gpt_cuda_head(m, NULL, n, 0, 1.0f, src));
    }
    return gpt_cuda_stats(m, n, NULL, st);
}

static void gpt_cuda_release(struct dsl_model *m)
{
    struct gpt_cuda *p = m->impl;
    if (!p)
        return;
    void *dev[] = {p->ids, p->enc, p->lnf, p->logits, p->dres, p->dC, p->d3C, p->d4C, p->g1,
                   p->g2, p->lnfm, p->lnfr, p->rowloss, p->dwte, p->dwpe, p->part, p->rowd,
                   p->rowarg, p->ltws};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        cudaFree(dev[i]);
    for (size_t l = 0; l < p->L.L; l++) {
        struct gpt_cuda_block *h = &p->h[l];
        void *b[] = {h->ln1, h->qkv, h->atty, h->res2, h->ln2, h->fch, h->fchg, h->res3,
                     h->ln1m, h->ln1r, h->ln2m, h->ln2r, h->lse};
        for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++)
            cudaFree(b[i]);
    }
    for (int k = 0; k < 2; k++) {
        if (p->hids[k])
            cudaFreeHost(p->hids[k]);
        if (p->up[k])
            cudaEventDestroy(p->up[k]);
    }
    if (p->hloss)
        cudaFreeHost(p->hloss);
    if (p->harg)
        cudaFreeHost(p->harg);
    free(p->count);
    free(p->htgt);
    if (p->blas)
        cublasDestroy(p->blas);
    dsl_gpt_gemm_release(p);
    if (p->lt)
        cublasLtDestroy(p->lt);
    free(p);
    m->impl = NULL;
}

static const struct dsl_model_ops gpt_cuda_ops = {
    .name = "gpt",
    .init_params = gpt_cuda_init_params,
    .forward_backward = gpt_cuda_forward_backward,
    .evaluate = gpt_cuda_evaluate,
    .evaluate_src = gpt_cuda_evaluate_src,
    .release = gpt_cuda_release,
};

/* the message formatted before the model (whose state it may quote) is released */
__attribute__((format(printf, 4, 5))) static int create_fail(struct dsl_model *m, char *err,
                                                              int code, const char *fmt, ...)
{
    char text[DSL_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    dsl_model_release(m);
    return dsl_seterr(err, code, "%s", text);
}

/* which attention kernels (tensor cores or scalar, DSL_GPT_ATTENTION) and their shared
 * memory, checked against the device's opt-in limit and opted in; on failure the model
 * is released */
static int setup_attention(struct dsl_model *m, struct gpt_cuda *p, size_t C, size_t NH,
                           char *err)
{
    /* the attention's kernels: on tensor cores where the device has them for the
     * 16-bit type (bf16 sm_80+, fp16 sm_70+), else the scalar fp32 ones;
     * DSL_GPT_ATTENTION=scalar or =tensor picks one (a GPU session's A/B; tensor
     * refuses a model it cannot serve) */
    const char *want = getenv("DSL_GPT_ATTENTION");
    cudaError_t ce = dsl_cuda_gpt_attention_tc(p->et, &p->attn_tc);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        return create_fail(m, err, DSL_EREMOTE,
                           "cuda: cannot read the attention kernels' architecture: %s",
                           cudaGetErrorString(ce));
    }
    if (want && *want && strcmp(want, "auto") != 0) {
        if (strcmp(want, "scalar") == 0) {
            p->attn_tc = 0;
        } else if (strcmp(want, "tensor") != 0) {
            dsl_model_release(m);
            return dsl_seterr(err, DSL_ECONFIG, "gpt: DSL_GPT_ATTENTION '%s' is none of "
                              "auto, scalar, tensor", want);
        } else if (!p->attn_tc) {
            dsl_model_release(m);
            return dsl_seterr(err, DSL_ECONFIG, "gpt: DSL_GPT_ATTENTION=tensor: the "
                              "tensor-core attention needs bf16 (sm_80+) or fp16 (sm_70+), "
                              "not %s on this device", p->et == DSL_CUDA_FP32 ? "fp32"
                              : p->et == DSL_CUDA_BF16 ? "bf16" : "fp16");
        }
    }
    /* the attention's shared memory per block (above 48 KiB for heads above 64 at
     * least in dk/dv): within the device's opt-in limit, and opted in */
    int dev = 0, avail = 0;
    size_t need = dsl_cuda_gpt_attention_smem(C / NH, p->attn_tc);
    ce = cudaGetDevice(&dev);
    if (ce == cudaSuccess)
        ce = cudaDeviceGetAttribute(&avail, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        return create_fail(m, err, DSL_EREMOTE,
                           "cuda: cannot read the device's shared memory limit: %s",
                           cudaGetErrorString(ce));
    }
    if (need > (size_t)avail) {
        dsl_model_release(m);
        return dsl_seterr(err, DSL_ECONFIG, "gpt: head size %zu (dim %zu / %zu heads) needs "
                          "%zu bytes of shared memory per block for the GPU attention; "
                          "device %d allows %d; use more heads", C / NH, C, NH, need, dev,
                          avail);
    }
    if ((ce = dsl_cuda_gpt_attention_setup(p->et, C / NH, p->attn_tc)) != cudaSuccess) {
        (void)cudaGetLastError();
        return create_fail(m, err, DSL_EREMOTE,
                           "cuda: cannot give the attention kernels %zu bytes of shared "
                           "memory: %s",
                           need, cudaGetErrorString(ce));
    }
    return 0;
}

/* every GEMM size within cuBLAS's int and the row indices within int32; on failure the
 * model is released */
static int check_sizes(struct dsl_model *m, size_t N, size_t B, size_t T, size_t C, size_t V,
                       size_t NH, char *err)
{
    int r, dim;
    size_t sizes[] = {N, 4 * C, V + GPT_CUDA_VOCAB_PAD, B * NH, V * C};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        if ((r = dsl_gemm_dim(sizes[i], "GPT dimension", &dim, err)) < 0) {
            dsl_model_release(m);
            return r;
        }
    if (5 * N + 1 > 0x7fffffff) {
        dsl_model_release(m);
        return dsl_seterr(err, DSL_ECONFIG, "gpt: a micro batch of %zu x %zu tokens is "
                          "too large for the GPU's int32 row indices", B, T);
    }
    return 0;
}

/* the cuBLAS handle on the model's stream, and cuBLASLt's for the epilogues; on failure
 * the model is released */
static int setup_blas(struct dsl_model *m, struct gpt_cuda *p, size_t C, char *err)
{
    cublasStatus_t bs = cublasCreate(&p->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        p->blas = NULL;
        return create_fail(m, err, bs == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : DSL_EREMOTE,
                           "cublas: cannot create a handle: %s", cublasGetStatusString(bs));
    }
    if ((bs = cublasSetStream(p->blas, p->stream)) != CUBLAS_STATUS_SUCCESS) {
        return create_fail(m, err, DSL_EREMOTE, "cublas: cannot set the stream: %s",
                           cublasGetStatusString(bs));
    }
    /* fp32 without TF32 (the CPU model is the reference); 16-bit on tensor cores with
     * fp32 accumulation and no reduced-precision split-K reductions */
    if ((bs = cublasSetMathMode(p->blas, CUBLAS_DEFAULT_MATH |
                                             CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) !=
        CUBLAS_STATUS_SUCCESS) {
        return create_fail(m, err, DSL_EREMOTE, "cublas: cannot set the math mode: %s",
                           cublasGetStatusString(bs));
    }
    /* the biases, the MLP's GELU and their gradients as cuBLASLt epilogues in 16-bit
     * (fp32 keeps the kernels with the CPU's tanh); the GELU's aux matrix needs a
     * leading dimension 4C that is a multiple of 8; DSL_GPT_EPILOGUES=off keeps the
     * kernels too (a GPU session's A/B) */
    const char *epi = getenv("DSL_GPT_EPILOGUES");
    if (epi && *epi && strcmp(epi, "on") != 0 && strcmp(epi, "off") != 0) {
        dsl_model_release(m);
        return dsl_seterr(err, DSL_ECONFIG, "gpt: DSL_GPT_EPILOGUES '%s' is neither on nor off",
                          epi);
    }
    if (p->et != DSL_CUDA_FP32 && (4 * C) % 8 == 0 && !(epi && strcmp(epi, "off") == 0)) {
        if ((bs = cublasLtCreate(&p->lt)) != CUBLAS_STATUS_SUCCESS) {
            p->lt = NULL;
            return create_fail(m, err,
                               bs == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : DSL_EREMOTE,
                               "cublasLt: cannot create a handle: %s", cublasGetStatusString(bs));
        }
    }
    return 0;
}

/* every device and page-locked buffer for micro batches of B; *fail when one is
 * missing, with the bytes asked for in *total (device) and *htotal (host) */
static void alloc_buffers(struct gpt_cuda *p, size_t B, size_t *total, size_t *htotal,
                          int *failp)
{
    size_t T = p->L.T, C = p->L.C, V = p->L.V, NH = p->L.NH, N = B * T;
    p->Vp = (V + GPT_CUDA_VOCAB_PAD - 1) / GPT_CUDA_VOCAB_PAD * GPT_CUDA_VOCAB_PAD;
    p->R = GPT_CUDA_LOGIT_BUDGET / p->Vp;
    p->R = p->R < 1 ? 1 : p->R > N ? N : p->R;
    size_t e = p->esz, BHT = B * NH * T, nk = dsl_cuda_gpt_colsum_chunks(N);
    int fail = 0;
    p->ids = dsl_model_cuda_alloc((5 * N + 1) * sizeof(int32_t), total, &fail);
    p->enc = dsl_model_cuda_alloc(N * C * e, total, &fail);
    p->lnf = dsl_model_cuda_alloc(N * C * e, total, &fail);
    p->logits = dsl_model_cuda_alloc(p->R * p->Vp * e, total, &fail);
    p->dres = dsl_model_cuda_alloc(N * C * e, total, &fail);
    p->dC = dsl_model_cuda_alloc(N * C * e, total, &fail);
    p->d3C = dsl_model_cuda_alloc(3 * N * C * e, total, &fail);
    p->d4C = dsl_model_cuda_alloc(4 * N * C * e, total, &fail);
    p->rowd = dsl_model_cuda_alloc(BHT * sizeof(float), total, &fail);
    p->g1 = dsl_model_cuda_alloc(C * e, total, &fail);
    p->g2 = dsl_model_cuda_alloc(C * e, total, &fail);
    p->lnfm = dsl_model_cuda_alloc(N * sizeof(float), total, &fail);
    p->lnfr = dsl_model_cuda_alloc(N * sizeof(float), total, &fail);
    p->rowloss = dsl_model_cuda_alloc(N * sizeof(float), total, &fail);
    p->rowarg = dsl_model_cuda_alloc(N * sizeof(int32_t), total, &fail);
    p->dwte = dsl_model_cuda_alloc(V * C * sizeof(float), total, &fail);
    p->dwpe = dsl_model_cuda_alloc(T * C * sizeof(float), total, &fail);
    p->part = dsl_model_cuda_alloc(2 * (nk ? nk : 1) * 4 * C * sizeof(float), total, &fail);
    if (p->lt)
        p->ltws = dsl_model_cuda_alloc(GPT_CUDA_LT_WORKSPACE, total, &fail);
    for (size_t l = 0; l < p->L.L; l++) {
        struct gpt_cuda_block *h = &p->h[l];
        h->ln1 = dsl_model_cuda_alloc(N * C * e, total, &fail);
        h->qkv = dsl_model_cuda_alloc(3 * N * C * e, total, &fail);
        h->lse = dsl_model_cuda_alloc(BHT * sizeof(float), total, &fail);
        h->atty = dsl_model_cuda_alloc(N * C * e, total, &fail);
        h->res2 = dsl_model_cuda_alloc(N * C * e, total, &fail);
        h->ln2 = dsl_model_cuda_alloc(N * C * e, total, &fail);
        h->fch = dsl_model_cuda_alloc(4 * N * C * e, total, &fail);
        h->fchg = dsl_model_cuda_alloc(4 * N * C * e, total, &fail);
        h->res3 = dsl_model_cuda_alloc(N * C * e, total, &fail);
        h->ln1m = dsl_model_cuda_alloc(N * sizeof(float), total, &fail);
        h->ln1r = dsl_model_cuda_alloc(N * sizeof(float), total, &fail);
        h->ln2m = dsl_model_cuda_alloc(N * sizeof(float), total, &fail);
        h->ln2r = dsl_model_cuda_alloc(N * sizeof(float), total, &fail);
    }
    for (int k = 0; k < 2; k++) {
        p->hids[k] = dsl_model_cuda_host_alloc((5 * N + 1) * sizeof(int32_t), htotal, &fail);
        if (!fail && cudaEventCreateWithFlags(&p->up[k], cudaEventDisableTiming) != cudaSuccess)
            p->up[k] = NULL, fail = 1;
    }
    p->hloss = dsl_model_cuda_host_alloc(N * sizeof(float), htotal, &fail);
    p->harg = dsl_model_cuda_host_alloc(N * sizeof(int32_t), htotal, &fail);
    p->count = calloc(V + 1, sizeof(int32_t));
    p->htgt = calloc(N ? N : 1, sizeof(int32_t));
    *failp = fail;
}

int dsl_gpt_create_cuda(struct dsl_model *m, const struct dsl_model_spec *spec, char *err)
{
    struct dsl_gpt_layout lay;
    int r = dsl_gpt_layout_build(&lay, m, spec, err);
    if (r < 0)
        return r;
    struct gpt_cuda *p = dsl_xcalloc(1, sizeof(*p));
    p->L = lay;
    p->m = m;
    m->ops = &gpt_cuda_ops;
    m->impl = p;
    m->on_device = 1;
    m->dtype = spec->dtype;
    p->et = spec->dtype == DSL_BFLOAT16 ? DSL_CUDA_BF16
            : spec->dtype == DSL_FLOAT16 ? DSL_CUDA_FP16
                                         : DSL_CUDA_FP32;
    p->esz = p->et == DSL_CUDA_FP32 ? sizeof(float) : 2;
    p->dt = p->et == DSL_CUDA_BF16 ? CUDA_R_16BF : p->et == DSL_CUDA_FP16 ? CUDA_R_16F
                                                                           : CUDA_R_32F;
    p->stream = (cudaStream_t)spec->stream;
    m->stream = spec->stream;

    size_t B = spec->max_batch, T = lay.T, C = lay.C, V = lay.V, NH = lay.NH, N = B * T;
    /* the fused attention's head sizes; every GEMM size must fit cuBLAS's int and the
     * (sample, head) pairs the attention grid's x: refuse the model now, not mid-step */
    if (C / NH > DSL_CUDA_GPT_MAX_HEAD) {
        dsl_model_release(m);
        return dsl_seterr(err, DSL_ECONFIG, "gpt: head size %zu (dim %zu / %zu heads) is above "
                          "the GPU attention's %d; use more heads", C / NH, C, NH,
                          DSL_CUDA_GPT_MAX_HEAD);
    }
    if ((r = setup_attention(m, p, C, NH, err)) < 0 ||
        (r = check_sizes(m, N, B, T, C, V, NH, err)) < 0 || (r = setup_blas(m, p, C, err)) < 0)
        return r;
    size_t total = 0, htotal = 0;
    int fail = 0;
    alloc_buffers(p, B, &total, &htotal, &fail);
    if (fail || !p->count || !p->htgt) {
        (void)cudaGetLastError();
        return create_fail(m, err, -ENOMEM,
                           "gpt: cannot allocate %zu MiB of GPU workspace (and %zu MiB of "
                           "page-locked host memory) for a micro batch of %zu x %zu tokens",
                           total >> 20, htotal >> 20, B, T);
    }
    return 0;
}