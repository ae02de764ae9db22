/*
 * A job as the launcher sees it: the placement, one node agent connection per node,
 * and the state of every rank. dsl_job_run() drives it from connecting to the final
 * summary. The plan (plan/plan.h) says what to run; this module executes it.
 */
#ifndef DSLAUNCH_JOB_H
#define DSLAUNCH_JOB_H

#include <stdio.h>

#include "dslaunch/plan/options.h"
#include "dslaunch/plan/placement.h"
#include "dslaunch/plan/plan.h"
#include "dslaunch/proto/exitcode.h"
#include "dslaunch/proto/proto.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/remote/transport.h"

struct dsl_output;

/* What the launcher knows about one node. */
enum dsl_node_state {
    DSL_NODE_PENDING = 0,
    DSL_NODE_CONNECTING, /* transport not open yet */
    DSL_NODE_HELLO,      /* open; waiting for the agent's hello */
    DSL_NODE_READY,      /* hello received */
    DSL_NODE_RUNNING,    /* start sent */
    DSL_NODE_EXITED,     /* agent said bye */
    DSL_NODE_FAILED,     /* unreachable, refused, died or went silent */
};

struct dsl_job_node {
    const struct dsl_node *pn; /* placement node (not owned) */
    struct dsl_conn conn;
    enum dsl_node_state state;
    int local;                 /* agent runs on this machine */
    struct dsl_linebuf in;
    struct dsl_dynbuf outq;
    struct dsl_msg hello, probed;
    int have_hello, have_probed;
    double t_start, t_hello, last_rx, last_tx;
    int eof;
    char *iface;               /* interface that routes to MASTER_ADDR (owned) */
    char err[DSL_ERR_LEN];     /* why it failed */
    int err_code;
};

struct dsl_job_rank {
    int rank, node, local_rank, device;
    int pid, started, exited, code, sig;
    int exited_in_stop;        /* it exited after the job began to stop */
    double wall;
    struct dsl_strvec tail;
    struct dsl_exit_cause cause; /* why it ended, as its node saw it */
    FILE *log;                 /* --log-dir file; NULL: none, or closed by a write error */
    char *log_path;            /* its name, for messages (owned) */
    unsigned long long log_lost; /* bytes the log misses since a write failed */
    unsigned long err_lines;   /* stderr lines of it the console was given */
    unsigned long err_seq;     /* the console's line count at its last stderr line */
    char *pending_cr;          /* latest '\r' progress line not yet shown (owned) */
    double last_cr_shown;
};

struct dsl_errfold;

struct dsl_job {
    struct dsl_plan *plan;        /* what to run (not owned); the probe may refine its
                                     master_addr and master_port */
    const struct dsl_launch_opts *opts; /* plan->opts */
    const struct dsl_placement *pl;     /* &plan->pl */
    struct dsl_job_node *nodes;
    int nnodes;
    struct dsl_job_rank *ranks;
    int nranks;
    /* outcome */
    int failed_rank;              /* first failing rank, -1 */
    int failed_node;              /* first failing node (agent/unreachable), -1 */
    int exit_code;
    int stopping;
    int stop_sig;                 /* the first signal the stop sent to the ranks */
    int stop_requested;           /* the user ended the job: the signal dslaunch got
                                     (SIGINT, SIGTERM, SIGHUP), or SIGPIPE when a reader
                                     of its stdout or stderr went away; 0 */
    int killed_now;               /* a second interrupt killed the ranks without grace */
    double paused_for;            /* dslaunch itself did not run this long, past the
                                     keepalive (SIGSTOP, ^Z, a suspend): its agents lost
                                     it and stopped the ranks; 0: it ran throughout */
    double t_running;             /* when the loop last ran (job_loop.c) */
    struct dsl_output *out;       /* the console while dsl_job_run() runs (job_impl.h) */
    unsigned long console_lines;  /* rank lines given to the console so far */
    int tty[3];                   /* tty[1], tty[2]: stdout, stderr is a terminal */
    double t_begin, t_stop, t_first_fail;
    int started;                  /* the ranks were sent "start" */
    int user_sig;                 /* a signal to the launcher stopped the job (0: none) */
    int warned;                   /* SIGUSR1 (Slurm's warning) was passed to the ranks:
                                     the job is ending, its ranks may save and exit
                                     128 + SIGUSR1; no restart follows */
    int restart_count;            /* attempt of the job (restart.h), 0 for the first: the
                                     ranks' DSLAUNCH_RESTART_COUNT */
    struct dsl_job_hang *hang;    /* progress, hang detection, stacks (job_hang.c; owned) */
    struct dsl_errfold *fold;     /* the same error line of many ranks shown once
                                     (errfold.h; owned, made on the first stderr line) */
    /*
     * Inspect mode (`dslaunch doctor`): when set, dsl_job_run() calls inspect once every
     * node has said hello or failed (connect_code: what the connect phase would have
     * exited with), starts nothing, and returns inspect's result. Preflight checks are
     * left to it; it talks to the agents with the functions below, passing them sig_rfd.
     */
    int (*inspect)(struct dsl_job *job, int sig_rfd, int connect_code, void *arg);
    void *inspect_arg;
};

/**
 * The node agent's entry point (agent/agent.h: dsl_agent_main), which the nodes on
 * this machine run in the local transport's forked child. The program hands it in
 * once, before any job runs, so that the job does not link the agent; without it a
 * job with a node on this machine fails to start.
 */
void dsl_job_set_agent(int (*agent_main)(int in_fd, int out_fd));
/** Set up a job for the plan p, which must outlive it. */
void dsl_job_init(struct dsl_job *job, struct dsl_plan *p);
/** Connect, check, start, supervise, summarise. Returns the launcher's exit code. */
int dsl_job_run(struct dsl_job *job);
void dsl_job_release(struct dsl_job *job);

/*
 * For an inspect callback, while dsl_job_run() is running it. The job owns its nodes
 * and everything in them (connections, hello, probe answers, interfaces): the callback
 * reads them and may clear a node's have_probed before a probe whose answer it waits
 * for, but frees and closes nothing; dsl_job_run() closes every channel afterwards.
 */

/**
 * Send m to node n now: it is encoded at once (m stays the caller's, to release) and
 * written as far as the transport takes it; the rest goes out in later dsl_job_step()
 * calls. Dropped when the node has failed or its channel is at EOF.
 */
void dsl_job_send(struct dsl_job_node *n, const struct dsl_msg *m);
/**
 * One turn of the job's loop: act on a signal the launcher got (it stops the job), then,
 * unless the job is stopping, wait at most timeout_ms for the agents and apply what
 * they sent (a probe answer sets have_probed and probed; a lost agent fails its node).
 * 0 to go on; when the job is stopping, the exit code to return (130 for an interrupt
 * that set none).
 */
int dsl_job_step(struct dsl_job *job, int sig_rfd, int timeout_ms);
/**
 * The launch's master probe (job_preflight.c): node 0 holds the master port, every
 * other node test-connects to node 0's addresses; fills the plan's master_addr and
 * master_port and every node's iface and probed answer. 0 or an exit code
 * (DSL_EXIT_PREFLIGHT, DSL_EXIT_TIMEOUT, DSL_EXIT_AGENT, or the stop's code).
 */
int dsl_job_probe(struct dsl_job *job, int sig_rfd);

#endif
