/*
 * The node agent's watch over its ranks (agent_progress.c): progress files, process
 * states, and stack captures on request. agent.c owns one struct dsl_agent_progress,
 * calls these at its hook points and sends the messages they fill; nothing here calls
 * back into agent.c. Ranks are addressed by their index in the start message.
 */
#ifndef DSLAUNCH_AGENT_PROGRESS_H
#define DSLAUNCH_AGENT_PROGRESS_H

#include <poll.h>
#include <stddef.h>
#include <sys/types.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/progress.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/proto/proto.h"

/* Python processes below one rank whose tracebacks a stack capture asks for, at most */
#define DSL_AGENT_PY_MAX 8

struct dsl_agent_rank_watch {
    int rank;
    pid_t pid;                    /* 0 until started */
    int exited;
    char *path;                   /* the rank's progress file (owned), NULL: none */
    struct dsl_progress_view last; /* what was last reported */
    char pstate;                  /* last reported process state letter */
    int busy;                     /* last reported: CPU time (a tenth of a core) or I/O */
    unsigned long long cpu;       /* CPU time of its processes at the last look (ticks) */
    unsigned long long io_all;    /* ... and the bytes they read and wrote */
    double t_cpu;                 /* when that was read; 0: never */
    unsigned long long io;        /* in a phase: bytes moved at the last look; 0: none */
    int pyfault;                  /* PYTHONFAULTHANDLER set in the rank's environment */
    /* stack capture */
    int st;                       /* enum in agent_progress.c */
    int st_fd;                    /* the tool's output, -1 when none */
    pid_t st_pid;                 /* the tool (leads its own process group) */
    double st_deadline;
    const char *st_tool;
    struct dsl_dynbuf st_out;     /* the tool's output */
    struct dsl_dynbuf st_py;      /* stderr lines after the faulthandler dump was asked */
    pid_t st_py_pid[DSL_AGENT_PY_MAX]; /* the Python processes below the rank dumped */
    int st_npy;                   /* how many; 0: the rank itself, or none */
};

struct dsl_agent_progress {
    double tick;                  /* seconds between reads; 0: progress is off */
    double next_tick;
    struct dsl_agent_rank_watch *r;
    int n;
    int capturing;                /* a stacks request is being served */
    int probe;                    /* ... a probe: native stacks only, no Python dump */
    int swept;                    /* the files of dead agents were removed */
    double stack_timeout;
};

void dsl_agent_progress_init(struct dsl_agent_progress *p);
/** The start message: nranks ranks, progress read every tick s (0: no files). */
void dsl_agent_progress_setup(struct dsl_agent_progress *p, double tick, int nranks);
/**
 * Before rank index i (global rank) is spawned with env: create its progress file and
 * name it in env (DSLAUNCH_PROGRESS_FILE). Without a file (progress off, or it cannot
 * be created: a warning on stderr) the rank runs without one.
 */
void dsl_agent_progress_rank(struct dsl_agent_progress *p, int i, int rank,
                             struct dsl_strvec *env);
void dsl_agent_progress_started(struct dsl_agent_progress *p, int i, pid_t pid);
/**
 * Rank index i was reaped. 1 and *m (a progress message, the caller's to send and
 * release) when its final progress differs from what was reported; else 0.
 */
int dsl_agent_progress_exited(struct dsl_agent_progress *p, int i, struct dsl_msg *m);
/** A stderr line of rank index i (the faulthandler dump is read from these). */
void dsl_agent_progress_stderr(struct dsl_agent_progress *p, int i, const char *line,
                               size_t n);
/**
 * The launcher asked for stacks of every live rank (timeout s per process). A probe
 * takes the native stacks only (of the Python process below a rank that is a wrapper),
 * and leaves the ranks running; else a Python rank also dumps its traceback, and dies.
 */
void dsl_agent_progress_stacks(struct dsl_agent_progress *p, double timeout, int probe);
/** Capture tools' output fds to poll: written to pf (room for n entries); the count. */
size_t dsl_agent_progress_pollfds(struct dsl_agent_progress *p, struct pollfd *pf);
/** 1 if fd is a capture tool's (and it was read), else 0. */
int dsl_agent_progress_on_fd(struct dsl_agent_progress *p, int fd);
/**
 * Due work at time now: a progress read, capture deadlines and completion. 1 and *m
 * when a message is to be sent (call again until 0), else 0.
 */
int dsl_agent_progress_poll(struct dsl_agent_progress *p, double now, struct dsl_msg *m);
/** Stop capture tools, remove the progress files, free everything. */
void dsl_agent_progress_release(struct dsl_agent_progress *p);

#endif
