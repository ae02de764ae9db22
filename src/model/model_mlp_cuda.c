/*
 * The MLP of dstrain on a GPU: model_mlp.c's model with cuBLAS sgemm and the kernels
 * of model_mlp_kernels.cu, on device pointers. The layout, the gradient segment list
 * and the initial values are model_mlp_layout.c's, shared with the CPU model, so the
 * trainer's buckets and shards are the same on both.
 *
 * Theory of operation. Every call runs in the caller's thread on the model's stream
 * (spec.stream: the trainer's device stream; cuBLAS is bound to it with
 * cublasSetStream), so the work is ordered with the device's buffer ops without
 * events; the nccl comm orders its collectives after this stream with events. A call
 * uploads the micro batch asynchronously: the host samples are copied into one of two
 * page-locked staging buffers (alternating, each guarded by an event recorded after
 * its upload, so that a buffer is rewritten only once its previous copy is done) and
 * sent with cudaMemcpyAsync, so the host goes on to gather the next micro batch while
 * the GPU computes this one. Then forward (below) and the loss (its gradient dz
 * multiplied by the trainer's loss factor, as on the CPU), and, for forward_backward,
 * backward in the CPU model's order: per layer from the last, the bias gradient, then
 * the weight gradient row blocks (last block first), each written straight into the
 * device buffer sink->dest returns and then handed over with sink->done (where the
 * trainer may start a reduction on the comm's stream while the remaining kernels run),
 * and last the gradient of the layer's input. The loss sum and hit count of the micro
 * batch are summed on the device into the sink's dev_stats when the trainer gives one
 * (no host wait per micro step: the trainer reads them with its one wait per step);
 * otherwise (evaluation) they are copied back to page-locked memory and the host
 * waits, through m->wait when the trainer set it (the comm's bounded wait), counting
 * one host synchronisation.
 *
 * 16-bit compute (spec.dtype fp16 or bf16): parameters, activations, dz and the
 * gradients are 16-bit; the GEMMs are cublasGemmEx with 16-bit inputs and outputs and
 * CUBLAS_COMPUTE_32F; the elementwise kernels widen to fp32, compute, and round once
 * (the bias gradient's column sum and the loss run entirely in fp32); the samples are
 * uploaded as fp32 and rounded on the device. The order of the calls is the same.
 *
 * Forward asks the sink for parameters exactly as the CPU model does (model.h's
 * need(), the order planned by dsl_mlp_layout_need_plan): with a sink that has need(),
 * the first layer's bias, then its weight segment by segment in backward order, each
 * block's output columns computed by their own GEMM as soon as need() has returned for
 * its rows, then every later layer whole; the bias and ReLU of a layer run once, after
 * its last block. On the GPU the trainer's need() orders the stream (its waits are the
 * comm's stream waits), so the kernels queued after it see the parameters. Every
 * output element is the same K-long dot product whichever cut, but cuBLAS may pick
 * another kernel for a narrower product, so unlike on the CPU the cut may change the
 * last bits; the two runs of one model with one sink give the same bits.
 *
 * ZeRO stage 3 (a sink with layer()): the parameters pointer is not read; forward asks
 * for every layer whole, in order, naming the next one, and backward for each layer
 * from the last down to the second again, for its input gradient, exactly the calls of
 * the CPU model (model_mlp.c), so every rank issues the same gathers in the same order.
 * A layer is given back with unlayer() once the kernels that read it are queued: the
 * trainer's next gather into that window is ordered after them on the device.
 *
 * Row-major with a column-major BLAS: a row-major r x c matrix is a column-major
 * c x r one, so every row-major product C = A B is issued as C^T = B^T A^T.
 *
 * Not thread-safe (one workspace); failures return a negative code with the text in
 * m->err and never exit.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/model/model.h"
#include "dslaunch/common/xalloc.h"
#include "cuda_kernels.h"
#include "model_cuda_impl.h"
#include "model_mlp_impl.h"
#include "dslaunch/device/gemm_dims.h"
#include "dslaunch/common/banned.h"

struct mlp_cuda {
    struct dsl_mlp_layout L;
    cublasHandle_t blas;
    size_t esz;                           /* element bytes: 4, or 2 for 16-bit compute */
    int half, bf16;                       /* 16-bit compute; of type bf16 (else fp16) */
    float *x32;                           /* 16-bit: the samples as uploaded, fp32 */
    void *act[DSL_MODEL_MAX_LAYERS + 2];  /* device; act[0]: the uploaded samples */
    int32_t *y;                           /* device labels */
    void *dz, *dz2;                       /* device, max_batch x maxdim each */
    float *loss;                          /* device, per sample */
    int32_t *correct;                     /* device, per sample */
    float *hloss;                         /* page-locked host copies of the two */
    int32_t *hcorrect;
    cudaStream_t stream;                  /* spec.stream (NULL: legacy default) */
    float *hx[2];                         /* page-locked upload staging, alternating */
    int32_t *hy[2];
    cudaEvent_t up[2];                    /* recorded after each staging buffer's copy */
    int slot;
    struct dsl_mlp_need *plan[2];         /* forward: [0] every layer whole, [1] for a
                                             sink with need() (first layer in blocks) */
    size_t nplan[2];
};

static const float one = 1.0f, zero = 0.0f;

/* element off of a buffer of the model's element type */
static void *el(const struct mlp_cuda *p, const void *base, size_t off)
{
    return (char *)(uintptr_t)base + off * p->esz;
}

/* C = op(A) op(B), column-major: sgemm in fp32, cublasGemmEx with 16-bit A, B and C and
 * fp32 accumulation (CUBLAS_COMPUTE_32F) otherwise. Every size goes through the checked
 * conversion (gemm_dims.h); the model's shapes were checked when it was built, so a
 * failure here is a bug, reported with its size rather than truncated. */
static int gemm(struct dsl_model *mo, const char *what, cublasOperation_t ta,
                cublasOperation_t tb, size_t m, size_t n, size_t k, const void *A, size_t lda,
                const void *B, size_t ldb, void *C, size_t ldc)
{
    const struct mlp_cuda *p = mo->impl;
    int im, in, ik, ia, ib, ic;
    cublasStatus_t st;
    if (dsl_gemm_dim(m, "m", &im, mo->err) < 0 || dsl_gemm_dim(n, "n", &in, mo->err) < 0 ||
        dsl_gemm_dim(k, "k", &ik, mo->err) < 0 || dsl_gemm_dim(lda, "lda", &ia, mo->err) < 0 ||
        dsl_gemm_dim(ldb, "ldb", &ib, mo->err) < 0 || dsl_gemm_dim(ldc, "ldc", &ic, mo->err) < 0)
        return DSL_ECONFIG;
    dsl_gpuprof_launch("launching a cuBLAS GEMM");
    if (!p->half) {
        st = cublasSgemm(p->blas, ta, tb, im, in, ik, &one, A, ia, B, ib, &zero, C, ic);
    } else {
        cudaDataType_t ty = p->bf16 ? CUDA_R_16BF : CUDA_R_16F;
        st = cublasGemmEx(p->blas, ta, tb, im, in, ik, &one, A, ty, ia, B, ty, ib, &zero, C,
                          ty, ic, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }
    return st == CUBLAS_STATUS_SUCCESS ? 0 : dsl_model_blas_err(mo, what, st);
}

static int mlpc_init_params(struct dsl_model *m, float *params, uint64_t seed)
{
    struct mlp_cuda *p = m->impl;
    float *h = dsl_model_cuda_params_host(m);
    if (!h)
        return -ENOMEM;
    dsl_mlp_layout_init(&p->L, h, seed);
    return dsl_model_cuda_params_put(m, params, h, p->stream);
}

static int upload(struct dsl_model *m, const float *x, const int32_t *y, size_t n)
{
    struct mlp_cuda *p = m->impl;
    for (size_t i = 0; i < n; i++)
        if (y[i] < 0 || (size_t)y[i] >= m->out_dim)
            return DSL_EDATA;
    if (n > m->max_batch)
        return DSL_EDATA;
    if (!n)
        return 0;
    int k = p->slot;
    p->slot ^= 1;
    /* the staging buffer's previous upload must be done; it almost always is (a whole
     * micro step ran since), else wait (bounded) */
    cudaError_t q = cudaEventQuery(p->up[k]);
    if (q == cudaErrorNotReady) {
        int r = dsl_model_cuda_wait(m, p->stream);
        if (r < 0)
            return r;
    } else if (q != cudaSuccess) {
        CU(m, "checking the upload buffer", q);
    }
    memcpy(p->hx[k], x, n * m->in_dim * sizeof(float));
    memcpy(p->hy[k], y, n * sizeof(int32_t));
    CU(m, "uploading the samples",
       cudaMemcpyAsync(p->half ? p->x32 : p->act[0], p->hx[k], n * m->in_dim * sizeof(float),
                       cudaMemcpyHostToDevice, p->stream));
    CU(m, "uploading the labels",
       cudaMemcpyAsync(p->y, p->hy[k], n * sizeof(int32_t), cudaMemcpyHostToDevice,
                       p->stream));
    CU(m, "recording the upload", cudaEventRecord(p->up[k], p->stream));
    if (p->half)
        CU(m, "launching dsl_k_to_half (samples)",
           dsl_cuda_to_half(p->stream, p->bf16, p->act[0], p->x32, n * m->in_dim));
    return 0;
}

/* act[l+1] = relu?(act[l] W_l^T + b_l) for n rows, along the need() plan, or with
 * each layer from the sink's layer() (stage 3: the CPU model's calls, in its order);
 * then the loss (and dz into p->dz, which also says that backward follows) */
static int forward_loss(struct dsl_model *m, const float *params, size_t n,
                        const struct dsl_grad_sink *sink, int want_dz, float loss_scale)
{
    struct mlp_cuda *p = m->impl;
    size_t nl = p->L.nlayers;
    int need = sink && sink->need, z3 = sink && sink->layer, r;
    const struct dsl_mlp_need *plan = p->plan[need];
    for (size_t i = 0; i < p->nplan[need]; i++) {
        const struct dsl_mlp_need *q = &plan[i];
        size_t l = q->layer, in = p->L.dims[l], out = p->L.dims[l + 1];
        if (need)
            sink->need(sink->ctx, q->off, q->len);
        const void *w;
        if (z3) {
            /* the next layer is fetched while this one computes; backward asks for the
             * last layer first */
            int last = (int)nl - 1;
            int next = l + 1 < nl ? (int)l + 1 : want_dz && last > 0 ? last : -1;
            w = sink->layer(sink->ctx, (int)l, next);
        } else {
            w = el(p, params, p->L.woff[l]);
        }
        MARK(FWD_MATMUL);
        /* output columns r0.. of z: z[:, r0:r0+rows]^T (rows x n) = W[r0:r0+rows, :]
         * (rows x in, i.e. column-major in x rows, transposed) x act^T */
        if (n && q->rows &&
            (r = gemm(m, "forward sgemm", CUBLAS_OP_T, CUBLAS_OP_N, q->rows, n, in,
                      el(p, w, q->r0 * in), in, p->act[l], in, el(p, p->act[l + 1], q->r0),
                      out)) < 0)
            return r;
        if (i + 1 < p->nplan[need] && plan[i + 1].layer == l)
            continue; /* the layer's last block is still to come */
        MARK(FWD_ELEM);
        if (p->half)
            CU(m, "launching dsl_k_bias_act",
               dsl_cuda_mlp_half_bias_act(p->stream, p->bf16, p->act[l + 1], el(p, w, in * out),
                                          n, out, l + 1 < nl));
        else
            CU(m, "launching dsl_k_bias_act",
               dsl_cuda_mlp_bias_act(p->stream, p->act[l + 1], el(p, w, in * out), n, out,
                                     l + 1 < nl));
        if (z3) /* the kernels that read it are queued: a later gather is ordered after */
            sink->unlayer(sink->ctx, (int)l);
    }
    MARK(HEAD);
    if (p->half)
        CU(m, "launching dsl_k_loss",
           dsl_cuda_mlp_half_loss(p->stream, p->bf16, p->act[nl], p->y, n, m->out_dim, p->loss,
                                  p->correct, want_dz ? p->dz : NULL, loss_scale));
    else
        CU(m, "launching dsl_k_loss",
           dsl_cuda_mlp_loss(p->stream, p->act[nl], p->y, n, m->out_dim, p->loss, p->correct,
                             want_dz ? p->dz : NULL, loss_scale));
    return 0;
}

/* the micro batch's loss sum and hits: left on the device in dev_stats when the sink
 * has one, else copied back (page-locked) after a wait and summed in sample order */
static int stats(struct dsl_model *m, size_t n, const struct dsl_grad_sink *sink,
                 struct dsl_model_stats *st)
{
    struct mlp_cuda *p = m->impl;
    st->loss_sum = 0.0;
    st->correct = 0;
    st->deferred = 0;
    if (sink && sink->dev_stats) {
        if (n)
            CU(m, "launching dsl_k_loss_stats",
               dsl_cuda_mlp_loss_stats(p->stream, p->loss, p->correct, n, sink->dev_stats,
                                       sink->dev_stats_stride));
        else
            CU(m, "cudaMemsetAsync", cudaMemsetAsync(sink->dev_stats, 0, sizeof(float),
                                                     p->stream));
        st->deferred = 1;
        return 0;
    }
    if (!n)
        return 0;
    CU(m, "copying the loss", cudaMemcpyAsync(p->hloss, p->loss, n * sizeof(float),
                                              cudaMemcpyDeviceToHost, p->stream));
    CU(m, "copying the hits", cudaMemcpyAsync(p->hcorrect, p->correct, n * sizeof(int32_t),
                                              cudaMemcpyDeviceToHost, p->stream));
    int r = dsl_model_cuda_wait(m, p->stream);
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        st->loss_sum += (double)p->hloss[i];
        st->correct += p->hcorrect[i] != 0;
    }
    return 0;
}

static int mlpc_forward_backward(struct dsl_model *m, const float *params, const float *x,
                                 const int32_t *y, size_t n, float loss_scale,
                                 const struct dsl_grad_sink *sink,
                                 struct dsl_model_stats *st)
{
    struct mlp_cuda *p = m->impl;
    int r;
    if ((r = upload(m, x, y, n)) < 0 ||
        (r = forward_loss(m, params, n, sink, 1, loss_scale)) < 0)
        return r;
    void *dz = p->dz, *dnext = p->dz2;
    size_t seg = 0;
    for (size_t li = p->L.nlayers; li-- > 0;) {
        size_t in = p->L.dims[li], out = p->L.dims[li + 1];
        /* stage 3: the layer's weight again, for its input gradient below (asked for
         * now, so that the layer below it is fetched meanwhile); the first layer's is
         * never needed */
        const void *w = !sink->layer ? el(p, params, p->L.woff[li])
                        : li > 0     ? sink->layer(sink->ctx, (int)li, li > 1 ? (int)li - 1 : -1)
                                     : NULL;
        /* bias: column sums in sample order */
        void *db = sink->dest(sink->ctx, seg);
        MARK(BWD_ELEM);
        if (p->half)
            CU(m, "launching dsl_k_bias_grad",
               dsl_cuda_mlp_half_bias_grad(p->stream, p->bf16, dz, n, out, db));
        else
            CU(m, "launching dsl_k_bias_grad",
               dsl_cuda_mlp_bias_grad(p->stream, dz, n, out, db));
        sink->done(sink->ctx, seg++);
        /* weight, in row blocks, last block first:
         * dW^T (in x rows) = act^T (in x n) x dz[:, r0:r0+rows] (n x rows) */
        while (seg < m->nsegs && m->segs[seg].layer == (int)li) {
            const struct dsl_model_seg *sg = &m->segs[seg];
            size_t r0 = (sg->off - p->L.woff[li]) / in, rows = sg->len / in;
            void *dw = sink->dest(sink->ctx, seg);
            MARK(BWD_MATMUL);
            if (n) {
                if ((r = gemm(m, "weight gradient sgemm", CUBLAS_OP_N, CUBLAS_OP_T, in, rows,
                              n, p->act[li], in, el(p, dz, r0), out, dw, in)) < 0)
                    return r;
            } else {
                CU(m, "cudaMemsetAsync",
                   cudaMemsetAsync(dw, 0, sg->len * p->esz, p->stream));
            }
            sink->done(sink->ctx, seg++);
        }
        if (li == 0)
            break;
        /* gradient of the layer input, through the ReLU of the layer below:
         * dnext^T (in x n) = W^T (in x out) x dz^T (out x n) */
        MARK(BWD_MATMUL);
        if (n && (r = gemm(m, "input gradient sgemm", CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, w,
                           in, dz, out, dnext, in)) < 0)
            return r;
        if (p->half)
            CU(m, "launching dsl_k_relu_mask",
               dsl_cuda_mlp_half_relu_mask(p->stream, p->bf16, dnext, p->act[li], n * in));
        else
            CU(m, "launching dsl_k_relu_mask",
               dsl_cuda_mlp_relu_mask(p->stream, dnext, p->act[li], n * in));
        if (sink->layer)
            sink->unlayer(sink->ctx, (int)li);
        void *t = dz;
        dz = dnext;
        dnext = t;
    }
    return stats(m, n, sink, st);
}

static int mlpc_evaluate(struct dsl_model *m, const float *params, const float *x,
                         const int32_t *y, size_t n, struct dsl_model_stats *st)
{
    int r;
    if ((r = upload(m, x, y, n)) < 0 || (r = forward_loss(m, params, n, NULL, 0, 1.0f)) < 0)
        return r;
    return stats(m, n, NULL, st);
}

/* forward only, each layer from src's layer() (ZeRO stage 3's evaluation) */
static int mlpc_evaluate_src(struct dsl_model *m, const struct dsl_grad_sink *src,
                             const float *x, const int32_t *y, size_t n,
                             struct dsl_model_stats *st)
{
    int r;
    if ((r = upload(m, x, y, n)) < 0 || (r = forward_loss(m, NULL, n, src, 0, 1.0f)) < 0)
        return r;
    return stats(m, n, NULL, st);
}

static void mlpc_release(struct dsl_model *m)
{
    struct mlp_cuda *p = m->impl;
    if (!p)
        return;
    for (size_t l = 0; l <= p->L.nlayers; l++)
        cudaFree(p->act[l]);
    cudaFree(p->y);
    cudaFree(p->x32);
    cudaFree(p->dz);
    cudaFree(p->dz2);
    cudaFree(p->loss);
    cudaFree(p->correct);
    if (p->hloss)
        cudaFreeHost(p->hloss);
    if (p->hcorrect)
        cudaFreeHost(p->hcorrect);
    for (int k = 0; k < 2; k++) {
        if (p->hx[k])
            cudaFreeHost(p->hx[k]);
        if (p->hy[k])
            cudaFreeHost(p->hy[k]);
        if (p->up[k])
            cudaEventDestroy(p->up[k]);
        free(p->plan[k]);
    }
    if (p->blas)
        cublasDestroy(p->blas);
    free(p);
    m->impl = NULL;
}

static const struct dsl_model_ops mlp_cuda_ops = {
    .name = "mlp",
    .init_params = mlpc_init_params,
    .forward_backward = mlpc_forward_backward,
    .evaluate = mlpc_evaluate,
    .evaluate_src = mlpc_evaluate_src,
    .release = mlpc_release,
};

int dsl_mlp_create_cuda(struct dsl_model *m, const struct dsl_model_spec *spec, char *err)
{
    struct dsl_mlp_layout lay;
    int r = dsl_mlp_layout_build(&lay, m, spec, err);
    if (r < 0)
        return r;
    if (spec->dtype != DSL_FLOAT32 && spec->dtype != DSL_FLOAT16 &&
        spec->dtype != DSL_BFLOAT16) {
        dsl_model_release(m);
        return dsl_seterr(err, DSL_ECONFIG, "model: unsupported element type %d",
                          (int)spec->dtype);
    }
    struct mlp_cuda *p = dsl_xcalloc(1, sizeof(*p));
    p->L = lay;
    p->half = spec->dtype != DSL_FLOAT32;
    p->bf16 = spec->dtype == DSL_BFLOAT16;
    p->esz = p->half ? 2 : sizeof(float);
    m->ops = &mlp_cuda_ops;
    m->impl = p;
    m->on_device = 1;
    for (int k = 0; k < 2; k++) {
        p->plan[k] = dsl_xcalloc(m->nsegs + lay.nlayers, sizeof(*p->plan[k]));
        p->nplan[k] = dsl_mlp_layout_need_plan(&lay, m, k, p->plan[k]);
    }
    m->dtype = spec->dtype;

    p->stream = (cudaStream_t)spec->stream;
    m->stream = spec->stream;
    cublasStatus_t bs = cublasCreate(&p->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        p->blas = NULL;
        dsl_model_release(m);
        return dsl_seterr(err, bs == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : DSL_EREMOTE,
                          "cublas: cannot create a handle: %s", cublasGetStatusString(bs));
    }
    if ((bs = cublasSetStream(p->blas, p->stream)) != CUBLAS_STATUS_SUCCESS) {
        dsl_model_release(m);
        return dsl_seterr(err, DSL_EREMOTE, "cublas: cannot set the stream: %s",
                          cublasGetStatusString(bs));
    }
    /* plain fp32 sgemm (no TF32): the CPU model is the reference. 16-bit GEMMs use
     * tensor cores and accumulate in fp32 (CUBLAS_COMPUTE_32F), and the disallow flag
     * keeps cuBLAS from reducing split-K partial sums in 16 bits, which the default
     * math mode allows: the documented fp32 accumulation holds for the whole sum. */
    if ((bs = cublasSetMathMode(p->blas, CUBLAS_DEFAULT_MATH |
                                             CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) !=
        CUBLAS_STATUS_SUCCESS) {
        dsl_model_release(m);
        return dsl_seterr(err, DSL_EREMOTE, "cublas: cannot set the math mode: %s",
                          cublasGetStatusString(bs));
    }
    /* every GEMM size must fit cuBLAS's int: refuse the model now, not mid-step */
    {
        int dim;
        for (size_t l = 0; l <= lay.nlayers; l++)
            if ((r = dsl_gemm_dim(lay.dims[l], "layer width", &dim, err)) < 0) {
                dsl_model_release(m);
                return r;
            }
        if ((r = dsl_gemm_dim(spec->max_batch, "batch", &dim, err)) < 0) {
            dsl_model_release(m);
            return r;
        }
    }

    size_t B = spec->max_batch, total = 0;
    int fail = 0;
    for (size_t l = 0; l <= lay.nlayers; l++)
        p->act[l] = dsl_model_cuda_alloc(B * lay.dims[l] * p->esz, &total, &fail);
    p->y = dsl_model_cuda_alloc(B * sizeof(int32_t), &total, &fail);
    if (p->half)
        p->x32 = dsl_model_cuda_alloc(B * lay.dims[0] * sizeof(float), &total, &fail);
    p->dz = dsl_model_cuda_alloc(B * lay.maxdim * p->esz, &total, &fail);
    p->dz2 = dsl_model_cuda_alloc(B * lay.maxdim * p->esz, &total, &fail);
    p->loss = dsl_model_cuda_alloc(B * sizeof(float), &total, &fail);
    p->correct = dsl_model_cuda_alloc(B * sizeof(int32_t), &total, &fail);
    if (cudaMallocHost((void **)&p->hloss, (B ? B : 1) * sizeof(float)) != cudaSuccess)
        p->hloss = NULL, fail = 1;
    if (cudaMallocHost((void **)&p->hcorrect, (B ? B : 1) * sizeof(int32_t)) != cudaSuccess)
        p->hcorrect = NULL, fail = 1;
    for (int k = 0; k < 2; k++) {
        total += B * (lay.dims[0] * sizeof(float) + sizeof(int32_t));
        if (cudaMallocHost((void **)&p->hx[k], (B ? B : 1) * lay.dims[0] * sizeof(float)) !=
            cudaSuccess)
            p->hx[k] = NULL, fail = 1;
        if (cudaMallocHost((void **)&p->hy[k], (B ? B : 1) * sizeof(int32_t)) != cudaSuccess)
            p->hy[k] = NULL, fail = 1;
        if (cudaEventCreateWithFlags(&p->up[k], cudaEventDisableTiming) != cudaSuccess)
            p->up[k] = NULL, fail = 1;
    }
    if (fail) {
        (void)cudaGetLastError();
        dsl_model_release(m);
        return dsl_seterr(err, -ENOMEM,
                          "cannot allocate %zu bytes of GPU workspace for batch %zu", total,
                          spec->max_batch);
    }
    return 0;
}
