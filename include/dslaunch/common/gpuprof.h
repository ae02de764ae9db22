/*
 * Where a GPU step's time goes, measured by the GPU: CUDA events on the compute stream
 * at every change of kernel class, read back without a host synchronisation of their
 * own, and a count of the kernel launches dstrain issues per class. Process-wide (one
 * compute stream per process), like the host-sync counter (hostsync.h).
 *
 * The step is cut into consecutive segments: dsl_gpuprof_mark(c) records an event on
 * the stream when the class changes, and the GPU time from one event to the next (the
 * time the stream took to get from one to the other, cudaEventElapsedTime) belongs to
 * the class of the first. The segments tile the step on the stream, so they add up to
 * the step's stream time; a stream that waits (for a collective's event, or idle while
 * the host has not queued more work) shows that wait in the segment it falls in: the
 * comm classes (the trainer marks them around its waits) and DSL_PROF_IDLE (marked by
 * the host waits, hostsync.h's callers, just before they wait).
 *
 * Reading without extra waits: the events of a step go into one of three rings, by
 * step; a step's events are read when its ring is reused three steps later, when the
 * host has since waited for the stream at least once per step (the trainer's one wait
 * per step), so they are complete and cudaEventElapsedTime never blocks; one not yet
 * complete (cudaErrorNotReady) is left for the next read. dsl_gpuprof_collect() reads
 * every step that is complete, for a report after a host wait (dsl_trainer_sync).
 *
 * Launch counting (DSTRAIN_COUNT_LAUNCHES=1, or whenever timing is on): the launchers
 * of dstrain's kernels and its cuBLAS calls count one launch each, so a report gives
 * launches per step and per class. A cuBLAS call may launch more than one kernel (split
 * K), so the count is a lower bound of what a profiler sees; scripts/gpu-check.sh picks
 * its step for Nsight Compute by cudaProfilerStart/Stop around that step
 * (DSTRAIN_PROFILE_STEP, dsl_gpuprof_step_begin) and caps ncu's --launch-count with it.
 *
 * Without CUDA (a CPU build) every call is a no-op and dsl_gpuprof_enabled() is 0.
 * Not thread-safe: the thread that drives the compute stream calls it.
 */
#ifndef DSLAUNCH_COMMON_GPUPROF_H
#define DSLAUNCH_COMMON_GPUPROF_H

#include <stdint.h>

enum dsl_prof_class {
    DSL_PROF_OTHER = 0,   /* step setup, uploads, anything unmarked */
    DSL_PROF_FWD_MATMUL,  /* forward GEMMs (cuBLAS, cuBLASLt with epilogues) */
    DSL_PROF_FWD_ATTN,    /* forward attention kernels */
    DSL_PROF_FWD_NORM,    /* forward layernorms */
    DSL_PROF_FWD_ELEM,    /* embedding, bias, GELU, residual, ReLU, the MLP's forward */
    DSL_PROF_HEAD,        /* LM head GEMMs and the softmax cross-entropy, both ways */
    DSL_PROF_BWD_MATMUL,  /* backward GEMMs */
    DSL_PROF_BWD_ATTN,    /* backward attention kernels */
    DSL_PROF_BWD_NORM,    /* backward layernorms */
    DSL_PROF_BWD_ELEM,    /* bias gradients, GELU backward, the MLP's backward, ... */
    DSL_PROF_GRAD,        /* the trainer's gradient work: accumulation, widening, scaling */
    DSL_PROF_COMM_WAIT,   /* the stream waits for a gradient reduction */
    DSL_PROF_GATHER_WAIT, /* the stream waits for a parameter all-gather */
    DSL_PROF_SCALARS,     /* loss, overflow and norm reductions on the device */
    DSL_PROF_OPTIM,       /* the optimizer's kernels */
    DSL_PROF_IDLE,        /* the stream drained while the host waited or prepared */
    DSL_PROF_NCLASS
};

/* the phases of the step report: sums of classes (dsl_gpuprof_phase_of) */
enum dsl_prof_phase {
    DSL_PHASE_FORWARD = 0, /* FWD_* except attention */
    DSL_PHASE_ATTENTION,   /* FWD_ATTN + BWD_ATTN */
    DSL_PHASE_HEAD,        /* LM head and loss */
    DSL_PHASE_BACKWARD,    /* BWD_* except attention, GRAD */
    DSL_PHASE_COMM,        /* COMM_WAIT + GATHER_WAIT */
    DSL_PHASE_SCALARS,     /* loss/norm reduction */
    DSL_PHASE_OPTIM,       /* optimizer */
    DSL_PHASE_IDLE,        /* IDLE + OTHER */
    DSL_PHASE_N
};

struct dsl_gpuprof_totals {
    double ms[DSL_PROF_NCLASS];          /* GPU milliseconds per class, summed */
    uint64_t launches[DSL_PROF_NCLASS];  /* launches per class, summed */
    uint64_t steps;                      /* steps whose events were read */
    uint64_t launches_counted;           /* every launch counted so far (any step) */
};

/** Start timing on stream (a cudaStream_t) for the rest of the process: 0, or a
 *  negative code with err set (events could not be created). Launches are counted
 *  from now on as well. */
int dsl_gpuprof_enable(void *stream, char *err);
/** Count launches without timing (DSTRAIN_COUNT_LAUNCHES). */
void dsl_gpuprof_count_launches(void);
/** nonzero while timing is on */
int dsl_gpuprof_enabled(void);
/** Release the events (after the stream's last use); timing is off afterwards. */
void dsl_gpuprof_disable(void);

/** A step begins (step: the number it will have when done, 1-based): the ring of
 *  three steps ago is read, and with DSTRAIN_PROFILE_STEP=step the CUDA profiler is
 *  started (cudaProfilerStart) for this step. */
void dsl_gpuprof_step_begin(uint64_t step);
/** The step's work is queued: its last event; stops the profiler of
 *  DSTRAIN_PROFILE_STEP. */
void dsl_gpuprof_step_end(void);
/** From here on the stream runs class c (an event when c differs from the last). */
void dsl_gpuprof_mark(enum dsl_prof_class c);
/** A kernel launch (or a cuBLAS call) of the current class. what: the launch's text
 *  ("launching dsl_k_..."); only texts that start with "launching" count, so callers
 *  may pass every CUDA call's text. */
void dsl_gpuprof_launch(const char *what);
/** The last step that ended: the launches counted before it began and in it (0, 0
 *  when not counting). */
void dsl_gpuprof_step_launches(uint64_t *before, uint64_t *in_step);
/** nonzero while launches are counted (timing on, or DSTRAIN_COUNT_LAUNCHES) */
int dsl_gpuprof_counting(void);
/** Read every complete step's events into the totals (no waiting). */
void dsl_gpuprof_collect(void);
/** The totals read so far; with reset, start new ones (launches_counted is kept). */
void dsl_gpuprof_take(struct dsl_gpuprof_totals *out, int reset);

const char *dsl_gpuprof_class_name(enum dsl_prof_class c);
const char *dsl_gpuprof_phase_name(enum dsl_prof_phase p);
enum dsl_prof_phase dsl_gpuprof_phase_of(enum dsl_prof_class c);

#endif
