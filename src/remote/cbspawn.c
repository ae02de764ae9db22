/*
 * The launcher programs of the connect-back transports (pdsh, mpirun, srun): the ssh
 * options they pass on, spawning, reaping and stopping them, and the failures a
 * connection reports for them.
 *
 * Theory of operation. A program is started in a process group of its own with its
 * output (stdout and stderr) on one non-blocking pipe the transport drains, and a
 * pidfd that wakes the transport's poll when it exits. dsl_cb_reap() never blocks
 * except for a bounded wait when no pidfd exists and the output closed; dsl_cb_stop()
 * sends SIGTERM to the group after term_after seconds and SIGKILL after kill_after.
 * The user's ssh files reach pdsh and mpirun as symlinks in a private directory
 * (mode 0700) whose path holds no character a shell or word splitting treats
 * specially, since both pass the options on through a shell.
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/remote/connectback.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

void dsl_cb_sshfiles_init(struct dsl_cb_sshfiles *f)
{
    f->dir = NULL;
}

static const char *const sshfile_names[] = {"config", "identity", "identity.pub",
                                            "identity-cert.pub", "known_hosts"};

void dsl_cb_sshfiles_release(struct dsl_cb_sshfiles *f)
{
    if (!f->dir)
        return;
    for (size_t i = 0; i < sizeof(sshfile_names) / sizeof(sshfile_names[0]); i++) {
        char *link = dsl_xasprintf("%s/%s", f->dir, sshfile_names[i]);
        unlink(link);
        free(link);
    }
    rmdir(f->dir);
    free(f->dir);
    f->dir = NULL;
}

/* Only characters that no shell and no word splitting treat specially. */
static int shell_safe(const char *s)
{
    return s[0] && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                             "0123456789/._-") == strlen(s);
}

/* f->dir/name -> path (made absolute), creating the private directory on first use. */
static char *sshfile_link(struct dsl_cb_sshfiles *f, const char *name, const char *path,
                          char *err)
{
    if (!f->dir) {
        const char *tmp = getenv("TMPDIR");
        if (!tmp || tmp[0] != '/' || !shell_safe(tmp) || strlen(tmp) > 200)
            tmp = "/tmp";
        char *dir = dsl_xasprintf("%s/dslaunch-ssh.XXXXXX", tmp);
        if (!mkdtemp(dir)) { /* mode 0700 */
            dsl_seterr(err, -errno, "cannot create a private directory in '%s': %s", tmp,
                       strerror(errno));
            free(dir);
            return NULL;
        }
        f->dir = dir;
    }
    char *target = NULL;
    if (path[0] == '/') {
        target = dsl_xstrdup(path);
    } else {
        char cwd[4096];
        if (!getcwd(cwd, sizeof(cwd))) {
            dsl_seterr(err, -errno, "cannot resolve '%s': %s", path, strerror(errno));
            return NULL;
        }
        target = dsl_xasprintf("%s/%s", cwd, path);
    }
    char *link = dsl_xasprintf("%s/%s", f->dir, name);
    if (symlink(target, link) < 0) {
        dsl_seterr(err, -errno, "cannot link '%s' for ssh: %s", path, strerror(errno));
        free(link);
        link = NULL;
    }
    free(target);
    return link;
}

char *dsl_cb_ssh_options(const struct dsl_transport_opts *o, struct dsl_cb_sshfiles *f,
                         char *err)
{
    if (o->ssh_user && !shell_safe(o->ssh_user)) {
        dsl_seterr(err, DSL_EUSAGE, "ssh user name '%s' has characters that cannot be passed "
                   "safely (allowed: letters, digits, '.', '_', '-')", o->ssh_user);
        return NULL;
    }
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 8192);
    char *cfg = NULL, *id = NULL, *kh = NULL;
    char *r = NULL;
    if (o->ssh_config && !(cfg = sshfile_link(f, "config", o->ssh_config, err)))
        goto out;
    if (o->ssh_identity) {
        if (!(id = sshfile_link(f, "identity", o->ssh_identity, err)))
            goto out;
        /* ssh looks for the public key and certificate beside the private key */
        char *pub = dsl_xasprintf("%s.pub", o->ssh_identity);
        char *cert = dsl_xasprintf("%s-cert.pub", o->ssh_identity);
        free(sshfile_link(f, "identity.pub", pub, err));
        free(sshfile_link(f, "identity-cert.pub", cert, err));
        free(pub);
        free(cert);
    }
    if (o->known_hosts && !(kh = sshfile_link(f, "known_hosts", o->known_hosts, err)))
        goto out;
    dsl_dynbuf_addstr(&b, "-o BatchMode=yes");
    if (cfg)
        dsl_dynbuf_addf(&b, " -F %s", cfg);
    if (o->ssh_port > 0)
        dsl_dynbuf_addf(&b, " -p %d", o->ssh_port);
    if (id)
        dsl_dynbuf_addf(&b, " -i %s -o IdentitiesOnly=yes", id);
    if (o->ssh_user)
        dsl_dynbuf_addf(&b, " -l %s", o->ssh_user);
    if (kh)
        dsl_dynbuf_addf(&b, " -o UserKnownHostsFile=%s", kh);
    dsl_dynbuf_addf(&b, " -o StrictHostKeyChecking=%s", o->accept_new ? "accept-new" : "yes");
    if (o->connect_timeout > 0)
        dsl_dynbuf_addf(&b, " -o ConnectTimeout=%d", (int)o->connect_timeout + 1);
    if (o->keepalive > 0)
        dsl_dynbuf_addf(&b, " -o ServerAliveInterval=%d -o ServerAliveCountMax=2",
                        (int)(o->keepalive / 2) > 0 ? (int)(o->keepalive / 2) : 1);
    r = dsl_xstrdup(dsl_dynbuf_str(&b));
out:
    free(cfg);
    free(id);
    free(kh);
    dsl_dynbuf_release(&b);
    return r;
}

/* pdsh and mpirun start with the default SIGPIPE that this process ignores. */
static const int cb_sigdfl[] = {SIGPIPE, 0};

int dsl_cb_spawn(char *const *argv, char *const *env, pid_t *pid, int *outfd, int *pidfd,
                 char *err)
{
    *pid = 0;
    *outfd = *pidfd = -1;
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return dsl_seterr(err, -errno, "cannot create a pipe: %s", strerror(errno));
    struct dsl_child_opts co = {
        .argv = argv, /* path NULL: looked up in PATH */
        .env = env,
        .fd_in = DSL_SPAWN_DEVNULL,
        .fd_out = pipefd[1],
        .fd_err = pipefd[1],
        .new_pgroup = 1,
        .pdeathsig = SIGTERM,
        .sigdfl = cb_sigdfl,
        .setup_exit = 126,
    };
    pid_t child;
    int r = dsl_spawn_child(&co, &child, err);
    close(pipefd[1]);
    if (r < 0) {
        close(pipefd[0]);
        return r;
    }
    fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
    *pid = child;
    *outfd = pipefd[0];
    *pidfd = (int)syscall(SYS_pidfd_open, child, 0);
    return 0;
}

int dsl_cb_reap(pid_t *pid, int *status, int outfd, int *pidfd)
{
    if (*pid > 0 && waitpid(*pid, status, WNOHANG) == *pid)
        *pid = 0;
    if (*pid > 0 && outfd < 0 && *pidfd < 0) {
        /* no pidfd to wake us: it closed its output, so it is exiting; bounded wait */
        for (int i = 0; i < 200 && *pid > 0; i++) {
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
            if (waitpid(*pid, status, WNOHANG) == *pid)
                *pid = 0;
        }
    }
    if (*pid == 0 && *pidfd >= 0) {
        close(*pidfd);
        *pidfd = -1;
    }
    return *pid == 0;
}

void dsl_cb_stop(pid_t *pid, int *status, int outfd, int *pidfd, double term_after,
                 double kill_after)
{
    double t0 = dsl_now();
    int termed = 0;
    while (*pid > 0 && !dsl_cb_reap(pid, status, outfd, pidfd)) {
        if (!termed && dsl_now() >= t0 + term_after) {
            kill(-*pid, SIGTERM);
            termed = 1;
        }
        if (dsl_now() > t0 + kill_after) {
            kill(-*pid, SIGKILL);
            waitpid(*pid, status, 0);
            *pid = 0;
            break;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void dsl_cb_conn_begin(struct dsl_conn *c)
{
    c->t_start = dsl_now();
    c->state = DSL_CONN_CONNECTING;
    c->err_code = 0;
    c->err[0] = '\0';
}

int dsl_cb_conn_fail(struct dsl_conn *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    c->state = DSL_CONN_FAILED;
    c->err_code = code;
    return code;
}

void dsl_cb_no_agent_msg(char *buf, size_t n, int missing, const char *agent,
                         const char *host, const char *tail)
{
    snprintf(buf, n, "dslaunch %s at '%s' on '%s' (%.150s): install the same dslaunch at "
             "that path on every node (dslaunch sync can copy it), or give "
             "--remote-dslaunch PATH", missing ? "is not" : "cannot be run", agent, host,
             tail);
}

int dsl_cb_conn_no_agent(struct dsl_conn *c, const char *agent, const char *tail)
{
    const char *at = agent && *agent ? strstr(tail, agent) : NULL;
    if (!at)
        return 0;
    /* "bash: line 1: PATH: No such file or directory", "sh: 1: exec: PATH: not found",
     * "PATH: Permission denied" (not ssh's "Permission denied (publickey)") */
    int missing = strstr(at, "No such file or directory") || strstr(at, "not found");
    int denied = !missing && strstr(at, "Permission denied") && !strstr(at, "Permission denied (");
    if (!missing && !denied)
        return 0;
    char msg[sizeof(c->err)];
    dsl_cb_no_agent_msg(msg, sizeof(msg), missing, agent, c->host, tail);
    return dsl_cb_conn_fail(c, missing ? -ENOENT : -EACCES, "%s", msg);
}

int dsl_cb_conn_ended(struct dsl_conn *c, const char *prog, int status, const char *agent,
                      const char *tail, int *code)
{
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (*code == 127 && !tail[0])
        return dsl_cb_conn_fail(c, DSL_ESPAWN, "cannot run %s for '%s' (not installed?)", prog,
                                c->host);
    return dsl_cb_conn_no_agent(c, agent, tail);
}
