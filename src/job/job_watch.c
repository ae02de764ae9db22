/*
 * The launcher's watchdog: --job-timeout, hang detection, stacks, then the stop.
 *
 * Theory of operation. job.c's loop calls dsl_job_watch_tick() on every pass (at least
 * five times a second). The watchdog moves job->hang through
 *
 *   WATCH       judge the ranks (hang.c) against the hang timeout, and the clock
 *               against --job-timeout; a verdict (or job_hang.c's cause of a failed
 *               exit) moves on. While the job is silent, probes: a quarter of a
 *               timeout into the silence, a tick before the timeout, at the timeout,
 *               then every half timeout, one at a time, each answered by every
 *               agent or given up after its deadline (the probe timeout + 2 s)
 *   DECLARED    "stacks" goes to every running node agent
 *   COLLECTING  until every agent answered, or the capture deadline (stack timeout +
 *               the Python dump wait + a margin), or a signal stopped the job
 *   DONE        the report is written and the job stopped: SIGTERM, SIGKILL after
 *               --term-timeout, as for any failure
 *
 * While the job stops for another reason (a failed rank, a signal) nothing is judged.
 * A rank without progress (a program that does not report) is never judged unless
 * --hang-timeout was given; when such a rank, or one that still advances, outlives a
 * rank that exited 0 by the hang timeout, the watchdog says so once and lets it run.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/log.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "job_hang.h"
#include "job_impl.h"
#include "dslaunch/common/banned.h"

#define PYDUMP_MARGIN 8.0 /* a Python rank's dump wait, and the messages' way back */

/* Ranks still running the hang timeout after a rank exited 0, but not judged stuck
 * (they report no progress, or they still advance): say so, once, and let them run. */
static void warn_outlived(struct dsl_job *job, double now)
{
    struct dsl_job_hang *h = job->hang;
    if (h->warned_finished || h->off)
        return;
    int done = -1, alive = -1, nalive = 0;
    for (int i = 0; i < job->nranks; i++) {
        const struct dsl_hang_rank *v = &h->view[i];
        if (v->life == DSL_HANG_EXITED && !v->sig && v->code == 0 &&
            (done < 0 || v->t_exit < h->view[done].t_exit))
            done = i;
        if (v->life == DSL_HANG_RUNNING) {
            alive = alive < 0 ? i : alive;
            nalive++;
        }
    }
    if (done < 0 || alive < 0 || now - h->t0 - h->view[done].t_exit < h->timeout)
        return;
    if (h->view[alive].armed) /* the judge watches it */
        return;
    h->warned_finished = 1;
    dsl_warn("rank %d exited 0 at %.1f s; rank %d%s still running at %.1f s (%s, so it is "
             "left running)",
             h->view[done].rank, h->view[done].t_exit, h->view[alive].rank,
             nalive > 1 ? " and others" : "", now - h->t0,
             "it reports no progress; --hang-timeout would stop it");
}

static void ask_probe(struct dsl_job *job)
{
    struct dsl_job_hang *h = job->hang;
    double now = dsl_now();
    if (!h->probe_asked)
        h->probe_asked = dsl_xcalloc((size_t)job->nnodes + 1, 1);
    struct dsl_msg m;
    dsl_msg_init(&m, DSL_MSG_STACKS);
    m.stack_timeout = DSL_HANG_PROBE_TIMEOUT;
    m.stack_probe = 1;
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        h->probe_asked[i] = 0;
        int knows = 0;
        for (int k = 0; k < job->nranks && !knows; k++)
            knows = job->ranks[k].node == i && h->r[k].probes;
        if (n->state != DSL_NODE_RUNNING || !knows)
            continue;
        dsl_job_node_send(n, &m);
        dsl_job_node_flush(n);
        h->probe_asked[i] = 1;
    }
    dsl_msg_release(&m);
    h->probing = 1;
    h->probe_spell = h->spell;
    h->t_probe_ask = now;
    h->probe_deadline = now + DSL_HANG_PROBE_TIMEOUT + 2;
    dsl_job_hang_probe_check(job, now);
}

/*
 * Probes in a quiet spell (no progress anywhere): a quarter of a timeout in, a tick
 * before the timeout (so that its answer is back when the timeout is up), at the
 * timeout (a rank that computes while the others wait is named only after they
 * waited three quarters of it), then every half a timeout. Only where the job as a
 * whole can be judged: every rank is armed.
 */
static void probe_when_due(struct dsl_job *job, double now)
{
    struct dsl_job_hang *h = job->hang;
    dsl_job_hang_probe_check(job, now);
    if (h->probing)
        return;
    for (int i = 0; i < job->nranks; i++)
        if (job->ranks[i].started && !job->ranks[i].exited && !h->view[i].armed)
            return;
    double quiet = now - h->t_quiet, T = h->timeout;
    int due = h->nprobes == 0   ? quiet >= T / 4
              : h->nprobes == 1 ? quiet >= T - h->tick
              : h->nprobes == 2 ? quiet >= T
                                : now - h->t_probe_last >= T / 2 - 1e-3;
    if (due)
        ask_probe(job);
}

static void watch(struct dsl_job *job, double now)
{
    struct dsl_job_hang *h = job->hang;
    double t = now - h->t0;
    if (job->opts->job_timeout > 0 && t >= job->opts->job_timeout) {
        dsl_job_hang_look(job);
        h->verdict.nstuck = 0;
        h->verdict.first = -1;
        snprintf(h->verdict.text, sizeof(h->verdict.text),
                 "the job ran for %.1f s, past --job-timeout %.0f s", t,
                 job->opts->job_timeout);
        dsl_job_hang_declare(job, DSL_EXIT_JOB_TIMEOUT);
        dsl_warn("%s; collecting stacks, then stopping the job", h->verdict.text);
        return;
    }
    if (h->off)
        return;
    dsl_job_hang_look(job);
    /* waiting for a rank that saves a checkpoint is progress (hang.c) */
    unsigned char *excused = dsl_xcalloc((size_t)job->nranks + 1, 1);
    if (dsl_hang_excuse(h->view, job->nranks, t, h->timeout, excused))
        for (int i = 0; i < job->nranks; i++)
            if (excused[i]) {
                h->r[i].t_advance = now;
                h->view[i].t_advance = t;
            }
    free(excused);
    if (dsl_hang_judge(h->view, job->nranks, t, h->timeout, &h->jobv, &h->verdict)) {
        dsl_job_hang_declare(job, DSL_EXIT_HANG);
        dsl_warn("hang after %.1f s: %s; collecting stacks, then stopping the job", t,
                 h->verdict.text);
        return;
    }
    warn_outlived(job, now);
    probe_when_due(job, now);
}

/* Node i's agent has sent progress, so it knows the stacks request (proto.h). */
static int knows_stacks(const struct dsl_job *job, int i)
{
    for (int k = 0; k < job->nranks; k++)
        if (job->ranks[k].node == i && job->hang->r[k].heard)
            return 1;
    return 0;
}

static void ask_stacks(struct dsl_job *job, double now)
{
    struct dsl_job_hang *h = job->hang;
    free(h->answered);
    h->answered = dsl_xcalloc((size_t)job->nnodes + 1, 1);
    struct dsl_msg m;
    dsl_msg_init(&m, DSL_MSG_STACKS);
    m.stack_timeout = DSL_HANG_STACK_TIMEOUT;
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        if (n->state != DSL_NODE_RUNNING || !knows_stacks(job, i)) {
            h->answered[i] = 1;
            continue;
        }
        dsl_job_node_send(n, &m);
        dsl_job_node_flush(n);
    }
    dsl_msg_release(&m);
    h->collect_deadline = now + DSL_HANG_STACK_TIMEOUT + PYDUMP_MARGIN;
    h->state = DSL_HANG_COLLECTING;
}

static int collected(struct dsl_job *job)
{
    for (int i = 0; i < job->nnodes; i++)
        if (!job->hang->answered[i] && job->nodes[i].state == DSL_NODE_RUNNING)
            return 0;
    return 1;
}

void dsl_job_watch_tick(struct dsl_job *job)
{
    struct dsl_job_hang *h = job->hang;
    if (!h)
        return;
    double now = dsl_now();
    if (h->state == DSL_HANG_WATCH && !job->stopping)
        watch(job, now);
    if (h->state == DSL_HANG_DECLARED)
        ask_stacks(job, now);
    if (h->state == DSL_HANG_COLLECTING &&
        (collected(job) || now >= h->collect_deadline || job->stopping)) {
        dsl_job_hang_report(job);
        h->state = DSL_HANG_DONE;
        if (!job->stopping)
            dsl_job_stop(job, SIGTERM, job->opts->term_timeout);
    }
}
