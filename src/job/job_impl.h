/*
 * Internal interface between the launcher's job loop (job.c) and its preflight
 * (job_preflight.c). Not for use outside src/launch/.
 */
#ifndef DSLAUNCH_JOB_IMPL_H
#define DSLAUNCH_JOB_IMPL_H

#include "dslaunch/job/job.h"

/** Queue m for node n (encoded now); dropped if the node has failed. */
void dsl_job_node_send(struct dsl_job_node *n, const struct dsl_msg *m);
/** Write as much of n's queue as the transport takes now. */
void dsl_job_node_flush(struct dsl_job_node *n);
/** One pass of the event loop: poll for at most timeout_ms, handle what is ready. */
void dsl_job_pump(struct dsl_job *job, int sig_rfd, int timeout_ms);
/** Act on a signal the launcher received since the last call (stop or kill). */
void dsl_job_handle_signals(struct dsl_job *job);

/** Preflight on the hellos: protocol and dslaunch versions, slots within GPU counts. */
int dsl_job_check_hellos(struct dsl_job *job);
/** The multi-node probe: master port, master address, interfaces, program and cwd. */
int dsl_job_probe(struct dsl_job *job, int sig_rfd);
void dsl_job_print_preflight(struct dsl_job *job);

#endif
