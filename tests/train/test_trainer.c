/*
 * The ZeRO step at world size 1, in process: every stage, bucket size, overlap
 * setting and accumulation mode (and at stage 3 persistence and prefetch) must give
 * the same parameters bit for bit, and the model-state bytes must equal the formula.
 * (Multi-rank runs are in ranks.sh.)
 */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/model/data.h"
#include "dslaunch/common/error.h"
#include "dslaunch/train/trainer.h"
#include "test.h"
#include "world_release.h"
#include "dslaunch/common/banned.h"

struct variant {
    int stage;
    size_t bucket;
    int overlap;
    size_t micro, accum;
    size_t persist;  /* stage 3: layers of at most this many parameters stay whole */
    int noprefetch;  /* stage 3: one layer at a time */
};

static double last_loss; /* the loss train_variant's last step reported */

static float *train_variant(const struct variant *v, size_t steps, size_t *P,
                            struct dsl_mem_report *mem)
{
    char err[DSL_ERR_LEN];
    struct dsl_comm *c;
    struct dsl_comm_opts co = {.backend = "tcp", .deterministic = 1};
    unsetenv("WORLD_SIZE");
    ASSERT_OK(dsl_comm_open_env(&c, &co, err));
    struct dsl_dataset tr, te;
    struct dsl_data_opts dopt = {.name = "synthetic", .synth_train = 256, .synth_test = 64,
                                 .synth_dim = 20, .synth_classes = 4, .seed = 5};
    ASSERT_OK(dsl_data_load(&tr, &te, &dopt, err));
    struct dsl_model m;
    struct dsl_model_spec sp = {.type = "mlp", .in_dim = 20, .out_dim = 4, .nhidden = 2,
                                .hidden = {16, 12}, .max_batch = v->micro, .seg_max = 64};
    ASSERT_OK(dsl_model_create(&m, &sp, err));
    struct dsl_trainer t;
    struct dsl_trainer_opts o = {
        .micro_batch = v->micro, .grad_accum = v->accum, .zero_stage = v->stage,
        .bucket_elems = v->bucket, .overlap_comm = v->overlap, .deterministic = 1,
        .predivide = 1.0f, .seed = 11, .z3_prefetch = v->noprefetch ? 0 : 50000000,
        .z3_max_live = 1000000000, .z3_persist = v->persist,
        .optim = {DSL_OPTIM_ADAM, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 0}};
    ASSERT_OK(dsl_trainer_init(&t, &o, c, &m, err));
    struct dsl_sampler s;
    ASSERT_OK(dsl_sampler_init(&s, tr.n, t.G, 3, 1, 0, err));
    double first = 0, last = 0;
    for (size_t k = 0; k < steps; k++) {
        struct dsl_step_result res;
        ASSERT_OK(dsl_trainer_step(&t, &tr, dsl_sampler_step(&s, k / s.steps_per_epoch,
                                                             k % s.steps_per_epoch),
                                   0, &res, err));
        /* stage 0 with overlap and one micro step streams: its buckets' updates are
         * left to the next forward (trainer.c, stream_end) */
        int streamed = v->stage == 0 && v->overlap && v->accum == 1;
        ASSERT_EQ(t.npend, streamed ? t.nbk : 0);
        if (k == 0)
            first = res.loss;
        last = res.loss;
    }
    ASSERT(last < first);
    last_loss = last;
    ASSERT_OK(dsl_trainer_sync(&t, err)); /* a streamed step leaves updates running */
    *P = t.P;
    dsl_trainer_memory(&t, mem);
    float *p = malloc(t.P * sizeof(float));
    ASSERT_OK(dsl_trainer_params_to_host(&t, p, err)); /* stage 3: from the shards */
    dsl_sampler_release(&s);
    dsl_trainer_release(&t);
    world_release(&m, &tr, &te, c);
    return p;
}

TEST(every_stage_and_bucket_layout_should_give_identical_parameters_at_world_one)
{
    static const struct variant vs[] = {
        {0, 0, 0, 8, 4, 0, 0}, {0, 100, 1, 8, 4, 0, 0}, {1, 0, 0, 8, 4, 0, 0},
        {1, 100, 1, 8, 4, 0, 0},
        {2, 100, 0, 8, 4, 0, 0}, {2, 100, 1, 8, 4, 0, 0}, {2, 30, 1, 8, 4, 0, 0},
        {2, 1000, 1, 8, 4, 0, 0},
        {3, 100, 0, 8, 4, 0, 0}, {3, 100, 1, 8, 4, 0, 0}, {3, 30, 1, 8, 4, 0, 0},
        {3, 1000, 1, 8, 4, 0, 0},
        {3, 0, 1, 8, 4, 0, 0},   {3, 100, 1, 8, 4, 60, 0}, {3, 100, 1, 8, 4, 0, 1},
        {3, 100, 1, 8, 4, 1000, 0},
    };
    size_t P;
    struct dsl_mem_report mem;
    float *ref = train_variant(&vs[0], 20, &P, &mem);
    for (size_t i = 1; i < sizeof(vs) / sizeof(vs[0]); i++) {
        float *p = train_variant(&vs[i], 20, &P, &mem);
        if (memcmp(ref, p, P * sizeof(float)) != 0)
            DSL_FAIL_("variant %zu (stage %d bucket %zu overlap %d) differs", i, vs[i].stage,
                      vs[i].bucket, vs[i].overlap);
        free(p);
    }
    free(ref);
}

/* one micro step: stage 0 with overlap updates each bucket as its reduction completes
 * and reduces the loss behind the last bucket (trainer.c: streams_optimizer) */
TEST(a_streamed_optimizer_should_give_the_same_parameters_and_loss_as_the_full_step)
{
    static const struct variant vs[] = {
        {0, 0, 0, 32, 1, 0, 0}, {0, 100, 1, 32, 1, 0, 0}, {0, 30, 1, 32, 1, 0, 0},
        {0, 1000, 1, 32, 1, 0, 0},
        {1, 100, 1, 32, 1, 0, 0}, {2, 100, 1, 32, 1, 0, 0}, {3, 100, 1, 32, 1, 0, 0},
    };
    size_t P;
    struct dsl_mem_report mem;
    float *ref = train_variant(&vs[0], 20, &P, &mem);
    double ref_loss = last_loss;
    for (size_t i = 1; i < sizeof(vs) / sizeof(vs[0]); i++) {
        float *p = train_variant(&vs[i], 20, &P, &mem);
        if (memcmp(ref, p, P * sizeof(float)) != 0)
            DSL_FAIL_("variant %zu (stage %d bucket %zu overlap %d) differs", i, vs[i].stage,
                      vs[i].bucket, vs[i].overlap);
        ASSERT(last_loss == ref_loss);
        free(p);
    }
    free(ref);
}

TEST(model_state_bytes_should_match_the_zero_formula_at_world_one)
{
    size_t P;
    struct dsl_mem_report m;
    struct variant v0 = {0, 0, 0, 8, 1, 0, 0}, v1 = {1, 0, 0, 8, 1, 0, 0},
                   v2 = {2, 100, 1, 8, 1, 0, 0};
    free(train_variant(&v0, 2, &P, &m));
    ASSERT_EQ(m.params + m.grads + m.optim, 16 * P);
    ASSERT_EQ(m.buckets + m.accum, 0);
    free(train_variant(&v1, 2, &P, &m));
    ASSERT_EQ(m.params + m.grads + m.optim, 8 * P + 8 * P);
    free(train_variant(&v2, 2, &P, &m));
    ASSERT_EQ(m.params + m.grads + m.optim, 4 * P + 12 * P);
    ASSERT_EQ(m.buckets, 2 * m.max_bucket * sizeof(float));
    ASSERT(m.max_bucket <= 100);
    ASSERT_EQ(m.gathered, 0);
    /* stage 3: 16P/N, plus two windows of the largest layer (20 x 16 + 16 = 336) and
     * the persistent layers whole (the last, 12 x 4 + 4 = 52, under 60) */
    struct variant v3 = {3, 100, 1, 8, 1, 0, 0}, v3p = {3, 100, 1, 8, 1, 60, 0},
                   v3n = {3, 100, 1, 8, 1, 0, 1};
    free(train_variant(&v3, 2, &P, &m));
    ASSERT_EQ(m.params + m.grads + m.optim, 16 * P);
    ASSERT_EQ(m.buckets, 2 * m.max_bucket * sizeof(float));
    ASSERT_EQ(m.gathered, 2 * 336 * sizeof(float));
    ASSERT_EQ(m.total, m.params + m.grads + m.optim + m.buckets + m.gathered);
    free(train_variant(&v3p, 2, &P, &m));
    ASSERT_EQ(m.gathered, (2 * 336 + 52) * sizeof(float));
    free(train_variant(&v3n, 2, &P, &m));
    ASSERT_EQ(m.gathered, 336 * sizeof(float));
}

/* stage 3 gathers a layer whole: a layer over stage3_max_live_parameters, or a model
 * that cannot take its parameters a layer at a time, is refused with the reason */
TEST(stage_three_should_refuse_what_it_cannot_honour)
{
    char err[DSL_ERR_LEN];
    struct dsl_comm *c;
    struct dsl_comm_opts co = {.backend = "tcp", .deterministic = 1};
    unsetenv("WORLD_SIZE");
    ASSERT_OK(dsl_comm_open_env(&c, &co, err));
    struct dsl_model m;
    struct dsl_model_spec sp = {.type = "mlp", .in_dim = 20, .out_dim = 4, .nhidden = 2,
                                .hidden = {16, 12}, .max_batch = 8, .seg_max = 64};
    ASSERT_OK(dsl_model_create(&m, &sp, err));
    struct dsl_trainer t;
    struct dsl_trainer_opts o = {
        .micro_batch = 8, .grad_accum = 1, .zero_stage = 3, .deterministic = 1,
        .predivide = 1.0f, .seed = 11, .z3_prefetch = 1, .z3_max_live = 300,
        .optim = {DSL_OPTIM_ADAM, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 0}};
    ASSERT_EQ(dsl_trainer_init(&t, &o, c, &m, err), DSL_ECONFIG);
    ASSERT(strstr(err, "stage3_max_live_parameters") && strstr(err, "336"));
    /* 336 fits, two layers do not: one window, no prefetch */
    o.z3_max_live = 400;
    ASSERT_OK(dsl_trainer_init(&t, &o, c, &m, err));
    ASSERT_EQ(t.nwin, 1);
    dsl_trainer_release(&t);
    /* a model without evaluate_src: it cannot take its parameters a layer at a time */
    const struct dsl_model_ops *ops = m.ops;
    struct dsl_model_ops noz3 = *ops;
    noz3.evaluate_src = NULL;
    m.ops = &noz3;
    o.z3_max_live = 1000000;
    ASSERT_EQ(dsl_trainer_init(&t, &o, c, &m, err), DSL_ENOTSUP);
    ASSERT(strstr(err, "stage 3 is not implemented for this model"));
    m.ops = ops;
    dsl_model_release(&m);
    dsl_comm_close(c);
}

int main(int argc, char **argv)
{
    return RUN_TESTS(argc, argv);
}
