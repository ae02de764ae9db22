/*
 * Hang verdicts (hang.c): from what the launcher knows about every rank (alive or not,
 * when it last made progress, which collective it is in or last left, its process
 * state), decide whether the job hangs and which rank(s) to name, in words. Pure
 * functions of their arguments (times are seconds since the job started), so the unit
 * tests drive them directly; job_hang.c feeds them.
 */
#ifndef DSLAUNCH_HANG_H
#define DSLAUNCH_HANG_H

#include <stddef.h>

#include "dslaunch/common/progress.h"
#include "hang_stack.h"

enum dsl_hang_life {
    DSL_HANG_PENDING = 0, /* not started (yet) */
    DSL_HANG_RUNNING,
    DSL_HANG_EXITED,
};

/* What the launcher knows about one rank. */
struct dsl_hang_rank {
    int rank;
    const char *host;           /* not owned */
    int pid;
    enum dsl_hang_life life;
    int code, sig;              /* EXITED: its exit code, or the signal that killed it */
    double t_exit;              /* EXITED: when */
    int armed;                  /* the hang timeout applies to it */
    int reports;                /* its progress file has changed at least once */
    double t_advance;           /* when it last made progress (the start, at first) */
    struct dsl_progress_view v; /* its last progress */
    char pstate;                /* process state letter (T: stopped), 0 unknown */
    int busy;                   /* its processes used CPU time at the last look */
    enum dsl_hang_wait wait;    /* the probes of this quiet spell (job-level evidence):
                                   IN: every one found it inside a collective, and the
                                   first one was half a timeout before the last */
    const char *wait_what;      /* IN: the library, in words (hang_stack.h); static */
    double waited;              /* IN: seconds from the first probe that found it there
                                   to the last */
};

/* What the launcher knows about the job as a whole. */
struct dsl_hang_job {
    double t_quiet;             /* the last progress anywhere (a progress file changed,
                                   an output line of any rank); the start, at first */
    int lively;                 /* some rank has shown progress since the start */
    int probed;                 /* the probes of the spell since t_quiet are in, the
                                   last asked a timeout after t_quiet (less a tick) */
};

struct dsl_hang_verdict {
    int hang;        /* 1: a hang (judge) or a cause found (cause) */
    int *stuck;      /* indexes of the ranks named as stuck (caller's array, n entries) */
    int nstuck;
    int first;       /* the rank the summary blames, -1 for none */
    char text[1024]; /* one line: "rank 5 (node2, pid 4242) never entered allreduce #1582;
                        ranks 0-4,6-7 wait in it" */
};

/**
 * Ranks that wait for peers working in a phase (common/progress.h: a checkpoint save or
 * load longer than the timeout) at time now: when the live ranks are those waiting in
 * the newest collective and ranks outside it that are all in a phase, not stopped, and
 * advanced within timeout, mark[i] = 1 for the waiters (mark: n bytes) and return how
 * many; else all 0 and 0. The caller counts their waiting as progress.
 */
int dsl_hang_excuse(const struct dsl_hang_rank *r, int n, double now, double timeout,
                    unsigned char *mark);
/**
 * Is it a hang at time now? Ranks that report progress are judged one by one: a rank
 * with no progress for timeout seconds is named when the collective record shows it
 * holding the others up (it never entered the collective they wait in, or it is
 * stopped in it), or when others still report beyond it. Else the job is judged as a
 * whole (job not NULL, every live rank armed): no progress anywhere for timeout, and
 * job->probed, and the evidence of the ranks' processes names the cause (hang.c's
 * theory of operation); a job whose silent ranks use CPU time outside collectives is
 * working, and one that never showed progress is not judged by its silence alone.
 * v->stuck must hold n entries. Returns v->hang.
 */
int dsl_hang_judge(const struct dsl_hang_rank *r, int n, double now, double timeout,
                   const struct dsl_hang_job *job, struct dsl_hang_verdict *v);
/**
 * Rank index failed exited with an error code: was it the victim of a stuck peer? Yes
 * when it was waiting inside a collective and a live rank never entered it (or left it
 * and went quiet) without progress for at least half as long as failed waited (1 s at
 * least), or when a live rank is stopped. Fills v like dsl_hang_judge; returns v->hang.
 */
int dsl_hang_cause(const struct dsl_hang_rank *r, int n, int failed, double now,
                   struct dsl_hang_verdict *v);
/**
 * Rank index failed exited with an error code after losing a peer in a collective
 * (lost_peer: its last stderr lines say so, dsl_hang_lost_peer_line): did a peer
 * leave the job early? Yes when one exited 0 before failed did, while failed still
 * ran; that peer is named (the first to exit). Fills v like dsl_hang_judge; v->hang.
 */
int dsl_hang_left_early(const struct dsl_hang_rank *r, int n, int failed, int lost_peer,
                        struct dsl_hang_verdict *v);
/** 1 when a stderr line is a communication library's "the peer is gone" error. */
int dsl_hang_lost_peer_line(const char *line);
/** Ranks as ranges ("0-4,6-7") into buf (cut with "..." when it does not fit). */
void dsl_hang_ranklist(const int *ranks, int n, char *buf, size_t cap);

#endif
