/*
 * The MLP of dstrain on the CPU: Linear layers with ReLU between them and softmax
 * cross-entropy at the end, over OpenBLAS sgemm. The flat layout, the segment list and
 * the initial values are model_mlp_layout.c's (shared with the CUDA model,
 * model_mlp_cuda.c).
 *
 * Theory of operation. Forward keeps every layer's output activation (after ReLU) in
 * per-layer workspace sized for max_batch rows; with the trainer's sink it computes
 * the first layer's output columns segment by segment, asking need() for each weight
 * block first (mlp_forward), and it hands the loss to the sink before backward starts.
 * At ZeRO stage 3 the sink's layer() hands it each layer whole instead (forward: every
 * layer in order; backward: from the last down to the second, for the input
 * gradient's product), and it gives each back with unlayer() as soon as that product
 * is done.
 * Backward walks the layers from the
 * last to the first; for layer l it first writes the bias gradient, then the weight
 * gradient in row blocks of at most seg_max elements (last block first), handing each
 * finished segment to the sink, and only then computes the gradient of the layer's
 * input, so a reduction of the segments just handed over can run concurrently with
 * that sgemm.
 *
 * Gradients are of the summed loss, times the loss scale the trainer passes (fp16
 * loss scaling: dz is multiplied by it right after the softmax, so everything after
 * is scaled by it too). The bias gradient is a column sum in sample
 * order; everything else is sgemm with shapes fixed by (micro batch, dims, seg_max),
 * so a given micro batch yields the same bits whatever the world size or ZeRO stage.
 * With more than one thread (dsl_blas_set_threads) each product is cut into row or
 * column blocks of its output, one single-threaded sgemm per block on the pool's
 * threads: every element is still the same dot product in the same order, so the
 * thread count changes no bits either.
 *
 * 16-bit parameters (spec.dtype fp16 or bf16; dstrain.cpu_half): 16-bit storage,
 * fp32 arithmetic. Forward widens each layer's 16-bit parameters into an fp32 copy
 * (w32, P floats) right after the sink's need() for each of its segments (stages 1/2
 * all-gather bucket by bucket), and everything then runs exactly as in fp32 on that copy; backward
 * writes each gradient segment into an fp32 scratch (g32, one segment) and rounds it
 * to nearest even into the sink's 16-bit destination before done(). There is no
 * half-precision BLAS on the CPU, so nothing is gained in compute; what is gained is
 * half the bytes over the comm. The fp32 model allocates neither buffer and runs
 * the same code on the caller's pointers.
 *
 * Not thread-safe: one model object per thread of computation (the workspace is
 * shared by forward and backward).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/device/cpugemm.h"
#include "dslaunch/common/error.h"
#include "dslaunch/model/model.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/halfvec.h"
#include "model_cpu_scratch.h"
#include "model_mlp_impl.h"
#include "dslaunch/common/banned.h"

struct mlp {
    struct dsl_mlp_layout L;
    float *act[DSL_MODEL_MAX_LAYERS + 2];  /* act[l+1]: output of layer l (act[0] = x) */
    float *dz, *dz2;                       /* max_batch x maxdim each */
    int32_t *argmax;
    enum dsl_dtype dtype; /* of params and gradients: fp32, or 16-bit storage */
    struct dsl_cpu_scratch s; /* 16-bit parameters' fp32 copies, bf16 products */
};

/* dst[i] = float(src[i]) for the 16-bit elements src[off, off + n) */
static void mlp_widen(const struct mlp *p, float *dst, const float *src, size_t off, size_t n)
{
    dsl_hv_widen(p->dtype == DSL_BFLOAT16, dst, (const uint16_t *)(const void *)src + off, n);
}

/* the 16-bit destination dst (n elements) = half(src[i]) */
static void mlp_narrow(const struct mlp *p, float *dst, const float *src, size_t n)
{
    dsl_hv_narrow(p->dtype == DSL_BFLOAT16, (uint16_t *)(void *)dst, src, n);
}

static int mlp_init_params(struct dsl_model *m, float *params, uint64_t seed)
{
    struct mlp *p = m->impl;
    dsl_mlp_layout_init(&p->L, params, seed);
    return 0;
}

/* act[l+1][:, r0, r0 + rows) = relu?(act[l] W_l[r0, r0 + rows)^T + b_l[r0, r0 + rows)):
 * output columns r0.. of layer l from its weight rows r0.. (w: the layer's fp32 weight),
 * as that block of the layer's whole product (cpugemm.h) */
static struct dsl_gemm mlp_forward_gemm(const struct mlp *p, size_t l, const float *w,
                                        size_t n, size_t r0, size_t rows)
{
    size_t in = p->L.dims[l], out = p->L.dims[l + 1];
    return (struct dsl_gemm){.ta = CblasNoTrans, .tb = CblasTrans, .m = n, .n = rows,
                             .k = in, .a = p->act[l], .lda = in, .b = w + r0 * in,
                             .ldb = in, .alpha = 1.0f, .beta = 1.0f,
                             .c = p->act[l + 1] + r0, .ldc = out, .full_n = out,
                             .col0 = r0, .by_cols = l == 0, .bias = w + in * out + r0,
                             .relu = l + 1 < p->L.nlayers, .bf16 = p->s.b16};
}

static void mlp_forward_cols(struct mlp *p, size_t l, const float *w, size_t n, size_t r0,
                             size_t rows)
{
    struct dsl_gemm g = mlp_forward_gemm(p, l, w, n, r0, rows);
    dsl_gemm_run(&g);
}

/* the column tile of layer l's forward product at batch n (the forward's first layer
 * computes whole tiles as their weight rows come in) */
static size_t mlp_forward_tile(const struct mlp *p, size_t l, const float *w, size_t n)
{
    struct dsl_gemm g = mlp_forward_gemm(p, l, w, n, 0, p->L.dims[l + 1]);
    size_t tr, tc;
    dsl_gemm_tiles(&g, &tr, &tc);
    return tc;
}

/* Ask the sink for params[off, off + len) and, for 16-bit parameters, widen them */
static void mlp_need(struct mlp *p, const float *params, const struct dsl_grad_sink *sink,
                     size_t off, size_t len)
{
    if (sink && sink->need)
        sink->need(sink->ctx, off, len);
    if (p->s.w32)
        mlp_widen(p, p->s.w32 + off, params, off, len);
}

/* ZeRO stage 3: layer l's fp32 parameters (its weight, then its bias) from the sink's
 * layer() (16-bit ones widened into w32 at the layer's place); release with
 * sink->unlayer */
static const float *mlp_layer(struct mlp *p, const struct dsl_grad_sink *src, size_t l,
                              int next)
{
    const float *lw = src->layer(src->ctx, (int)l, next);
    if (!p->s.w32)
        return lw;
    size_t len = p->L.dims[l + 1] * (p->L.dims[l] + 1);
    mlp_widen(p, p->s.w32 + p->L.woff[l], lw, 0, len);
    return p->s.w32 + p->L.woff[l];
}

/* act[l+1] = relu?(act[l] W_l^T + b_l) for n rows; returns the fp32 parameters it
 * used (params itself, or the widened copy of 16-bit ones). With a sink that has
 * need(), the first layer goes segment by segment in backward order (the bias, then
 * the weight's row blocks), each block's output columns as soon as need() has its
 * rows: its gradient is the last to leave backward, so a trainer still reducing or
 * updating it (or, at stages 1/2, gathering it) can let forward start on the blocks
 * that are in. Every output element is the same K-long dot product either way, so the
 * cut changes no bit. The later layers' parameters are in by the time forward reaches
 * them, and one product per layer is cheaper than one per block (each call packs the
 * activations again), so they go whole. */
static const float *mlp_forward(const struct dsl_model *m, struct mlp *p,
                                const float *params, const float *x, size_t n,
                                const struct dsl_grad_sink *sink, int backward)
{
    const float *wp = p->s.w32 ? p->s.w32 : params;
    p->act[0] = (float *)(uintptr_t)x; /* read only; the cast only drops const */
    for (size_t l = 0; l < p->L.nlayers; l++) {
        size_t in = p->L.dims[l], out = p->L.dims[l + 1], woff = p->L.woff[l];
        if (sink && sink->layer) {
            /* stage 3: the layer whole, then the next one; backward asks for the last
             * layer first and never for the first (its input gradient is not needed) */
            int last = (int)p->L.nlayers - 1;
            int next = l + 1 < p->L.nlayers ? (int)l + 1 : backward && last > 0 ? last : -1;
            mlp_forward_cols(p, l, mlp_layer(p, sink, l, next), n, 0, out);
            sink->unlayer(sink->ctx, (int)l);
            continue;
        }
        if (!sink || !sink->need || l > 0) {
            mlp_need(p, params, sink, woff, out * (in + 1));
            mlp_forward_cols(p, l, wp + woff, n, 0, out);
            continue;
        }
        mlp_need(p, params, sink, woff + out * in, out); /* the bias, before any block */
        /* the blocks come last first: the columns from each block's first whole tile
         * up to what is done, so that no tile is computed twice or in part (the bf16
         * path's blocks are its own: it takes each block as it comes) */
        size_t tc = p->s.b16 ? 1 : mlp_forward_tile(p, l, wp + woff, n), done = out;
        for (size_t i = 0; i < m->nsegs; i++) {
            const struct dsl_model_seg *sg = &m->segs[i];
            if (sg->layer != (int)l || sg->off >= woff + out * in)
                continue;
            mlp_need(p, params, sink, sg->off, sg->len);
            size_t r0 = (sg->off - woff) / in, from = (r0 + tc - 1) / tc * tc;
            if (from < done) {
                mlp_forward_cols(p, l, wp + woff, n, from, done - from);
                done = from;
            }
        }
        if (done > 0) /* blocks not last first: the rest, now that all are in */
            mlp_forward_cols(p, l, wp + woff, n, 0, done);
    }
    return wp;
}

/* Softmax cross-entropy of the logits in act[nlayers]; if dz, the gradient of
 * scale x the summed loss w.r.t. the logits ((softmax - onehot) x scale) goes there. */
static void mlp_loss(struct mlp *p, const int32_t *y, size_t n, float *dz, float scale,
                     struct dsl_model_stats *st)
{
    size_t c = p->L.dims[p->L.nlayers];
    const float *logits = p->act[p->L.nlayers];
    st->loss_sum = 0.0;
    st->correct = 0;
    for (size_t i = 0; i < n; i++) {
        const float *zi = logits + i * c;
        size_t am = 0;
        for (size_t k = 1; k < c; k++)
            if (zi[k] > zi[am])
                am = k;
        float mx = zi[am], sum = 0.0f;
        for (size_t k = 0; k < c; k++)
            sum += expf(zi[k] - mx);
        float lse = mx + logf(sum);
        size_t yi = (size_t)y[i];
        st->loss_sum += (double)(lse - zi[yi]);
        st->correct += am == yi;
        if (dz) {
            float inv = 1.0f / sum;
            for (size_t k = 0; k < c; k++)
                dz[i * c + k] = expf(zi[k] - mx) * inv - (k == yi ? 1.0f : 0.0f);
            /* the loss scale (model.h); x 1 would change nothing, so skip it */
            if (scale != 1.0f)
                for (size_t k = 0; k < c; k++)
                    dz[i * c + k] *= scale;
        }
    }
}

static int mlp_check_labels(const struct dsl_model *m, const int32_t *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (y[i] < 0 || (size_t)y[i] >= m->out_dim)
            return DSL_EDATA;
    return n <= m->max_batch ? 0 : DSL_EDATA;
}

static int mlp_forward_backward(struct dsl_model *m, const float *params, const float *x,
                                const int32_t *y, size_t n, float loss_scale,
                                const struct dsl_grad_sink *sink,
                                struct dsl_model_stats *st)
{
    struct mlp *p = m->impl;
    int r = mlp_check_labels(m, y, n);
    if (r < 0)
        return r;
    params = mlp_forward(m, p, params, x, n, sink, 1); /* fp32 from here on */
    float *dz = p->dz, *dnext = p->dz2;
    mlp_loss(p, y, n, dz, loss_scale, st);
    if (sink->loss)
        sink->loss(sink->ctx, st);

    size_t seg = 0;
    for (size_t li = p->L.nlayers; li-- > 0;) {
        size_t in = p->L.dims[li], out = p->L.dims[li + 1];
        /* stage 3: the layer's weight again, for its input gradient below (asked for
         * now, so that the layer below it can be fetched meanwhile) */
        const float *w = !sink->layer ? params + p->L.woff[li]
                         : li > 0     ? mlp_layer(p, sink, li, li > 1 ? (int)li - 1 : -1)
                                      : NULL;
        /* bias: column sums in sample order */
        const struct dsl_model_seg *sg = &m->segs[seg];
        float *hdst = sink->dest(sink->ctx, seg);
        float *db = p->s.g32 ? p->s.g32 : hdst;
        for (size_t k = 0; k < out; k++)
            db[k] = 0.0f;
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < out; k++)
                db[k] += dz[i * out + k];
        if (p->s.g32)
            mlp_narrow(p, hdst, db, out);
        sink->done(sink->ctx, seg++);
        /* weight, in row blocks, last block first */
        dsl_gemm_carry_reset(&p->s.carry);
        while (seg < m->nsegs && m->segs[seg].layer == (int)li) {
            sg = &m->segs[seg];
            size_t r0 = (sg->off - p->L.woff[li]) / in, rows = sg->len / in;
            hdst = sink->dest(sink->ctx, seg);
            float *dw = p->s.g32 ? p->s.g32 : hdst;
            /* the layer's whole product, handed over rows r0.. (cpugemm.h): the
             * same bits whatever the segment size */
            struct dsl_gemm g = {.ta = CblasTrans, .tb = CblasNoTrans, .m = out, .n = in,
                                 .k = n, .a = dz, .lda = out, .b = p->act[li], .ldb = in,
                                 .alpha = 1.0f, .beta = 0.0f, .by_rows = 1, .bf16 = p->s.b16};
            dsl_gemm_rows(&g, r0, rows, dw, in, &p->s.carry);
            if (p->s.g32)
                mlp_narrow(p, hdst, dw, sg->len);
            sink->done(sink->ctx, seg++);
        }
        if (li == 0)
            break;
        /* gradient of the layer input, through the ReLU of the layer below */
        struct dsl_gemm g = {.ta = CblasNoTrans, .tb = CblasNoTrans, .m = n, .n = in,
                             .k = out, .a = dz, .lda = out, .b = w, .ldb = in, .alpha = 1.0f,
                             .beta = 0.0f, .c = dnext, .ldc = in, .mask = p->act[li],
                             .bf16 = p->s.b16};
        dsl_gemm_run(&g);
        if (sink->layer)
            sink->unlayer(sink->ctx, (int)li);
        float *t = dz;
        dz = dnext;
        dnext = t;
    }
    return 0;
}

/* evaluation from params, or (params NULL) from the layers src hands out */
static int mlp_eval(struct dsl_model *m, const float *params, const struct dsl_grad_sink *src,
                    const float *x, const int32_t *y, size_t n, struct dsl_model_stats *st)
{
    struct mlp *p = m->impl;
    int r = mlp_check_labels(m, y, n);
    if (r < 0)
        return r;
    mlp_forward(m, p, params, x, n, src, 0);
    mlp_loss(p, y, n, NULL, 1.0f, st);
    return 0;
}

static int mlp_evaluate(struct dsl_model *m, const float *params, const float *x,
                        const int32_t *y, size_t n, struct dsl_model_stats *st)
{
    return mlp_eval(m, params, NULL, x, y, n, st);
}

static int mlp_evaluate_src(struct dsl_model *m, const struct dsl_grad_sink *src,
                            const float *x, const int32_t *y, size_t n,
                            struct dsl_model_stats *st)
{
    return mlp_eval(m, NULL, src, x, y, n, st);
}

static void mlp_release(struct dsl_model *m)
{
    struct mlp *p = m->impl;
    if (!p)
        return;
    for (size_t l = 1; l <= p->L.nlayers; l++)
        free(p->act[l]);
    free(p->dz);
    free(p->dz2);
    free(p->argmax);
    dsl_cpu_scratch_release(&p->s);
    free(p);
    m->impl = NULL;
}

static const struct dsl_model_ops mlp_ops = {
    .name = "mlp",
    .init_params = mlp_init_params,
    .forward_backward = mlp_forward_backward,
    .evaluate = mlp_evaluate,
    .evaluate_src = mlp_evaluate_src,
    .release = mlp_release,
};

static void *big_alloc(size_t n, int *fail)
{
    void *v = malloc(n ? n : 1);
    if (!v)
        *fail = 1;
    return v;
}

int dsl_mlp_create(struct dsl_model *m, const struct dsl_model_spec *spec, char *err)
{
    struct dsl_mlp_layout lay;
    if (spec->dtype != DSL_FLOAT32 && spec->dtype != DSL_FLOAT16 &&
        spec->dtype != DSL_BFLOAT16)
        return dsl_seterr(err, DSL_ECONFIG, "unsupported model dtype %d", (int)spec->dtype);
    int r = dsl_mlp_layout_build(&lay, m, spec, err);
    if (r < 0)
        return r;
    struct mlp *p = dsl_xcalloc(1, sizeof(*p));
    p->L = lay;
    m->ops = &mlp_ops;
    m->impl = p;

    int fail = 0;
    for (size_t l = 1; l <= lay.nlayers; l++)
        p->act[l] = big_alloc(spec->max_batch * lay.dims[l] * sizeof(float), &fail);
    p->dz = big_alloc(spec->max_batch * lay.maxdim * sizeof(float), &fail);
    p->dz2 = big_alloc(spec->max_batch * lay.maxdim * sizeof(float), &fail);
    p->argmax = big_alloc(spec->max_batch * sizeof(int32_t), &fail);
    p->dtype = spec->dtype;
    m->dtype = spec->dtype;
    if (dsl_cpu_scratch_init(&p->s, m, spec) < 0)
        fail = 1;
    if (fail) {
        mlp_release(m);
        free(m->segs);
        memset(m, 0, sizeof(*m));
        return dsl_seterr(err, -ENOMEM, "cannot allocate activations for batch %zu",
                          spec->max_batch);
    }
    return 0;
}
