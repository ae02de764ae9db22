/*
 * dstrain's GPU time report (common/gpuprof.h's totals as text and JSON): the phases
 * and kernel classes in GPU milliseconds per step, and the launch counter. Rank 0's
 * trainer loop calls these; each is a no-op when the GPU timers and the launch counter
 * are off (the CPU path). Private to the train folder.
 */
#ifndef DSL_TRAIN_GPUTIME_H
#define DSL_TRAIN_GPUTIME_H

#include <stdint.h>
#include <stdio.h>

/** After step `step` ended: with DSTRAIN_COUNT_LAUNCHES=1, the line "dstrain: launches
 *  step S before B count C" on stdout (what scripts/gpu-check.sh's profile step reads). */
void dsl_gputime_step(uint64_t step);

/** The GPU time since the last report (final: over the whole run, after a host wait, so
 *  every step is read): a line on stdout and a {"type":"gpu_time",...} record in
 *  metrics (NULL: none). Nothing when the GPU timers are off or no step was read. */
void dsl_gputime_report(FILE *metrics, uint64_t step, int final);

#endif
