/*
 * LR schedules and the fp16 loss scaler against DeepSpeed's algorithms. The expected
 * values were computed with a straight Python port of deepspeed/runtime/lr_schedules.py
 * (WarmupLR, WarmupDecayLR, WarmupCosineLR) and of DynamicLossScaler.update_scale()
 * from deepspeed/runtime/fp16/loss_scaler.py, and are pasted here as tables.
 */
#include <math.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/train/lossscale.h"
#include "dslaunch/train/scheduler.h"
#include "dslaunch/train/train_config.h"
#include "test.h"

enum sched_case { WL_log_default, WL_lin, WL_W0, WD_lin, WD_log, WC_lin, WC_log };

static void make(enum sched_case c, struct dsl_sched_config *s, double *base)
{
    *base = 1e-3;
    switch (c) {
    case WL_log_default: /* WarmupLR with every default; max lr = optimizer lr */
        dsl_sched_config_init(s, DSL_SCHED_WARMUP_LR);
        break;
    case WL_lin:
        dsl_sched_config_init(s, DSL_SCHED_WARMUP_LR);
        s->warmup_min_lr = 1e-5;
        s->warmup_max_lr = 3e-3;
        s->warmup_max_lr_set = 1;
        s->warmup_num_steps = 10;
        s->warmup_type = DSL_WARMUP_LINEAR;
        break;
    case WL_W0: /* warmup_num_steps 0 is raised to 2 */
        dsl_sched_config_init(s, DSL_SCHED_WARMUP_LR);
        s->warmup_max_lr = 0.002;
        s->warmup_max_lr_set = 1;
        s->warmup_num_steps = 0;
        break;
    case WD_lin:
        dsl_sched_config_init(s, DSL_SCHED_WARMUP_DECAY_LR);
        s->warmup_min_lr = 1e-4;
        s->warmup_max_lr = 1e-2;
        s->warmup_max_lr_set = 1;
        s->warmup_num_steps = 20;
        s->warmup_type = DSL_WARMUP_LINEAR;
        s->total_num_steps = 100;
        break;
    case WD_log: /* max lr not given: WarmupDecayLR's own default 0.001 */
        dsl_sched_config_init(s, DSL_SCHED_WARMUP_DECAY_LR);
        s->warmup_num_steps = 20;
        s->total_num_steps = 100;
        *base = 0.5; /* must not matter */
        break;
    case WC_lin:
        dsl_sched_config_init(s, DSL_SCHED_WARMUP_COSINE_LR);
        s->warmup_min_ratio = 0.1;
        s->warmup_num_steps = 50;
        s->cos_min_ratio = 0.01;
        s->warmup_type = DSL_WARMUP_LINEAR;
        s->total_num_steps = 938;
        break;
    case WC_log:
        dsl_sched_config_init(s, DSL_SCHED_WARMUP_COSINE_LR);
        s->warmup_num_steps = 50;
        s->total_num_steps = 938;
        *base = 2e-3;
        break;
    }
}

static const struct {
    enum sched_case c;
    long it;
    double lr;
} sched_table[] = {
    {WL_log_default, -1, 0},
    {WL_log_default, 0, 0},
    {WL_log_default, 1, 0.00010034333188799373},
    {WL_log_default, 2, 0.00015904041823988749},
    {WL_log_default, 5, 0.00025938375012788122},
    {WL_log_default, 99, 0.00066666666666666675},
    {WL_log_default, 100, 0.00066810712459421432},
    {WL_log_default, 101, 0.00066953339058730592},
    {WL_log_default, 500, 0.00089994590862241524},
    {WL_log_default, 999, 0.001},
    {WL_log_default, 1000, 0.001},
    {WL_log_default, 5000, 0.001},
    {WL_lin, -1, 1.0000000000000001e-05},
    {WL_lin, 0, 1.0000000000000001e-05},
    {WL_lin, 1, 0.00030900000000000003},
    {WL_lin, 7, 0.0021029999999999998},
    {WL_lin, 9, 0.0027010000000000003},
    {WL_lin, 10, 0.0030000000000000001},
    {WL_lin, 11, 0.0030000000000000001},
    {WL_lin, 50, 0.0030000000000000001},
    {WL_W0, -1, 0},
    {WL_W0, 0, 0},
    {WL_W0, 1, 0.002},
    {WL_W0, 7, 0.002},
    {WL_W0, 9, 0.002},
    {WL_W0, 10, 0.002},
    {WL_W0, 11, 0.002},
    {WL_W0, 50, 0.002},
    {WD_lin, -1, 0.0001},
    {WD_lin, 0, 0.0001},
    {WD_lin, 3, 0.001585},
    {WD_lin, 19, 0.0095049999999999996},
    {WD_lin, 20, 0.01},
    {WD_lin, 21, 0.0098762500000000013},
    {WD_lin, 60, 0.0050500000000000007},
    {WD_lin, 99, 0.00022375000000000004},
    {WD_lin, 100, 0.0001},
    {WD_lin, 101, 0.0001},
    {WD_lin, 150, 0.0001},
    {WD_log, 0, 0},
    {WD_log, 3, 0.00046275642631951836},
    {WD_log, 19, 0.001},
    {WD_log, 20, 0.001},
    {WD_log, 21, 0.0009875000000000001},
    {WD_log, 60, 0.00050000000000000001},
    {WD_log, 99, 1.2500000000000001e-05},
    {WD_log, 100, 0},
    {WD_log, 101, 0},
    {WC_lin, -1, 0},
    {WC_lin, 0, 0.0001},
    {WC_lin, 1, 0.00011800000000000001},
    {WC_lin, 49, 0.00098200000000000002},
    {WC_lin, 50, 0.00099999690223431868},
    {WC_lin, 51, 0.00099998760897604681},
    {WC_lin, 100, 0.00099196453794987639},
    {WC_lin, 500, 0.00049274267354162862},
    {WC_lin, 937, 1.0000000000000001e-05},
    {WC_lin, 938, 1.0003097765681397e-05},
    {WC_lin, 999, 2.1860157350780196e-05},
    {WC_lin, 2000, 0.00090812272900044804},
    {WC_log, 0, 0},
    {WC_log, 1, 0.00035436764027111582},
    {WC_log, 49, 0.002},
    {WC_log, 50, 0.0019999937425133237},
    {WC_log, 51, 0.0019999749701316146},
    {WC_log, 100, 0.0019837683666587506},
    {WC_log, 938, 2.0625748667641831e-07},
};

TEST(scheduler_values_should_equal_deepspeeds_formulas_within_1e_7)
{
    for (size_t i = 0; i < sizeof(sched_table) / sizeof(sched_table[0]); i++) {
        struct dsl_sched_config s;
        double base, got;
        make(sched_table[i].c, &s, &base);
        got = dsl_lr_at(&s, base, sched_table[i].it);
        if (fabs(got - sched_table[i].lr) > 1e-7 * fmax(1.0, fabs(sched_table[i].lr)) ||
            fabs(got - sched_table[i].lr) > 1e-12 + 1e-9 * fabs(sched_table[i].lr)) {
            fprintf(stderr, "case %d it %ld: got %.17g want %.17g\n", (int)sched_table[i].c,
                    sched_table[i].it, got, sched_table[i].lr);
            ASSERT(0);
        }
    }
}

TEST(scheduler_should_run_optimizer_step_k_at_iteration_k_minus_1)
{
    struct dsl_sched_config s;
    double base;
    make(WD_lin, &s, &base);
    /* step 0 runs with the value set at construction, step k with iteration k-1 */
    ASSERT(dsl_sched_lr(&s, base, 0) == dsl_lr_at(&s, base, -1));
    ASSERT(dsl_sched_lr(&s, base, 0) == 1e-4);
    for (uint64_t k = 1; k < 200; k++)
        ASSERT(dsl_sched_lr(&s, base, k) == dsl_lr_at(&s, base, (long)k - 1));
    make(WC_lin, &s, &base);
    ASSERT(dsl_sched_lr(&s, base, 0) == 0.0); /* WarmupCosineLR starts at 0 */
}

TEST(scheduler_without_total_steps_should_take_the_runs_total)
{
    struct dsl_sched_config c;
    struct dsl_sched s;
    dsl_sched_config_init(&c, DSL_SCHED_WARMUP_COSINE_LR);
    c.warmup_num_steps = 50;
    c.warmup_type = DSL_WARMUP_LINEAR;
    dsl_sched_init(&s, &c, 1e-3, 938);
    ASSERT_EQ(s.c.total_num_steps, 938);
    struct dsl_sched_config ref;
    double base;
    make(WC_lin, &ref, &base);
    ref.warmup_min_ratio = 0.0;
    ref.cos_min_ratio = 0.0001;
    for (uint64_t k = 0; k < 1000; k += 37)
        ASSERT(dsl_sched_lr_fn(&s, k) == (float)dsl_sched_lr(&ref, 1e-3, k));
    /* an explicit total wins */
    c.total_num_steps = 100;
    dsl_sched_init(&s, &c, 1e-3, 938);
    ASSERT_EQ(s.c.total_num_steps, 100);
}

TEST(scheduler_none_should_keep_the_optimizer_lr)
{
    struct dsl_sched_config s;
    dsl_sched_config_init(&s, DSL_SCHED_NONE);
    for (long it = -1; it < 10; it++)
        ASSERT(dsl_lr_at(&s, 3e-4, it) == 3e-4);
}

/* ---- loss scale ---------------------------------------------------------------------- */

static const char overflow_seq[] = "0001100000101110010000000011111000000";

/* DeepSpeed with init 2^16, window 4, hysteresis 2, min 1 */
static const long want_scale[2][37] = {
    {65536, 65536, 65536, 65536, 32768, 32768, 32768, 32768, 65536, 65536, 65536, 65536, 32768,
     16384, 8192, 8192, 8192, 4096, 4096, 4096, 4096, 8192, 8192, 8192, 8192, 16384, 16384,
     8192, 4096, 2048, 1024, 1024, 1024, 1024, 2048, 2048, 2048},
    {65536, 65536, 65536, 65536, 32768, 32768, 32768, 32768, 65536, 65536, 65536, 65536, 65536,
     32768, 16384, 16384, 16384, 16384, 16384, 16384, 16384, 32768, 32768, 32768, 32768, 65536,
     65536, 32768, 16384, 8192, 4096, 4096, 4096, 4096, 8192, 8192, 8192},
};
static const int want_hyst[2][37] = {
    {2, 2, 2, 1, 1, 1, 1, 1, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 1, 1, 1, 1,
     1, 1, 1, 1, 2, 2, 2},
    {2, 2, 2, 1, 1, 2, 2, 2, 2, 2, 1, 2, 1, 1, 1, 2, 2, 1, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1,
     1, 2, 2, 2, 2, 2, 2},
};

TEST(loss_scale_trajectory_should_equal_deepspeeds_dynamic_loss_scaler)
{
    for (int cons = 0; cons < 2; cons++) {
        struct dsl_lossscale ls;
        char err[DSL_ERR_LEN];
        uint64_t skipped = 0;
        dsl_lossscale_init_dynamic(&ls, 65536.0, 4, 1.0, 2, cons);
        for (size_t i = 0; i < strlen(overflow_seq); i++) {
            int of = overflow_seq[i] == '1';
            int r = dsl_lossscale_update(&ls, of, err);
            ASSERT_EQ(r, of);
            skipped += (uint64_t)of;
            if ((long)ls.cur_scale != want_scale[cons][i] ||
                ls.cur_hysteresis != want_hyst[cons][i]) {
                fprintf(stderr, "consecutive %d step %zu: scale %g hysteresis %d, want %ld %d\n",
                        cons, i, ls.cur_scale, ls.cur_hysteresis, want_scale[cons][i],
                        want_hyst[cons][i]);
                ASSERT(0);
            }
        }
        ASSERT_EQ(ls.skipped, skipped);
    }
}

TEST(loss_scale_should_fail_when_overflowing_at_the_minimum_scale)
{
    struct dsl_lossscale ls;
    char err[DSL_ERR_LEN];
    dsl_lossscale_init_dynamic(&ls, 8.0, 1000, 2.0, 1, 0);
    ASSERT_EQ(dsl_lossscale_update(&ls, 1, err), 1);
    ASSERT(ls.cur_scale == 4.0);
    ASSERT_EQ(dsl_lossscale_update(&ls, 1, err), 1);
    ASSERT(ls.cur_scale == 2.0);
    ASSERT_EQ(dsl_lossscale_update(&ls, 1, err), DSL_ECONFIG);
    ASSERT_CONTAINS(err, "min_loss_scale");
}

TEST(loss_scale_should_follow_the_fp16_section)
{
    struct dsl_train_config cfg;
    struct dsl_lossscale ls;
    char err[DSL_ERR_LEN];
    dsl_train_config_init(&cfg);
    dsl_lossscale_init(&ls, &cfg.fp16); /* disabled: 1, never skips by itself */
    ASSERT(ls.cur_scale == 1.0 && !ls.dynamic);
    ASSERT_EQ(dsl_lossscale_update(&ls, 0, err), 0);
    cfg.fp16.enabled = 1; /* DeepSpeed defaults: 2^16, window 1000, hysteresis 2 */
    dsl_lossscale_init(&ls, &cfg.fp16);
    ASSERT(ls.dynamic && ls.cur_scale == 65536.0 && ls.scale_window == 1000);
    ASSERT_EQ(ls.delayed_shift, 2);
    ASSERT(ls.min_scale == 1.0);
    cfg.fp16.loss_scale = 128; /* static: never changes, but overflow still skips */
    dsl_lossscale_init(&ls, &cfg.fp16);
    ASSERT(!ls.dynamic && ls.cur_scale == 128.0);
    ASSERT_EQ(dsl_lossscale_update(&ls, 1, err), 1);
    for (int i = 0; i < 3000; i++)
        ASSERT_EQ(dsl_lossscale_update(&ls, 0, err), 0);
    ASSERT(ls.cur_scale == 128.0);
    ASSERT_EQ(ls.skipped, 1);
    dsl_train_config_release(&cfg);
}

TEST(loss_scale_state_should_round_trip_through_its_string)
{
    struct dsl_lossscale a, b;
    char err[DSL_ERR_LEN], buf[256];
    dsl_lossscale_init_dynamic(&a, 65536.0, 4, 1.0, 2, 0);
    for (size_t i = 0; i < 20; i++)
        dsl_lossscale_update(&a, overflow_seq[i] == '1', err);
    dsl_lossscale_format(&a, buf, sizeof(buf));
    dsl_lossscale_init_dynamic(&b, 65536.0, 4, 1.0, 2, 0);
    ASSERT_OK(dsl_lossscale_restore(&b, buf, err));
    /* continuing both gives the same trajectory */
    for (size_t i = 20; i < strlen(overflow_seq); i++) {
        dsl_lossscale_update(&a, overflow_seq[i] == '1', err);
        dsl_lossscale_update(&b, overflow_seq[i] == '1', err);
        ASSERT(a.cur_scale == b.cur_scale);
        ASSERT_EQ(a.cur_hysteresis, b.cur_hysteresis);
    }
    ASSERT_EQ(a.skipped, b.skipped);
    ASSERT_ERR(dsl_lossscale_restore(&b, "scale=abc", err));
    ASSERT_ERR(dsl_lossscale_restore(&b, "scale=0 iter=1 last_overflow=-1 hysteresis=2 skipped=0", err));
    ASSERT_ERR(dsl_lossscale_restore(&b, "scale=2 iter=1 last_overflow=-1 hysteresis=2 skipped=0 x", err));
    /* numbers from a file: overflowing, negative, not finite, not whole are all refused */
    static const char *const bad_state[] = {
        "scale=2 iter=9223372036854775808 last_overflow=-1 hysteresis=2 skipped=0",
        "scale=2 iter=1 last_overflow=-2 hysteresis=2 skipped=0",
        "scale=2 iter=1 last_overflow=-1 hysteresis=2147483648 skipped=0",
        "scale=2 iter=1 last_overflow=-1 hysteresis=2 skipped=-1",
        "scale=inf iter=1 last_overflow=-1 hysteresis=2 skipped=0",
        "scale=nan iter=1 last_overflow=-1 hysteresis=2 skipped=0",
        "scale=2 iter=1.5 last_overflow=-1 hysteresis=2 skipped=0",
        "scale=2 iter=1 last_overflow=-1 hysteresis=2",
        "scale=2 iter= last_overflow=-1 hysteresis=2 skipped=0",
        "scale=2  iter=1 last_overflow=-1 hysteresis=2 skipped=0",
    };
    for (size_t i = 0; i < sizeof(bad_state) / sizeof(bad_state[0]); i++) {
        ASSERT_EQ(dsl_lossscale_restore(&b, bad_state[i], err), DSL_ECHECKPOINT);
        ASSERT_CONTAINS(err, "bad loss-scale state '");
    }
}

TEST_MAIN()
