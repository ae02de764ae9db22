/*
 * Starting one worker process (house style 13, after git's run-command and libuv's
 * uv_spawn). Everything is built before fork(); the child only does async-signal-safe
 * work: new process group, parent-death signal, pipes onto fds 1 and 2, chdir, execve.
 * A CLOEXEC notify pipe carries a failed exec's errno back, so "cannot start" is
 * reported synchronously by dsl_spawn() instead of as a mysterious exit 127.
 */
#ifndef DSLAUNCH_SPAWN_H
#define DSLAUNCH_SPAWN_H

#include <sys/types.h>

struct dsl_spawn_opts {
    char *const *argv; /* argv[0] is resolved against PATH of env (or used as a path) */
    char *const *env;  /* complete environment of the child */
    const char *cwd;   /* NULL: inherit */
    int stdin_null;    /* 1: stdin from /dev/null */
    int new_pgroup;    /* 1: the child leads its own process group */
    int pdeathsig;     /* signal the child gets when the spawner dies (0: none) */
};

struct dsl_proc {
    pid_t pid;
    int out_fd; /* read end of the child's stdout pipe (non-blocking, CLOEXEC) */
    int err_fd; /* read end of the child's stderr pipe */
};

/**
 * Resolve a program name as execvp would, using the PATH found in env (or a default).
 * Returns a malloc'd path or NULL with err ("program 'x' not found in PATH",
 * "program './x' is not executable").
 */
char *dsl_spawn_resolve(const char *prog, char *const *env, const char *cwd, int *code,
                        char *err);
/** Start a child. On failure nothing is left running and err says why (-errno). */
int dsl_spawn(struct dsl_proc *p, const struct dsl_spawn_opts *o, char *err);

/** "SIGTERM"-style name of a signal; "SIG<n>" for unknown ones (static or thread-local). */
const char *dsl_signame(int sig);

#endif
