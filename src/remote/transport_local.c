/*
 * The local transport: the node agent runs on this machine as a child process
 * (`dslaunch --agent`), connected through a socketpair on its stdin and stdout. Used
 * for localhost entries, for --launcher local (fake host names in flow tests) and as
 * the reference the other transports are measured against.
 *
 * The agent gets its own process group, so a terminal ^C reaches only the launcher,
 * which then stops the job through the control channel, and a parent-death signal,
 * so it goes down (and takes its ranks down) if the launcher is SIGKILLed even before
 * it notices EOF.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dslaunch/common/log.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

struct local_priv {
    pid_t pid;
    int fd;
};

/* Back to their defaults in the agent: the launcher catches SIGINT, SIGTERM and SIGHUP
 * and ignores SIGPIPE, and an agent that runs in the forked child without an exec would
 * keep those handlers (an exec resets caught signals, but not ignored ones). */
static const int agent_sigdfl[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD, 0};

static int run_agent(void *arg)
{
    struct dsl_conn *c = arg;
    dsl_log_set_sink(NULL, NULL); /* the launcher's console queue is not this process's */
    return c->agent_main(0, 1);
}

static int local_open(struct dsl_conn *c, const struct dsl_transport_opts *o,
                      char *const *agent_argv)
{
    (void)o;
    int sv[2];
    c->t_start = dsl_now();
    if (!agent_argv && !c->agent_main) {
        c->state = DSL_CONN_FAILED;
        c->err_code = -EINVAL;
        return dsl_seterr(c->err, -EINVAL, "no agent to start");
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        c->state = DSL_CONN_FAILED;
        c->err_code = -errno;
        return dsl_seterr(c->err, -errno, "cannot create socketpair: %s", strerror(errno));
    }
    /*
     * With no agent_argv the agent is this very program: the child runs it without a
     * second exec and dynamic link (a third of a local launch), after dropping every
     * other fd the launcher holds so EOF on its other channels still means what it says.
     */
    struct dsl_child_opts co = {
        .path = agent_argv ? agent_argv[0] : NULL,
        .argv = agent_argv,
        .run = agent_argv ? NULL : run_agent,
        .run_arg = c,
        .fd_in = sv[1],
        .fd_out = sv[1],
        .fd_err = DSL_SPAWN_KEEP,
        .new_pgroup = 1,
        .pdeathsig = SIGTERM,
        .sigdfl = agent_sigdfl,
        .close_fds = !agent_argv,
        .setup_exit = 1,
    };
    pid_t pid;
    int r = dsl_spawn_child(&co, &pid, c->err);
    close(sv[1]);
    if (r < 0) {
        close(sv[0]);
        c->state = DSL_CONN_FAILED;
        c->err_code = r;
        return r;
    }
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    struct local_priv *p = dsl_xcalloc(1, sizeof(*p));
    p->pid = pid;
    p->fd = sv[0];
    c->priv = p;
    c->state = DSL_CONN_OPEN;
    c->t_open = dsl_now();
    return 0;
}

static int local_progress(struct dsl_conn *c)
{
    (void)c;
    return 0;
}

static int local_pollfd(struct dsl_conn *c, short *events)
{
    struct local_priv *p = c->priv;
    *events = POLLIN;
    return p ? p->fd : -1;
}

static ssize_t local_read(struct dsl_conn *c, void *buf, size_t n)
{
    struct local_priv *p = c->priv;
    ssize_t r = read(p->fd, buf, n);
    if (r < 0)
        return (errno == EAGAIN || errno == EINTR) ? -EAGAIN : -errno;
    return r;
}

static ssize_t local_write(struct dsl_conn *c, const void *buf, size_t n)
{
    struct local_priv *p = c->priv;
    ssize_t r = send(p->fd, buf, n, MSG_NOSIGNAL);
    if (r < 0)
        return (errno == EAGAIN || errno == EINTR) ? -EAGAIN : -errno;
    return r;
}

static void local_close_write(struct dsl_conn *c)
{
    struct local_priv *p = c->priv;
    if (p)
        shutdown(p->fd, SHUT_WR);
}

static void local_close(struct dsl_conn *c)
{
    struct local_priv *p = c->priv;
    if (!p)
        return;
    close(p->fd);
    /* the agent exits on EOF; give it a moment, then make sure */
    double deadline = dsl_now() + 3.0;
    long nap_ns = 20 * 1000; /* the agent is usually gone already: poll finely first */
    for (;;) {
        pid_t w = waitpid(p->pid, NULL, WNOHANG);
        if (w == p->pid || (w < 0 && errno == ECHILD))
            break;
        if (dsl_now() > deadline) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, NULL, 0);
            break;
        }
        struct timespec ts = {0, nap_ns};
        nanosleep(&ts, NULL);
        if (nap_ns < 5 * 1000 * 1000)
            nap_ns *= 2;
    }
    free(p);
    c->priv = NULL;
}

const struct dsl_transport_ops dsl_transport_local = DSL_TRANSPORT_OPS("local", local);
