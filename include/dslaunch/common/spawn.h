/*
 * Starting child processes. dsl_spawn_child() is the one fork/exec of dslaunch: the
 * ranks an agent starts, the local transport's agent, pdsh and mpirun for the
 * connect-back transports, and doctor's all-reduce job all go through it. dsl_spawn()
 * builds on it for a worker whose stdout and stderr the caller reads from pipes.
 *
 * Everything is built before fork(); the child only does async-signal-safe work, in
 * this order: joining its cgroups (or being born in one: cgroup_fd), its own process
 * group, the parent-death signal (and a check that the parent did not die before it
 * asked for it), default signal dispositions and an empty
 * signal mask, fds 0 to 2, the working directory, closing the other fds, then execve
 * (or a function run in the child itself). With report_errors, a CLOEXEC pipe carries
 * the errno of a failed set-up or exec back, so "cannot start" is reported by the call
 * instead of as a mysterious exit 127 later.
 */
#ifndef DSLAUNCH_SPAWN_H
#define DSLAUNCH_SPAWN_H

#include <signal.h>
#include <sys/types.h>

#define DSL_SPAWN_KEEP (-1)    /* fd_in/fd_out/fd_err: leave what the child inherits */
#define DSL_SPAWN_DEVNULL (-2) /* fd_in/fd_out/fd_err: /dev/null */

struct dsl_child_opts {
    /* What the child runs: run(run_arg) when run is set, else execve of path (or, when
       path is NULL, of argv[0] looked up in this process's PATH, as execvpe does). */
    const char *path;
    char *const *argv;
    char *const *env;   /* the child's whole environment; NULL: this process's */
    int (*run)(void *arg); /* a program that is its own child: the child _exits with
                              run's result, without an exec (stdio is flushed before the
                              fork so the child cannot write the parent's buffers again) */
    void *run_arg;
    /* The child's set-up. fd_in, fd_out, fd_err go onto fds 0, 1, 2 in that order: an
       fd of this process (its CLOEXEC flag does not matter), DSL_SPAWN_KEEP or
       DSL_SPAWN_DEVNULL. There is no default: a 0 means this process's stdin. */
    int fd_in, fd_out, fd_err;
    const char *cwd;    /* NULL: inherit */
    int new_pgroup;     /* 1: the child leads a process group of its own (set in the
                           parent as well, so an early killpg() cannot miss it) */
    int pdeathsig;      /* signal the child gets when this process dies (0: none) */
    const char *const *cgroup_procs; /* NULL-terminated cgroup.procs paths the child
                           moves itself into first, before anything else (NULL: none);
                           a failure is "cannot put 'argv[0]' into its cgroup: ..." */
    int cgroup_fd;      /* an open cgroup v2 directory the child is born in (clone3 with
                           CLONE_INTO_CGROUP: no migration, so none of the global lock a
                           write to cgroup.procs takes; 0: none). Not with run. Where the
                           kernel refuses it (before 5.7, a seccomp filter) the child joins
                           cgroup_fd_procs (that directory's cgroup.procs) instead */
    const char *cgroup_fd_procs;
    const int *sigdfl;  /* signals put back to SIG_DFL, 0-terminated; NULL: every one */
    int close_fds;      /* 1: close every fd above 2 before the exec or run */
    const void *affinity; /* a cpu_set_t the child binds itself to (NULL: inherit) */
    size_t affinity_size;
    int keep_fd;        /* an fd above 2 the child keeps at its number, CLOEXEC or not
                           (an inherited listening socket; 0: none); close_fds spares it */
    int report_errors;  /* 1: wait until the child has exec'd (or run has started);
                           a failure is this call's error, and the child is reaped */
    int setup_exit;     /* exit status of a child whose set-up failed (0: 127); a failed
                           exec always exits 127 */
};

/**
 * Fork a child set up as o says and start it. *pid is the child, the caller's to wait
 * for. Negative code with err set when no child could be made, and with report_errors
 * when it could not start ("cannot start 'argv[0]': ...", -errno) or could not join
 * its cgroup ("cannot put 'argv[0]' into its cgroup: ...", DSL_ESPAWN: the node's
 * set-up failed, whatever the errno, not the program).
 */
int dsl_spawn_child(const struct dsl_child_opts *o, pid_t *pid, char *err);

/* ---- a worker with its output on pipes ---- */

struct dsl_spawn_opts {
    char *const *argv; /* argv[0] is resolved against PATH of env (or used as a path) */
    char *const *env;  /* complete environment of the child */
    const char *cwd;   /* NULL: inherit */
    int stdin_null;    /* 1: stdin from /dev/null */
    int new_pgroup;    /* 1: the child leads its own process group */
    int pdeathsig;     /* signal the child gets when the spawner dies (0: none) */
    const char *const *cgroup_procs; /* cgroup.procs files the child joins before its
                          exec (NULL-terminated; NULL: none), see dsl_child_opts */
    int cgroup_fd;     /* a cgroup v2 directory the child is born in, and its cgroup.procs
                          for kernels without CLONE_INTO_CGROUP (0: none), see dsl_child_opts */
    const char *cgroup_fd_procs;
    int keep_fd;       /* an fd above 2 the child inherits at its number (0: none) */
    const void *affinity; /* a cpu_set_t the child binds itself to (NULL: inherit) */
    size_t affinity_size;
};

struct dsl_proc {
    pid_t pid;
    int out_fd; /* read end of the child's stdout pipe (non-blocking, CLOEXEC) */
    int err_fd; /* read end of the child's stderr pipe */
    int pending; /* between dsl_spawn_begin and dsl_spawn_end: its report pipe; else -1 */
};

/**
 * Check that the Python SCRIPT an interpreter will be given can be read from cwd (a
 * relative script is relative to cwd, NULL: the current directory), so that a missing
 * or misspelt script is an error before anything starts instead of an interpreter's
 * complaint from every rank. 0, or a negative errno with err ("cannot run 'x.py': No
 * such file or directory in '/work'").
 */
int dsl_spawn_check_script(const char *script, const char *cwd, char *err);

/**
 * Resolve a program name as execvp would, using the PATH found in env (or a default).
 * Returns a malloc'd path or NULL with err ("program 'x' not found in PATH",
 * "program './x' is not executable").
 */
char *dsl_spawn_resolve(const char *prog, char *const *env, const char *cwd, int *code,
                        char *err);
/**
 * Start a worker: every signal back to its default, stdout and stderr on pipes, a
 * failed exec reported here. On failure nothing is left running and err says why
 * (-errno, or DSL_ESPAWN for a cgroup the child could not join: dsl_spawn_child).
 */
int dsl_spawn(struct dsl_proc *p, const struct dsl_spawn_opts *o, char *err);
/**
 * dsl_spawn() in two halves, for a caller that starts several workers: begin forks (the
 * child is in its process group and cgroups from here on) and returns without waiting
 * for the exec; end waits for it, with dsl_spawn()'s result (argv0 names the program
 * in err). The children of several begins then run their set-up and exec side by side
 * instead of one after the other, each a wait for the scheduler on a loaded node. After
 * a failed end nothing of the child is left (reaped, its pipes closed).
 */
int dsl_spawn_begin(struct dsl_proc *p, const struct dsl_spawn_opts *o, char *err);
int dsl_spawn_end(struct dsl_proc *p, const char *argv0, char *err);

/* The signals that ask a program to stop, for dsl_signals_set(). */
#define DSL_STOP_SIGNALS ((const int[]){SIGINT, SIGTERM, SIGHUP, 0})

/**
 * Install handler (or SIG_DFL, SIG_IGN) for each signal of sigs (ended by 0), with
 * sa_flags flags and no signal blocked while it runs.
 */
void dsl_signals_set(void (*handler)(int), int flags, const int *sigs);

/** "SIGTERM"-style name of a signal; "SIG<n>" for unknown ones (static or thread-local). */
const char *dsl_signame(int sig);

#endif
