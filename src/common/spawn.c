/*
 * Starting child processes: the one fork/exec of dslaunch, and workers on pipes.
 *
 * Theory of operation. The parent prepares everything before fork(): argv, env, the
 * path to exec, the fds the child gets, and (with report_errors) a CLOEXEC notify pipe.
 * The child then only makes async-signal-safe calls, in a fixed order:
 *   0. "0" written into each listed cgroup.procs file (open, write, close), so the
 *      child and everything it will start belong to its cgroups before any of its own
 *      code runs: a descendant that leaves the process group or the session is still
 *      found there, and its memory is charged there. A cgroup v2 directory given as
 *      cgroup_fd needs no step: the child is made in it (clone3 with
 *      CLONE_INTO_CGROUP, kernel 5.7+), and where the kernel refuses that, a plain
 *      fork() is made and the child writes that directory's cgroup.procs in this step.
 *      Why: a write to cgroup.procs moves a whole thread group and takes the kernel's
 *      global cgroup_threadgroup_rwsem for writing, which waits for an RCU grace period
 *      (5-14 ms on the project's machines, once per burst of writes); being born in
 *      the cgroup takes it for reading only. A single-threaded child moving itself
 *      through a v1 "tasks" file (what cgroup.c lists) skips that lock as well;
 *   1. setpgid(0, 0) when it is to lead its own group, so the whole subtree can be
 *      signalled with one killpg();
 *   2. PR_SET_PDEATHSIG, so it dies when its spawner is SIGKILLed; the parent may have
 *      died before the prctl, so the child compares getppid() with the pid the parent
 *      had before the fork and exits if it changed;
 *   3. default dispositions for the listed signals (or all) and an empty mask: exec
 *      keeps ignored signals and the mask, and a child that does not exec keeps the
 *      parent's handlers too;
 *   4. dup2 of the given fds onto 0, 1, 2 (dup2 clears CLOEXEC on the copy);
 *   5. chdir, close_range(3, ...) when asked (the notify pipe survives it; it is CLOEXEC);
 *   6. execve / execvpe, or run() and _exit with its result.
 * A failing step writes errno and the step into the notify pipe and exits. The parent
 * blocks on the pipe, which closes at a successful exec (or just before run()): zero
 * bytes means the child started; an errno means it did not, and the parent reaps it
 * and says why (and, for step 0, that it was the cgroup that failed).
 *
 * dsl_spawn() is a worker on pipes: stdout and stderr each into a pipe whose read end
 * the caller polls, the program resolved in the child's PATH before the fork so that
 * "not found" and "not executable" are told apart, errors reported synchronously.
 */
#define _GNU_SOURCE /* pipe2, execvpe, close_range, sched_setaffinity */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

extern char **environ;

static const char *find_env(char *const *env, const char *key)
{
    return dsl_env_lookup(env, key, strlen(key));
}

static int is_exec_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

int dsl_spawn_check_script(const char *script, const char *cwd, char *err)
{
    char *path = (script[0] == '/' || !cwd || !cwd[0]) ? dsl_xstrdup(script)
                                                         : dsl_xasprintf("%s/%s", cwd, script);
    const char *where = script[0] == '/' ? "" : cwd && cwd[0] ? cwd : ".";
    int r = 0, fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) /* a directory opens: python3 runs one with a __main__.py */
        r = -errno;
    else
        close(fd);
    free(path);
    if (r < 0)
        return dsl_seterr(err, r, "cannot run '%s': %s%s%s%s", script, strerror(-r),
                          where[0] ? " in '" : "", where, where[0] ? "'" : "");
    return 0;
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

/* Which set-up step failed, as the child reports it with the errno. */
enum child_step { STEP_SETUP = 0, STEP_CGROUP = 1 };

/* The child's end: tell the parent why (when it listens) and exit. */
static _Noreturn void child_fail(int notify, int e, enum child_step step, int code)
{
    if (notify >= 0) {
        int msg[2] = {e, (int)step};
        ssize_t w = write(notify, msg, sizeof(msg));
        (void)w;
    }
    _exit(code);
}

/* Step 0: move the calling process into each cgroup (writing "0" means "the writer"). */
static int child_join_cgroups(const char *const *procs)
{
    for (; procs && *procs; procs++) {
        int fd = open(*procs, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
            return -1;
        ssize_t w = write(fd, "0", 1);
        int e = errno;
        close(fd);
        if (w != 1) {
            errno = w < 0 ? e : EIO;
            return -1;
        }
    }
    return 0;
}

/* Put src onto fd target of the child. */
static int child_fd(int src, int target)
{
    if (src == DSL_SPAWN_KEEP)
        return 0;
    int opened = -1;
    if (src == DSL_SPAWN_DEVNULL) {
        src = opened = open("/dev/null", (target ? O_WRONLY : O_RDONLY) | O_CLOEXEC);
        if (src < 0)
            return -1;
    }
    if (src == target) /* dup2 would leave its CLOEXEC flag: clear it */
        return fcntl(target, F_SETFD, 0) < 0 ? -1 : 0;
    if (dup2(src, target) < 0)
        return -1;
    if (opened >= 0)
        close(opened);
    return 0;
}

/* Close every fd above 2 but a and b (either <= 2: none), with close_range only. */
static void close_above_2(int a, int b)
{
    if (a <= 2) {
        a = b;
        b = -1;
    }
    if (b > 2 && b < a) {
        int t = a;
        a = b;
        b = t;
    }
    int keep[2] = {a, b}; /* ascending, or with b <= 2 */
    unsigned lo = 3;
    for (int i = 0; i < 2; i++) {
        if (keep[i] <= 2 || (unsigned)keep[i] < lo)
            continue;
        if ((unsigned)keep[i] > lo)
            close_range(lo, (unsigned)keep[i] - 1, 0);
        lo = (unsigned)keep[i] + 1;
    }
    close_range(lo, ~0U, 0);
}

static _Noreturn void child(const struct dsl_child_opts *o, pid_t parent, int notify,
                            int born_in_cgroup)
{
    int fail = o->setup_exit ? o->setup_exit : 127;
    if (child_join_cgroups(o->cgroup_procs) < 0)
        child_fail(notify, errno, STEP_CGROUP, fail);
    if (o->cgroup_fd > 0 && !born_in_cgroup) {
        const char *const one[2] = {o->cgroup_fd_procs, NULL};
        if (!o->cgroup_fd_procs) {
            errno = EINVAL;
            child_fail(notify, errno, STEP_CGROUP, fail);
        }
        if (child_join_cgroups(one) < 0)
            child_fail(notify, errno, STEP_CGROUP, fail);
    }
    if (o->new_pgroup && setpgid(0, 0) < 0)
        child_fail(notify, errno, STEP_SETUP, fail);
    if (o->pdeathsig) {
        prctl(PR_SET_PDEATHSIG, o->pdeathsig);
        if (getppid() != parent)
            _exit(fail);
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    if (o->sigdfl) {
        for (const int *s = o->sigdfl; *s; s++)
            sigaction(*s, &dfl, NULL);
    } else {
        for (int s = 1; s < NSIG; s++)
            if (s != SIGKILL && s != SIGSTOP)
                sigaction(s, &dfl, NULL);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (child_fd(o->fd_in, 0) < 0 || child_fd(o->fd_out, 1) < 0 || child_fd(o->fd_err, 2) < 0)
        child_fail(notify, errno, STEP_SETUP, fail);
    if (o->cwd && chdir(o->cwd) < 0)
        child_fail(notify, errno, STEP_SETUP, fail);
    if (o->keep_fd > 2 && fcntl(o->keep_fd, F_SETFD, 0) < 0)
        child_fail(notify, errno, STEP_SETUP, fail);
    if (o->affinity && sched_setaffinity(0, o->affinity_size, o->affinity) < 0)
        child_fail(notify, errno, STEP_SETUP, fail);
    if (o->run) {
        if (notify >= 0)
            close(notify); /* started: the parent stops waiting */
        if (o->close_fds)
            close_above_2(o->keep_fd, -1);
        _exit(o->run(o->run_arg));
    }
    if (o->close_fds)
        close_above_2(notify, o->keep_fd);
    char *const *env = o->env ? o->env : environ;
    if (o->path)
        execve(o->path, o->argv, env);
    else
        execvpe(o->argv[0], o->argv, env);
    child_fail(notify, errno, STEP_SETUP, 127);
}

/* The kernel's struct clone_args up to its cgroup field (clone3, Linux 5.7). */
struct clone3_args {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls,
        set_tid, set_tid_size, cgroup;
};
#define DSL_CLONE_INTO_CGROUP 0x200000000ULL

/*
 * fork(), with the child born in the cgroup v2 directory cgroup_fd (*born set) where
 * the kernel can. Only for a child that execs: the raw syscall skips glibc's fork
 * handlers, which is safe for the async-signal-safe steps before an exec and nothing
 * else. Any refusal (ENOSYS before 5.3 or under a seccomp filter, E2BIG before 5.7,
 * a permission) falls back to fork(): the child then joins through cgroup.procs, and a
 * real problem with the cgroup is reported from there.
 */
static pid_t fork_into(int cgroup_fd, int *born)
{
    *born = 0;
#ifdef SYS_clone3
    if (cgroup_fd > 0) {
        struct clone3_args ca;
        memset(&ca, 0, sizeof(ca));
        ca.flags = DSL_CLONE_INTO_CGROUP;
        ca.exit_signal = SIGCHLD;
        ca.cgroup = (uint64_t)cgroup_fd;
        long pid = syscall(SYS_clone3, &ca, sizeof(ca));
        if (pid >= 0) {
            *born = 1;
            return (pid_t)pid;
        }
    }
#else
    (void)cgroup_fd;
#endif
    return fork();
}

/* The fork half of dsl_spawn_child: *notify_out is the read end of the report pipe
   (-1 without report_errors), for spawn_wait. */
static int spawn_fork(const struct dsl_child_opts *o, pid_t *pid_out, int *notify_out,
                      char *err)
{
    int notify[2] = {-1, -1};
    *pid_out = -1;
    *notify_out = -1;
    if (o->report_errors && pipe2(notify, O_CLOEXEC) < 0)
        return dsl_seterr(err, -errno, "cannot create pipe: %s", strerror(errno));
    if (o->run) {
        fflush(stdout);
        fflush(stderr);
    }
    pid_t parent = getpid();
    int born = 0;
    pid_t pid = fork_into(o->run ? 0 : o->cgroup_fd, &born);
    if (pid < 0) {
        int e = errno;
        if (notify[0] >= 0) {
            close(notify[0]);
            close(notify[1]);
        }
        return dsl_seterr(err, -e, "cannot fork: %s", strerror(e));
    }
    if (pid == 0)
        child(o, parent, notify[1], born);
    if (notify[0] >= 0)
        close(notify[1]);
    if (o->new_pgroup)
        setpgid(pid, pid); /* also in the parent: no race with an early killpg */
    *pid_out = pid;
    *notify_out = notify[0];
    return 0;
}

/* The wait half: the child's exec (0), or why it did not start (it is then reaped). */
static int spawn_wait(pid_t pid, int notify, const char *argv0, char *err)
{
    if (notify < 0)
        return 0;
    int msg[2] = {0, STEP_SETUP};
    ssize_t n;
    do {
        n = read(notify, msg, sizeof(msg));
    } while (n < 0 && errno == EINTR);
    close(notify);
    if (n <= 0)
        return 0;
    int e = msg[0];
    waitpid(pid, NULL, 0);
    if (n == (ssize_t)sizeof(msg) && msg[1] == STEP_CGROUP) /* not the program's */
        return dsl_seterr(err, DSL_ESPAWN, "cannot put '%s' into its cgroup: %s",
                          argv0 ? argv0 : "?", strerror(e));
    return dsl_seterr(err, -e, "cannot start '%s': %s", argv0 ? argv0 : "?", strerror(e));
}

int dsl_spawn_child(const struct dsl_child_opts *o, pid_t *pid_out, char *err)
{
    pid_t pid;
    int notify;
    int r = spawn_fork(o, &pid, &notify, err);
    if (r < 0)
        return r;
    r = spawn_wait(pid, notify, o->argv ? o->argv[0] : NULL, err);
    if (r < 0)
        return r;
    *pid_out = pid;
    return 0;
}

int dsl_spawn_begin(struct dsl_proc *p, const struct dsl_spawn_opts *o, char *err)
{
    int out[2] = {-1, -1}, errp[2] = {-1, -1};
    int r, code;
    p->pid = -1;
    p->out_fd = p->err_fd = p->pending = -1;
    char *path = dsl_spawn_resolve(o->argv[0], o->env, o->cwd, &code, err);
    if (!path)
        return code;
    if (pipe2(out, O_CLOEXEC) || pipe2(errp, O_CLOEXEC)) {
        r = dsl_seterr(err, -errno, "cannot create pipe: %s", strerror(errno));
        goto fail;
    }
    struct dsl_child_opts co = {
        .path = path,
        .argv = o->argv,
        .env = o->env,
        .fd_in = o->stdin_null ? DSL_SPAWN_DEVNULL : DSL_SPAWN_KEEP,
        .fd_out = out[1],
        .fd_err = errp[1],
        .cwd = o->cwd,
        .new_pgroup = o->new_pgroup,
        .pdeathsig = o->pdeathsig,
        .cgroup_procs = o->cgroup_procs,
        .cgroup_fd = o->cgroup_fd,
        .cgroup_fd_procs = o->cgroup_fd_procs,
        .keep_fd = o->keep_fd,
        .affinity = o->affinity,
        .affinity_size = o->affinity_size,
        .sigdfl = NULL, /* a worker starts from a clean slate: every signal */
        .report_errors = 1,
        .setup_exit = 127,
    };
    pid_t pid;
    int notify;
    r = spawn_fork(&co, &pid, &notify, err);
    close(out[1]);
    close(errp[1]);
    out[1] = errp[1] = -1;
    if (r < 0)
        goto fail;
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(errp[0], F_SETFL, O_NONBLOCK);
    p->pid = pid;
    p->out_fd = out[0];
    p->err_fd = errp[0];
    p->pending = notify;
    free(path);
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
    free(path);
    return r;
}

int dsl_spawn_end(struct dsl_proc *p, const char *argv0, char *err)
{
    int notify = p->pending;
    p->pending = -1;
    int r = spawn_wait(p->pid, notify, argv0, err);
    if (r < 0) { /* reaped: nothing of it is left */
        close(p->out_fd);
        close(p->err_fd);
        p->pid = -1;
        p->out_fd = p->err_fd = -1;
    }
    return r;
}

int dsl_spawn(struct dsl_proc *p, const struct dsl_spawn_opts *o, char *err)
{
    int r = dsl_spawn_begin(p, o, err);
    return r < 0 ? r : dsl_spawn_end(p, o->argv[0], err);
}

void dsl_signals_set(void (*handler)(int), int flags, const int *sigs)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = flags;
    for (; *sigs; sigs++)
        sigaction(*sigs, &sa, NULL);
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
