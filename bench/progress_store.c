/*
 * The cost of one progress report in isolation: ns per dsl_progress_coll() call
 * (the store the comm makes entering or leaving a collective) on a record mapped from
 * a file in /dev/shm, as a rank's is. bench/heartbeat.sh multiplies it by the stores a
 * step makes.
 *
 *   progress_store FILE [calls]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/progress.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    char err[DSL_ERR_LEN];
    struct dsl_progress_rec *rec;
    if (argc < 2 || dsl_progress_attach(argv[1], &rec, err) < 0) {
        fprintf(stderr, "usage: progress_store FILE [calls] (%s)\n", argc < 2 ? "" : err);
        return 2;
    }
    long calls = argc > 2 ? strtol(argv[2], NULL, 10) : 200000000L;
    double best = 1e9;
    for (int round = 0; round < 5; round++) {
        double t0 = now();
        for (long i = 0; i < calls; i++)
            dsl_progress_coll(rec, (uint64_t)i, DSL_PROGRESS_ALLREDUCE, (int)(i & 1));
        double ns = (now() - t0) * 1e9 / (double)calls;
        best = ns < best ? ns : best;
    }
    printf("%.3f\n", best);
    return 0;
}
