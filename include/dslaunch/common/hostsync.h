/*
 * A process-wide count of host synchronisations with the GPU: every place where the
 * host thread waits for device work to finish (a bounded stream wait, a copy back to
 * the host that waits, a device synchronize, the nccl comm draining its stream) adds
 * one. The trainer reports the count per optimizer step (--metrics "host_syncs"), so a
 * run on a GPU can check the goal of one synchronisation per step. A relaxed atomic
 * add: no system call, callable from any thread. Without a GPU nothing adds to it.
 */
#ifndef DSLAUNCH_HOSTSYNC_H
#define DSLAUNCH_HOSTSYNC_H

#include <stdint.h>

/** one more host synchronisation */
void dsl_hostsync_note(void);
/** host synchronisations since the process started */
uint64_t dsl_hostsync_count(void);

#endif
