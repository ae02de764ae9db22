/*
 * The MLP's flat layout, common to its CPU and CUDA implementations: spec checks,
 * parameter offsets, the gradient segment list, the initial values and the tensor
 * names of checkpoints.
 *
 * Theory of operation. The flat parameter buffer holds, per layer l, the weight W_l
 * (out x in, row-major as in PyTorch's nn.Linear) followed by the bias b_l. Backward
 * hands gradients over in segments (model.h), listed here once in backward order: per
 * layer, last first, the bias, then the weight in row blocks of at most seg_max
 * elements, last block first. Both implementations walk this list, so the trainer's
 * buckets, shards and reductions are the same whichever computes the gradient.
 * Initial values come from a splitmix64 stream per layer on the host; the CUDA model
 * copies them to the device, so both start from the same bits. Forward's need() calls
 * are planned here too (dsl_mlp_layout_need_plan), for the CUDA model to follow the
 * order the CPU model keeps.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/device/cpugemm.h"
#include "model_mlp_impl.h"
#include "dslaunch/common/banned.h"

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

void dsl_mlp_layout_init(const struct dsl_mlp_layout *lay, float *params, uint64_t seed)
{
    for (size_t l = 0; l < lay->nlayers; l++) {
        /* nn.Linear's default: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias; one
         * stream per layer so that changing one layer's width keeps the others */
        uint64_t s = seed * 1000003u + l + 1;
        float bound = 1.0f / sqrtf((float)lay->dims[l]);
        size_t n = lay->dims[l + 1] * (lay->dims[l] + 1);
        float *w = params + lay->woff[l];
        for (size_t i = 0; i < n; i++)
            w[i] = (2.0f * rng_uniform(&s) - 1.0f) * bound;
    }
}

int dsl_mlp_layout_build(struct dsl_mlp_layout *lay, struct dsl_model *m,
                         const struct dsl_model_spec *spec, char *err)
{
    memset(m, 0, sizeof(*m));
    memset(lay, 0, sizeof(*lay));
    if (!spec->type || strcmp(spec->type, "mlp") != 0)
        return dsl_seterr(err, DSL_ECONFIG, "unknown model type '%s' (known: mlp)",
                          spec->type ? spec->type : "");
    if (spec->nhidden + 1 > DSL_MODEL_MAX_LAYERS)
        return dsl_seterr(err, DSL_ECONFIG, "model has %zu hidden layers, at most %d",
                          spec->nhidden, DSL_MODEL_MAX_LAYERS - 1);
    if (!spec->in_dim || !spec->out_dim || !spec->max_batch)
        return dsl_seterr(err, DSL_ECONFIG, "model needs input size, classes and batch");
    lay->nlayers = spec->nhidden + 1;
    lay->dims[0] = spec->in_dim;
    for (size_t i = 0; i < spec->nhidden; i++) {
        if (!spec->hidden[i]) {
            memset(lay, 0, sizeof(*lay));
            return dsl_seterr(err, DSL_ECONFIG, "model hidden size %zu is 0", i);
        }
        lay->dims[i + 1] = spec->hidden[i];
    }
    lay->dims[lay->nlayers] = spec->out_dim;

    size_t off = 0, maxdim = 0, nsegs = 0;
    for (size_t l = 0; l < lay->nlayers; l++) {
        size_t in = lay->dims[l], out = lay->dims[l + 1];
        lay->woff[l] = off;
        off += out * (in + 1);
        maxdim = in > maxdim ? in : maxdim;
        maxdim = out > maxdim ? out : maxdim;
        m->flops_per_sample += 6 * in * out;
    }
    lay->maxdim = maxdim;
    m->nparams = off;
    m->in_dim = spec->in_dim;
    m->out_dim = spec->out_dim;
    m->max_batch = spec->max_batch;

    /* segments in backward order: per layer (last first) the bias, then weight row
     * blocks of at most seg_max elements, last block first */
    m->segs = dsl_xcalloc(1, sizeof(*m->segs));
    for (size_t li = lay->nlayers; li-- > 0;) {
        size_t in = lay->dims[li], out = lay->dims[li + 1];
        size_t rows = spec->seg_max ? spec->seg_max / in : out;
        rows = rows < 1 ? 1 : rows > out ? out : rows;
        /* whole row tiles of the CPU's products where a block holds one or more
         * (cpugemm.h): then no tile row straddles two blocks */
        if (rows >= DSL_GEMM_ROWS_TILE && rows < out)
            rows = rows / DSL_GEMM_ROWS_TILE * DSL_GEMM_ROWS_TILE;
        size_t nblk = (out + rows - 1) / rows;
        m->segs = dsl_xreallocarray(m->segs, nsegs + 1 + nblk, sizeof(*m->segs));
        m->segs[nsegs++] = (struct dsl_model_seg){lay->woff[li] + out * in, out, (int)li};
        for (size_t b = nblk; b-- > 0;) {
            size_t r0 = b * rows, r1 = r0 + rows > out ? out : r0 + rows;
            m->segs[nsegs++] =
                (struct dsl_model_seg){lay->woff[li] + r0 * in, (r1 - r0) * in, (int)li};
        }
    }
    m->nsegs = nsegs;
    return 0;
}

size_t dsl_mlp_layout_need_plan(const struct dsl_mlp_layout *lay, const struct dsl_model *m,
                                int blocks, struct dsl_mlp_need *plan)
{
    size_t k = 0;
    for (size_t l = 0; l < lay->nlayers; l++) {
        size_t in = lay->dims[l], out = lay->dims[l + 1], woff = lay->woff[l];
        if (!blocks || l > 0) {
            plan[k++] = (struct dsl_mlp_need){woff, out * (in + 1), l, 0, out};
            continue;
        }
        plan[k++] = (struct dsl_mlp_need){woff + out * in, out, l, 0, 0};
        for (size_t i = 0; i < m->nsegs; i++) {
            const struct dsl_model_seg *sg = &m->segs[i];
            if (sg->layer != (int)l || sg->off >= woff + out * in)
                continue;
            plan[k++] = (struct dsl_mlp_need){sg->off, sg->len, l, (sg->off - woff) / in,
                                              sg->len / in};
        }
    }
    return k;
}

size_t dsl_mlp_tensors(const struct dsl_model_spec *spec, struct dsl_model_tensor *t,
                       size_t max)
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
        struct dsl_model_tensor *w = &t[k++], *b = &t[k++];
        snprintf(w->name, sizeof(w->name), "%zu.weight", 2 * l);
        w->off = o;
        w->ndim = 2;
        w->shape[0] = dims[l + 1];
        w->shape[1] = dims[l];
        w->len = dims[l + 1] * dims[l];
        o += w->len;
        snprintf(b->name, sizeof(b->name), "%zu.bias", 2 * l);
        b->off = o;
        b->ndim = 1;
        b->shape[0] = b->len = dims[l + 1];
        o += b->len;
    }
    return k;
}
