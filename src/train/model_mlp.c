/*
 * The MLP of dstrain on the CPU: Linear layers with ReLU between them and softmax
 * cross-entropy at the end, over OpenBLAS sgemm.
 *
 * Theory of operation. The flat parameter buffer holds, per layer l, the weight W_l
 * (out x in, row-major as in PyTorch's nn.Linear) followed by the bias b_l. Forward
 * keeps every layer's output activation (after ReLU) in per-layer workspace sized for
 * max_batch rows. Backward walks the layers from the last to the first; for layer l it
 * first writes the bias gradient, then the weight gradient in row blocks of at most
 * seg_max elements (last block first), handing each finished segment to the sink, and
 * only then computes the gradient of the layer's input, so a reduction of the segments
 * just handed over can run concurrently with that sgemm.
 *
 * Gradients are of the summed loss. The bias gradient is a column sum in sample
 * order; everything else is sgemm with shapes fixed by (micro batch, dims, seg_max),
 * so a given micro batch yields the same bits whatever the world size or ZeRO stage.
 *
 * Not thread-safe: one model object per thread of computation (the workspace is
 * shared by forward and backward).
 */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/error.h"
#include "dslaunch/model.h"
#include "dslaunch/xalloc.h"
#include "common/banned.h"

struct mlp {
    size_t nlayers;
    size_t dims[DSL_MODEL_MAX_LAYERS + 2];
    size_t woff[DSL_MODEL_MAX_LAYERS + 1]; /* flat offset of W_l; b_l follows */
    float *act[DSL_MODEL_MAX_LAYERS + 2];  /* act[l+1]: output of layer l (act[0] = x) */
    float *dz, *dz2;                       /* max_batch x maxdim each */
    int32_t *argmax;
};

static int to_int(size_t v)
{
    return (int)v;
}

/* splitmix64: small, seedable, the same on every platform */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float rng_uniform(uint64_t *s) /* [0, 1) with 24 random bits */
{
    return (float)(rng_next(s) >> 40) * (1.0f / 16777216.0f);
}

static void mlp_init_params(struct dsl_model *m, float *params, uint64_t seed)
{
    struct mlp *p = m->impl;
    for (size_t l = 0; l < p->nlayers; l++) {
        /* nn.Linear's default: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias; one
         * stream per layer so that changing one layer's width keeps the others */
        uint64_t s = seed * 1000003u + l + 1;
        float bound = 1.0f / sqrtf((float)p->dims[l]);
        size_t n = p->dims[l + 1] * (p->dims[l] + 1);
        float *w = params + p->woff[l];
        for (size_t i = 0; i < n; i++)
            w[i] = (2.0f * rng_uniform(&s) - 1.0f) * bound;
    }
}

/* act[l+1] = relu?(act[l] W_l^T + b_l) for n rows */
static void mlp_forward(struct mlp *p, const float *params, const float *x, size_t n,
                        const struct dsl_grad_sink *sink)
{
    p->act[0] = (float *)(uintptr_t)x; /* read only; the cast only drops const */
    for (size_t l = 0; l < p->nlayers; l++) {
        size_t in = p->dims[l], out = p->dims[l + 1];
        if (sink && sink->need)
            sink->need(sink->ctx, p->woff[l], out * (in + 1));
        const float *w = params + p->woff[l];
        const float *b = w + in * out;
        float *z = p->act[l + 1];
        for (size_t i = 0; i < n; i++)
            memcpy(z + i * out, b, out * sizeof(float));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, to_int(n), to_int(out),
                    to_int(in), 1.0f, p->act[l], to_int(in), w, to_int(in), 1.0f, z,
                    to_int(out));
        if (l + 1 < p->nlayers)
            for (size_t i = 0; i < n * out; i++)
                z[i] = z[i] > 0.0f ? z[i] : 0.0f;
    }
}

/* Softmax cross-entropy of the logits in act[nlayers]; if dz, the gradient of the
 * summed loss w.r.t. the logits (softmax - onehot) goes there. */
static void mlp_loss(struct mlp *p, const int32_t *y, size_t n, float *dz,
                     struct dsl_model_stats *st)
{
    size_t c = p->dims[p->nlayers];
    const float *logits = p->act[p->nlayers];
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
                                const int32_t *y, size_t n,
                                const struct dsl_grad_sink *sink,
                                struct dsl_model_stats *st)
{
    struct mlp *p = m->impl;
    int r = mlp_check_labels(m, y, n);
    if (r < 0)
        return r;
    mlp_forward(p, params, x, n, sink);
    float *dz = p->dz, *dnext = p->dz2;
    mlp_loss(p, y, n, dz, st);

    size_t seg = 0;
    for (size_t li = p->nlayers; li-- > 0;) {
        size_t in = p->dims[li], out = p->dims[li + 1];
        const float *w = params + p->woff[li];
        /* bias: column sums in sample order */
        const struct dsl_model_seg *sg = &m->segs[seg];
        float *db = sink->dest(sink->ctx, seg);
        for (size_t k = 0; k < out; k++)
            db[k] = 0.0f;
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < out; k++)
                db[k] += dz[i * out + k];
        sink->done(sink->ctx, seg++);
        /* weight, in row blocks, last block first */
        while (seg < m->nsegs && m->segs[seg].layer == (int)li) {
            sg = &m->segs[seg];
            size_t r0 = (sg->off - p->woff[li]) / in, rows = sg->len / in;
            float *dw = sink->dest(sink->ctx, seg);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, to_int(rows), to_int(in),
                        to_int(n), 1.0f, dz + r0, to_int(out), p->act[li], to_int(in),
                        0.0f, dw, to_int(in));
            sink->done(sink->ctx, seg++);
        }
        if (li == 0)
            break;
        /* gradient of the layer input, through the ReLU of the layer below */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, to_int(n), to_int(in),
                    to_int(out), 1.0f, dz, to_int(out), w, to_int(in), 0.0f, dnext,
                    to_int(in));
        const float *a = p->act[li];
        for (size_t i = 0; i < n * in; i++)
            if (a[i] <= 0.0f)
                dnext[i] = 0.0f;
        float *t = dz;
        dz = dnext;
        dnext = t;
    }
    return 0;
}

static int mlp_evaluate(struct dsl_model *m, const float *params, const float *x,
                        const int32_t *y, size_t n, struct dsl_model_stats *st)
{
    struct mlp *p = m->impl;
    int r = mlp_check_labels(m, y, n);
    if (r < 0)
        return r;
    mlp_forward(p, params, x, n, NULL);
    mlp_loss(p, y, n, NULL, st);
    return 0;
}

static void mlp_release(struct dsl_model *m)
{
    struct mlp *p = m->impl;
    if (!p)
        return;
    for (size_t l = 1; l <= p->nlayers; l++)
        free(p->act[l]);
    free(p->dz);
    free(p->dz2);
    free(p->argmax);
    free(p);
    m->impl = NULL;
}

static const struct dsl_model_ops mlp_ops = {
    .name = "mlp",
    .init_params = mlp_init_params,
    .forward_backward = mlp_forward_backward,
    .evaluate = mlp_evaluate,
    .release = mlp_release,
};

static void *big_alloc(size_t n, int *fail)
{
    void *v = malloc(n ? n : 1);
    if (!v)
        *fail = 1;
    return v;
}

int dsl_model_create(struct dsl_model *m, const struct dsl_model_spec *spec, char *err)
{
    memset(m, 0, sizeof(*m));
    if (!spec->type || strcmp(spec->type, "mlp") != 0)
        return dsl_seterr(err, DSL_ECONFIG, "unknown model type '%s' (known: mlp)",
                          spec->type ? spec->type : "");
    if (spec->nhidden + 1 > DSL_MODEL_MAX_LAYERS)
        return dsl_seterr(err, DSL_ECONFIG, "model has %zu hidden layers, at most %d",
                          spec->nhidden, DSL_MODEL_MAX_LAYERS - 1);
    if (!spec->in_dim || !spec->out_dim || !spec->max_batch)
        return dsl_seterr(err, DSL_ECONFIG, "model needs input size, classes and batch");
    struct mlp *p = dsl_xcalloc(1, sizeof(*p));
    p->nlayers = spec->nhidden + 1;
    p->dims[0] = spec->in_dim;
    for (size_t i = 0; i < spec->nhidden; i++) {
        if (!spec->hidden[i]) {
            free(p);
            return dsl_seterr(err, DSL_ECONFIG, "model hidden size %zu is 0", i);
        }
        p->dims[i + 1] = spec->hidden[i];
    }
    p->dims[p->nlayers] = spec->out_dim;

    size_t off = 0, maxdim = 0, nsegs = 0;
    for (size_t l = 0; l < p->nlayers; l++) {
        size_t in = p->dims[l], out = p->dims[l + 1];
        p->woff[l] = off;
        off += out * (in + 1);
        maxdim = in > maxdim ? in : maxdim;
        maxdim = out > maxdim ? out : maxdim;
        m->flops_per_sample += 6 * in * out;
    }
    m->ops = &mlp_ops;
    m->nparams = off;
    m->in_dim = spec->in_dim;
    m->out_dim = spec->out_dim;
    m->max_batch = spec->max_batch;
    m->impl = p;

    /* segments in backward order: per layer (last first) the bias, then weight row
     * blocks of at most seg_max elements, last block first */
    m->segs = dsl_xcalloc(1, sizeof(*m->segs));
    for (size_t li = p->nlayers; li-- > 0;) {
        size_t in = p->dims[li], out = p->dims[li + 1];
        size_t rows = spec->seg_max ? spec->seg_max / in : out;
        rows = rows < 1 ? 1 : rows > out ? out : rows;
        size_t nblk = (out + rows - 1) / rows;
        m->segs = dsl_xreallocarray(m->segs, nsegs + 1 + nblk, sizeof(*m->segs));
        m->segs[nsegs++] = (struct dsl_model_seg){p->woff[li] + out * in, out, (int)li};
        for (size_t b = nblk; b-- > 0;) {
            size_t r0 = b * rows, r1 = r0 + rows > out ? out : r0 + rows;
            m->segs[nsegs++] =
                (struct dsl_model_seg){p->woff[li] + r0 * in, (r1 - r0) * in, (int)li};
        }
    }
    m->nsegs = nsegs;

    int fail = 0;
    for (size_t l = 1; l <= p->nlayers; l++)
        p->act[l] = big_alloc(spec->max_batch * p->dims[l] * sizeof(float), &fail);
    p->dz = big_alloc(spec->max_batch * maxdim * sizeof(float), &fail);
    p->dz2 = big_alloc(spec->max_batch * maxdim * sizeof(float), &fail);
    p->argmax = big_alloc(spec->max_batch * sizeof(int32_t), &fail);
    if (fail) {
        dsl_model_release(m);
        return dsl_seterr(err, -ENOMEM, "cannot allocate activations for batch %zu",
                          spec->max_batch);
    }
    return 0;
}

void dsl_model_release(struct dsl_model *m)
{
    if (m->ops && m->ops->release)
        m->ops->release(m);
    free(m->segs);
    memset(m, 0, sizeof(*m));
}

size_t dsl_model_tensors(const struct dsl_model_spec *spec, char names[][48], size_t *off,
                         size_t *len, size_t max)
{
    size_t dims[DSL_MODEL_MAX_LAYERS + 2], nl = spec->nhidden + 1, k = 0, o = 0;
    if (nl > DSL_MODEL_MAX_LAYERS)
        return 0;
    dims[0] = spec->in_dim;
    for (size_t i = 0; i < spec->nhidden; i++)
        dims[i + 1] = spec->hidden[i];
    dims[nl] = spec->out_dim;
    for (size_t l = 0; l < nl && k + 2 <= max; l++) {
        /* PyTorch's nn.Sequential(Linear, ReLU, ...) names: layers 0, 2, 4, ... */
        snprintf(names[k], 48, "%zu.weight", 2 * l);
        off[k] = o;
        len[k] = dims[l + 1] * dims[l];
        o += len[k++];
        snprintf(names[k], 48, "%zu.bias", 2 * l);
        off[k] = o;
        len[k] = dims[l + 1];
        o += len[k++];
    }
    return k;
}

int dsl_blas_set_threads(int n)
{
    if (n < 1)
        n = 1;
    openblas_set_num_threads(n);
    return n;
}
