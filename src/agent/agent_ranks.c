/*
 * The node's ranks once started: their output, their exits, their stop and the clean-up
 * of what they leave behind (the states RUNNING, STOPPING, CLEANING of agent.c).
 *
 * Theory of operation. Output is read from each rank's stdout and stderr pipe and
 * forwarded a line at a time, never split ('\r' also ends a line, flagged so the
 * launcher can treat progress bars gently; a line over LINE_MAX_BYTES goes in pieces);
 * the last stderr lines are kept for the exit report. A rank's exit is reported once
 * its pipes have given what it wrote, with the evidence of why it ended read while its
 * cgroup still holds it. A stop signals every rank's group and the ranks' other
 * processes (contain.c) and SIGKILLs the survivors at kill_at; cleaning kills what the
 * ranks left behind, and leaves what will not die to the clean-up process.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_impl.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

static void tail_push(struct dsl_agent_rank *r, const char *line, size_t len)
{
    free(r->tail[r->tail_pos]);
    r->tail[r->tail_pos] = dsl_xstrndup(line, len > 4096 ? 4096 : len);
    r->tail_pos = (r->tail_pos + 1) % DSL_PROTO_MAX_TAIL;
    if (r->ntail < DSL_PROTO_MAX_TAIL)
        r->ntail++;
}

static void emit_line(struct dsl_agent *a, struct dsl_agent_rank *r, int s, const char *p,
                      size_t n, int end)
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
    dsl_agent_send(a, &m);
    dsl_msg_release(&m);
    if (s == 2 && end != DSL_END_CR)
        tail_push(r, p, n);
    if (s == 2)
        dsl_agent_progress_stderr(&a->prog, (int)(r - a->ranks), p, n);
}

/* Split what is buffered for stream s into lines; flush a partial line if final. */
static void split_lines(struct dsl_agent *a, struct dsl_agent_rank *r, int s, int final)
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

void dsl_agent_read_pipe(struct dsl_agent *a, struct dsl_agent_rank *r, int s)
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

static void report_exit(struct dsl_agent *a, struct dsl_agent_rank *r)
{
    struct dsl_msg m;
    if (dsl_agent_progress_exited(&a->prog, (int)(r - a->ranks), &m)) {
        dsl_agent_send(a, &m); /* the rank's final progress, before its exit */
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
    dsl_agent_send(a, &m);
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
void dsl_agent_reap(struct dsl_agent *a)
{
    int found = 0;
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0)
            break;
        for (int i = 0; i < a->nranks; i++) {
            struct dsl_agent_rank *r = &a->ranks[i];
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
            struct dsl_agent_rank *r = &a->ranks[i];
            if (!r->exited || r->reported || (pass == 0) != (r->sig != 0))
                continue;
            /* forward what the rank already wrote, then its exit */
            for (int s = 1; s <= 2; s++)
                if (r->fd[s] >= 0)
                    dsl_agent_read_pipe(a, r, s);
            report_exit(a, r);
        }
}

/* ---- stopping ---- */

/* sig to every live rank's process group and to the ranks' other processes (a stop;
 * a warning goes to the ranks' own processes alone: dsl_agent_warn_ranks) */
void dsl_agent_signal_ranks(struct dsl_agent *a, int sig)
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
void dsl_agent_warn_ranks(struct dsl_agent *a, int sig)
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
void dsl_agent_pass_usr1(struct dsl_agent *a)
{
    if (a->state != AG_RUNNING)
        return; /* stopping anyway: a warning adds nothing */
    int n = 0;
    for (int i = 0; i < a->nranks; i++)
        n += a->ranks[i].pid > 0 && !a->ranks[i].exited;
    dsl_agent_warn_ranks(a, SIGUSR1);
    fprintf(stderr, "dslaunch agent: got SIGUSR1: passed it to this node's %d rank%s\n", n,
            n == 1 ? "" : "s");
}

/*
 * Stop every rank with sig, SIGKILL after grace. A repeat of the signal the stop already
 * sent, with no shorter grace, is dropped: the launcher's going away (EOF, and for a
 * local agent its parent-death SIGTERM) and repeated stop requests must not signal a
 * rank's group again while its handler runs (that would kill the handler's children).
 */
void dsl_agent_begin_stop(struct dsl_agent *a, int sig, double grace)
{
    if (a->state == AG_STOPPING || a->state == AG_CLEANING) {
        if (sig == a->stop_sig && dsl_now() + grace >= a->kill_at)
            return;
        if (dsl_now() + grace < a->kill_at)
            a->kill_at = dsl_now() + grace;
        if (a->state == AG_CLEANING && a->kill_at + CLEAN_PATIENCE < a->give_up_at)
            a->give_up_at = a->kill_at + CLEAN_PATIENCE;
        a->stop_sig = sig;
        dsl_agent_signal_ranks(a, sig);
        return;
    }
    if (a->state == AG_DONE)
        return;
    /* a rank that is already dead died before the stop, whatever killed it: reaped now,
     * before the stop's signal, it is reported so (unstopped), and the launcher can name
     * it rather than a peer that failed because of it (job/job_loop.c) */
    dsl_agent_reap(a);
    a->state = AG_STOPPING;
    a->kill_at = dsl_now() + grace;
    a->stop_sig = sig;
    dsl_agent_signal_ranks(a, sig);
}

/*
 * Every rank has been reported: from now on only what they left behind is killed.
 * After a clean end it gets SIGTERM and the grace; after a stop it already got the
 * stop's signal, and the stop's deadline stands.
 */
void dsl_agent_begin_cleaning(struct dsl_agent *a)
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
void dsl_agent_clean_step(struct dsl_agent *a, double now)
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

int dsl_agent_all_reported(const struct dsl_agent *a)
{
    for (int i = 0; i < a->nranks; i++)
        if (!a->ranks[i].reported)
            return 0;
    return 1;
}
