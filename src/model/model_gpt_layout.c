/*
 * The GPT's flat layout: spec checks, parameter offsets, the gradient segment list,
 * GPT-2's initial values and the tensor names of checkpoints.
 *
 * Theory of operation. The flat buffer holds Hugging Face's GPT2Model tensors in its
 * order and shapes: wte [V, C], wpe [T, C], then per block h.<l>.ln_1.{weight,bias}
 * [C], attn.c_attn.weight [C, 3C] (Conv1D: y = x W + b, so a weight is [in, out]),
 * attn.c_attn.bias [3C], attn.c_proj [C, C] + [C], ln_2 [C] x 2, mlp.c_fc [C, 4C] +
 * [4C], mlp.c_proj [4C, C] + [C], and last ln_f.{weight,bias} [C]. Backward finishes
 * the tensors in exactly the reverse order (ln_f first; per block the MLP's output
 * projection first, ln_1 last; then wpe and, last of all, wte, whose gradient gathers
 * the tied LM head's part at the start of backward and the embedding's at the end), so
 * the segment list, each tensor in row blocks of at most seg_max elements, last block
 * first, runs down the flat buffer without a gap, as the trainer's buckets need.
 * Layers (what ZeRO stage 3 gathers whole; nothing else reads them): the embeddings
 * are layer 0, both of them, because the embedding reads wte and wpe together and the
 * tied LM head reads wte again; block b is layer b + 1 and ln_f layer L + 1. Each is
 * a run of whole tensors, so a contiguous range of the flat buffer and of the segment
 * list.
 * Initial values: GPT-2's normal(0, 0.02) for the embeddings and every projection,
 * 0.02 / sqrt(2 L) for the two projections into the residual stream, LayerNorm
 * weights 1 and every bias 0, from one splitmix64 stream per tensor.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/device/cpugemm.h"
#include "model_gpt_impl.h"
#include "dslaunch/common/banned.h"

#define GPT_MAX_DIM 65536
#define GPT_MAX_CONTEXT 65536
#define GPT_MAX_VOCAB 65536 /* token ids travel as uint16 (llm.c shards) */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* standard normal by Box-Muller in double, one value per call (the second dropped, so
 * that value i of a tensor depends only on i) */
static double rng_normal(uint64_t *s)
{
    double u1 = ((double)(rng_next(s) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static const char *const block_names[GPT_PER_BLOCK] = {
    "ln_1.weight",      "ln_1.bias",      "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",      "ln_2.bias",
    "mlp.c_fc.weight",  "mlp.c_fc.bias",  "mlp.c_proj.weight",  "mlp.c_proj.bias",
};

static void shape_of(size_t k, size_t C, size_t *rows, size_t *cols)
{
    static const size_t r[GPT_PER_BLOCK] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1};
    static const size_t c[GPT_PER_BLOCK] = {1, 1, 3, 3, 1, 1, 1, 1, 4, 4, 1, 1};
    int matrix = k == GPT_QKV_W || k == GPT_PROJ_W || k == GPT_FC_W || k == GPT_FCPROJ_W;
    *rows = matrix ? r[k] * C : 1;
    *cols = c[k] * C;
}

static int check_spec(const struct dsl_model_spec *s, char *err)
{
    if (s->gpt.layers < 1 || s->gpt.layers > DSL_GPT_MAX_LAYERS)
        return dsl_seterr(err, DSL_ECONFIG, "gpt: layers %zu out of range 1..%d",
                          s->gpt.layers, DSL_GPT_MAX_LAYERS);
    if (s->gpt.dim < 1 || s->gpt.dim > GPT_MAX_DIM)
        return dsl_seterr(err, DSL_ECONFIG, "gpt: dim %zu out of range 1..%d", s->gpt.dim,
                          GPT_MAX_DIM);
    if (s->gpt.heads < 1 || s->gpt.dim % s->gpt.heads)
        return dsl_seterr(err, DSL_ECONFIG,
                          "gpt: heads %zu must divide dim %zu (head size dim / heads)",
                          s->gpt.heads, s->gpt.dim);
    if (s->gpt.context < 1 || s->gpt.context > GPT_MAX_CONTEXT)
        return dsl_seterr(err, DSL_ECONFIG, "gpt: context %zu out of range 1..%d",
                          s->gpt.context, GPT_MAX_CONTEXT);
    if (s->out_dim < 2 || s->out_dim > GPT_MAX_VOCAB)
        return dsl_seterr(err, DSL_ECONFIG, "gpt: vocab %zu out of range 2..%d", s->out_dim,
                          GPT_MAX_VOCAB);
    if (s->in_dim != s->gpt.context + 1)
        return dsl_seterr(err, DSL_ECONFIG,
                          "gpt: samples of %zu tokens do not fit context %zu (a sample is "
                          "context + 1 tokens)",
                          s->in_dim, s->gpt.context);
    if (!s->max_batch)
        return dsl_seterr(err, DSL_ECONFIG, "gpt: batch 0");
    return 0;
}

int dsl_gpt_layout_build(struct dsl_gpt_layout *lay, struct dsl_model *m,
                         const struct dsl_model_spec *spec, char *err)
{
    memset(m, 0, sizeof(*m));
    memset(lay, 0, sizeof(*lay));
    int r = check_spec(spec, err);
    if (r < 0)
        return r;
    size_t L = spec->gpt.layers, C = spec->gpt.dim, T = spec->gpt.context, V = spec->out_dim;
    lay->L = L;
    lay->C = C;
    lay->NH = spec->gpt.heads;
    lay->T = T;
    lay->V = V;
    lay->ntensors = 4 + GPT_PER_BLOCK * L;
    size_t off = 0;
    for (size_t i = 0; i < lay->ntensors; i++) {
        struct dsl_gpt_tensor *t = &lay->t[i];
        if (i == GPT_WTE || i == GPT_WPE) {
            t->rows = i == GPT_WTE ? V : T;
            t->cols = C;
        } else if (i >= GPT_LNF_W(L)) {
            t->rows = 1;
            t->cols = C;
        } else {
            shape_of((i - 2) % GPT_PER_BLOCK, C, &t->rows, &t->cols);
        }
        t->off = off;
        off += t->rows * t->cols;
    }
    m->nparams = off;
    lay->lo[0] = lay->t[GPT_WTE].off;
    for (size_t b = 0; b < L; b++)
        lay->lo[GPT_LAYER_BLOCK(b)] = lay->t[GPT_BLOCK(b, 0)].off;
    lay->lo[GPT_LAYER_LNF(L)] = lay->t[GPT_LNF_W(L)].off;
    lay->lo[GPT_LAYER_LNF(L) + 1] = off;
    m->in_dim = T + 1;
    m->out_dim = V;
    m->max_batch = spec->max_batch;
    m->tokens_per_sample = T;
    /* 6 x the multiply-adds' parameters per token (the blocks' projections and the
     * tied LM head) plus the attention products, forward (4 T^2 C per block, both
     * triangles as computed) and backward (twice that) */
    m->flops_per_sample = 6 * (12 * C * C * L + V * C) * T + 12 * L * T * T * C;

    /* segments in backward order: tensors last first, each in row blocks, last first */
    size_t nsegs = 0, cap = 0;
    for (size_t i = lay->ntensors; i-- > 0;) {
        struct dsl_gpt_tensor *t = &lay->t[i];
        size_t rows = spec->seg_max ? spec->seg_max / t->cols : t->rows;
        rows = rows < 1 ? 1 : rows > t->rows ? t->rows : rows;
        /* whole row tiles of the CPU's products where a block holds one or more
         * (cpugemm.h): then no tile row straddles two blocks */
        if (rows >= DSL_GEMM_ROWS_TILE && rows < t->rows)
            rows = rows / DSL_GEMM_ROWS_TILE * DSL_GEMM_ROWS_TILE;
        size_t nblk = (t->rows + rows - 1) / rows;
        if (nsegs + nblk > cap) {
            cap = (nsegs + nblk) * 2;
            m->segs = dsl_xreallocarray(m->segs, cap, sizeof(*m->segs));
        }
        t->seg0 = nsegs;
        t->nseg = nblk;
        int layer = i < 2                  ? 0
                    : i >= GPT_LNF_W(L)    ? GPT_LAYER_LNF((int)L)
                                           : GPT_LAYER_BLOCK((int)((i - 2) / GPT_PER_BLOCK));
        for (size_t b = nblk; b-- > 0;) {
            size_t r0 = b * rows, r1 = r0 + rows > t->rows ? t->rows : r0 + rows;
            m->segs[nsegs++] =
                (struct dsl_model_seg){t->off + r0 * t->cols, (r1 - r0) * t->cols, layer};
        }
    }
    m->nsegs = nsegs;
    return 0;
}

void dsl_gpt_layout_init(const struct dsl_gpt_layout *lay, float *params, uint64_t seed)
{
    double resid = 0.02 / sqrt(2.0 * (double)lay->L);
    for (size_t i = 0; i < lay->ntensors; i++) {
        const struct dsl_gpt_tensor *t = &lay->t[i];
        float *w = params + t->off;
        size_t n = t->rows * t->cols;
        size_t k = i < 2 || i >= GPT_LNF_W(lay->L) ? (i == GPT_LNF_W(lay->L) ? GPT_LN1_W
                                                      : i == GPT_LNF_B(lay->L) ? GPT_LN1_B
                                                                               : GPT_QKV_W)
                                                   : (i - 2) % GPT_PER_BLOCK;
        uint64_t s = seed * 1000003u + i + 1;
        if (k == GPT_LN1_W || k == GPT_LN2_W) {
            for (size_t j = 0; j < n; j++)
                w[j] = 1.0f;
        } else if (k == GPT_QKV_W || k == GPT_PROJ_W || k == GPT_FC_W || k == GPT_FCPROJ_W) {
            double sd = k == GPT_PROJ_W || k == GPT_FCPROJ_W ? resid : 0.02;
            for (size_t j = 0; j < n; j++)
                w[j] = (float)(sd * rng_normal(&s));
        } else {
            memset(w, 0, n * sizeof(float));
        }
    }
}

size_t dsl_gpt_tensors(const struct dsl_model_spec *spec, struct dsl_model_tensor *out,
                       size_t max)
{
    struct dsl_gpt_layout lay;
    struct dsl_model m;
    char err[DSL_ERR_LEN];
    if (dsl_gpt_layout_build(&lay, &m, spec, err) < 0)
        return 0;
    free(m.segs);
    size_t k = 0;
    for (size_t i = 0; i < lay.ntensors && k < max; i++, k++) {
        const struct dsl_gpt_tensor *t = &lay.t[i];
        struct dsl_model_tensor *o = &out[k];
        if (i == GPT_WTE)
            snprintf(o->name, sizeof(o->name), "wte.weight");
        else if (i == GPT_WPE)
            snprintf(o->name, sizeof(o->name), "wpe.weight");
        else if (i == GPT_LNF_W(lay.L))
            snprintf(o->name, sizeof(o->name), "ln_f.weight");
        else if (i == GPT_LNF_B(lay.L))
            snprintf(o->name, sizeof(o->name), "ln_f.bias");
        else
            snprintf(o->name, sizeof(o->name), "h.%zu.%s", (i - 2) / GPT_PER_BLOCK,
                     block_names[(i - 2) % GPT_PER_BLOCK]);
        o->off = t->off;
        o->len = t->rows * t->cols;
        o->ndim = t->rows == 1 ? 1 : 2;
        o->shape[0] = t->rows == 1 ? t->cols : t->rows;
        o->shape[1] = t->rows == 1 ? 0 : t->cols;
    }
    return k;
}
