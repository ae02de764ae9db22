/*
 * The launcher's side of progress and hangs, inside src/job/ only:
 *
 *   job_hang.c   the state: every rank's last progress (fed by job_loop.c from the
 *                agents' messages), the verdict once there is one, the stacks, the
 *                hang report and the summary. Calls nothing in job_loop.c.
 *   job_watch.c  the watchdog run from job.c's loop: --job-timeout, the hang judge
 *                (hang.c), asking the agents for stacks, then stopping the job.
 *
 * So the calls go job.c -> job_watch.c -> job_loop.c -> job_hang.c, never back.
 */
#ifndef DSLAUNCH_JOB_HANG_H
#define DSLAUNCH_JOB_HANG_H

#include "dslaunch/job/job.h"
#include "hang.h"

#define DSL_HANG_DEFAULT 300.0     /* --hang-timeout when not given, for ranks that report */
#define DSL_HANG_STACK_TIMEOUT 10.0 /* seconds one stack capture may take */
#define DSL_HANG_PROBE_TIMEOUT 5.0  /* seconds one probe's native stack may take */

enum dsl_hang_state {
    DSL_HANG_WATCH = 0, /* nothing wrong (yet) */
    DSL_HANG_DECLARED,  /* a verdict: the stacks are to be asked for */
    DSL_HANG_COLLECTING, /* stacks asked for; waiting for the agents */
    DSL_HANG_DONE,      /* the job is being stopped */
};

struct dsl_job_hang_rank {
    double t_advance;             /* last progress (dsl_now() time) */
    double t_exit;
    int reports;                  /* its progress file changed at least once */
    int heard;                    /* its agent sent progress for it: it knows "stacks" */
    struct dsl_progress_view v;
    char pstate;
    int busy;                     /* its processes use CPU time or move bytes (the
                                     agent's last look) */
    double t_busy;                /* when it was last seen busy (0: never) */
    int probes;                   /* its agent knows the probe (sent busy) */
    /* the probes of a quiet spell: what the last one found, and since when */
    unsigned wait_spell;          /* the spell they belong to (stale when not current) */
    enum dsl_hang_wait wait;
    const char *wait_what;        /* static (hang_stack.h) */
    double t_wait;                /* IN: when the first probe that found it IN was asked */
    char *stack_tool, *stack;     /* from the agent (owned) */
};

struct dsl_job_hang {
    double timeout;               /* the hang timeout: given, or DSL_HANG_DEFAULT */
    int given;                    /* --hang-timeout given (> 0): every rank is armed */
    int off;                      /* --hang-timeout 0 */
    double tick;                  /* agents read progress files this often; 0: no files */
    double t0;                    /* when the ranks were started */
    enum dsl_hang_state state;
    int reason;                   /* DSL_EXIT_HANG or DSL_EXIT_JOB_TIMEOUT */
    struct dsl_hang_verdict verdict;
    char said[1100];              /* "hang: " or "job timeout: " + the verdict */
    double t_declared, collect_deadline;
    unsigned char *answered;      /* per node: its stacks arrived */
    int warned_finished;
    int reported;                 /* the report is written (or could not be) */
    char *report_txt, *report_json;
    /* the job as a whole: a quiet spell starts at every progress anywhere */
    double t_quiet;               /* last progress anywhere (dsl_now() time) */
    int lively;                   /* some rank showed progress */
    unsigned spell;               /* counts quiet spells */
    int probing;                  /* a probe was asked and is not complete */
    unsigned probe_spell;         /* ... in this spell */
    double t_probe_ask, probe_deadline;
    int nprobes;                  /* probes complete in this spell */
    double t_probe_last;          /* when the last complete one was asked */
    unsigned char *probe_asked;   /* per node: asked, not yet answered */
    struct dsl_hang_job jobv;     /* the judge's job-level input, rebuilt each look */
    struct dsl_job_hang_rank *r;  /* per rank */
    struct dsl_hang_rank *view;   /* per rank: the judge's input, rebuilt each look */
};

/* ---- job_hang.c ---- */

/** Set up job->hang once the job's ranks exist; released by dsl_job_hang_release. */
void dsl_job_hang_init(struct dsl_job *job);
void dsl_job_hang_release(struct dsl_job *job);
/** A start message for a node: the progress tick, PYTHONFAULTHANDLER. */
void dsl_job_hang_start_msg(struct dsl_job *job, struct dsl_msg *m);
/** A progress or stacked message from node n. */
void dsl_job_hang_on_msg(struct dsl_job *job, struct dsl_job_node *n, const struct dsl_msg *m);
/** An output line of r: progress, for a rank that reports none otherwise. */
void dsl_job_hang_on_output(struct dsl_job *job, const struct dsl_job_rank *r);
/**
 * r's exit was recorded. 1 when the hang machinery owns the job's outcome (a verdict
 * stands, or this error exit was caused by a stuck peer, which is now the verdict):
 * the caller then treats the exit as no failure of its own and starts no stop.
 */
int dsl_job_hang_on_exit(struct dsl_job *job, const struct dsl_job_rank *r);
/** Complete the probe in flight when every agent answered or its deadline passed. */
void dsl_job_hang_probe_check(struct dsl_job *job, double now);
/** Refresh job->hang->view from the job (times relative to the ranks' start, t0). */
void dsl_job_hang_look(struct dsl_job *job);
/** Record verdict v (in job->hang->verdict already) as the job's outcome: code. */
void dsl_job_hang_declare(struct dsl_job *job, int code);
/** Write the hang report (once). */
void dsl_job_hang_report(struct dsl_job *job);
/** The job's summary when there is a verdict (report written first); 1 if printed. */
int dsl_job_hang_summary(struct dsl_job *job);
/** "hang: <verdict>" or "job timeout: <verdict>" when there is one (job's), else NULL. */
const char *dsl_job_hang_verdict(const struct dsl_job *job);

/* ---- job_watch.c ---- */

/** One look from the job's loop: timeouts, the judge, stacks, the stop. */
void dsl_job_watch_tick(struct dsl_job *job);

#endif
