/*
 * The fp16 loss scaler with DeepSpeed's algorithm (deepspeed/runtime/fp16/loss_scaler.py
 * DynamicLossScaler, itself from Megatron-LM): start at 2^initial_scale_power; on an
 * overflow skip the step and, once the hysteresis budget is used up, divide the scale
 * by 2 (not below min_loss_scale); after loss_scale_window steps without overflow
 * since the last one, multiply it by 2. A static scale (fp16.loss_scale > 0) never
 * changes, but an overflowing step is still skipped, as in DeepSpeed's FP16_Optimizer.
 * With fp16 disabled the scale is 1 and nothing is skipped unless told so.
 *
 * The overflow flag passed in must already be agreed over all ranks (an all-reduce of
 * "any inf/nan"), so every rank skips the same steps.
 */
#ifndef DSLAUNCH_LOSSSCALE_H
#define DSLAUNCH_LOSSSCALE_H

#include <stddef.h>
#include <stdint.h>

struct dsl_fp16_config;

struct dsl_lossscale {
    int dynamic;                /* 1: dynamic scaling */
    double cur_scale;           /* the loss is multiplied by this */
    double scale_factor;        /* 2 */
    long scale_window;          /* fp16.loss_scale_window */
    double min_scale;           /* fp16.min_loss_scale */
    int delayed_shift;          /* fp16.hysteresis */
    int cur_hysteresis;
    int consecutive_hysteresis; /* fp16.consecutive_hysteresis */
    int raise_error_at_min_scale; /* DeepSpeed's default: 1 */
    long cur_iter;              /* updates so far */
    long last_overflow_iter;    /* -1: none yet */
    uint64_t skipped;           /* steps skipped so far */
};

/** From the fp16 section: dynamic when enabled with loss_scale 0, static when
 *  loss_scale > 0, scale 1 when fp16 is disabled (NULL c: disabled). */
void dsl_lossscale_init(struct dsl_lossscale *ls, const struct dsl_fp16_config *c);

/** A dynamic scaler with explicit parameters (tests, and DeepSpeed's own defaults). */
void dsl_lossscale_init_dynamic(struct dsl_lossscale *ls, double init_scale,
                                long scale_window, double min_scale, int hysteresis,
                                int consecutive_hysteresis);

/**
 * Account for one step whose (agreed) gradient overflow flag is `overflow`.
 * Returns 1 when the step must be skipped, 0 when it is applied, or DSL_ECONFIG with
 * err set when an overflow happens at the minimum scale and raise_error_at_min_scale
 * is set (DeepSpeed's "Current loss scale already at minimum" exit).
 */
int dsl_lossscale_update(struct dsl_lossscale *ls, int overflow, char *err);

/** The state that changes while training, as one string for checkpoint metadata
 *  ("scale=65536 iter=12 last_overflow=-1 hysteresis=2 skipped=0"). Returns len. */
int dsl_lossscale_format(const struct dsl_lossscale *ls, char *buf, size_t n);
/** Restore what dsl_lossscale_format() wrote into an initialised scaler. Returns 0 or
 *  DSL_ECHECKPOINT with err set. */
int dsl_lossscale_restore(struct dsl_lossscale *ls, const char *s, char *err);

#endif
