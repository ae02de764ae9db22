/*
 * The GPU time report (gputime.h). Theory of operation: the GPU timers (common/
 * gpuprof.c) read a step's events only once they have completed, so a report in the
 * middle of a run covers the steps read since the previous one (a step or two behind
 * the step it is printed at; "over N steps" says how many); the final report first
 * reads everything (the caller has waited for the stream) and covers the whole run,
 * which is why it keeps its own running totals. Times are GPU milliseconds per step,
 * measured between CUDA events on the compute stream, so they add up to the stream's
 * time per step, waits and idle time included (gpuprof.h).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/gpuprof.h"
#include "gputime.h"
#include "dslaunch/common/banned.h"

static struct dsl_gpuprof_totals run_tot; /* every report's totals, for the final one */

void dsl_gputime_step(uint64_t step)
{
    const char *e = getenv("DSTRAIN_COUNT_LAUNCHES");
    if (!dsl_gpuprof_counting() || !e || strcmp(e, "1") != 0)
        return;
    uint64_t before, in;
    dsl_gpuprof_step_launches(&before, &in);
    printf("dstrain: launches step %" PRIu64 " before %" PRIu64 " count %" PRIu64 "\n", step,
           before, in);
    fflush(stdout);
}

static void print_totals(FILE *metrics, uint64_t step, int final,
                         const struct dsl_gpuprof_totals *g)
{
    double ph[DSL_PHASE_N] = {0}, tot = 0.0, k = 1.0 / (double)g->steps;
    uint64_t launches = 0;
    for (int c = 0; c < DSL_PROF_NCLASS; c++) {
        ph[dsl_gpuprof_phase_of((enum dsl_prof_class)c)] += g->ms[c];
        tot += g->ms[c];
        launches += g->launches[c];
    }
    printf("%sgpu ms per step (CUDA events, %" PRIu64 " steps):", final ? "dstrain: " : "",
           g->steps);
    for (int p = 0; p < DSL_PHASE_N; p++)
        printf(" %s %.2f", dsl_gpuprof_phase_name((enum dsl_prof_phase)p), ph[p] * k);
    printf(", total %.2f; launches per step %.0f\n", tot * k, (double)launches * k);
    if (final) {
        printf("dstrain: gpu kernel classes (ms per step / launches per step):");
        for (int c = 0; c < DSL_PROF_NCLASS; c++)
            if (g->ms[c] > 0.0 || g->launches[c])
                printf(" %s %.2f/%.0f", dsl_gpuprof_class_name((enum dsl_prof_class)c),
                       g->ms[c] * k, (double)g->launches[c] * k);
        printf("\n");
    }
    if (!metrics)
        return;
    fprintf(metrics, "{\"type\":\"gpu_time\",\"step\":%" PRIu64 ",\"final\":%s,\"steps\":%" PRIu64
            ",\"total_ms\":%.4f,\"phase_ms\":{", step, final ? "true" : "false", g->steps,
            tot * k);
    for (int p = 0; p < DSL_PHASE_N; p++)
        fprintf(metrics, "%s\"%s\":%.4f", p ? "," : "",
                dsl_gpuprof_phase_name((enum dsl_prof_phase)p), ph[p] * k);
    fprintf(metrics, "},\"class_ms\":{");
    for (int c = 0; c < DSL_PROF_NCLASS; c++)
        fprintf(metrics, "%s\"%s\":%.4f", c ? "," : "",
                dsl_gpuprof_class_name((enum dsl_prof_class)c), g->ms[c] * k);
    fprintf(metrics, "},\"class_launches\":{");
    for (int c = 0; c < DSL_PROF_NCLASS; c++)
        fprintf(metrics, "%s\"%s\":%.2f", c ? "," : "",
                dsl_gpuprof_class_name((enum dsl_prof_class)c), (double)g->launches[c] * k);
    fprintf(metrics, "}}\n");
}

void dsl_gputime_report(FILE *metrics, uint64_t step, int final)
{
    if (!dsl_gpuprof_enabled())
        return;
    struct dsl_gpuprof_totals g;
    if (final)
        dsl_gpuprof_collect();
    dsl_gpuprof_take(&g, 1);
    for (int c = 0; c < DSL_PROF_NCLASS; c++) {
        run_tot.ms[c] += g.ms[c];
        run_tot.launches[c] += g.launches[c];
    }
    run_tot.steps += g.steps;
    const struct dsl_gpuprof_totals *show = final ? &run_tot : &g;
    if (show->steps)
        print_totals(metrics, step, final, show);
}
