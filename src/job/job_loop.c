/*
 * The job's message loop: what every phase of a job (connect, preflight, run, and
 * doctor's inspect callback) drives to talk to its node agents.
 *
 * Theory of operation. The loop is one thread and one poll() per pass (dsl_job_pump):
 * the poll set is rebuilt from the nodes in flight on every pass, plus the read end of
 * a self-pipe the signal handler writes to, so a signal wakes the poll at once.
 * Messages to a node are encoded into its output queue at once (dsl_job_node_send) and
 * written as far as the transport takes them (dsl_job_node_flush, and on POLLOUT);
 * whatever arrives is decoded line by line and applied to the job's node and rank
 * state (handle_msg): hello, probe answers, output lines, exits, spawn errors, bye.
 * The first failure anywhere (a rank's non-zero exit or signal death, a lost node)
 * starts the stop: "stop" goes to every agent that is still there.
 *
 * Output lines go to the launcher's console queue (output.c), never straight to
 * stdout: the poll set includes its destinations while they have a backlog, and every
 * pass writes what they take, so a reader that does not read never stalls the loop
 * (keepalives, stops, exits all go on); --log-dir files are written as lines arrive.
 *
 * Signals (SIGINT, SIGTERM, SIGHUP) only set a flag and write to the self-pipe;
 * dsl_job_handle_signals() acts on them between passes: the first forwards that
 * signal to every rank with the normal grace, a second SIGINT kills at once. A stop
 * the user asked for (those signals, or the console's reader gone: EPIPE, as SIGPIPE)
 * decides the exit code unless a failure came first, and what ranks do on the way
 * down (exit 1 on SIGTERM, outlive the grace) is part of that stop, not a failure.
 *
 * This file calls nothing in job.c or job_preflight.c: both phases sit on top of it,
 * so the loop can be read, and changed, without them.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "dslaunch/job/job.h"
#include "errfold.h"
#include "job_hang.h"
#include "job_impl.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/quote.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

/* How long after a first failure a foreign kill may still be named as its cause: well
 * inside the grace period, so that our own SIGKILL after the grace never counts. */
#define CAUSE_WINDOW(job) ((job)->opts->term_timeout < 2.0 ? (job)->opts->term_timeout / 2 : 1.0)
/* SIGKILL is ours only once the grace has run out; before that it came from outside. */
#define SIGKILL_BY_US(job) (dsl_now() - (job)->t_stop >= (job)->opts->term_timeout ? SIGKILL : 0)

/*
 * Whether rank r, killed by signal, died before the first failure's consequences could
 * reach it. Exactly so when its agent says it died before being signalled at all (the
 * agent reaps its dead ranks before it signals the others): then the kill is no part
 * of the stop, however late its report arrives behind a peer's. Otherwise (the stop
 * reached the node first, or an older agent) only a signal the stop did not send, moments
 * after the first failure, counts.
 */
static int foreign_kill_first(struct dsl_job *job, const struct dsl_job_rank *r)
{
    if (r->cause.known && r->cause.unstopped)
        return 1;
    if (r->sig == job->stop_sig || r->sig == SIGKILL_BY_US(job) ||
        (r->cause.known && r->cause.by_stop))
        return 0;
    return dsl_now() - job->t_first_fail < CAUSE_WINDOW(job);
}

static volatile sig_atomic_t sig_pending, sig_count;
static volatile sig_atomic_t usr1_pending; /* SIGUSR1: passed to the ranks, no stop */
static int sig_wfd = -1;

static void on_signal(int sig)
{
    int saved = errno;
    if (sig == SIGUSR1) {
        usr1_pending = 1;
    } else {
        sig_pending = sig;
        sig_count++;
    }
    if (sig_wfd >= 0) {
        char c = 0;
        ssize_t w = write(sig_wfd, &c, 1);
        (void)w;
    }
    errno = saved;
}

void dsl_job_signals_catch(int wfd)
{
    sig_wfd = wfd;
    dsl_signals_set(on_signal, SA_RESTART, (const int[]){SIGINT, SIGTERM, SIGHUP, SIGUSR1, 0});
    signal(SIGPIPE, SIG_IGN);
}

void dsl_job_signals_restore(void)
{
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGUSR1, SIG_DFL);
    sig_wfd = -1;
}

/* ---- sending ---- */

void dsl_job_node_send(struct dsl_job_node *n, const struct dsl_msg *m)
{
    if (n->state == DSL_NODE_FAILED || n->eof)
        return;
    if (dsl_msg_encode(m, &n->outq) < 0) {
        dsl_dynbuf_init(&n->outq, DSL_JOB_OUTQ_MAX);
        n->state = DSL_NODE_FAILED;
        n->err_code = DSL_EREMOTE;
        snprintf(n->err, sizeof(n->err), "agent on '%s' stopped reading its control channel",
                 n->pn->host);
    }
    n->last_tx = dsl_now();
}

void dsl_job_node_flush(struct dsl_job_node *n)
{
    while (n->outq.len && n->conn.state == DSL_CONN_OPEN) {
        ssize_t w = n->conn.ops->write(&n->conn, n->outq.buf, n->outq.len);
        if (w > 0) {
            dsl_dynbuf_consume(&n->outq, (size_t)w);
            continue;
        }
        if (w == -EAGAIN || w == 0)
            return;
        dsl_dynbuf_reset(&n->outq); /* the read side will see EOF and report */
        return;
    }
}

static void broadcast_stop(struct dsl_job *job, int sig, double grace)
{
    struct dsl_msg m;
    dsl_msg_init(&m, DSL_MSG_STOP);
    m.sig = sig;
    m.grace = grace;
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        if (n->state == DSL_NODE_RUNNING || n->state == DSL_NODE_READY ||
            n->state == DSL_NODE_HELLO) {
            dsl_job_node_send(n, &m);
            dsl_job_node_flush(n);
        }
    }
}

static void begin_stop(struct dsl_job *job, int sig, double grace)
{
    if (!job->stopping) {
        job->stopping = 1;
        job->t_stop = dsl_now();
        job->stop_sig = sig;
    }
    broadcast_stop(job, sig, grace);
}

void dsl_job_stop(struct dsl_job *job, int sig, double grace)
{
    begin_stop(job, sig, grace);
}

/*
 * A launcher that is stopped (SIGSTOP, ^Z) or suspended for longer than the keepalive
 * comes back to agents that have lost it: each stopped its ranks with SIGTERM, and
 * their exit reports wait in the channels. Read first, those would name a rank
 * "killed by SIGTERM (sent by dslaunch's stop)" as the failure, exit 143, as if
 * someone had stopped the job. So the gap is noted before anything is read, and the
 * job ends as a lost launcher: exit 200, the code an agent of a no-ssh node gives when
 * it loses its coordinator.
 */
void dsl_job_check_paused(struct dsl_job *job, double slack)
{
    double now = dsl_now(), last = job->t_running;
    job->t_running = now;
    double ka = job->opts->tr.keepalive;
    if (!job->started || last <= 0 || ka <= 0 || job->paused_for > 0 || now - last <= slack)
        return;
    /*
     * An agent loses the launcher when it has heard nothing for the keepalive since the
     * last message it got, which may be up to a third of a keepalive before the pause
     * began: the test is each node's last message, not the pause's length. A running
     * loop pings every keepalive/3, so only a launcher that stood still gets here.
     */
    int lost = 0;
    for (int i = 0; i < job->nnodes; i++)
        lost |= job->nodes[i].state == DSL_NODE_RUNNING && now - job->nodes[i].last_tx > ka;
    if (!lost)
        return;
    job->paused_for = now - last;
    if (job->failed_rank < 0 && job->failed_node < 0 && !job->stop_requested)
        job->exit_code = DSL_EXIT_UNREACHABLE;
    for (int i = 0; i < job->nnodes; i++)
        job->nodes[i].last_rx = now; /* their silence was ours: time to report */
    begin_stop(job, SIGTERM, job->opts->term_timeout);
}

void dsl_job_node_fail(struct dsl_job *job, struct dsl_job_node *n, int code, const char *fmt,
                       ...)
{
    if (n->state == DSL_NODE_FAILED || n->state == DSL_NODE_EXITED)
        return;
    int was_running = n->state == DSL_NODE_RUNNING;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->err, sizeof(n->err), fmt, ap);
    va_end(ap);
    n->err_code = code;
    n->state = DSL_NODE_FAILED;
    if (was_running && job->failed_rank < 0 && job->failed_node < 0 && !job->stop_requested &&
        !job->paused_for) {
        job->failed_node = (int)(n - job->nodes);
        job->exit_code = code == DSL_ETIMEDOUT || code == DSL_ECONNECT ? DSL_EXIT_UNREACHABLE
                                                                       : DSL_EXIT_AGENT;
    }
    if (was_running)
        begin_stop(job, SIGTERM, job->opts->term_timeout);
}

/* ---- output ---- */

static void print_bytes(struct dsl_job *job, struct dsl_job_rank *r, int stream,
                        const char *line, size_t len, const char *end)
{
    char small[256], *prefix = small;
    small[0] = '\0';
    if (job->opts->no_prefix)
        ;
    else if (job->nnodes > 1 || !job->plan->all_local) {
        const char *host = job->pl->nodes[r->node].host;
        int n = snprintf(small, sizeof(small), "[%s:rank %d] ", host, r->rank);
        if (n < 0 || (size_t)n >= sizeof(small))
            prefix = dsl_xasprintf("[%s:rank %d] ", host, r->rank);
    } else {
        snprintf(small, sizeof(small), "[rank %d] ", r->rank);
    }
    job->console_lines++;
    if (stream == 2) {
        r->err_lines++;
        r->err_seq = job->console_lines;
    }
    if (job->out) {
        dsl_output_bytes(job->out, stream, prefix, line, len, end);
    } else {
        FILE *f = stream == 2 ? stderr : stdout;
        fputs(prefix, f);
        fwrite(line, 1, len, f);
        fputs(end, f);
        fflush(f);
    }
    if (prefix != small)
        free(prefix);
}

static void print_line(struct dsl_job *job, struct dsl_job_rank *r, int stream, const char *line)
{
    print_bytes(job, r, stream, line, strlen(line), "\n");
}

void dsl_job_log_sink(void *arg, const char *line)
{
    struct dsl_job *job = arg;
    if (!job->out) {
        fprintf(stderr, "%s\n", line);
        return;
    }
    dsl_output_text(job->out, 2, line);
    dsl_output_text(job->out, 2, "\n");
    dsl_output_flush(job->out);
}

/*
 * What dslaunch prints itself quotes text from ranks and nodes (a rank's last stderr
 * lines in the summary, the names and facts a node reported in the preflight table),
 * which may hold escape sequences that the terminal would run. So every line goes
 * through dsl_quote_for_humans(), as the log functions' messages do; the line ends
 * are the format's own. (The ranks' streamed lines are not printed here: they stay
 * byte for byte as written.)
 */
static char *quote_lines(const char *text)
{
    size_t n = strlen(text), cap = n * 6 + 8; /* at most \uNNNN for 3 bytes, \xNN per byte */
    char *out = dsl_xmalloc(cap + 1), *o = out;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        o += dsl_quote_for_humans(o, cap - (size_t)(o - out) + 1, p, len);
        if (!nl)
            break;
        *o++ = '\n';
        p = nl + 1;
    }
    *o = '\0';
    return out;
}

void dsl_job_eprintf(struct dsl_job *job, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_end(ap2);
        return;
    }
    char *text = dsl_xmalloc((size_t)n + 1);
    vsnprintf(text, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    char *safe = quote_lines(text);
    if (!job->out) {
        fputs(safe, stderr);
    } else if (safe[0]) {
        dsl_output_text(job->out, 2, safe);
        dsl_output_flush(job->out);
    }
    free(safe);
    free(text);
}

/*
 * Append a line to rank r's --log-dir file, in one write where it fits. A write that
 * fails (ENOSPC, EIO, EFBIG) is said at once, naming the rank and the file; the file
 * is closed, since a log with holes in it would pass for a whole one, and from then
 * on r->log_lost counts the bytes it misses. The console is not affected.
 */
static void log_line(struct dsl_job_rank *r, const char *line, size_t len, const char *end)
{
    size_t elen = strlen(end), done = 0, total = len + elen;
    int fd = fileno(r->log);
    while (done < total) {
        struct iovec iov[2];
        int k = 0;
        if (done < len)
            iov[k++] = (struct iovec){.iov_base = (void *)(line + done), .iov_len = len - done};
        size_t eoff = done > len ? done - len : 0;
        iov[k++] = (struct iovec){.iov_base = (void *)(end + eoff), .iov_len = elen - eoff};
        ssize_t w = writev(fd, iov, k);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            r->log_lost = total - done;
            dsl_error("--log-dir: cannot write '%s' (rank %d): %s; the log misses its lines "
                      "from here on (the console still has them)",
                      r->log_path ? r->log_path : "?", r->rank, strerror(e));
            fclose(r->log);
            r->log = NULL;
            return;
        }
        done += (size_t)w;
    }
}

/*
 * Whether a whole stderr line of r is the same error line another rank has shown
 * (errfold.h): then it is not shown again, and counts as shown for the summary, which
 * quotes a rank's last lines only when the console does not show them already.
 */
static int fold_line(struct dsl_job *job, struct dsl_job_rank *r, const char *line, size_t len)
{
    if (job->nranks < 2)
        return 0;
    if (!job->fold) {
        job->fold = dsl_xmalloc(sizeof(*job->fold));
        dsl_errfold_init(job->fold, job->nranks);
    }
    if (!dsl_errfold_line(job->fold, r->rank, line, len))
        return 0;
    r->err_lines++;
    r->err_seq = job->console_lines;
    return 1;
}

/*
 * A line of a rank's output. The --log-dir file gets its bytes exactly as written, line
 * end included. So does the console with --no-prefix when it is not a terminal (a pipe
 * or a file: `dslaunch --no-prefix ... > out` holds what the rank wrote). Otherwise each
 * line is shown with its prefix and a newline; on a terminal a progress bar redrawing
 * itself with "\r" is shown at most once a second, and a "\r" with nothing before it
 * (tqdm starts each update so) shows nothing; an error line on stderr that another
 * rank has shown already is folded into it (fold_line).
 */
static void handle_out(struct dsl_job *job, struct dsl_job_rank *r, const struct dsl_msg *m)
{
    const char *end = dsl_line_end_text(m->end);
    size_t len = m->line_len;
    if (r->log)
        log_line(r, m->line, len, end);
    else if (r->log_lost) /* the log failed: what it misses is counted */
        r->log_lost += len + strlen(end);
    if (job->opts->no_prefix && !job->tty[m->stream == 2 ? 2 : 1]) {
        print_bytes(job, r, m->stream, m->line, len, end);
        return;
    }
    if (m->end == DSL_END_CR) {
        if (len == 0)
            return;
        if (!job->tty[m->stream == 2 ? 2 : 1]) {
            print_bytes(job, r, m->stream, m->line, len, "\n"); /* every update, a line */
            return;
        }
        /* a progress bar redrawing itself: show at most one update a second */
        double now = dsl_now();
        free(r->pending_cr);
        r->pending_cr = NULL;
        if (now - r->last_cr_shown >= 1.0) {
            print_bytes(job, r, m->stream, m->line, len, "\n");
            r->last_cr_shown = now;
        } else {
            r->pending_cr = dsl_xstrdup(m->line);
        }
        return;
    }
    free(r->pending_cr);
    r->pending_cr = NULL;
    if (m->stream == 2 && (m->end == DSL_END_LF || m->end == DSL_END_CRLF) &&
        fold_line(job, r, m->line, len))
        return;
    print_bytes(job, r, m->stream, m->line, len, "\n");
}

/* ---- receiving ---- */

static struct dsl_job_rank *rank_of(struct dsl_job *job, struct dsl_job_node *n, int rank)
{
    if (rank < 0 || rank >= job->nranks || job->ranks[rank].node != (int)(n - job->nodes))
        return NULL;
    return &job->ranks[rank];
}

static void handle_msg(struct dsl_job *job, struct dsl_job_node *n, struct dsl_msg *m)
{
    struct dsl_job_rank *r;
    switch (m->type) {
    case DSL_MSG_HELLO:
        if (n->have_hello)
            break;
        n->hello = *m;
        dsl_msg_init(m, 0); /* ownership moved */
        n->have_hello = 1;
        n->t_hello = dsl_now();
        if (n->state == DSL_NODE_HELLO)
            n->state = DSL_NODE_READY;
        break;
    case DSL_MSG_PROBED:
        dsl_msg_release(&n->probed);
        n->probed = *m;
        dsl_msg_init(m, 0);
        n->have_probed = 1;
        break;
    case DSL_MSG_STARTED:
        if ((r = rank_of(job, n, m->rank))) {
            r->started = 1;
            r->pid = m->pid;
        }
        break;
    case DSL_MSG_OUT:
        if ((r = rank_of(job, n, m->rank))) {
            handle_out(job, r, m);
            dsl_job_hang_on_output(job, r);
        }
        break;
    case DSL_MSG_EXIT:
        if (!(r = rank_of(job, n, m->rank)) || r->exited)
            break;
        r->exited = 1;
        r->exited_in_stop = job->stopping;
        r->code = m->code;
        r->sig = m->sig;
        r->wall = m->wall;
        r->pid = m->pid;
        r->cause = m->cause;
        dsl_strvec_release(&r->tail);
        for (size_t i = 0; i < m->tail.nr; i++)
            dsl_strvec_push(&r->tail, m->tail.v[i]);
        if (r->pending_cr) {
            print_line(job, r, 2, r->pending_cr);
            free(r->pending_cr);
            r->pending_cr = NULL;
        }
        if (dsl_job_hang_on_exit(job, r))
            break; /* a hang's verdict stands for the job's outcome (job_hang.c) */
        if ((r->sig || r->code != 0) && job->failed_rank < 0 && job->failed_node < 0 &&
            !job->stop_requested && !job->paused_for) {
            job->failed_rank = r->rank;
            job->exit_code = r->sig ? 128 + r->sig : r->code;
            job->t_first_fail = dsl_now();
        } else if (r->sig && job->failed_rank >= 0 && !job->ranks[job->failed_rank].sig &&
                   foreign_kill_first(job, r)) {
            /*
             * A rank killed by a signal nobody here sent, while a peer's error exit is
             * the first failure: the peer most likely failed because of it (a
             * collective saw the connection drop), so the kill is what the summary
             * should name.
             */
            job->failed_rank = r->rank;
            job->exit_code = 128 + r->sig;
        }
        if ((r->sig || r->code != 0) && !job->stopping)
            begin_stop(job, SIGTERM, job->opts->term_timeout);
        break;
    case DSL_MSG_SPAWNERR:
        if (!(r = rank_of(job, n, m->rank)))
            break;
        dsl_error("rank %d on '%s': %s", r->rank, n->pn->host, m->error);
        /* the agent says which code (126, 127, or 202 for a node that could not set its
         * ranks up: binding, devices, cgroups); an older agent does not */
        int code = m->code ? m->code
                   : strstr(m->error, "ermission") ? DSL_EXIT_NOEXEC : DSL_EXIT_NOTFOUND;
        for (int i = m->rank; i < job->nranks && job->ranks[i].node == r->node; i++) {
            job->ranks[i].exited = 1;
            job->ranks[i].code = code;
        }
        if (job->failed_rank < 0 && job->failed_node < 0) {
            job->failed_rank = r->rank;
            job->exit_code = code;
        }
        begin_stop(job, SIGTERM, job->opts->term_timeout);
        break;
    case DSL_MSG_BYE:
        n->state = DSL_NODE_EXITED;
        break;
    case DSL_MSG_PROGRESS:
    case DSL_MSG_STACKED:
        dsl_job_hang_on_msg(job, n, m);
        break;
    default:
        break;
    }
}

static void node_read(struct dsl_job *job, struct dsl_job_node *n)
{
    char buf[65536];
    for (int rounds = 0; rounds < 64; rounds++) {
        ssize_t got = n->conn.ops->read(&n->conn, buf, sizeof(buf));
        if (got == -EAGAIN)
            return;
        if (got <= 0) {
            n->eof = 1;
            if (n->state != DSL_NODE_EXITED && n->state != DSL_NODE_FAILED) {
                const char *why = n->conn.err[0] ? n->conn.err : "connection closed";
                if (n->conn.err_code == -ENOENT || n->conn.err_code == -EACCES)
                    /* no dslaunch to run there: the transport said what to do */
                    dsl_job_node_fail(job, n, n->conn.err_code, "%s", why);
                else
                    dsl_job_node_fail(job, n, DSL_EREMOTE, "node agent on '%s' went away (%s)",
                                      n->pn->host, why);
            }
            return;
        }
        n->last_rx = dsl_now();
        if (dsl_linebuf_feed(&n->in, buf, (size_t)got) < 0) {
            dsl_job_node_fail(job, n, DSL_EPROTO,
                              "node agent on '%s' sent an oversized message", n->pn->host);
            return;
        }
        for (;;) {
            struct dsl_msg m;
            char err[DSL_ERR_LEN];
            int r = dsl_msg_next(&n->in, &m, err);
            if (r == 0)
                break;
            if (r < 0) {
                dsl_job_node_fail(job, n, DSL_EPROTO, "node agent on '%s': %s", n->pn->host,
                                  err);
                return;
            }
            handle_msg(job, n, &m);
            dsl_msg_release(&m);
        }
    }
}

/* ---- the loop ---- */


/* One pass: poll everything in flight for at most timeout_ms, handle what is ready. */
void dsl_job_pump(struct dsl_job *job, int sig_rfd, int timeout_ms)
{
    struct pollfd *pf = dsl_xcalloc((size_t)job->nnodes + 3, sizeof(*pf));
    int *owner = dsl_xcalloc((size_t)job->nnodes + 3, sizeof(int));
    nfds_t npf = 0;
    pf[npf].fd = sig_rfd;
    pf[npf].events = POLLIN;
    owner[npf++] = -1;
    if (job->out) /* the console, while it has a backlog */
        for (int k = dsl_output_pollfds(job->out, pf + npf); k > 0; k--)
            owner[npf++] = -2;
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        if (n->state == DSL_NODE_PENDING || n->state == DSL_NODE_FAILED || n->eof ||
            !n->conn.priv)
            continue;
        short ev = 0;
        int fd = n->conn.ops->pollfd(&n->conn, &ev);
        if (fd < 0)
            continue;
        if (n->conn.state == DSL_CONN_OPEN && n->outq.len)
            ev |= POLLOUT;
        pf[npf].fd = fd;
        pf[npf].events = ev;
        owner[npf++] = i;
    }
    dsl_job_check_paused(job, 0);
    int pr = poll(pf, npf, timeout_ms);
    dsl_job_check_paused(job, timeout_ms / 1000.0);
    for (nfds_t k = 0; pr > 0 && k < npf; k++) {
        if (!pf[k].revents)
            continue;
        if (owner[k] == -2)
            continue; /* the console is written below */
        if (owner[k] < 0) {
            char drain[64];
            while (read(sig_rfd, drain, sizeof(drain)) > 0)
                ;
            continue;
        }
        struct dsl_job_node *n = &job->nodes[owner[k]];
        if (n->state == DSL_NODE_CONNECTING) {
            if (n->conn.ops->progress(&n->conn) < 0 || n->conn.state == DSL_CONN_FAILED) {
                n->state = DSL_NODE_FAILED;
                n->err_code = n->conn.err_code ? n->conn.err_code : DSL_ECONNECT;
                snprintf(n->err, sizeof(n->err), "%s", n->conn.err);
                continue;
            }
            if (n->conn.state == DSL_CONN_OPEN)
                n->state = DSL_NODE_HELLO;
        }
        if (n->conn.state != DSL_CONN_OPEN)
            continue;
        if (pf[k].revents & POLLOUT)
            dsl_job_node_flush(n);
        if (pf[k].revents & (POLLIN | POLLHUP | POLLERR))
            node_read(job, n);
    }
    /* transports with internal buffering (libssh) may hold data poll cannot see */
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        if (n->conn.state == DSL_CONN_OPEN && !n->eof && n->state != DSL_NODE_FAILED &&
            strcmp(n->conn.ops->name, "local") != 0)
            node_read(job, n);
        if (n->conn.state == DSL_CONN_OPEN && n->outq.len)
            dsl_job_node_flush(n);
    }
    if (job->out)
        dsl_output_flush(job->out);
    free(pf);
    free(owner);
}

/*
 * The user ends the job (why: the signal, SIGPIPE for a reader gone): unless a failure
 * came first, the exit code is 128 + why whatever the ranks do from here on.
 */
static void request_stop(struct dsl_job *job, int why, int sig, double grace)
{
    if (!job->stop_requested)
        job->stop_requested = why;
    if (job->failed_rank < 0 && job->failed_node < 0 && !job->exit_code)
        job->exit_code = 128 + why;
    begin_stop(job, sig, grace);
}

void dsl_job_handle_signals(struct dsl_job *job)
{
    if (job->out && job->out->reader_gone && !job->stop_requested) {
        /* `dslaunch ... | head`: end as a pipeline member does on SIGPIPE, quietly */
        dsl_debug("the reader of the output went away: stopping every rank");
        request_stop(job, SIGPIPE, SIGTERM, job->opts->term_timeout);
    }
    if (usr1_pending) {
        /* Slurm's warning signal (--signal=B:USR1@SECONDS): every rank gets it, the
           job goes on (dstrain --save-on-signal saves and exits 138) */
        usr1_pending = 0;
        struct dsl_msg m;
        dsl_msg_init(&m, DSL_MSG_SIGNAL);
        m.sig = SIGUSR1;
        int n = 0;
        for (int i = 0; i < job->nnodes; i++)
            if (job->nodes[i].state == DSL_NODE_RUNNING) {
                dsl_job_node_send(&job->nodes[i], &m);
                dsl_job_node_flush(&job->nodes[i]);
                n++;
            }
        job->warned = 1;
        dsl_info("got SIGUSR1: passed it to the ranks of %d node%s", n, n == 1 ? "" : "s");
    }
    if (!sig_pending)
        return;
    int sig = sig_pending;
    sig_pending = 0;
    job->user_sig = sig;
    if (sig_count >= 2 && sig == SIGINT) {
        dsl_info("second interrupt: killing every rank now");
        job->killed_now = 1;
        request_stop(job, sig, SIGKILL, 0);
    } else {
        dsl_info("got %s: stopping every rank (SIGKILL in %.0f s; ^C again to kill now)",
                 dsl_signame(sig), job->opts->term_timeout);
        request_stop(job, sig, sig, job->opts->term_timeout);
    }
}

/* ---- for an inspect callback (job.h) ---- */

void dsl_job_send(struct dsl_job_node *n, const struct dsl_msg *m)
{
    dsl_job_node_send(n, m);
    dsl_job_node_flush(n);
}

int dsl_job_step(struct dsl_job *job, int sig_rfd, int timeout_ms)
{
    dsl_job_handle_signals(job);
    if (job->stopping)
        return job->exit_code ? job->exit_code : 130;
    dsl_job_pump(job, sig_rfd, timeout_ms);
    return 0;
}
