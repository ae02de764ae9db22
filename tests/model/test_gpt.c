/*
 * Unit tests of the GPT (model_gpt.c): every parameter's gradient against central
 * finite differences (every tensor kind, weights cut into several segments as stage 2
 * sees them), segment sizes and thread counts that change no bits, exact loss
 * scaling, ZeRO stage 3's layers taken one at a time with the same bits, Hugging
 * Face's tensor names, the input checks, and a tiny model that overfits one batch.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/dtype.h"
#include "dslaunch/common/error.h"
#include "dslaunch/device/cpupool.h"
#include "dslaunch/model/model.h"
#include "dslaunch/device/optimizer.h"

#include "test.h"
#include "full_sink.h"
#include "dslaunch/common/banned.h"

static void make_gpt(struct dsl_model *m, size_t L, size_t C, size_t NH, size_t T, size_t V,
                     size_t batch, size_t seg_max)
{
    struct dsl_model_spec sp = {.type = "gpt", .in_dim = T + 1, .out_dim = V,
                                .max_batch = batch, .seg_max = seg_max,
                                .gpt = {.layers = L, .dim = C, .heads = NH, .context = T}};
    char err[DSL_ERR_LEN];
    int r = dsl_model_create(m, &sp, err);
    if (r < 0)
        DSL_FAIL_("create: %s", err);
}

static void tokens(float *x, size_t n, size_t V, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(dsl_test_rng(&seed) % V);
}

static void grads(struct dsl_model *m, const float *p, const float *x, size_t n, float scale,
                  float *g, struct dsl_model_stats *st)
{
    struct full_sink fs = {g, m, 0, m->nparams, 0};
    struct dsl_grad_sink sink = {.dest = fs_dest, .done = fs_done, .need = fs_need, .ctx = &fs};
    ASSERT_OK(m->ops->forward_backward(m, p, x, NULL, n, scale, &sink, st));
    ASSERT_EQ(fs.ndone, m->nsegs);
    ASSERT_EQ(fs.last_off, 0);
    ASSERT_EQ(fs.needed, m->nparams);
}

/* the gradient of every parameter against central differences of the loss */
static void check_finite_differences(size_t L, size_t C, size_t NH, size_t T, size_t V,
                                     size_t B)
{
    struct dsl_model m;
    make_gpt(&m, L, C, NH, T, V, B, 20);
    float *p = calloc(m.nparams, sizeof(float)), *g = calloc(m.nparams, sizeof(float));
    float *x = calloc(B * (T + 1), sizeof(float));
    m.ops->init_params(&m, p, 5);
    /* larger weights than GPT-2's 0.02, so that every path carries signal */
    uint64_t s = 77;
    for (size_t i = 0; i < m.nparams; i++)
        p[i] += (float)((double)(dsl_test_rng(&s) >> 11) / 9007199254740992.0 - 0.5) * 0.6f;
    tokens(x, B * (T + 1), V, 3);
    struct dsl_model_stats st;
    grads(&m, p, x, B, 1.0f, g, &st);
    ASSERT(m.nsegs > 4 + 12 * L); /* weights were cut into row blocks */
    struct dsl_model_tensor tl[DSL_MODEL_MAX_TENSORS];
    size_t nt = dsl_model_tensor_list(&(struct dsl_model_spec){.type = "gpt", .in_dim = T + 1,
                                                              .out_dim = V, .max_batch = B,
                                                              .gpt = {L, C, NH, T}},
                                      tl, DSL_MODEL_MAX_TENSORS);
    ASSERT_EQ(nt, 4 + 12 * L);
    double worst = 0.0;
    for (size_t k = 0; k < nt; k++) {
        double tw = 0.0;
        for (size_t i = tl[k].off; i < tl[k].off + tl[k].len; i++) {
            float keep = p[i];
            struct dsl_model_stats a, b;
            float h = 1e-2f;
            p[i] = keep + h;
            ASSERT_OK(m.ops->evaluate(&m, p, x, NULL, B, &a));
            p[i] = keep - h;
            ASSERT_OK(m.ops->evaluate(&m, p, x, NULL, B, &b));
            p[i] = keep;
            double fd = (a.loss_sum - b.loss_sum) / (2.0 * (double)h);
            double e = fabs(fd - g[i]) / (1e-2 + fabs(g[i]));
            tw = e > tw ? e : tw;
        }
        printf("# %-24s max relative error %.2g\n", tl[k].name, tw);
        worst = tw > worst ? tw : worst;
    }
    ASSERT(worst < 2e-2);
    free(p);
    free(g);
    free(x);
    dsl_model_release(&m);
}

TEST(gpt_gradient_should_match_finite_differences_for_every_tensor)
{
    check_finite_differences(2, 8, 2, 5, 11, 3);
}

/* 69 positions: attention's row tiles of 32 (model_gpt.c) come as 32, 32 and 5, so the
 * products that skip the masked triangle are checked over whole and partial tiles */
TEST(gpt_gradient_should_match_finite_differences_across_attention_tiles)
{
    check_finite_differences(1, 8, 2, 69, 11, 2);
}

TEST(gpt_gradient_should_not_depend_on_segment_size_or_threads)
{
    struct dsl_model a, b;
    make_gpt(&a, 2, 16, 4, 8, 13, 4, 0);
    make_gpt(&b, 2, 16, 4, 8, 13, 4, 37);
    float *p = calloc(a.nparams, sizeof(float));
    float *ga = calloc(a.nparams, sizeof(float)), *gb = calloc(a.nparams, sizeof(float));
    float x[4 * 9];
    a.ops->init_params(&a, p, 9);
    tokens(x, sizeof(x) / sizeof(x[0]), 13, 4);
    struct dsl_model_stats sa, sb;
    grads(&a, p, x, 4, 1.0f, ga, &sa);
    dsl_cpupool_set_threads(3); /* before the pool's first use, which starts the helpers */
    grads(&b, p, x, 4, 1.0f, gb, &sb);
    ASSERT(a.nsegs < b.nsegs);
    ASSERT(sa.loss_sum == sb.loss_sum);
    ASSERT(memcmp(ga, gb, a.nparams * sizeof(float)) == 0);
    /* a power-of-two loss scale scales every element exactly, the loss not at all */
    grads(&b, p, x, 4, 256.0f, gb, &sb);
    ASSERT(sa.loss_sum == sb.loss_sum);
    check_scaled(ga, gb, a.nparams, 256.0f);
    free(p);
    free(ga);
    free(gb);
    dsl_model_release(&a);
    dsl_model_release(&b);
}

/* ZeRO stage 3's source of layers, around the whole-buffer sink (its first member, so
 * fs_dest and fs_done take it): each layer() copies the layer out of the whole buffer
 * into an allocation of its own, which unlayer() poisons and frees, so a read after
 * it changes bits or trips ASan; it checks that one layer is held at a time and that
 * each call's `next` named the layer asked for after it */
struct layer_src {
    struct full_sink fs;
    const unsigned char *params; /* the whole buffer */
    size_t esz;
    unsigned char *held;
    int held_l, next, calls;
    int seq[16];
};

static void layer_range(const struct dsl_model *m, int l, size_t *lo, size_t *len)
{
    *lo = (size_t)-1;
    *len = 0;
    for (size_t i = 0; i < m->nsegs; i++)
        if (m->segs[i].layer == l) {
            *lo = m->segs[i].off < *lo ? m->segs[i].off : *lo;
            *len += m->segs[i].len;
        }
}

static const float *ls_layer(void *ctx, int l, int next)
{
    struct layer_src *s = ctx;
    ASSERT(!s->held);
    if (s->calls)
        ASSERT_EQ(l, s->next);
    size_t lo, len;
    layer_range(s->fs.m, l, &lo, &len);
    ASSERT(len > 0);
    s->held = malloc(len * s->esz);
    memcpy(s->held, s->params + lo * s->esz, len * s->esz);
    s->held_l = l;
    s->next = next;
    if (s->calls < 16)
        s->seq[s->calls] = l;
    s->calls++;
    return (const float *)(const void *)s->held;
}

static void ls_unlayer(void *ctx, int l)
{
    struct layer_src *s = ctx;
    ASSERT(s->held && s->held_l == l);
    size_t lo, len;
    layer_range(s->fs.m, l, &lo, &len);
    memset(s->held, 0xff, len * s->esz); /* NaN in fp32, bf16 and fp16 */
    free(s->held);
    s->held = NULL;
}

/* every parameter in a layer >= 0; each layer a run of the segment list and a
 * contiguous range of the flat buffer */
static void check_layer_cover(const struct dsl_model *m, int nl)
{
    size_t covered = 0;
    for (int l = 0; l < nl; l++) {
        size_t lo, len, first = m->nsegs, last = 0, n = 0;
        layer_range(m, l, &lo, &len);
        for (size_t i = 0; i < m->nsegs; i++) {
            ASSERT(m->segs[i].layer >= 0 && m->segs[i].layer < nl);
            if (m->segs[i].layer == l) {
                first = i < first ? i : first;
                last = i;
                ASSERT(m->segs[i].off >= lo && m->segs[i].off + m->segs[i].len <= lo + len);
            }
        }
        for (size_t i = first; i <= last; i++)
            n += m->segs[i].len;
        ASSERT_EQ(n, len);
        covered += len;
    }
    ASSERT_EQ(covered, m->nparams);
}

/* stage 3's pass through the layers gives the gradient and loss bits of the whole
 * buffer's, and so does its evaluation, in dtype dt */
static void check_layers(enum dsl_dtype dt)
{
    struct dsl_model m;
    size_t L = 2, T = 8, V = 13, B = 3;
    struct dsl_model_spec sp = {.type = "gpt", .in_dim = T + 1, .out_dim = V, .max_batch = B,
                                .seg_max = 40, .dtype = dt, .gpt = {L, 16, 4, T}};
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_model_create(&m, &sp, err));
    check_layer_cover(&m, (int)L + 2);
    size_t P = m.nparams, esz = dt == DSL_FLOAT32 ? 4 : 2;
    float *f = calloc(P, sizeof(float));
    /* gradients: the full sink addresses floats, so room for P of them either way */
    float *ga = calloc(P, sizeof(float)), *gb = calloc(P, sizeof(float));
    unsigned char *p = calloc(P, esz);
    float x[3 * 9];
    m.ops->init_params(&m, f, 5);
    for (size_t i = 0; i < P; i++) /* the trainer's 16-bit copy, rounded to nearest even */
        if (dt == DSL_FLOAT32)
            memcpy(p + 4 * i, &f[i], 4);
        else
            ((uint16_t *)(void *)p)[i] = dt == DSL_BFLOAT16 ? dsl_bf16_from_float(f[i])
                                                            : dsl_fp16_from_float(f[i]);
    tokens(x, sizeof(x) / sizeof(x[0]), V, 6);
    const float *pf = (const float *)(const void *)p;
    struct dsl_model_stats sa, sb, ea, eb;
    grads(&m, pf, x, B, 1.0f, ga, &sa);
    struct layer_src ls = {.fs = {gb, &m, 0, P, 0}, .params = p, .esz = esz};
    struct dsl_grad_sink z3 = {.dest = fs_dest, .done = fs_done, .layer = ls_layer,
                               .unlayer = ls_unlayer, .ctx = &ls};
    ASSERT_OK(m.ops->forward_backward(&m, NULL, x, NULL, B, 1.0f, &z3, &sb));
    ASSERT(!ls.held);
    ASSERT_EQ(ls.fs.ndone, m.nsegs);
    ASSERT(sa.loss_sum == sb.loss_sum && sa.correct == sb.correct);
    ASSERT(memcmp(ga, gb, P * sizeof(float)) == 0);
    /* forward: embeddings, blocks, ln_f; the head's embeddings; backward: ln_f, the
     * blocks from the last (the embeddings' gradients read no parameter) */
    static const int want[] = {0, 1, 2, 3, 0, 3, 2, 1};
    ASSERT_EQ(ls.calls, 8);
    ASSERT(memcmp(ls.seq, want, sizeof(want)) == 0);
    ASSERT_EQ(ls.next, -1);
    ASSERT_OK(m.ops->evaluate(&m, pf, x, NULL, B, &ea));
    ls.calls = 0;
    ASSERT_OK(m.ops->evaluate_src(&m, &z3, x, NULL, B, &eb));
    ASSERT(!ls.held && ls.calls == 5 && ls.seq[4] == 0 && ls.next == -1);
    ASSERT(ea.loss_sum == eb.loss_sum && ea.correct == eb.correct);
    ASSERT(ea.loss_sum == sa.loss_sum);
    free(f);
    free(p);
    free(ga);
    free(gb);
    dsl_model_release(&m);
}

TEST(gpt_should_compute_the_same_bits_from_layers_taken_one_at_a_time)
{
    check_layers(DSL_FLOAT32);
    check_layers(DSL_BFLOAT16);
    check_layers(DSL_FLOAT16);
}

TEST(gpt_should_name_its_tensors_as_hugging_face_gpt2)
{
    struct dsl_model_spec sp = {.type = "gpt", .in_dim = 129, .out_dim = 256, .max_batch = 1,
                                .gpt = {4, 128, 4, 128}};
    struct dsl_model_tensor tl[DSL_MODEL_MAX_TENSORS];
    size_t n = dsl_model_tensor_list(&sp, tl, DSL_MODEL_MAX_TENSORS);
    ASSERT_EQ(n, 52);
    ASSERT_STR_EQ(tl[0].name, "wte.weight");
    ASSERT_EQ(tl[0].shape[0], 256);
    ASSERT_STR_EQ(tl[1].name, "wpe.weight");
    ASSERT_STR_EQ(tl[4].name, "h.0.attn.c_attn.weight");
    ASSERT_EQ(tl[4].shape[0], 128); /* Conv1D: [in, out] */
    ASSERT_EQ(tl[4].shape[1], 384);
    ASSERT_STR_EQ(tl[12].name, "h.0.mlp.c_proj.weight");
    ASSERT_EQ(tl[12].shape[0], 512);
    ASSERT_STR_EQ(tl[51].name, "ln_f.bias");
    ASSERT_EQ(tl[51].off + tl[51].len, 842496); /* the PyTorch peer's parameter count */
}

TEST(gpt_should_reject_bad_shapes_and_token_ids)
{
    struct dsl_model m;
    char err[DSL_ERR_LEN];
    struct dsl_model_spec sp = {.type = "gpt", .in_dim = 9, .out_dim = 16, .max_batch = 2,
                                .gpt = {2, 30, 4, 8}};
    ASSERT_EQ(dsl_model_create(&m, &sp, err), DSL_ECONFIG);
    ASSERT_CONTAINS(err, "heads 4 must divide dim 30");
    sp.gpt.dim = 32;
    sp.in_dim = 8;
    ASSERT_EQ(dsl_model_create(&m, &sp, err), DSL_ECONFIG);
    ASSERT_CONTAINS(err, "context + 1");
    sp.in_dim = 9;
    ASSERT_OK(dsl_model_create(&m, &sp, err));
    float *p = calloc(m.nparams, sizeof(float)), x[18] = {0};
    struct dsl_model_stats st;
    x[3] = 16.0f; /* = vocab */
    ASSERT_EQ(m.ops->evaluate(&m, p, x, NULL, 2, &st), DSL_EDATA);
    ASSERT_CONTAINS(m.err, "outside 0..15");
    x[3] = 2.5f;
    ASSERT_EQ(m.ops->evaluate(&m, p, x, NULL, 2, &st), DSL_EDATA);
    x[3] = 2.0f;
    ASSERT_OK(m.ops->evaluate(&m, p, x, NULL, 2, &st));
    ASSERT(fabs(st.loss_sum - 2.0 * log(16.0)) < 1e-5); /* zero weights: uniform */
    free(p);
    dsl_model_release(&m);
}

TEST(gpt_should_overfit_one_batch)
{
    struct dsl_model m;
    size_t B = 4, T = 16, V = 32;
    make_gpt(&m, 2, 32, 4, T, V, B, 0);
    size_t P = m.nparams;
    float *p = calloc(P, sizeof(float)), *g = calloc(P, sizeof(float));
    float *mo = calloc(P, sizeof(float)), *vo = calloc(P, sizeof(float));
    float x[4 * 17];
    m.ops->init_params(&m, p, 1);
    tokens(x, B * (T + 1), V, 11);
    struct dsl_optim_hparams h = {DSL_OPTIM_ADAM, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1, 0};
    struct dsl_model_stats st;
    double first = 0.0, last = 0.0;
    for (uint64_t t = 1; t <= 150; t++) {
        grads(&m, p, x, B, 1.0f, g, &st);
        if (t == 1)
            first = st.loss_sum / (double)B;
        last = st.loss_sum / (double)B;
        dsl_optim_step(&h, h.lr, t, 1.0f / (float)B, p, g, mo, vo, P);
    }
    printf("# loss %.4f -> %.4f nats/token (uniform %.4f)\n", first, last, log((double)V));
    ASSERT(fabs(first - log((double)V)) < 0.1);
    ASSERT(last < 0.1);
    free(p);
    free(g);
    free(mo);
    free(vo);
    dsl_model_release(&m);
}

int main(int argc, char **argv)
{
    return RUN_TESTS(argc, argv);
}
