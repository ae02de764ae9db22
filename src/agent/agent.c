/*
 * The node agent.
 *
 * Theory of operation. One thread, one poll() loop over: the control input (launcher
 * messages), the control output (queued messages, written when the fd is writable),
 * a self-pipe that signal handlers write to (SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1),
 * and the
 * stdout and stderr pipes of every rank. States of the node:
 *
 *   WAITING   hello sent; probe and start requests are served (a probe with diag = 1,
 *             from `dslaunch doctor`, also collects this node's facts: facts.c)
 *   RUNNING   ranks started; output is forwarded as "out" messages, one per line, never
 *             split (a '\r' also ends a line, flagged so the launcher can treat progress
 *             bars gently); each reaped rank is reported with an "exit" message once its
 *             pipes have been drained of what was already written
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
#define _GNU_SOURCE /* pipe2, prctl, sched_getaffinity */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "contain.h"
#include "devmap.h"
#include "agent_impl.h"
#include "dslaunch/agent/agent.h"
#include "agent_progress.h"
#include "dslaunch/common/cpubind.h"
#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/remote/facts.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/net.h"
#include "dslaunch/remote/netinfo.h"
#include "dslaunch/remote/seal.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/proto/exitcode.h"
#include "dslaunch/proto/proto.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

extern char **environ;

#define ARGV_SHOW_MAX (64u << 10) /* no-ssh hello: the words too, up to this size */
#define OUTQ_MAX (64u << 20)     /* hard bound on queued control output */
#define OUTQ_PAUSE (4u << 20)    /* stop reading rank pipes above this */
#define LINE_MAX_BYTES (1u << 20) /* a longer line is forwarded in pieces */

enum agent_state { AG_WAITING, AG_RUNNING, AG_STOPPING, AG_CLEANING, AG_DONE };

#define CLEAN_PATIENCE 5.0 /* seconds past the SIGKILL before leftovers go to the keeper */

struct rank_proc {
    int rank, local_rank;
    pid_t pid;
    int fd[3];                    /* [1] stdout, [2] stderr; -1 when closed */
    struct dsl_dynbuf part[3];    /* partial line per stream */
    char *tail[DSL_PROTO_MAX_TAIL]; /* ring of the last stderr lines */
    int tail_pos, ntail;
    double t_start;
    int exited, reported, code, sig;
    double wall;
    unsigned long long sent_sigs; /* bit n: this agent sent signal n to the rank's group */
    struct dsl_exit_cause cause;  /* read when the rank was reaped */
};

struct agent {
    int in_fd, out_fd;
    struct dsl_seal *seal;        /* connect-back: frames on in_fd == out_fd; else NULL */
    int in_eof, eof_acted;
    int usr1_pending; /* SIGUSR1 came before the ranks started: passed on when they do */
    struct dsl_linebuf in;
    struct dsl_dynbuf outq;
    enum agent_state state;
    struct rank_proc *ranks;
    int nranks;
    double grace, keepalive;
    double kill_at, last_rx, last_ping;
    int stop_sig;                 /* the signal the stop sent to the ranks */
    double give_up_at;            /* CLEANING: leave what will not die to the keeper */
    int probe_lfd;
    int sigpipe[2];
    struct dsl_contain contain;   /* the ranks' cgroups or process tracking */
    struct dsl_agent_progress prog; /* progress files, stack captures */
    struct dsl_agent_join *join; /* no-ssh mode: this node, for the hello; or NULL */
    /* the node's outcome, for an agent that is its node's launcher (no-ssh mode) */
    int first_fail;               /* first rank exit that was not 0 before any stop:
                                     its code or 128 + signal; 0 none */
    int stop_cause;               /* what stopped the node first: STOP_* */
    int stop_signo;               /* STOP_SIGNAL: the signal */
};

enum { STOP_NONE = 0, STOP_ASKED, STOP_LOST, STOP_SIGNAL, STOP_REFUSED };

static void note_stop(struct agent *a, int cause, int sig)
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

static void send_msg(struct agent *a, const struct dsl_msg *m)
{
    if (a->out_fd < 0)
        return;
    if (dsl_msg_encode(m, &a->outq) < 0) {
        /* queue overflow: the launcher stopped reading; it will time out on us */
        dsl_dynbuf_init(&a->outq, OUTQ_MAX);
    }
}

/* The bytes to write next: the queue itself, or the frames sealed from it. */
static struct dsl_dynbuf *wire(struct agent *a)
{
    if (!a->seal)
        return &a->outq;
    while (!a->seal->out.len && a->outq.len) {
        size_t k = a->outq.len < DSL_SEAL_FRAME_MAX ? a->outq.len : DSL_SEAL_FRAME_MAX;
        if (dsl_seal_write(a->seal, a->outq.buf, k) < 0) {
            dsl_dynbuf_reset(&a->outq);
            break;
        }
        dsl_dynbuf_consume(&a->outq, k);
    }
    return &a->seal->out;
}

static int want_write(struct agent *a)
{
    return a->outq.len || (a->seal && a->seal->out.len);
}

static void flush_out(struct agent *a, int block)
{
    struct dsl_dynbuf *q;
    while (a->out_fd >= 0 && (q = wire(a))->len) {
        ssize_t w = write(a->out_fd, q->buf, q->len);
        if (w > 0) {
            dsl_dynbuf_consume(q, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN && block) {
            if (dsl_net_wait(a->out_fd, POLLOUT, dsl_now() + 2.0) < 0)
                break;
            continue;
        }
        if (w < 0 && errno != EAGAIN) {
            a->out_fd = -1; /* launcher gone */
            dsl_dynbuf_reset(&a->outq);
        }
        break;
    }
}

static void send_hello(struct agent *a)
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
    send_msg(a, &m);
    dsl_msg_release(&m);
}

/* ---- probe: hold or pick the master port, test reachability, find the route ---- */

static void apply_env(struct dsl_strvec *env, const struct dsl_strvec *add);

static void handle_probe(struct agent *a, const struct dsl_msg *pm)
{
    struct dsl_msg m;
    dsl_msg_init(&m, DSL_MSG_PROBED);
    double t_recv = dsl_facts_realtime();
    char err[DSL_ERR_LEN] = "";
    if (a->probe_lfd >= 0) {
        close(a->probe_lfd);
        a->probe_lfd = -1;
    }
    if (pm->port > 0) {
        /* backlog as the store's: ranks may queue here before rank 0 takes it over */
        const char *bind = pm->bind;
        int fd = dsl_net_listen(bind, pm->port, 1024, err);
        if (fd == -EADDRNOTAVAIL || fd == -EINVAL) { /* not an address of this node */
            bind = NULL;
            fd = dsl_net_listen(NULL, pm->port, 1024, err);
        }
        if (fd < 0 && pm->pick) {
            m.port_busy = 1;
            fd = dsl_net_listen(bind, 0, 1024, err);
        } else if (fd < 0) {
            m.port_busy = 1;
        }
        if (fd >= 0) {
            a->probe_lfd = fd;
            m.port = dsl_net_local_port(fd);
        }
    }
    m.nreach = (int)pm->connect.nr;
    m.reach = dsl_xcalloc(pm->connect.nr + 1, sizeof(int));
    int first = -1;
    for (size_t i = 0; i < pm->connect.nr; i++) {
        int fd = dsl_net_connect(pm->connect.v[i], pm->cport, 3.0, err);
        if (fd >= 0) {
            close(fd);
            m.reach[i] = 1;
            if (first < 0)
                first = (int)i;
        }
    }
    char ifname[64] = "", src[64] = "";
    if (pm->connect.nr) {
        const char *dest = pm->connect.v[first >= 0 ? first : 0];
        dsl_netinfo_route(dest, ifname, sizeof(ifname), src, sizeof(src), err);
    }
    m.iface = dsl_xstrdup(ifname);
    m.src = dsl_xstrdup(src);
    struct stat st;
    m.cwd_ok = pm->cwd[0] == '\0' || (stat(pm->cwd, &st) == 0 && S_ISDIR(st.st_mode));
    m.program_ok = 1;
    m.detail = dsl_xstrdup("");
    if (pm->program[0]) {
        /* as the rank's exec will: this environment with the export set applied */
        struct dsl_strvec env;
        dsl_strvec_init(&env);
        dsl_strvec_pushv(&env, (const char *const *)environ);
        apply_env(&env, &pm->env);
        int code;
        char *path = dsl_spawn_resolve(pm->program, env.v,
                                       m.cwd_ok && pm->cwd[0] ? pm->cwd : NULL, &code, err);
        dsl_strvec_release(&env);
        if (!path) {
            m.program_ok = 0;
            free(m.detail);
            m.detail = dsl_xstrdup(err);
        } else if (pm->script && m.cwd_ok &&
                   dsl_spawn_check_script(pm->script, pm->cwd[0] ? pm->cwd : NULL, err) < 0) {
            m.program_ok = 0; /* python3 is there, the script it would run is not */
            free(m.detail);
            m.detail = dsl_xstrdup(err);
        } else {
            free(m.detail); /* found: the path, for the launcher's comparison (a venv) */
            m.detail = path;
            path = NULL;
        }
        free(path);
    }
    if (!m.cwd_ok) {
        free(m.detail);
        m.detail = dsl_xasprintf("working directory '%s' does not exist", pm->cwd);
    }
    if (pm->diag) {
        /* dslaunch doctor: facts and this node's clock at request and reply */
        m.facts = dsl_xmalloc(sizeof(*m.facts));
        dsl_facts_init(m.facts);
        dsl_facts_collect(m.facts, m.cwd_ok ? pm->cwd : NULL, pm->ld_path);
        m.facts->t_recv = t_recv;
        m.facts->t_send = dsl_facts_realtime();
    }
    send_msg(a, &m);
    dsl_msg_release(&m);
}

/* ---- output of ranks ---- */

static void tail_push(struct rank_proc *r, const char *line, size_t len)
{
    free(r->tail[r->tail_pos]);
    r->tail[r->tail_pos] = dsl_xstrndup(line, len > 4096 ? 4096 : len);
    r->tail_pos = (r->tail_pos + 1) % DSL_PROTO_MAX_TAIL;
    if (r->ntail < DSL_PROTO_MAX_TAIL)
        r->ntail++;
}

static void emit_line(struct agent *a, struct rank_proc *r, int s, const char *p, size_t n,
                      int end)
{
    struct dsl_msg m;
    dsl_msg_init(&m, DSL_MSG_OUT);
    m.rank = r->rank;
    m.stream = s;
    m.cr = end == DSL_END_CR;
    m.end = end;
    m.line = dsl_xmalloc(n + 1); /* every byte, NULs included */
    memcpy(m.line, p, n);
    m.line[n] = '\0';
    m.line_len = n;
    send_msg(a, &m);
    dsl_msg_release(&m);
    if (s == 2 && end != DSL_END_CR)
        tail_push(r, p, n);
    if (s == 2)
        dsl_agent_progress_stderr(&a->prog, (int)(r - a->ranks), p, n);
}

/* Split what is buffered for stream s into lines; flush a partial line if final. */
static void split_lines(struct agent *a, struct rank_proc *r, int s, int final)
{
    struct dsl_dynbuf *b = &r->part[s];
    size_t start = 0;
    for (size_t i = 0; i < b->len; i++) {
        char c = b->buf[i];
        if (c == '\n' || c == '\r') {
            /* "\r\n" is one line end */
            int cr = c == '\r' && !(i + 1 < b->len && b->buf[i + 1] == '\n');
            if (c == '\r' && i + 1 == b->len && !final)
                break; /* wait: a '\n' may follow */
            emit_line(a, r, s, b->buf + start, i - start,
                      c == '\n' ? DSL_END_LF : cr ? DSL_END_CR : DSL_END_CRLF);
            if (c == '\r' && !cr)
                i++;
            start = i + 1;
        }
    }
    dsl_dynbuf_consume(b, start);
    if (b->len >= LINE_MAX_BYTES || (final && b->len)) {
        /* a piece of a longer line, or the last bytes: no line end of their own */
        emit_line(a, r, s, b->buf, b->len, DSL_END_NONE);
        dsl_dynbuf_reset(b);
    }
}

static void read_pipe(struct agent *a, struct rank_proc *r, int s)
{
    char buf[65536];
    for (int rounds = 0; rounds < 16 && r->fd[s] >= 0; rounds++) {
        ssize_t n = read(r->fd[s], buf, sizeof(buf));
        if (n > 0) {
            if (dsl_dynbuf_add(&r->part[s], buf, (size_t)n) < 0)
                dsl_dynbuf_init(&r->part[s], LINE_MAX_BYTES * 2);
            split_lines(a, r, s, 0);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        split_lines(a, r, s, 1); /* EOF or error */
        close(r->fd[s]);
        r->fd[s] = -1;
    }
}

static void report_exit(struct agent *a, struct rank_proc *r)
{
    struct dsl_msg m;
    if (dsl_agent_progress_exited(&a->prog, (int)(r - a->ranks), &m)) {
        send_msg(a, &m); /* the rank's final progress, before its exit */
        dsl_msg_release(&m);
    }
    dsl_msg_init(&m, DSL_MSG_EXIT);
    m.rank = r->rank;
    m.pid = (int)r->pid;
    m.code = r->code;
    m.sig = r->sig;
    m.wall = r->wall;
    m.cause = r->cause;
    for (int i = 0; i < r->ntail; i++) {
        int idx = (r->tail_pos - r->ntail + i + DSL_PROTO_MAX_TAIL) % DSL_PROTO_MAX_TAIL;
        dsl_strvec_push(&m.tail, r->tail[idx]);
    }
    send_msg(a, &m);
    dsl_msg_release(&m);
    r->reported = 1;
}

/*
 * Reap every rank that has exited, then report them: the ones killed by a signal first.
 * When one rank is killed, its peers usually fail a moment later because of it (a
 * collective sees the connection drop); if both deaths are reaped in the same pass,
 * the launcher should hear of the cause first, since the first reported failure is the
 * one its summary names and its exit code carries.
 */
static void reap(struct agent *a)
{
    int found = 0;
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0)
            break;
        for (int i = 0; i < a->nranks; i++) {
            struct rank_proc *r = &a->ranks[i];
            if (r->pid != pid || r->exited)
                continue;
            r->exited = 1;
            r->wall = dsl_now() - r->t_start;
            if (WIFSIGNALED(status)) {
                r->code = -1;
                r->sig = WTERMSIG(status);
            } else {
                r->code = WEXITSTATUS(status);
            }
            if ((r->code != 0) && !a->first_fail && !a->stop_cause)
                a->first_fail = r->sig ? 128 + r->sig : r->code;
            /* the evidence is read now, while the rank's cgroup still says it */
            dsl_contain_cause(&a->contain, i, r->sig,
                              r->sig > 0 && r->sig < 64 && ((r->sent_sigs >> r->sig) & 1),
                              &r->cause);
            r->cause.unstopped = r->sent_sigs == 0;
            found = 1;
        }
    }
    for (int pass = 0; found && pass < 2; pass++)
        for (int i = 0; i < a->nranks; i++) {
            struct rank_proc *r = &a->ranks[i];
            if (!r->exited || r->reported || (pass == 0) != (r->sig != 0))
                continue;
            /* forward what the rank already wrote, then its exit */
            for (int s = 1; s <= 2; s++)
                if (r->fd[s] >= 0)
                    read_pipe(a, r, s);
            report_exit(a, r);
        }
}

/* ---- stopping ---- */

/* sig to every live rank's process group and to the ranks' other processes (a stop;
 * a warning goes to the ranks' own processes alone: warn_ranks) */
static void signal_ranks(struct agent *a, int sig)
{
    char *signalled = dsl_xcalloc((size_t)a->nranks + 1, 1);
    for (int i = 0; i < a->nranks; i++)
        if (a->ranks[i].pid > 0 && !a->ranks[i].exited) {
            if (sig > 0 && sig < 64)
                a->ranks[i].sent_sigs |= 1ull << sig;
            kill(-a->ranks[i].pid, sig);
            if (sig != SIGKILL)
                kill(-a->ranks[i].pid, SIGCONT); /* a stopped rank acts on it now */
            signalled[i] = 1;
        }
    if (sig == SIGKILL)
        dsl_contain_kill(&a->contain);
    else /* once each: the members of the groups just signalled are skipped */
        dsl_contain_signal(&a->contain, sig, signalled);
    free(signalled);
}

/*
 * A warning (SIGUSR1, SIGUSR2: Slurm's time-limit warning) to every live rank's own
 * process, the one this agent started, which runs the training loop and decides what
 * to do; not to its process group, as a stop goes. The rank's helpers cannot act on a
 * warning, and under the default disposition they die of it: a DataLoader worker
 * started by spawn or forkserver (Python 3.14's default), the forkserver and the
 * resource tracker themselves; the rank then fails ("DataLoader worker ... killed by
 * signal: User defined signal 1") instead of saving. A worker forked after the rank set
 * its handler would run that handler too. The group is continued, so that a stopped
 * rank acts on the warning now (docs/reliability.md, "Slurm's warning").
 */
static void warn_ranks(struct agent *a, int sig)
{
    for (int i = 0; i < a->nranks; i++)
        if (a->ranks[i].pid > 0 && !a->ranks[i].exited) {
            if (sig > 0 && sig < 64)
                a->ranks[i].sent_sigs |= 1ull << sig;
            kill(a->ranks[i].pid, sig);
            kill(-a->ranks[i].pid, SIGCONT);
        }
}

/* SIGUSR1 sent to the agent itself (got_usr1): to this node's running ranks, once */
static void pass_usr1(struct agent *a)
{
    if (a->state != AG_RUNNING)
        return; /* stopping anyway: a warning adds nothing */
    int n = 0;
    for (int i = 0; i < a->nranks; i++)
        n += a->ranks[i].pid > 0 && !a->ranks[i].exited;
    warn_ranks(a, SIGUSR1);
    fprintf(stderr, "dslaunch agent: got SIGUSR1: passed it to this node's %d rank%s\n", n,
            n == 1 ? "" : "s");
}

/*
 * Stop every rank with sig, SIGKILL after grace. A repeat of the signal the stop already
 * sent, with no shorter grace, is dropped: the launcher's going away (EOF, and for a
 * local agent its parent-death SIGTERM) and repeated stop requests must not signal a
 * rank's group again while its handler runs (that would kill the handler's children).
 */
static void begin_stop(struct agent *a, int sig, double grace)
{
    if (a->state == AG_STOPPING || a->state == AG_CLEANING) {
        if (sig == a->stop_sig && dsl_now() + grace >= a->kill_at)
            return;
        if (dsl_now() + grace < a->kill_at)
            a->kill_at = dsl_now() + grace;
        if (a->state == AG_CLEANING && a->kill_at + CLEAN_PATIENCE < a->give_up_at)
            a->give_up_at = a->kill_at + CLEAN_PATIENCE;
        a->stop_sig = sig;
        signal_ranks(a, sig);
        return;
    }
    if (a->state == AG_DONE)
        return;
    /* a rank that is already dead died before the stop, whatever killed it: reaped now,
     * before the stop's signal, it is reported so (unstopped), and the launcher can name
     * it rather than a peer that failed because of it (job/job_loop.c) */
    reap(a);
    a->state = AG_STOPPING;
    a->kill_at = dsl_now() + grace;
    a->stop_sig = sig;
    signal_ranks(a, sig);
}

/*
 * Every rank has been reported: from now on only what they left behind is killed.
 * After a clean end it gets SIGTERM and the grace; after a stop it already got the
 * stop's signal, and the stop's deadline stands.
 */
static void begin_cleaning(struct agent *a)
{
    dsl_log_mark("ranks reported");
    if (a->state == AG_RUNNING) {
        char *signalled = dsl_xcalloc((size_t)a->nranks + 1, 1);
        for (int i = 0; i < a->nranks; i++)
            if (a->ranks[i].pid > 0) {
                kill(-a->ranks[i].pid, SIGTERM); /* leftovers in the ranks' groups */
                signalled[i] = 1;
            }
        dsl_contain_signal(&a->contain, SIGTERM, signalled);
        free(signalled);
        a->kill_at = dsl_now() + a->grace;
    }
    a->state = AG_CLEANING;
    a->give_up_at = a->kill_at + CLEAN_PATIENCE;
}

/* One step of CLEANING: done when nothing is left, SIGKILL once the deadline passed. */
static void clean_step(struct agent *a, double now)
{
    int left = dsl_contain_count(&a->contain);
    if (left > 0 && now >= a->kill_at) {
        for (int i = 0; i < a->nranks; i++)
            if (a->ranks[i].pid > 0)
                kill(-a->ranks[i].pid, SIGKILL);
        dsl_contain_kill(&a->contain);
        left = dsl_contain_count(&a->contain);
    }
    if (left > 0 && now < a->give_up_at)
        return;
    /* empty, but a process may still be on its way out of the cgroups (its last
       thread freeing memory): removal is retried each tick until the deadline */
    if (left <= 0 && dsl_contain_remove(&a->contain) < 0 && now < a->give_up_at)
        return;
    if (left > 0)
        fprintf(stderr,
                "dslaunch agent: %d process(es) of the job would not die within %.0f s of "
                "SIGKILL; the clean-up process keeps trying\n",
                left, CLEAN_PATIENCE);
    dsl_contain_finish(&a->contain, left == 0); /* says what it could not remove */
    a->state = AG_DONE;
}

static int all_reported(const struct agent *a)
{
    for (int i = 0; i < a->nranks; i++)
        if (!a->ranks[i].reported)
            return 0;
    return 1;
}

/* ---- start ---- */

/* Apply "K=V" (set) and "K" (unset) entries of add onto env. */
static void apply_env(struct dsl_strvec *env, const struct dsl_strvec *add)
{
    for (size_t k = 0; k < add->nr; k++) {
        const char *kv = add->v[k];
        const char *eq = strchr(kv, '=');
        char *key = dsl_xstrndup(kv, eq ? (size_t)(eq - kv) : strlen(kv));
        if (eq)
            dsl_env_set(env, key, eq + 1);
        else
            dsl_env_unset(env, key);
        free(key);
    }
}

/* The value of key in a list of "K=V" entries, or NULL. */
static const char *env_value(const struct dsl_strvec *env, const char *key)
{
    return dsl_env_lookup(env->v, key, strlen(key));
}

/*
 * --bind_cores_to_rank: the cores this agent may use (its own affinity: a Slurm or
 * container cpuset stays respected), narrowed to --bind_core_list, split evenly between
 * this node's ranks in NUMA order (common/cpubind.h). *bind holds nranks x *per cores.
 */
static int plan_binding(const struct dsl_msg *sm, int **bind, int *per, char *err)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) < 0)
        return dsl_seterr(err, -errno, "cannot read this node's usable cores: %s",
                          strerror(errno));
    int *allowed = dsl_xmalloc(DSL_CPUBIND_MAX * sizeof(int)), *cores = allowed;
    int *want = NULL, *node_of = NULL, r = 0;
    size_t n = 0;
    for (int c = 0; c < CPU_SETSIZE && c < DSL_CPUBIND_MAX; c++)
        if (CPU_ISSET((size_t)c, &set))
            allowed[n++] = c;
    if (sm->core_list) {
        want = dsl_xmalloc(DSL_CPUBIND_MAX * sizeof(int));
        int nw = dsl_cpubind_parse(sm->core_list, want, DSL_CPUBIND_MAX, err);
        if (nw < 0) {
            r = nw;
            goto out;
        }
        for (int k = 0; k < nw; k++) {
            if (want[k] >= CPU_SETSIZE || !CPU_ISSET((size_t)want[k], &set)) {
                char have[512];
                dsl_cpubind_format(allowed, n, have, sizeof(have));
                r = dsl_seterr(err, DSL_EUSAGE, "core %d of --bind_core_list '%s' is not one "
                               "this node lets dslaunch use (%s)", want[k], sm->core_list, have);
                goto out;
            }
        }
        cores = want;
        n = (size_t)nw;
    }
    node_of = dsl_xmalloc(DSL_CPUBIND_MAX * sizeof(int));
    dsl_cpubind_numa("/sys/devices/system/node", node_of, DSL_CPUBIND_MAX);
    *bind = dsl_xmalloc(n * sizeof(int) + 1);
    if ((r = dsl_cpubind_split(cores, n, node_of, sm->nranks, *bind, per, err)) < 0) {
        free(*bind);
        *bind = NULL;
    }
out:
    free(allowed);
    free(want);
    free(node_of);
    return r;
}

/* the GPUs Slurm gave the agent's step on this node (dsl_agent_set_node_devices) */
static char *node_devices;

void dsl_agent_set_node_devices(const char *list)
{
    free(node_devices);
    node_devices = list && list[0] ? dsl_xstrdup(list) : NULL;
}

/* The exit code a failed dsl_spawn() stands for, as a shell reports it: 127 for a
 * program that is not there, 126 for one that cannot be executed, 202 for a node that
 * could not set the rank up (its cgroup: DSL_ESPAWN, a pipe, a fork). */
static int spawn_exit_code(int rc)
{
    if (rc == -ENOENT || rc == -ENOTDIR || rc == -ELOOP || rc == -ENAMETOOLONG)
        return DSL_EXIT_NOTFOUND;
    if (rc == -EACCES || rc == -EPERM || rc == -ENOEXEC || rc == -EISDIR || rc == -ETXTBSY)
        return DSL_EXIT_NOEXEC;
    return DSL_EXIT_PREFLIGHT;
}

static void handle_start(struct agent *a, const struct dsl_msg *sm)
{
    /*
     * A master port still held now is rank 0's: its store serves on this very socket
     * (DSLAUNCH_STORE_FD), so no other job can take the port in between. Without
     * rank 0 here it is released.
     */
    dsl_log_mark("start");
    int store_fd = a->probe_lfd;
    a->probe_lfd = -1;
    int hosts_rank0 = 0;
    for (int i = 0; i < sm->nranks; i++)
        hosts_rank0 |= sm->ranks[i].rank == 0;
    if (store_fd >= 0 && !hosts_rank0) {
        close(store_fd);
        store_fd = -1;
    }
    a->grace = sm->grace;
    a->keepalive = sm->keepalive;
    a->nranks = sm->nranks;
    a->ranks = dsl_xcalloc((size_t)sm->nranks, sizeof(*a->ranks));
    a->state = AG_RUNNING;
    dsl_agent_progress_setup(&a->prog, sm->progress_tick, sm->nranks);
    for (int i = 0; i < sm->nranks; i++) {
        struct rank_proc *r = &a->ranks[i];
        r->rank = sm->ranks[i].rank;
        r->local_rank = sm->ranks[i].local_rank;
        r->fd[0] = r->fd[1] = r->fd[2] = -1;
        for (int s = 0; s < 3; s++)
            dsl_dynbuf_init(&r->part[s], LINE_MAX_BYTES * 2);
        r->reported = 0;
    }
    int *ids = dsl_xcalloc((size_t)sm->nranks, sizeof(int));
    for (int i = 0; i < sm->nranks; i++)
        ids[i] = sm->ranks[i].rank;
    char cerr[DSL_ERR_LEN];
    /* a stopped or wedged agent is fenced by its clean-up process (contain.c) when the
       launcher calls the node lost */
    dsl_contain_set_fence(&a->contain, a->keepalive, a->grace);
    int crc = dsl_contain_start(&a->contain, env_value(&sm->env, DSL_ENV_RUN_ID), ids,
                                sm->nranks, (unsigned long long)sm->mem_limit, cerr);
    dsl_log_mark("contained");
    free(ids);
    int *bind = NULL, per = 0;
    if (crc >= 0 && sm->cpubind)
        crc = plan_binding(sm, &bind, &per, cerr);
    /* under srun: the plan's device ids are places in the step's own GPU list */
    char *devices = NULL;
    const char *plan_devices = env_value(&sm->env, DSL_ENV_CUDA_VISIBLE_DEVICES);
    if (crc >= 0 && node_devices && plan_devices)
        crc = dsl_devmap_apply(plan_devices, node_devices, &devices, cerr);
    if (crc < 0) {
        struct dsl_msg m;
        dsl_msg_init(&m, DSL_MSG_SPAWNERR);
        m.rank = a->ranks[0].rank;
        m.error = dsl_xstrdup(cerr);
        /* the node could not set its ranks up (cgroups, core binding, devices): not a
         * missing program (127), a node that does not match the plan */
        m.code = DSL_EXIT_PREFLIGHT;
        send_msg(a, &m);
        dsl_msg_release(&m);
        for (int j = 0; j < sm->nranks; j++) {
            a->ranks[j].exited = 1;
            a->ranks[j].code = DSL_EXIT_PREFLIGHT;
            a->ranks[j].reported = 1;
        }
        begin_stop(a, SIGTERM, a->grace);
        if (store_fd >= 0)
            close(store_fd);
        free(bind);
        free(devices);
        return;
    }
    /* each rank forked first, then the execs awaited (dsl_spawn_begin/_end): the
       children set up and exec side by side, not one wait for the scheduler each */
    struct dsl_proc *procs = dsl_xcalloc((size_t)sm->nranks, sizeof(*procs));
    int forked = 0, fail_at = -1, fail_rc = 0;
    char fail_err[DSL_ERR_LEN] = "";
    for (int i = 0; i < sm->nranks; i++) {
        struct rank_proc *r = &a->ranks[i];
        struct dsl_strvec env;
        dsl_strvec_init(&env);
        dsl_strvec_pushv(&env, (const char *const *)environ);
        apply_env(&env, &sm->env);
        apply_env(&env, &sm->ranks[i].env);
        if (devices)
            dsl_env_set(&env, DSL_ENV_CUDA_VISIBLE_DEVICES, devices);
        dsl_agent_progress_rank(&a->prog, i, r->rank, &env);
        if (r->rank == 0 && store_fd >= 0)
            dsl_strvec_pushf(&env, DSL_ENV_STORE_FD "=%d", store_fd);
        cpu_set_t cores;
        CPU_ZERO(&cores);
        if (bind) {
            for (int k = 0; k < per; k++)
                CPU_SET((size_t)bind[i * per + k], &cores);
            if (!env_value(&sm->env, DSL_ENV_OMP_NUM_THREADS)) {
                char t[16];
                snprintf(t, sizeof(t), "%d", per);
                dsl_env_set(&env, DSL_ENV_OMP_NUM_THREADS, t);
            }
        }
        struct dsl_strvec argv;
        dsl_strvec_init(&argv);
        /* "--local_rank=N" goes before argv[local_rank_arg] (0: nowhere) */
        for (size_t k = 0; k <= sm->argv.nr; k++) {
            if (sm->local_rank_arg > 0 && (size_t)sm->local_rank_arg == k)
                dsl_strvec_pushf(&argv, "--local_rank=%d", r->local_rank);
            if (k < sm->argv.nr)
                dsl_strvec_push(&argv, sm->argv.v[k]);
        }
        struct dsl_spawn_opts so = {
            .argv = argv.v,
            .env = env.v,
            .cwd = sm->cwd[0] ? sm->cwd : NULL,
            .stdin_null = 1,
            .new_pgroup = 1,
            .pdeathsig = SIGKILL,
            .cgroup_procs = dsl_contain_procs(&a->contain, i),
            .keep_fd = r->rank == 0 && store_fd >= 0 ? store_fd : 0,
            .affinity = bind ? &cores : NULL,
            .affinity_size = sizeof(cores),
        };
        so.cgroup_fd = dsl_contain_cgroup_fd(&a->contain, i, &so.cgroup_fd_procs);
        r->t_start = dsl_now();
        int rc = dsl_spawn_begin(&procs[i], &so, fail_err);
        dsl_strvec_release(&env);
        dsl_strvec_release(&argv);
        if (r->rank == 0 && store_fd >= 0) {
            close(store_fd); /* rank 0 has it now (or failed to start) */
            store_fd = -1;
        }
        if (rc < 0) {
            fail_at = i;
            fail_rc = rc;
            break;
        }
        forked = i + 1;
    }
    /* every rank is forked: now their execs, which ran side by side, in rank order */
    for (int i = 0; i < forked; i++) {
        struct rank_proc *r = &a->ranks[i];
        char err[DSL_ERR_LEN];
        int rc = dsl_spawn_end(&procs[i], sm->argv.v[0], err);
        if (rc < 0 && (fail_at < 0 || i < fail_at)) {
            fail_at = i;
            fail_rc = rc;
            memcpy(fail_err, err, sizeof(fail_err));
        }
        if (fail_at >= 0 && i > fail_at) {
            /* after a rank that could not start: as when they were started one by one,
               this one never runs (it is reaped as the subreaper's, unreported) */
            if (rc == 0) {
                kill(-procs[i].pid, SIGKILL);
                kill(procs[i].pid, SIGKILL);
                close(procs[i].out_fd);
                close(procs[i].err_fd);
            }
            continue;
        }
        if (rc < 0)
            continue;
        r->pid = procs[i].pid;
        dsl_contain_started(&a->contain, i, r->pid);
        dsl_agent_progress_started(&a->prog, i, r->pid);
        r->fd[1] = procs[i].out_fd;
        r->fd[2] = procs[i].err_fd;
        struct dsl_msg m;
        dsl_msg_init(&m, DSL_MSG_STARTED);
        m.rank = r->rank;
        m.pid = (int)r->pid;
        send_msg(a, &m);
        dsl_msg_release(&m);
    }
    free(procs);
    if (fail_at >= 0) {
        struct dsl_msg m;
        dsl_msg_init(&m, DSL_MSG_SPAWNERR);
        m.rank = a->ranks[fail_at].rank;
        m.error = dsl_xstrdup(fail_err);
        int code = spawn_exit_code(fail_rc);
        m.code = code;
        send_msg(a, &m);
        dsl_msg_release(&m);
        /* the ranks that are not started count as exited with that code */
        for (int j = fail_at; j < sm->nranks; j++) {
            a->ranks[j].exited = 1;
            a->ranks[j].code = code;
            a->ranks[j].reported = 1;
        }
        begin_stop(a, SIGTERM, a->grace);
    }
    if (store_fd >= 0)
        close(store_fd);
    free(bind);
    free(devices);
    dsl_log_mark("ranks started");
}

static void handle_msg(struct agent *a, struct dsl_msg *m)
{
    switch (m->type) {
    case DSL_MSG_PROBE:
        if (a->state == AG_WAITING)
            handle_probe(a, m);
        break;
    case DSL_MSG_START:
        if (a->state == AG_WAITING)
            handle_start(a, m);
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
            begin_stop(a, m->sig ? m->sig : SIGTERM, m->grace);
        break;
    case DSL_MSG_SIGNAL: /* dslaunch got SIGUSR1 (Slurm's warning): pass it on */
        if (a->state == AG_RUNNING)
            warn_ranks(a, m->sig);
        break;
    case DSL_MSG_STACKS:
        if (a->state == AG_RUNNING)
            dsl_agent_progress_stacks(&a->prog, m->stack_timeout, m->stack_probe);
        break;
    default:
        break; /* pings and anything else only count as signs of life */
    }
}

static void read_control(struct agent *a)
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
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
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
static int outcome(const struct agent *a)
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

static int agent_run(int in_fd, int out_fd, struct dsl_seal *seal,
                     struct dsl_agent_join *join)
{
    struct agent a;
    memset(&a, 0, sizeof(a));
    a.sigpipe[0] = a.sigpipe[1] = -1;
    a.join = join;
    a.in_fd = in_fd;
    a.out_fd = out_fd;
    a.seal = seal;
    a.probe_lfd = -1;
    a.grace = 10.0;
    a.keepalive = 0;
    dsl_linebuf_init(&a.in);
    dsl_dynbuf_init(&a.outq, OUTQ_MAX);
    dsl_agent_progress_init(&a.prog);
    dsl_log_set_prog("dslaunch agent");
    dsl_log_mark("up");
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    dsl_contain_init(&a.contain);
    if (pipe2(a.sigpipe, O_CLOEXEC | O_NONBLOCK) == 0)
        sigfd = a.sigpipe[1];
    install_signals();
    fcntl(out_fd, F_SETFL, fcntl(out_fd, F_GETFL) | O_NONBLOCK);
    fcntl(in_fd, F_SETFL, fcntl(in_fd, F_GETFL) | O_NONBLOCK);
    a.last_rx = a.last_ping = dsl_now();
    send_hello(&a);

    for (;;) {
        double now = dsl_now();
        if (got_signal) {
            int sig = got_signal;
            got_signal = 0;
            note_stop(&a, STOP_SIGNAL, sig);
            if (a.state == AG_WAITING)
                a.state = AG_DONE;
            else
                begin_stop(&a, sig == SIGINT ? SIGINT : SIGTERM, a.grace);
        }
        if (got_usr1) {
            got_usr1 = 0;
            a.usr1_pending = 1; /* passed on once the ranks run (at once if they do) */
        }
        if (a.usr1_pending && a.state != AG_WAITING) {
            a.usr1_pending = 0;
            pass_usr1(&a);
        }
        if (!a.in_eof && a.keepalive > 0 && now - a.last_rx > a.keepalive) {
            fprintf(stderr, "dslaunch agent: no word from the launcher for %.0f s; stopping\n",
                    now - a.last_rx);
            a.in_eof = 1;
        }
        if (a.in_eof && !a.eof_acted && a.state != AG_DONE) {
            /*
             * The launcher is gone (acted on once: the stop then runs its course). The
             * ranks still get the job's whole grace: a rank saving a checkpoint on
             * SIGTERM needs it most when the job is being lost.
             */
            a.eof_acted = 1;
            note_stop(&a, STOP_LOST, 0);
            if (a.state == AG_WAITING)
                a.state = AG_DONE;
            else
                begin_stop(&a, SIGTERM, a.grace);
        }
        if (a.state == AG_STOPPING && now >= a.kill_at)
            signal_ranks(&a, SIGKILL);
        struct dsl_msg pm; /* progress, and stacks: before a "bye" the launcher awaits */
        while (a.state != AG_WAITING && dsl_agent_progress_poll(&a.prog, now, &pm)) {
            send_msg(&a, &pm);
            dsl_msg_release(&pm);
        }
        if (a.nranks && all_reported(&a) && (a.state == AG_RUNNING || a.state == AG_STOPPING))
            begin_cleaning(&a);
        if (a.state == AG_CLEANING)
            clean_step(&a, now);
        if (a.state == AG_RUNNING || a.state == AG_STOPPING || a.state == AG_CLEANING)
            dsl_contain_tick(&a.contain, now); /* the clean-up process hears we live */
        if (a.state == AG_DONE) {
            dsl_log_mark("cleaned");
            struct dsl_msg m;
            dsl_msg_init(&m, DSL_MSG_BYE);
            send_msg(&a, &m);
            flush_out(&a, 1);
            break;
        }
        if (a.keepalive > 0 && now - a.last_ping > a.keepalive / 3) {
            struct dsl_msg m;
            dsl_msg_init(&m, DSL_MSG_PING);
            send_msg(&a, &m);
            a.last_ping = now;
        }

        struct pollfd pfd[3 + 3 * 64];
        struct pollfd *pf = pfd;
        size_t npf = 0, cap = sizeof(pfd) / sizeof(pfd[0]);
        struct pollfd *big = NULL;
        if ((size_t)a.nranks * 3 + 3 > cap) { /* stdout, stderr, a stack tool per rank */
            cap = (size_t)a.nranks * 3 + 3;
            big = dsl_xcalloc(cap, sizeof(*big));
            pf = big;
        }
        pf[npf++] = (struct pollfd){.fd = a.sigpipe[0], .events = POLLIN};
        if (!a.in_eof)
            pf[npf++] = (struct pollfd){.fd = a.in_fd, .events = POLLIN};
        if (a.out_fd >= 0 && want_write(&a))
            pf[npf++] = (struct pollfd){.fd = a.out_fd, .events = POLLOUT};
        if (a.outq.len < OUTQ_PAUSE || a.out_fd < 0)
            for (int i = 0; i < a.nranks; i++)
                for (int s = 1; s <= 2; s++)
                    if (a.ranks[i].fd[s] >= 0)
                        pf[npf++] = (struct pollfd){.fd = a.ranks[i].fd[s], .events = POLLIN};
        npf += dsl_agent_progress_pollfds(&a.prog, pf + npf);
        int timeout = a.state == AG_CLEANING ? 20 : 200; /* no event says "empty" */
        if (a.state == AG_STOPPING) {
            double left = a.kill_at - now;
            int ms = left <= 0 ? 50 : (int)(left * 1000) + 1;
            if (ms < timeout)
                timeout = ms;
        }
        int pr = poll(pf, npf, timeout);
        if (pr < 0 && errno != EINTR) {
            free(big);
            break;
        }
        for (size_t i = 0; pr > 0 && i < npf; i++) {
            if (!pf[i].revents)
                continue;
            int fd = pf[i].fd;
            if (fd == a.sigpipe[0]) {
                char drain[64];
                while (read(fd, drain, sizeof(drain)) > 0)
                    ;
            } else if (fd == a.in_fd) {
                read_control(&a);
            } else if (fd == a.out_fd) {
                flush_out(&a, 0);
            } else if (dsl_agent_progress_on_fd(&a.prog, fd)) {
                /* a stack tool's output */
            } else {
                for (int k = 0; k < a.nranks; k++)
                    for (int s = 1; s <= 2; s++)
                        if (a.ranks[k].fd[s] == fd)
                            read_pipe(&a, &a.ranks[k], s);
            }
        }
        free(big);
        reap(&a);
        flush_out(&a, 0);
    }

    for (int i = 0; i < a.nranks; i++) {
        struct rank_proc *r = &a.ranks[i];
        for (int s = 0; s < 3; s++) {
            if (r->fd[s] >= 0)
                close(r->fd[s]);
            dsl_dynbuf_release(&r->part[s]);
        }
        for (int k = 0; k < DSL_PROTO_MAX_TAIL; k++)
            free(r->tail[k]);
    }
    free(a.ranks);
    dsl_agent_progress_release(&a.prog);
    dsl_contain_release(&a.contain);
    /* what the clean-up killed last is dead but, as the subreaper's, still ours to reap */
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    if (a.probe_lfd >= 0)
        close(a.probe_lfd);
    dsl_linebuf_release(&a.in);
    dsl_dynbuf_release(&a.outq);
    if (a.sigpipe[0] >= 0 && sigfd == a.sigpipe[1]) { /* a no-ssh node runs us again */
        sigfd = -1;
        close(a.sigpipe[0]);
        close(a.sigpipe[1]);
    }
    dsl_log_mark("exit");
    if (!join)
        return 0;
    join->signalled = a.stop_cause == STOP_SIGNAL ? a.stop_signo : 0;
    join->refused = a.stop_cause == STOP_REFUSED;
    return outcome(&a);
}
