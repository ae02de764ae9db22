/*
 * Containing a node's ranks (private to src/agent): every process a
 * rank starts, in whatever session or group it puts itself, is found and killed when
 * the node is done, and survives neither a SIGKILL of the agent nor its crash. Ranks
 * go into cgroups of their own where the machine allows it (cgroup.h); elsewhere the
 * agent tracks its descendants through /proc. See contain.c for how.
 */
#ifndef DSLAUNCH_AGENT_CONTAIN_H
#define DSLAUNCH_AGENT_CONTAIN_H

#include <sys/types.h>

#include "cgroup.h"
#include "dslaunch/proto/proto.h"

/* One process as /proc/<pid>/stat describes it. */
struct dsl_procstat {
    pid_t pid, ppid, pgid;
    char state;                    /* 'R', 'S', 'Z', ... */
    unsigned long long start;      /* start time in clock ticks after boot */
    unsigned long long cpu;        /* CPU time used (utime + stime), clock ticks */
};

/* A process the clean-up process knows, by pid and start time (pids are reused). */
struct dsl_tracked {
    pid_t pid;
    unsigned long long start;
};

struct dsl_contain_rank {
    struct dsl_cgrank cg;  /* its cgroups (cgroup mode) */
    pid_t pid;             /* the rank, leader of its process group; 0 until started */
};

struct dsl_contain {
    struct dsl_cghost host;         /* what the machine offers */
    int cgroups;                    /* 1: ranks are in cgroups; 0: process tracking */
    char job[96];                   /* "dslaunch-<run_id>" */
    char run_id[72];                /* as the job gave it (cut to fit) */
    struct dsl_contain_rank *ranks;
    int nranks;
    pid_t self;                     /* the agent */
    pid_t keeper;                   /* the clean-up process; 0: none */
    int keeper_fd;                  /* its pipe (write end); -1: none */
    int kmsg_fd;                    /* /dev/kmsg from the job's start; -1: not readable */
    pid_t oom_seen[64];             /* pids the kernel log named as OOM kills (a ring) */
    int noom;
    double next_scan;               /* tracking: when the keeper hears of new processes */
    double fence_after;             /* the keeper fences the ranks after this many seconds
                                       without a word from the agent; 0: never */
    double fence_grace;             /* ... SIGTERM first, SIGKILL this much later */
    double next_beat;               /* when the agent next tells the keeper it lives */
    struct dsl_tracked *told;       /* tracking: what the keeper has been told */
    size_t ntold, told_cap;
};

/**
 * Find how this machine can contain ranks. DSLAUNCH_CONTAIN in the agent's environment
 * narrows the choice: "v1" or "v2" (only that cgroup hierarchy), "tracking" (no
 * cgroups); unset or "auto": everything usable.
 */
void dsl_contain_init(struct dsl_contain *c);
/** "cgroup v1 memory+pids+freezer, v2 (cgroup.kill)", "process tracking", ... */
const char *dsl_contain_mode(const struct dsl_contain *c);
/** 1 when a rank's memory can be limited and its OOM kills counted. */
int dsl_contain_memory(const struct dsl_contain *c);
/**
 * Before dsl_contain_start(): the clean-up process fences the ranks of an agent that
 * is silent for `silence` seconds (stopped, wedged): SIGTERM to every contained
 * process, SIGKILL `grace` seconds later. The agent speaks through
 * dsl_contain_tick(), which must then be called at least every silence/4 seconds
 * until dsl_contain_finish(). silence 0 (the default): only the agent's death acts.
 */
void dsl_contain_set_fence(struct dsl_contain *c, double silence, double grace);
/**
 * Prepare nranks ranks (global numbers in ranks[]) of the job run_id: make their
 * cgroups (with memory_limit bytes each, 0: none), open the kernel log, start the
 * clean-up process. Without cgroups, or when they cannot be made and no limit was
 * asked for, the job runs under process tracking (a line on stderr says why). Fails,
 * with err, only when a memory limit was asked for and cannot be set.
 */
int dsl_contain_start(struct dsl_contain *c, const char *run_id, const int *ranks, int nranks,
                      unsigned long long memory_limit, char *err);
/** Files rank i writes itself into before its exec (dsl_child_opts.cgroup_procs). */
const char *const *dsl_contain_procs(const struct dsl_contain *c, int i);
/** The cgroup v2 directory rank i is born in (dsl_child_opts.cgroup_fd; 0: none), and
    in *procs its cgroup.procs for kernels that cannot (cgroup_fd_procs). */
int dsl_contain_cgroup_fd(const struct dsl_contain *c, int i, const char **procs);
/** Rank i was started as pid. */
void dsl_contain_started(struct dsl_contain *c, int i, pid_t pid);
/** Send sig to every contained process except the members of the process groups of
    the ranks i with skip_group[i] set (the caller signalled those with killpg); NULL:
    skip none. */
void dsl_contain_signal(struct dsl_contain *c, int sig, const char *skip_group);
/** SIGKILL every contained process (call again until dsl_contain_count() is 0). */
void dsl_contain_kill(struct dsl_contain *c);
/** Contained processes still alive (ranks not yet reaped included). */
int dsl_contain_count(struct dsl_contain *c);
/** Periodic work: tell the clean-up process the agent lives (when fenced) and, under
    process tracking, what processes are new. */
void dsl_contain_tick(struct dsl_contain *c, double now);
/** Why rank i (reaped just now; sig: the signal that ended it, or 0; by_stop: the agent
    had sent it that signal) ended, as far as the node can tell. */
void dsl_contain_cause(struct dsl_contain *c, int i, int sig, int by_stop,
                       struct dsl_exit_cause *out);
/**
 * Try once to remove the ranks' cgroups (rmdir, refused while a process is inside or
 * still exiting). 0 when they are gone (or there are none: process tracking), else
 * -errno (-EBUSY: not empty yet); call again until it succeeds or the caller gives up.
 */
int dsl_contain_remove(struct dsl_contain *c);
/**
 * The job is over on this node: remove the cgroups and dismiss the clean-up process.
 * -EBUSY when processes are left (the clean-up process then keeps trying after the
 * agent exits; a line on stderr names the cgroups not removed). counted_empty: the
 * caller's dsl_contain_count() just returned 0 and it started nothing since, so under
 * process tracking no walk of /proc is made again (nothing is left that could start a
 * process); 0: count here.
 */
int dsl_contain_finish(struct dsl_contain *c, int counted_empty);
/** Free everything. Without a successful finish the clean-up process takes over. */
void dsl_contain_release(struct dsl_contain *c);

/* ---- the process table (procfs.c) ---- */

/** Parse the text of /proc/<pid>/stat. 0, or -EINVAL. */
int dsl_contain_parse_stat(const char *text, struct dsl_procstat *out);
/** Read and parse /proc/<pid>/stat. 0, -errno (the process is gone) or -EINVAL. */
int dsl_contain_read_stat(pid_t pid, struct dsl_procstat *out);
/** Every process now, into *out (malloc'd, the caller frees it). Returns the count. */
int dsl_contain_scan(struct dsl_procstat **out);
/**
 * Mark the processes in p[0..n) that descend from root (root itself excluded): mark[i]
 * = 1 for them, 0 for the rest. p need not be sorted. Returns how many were marked.
 */
int dsl_contain_descendants(const struct dsl_procstat *p, int n, pid_t root, char *mark);

#endif
