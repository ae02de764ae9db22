/*
 * DeepSpeed's learning-rate schedules as pure functions of the iteration (see
 * scheduler.h for the step-counting convention). Ported from
 * deepspeed/runtime/lr_schedules.py, keeping its quirks on purpose so that a config
 * gives the same lr curve here as under DeepSpeed:
 *   - warmup_num_steps is raised to 2 (log(1) would divide by zero);
 *   - linear warmup is it / warmup_num_steps, log warmup log(it + 1) / log(warmup);
 *   - WarmupDecayLR decays linearly to 0 at total_num_steps, clamped at 0 after;
 *   - WarmupCosineLR works in ratios of the optimizer's lr and counts the cosine from
 *     it - warmup + 1, so its first post-warmup step is already below the peak;
 *   - before the first step (it = -1) WarmupLR/WarmupDecayLR hold warmup_min_lr and
 *     WarmupCosineLR holds 0.
 */
#include <limits.h>
#include <math.h>

#include "dslaunch/train/scheduler.h"
#include "dslaunch/common/banned.h"

#define DSL_PI 3.14159265358979323846

void dsl_sched_config_init(struct dsl_sched_config *s, enum dsl_sched_type type)
{
    s->type = type;
    s->warmup_min_lr = 0.0;
    s->warmup_max_lr = 0.001;
    s->warmup_max_lr_set = 0;
    s->warmup_num_steps = 1000;
    s->warmup_type = DSL_WARMUP_LOG;
    s->total_num_steps = 0;
    s->warmup_min_ratio = 0.0;
    s->cos_min_ratio = 0.0001;
}

static long warmup_steps(const struct dsl_sched_config *s)
{
    return s->warmup_num_steps < 2 ? 2 : s->warmup_num_steps;
}

/* The warmup fraction in [0, 1) for it < warmup steps. */
static double warmup_gamma(const struct dsl_sched_config *s, long it)
{
    long w = warmup_steps(s);
    if (s->warmup_type == DSL_WARMUP_LINEAR)
        return (double)it / (double)w;
    return (1.0 / log((double)w)) * log((double)(it + 1));
}

static double max_lr(const struct dsl_sched_config *s, double base_lr)
{
    if (s->warmup_max_lr_set)
        return s->warmup_max_lr;
    /* WarmupLR defaults to the optimizer's lr, WarmupDecayLR to 0.001 */
    return s->type == DSL_SCHED_WARMUP_LR ? base_lr : 0.001;
}

static long total_steps(const struct dsl_sched_config *s)
{
    return s->total_num_steps > 0 ? s->total_num_steps : warmup_steps(s);
}

double dsl_lr_at(const struct dsl_sched_config *s, double base_lr, long it)
{
    long w = warmup_steps(s);
    switch (s->type) {
    case DSL_SCHED_NONE:
        return base_lr;
    case DSL_SCHED_WARMUP_LR:
    case DSL_SCHED_WARMUP_DECAY_LR: {
        double lo = s->warmup_min_lr, delta = max_lr(s, base_lr) - lo, gamma;
        if (it < 0)
            return lo;
        if (it < w)
            gamma = warmup_gamma(s, it);
        else if (s->type == DSL_SCHED_WARMUP_LR)
            gamma = 1.0;
        else {
            long T = total_steps(s);
            double den = (double)(T - w);
            if (den < 1.0)
                den = 1.0;
            gamma = (double)(T - it) / den;
            if (gamma < 0.0)
                gamma = 0.0;
        }
        return lo + delta * gamma;
    }
    case DSL_SCHED_WARMUP_COSINE_LR: {
        double ratio;
        if (it < 0)
            return 0.0;
        if (it < w) {
            ratio = warmup_gamma(s, it);
            ratio = s->warmup_min_ratio + ratio * (1.0 - s->warmup_min_ratio);
        } else {
            double real_last = (double)(it - w + 1);
            double real_total = (double)(total_steps(s) - w);
            /* DeepSpeed divides by zero here when total == warmup; hold the floor */
            if (real_total <= 0.0)
                ratio = s->cos_min_ratio;
            else {
                ratio = (1.0 + cos(DSL_PI * real_last / real_total)) / 2.0;
                ratio = s->cos_min_ratio + (1.0 - s->cos_min_ratio) * ratio;
            }
            if (ratio < 0.0)
                ratio = 0.0;
        }
        return base_lr * ratio;
    }
    }
    return base_lr;
}

double dsl_sched_lr(const struct dsl_sched_config *s, double base_lr, uint64_t step)
{
    long it = step > (uint64_t)LONG_MAX ? LONG_MAX : (long)step - 1;
    return dsl_lr_at(s, base_lr, it);
}

void dsl_sched_init(struct dsl_sched *s, const struct dsl_sched_config *c, double base_lr,
                    uint64_t total_steps_run)
{
    s->c = *c;
    s->base_lr = base_lr;
    if (s->c.total_num_steps <= 0)
        s->c.total_num_steps = total_steps_run > (uint64_t)LONG_MAX ? LONG_MAX
                                                                    : (long)total_steps_run;
}

float dsl_sched_lr_fn(void *ctx, uint64_t step)
{
    const struct dsl_sched *s = ctx;
    return (float)dsl_sched_lr(&s->c, s->base_lr, step);
}

const char *dsl_sched_type_name(enum dsl_sched_type t)
{
    switch (t) {
    case DSL_SCHED_NONE:
        return "none";
    case DSL_SCHED_WARMUP_LR:
        return "WarmupLR";
    case DSL_SCHED_WARMUP_DECAY_LR:
        return "WarmupDecayLR";
    case DSL_SCHED_WARMUP_COSINE_LR:
        return "WarmupCosineLR";
    }
    return "?";
}
