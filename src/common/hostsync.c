/*
 * The host-synchronisation counter (hostsync.h): one relaxed atomic, written by the
 * CUDA device, the CUDA model and the nccl comm, read by the trainer per step. Each
 * wait also marks the GPU timers' idle class (gpuprof.h).
 */
#include <stdatomic.h>

#include "dslaunch/common/gpuprof.h"
#include "dslaunch/common/hostsync.h"
#include "dslaunch/common/banned.h"

static _Atomic uint64_t syncs;

void dsl_hostsync_note(void)
{
    /* the host is about to wait: what the stream does from here (nothing, once its
     * queue drains, until the host queues more) is idle time in the GPU timers */
    dsl_gpuprof_mark(DSL_PROF_IDLE);
    atomic_fetch_add_explicit(&syncs, 1, memory_order_relaxed);
}

uint64_t dsl_hostsync_count(void)
{
    return atomic_load_explicit(&syncs, memory_order_relaxed);
}
