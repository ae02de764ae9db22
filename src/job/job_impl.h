/*
 * Internal interface among the files of the launcher's job: the message loop
 * (job_loop.c), the phases built on it (job.c: connect, start, run; job_preflight.c:
 * the checks and the probe). job_loop.c calls neither of the others, so the calls only
 * go one way. Not for use outside src/job/; doctor uses what job.h makes public.
 */
#ifndef DSLAUNCH_JOB_IMPL_H
#define DSLAUNCH_JOB_IMPL_H

#include "dslaunch/job/job.h"
#include "output.h"

/* Bound of a node's output queue: an agent that stops reading fails instead of making
 * the launcher buffer without limit. */
#define DSL_JOB_OUTQ_MAX (64u << 20)

/* ---- job_loop.c ---- */

/** Catch SIGINT, SIGTERM and SIGHUP (each writes a byte to wfd), ignore SIGPIPE. */
void dsl_job_signals_catch(int wfd);
/** Restore the default SIGINT, SIGTERM and SIGHUP; SIGPIPE stays ignored. */
void dsl_job_signals_restore(void);
/** Queue m for node n (encoded now); dropped if the node has failed. */
void dsl_job_node_send(struct dsl_job_node *n, const struct dsl_msg *m);
/** Write as much of n's queue as the transport takes now. */
void dsl_job_node_flush(struct dsl_job_node *n);
/** Mark n failed with code and the message; a running node's failure stops the job. */
void dsl_job_node_fail(struct dsl_job *job, struct dsl_job_node *n, int code, const char *fmt,
                       ...) __attribute__((format(printf, 4, 5)));
/** One pass of the event loop: poll for at most timeout_ms, handle what is ready. */
void dsl_job_pump(struct dsl_job *job, int sig_rfd, int timeout_ms);
/**
 * Note whether dslaunch itself stood still since the loop last ran, beyond `slack`
 * seconds it meant to wait, for longer than the keepalive: then its agents have lost
 * it and stopped their ranks, and the job ends as a lost launcher (job->paused_for,
 * exit 200) before anything they sent meanwhile is read.
 */
void dsl_job_check_paused(struct dsl_job *job, double slack);
/**
 * Act on a signal the launcher received since the last call (stop or kill), and on a
 * reader of its stdout or stderr gone away (a stop, as SIGPIPE would be in a shell).
 */
void dsl_job_handle_signals(struct dsl_job *job);
/** The launcher's own text for stderr (whole lines): through job->out while it is set. */
void dsl_job_eprintf(struct dsl_job *job, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/** For dsl_log_set_sink(): a log line (arg: the job) to job->out's stderr. */
void dsl_job_log_sink(void *arg, const char *line);
/** Stop the job: sig to every rank, SIGKILL after grace (the first call sets t_stop). */
void dsl_job_stop(struct dsl_job *job, int sig, double grace);

/* ---- job_preflight.c (dsl_job_probe is public, in job.h) ---- */

/** Preflight on the hellos: protocol and dslaunch versions, slots within GPU counts. */
int dsl_job_check_hellos(struct dsl_job *job);
void dsl_job_print_preflight(struct dsl_job *job);
/**
 * For a job on this machine whose rank 0 takes the port (dsl_plan_rank0_takes_port):
 * node 0's agent binds the master port on 127.0.0.1 (or a free one when the default is
 * busy) and holds it for rank 0; sets the plan's master_port. 0 or an exit code.
 */
int dsl_job_reserve_port(struct dsl_job *job, int sig_rfd);

/* ---- job_summary.c ---- */

/**
 * The job's end in words, once, after the byes: the stop's cause (or the hang verdict),
 * the error lines shown once for many ranks, incomplete --log-dir files (which may set
 * job->exit_code to DSL_EXIT_LOGS).
 */
void dsl_job_summary(struct dsl_job *job);

#endif
