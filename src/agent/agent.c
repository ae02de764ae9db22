/*
 * The node agent.
 *
 * Theory of operation. One thread, one poll() loop over: the control input (launcher
 * messages), the control output (queued messages, written when the fd is writable),
 * a self-pipe that signal handlers write to (SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1),
 * and the
 * stdout and stderr pipes of every rank. States of the node:
 *
 *   WAITING   hello sent; probe and start requests are served (agent_start.c; a probe
 *             with diag = 1, from `dslaunch doctor`, also collects this node's facts)
 *   RUNNING   ranks started (agent_ranks.c from here on); output is forwarded as "out"
 *             messages, one per line, never split (a '\r' also ends a line, flagged so
 *             the launcher can treat progress bars gently); each reaped rank is reported
 *             with an "exit" message once its pipes have been drained of what was
 *             already written
 *   STOPPING  a stop request, a signal, or the launcher gone: every live rank's process
 *             group and every other process of the ranks got the stop signal; at
 *             kill_at (the job's grace later, whatever started the stop) the survivors
 *             get SIGKILL
 *   CLEANING  every rank reported; what the ranks left behind (a daemon, a `setsid`
 *             child, a grandchild in the group) is still contained: after a clean end
 *             it gets SIGTERM now and SIGKILL after the grace, after a stop SIGKILL at
 *             the stop's kill_at, until nothing is left
 *   DONE      nothing is left: the ranks' cgroups are removed, "bye" is flushed, the
 *             agent exits
 *
 * Timeouts: the launcher pings every keepalive/3 s; when nothing arrived for keepalive s
 * the launcher is considered gone (its host died, the network is down) and the node is
 * torn down. The agent is a child subreaper, so grandchildren orphaned by a rank are
 * reparented here and reaped.
 *
 * Containment (contain.c): each rank runs in cgroups of its own where the machine
 * allows it, else the agent tracks its descendants through /proc; either way a process
 * that left the rank's group or session is still found, and a clean-up process that
 * outlives the agent finishes the teardown if the agent itself is killed, or stops
 * the ranks if the agent stays silent for the keepalive (stopped, wedged). Each exit
 * report says why the rank ended as far as the node can tell: the OOM killer (the
 * rank cgroup's counter or the kernel log), a signal of dslaunch's own stop, or
 * neither (struct dsl_exit_cause).
 *
 * Backpressure: when the control output queue is full (the launcher reads slowly) the
 * rank pipes are not polled, so ranks block on write instead of the agent growing
 * without bound.
 *
 * Progress and stacks (agent_progress.c): the ranks' progress files are read every
 * progress tick and changes go out as "progress" messages; a "stacks" request runs a
 * stack tool per rank, whose output pipes join the poll set.
 */
#define _GNU_SOURCE /* pipe2, prctl */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_impl.h"
#include "dslaunch/agent/agent.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/proto/exitcode.h"
#include "dslaunch/proto/proto.h"
#include "dslaunch/remote/netinfo.h"
#include "dslaunch/remote/seal.h"
#include "dslaunch/common/banned.h"

#define ARGV_SHOW_MAX (64u << 10) /* no-ssh hello: the words too, up to this size */

static void note_stop(struct dsl_agent *a, int cause, int sig)
{
    if (!a->stop_cause) {
        a->stop_cause = cause;
        a->stop_signo = sig;
    }
}

static volatile sig_atomic_t got_signal;
/* SIGUSR1 to the agent itself: Slurm's warning (--signal=USR1@SECONDS without B:, or
 * scancel -s USR1) goes to every task of every step, which under the slurm transport
 * are the agents. It is the ranks' to act on (dstrain --save-on-signal), so each agent
 * passes it to its own node's ranks, and the job goes on; by default it ended the agent
 * and, with it, the job, without a checkpoint. */
static volatile sig_atomic_t got_usr1;
static int sigfd = -1; /* write end of the self-pipe */

static void on_signal(int sig)
{
    if (sig == SIGUSR1)
        got_usr1 = 1;
    else if (sig != SIGCHLD)
        got_signal = sig;
    /* wake poll(); errno is preserved for the interrupted code */
    int saved = errno;
    if (sigfd >= 0) {
        char c = 0;
        ssize_t w = write(sigfd, &c, 1);
        (void)w;
    }
    errno = saved;
}

static void send_hello(struct dsl_agent *a)
{
    struct dsl_msg m;
    dsl_msg_init(&m, DSL_MSG_HELLO);
    m.proto = DSL_PROTO_VERSION;
    /* testing hook (docs/doctor.md): pretend to be another dslaunch version */
    const char *fake = getenv("DSLAUNCH_FAKE_VERSION");
    m.version = dsl_xstrdup(fake && fake[0] ? fake : DSL_VERSION);
    struct dsl_netinfo ni;
    dsl_netinfo_init(&ni);
    dsl_netinfo_collect(&ni, NULL);
    m.host = dsl_xstrdup(ni.hostname);
    m.cpus = ni.cpus;
    m.gpus = ni.gpus;
    m.pid = (int)getpid();
    m.ifaces = dsl_xcalloc((size_t)ni.nifaces + 1, sizeof(*m.ifaces));
    for (int i = 0; i < ni.nifaces; i++) {
        m.ifaces[i].name = dsl_xstrdup(ni.ifaces[i].name);
        dsl_strvec_init(&m.ifaces[i].addrs);
        for (int j = 0; j < ni.ifaces[i].naddrs; j++)
            dsl_strvec_push(&m.ifaces[i].addrs, ni.ifaces[i].addrs[j]);
        m.nifaces++;
    }
    dsl_netinfo_release(&ni);
    m.contain = dsl_xstrdup(dsl_contain_mode(&a->contain));
    m.memcg = dsl_contain_memory(&a->contain);
    if (a->join) {
        m.slots = a->join->slots;
        m.node_rank = a->join->node_rank;
        m.nnodes = a->join->nnodes;
        char hex[65];
        dsl_nossh_argv_digest(a->join->argv, a->join->argc, hex);
        m.argv_sha256 = dsl_xstrdup(hex);
        size_t bytes = 0;
        for (size_t i = 0; i < a->join->argc; i++)
            bytes += strlen(a->join->argv[i]) + 3;
        if (a->join->argc && bytes <= ARGV_SHOW_MAX) { /* to show in node 0's message */
            m.has_argv = 1;
            for (size_t i = 0; i < a->join->argc; i++)
                dsl_strvec_push(&m.argv, a->join->argv[i]);
        }
    }
    dsl_agent_send(a, &m);
    dsl_msg_release(&m);
}

static void handle_msg(struct dsl_agent *a, struct dsl_msg *m)
{
    switch (m->type) {
    case DSL_MSG_PROBE:
        if (a->state == AG_WAITING)
            dsl_agent_handle_probe(a, m);
        break;
    case DSL_MSG_START:
        if (a->state == AG_WAITING)
            dsl_agent_handle_start(a, m);
        break;
    case DSL_MSG_STOP:
        if (m->refused && a->join && a->state == AG_WAITING) {
            /* no-ssh: the coordinator refuses the job before it starts (job/nossh_check.c) */
            dsl_error("the coordinator refused the job: %s", m->refused);
            note_stop(a, STOP_REFUSED, 0);
        }
        note_stop(a, STOP_ASKED, 0);
        if (a->state == AG_WAITING)
            a->state = AG_DONE;
        else
            dsl_agent_begin_stop(a, m->sig ? m->sig : SIGTERM, m->grace);
        break;
    case DSL_MSG_SIGNAL: /* dslaunch got SIGUSR1 (Slurm's warning): pass it on */
        if (a->state == AG_RUNNING)
            dsl_agent_warn_ranks(a, m->sig);
        break;
    case DSL_MSG_STACKS:
        if (a->state == AG_RUNNING)
            dsl_agent_progress_stacks(&a->prog, m->stack_timeout, m->stack_probe);
        break;
    default:
        break; /* pings and anything else only count as signs of life */
    }
}

static void read_control(struct dsl_agent *a)
{
    char buf[65536];
    ssize_t n = read(a->in_fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        a->in_eof = 1;
        return;
    }
    a->last_rx = dsl_now();
    char err[DSL_ERR_LEN];
    if (a->seal) {
        if (dsl_seal_feed(a->seal, buf, (size_t)n) < 0) {
            fprintf(stderr, "dslaunch agent: %s\n", a->seal->err);
            a->in_eof = 1; /* a tampered channel is treated as a gone launcher */
            return;
        }
        size_t k;
        while ((k = dsl_seal_read(a->seal, buf, sizeof(buf))) > 0)
            if (dsl_linebuf_feed(&a->in, buf, k) < 0) {
                a->in_eof = 1;
                return;
            }
    } else if (dsl_linebuf_feed(&a->in, buf, (size_t)n) < 0) {
        a->in_eof = 1;
        return;
    }
    for (;;) {
        struct dsl_msg m;
        int r = dsl_msg_next(&a->in, &m, err);
        if (r == 0)
            break;
        if (r < 0) {
            fprintf(stderr, "dslaunch agent: %s\n", err);
            a->in_eof = 1; /* a confused launcher is treated as a gone one */
            return;
        }
        handle_msg(a, &m);
        dsl_msg_release(&m);
    }
}

static void install_signals(void)
{
    dsl_signals_set(on_signal, SA_RESTART | SA_NOCLDSTOP,
                    (const int[]){SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1, 0});
    signal(SIGPIPE, SIG_IGN);
}

static int agent_run(int in_fd, int out_fd, struct dsl_seal *seal,
                     struct dsl_agent_join *join);

int dsl_agent_main(int in_fd, int out_fd)
{
    return agent_run(in_fd, out_fd, NULL, NULL);
}

int dsl_agent_main_sealed(int fd, struct dsl_seal *seal)
{
    return agent_run(fd, fd, seal, NULL);
}

int dsl_agent_main_joined(int fd, struct dsl_seal *seal, struct dsl_agent_join *join)
{
    return agent_run(fd, fd, seal, join);
}

/* The node's exit code when this agent is its launcher (dsl_agent_main_joined). */
static int outcome(const struct dsl_agent *a)
{
    if (a->stop_cause == STOP_SIGNAL)
        return 128 + a->stop_signo;
    if (a->stop_cause == STOP_REFUSED)
        return DSL_NOSSH_EXIT_REFUSED;
    if (a->first_fail)
        return a->first_fail;
    if (!a->nranks) { /* nothing started: the coordinator ended or went away first */
        fprintf(stderr, "dslaunch: the coordinator %s before this node's ranks started\n",
                a->stop_cause == STOP_ASKED ? "ended the job" : "went away");
        return a->stop_cause == STOP_ASKED ? 1 : DSL_AGENT_EXIT_LOST;
    }
    if (a->stop_cause == STOP_LOST) {
        fprintf(stderr, "dslaunch: lost the coordinator; this node's ranks were stopped\n");
        return DSL_AGENT_EXIT_LOST;
    }
    if (a->stop_cause == STOP_ASKED) {
        fprintf(stderr, "dslaunch: the coordinator stopped the job (its summary says why)\n");
        return 1;
    }
    return 0;
}

/* The agent on its channel, before the hello. */
static void agent_open(struct dsl_agent *a, int in_fd, int out_fd, struct dsl_seal *seal,
                       struct dsl_agent_join *join)
{
    memset(a, 0, sizeof(*a));
    a->sigpipe[0] = a->sigpipe[1] = -1;
    a->join = join;
    a->in_fd = in_fd;
    a->out_fd = out_fd;
    a->seal = seal;
    a->probe_lfd = -1;
    a->grace = 10.0;
    a->keepalive = 0;
    dsl_linebuf_init(&a->in);
    dsl_dynbuf_init(&a->outq, OUTQ_MAX);
    dsl_agent_progress_init(&a->prog);
    dsl_log_set_prog("dslaunch agent");
    dsl_log_mark("up");
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    dsl_contain_init(&a->contain);
    if (pipe2(a->sigpipe, O_CLOEXEC | O_NONBLOCK) == 0)
        sigfd = a->sigpipe[1];
    install_signals();
    fcntl(out_fd, F_SETFL, fcntl(out_fd, F_GETFL) | O_NONBLOCK);
    fcntl(in_fd, F_SETFL, fcntl(in_fd, F_GETFL) | O_NONBLOCK);
    a->last_rx = a->last_ping = dsl_now();
}

/* The timers and the state machine, once per turn of the loop: 1 when the agent is done
 * (its "bye" flushed). */
static int agent_tick(struct dsl_agent *a, double now)
{
    if (got_signal) {
        int sig = got_signal;
        got_signal = 0;
        note_stop(a, STOP_SIGNAL, sig);
        if (a->state == AG_WAITING)
            a->state = AG_DONE;
        else
            dsl_agent_begin_stop(a, sig == SIGINT ? SIGINT : SIGTERM, a->grace);
    }
    if (got_usr1) {
        got_usr1 = 0;
        a->usr1_pending = 1; /* passed on once the ranks run (at once if they do) */
    }
    if (a->usr1_pending && a->state != AG_WAITING) {
        a->usr1_pending = 0;
        dsl_agent_pass_usr1(a);
    }
    if (!a->in_eof && a->keepalive > 0 && now - a->last_rx > a->keepalive) {
        fprintf(stderr, "dslaunch agent: no word from the launcher for %.0f s; stopping\n",
                now - a->last_rx);
        a->in_eof = 1;
    }
    if (a->in_eof && !a->eof_acted && a->state != AG_DONE) {
        /*
         * The launcher is gone (acted on once: the stop then runs its course). The
         * ranks still get the job's whole grace: a rank saving a checkpoint on
         * SIGTERM needs it most when the job is being lost.
         */
        a->eof_acted = 1;
        note_stop(a, STOP_LOST, 0);
        if (a->state == AG_WAITING)
            a->state = AG_DONE;
        else
            dsl_agent_begin_stop(a, SIGTERM, a->grace);
    }
    if (a->state == AG_STOPPING && now >= a->kill_at)
        dsl_agent_signal_ranks(a, SIGKILL);
    struct dsl_msg pm; /* progress, and stacks: before a "bye" the launcher awaits */
    while (a->state != AG_WAITING && dsl_agent_progress_poll(&a->prog, now, &pm)) {
        dsl_agent_send(a, &pm);
        dsl_msg_release(&pm);
    }
    if (a->nranks && dsl_agent_all_reported(a) &&
        (a->state == AG_RUNNING || a->state == AG_STOPPING))
        dsl_agent_begin_cleaning(a);
    if (a->state == AG_CLEANING)
        dsl_agent_clean_step(a, now);
    if (a->state == AG_RUNNING || a->state == AG_STOPPING || a->state == AG_CLEANING)
        dsl_contain_tick(&a->contain, now); /* the clean-up process hears we live */
    if (a->state == AG_DONE) {
        dsl_log_mark("cleaned");
        struct dsl_msg m;
        dsl_msg_init(&m, DSL_MSG_BYE);
        dsl_agent_send(a, &m);
        dsl_agent_flush(a, 1);
        return 1;
    }
    if (a->keepalive > 0 && now - a->last_ping > a->keepalive / 3) {
        struct dsl_msg m;
        dsl_msg_init(&m, DSL_MSG_PING);
        dsl_agent_send(a, &m);
        a->last_ping = now;
    }
    return 0;
}

/* Wait for the next event (at most until the next deadline) and handle what is ready:
 * the self-pipe, the control input and output, stack tools, the ranks' pipes. -1 when
 * poll failed. */
static int agent_wait(struct dsl_agent *a, double now)
{
    struct pollfd pfd[3 + 3 * 64];
    struct pollfd *pf = pfd;
    size_t npf = 0, cap = sizeof(pfd) / sizeof(pfd[0]);
    struct pollfd *big = NULL;
    if ((size_t)a->nranks * 3 + 3 > cap) { /* stdout, stderr, a stack tool per rank */
        cap = (size_t)a->nranks * 3 + 3;
        big = dsl_xcalloc(cap, sizeof(*big));
        pf = big;
    }
    pf[npf++] = (struct pollfd){.fd = a->sigpipe[0], .events = POLLIN};
    if (!a->in_eof)
        pf[npf++] = (struct pollfd){.fd = a->in_fd, .events = POLLIN};
    if (a->out_fd >= 0 && dsl_agent_want_write(a))
        pf[npf++] = (struct pollfd){.fd = a->out_fd, .events = POLLOUT};
    if (a->outq.len < OUTQ_PAUSE || a->out_fd < 0)
        for (int i = 0; i < a->nranks; i++)
            for (int s = 1; s <= 2; s++)
                if (a->ranks[i].fd[s] >= 0)
                    pf[npf++] = (struct pollfd){.fd = a->ranks[i].fd[s], .events = POLLIN};
    npf += dsl_agent_progress_pollfds(&a->prog, pf + npf);
    int timeout = a->state == AG_CLEANING ? 20 : 200; /* no event says "empty" */
    if (a->state == AG_STOPPING) {
        double left = a->kill_at - now;
        int ms = left <= 0 ? 50 : (int)(left * 1000) + 1;
        if (ms < timeout)
            timeout = ms;
    }
    int pr = poll(pf, npf, timeout);
    if (pr < 0 && errno != EINTR) {
        free(big);
        return -1;
    }
    for (size_t i = 0; pr > 0 && i < npf; i++) {
        if (!pf[i].revents)
            continue;
        int fd = pf[i].fd;
        if (fd == a->sigpipe[0]) {
            char drain[64];
            while (read(fd, drain, sizeof(drain)) > 0)
                ;
        } else if (fd == a->in_fd) {
            read_control(a);
        } else if (fd == a->out_fd) {
            dsl_agent_flush(a, 0);
        } else if (dsl_agent_progress_on_fd(&a->prog, fd)) {
            /* a stack tool's output */
        } else {
            for (int k = 0; k < a->nranks; k++)
                for (int s = 1; s <= 2; s++)
                    if (a->ranks[k].fd[s] == fd)
                        dsl_agent_read_pipe(a, &a->ranks[k], s);
        }
    }
    free(big);
    return 0;
}

/* Release what the agent holds; the node's exit code for a no-ssh node, else 0. */
static int agent_close(struct dsl_agent *a)
{
    for (int i = 0; i < a->nranks; i++) {
        struct dsl_agent_rank *r = &a->ranks[i];
        for (int s = 0; s < 3; s++) {
            if (r->fd[s] >= 0)
                close(r->fd[s]);
            dsl_dynbuf_release(&r->part[s]);
        }
        for (int k = 0; k < DSL_PROTO_MAX_TAIL; k++)
            free(r->tail[k]);
    }
    free(a->ranks);
    dsl_agent_progress_release(&a->prog);
    dsl_contain_release(&a->contain);
    /* what the clean-up killed last is dead but, as the subreaper's, still ours to reap */
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    if (a->probe_lfd >= 0)
        close(a->probe_lfd);
    dsl_linebuf_release(&a->in);
    dsl_dynbuf_release(&a->outq);
    if (a->sigpipe[0] >= 0 && sigfd == a->sigpipe[1]) { /* a no-ssh node runs us again */
        sigfd = -1;
        close(a->sigpipe[0]);
        close(a->sigpipe[1]);
    }
    dsl_log_mark("exit");
    if (!a->join)
        return 0;
    a->join->signalled = a->stop_cause == STOP_SIGNAL ? a->stop_signo : 0;
    a->join->refused = a->stop_cause == STOP_REFUSED;
    return outcome(a);
}

static int agent_run(int in_fd, int out_fd, struct dsl_seal *seal,
                     struct dsl_agent_join *join)
{
    struct dsl_agent a;
    agent_open(&a, in_fd, out_fd, seal, join);
    send_hello(&a);
    for (;;) {
        double now = dsl_now();
        if (agent_tick(&a, now) || agent_wait(&a, now) < 0)
            break;
        dsl_agent_reap(&a);
        dsl_agent_flush(&a, 0);
    }
    return agent_close(&a);
}
