/*
 * libFuzzer target: a metrics file as `dstrain plot` reads it (dsl_plot_parse), then
 * drawn (dsl_plot_draw) into memory. Any bytes parse; every point kept is finite, and
 * a chart of points has exactly its rows of cells, each row as wide as asked.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/plot.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const struct dsl_plot_line *l)
{
    for (size_t i = 0; i < l->n; i++)
        if (!isfinite(l->x[i]) || !isfinite(l->y[i]))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dsl_plot p;
    dsl_plot_parse(&p, (const char *)data, size);
    check(&p.train);
    check(&p.eval);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f)
        abort();
    int r = dsl_plot_draw(&p, "fuzz", 20, 5, f);
    fclose(f);
    if ((r < 0) != (p.train.n + p.eval.n == 0))
        abort();
    if (r == 0) {
        size_t rows = 0;
        for (const char *s = out; (s = strstr(s, " |")) != NULL; s += 2) {
            const char *nl = strchr(s, '\n');
            if (!nl || nl - (s + 2) != 20)
                abort();
            rows++;
        }
        if (rows != 5)
            abort();
    }
    free(out);
    dsl_plot_release(&p);
    return 0;
}
