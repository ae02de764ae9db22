/*
 * Learning-rate schedules with DeepSpeed's meaning (deepspeed/runtime/lr_schedules.py):
 * WarmupLR, WarmupDecayLR and WarmupCosineLR, log or linear warmup.
 *
 * Step counting, as in a DeepSpeed engine: the scheduler starts at
 * last_batch_iteration = -1 and is stepped once after every optimizer step that was
 * not skipped (fp16 overflow). So optimizer step k (0-based, counting only applied
 * steps) runs with the lr of iteration k-1:
 *   k = 0: the lr set when the scheduler was built (iteration -1): warmup_min_lr for
 *          WarmupLR / WarmupDecayLR, 0 for WarmupCosineLR;
 *   k >= 1: the formula at iteration k-1 (so with log or linear warmup steps 0 and 1
 *          both run at the minimum, exactly as DeepSpeed does).
 * dsl_lr_at() is the formula at a given iteration; dsl_sched_lr() is the lr of an
 * optimizer step and is what the trainer calls.
 */
#ifndef DSLAUNCH_SCHEDULER_H
#define DSLAUNCH_SCHEDULER_H

#include <stdint.h>

enum dsl_sched_type {
    DSL_SCHED_NONE = 0,          /* constant optimizer lr */
    DSL_SCHED_WARMUP_LR,         /* "WarmupLR" */
    DSL_SCHED_WARMUP_DECAY_LR,   /* "WarmupDecayLR" */
    DSL_SCHED_WARMUP_COSINE_LR,  /* "WarmupCosineLR" */
};

enum dsl_warmup_type {
    DSL_WARMUP_LOG = 0, /* "log" (DeepSpeed's default) */
    DSL_WARMUP_LINEAR,  /* "linear" */
};

/** scheduler.params of ds_config.json; defaults are DeepSpeed's. */
struct dsl_sched_config {
    enum dsl_sched_type type;
    double warmup_min_lr;      /* WarmupLR/WarmupDecayLR; default 0 */
    double warmup_max_lr;      /* default: optimizer lr (WarmupLR), 0.001 (WarmupDecayLR) */
    int warmup_max_lr_set;     /* 1 when warmup_max_lr was given */
    long warmup_num_steps;     /* default 1000; DeepSpeed uses max(2, this) */
    enum dsl_warmup_type warmup_type;
    long total_num_steps;      /* WarmupDecayLR/WarmupCosineLR; 0: not given (the
                                  trainer fills in the run's total optimizer steps) */
    double warmup_min_ratio;   /* WarmupCosineLR; default 0 */
    double cos_min_ratio;      /* WarmupCosineLR; default 0.0001 */
};

/** Defaults for type (DSL_SCHED_NONE gives a constant lr). */
void dsl_sched_config_init(struct dsl_sched_config *s, enum dsl_sched_type type);

/**
 * DeepSpeed's get_lr() at last_batch_iteration `it` (it >= -1; -1 is the value the
 * scheduler sets when it is built). base_lr is the optimizer's configured lr (used by
 * WarmupCosineLR, WarmupLR without warmup_max_lr, and DSL_SCHED_NONE).
 * total_num_steps must be set (> 0) for the decay schedules; with 0 they behave as if
 * it were warmup_num_steps.
 */
double dsl_lr_at(const struct dsl_sched_config *s, double base_lr, long it);

/** The lr of optimizer step `step` (0-based, applied steps only): dsl_lr_at(step-1). */
double dsl_sched_lr(const struct dsl_sched_config *s, double base_lr, uint64_t step);

/** A scheduler bound to its base lr, for dsl_trainer_opts.lr_fn / lr_ctx. */
struct dsl_sched {
    struct dsl_sched_config c;
    double base_lr;
};

/** Bind c and base_lr; total_steps replaces a missing (0) total_num_steps. */
void dsl_sched_init(struct dsl_sched *s, const struct dsl_sched_config *c, double base_lr,
                    uint64_t total_steps);
/** dsl_lr_fn-compatible: ctx is a struct dsl_sched *, step as in dsl_sched_lr(). */
float dsl_sched_lr_fn(void *ctx, uint64_t step);

/** "WarmupLR" etc. for a type; "none" for DSL_SCHED_NONE. */
const char *dsl_sched_type_name(enum dsl_sched_type t);

#endif
