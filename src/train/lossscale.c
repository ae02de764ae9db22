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
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
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

/* The value of "key=VALUE" at *p (VALUE up to a space or the end) into buf; *p moves
   past it and one space. 0, or -1 when the key is not there or the value too long. */
static int take_field(const char **p, const char *key, char *buf, size_t cap)
{
    size_t kl = strlen(key);
    if (strncmp(*p, key, kl) != 0 || (*p)[kl] != '=')
        return -1;
    const char *v = *p + kl + 1, *e = strchr(v, ' ');
    size_t n = e ? (size_t)(e - v) : strlen(v);
    if (n == 0 || n >= cap)
        return -1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    *p = e ? e + 1 : v + n;
    return 0;
}

int dsl_lossscale_restore(struct dsl_lossscale *ls, const char *s, char *err)
{
    /* every number from the checkpoint is checked whole and in range (sscanf's %ld
       would be undefined on an overflowing one) */
    char f[5][40];
    static const char *const keys[5] = {"scale", "iter", "last_overflow", "hysteresis",
                                        "skipped"};
    const char *p = s;
    double scale;
    long iter, last, hyst, sk;
    for (int i = 0; i < 5; i++)
        if (take_field(&p, keys[i], f[i], sizeof(f[i])) < 0)
            goto bad;
    if (*p || dsl_parse_double(f[0], &scale) < 0 || !(scale > 0.0) ||
        dsl_parse_long(f[1], 0, LONG_MAX, &iter) < 0 ||
        dsl_parse_long(f[2], -1, LONG_MAX, &last) < 0 ||
        dsl_parse_long(f[3], 0, INT_MAX, &hyst) < 0 ||
        dsl_parse_long(f[4], 0, LONG_MAX, &sk) < 0)
        goto bad;
    ls->cur_scale = scale;
    ls->cur_iter = iter;
    ls->last_overflow_iter = last;
    ls->cur_hysteresis = (int)hyst;
    ls->skipped = (uint64_t)sk;
    return 0;
bad:
    return dsl_seterr(err, DSL_ECHECKPOINT, "bad loss-scale state '%s'", s);
}
