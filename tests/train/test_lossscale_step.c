/*
 * fp16 loss scaling inside dsl_trainer_step, at world 1, on the CPU (trainer.h):
 *   - from 2^127 (which overflows fp32 gradients) the trainer skips exactly the steps
 *     whose scaled gradient holds inf/NaN (an independent model run is the oracle),
 *     its (scale, skipped) sequence is dsl_lossscale_update()'s for those overflows,
 *     and a skipped step changes no parameter, no optimizer state and not the
 *     scheduler's position;
 *   - the applied steps equal fp32 steps over the same batches bit for bit: the
 *     fp16 run's final parameters and Adam state are those of an fp32 run that only
 *     takes the batches the fp16 run applied;
 *   - with a power-of-two scale that never overflows (static 2^8, or a dynamic scale
 *     that keeps doubling) the parameters are the fp32 parameters bit for bit, with
 *     clipping and accumulation too;
 *   - an overflow at min_loss_scale is an error; bf16 and fp32 never scale or skip.
 *
 * Why bit equality is the right check: a power-of-two scale multiplies dz exactly,
 * backward is linear in dz (products, sums and ReLU masks taken from forward), so
 * every gradient element is exactly scale times the fp32 one unless something
 * overflows (then inf/NaN appears and the step is skipped) or an fp32 value is
 * subnormal (not the case for these magnitudes). The trainer's unscale factor
 * inv / scale is exact for a power of two, and otherwise it divides in two exact
 * steps, so the unscaled gradient has the fp32 gradient's bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/model/data.h"
#include "dslaunch/common/error.h"
#include "dslaunch/train/lossscale.h"
#include "dslaunch/train/trainer.h"
#include "dslaunch/train/trainer_settings.h"
#include "test.h"
#include "dslaunch/common/banned.h"

struct rig {
    struct dsl_comm *comm;
    struct dsl_dataset tr, te;
    struct dsl_model m;
    struct dsl_model_spec sp;
    struct dsl_trainer t;
    struct dsl_sampler s;
    uint64_t lr_calls, lr_last; /* what the scheduler was asked */
};

/* a decaying lr, so that the scheduler position shows in the parameters */
static float lr_decay(void *ctx, uint64_t step)
{
    struct rig *g = ctx;
    g->lr_calls++;
    g->lr_last = step;
    return 1e-2f / (1.0f + 0.05f * (float)step);
}

static struct dsl_trainer_opts base_opts(int stage, size_t micro, size_t accum)
{
    struct dsl_trainer_opts o = {
        .micro_batch = micro, .grad_accum = accum, .zero_stage = stage,
        .bucket_elems = stage ? 100 : 0, .overlap_comm = stage == 2, .deterministic = 1,
        .predivide = 1.0f, .seed = 11,
        .optim = {DSL_OPTIM_ADAM, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 0}};
    return o;
}

static void rig_open(struct rig *g, const struct dsl_trainer_opts *opts)
{
    char err[DSL_ERR_LEN];
    struct dsl_comm_opts co = {.backend = "tcp", .deterministic = 1};
    memset(g, 0, sizeof(*g));
    unsetenv("WORLD_SIZE");
    ASSERT_OK(dsl_comm_open_env(&g->comm, &co, err));
    struct dsl_data_opts dopt = {.name = "synthetic", .synth_train = 512, .synth_test = 64,
                                 .synth_dim = 20, .synth_classes = 4, .seed = 5};
    ASSERT_OK(dsl_data_load(&g->tr, &g->te, &dopt, err));
    g->sp = (struct dsl_model_spec){.type = "mlp", .in_dim = 20, .out_dim = 4, .nhidden = 2,
                                    .hidden = {16, 12}, .max_batch = 32, .seg_max = 64};
    ASSERT_OK(dsl_model_create(&g->m, &g->sp, err));
    struct dsl_trainer_opts o = *opts;
    o.lr_fn = lr_decay;
    o.lr_ctx = g;
    ASSERT_OK(dsl_trainer_init(&g->t, &o, g->comm, &g->m, err));
    ASSERT_OK(dsl_sampler_init(&g->s, g->tr.n, g->t.G, 3, 1, 0, err));
}

static void rig_close(struct rig *g)
{
    dsl_sampler_release(&g->s);
    dsl_trainer_release(&g->t);
    dsl_model_release(&g->m);
    dsl_dataset_release(&g->tr);
    dsl_dataset_release(&g->te);
    dsl_comm_close(g->comm);
}

static const size_t *batch_of(struct rig *g, uint64_t k)
{
    return dsl_sampler_step(&g->s, k / g->s.steps_per_epoch, (size_t)(k % g->s.steps_per_epoch));
}

static int step(struct rig *g, uint64_t k, struct dsl_step_result *res, char *err)
{
    return dsl_trainer_step(&g->t, &g->tr, batch_of(g, k), 0, res, err);
}

static float *copy_of(const float *p, size_t n)
{
    float *c = malloc(n * sizeof(float));
    ASSERT(c != NULL);
    memcpy(c, p, n * sizeof(float));
    return c;
}

/* The oracle: does the gradient of scale x loss on this batch hold inf or NaN? One
 * micro batch of G samples at world 1 (stage 0, no accumulation), so the trainer's
 * final gradient is exactly this model call's. */
struct full_sink {
    float *g;
    const struct dsl_model *m;
};
static float *fs_dest(void *ctx, size_t seg)
{
    struct full_sink *s = ctx;
    return s->g + s->m->segs[seg].off;
}
static void fs_done(void *ctx, size_t seg)
{
    (void)ctx;
    (void)seg;
}

static int oracle_overflow(struct rig *g, struct dsl_model *om, const size_t *idx, float scale)
{
    size_t n = g->t.G;
    float *x = malloc(n * g->tr.dim * sizeof(float)), *grad = calloc(g->t.P, sizeof(float));
    int32_t *y = malloc(n * sizeof(int32_t));
    ASSERT(x && grad && y);
    dsl_dataset_gather(&g->tr, idx, n, x, y);
    struct full_sink fs = {grad, om};
    struct dsl_grad_sink sink = {.dest = fs_dest, .done = fs_done, .ctx = &fs};
    struct dsl_model_stats st;
    ASSERT_OK(om->ops->forward_backward(om, g->t.params, x, y, n, scale, &sink, &st));
    int bad = 0;
    for (size_t i = 0; i < g->t.P; i++)
        bad |= !isfinite(grad[i]);
    free(x);
    free(y);
    free(grad);
    return bad;
}

static void expect_same_state(const struct dsl_trainer *a, const struct dsl_trainer *b,
                              const char *what)
{
    if (memcmp(a->params, b->params, a->P * sizeof(float)) != 0)
        DSL_FAIL_("%s: parameters differ", what);
    if (memcmp(a->m, b->m, a->S * sizeof(float)) != 0 ||
        memcmp(a->v, b->v, a->S * sizeof(float)) != 0)
        DSL_FAIL_("%s: Adam state differs", what);
}

/*
 * Run `steps` steps of an fp16 run from 2^127 and check every step against the
 * scaler and (with_oracle) the model; then replay its applied batches in fp32.
 */
static void run_from_2_127(int stage, size_t micro, size_t accum, int with_oracle,
                           uint64_t steps)
{
    char err[DSL_ERR_LEN];
    struct dsl_trainer_opts o = base_opts(stage, micro, accum);
    o.loss_scaling = 1;
    dsl_lossscale_init_dynamic(&o.scaler, ldexp(1.0, 127), 1000, 1.0, 2, 0);
    struct rig *g = calloc(1, sizeof(*g)), *f = calloc(1, sizeof(*f));
    ASSERT(g && f);
    rig_open(g, &o);
    struct dsl_model om;
    ASSERT_OK(dsl_model_create(&om, &g->sp, err));
    struct dsl_lossscale ref = o.scaler;
    uint64_t *applied = calloc(steps, sizeof(uint64_t)), napplied = 0, first_applied = 0;
    int seen_apply = 0;
    for (uint64_t k = 0; k < steps; k++) {
        float *p0 = copy_of(g->t.params, g->t.P), *m0 = copy_of(g->t.m, g->t.S),
              *v0 = copy_of(g->t.v, g->t.S);
        int expect = -1;
        if (with_oracle)
            expect = oracle_overflow(g, &om, batch_of(g, k), (float)ref.cur_scale);
        struct dsl_step_result res;
        ASSERT_OK(step(g, k, &res, err));
        /* the scaler: the scale the step ran with, the decision, the next scale */
        if (res.loss_scale != ref.cur_scale)
            DSL_FAIL_("step %llu: scale %g, the scaler says %g", (unsigned long long)k,
                      res.loss_scale, ref.cur_scale);
        if (expect >= 0 && res.skipped != expect)
            DSL_FAIL_("step %llu at scale %g: skipped %d, the gradient %s", (unsigned long long)k,
                      res.loss_scale, res.skipped, expect ? "overflows" : "is finite");
        ASSERT_EQ(dsl_lossscale_update(&ref, res.skipped, err), res.skipped);
        ASSERT(res.next_scale == ref.cur_scale && g->t.ls.cur_scale == ref.cur_scale);
        ASSERT_EQ(g->t.ls.skipped, ref.skipped);
        ASSERT_EQ(g->t.step, k + 1);
        /* the scheduler was asked for the applied-step count, skipped or not */
        ASSERT_EQ(g->lr_last, napplied);
        if (res.skipped) {
            ASSERT(memcmp(p0, g->t.params, g->t.P * sizeof(float)) == 0);
            ASSERT(memcmp(m0, g->t.m, g->t.S * sizeof(float)) == 0);
            ASSERT(memcmp(v0, g->t.v, g->t.S * sizeof(float)) == 0);
            ASSERT(res.grad_norm == 0.0f);
        } else {
            ASSERT(memcmp(p0, g->t.params, g->t.P * sizeof(float)) != 0);
            if (!seen_apply)
                first_applied = k;
            seen_apply = 1;
            applied[napplied++] = k;
        }
        free(p0);
        free(m0);
        free(v0);
    }
    /* hysteresis 2: the first overflow keeps the scale, every later one halves it */
    printf("# stage %d micro %zu accum %zu: %llu of %llu steps skipped, first applied "
           "step %llu, final scale 2^%g\n",
           stage, micro, accum, (unsigned long long)g->t.ls.skipped,
           (unsigned long long)steps, (unsigned long long)first_applied,
           log2(g->t.ls.cur_scale));
    ASSERT(seen_apply);
    ASSERT(first_applied >= 2);
    ASSERT(g->t.ls.skipped >= 2 && g->t.ls.skipped < steps - 8);
    ASSERT(g->t.ls.cur_scale < ldexp(1.0, 127));
    ASSERT_EQ(napplied + g->t.ls.skipped, steps);

    /* fp32 over the applied batches only: the same bits */
    struct dsl_trainer_opts o32 = base_opts(stage, micro, accum);
    rig_open(f, &o32);
    for (uint64_t i = 0; i < napplied; i++) {
        struct dsl_step_result res;
        ASSERT_OK(step(f, applied[i], &res, err));
        ASSERT(!res.skipped && res.loss_scale == 1.0);
    }
    expect_same_state(&g->t, &f->t, "fp16 from 2^127 vs fp32 over the applied batches");
    free(applied);
    dsl_model_release(&om);
    rig_close(g);
    rig_close(f);
    free(g);
    free(f);
}

TEST(fp16_from_2_127_should_skip_exactly_the_overflowing_steps_then_train_like_fp32)
{
    run_from_2_127(0, 32, 1, 1, 40);
}

TEST(fp16_from_2_127_should_match_fp32_with_stage_2_overlap_and_accumulation)
{
    run_from_2_127(2, 8, 4, 0, 40);
}

/* o (with loss scaling) and the same run in fp32 step by step: no step skipped, the
 * same losses, norms and lrs, and at the end the same parameters and Adam state */
static void expect_fp32_bits(struct dsl_trainer_opts o, uint64_t steps, double final_scale)
{
    char err[DSL_ERR_LEN];
    struct rig *g = calloc(1, sizeof(*g)), *f = calloc(1, sizeof(*f));
    ASSERT(g && f);
    struct dsl_trainer_opts o32 = o;
    o32.loss_scaling = 0;
    rig_open(g, &o);
    rig_open(f, &o32);
    for (uint64_t k = 0; k < steps; k++) {
        struct dsl_step_result a, b;
        ASSERT_OK(step(g, k, &a, err));
        ASSERT_OK(step(f, k, &b, err));
        ASSERT(!a.skipped && !b.skipped);
        ASSERT(a.loss == b.loss && a.grad_norm == b.grad_norm && a.lr == b.lr);
    }
    printf("# scale %g after %llu steps: parameters and Adam state equal to fp32\n",
           g->t.ls.cur_scale, (unsigned long long)steps);
    ASSERT(g->t.ls.cur_scale == final_scale);
    expect_same_state(&g->t, &f->t, "power-of-two scale vs fp32");
    rig_close(g);
    rig_close(f);
    free(g);
    free(f);
}

TEST(power_of_two_loss_scales_should_give_the_fp32_parameters_bit_for_bit)
{
    /* static 2^8, stage 0, one micro batch */
    struct dsl_trainer_opts o = base_opts(0, 32, 1);
    o.loss_scaling = 1;
    struct dsl_fp16_config c = {.enabled = 1, .loss_scale = 256.0};
    dsl_lossscale_init(&o.scaler, &c);
    expect_fp32_bits(o, 20, 256.0);

    /* dynamic from 2^3 doubling every 2 clean steps (2^13 after 20), stage 2 with
     * overlap and accumulation, clipping active (it must see the true gradient) */
    o = base_opts(2, 8, 4);
    o.grad_clip = 0.05f;
    o.loss_scaling = 1;
    dsl_lossscale_init_dynamic(&o.scaler, 8.0, 2, 1.0, 2, 0);
    expect_fp32_bits(o, 20, 8192.0);

    /* stage 1, prescale with a predivide factor */
    o = base_opts(1, 8, 4);
    o.prescale = 1;
    o.predivide = 2.0f;
    o.loss_scaling = 1;
    dsl_lossscale_init_dynamic(&o.scaler, 1024.0, 1000, 1.0, 2, 0);
    expect_fp32_bits(o, 12, 1024.0);
}

TEST(an_overflow_at_min_loss_scale_should_stop_the_run)
{
    char err[DSL_ERR_LEN] = "";
    struct dsl_trainer_opts o = base_opts(0, 32, 1);
    o.loss_scaling = 1;
    dsl_lossscale_init_dynamic(&o.scaler, ldexp(1.0, 127), 1000, ldexp(1.0, 126), 1, 0);
    struct rig *g = calloc(1, sizeof(*g));
    ASSERT(g);
    rig_open(g, &o);
    struct dsl_step_result res;
    ASSERT_OK(step(g, 0, &res, err));
    ASSERT(res.skipped && res.next_scale == ldexp(1.0, 126));
    ASSERT_EQ(step(g, 1, &res, err), DSL_ECONFIG);
    ASSERT_CONTAINS(err, "step 2: gradient overflow with the loss scale already at "
                         "fp16.min_loss_scale");
    rig_close(g);
    free(g);
}

TEST(a_static_loss_scale_should_skip_overflows_without_changing_the_scale)
{
    char err[DSL_ERR_LEN];
    struct dsl_trainer_opts o = base_opts(0, 32, 1);
    o.loss_scaling = 1;
    struct dsl_fp16_config c = {.enabled = 1, .loss_scale = ldexp(1.0, 127)};
    dsl_lossscale_init(&o.scaler, &c);
    struct rig *g = calloc(1, sizeof(*g));
    ASSERT(g);
    rig_open(g, &o);
    float *p0 = copy_of(g->t.params, g->t.P);
    for (uint64_t k = 0; k < 4; k++) {
        struct dsl_step_result res;
        ASSERT_OK(step(g, k, &res, err));
        ASSERT(res.skipped && res.loss_scale == ldexp(1.0, 127));
        ASSERT(res.next_scale == ldexp(1.0, 127));
    }
    ASSERT_EQ(g->t.ls.skipped, 4);
    ASSERT_EQ(g->lr_last, 0);
    ASSERT(memcmp(p0, g->t.params, g->t.P * sizeof(float)) == 0);
    free(p0);
    rig_close(g);
    free(g);
}

/* the settings: fp16 turns loss scaling on (CPU included), bf16 and fp32 do not */
static void settings_for(struct dsl_train_settings *s, const char *key)
{
    char err[DSL_ERR_LEN];
    char a0[] = "dstrain", a1[] = "--backend", a2[] = "tcp", a3[] = "--micro-batch", a4[] = "8";
    char *argv[] = {a0, a1, a2, a3, a4, NULL};
    ASSERT_OK(dsl_train_settings_parse(s, 5, argv, err));
    if (key)
        ASSERT_OK(dsl_train_config_set(&s->cfg, key, "true", err));
    ASSERT_OK(dsl_train_settings_verify(s, 1, 1, err)); /* rank 1: no warnings printed */
}

TEST(settings_should_turn_loss_scaling_on_for_fp16_only)
{
    struct dsl_train_settings s;
    settings_for(&s, "fp16.enabled");
    ASSERT_EQ(s.to.loss_scaling, 1);
    ASSERT(s.to.scaler.dynamic && s.to.scaler.cur_scale == 65536.0);
    dsl_train_settings_release(&s);
    settings_for(&s, "bf16.enabled");
    ASSERT_EQ(s.to.loss_scaling, 0);
    dsl_train_settings_release(&s);
    settings_for(&s, NULL);
    ASSERT_EQ(s.to.loss_scaling, 0);
    dsl_train_settings_release(&s);
}

TEST(without_loss_scaling_the_step_should_report_scale_one_and_never_skip)
{
    char err[DSL_ERR_LEN];
    struct dsl_trainer_opts o = base_opts(0, 32, 1);
    struct rig *g = calloc(1, sizeof(*g));
    ASSERT(g);
    rig_open(g, &o);
    for (uint64_t k = 0; k < 3; k++) {
        struct dsl_step_result res;
        ASSERT_OK(step(g, k, &res, err));
        ASSERT(!res.skipped && res.loss_scale == 1.0 && res.next_scale == 1.0);
    }
    ASSERT_EQ(g->t.ls.skipped, 0);
    ASSERT_EQ(g->lr_last, 2);
    rig_close(g);
    free(g);
}

TEST_MAIN()
