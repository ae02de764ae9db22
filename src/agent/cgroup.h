/*
 * Cgroups for ranks (private to src/agent): what this machine offers (a host), and one
 * rank's set of cgroups, one per hierarchy used. contain.h builds the agent's policy on
 * top of it; cgroup.c says how each operation maps to the kernel's files.
 */
#ifndef DSLAUNCH_AGENT_CGROUP_H
#define DSLAUNCH_AGENT_CGROUP_H

#include <stddef.h>
#include <sys/types.h>

/* The hierarchies a rank can be put into. */
enum dsl_cg_kind {
    DSL_CG_V2 = 0,  /* the unified (v2) tree: membership, cgroup.kill, maybe memory */
    DSL_CG_MEMORY,  /* v1 memory controller: limit, OOM counter, peak */
    DSL_CG_PIDS,    /* v1 pids controller: membership */
    DSL_CG_FREEZER, /* v1 freezer: freeze, kill, thaw */
    DSL_CG_NKIND,
};

/* Which hierarchies to consider (DSLAUNCH_CONTAIN: auto, v1, v2, tracking). */
#define DSL_CG_WANT_V1 1u
#define DSL_CG_WANT_V2 2u

/* What this machine lets this process do with cgroups. */
struct dsl_cghost {
    char *own[DSL_CG_NKIND]; /* directory job cgroups are made in (owned); NULL: unusable */
    int v2_memory;           /* the v2 directory's children get the memory controller */
    int v2_kill;             /* cgroup.kill exists (kernel 5.14 and later) */
    int v2_freeze;           /* cgroup.freeze exists (kernel 5.2 and later) */
    char mode[96];           /* "cgroup v1 memory+pids+freezer, v2 (cgroup.kill)", or
                                "process tracking" when no hierarchy is usable */
};

/* One rank's cgroups, and how a child of the agent gets into them (cgroup.c says why
   in this way): born in the v2 one through fd, then into each v1 one through procs. */
struct dsl_cgrank {
    char *dir[DSL_CG_NKIND];       /* the rank's directory per hierarchy (owned) or NULL */
    char *procs[DSL_CG_NKIND + 1]; /* files the child writes "0" into, NULL-terminated
                                      (owned), for dsl_child_opts.cgroup_procs: the v1
                                      ones' "tasks" (the child is single-threaded; their
                                      cgroup.procs where only that is writable), and
                                      the v2 one's cgroup.procs when fd could not be
                                      opened */
    int nprocs;
    int fd;                        /* the v2 directory, open (O_PATH, CLOEXEC), for
                                      dsl_child_opts.cgroup_fd; -1: none */
    char *fd_procs;                /* its cgroup.procs (owned), the kernel's fallback */
};

/* A rank cgroup's memory facts (-1: not known). */
struct dsl_cgmem {
    long long oom_kills; /* processes the OOM killer ended in it */
    long long failcnt;   /* v1: times the limit was hit */
    double limit;        /* bytes; 0: no limit */
    double peak;         /* bytes at most in use */
};

/**
 * Where this process's cgroup of one hierarchy is in the file system: mountinfo is the
 * text of /proc/self/mountinfo, self_cgroup that of /proc/self/cgroup, controller a v1
 * controller name ("memory") or "" for the v2 tree. 0 and dir filled, or -ENOENT (not
 * mounted, or this process's cgroup is not below the mount) or -ENAMETOOLONG.
 */
int dsl_cgroup_locate(const char *mountinfo, const char *self_cgroup, const char *controller,
                      char *dir, size_t n);
/** 1 when a kernel release ("6.18.4-x", uname's) is major.minor or later, else 0. */
int dsl_cgroup_kernel_at_least(const char *release, int major, int minor);
/** 1 when word is one of the words of list (separated by sep), else 0. */
int dsl_cgroup_has_word(const char *list, const char *word, char sep);

/** Find the hierarchies this process may create cgroups in (want: DSL_CG_WANT_*). */
void dsl_cghost_detect(struct dsl_cghost *h, unsigned want);
/** 1 when a rank's memory can be limited and its OOM kills counted. */
int dsl_cghost_memory(const struct dsl_cghost *h);
/** 1 when some hierarchy is usable. */
int dsl_cghost_usable(const struct dsl_cghost *h);
/** Remove the job's directories (job is "dslaunch-<run_id>") where they are empty. */
void dsl_cghost_remove_job(const struct dsl_cghost *h, const char *job);
void dsl_cghost_release(struct dsl_cghost *h);

/**
 * Make rank's cgroups below job in every usable hierarchy, with memory_limit bytes
 * (0: none) where the memory controller is. On failure nothing is left and err says why.
 */
int dsl_cgrank_create(struct dsl_cgrank *r, const struct dsl_cghost *h, const char *job,
                      int rank, unsigned long long memory_limit, char *err);
/** Processes in the rank's cgroups now (0: empty), or -errno when none can be read. */
int dsl_cgrank_count(const struct dsl_cgrank *r);
/** Send sig to every process in it except the members of process group skip_pgid
    (0: none skipped). Returns how many were signalled. */
int dsl_cgrank_signal(const struct dsl_cgrank *r, int sig, pid_t skip_pgid);
/** SIGKILL everything in it without a window for a fork to escape: cgroup.kill, else
    freeze, kill, thaw, else kill what is listed (the caller repeats until empty). */
void dsl_cgrank_kill(const struct dsl_cgrank *r, const struct dsl_cghost *h);
/** Read the memory facts (all -1 where the rank has no memory cgroup). */
void dsl_cgrank_memory(const struct dsl_cgrank *r, struct dsl_cgmem *m);
/** rmdir every directory of the rank (its fd is closed first). 0 when all are gone,
    else -errno (-EBUSY: not empty yet). */
int dsl_cgrank_remove(struct dsl_cgrank *r);
void dsl_cgrank_release(struct dsl_cgrank *r);

#endif
