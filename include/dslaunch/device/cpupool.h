/*
 * A process-wide pool of helper threads for the CPU device's elementwise loops (the
 * optimizer over the rank's parameters), so that a rank given more than one core for
 * BLAS also uses them outside BLAS. Splitting an elementwise loop into contiguous
 * pieces changes no result bits: every element sees the same operations in the same
 * order whichever thread runs it.
 *
 * The pool has threads - 1 helpers (the caller is the first thread); with one thread,
 * the default, dsl_cpupool_for() just calls fn once and no thread is ever created.
 */
#ifndef DSLAUNCH_CPUPOOL_H
#define DSLAUNCH_CPUPOOL_H

#include <stddef.h>

/** Run elementwise loops on up to n threads (the rank's BLAS thread count); the helpers
 *  start on first use. Call before any dsl_cpupool_for(), from the main thread.
 *  Returns the count in effect (n clamped to 1..64). */
int dsl_cpupool_set_threads(int n);

/** Threads in effect (1 until dsl_cpupool_set_threads). */
int dsl_cpupool_threads(void);

/**
 * fn(arg, lo, hi) over [0, n) in chunks of `chunk` elements (the last one shorter),
 * claimed one at a time by the calling thread and whichever helpers are running, so a
 * helper that the scheduler does not run (the cores are busy with other work) costs at
 * most the chunk it had claimed: the caller takes the rest. Returns when every chunk
 * is done. Not reentrant: one caller at a time (the trainer's thread). With one thread,
 * or n <= chunk, the caller runs fn(arg, 0, n) itself.
 */
void dsl_cpupool_for(size_t n, size_t chunk, void (*fn)(void *arg, size_t lo, size_t hi),
                     void *arg);

#endif
