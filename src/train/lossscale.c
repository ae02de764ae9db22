/*
 * DeepSpeed's DynamicLossScaler.update_scale(), step for step (see lossscale.h):
 *
 *   overflow:    if hysteresis is 1 or used up: scale = max(scale / 2, min_scale)
 *                (an error when already at min_scale and raise_error_at_min_scale);
 *                else cur_hysteresis -= 1. last_overflow_iter = cur_iter.
 *   no overflow: with consecutive_hysteresis, cur_hysteresis is refilled at once;
 *                every scale_window iterations after the last overflow the scale is
 *                doubled (and, without consecutive_hysteresis, the hysteresis
 *                refilled).
 *   cur_iter += 1 either way.
 * The window test is (cur_iter - last_overflow_iter) % scale_window == 0 with
 * last_overflow_iter = -1 at the start, exactly as in DeepSpeed, so the first
 * increase comes after scale_window - 1 clean steps.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/train/lossscale.h"
#include "dslaunch/train/train_config.h"
#include "dslaunch/common/banned.h"

static void init_static(struct dsl_lossscale *ls, double scale)
{
    memset(ls, 0, sizeof(*ls));
    ls->dynamic = 0;
    ls->cur_scale = scale;
    ls->scale_factor = 2.0;
    ls->scale_window = 1000;
    ls->min_scale = 1.0;
    ls->delayed_shift = 1;
    ls->cur_hysteresis = 1;
    ls->raise_error_at_min_scale = 1;
    ls->last_overflow_iter = -1;
}

void dsl_lossscale_init_dynamic(struct dsl_lossscale *ls, double init_scale,
                                long scale_window, double min_scale, int hysteresis,
                                int consecutive_hysteresis)
{
    init_static(ls, init_scale);
    ls->dynamic = 1;
    ls->scale_window = scale_window > 0 ? scale_window : 1;
    ls->min_scale = min_scale;
    ls->delayed_shift = hysteresis;
    ls->cur_hysteresis = hysteresis;
    ls->consecutive_hysteresis = consecutive_hysteresis;
}

void dsl_lossscale_init(struct dsl_lossscale *ls, const struct dsl_fp16_config *c)
{
    if (!c || !c->enabled)
        init_static(ls, 1.0);
    else if (c->loss_scale > 0.0)
        init_static(ls, c->loss_scale);
    else
        dsl_lossscale_init_dynamic(ls, ldexp(1.0, c->initial_scale_power),
                                   c->loss_scale_window, c->min_loss_scale, c->hysteresis,
                                   c->consecutive_hysteresis);
}

int dsl_lossscale_update(struct dsl_lossscale *ls, int overflow, char *err)
{
    if (!ls->dynamic) {
        ls->cur_iter++;
        if (overflow)
            ls->skipped++;
        return overflow ? 1 : 0;
    }
    if (overflow) {
        if (ls->delayed_shift == 1 || ls->cur_hysteresis == 1) {
            if (ls->cur_scale == ls->min_scale && ls->raise_error_at_min_scale)
                return dsl_seterr(err, DSL_ECONFIG,
                                  "gradient overflow with the loss scale already at "
                                  "fp16.min_loss_scale %g: cannot decrease it further",
                                  ls->min_scale);
            double next = ls->cur_scale / ls->scale_factor;
            ls->cur_scale = next > ls->min_scale ? next : ls->min_scale;
        } else {
            ls->cur_hysteresis--;
        }
        ls->last_overflow_iter = ls->cur_iter;
        ls->skipped++;
    } else {
        if (ls->consecutive_hysteresis)
            ls->cur_hysteresis = ls->delayed_shift;
        if ((ls->cur_iter - ls->last_overflow_iter) % ls->scale_window == 0) {
            if (!ls->consecutive_hysteresis)
                ls->cur_hysteresis = ls->delayed_shift;
            ls->cur_scale *= ls->scale_factor;
        }
    }
    ls->cur_iter++;
    return overflow ? 1 : 0;
}

int dsl_lossscale_format(const struct dsl_lossscale *ls, char *buf, size_t n)
{
    /* %.17g round-trips a double exactly */
    return snprintf(buf, n, "scale=%.17g iter=%ld last_overflow=%ld hysteresis=%d skipped=%" PRIu64,
                    ls->cur_scale, ls->cur_iter, ls->last_overflow_iter, ls->cur_hysteresis,
                    ls->skipped);
}

int dsl_lossscale_restore(struct dsl_lossscale *ls, const char *s, char *err)
{
    double scale;
    long iter, last;
    int hyst, used = 0;
    uint64_t skipped;
    if (sscanf(s, "scale=%lg iter=%ld last_overflow=%ld hysteresis=%d skipped=%" SCNu64 "%n",
               &scale, &iter, &last, &hyst, &skipped, &used) != 5 ||
        s[used] != '\0' || !(scale > 0.0) || !isfinite(scale) || iter < 0 || last < -1 ||
        hyst < 0)
        return dsl_seterr(err, DSL_ECHECKPOINT, "bad loss-scale state '%s'", s);
    ls->cur_scale = scale;
    ls->cur_iter = iter;
    ls->last_overflow_iter = last;
    ls->cur_hysteresis = hyst;
    ls->skipped = skipped;
    return 0;
}
