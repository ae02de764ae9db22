/*
 * Starting one worker process.
 *
 * Theory of operation: the parent prepares argv, env, the resolved program path and
 * three pipes (stdout, stderr, and a CLOEXEC notify pipe) before fork(). The child
 * makes itself a process-group leader (so the whole subtree can be signalled with one
 * killpg), asks for a parent-death signal (so it dies when its agent is SIGKILLed),
 * checks that the parent did not die in between, restores default signal dispositions
 * and an empty mask, wires the pipes onto fds 1/2, changes directory and execs. If any of
 * that fails it writes errno into the notify pipe and _exits(127). The parent blocks on
 * the notify pipe, which closes on a successful exec: zero bytes means success.
 */
#define _GNU_SOURCE /* pipe2, prctl */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/job/spawn.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

static const char *find_env(char *const *env, const char *key)
{
    size_t n = strlen(key);
    for (; env && *env; env++)
        if (!strncmp(*env, key, n) && (*env)[n] == '=')
            return *env + n + 1;
    return NULL;
}

static int is_exec_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

char *dsl_spawn_resolve(const char *prog, char *const *env, const char *cwd, int *code,
                        char *err)
{
    *code = 0;
    if (!prog || !*prog) {
        *code = -ENOENT;
        dsl_seterr(err, -ENOENT, "empty program name");
        return NULL;
    }
    if (strchr(prog, '/')) {
        char *path = (prog[0] == '/' || !cwd) ? dsl_xstrdup(prog)
                                              : dsl_xasprintf("%s/%s", cwd, prog);
        struct stat st;
        if (stat(path, &st) != 0) {
            *code = -errno;
            dsl_seterr(err, -errno, "cannot start '%s': %s", prog, strerror(errno));
        } else if (!S_ISREG(st.st_mode) || access(path, X_OK) != 0) {
            *code = -EACCES;
            dsl_seterr(err, -EACCES, "cannot start '%s': not an executable file", prog);
        } else {
            return path;
        }
        free(path);
        return NULL;
    }
    const char *pathvar = find_env(env, "PATH");
    if (!pathvar)
        pathvar = "/usr/local/bin:/usr/bin:/bin";
    const char *p = pathvar;
    int saw_noexec = 0;
    for (;;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        char *dir = len ? dsl_xstrndup(p, len) : dsl_xstrdup(".");
        char *cand = (dir[0] == '/' || !cwd) ? dsl_xasprintf("%s/%s", dir, prog)
                                             : dsl_xasprintf("%s/%s/%s", cwd, dir, prog);
        free(dir);
        if (is_exec_file(cand))
            return cand;
        if (access(cand, F_OK) == 0)
            saw_noexec = 1;
        free(cand);
        if (!colon)
            break;
        p = colon + 1;
    }
    if (saw_noexec) {
        *code = -EACCES;
        dsl_seterr(err, -EACCES, "cannot start '%s': found in PATH but not executable", prog);
    } else {
        *code = -ENOENT;
        dsl_seterr(err, -ENOENT, "cannot start '%s': command not found in PATH", prog);
    }
    return NULL;
}

static void child_fail(int fd, int e)
{
    ssize_t w = write(fd, &e, sizeof(e));
    (void)w;
    _exit(127);
}

int dsl_spawn(struct dsl_proc *p, const struct dsl_spawn_opts *o, char *err)
{
    int out[2] = {-1, -1}, errp[2] = {-1, -1}, notify[2] = {-1, -1};
    int r, code;
    char *path = dsl_spawn_resolve(o->argv[0], o->env, o->cwd, &code, err);
    if (!path)
        return code;
    p->pid = -1;
    p->out_fd = p->err_fd = -1;
    if (pipe2(out, O_CLOEXEC) || pipe2(errp, O_CLOEXEC) || pipe2(notify, O_CLOEXEC)) {
        r = dsl_seterr(err, -errno, "cannot create pipe: %s", strerror(errno));
        goto fail;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        r = dsl_seterr(err, -errno, "cannot fork: %s", strerror(errno));
        goto fail;
    }
    if (pid == 0) {
        if (o->new_pgroup && setpgid(0, 0) < 0)
            child_fail(notify[1], errno);
        if (o->pdeathsig) {
            prctl(PR_SET_PDEATHSIG, o->pdeathsig);
            if (getppid() != parent)
                _exit(127);
        }
        sigset_t all;
        sigemptyset(&all);
        for (int s = 1; s < NSIG; s++)
            if (s != SIGKILL && s != SIGSTOP)
                signal(s, SIG_DFL);
        sigprocmask(SIG_SETMASK, &all, NULL);
        if (o->stdin_null) {
            int nfd = open("/dev/null", O_RDONLY);
            if (nfd < 0 || dup2(nfd, 0) < 0)
                child_fail(notify[1], errno);
        }
        if (dup2(out[1], 1) < 0 || dup2(errp[1], 2) < 0)
            child_fail(notify[1], errno);
        if (o->cwd && chdir(o->cwd) < 0)
            child_fail(notify[1], errno);
        execve(path, o->argv, o->env);
        child_fail(notify[1], errno);
    }
    close(out[1]);
    close(errp[1]);
    close(notify[1]);
    out[1] = errp[1] = notify[1] = -1;
    int e = 0;
    ssize_t n;
    do {
        n = read(notify[0], &e, sizeof(e));
    } while (n < 0 && errno == EINTR);
    close(notify[0]);
    notify[0] = -1;
    if (n > 0) {
        waitpid(pid, NULL, 0);
        r = dsl_seterr(err, -e, "cannot start '%s': %s", o->argv[0], strerror(e));
        goto fail;
    }
    if (o->new_pgroup)
        setpgid(pid, pid); /* also in the parent: no race with an early killpg */
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(errp[0], F_SETFL, O_NONBLOCK);
    p->pid = pid;
    p->out_fd = out[0];
    p->err_fd = errp[0];
    free(path);
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (errp[i] >= 0)
            close(errp[i]);
        if (notify[i] >= 0)
            close(notify[i]);
    }
    free(path);
    return r;
}

const char *dsl_signame(int sig)
{
    static const struct {
        int sig;
        const char *name;
    } names[] = {
        {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
        {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
        {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
        {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
        {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGXCPU, "SIGXCPU"},
        {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},
    };
    static _Thread_local char buf[16];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i].sig == sig)
            return names[i].name;
    snprintf(buf, sizeof(buf), "SIG%d", sig);
    return buf;
}
