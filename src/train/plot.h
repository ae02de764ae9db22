/*
 * `dstrain plot`: a metrics file's losses as a text chart (plot.c).
 */
#ifndef DSLAUNCH_TRAIN_PLOT_H
#define DSLAUNCH_TRAIN_PLOT_H

#include <stddef.h>
#include <stdio.h>

#define DSL_PLOT_MAX_BYTES (512 << 20)

struct dsl_plot_line {
    double *x, *y; /* steps and losses, n of each (cap allocated) */
    size_t n, cap;
};

struct dsl_plot {
    struct dsl_plot_line train, eval; /* "step" records' loss, "eval" records' test_loss */
    size_t skipped;                   /* lines that are not such records */
};

/** Parse the JSON lines text[0..len) into p (any bytes; the arrays owned by p until
 *  dsl_plot_release()). */
void dsl_plot_parse(struct dsl_plot *p, const char *text, size_t len);
/** The chart of p, w columns by h rows (w >= 8, h >= 3), titled name, to f; -1 when p
 *  holds no point. */
int dsl_plot_draw(const struct dsl_plot *p, const char *name, int w, int h, FILE *f);
void dsl_plot_release(struct dsl_plot *p);

#endif
