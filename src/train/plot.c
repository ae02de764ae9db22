/*
 * `dstrain plot METRICS.jsonl`: a run's loss curve as text, for a terminal.
 *
 *   dstrain plot FILE [--width N] [--height N]
 *
 * Reads the metrics file (--metrics: JSON lines) a line at a time: {"type":"step"}
 * records give the training loss by step, {"type":"eval"} records the evaluation loss
 * (test_loss). Lines that are not such records (a line cut short by a killed run,
 * another tool's) are skipped and counted; null losses (not finite) are left out. A
 * resumed run appends to the same file, so a step seen again replaces nothing: every
 * point is drawn. The chart is width x height cells: x is the step from the first to
 * the last, y the loss from the lowest to the highest (one value: a flat line in the
 * middle); each training point is a '*', each evaluation an 'o' drawn over it. The
 * y axis is labelled at the top, middle and bottom rows, the x axis at both ends.
 * Nothing runs concurrently; the whole file is read first (at most DSL_PLOT_MAX_BYTES).
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "plot.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/train/trainer_settings.h"
#include "dslaunch/common/banned.h"

static void add_point(struct dsl_plot_line *l, double x, double y)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->x = dsl_xreallocarray(l->x, l->cap, sizeof(double));
        l->y = dsl_xreallocarray(l->y, l->cap, sizeof(double));
    }
    l->x[l->n] = x;
    l->y[l->n] = y;
    l->n++;
}

/* a number member, or NAN when it is missing, null or not a number */
static double member(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

void dsl_plot_parse(struct dsl_plot *p, const char *text, size_t len)
{
    memset(p, 0, sizeof(*p));
    size_t i = 0;
    while (i < len) {
        const char *s = text + i, *nl = memchr(s, '\n', len - i);
        size_t n = nl ? (size_t)(nl - s) : len - i;
        i += n + (nl ? 1 : 0);
        if (n == 0)
            continue;
        cJSON *o = cJSON_ParseWithLength(s, n);
        const cJSON *type = o ? cJSON_GetObjectItemCaseSensitive(o, "type") : NULL;
        double step = o ? member(o, "step") : NAN;
        if (!cJSON_IsString(type)) {
            p->skipped++; /* not a record: a cut line, another tool's */
        } else if (!isfinite(step)) {
            /* a record without a step (memory, summary) */
        } else if (!strcmp(type->valuestring, "step")) {
            double y = member(o, "loss");
            if (isfinite(y))
                add_point(&p->train, step, y);
        } else if (!strcmp(type->valuestring, "eval")) {
            double y = member(o, "test_loss");
            if (isfinite(y))
                add_point(&p->eval, step, y);
        }
        cJSON_Delete(o);
    }
}

void dsl_plot_release(struct dsl_plot *p)
{
    free(p->train.x);
    free(p->train.y);
    free(p->eval.x);
    free(p->eval.y);
    memset(p, 0, sizeof(*p));
}

static void range(const double *v, size_t n, double *lo, double *hi)
{
    for (size_t i = 0; i < n; i++) {
        if (v[i] < *lo)
            *lo = v[i];
        if (v[i] > *hi)
            *hi = v[i];
    }
}

static void mark(char *grid, int w, int h, double x0, double x1, double y0, double y1,
                 const struct dsl_plot_line *l, char c)
{
    for (size_t i = 0; i < l->n; i++) {
        double fx = x1 > x0 ? (l->x[i] - x0) / (x1 - x0) : 0.5;
        double fy = y1 > y0 ? (y1 - l->y[i]) / (y1 - y0) : 0.5;
        int col = (int)lround(fx * (w - 1)), row = (int)lround(fy * (h - 1));
        if (col >= 0 && col < w && row >= 0 && row < h)
            grid[(size_t)row * (size_t)w + (size_t)col] = c;
    }
}

int dsl_plot_draw(const struct dsl_plot *p, const char *name, int w, int h, FILE *f)
{
    if (!p->train.n && !p->eval.n)
        return -1;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    range(p->train.x, p->train.n, &x0, &x1);
    range(p->eval.x, p->eval.n, &x0, &x1);
    range(p->train.y, p->train.n, &y0, &y1);
    range(p->eval.y, p->eval.n, &y0, &y1);
    char *grid = dsl_xmalloc((size_t)w * (size_t)h);
    memset(grid, ' ', (size_t)w * (size_t)h);
    mark(grid, w, h, x0, x1, y0, y1, &p->train, '*');
    mark(grid, w, h, x0, x1, y0, y1, &p->eval, 'o');
    fprintf(f, "%s: loss by step (* training: %zu steps, o evaluation: %zu)\n", name,
            p->train.n, p->eval.n);
    for (int r = 0; r < h; r++) {
        char label[16] = "";
        if (r == 0 || r == h - 1 || r == (h - 1) / 2) {
            double v = h > 1 ? y1 - (y1 - y0) * r / (h - 1) : y0;
            snprintf(label, sizeof(label), "%.4g", v);
        }
        fprintf(f, "%10s |%.*s\n", label, w, grid + (size_t)r * (size_t)w);
    }
    fprintf(f, "%10s +", "");
    for (int c = 0; c < w; c++)
        fputc('-', f);
    char left[32], right[32];
    snprintf(left, sizeof(left), "%.0f", x0);
    snprintf(right, sizeof(right), "%.0f", x1);
    int gap = w - (int)strlen(left) - (int)strlen(right);
    fprintf(f, "\n%10s  %s%*s%s  step\n", "", left, gap > 1 ? gap : 1, "", right);
    free(grid);
    return 0;
}

struct plot_args {
    int width, height;
};

static const struct dsl_opt plot_opts[] = {
    {"width", 0, DSL_OPT_INT, offsetof(struct plot_args, width), "N", "columns of the chart",
     "72", 8, 1000, NULL, 0, NULL},
    {"height", 0, DSL_OPT_INT, offsetof(struct plot_args, height), "N", "rows of the chart",
     "16", 3, 200, NULL, 0, NULL},
};
static const struct dsl_opt_parser plot_parser = {
    .prog = "dstrain plot",
    .opts = plot_opts,
    .nopts = sizeof(plot_opts) / sizeof(plot_opts[0]),
};

int dsl_train_plot_main(int argc, char **argv, char *err)
{
    static const char usage[] = "usage: dstrain plot METRICS.jsonl [--width N] [--height N]";
    struct plot_args a = {72, 16};
    struct dsl_strvec files;
    dsl_strvec_init(&files);
    if (dsl_opt_help_if_asked(&plot_parser, usage, argc, argv, stdout))
        return 0;
    int r = dsl_opt_parse(&plot_parser, &a, argc, argv, &files, err);
    if (r == 0 && files.nr != 1)
        r = dsl_seterr(err, DSL_EUSAGE, "%s", usage);
    if (r < 0) {
        dsl_strvec_release(&files);
        return r;
    }
    const char *path = files.v[0];
    char *text = NULL;
    size_t len = 0;
    FILE *in = fopen(path, "rb");
    if (!in) {
        r = dsl_seterr(err, -errno, "dstrain plot: cannot read '%s': %s", path, strerror(errno));
        goto out;
    }
    char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), in)) > 0) {
        if (len + got > DSL_PLOT_MAX_BYTES) {
            r = dsl_seterr(err, DSL_EUSAGE, "dstrain plot: '%s' is larger than %d MiB", path,
                           DSL_PLOT_MAX_BYTES >> 20);
            break;
        }
        text = dsl_xrealloc(text, len + got);
        memcpy(text + len, buf, got);
        len += got;
    }
    if (r == 0 && ferror(in))
        r = dsl_seterr(err, -EIO, "dstrain plot: cannot read '%s'", path);
    fclose(in);
    if (r < 0)
        goto out;
    struct dsl_plot p;
    dsl_plot_parse(&p, text ? text : "", len);
    if (dsl_plot_draw(&p, path, a.width, a.height, stdout) < 0)
        r = dsl_seterr(err, DSL_EUSAGE,
                       "dstrain plot: no losses in '%s' (%zu line%s not records of a metrics "
                       "file): give the file of dstrain --metrics, whose lines are "
                       "{\"type\":\"step\",...,\"loss\":...}",
                       path, p.skipped, p.skipped == 1 ? " is" : "s are");
    else if (p.skipped)
        printf("(%zu line%s of '%s' skipped: not JSON records)\n", p.skipped,
               p.skipped == 1 ? "" : "s", path);
    dsl_plot_release(&p);
out:
    free(text);
    dsl_strvec_release(&files);
    return r;
}
