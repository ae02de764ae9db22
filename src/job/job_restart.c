/*
 * Restarts: the job run again after a failure (--max-restarts), with the launcher's
 * whole teardown between attempts.
 *
 * Theory of operation. One attempt is one dsl_job_run() of the plan: connect,
 * preflight, start, supervise, summary, and the teardown that closes every channel (an
 * agent that loses its channel kills its ranks; the local transport waits for its
 * agents to exit). So when dsl_job_run() returns, nothing of the attempt runs on a node
 * that answered to the end. An attempt that ended with a non-zero code is run again
 * when all of these hold:
 *   - no signal to dslaunch (SIGINT, SIGTERM, SIGHUP) stopped it: that is the user's
 *     stop, never undone;
 *   - the first attempt got as far as starting the ranks: a usage, connect or preflight
 *     failure of the first attempt would only repeat. A later attempt is run again
 *     whatever failed (a node still rebooting fails its connect);
 *   - restarts are left: --max-restarts N allows N + 1 attempts;
 *   - with --exclude-failed-nodes, at least --min-nodes nodes remain without the failed
 *     ones.
 * The failed nodes of an attempt are the node of the rank its summary names as the
 * cause, and every node that was lost, unreachable, or whose agent died. Ranks that
 * failed after the cause (a collective that lost its peer) do not make their nodes
 * failed. Without --exclude-failed-nodes every attempt runs on the same nodes.
 *
 * Between attempts the plan is made anew (dsl_plan_restart()): the placement without
 * the excluded nodes, renumbered in hostfile order (so WORLD_SIZE shrinks), the
 * rendezvous chosen again (the local master port check of an all-local job, else the
 * next preflight's probe of node 0, which may be another host now), and a fresh
 * DSLAUNCH_RUN_ID and token. The rendezvous store and the teardown are scoped by the
 * run id, so nothing an old attempt left behind (a rank on a lost node that its agent
 * has not killed yet) can join or disturb the new one. A lost node that stays in the
 * job is given --keepalive + 3 s first: the time its agent, hearing nothing, takes to
 * kill what it ran.
 *
 * Signals. dsl_job_run() restores the default dispositions when it returns; from then
 * until the next attempt a handler of this file records SIGINT/SIGTERM/SIGHUP (and cuts
 * a wait short). Just before the next attempt the job's own handler is put back
 * (without a self-pipe: it only remembers the signal, and the attempt's first loop
 * pass acts on it); a signal recorded before that ends the restarts with 128 + signal.
 * So a Ctrl-C is never lost and never followed by another attempt.
 *
 * Each attempt's ranks get DSLAUNCH_RESTART_COUNT and TORCHELASTIC_RESTART_COUNT, the
 * attempt's index (0 for the first, job.c writes them). Every failed attempt is
 * reported as it ends ("attempt 1: rank 3 on node2 exited 1 at 42.0 s; restarting (1
 * of 2)"), and when there was more than one attempt the list of all of them closes
 * the run. The exit code is the last attempt's.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dslaunch/common/log.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/job/job.h"
#include "dslaunch/job/restart.h"
#include "job_hang.h"
#include "job_impl.h"
#include "dslaunch/common/banned.h"

/* What one attempt came to, for the list at the end. */
struct attempt {
    int code;
    double at;                 /* seconds into the attempt when it stopped or ended */
    char cause[DSL_ERR_LEN];   /* "rank 3 on node2 exited 1", "every rank exited 0" */
    char next[256];            /* what followed: "restarting (1 of 2)", ... */
};

static volatile sig_atomic_t between_sig;

static void on_between(int sig)
{
    between_sig = sig;
}

/* Sleeps s seconds, or less when a signal comes between attempts; says so then, so
   that a user who stopped the wait sees it was cut short. */
static void nap(double s)
{
    double start = dsl_now(), end = start + s;
    while (!between_sig) {
        double left = end - dsl_now();
        if (left <= 0)
            return;
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        nanosleep(&ts, NULL);
    }
    dsl_info("the wait was cut short by %s after %.1f of %.0f s", dsl_signame(between_sig),
             dsl_now() - start, s);
}

/* The cause of an attempt's end, in words; code: what the attempt exited with (a job
   that ended before its start, a refused log file for one, has no job->exit_code). */
static void describe(const struct dsl_job *job, int code, char *buf, size_t n)
{
    /* the user's stop came first when no failure preceded it: the ranks it killed are
     * its effect, not the cause */
    if (job->user_sig && job->failed_node < 0 &&
        (job->failed_rank < 0 || job->t_first_fail > job->t_stop)) {
        snprintf(buf, n, "stopped by %s", dsl_signame(job->user_sig));
    } else if (dsl_job_hang_verdict(job)) { /* it names the stuck rank, not the stopped one */
        snprintf(buf, n, "%s", dsl_job_hang_verdict(job));
    } else if (job->failed_rank >= 0) {
        const struct dsl_job_rank *r = &job->ranks[job->failed_rank];
        const char *host = job->pl->nodes[r->node].host;
        if (r->sig)
            snprintf(buf, n, "rank %d on %s was killed by %s", r->rank, host,
                     dsl_signame(r->sig));
        else if (!r->started)
            snprintf(buf, n, "rank %d on %s could not be started", r->rank, host);
        else
            snprintf(buf, n, "rank %d on %s exited %d", r->rank, host, r->code);
    } else if (job->failed_node >= 0) {
        const struct dsl_job_node *nd = &job->nodes[job->failed_node];
        snprintf(buf, n, "node %s lost: %.300s", nd->pn->host, nd->err);
    } else if (code == 0 && job->started) {
        snprintf(buf, n, "every rank exited 0");
    } else if (!job->started) {
        snprintf(buf, n, "the ranks were not started (exit %d)", code);
    } else {
        snprintf(buf, n, "exit %d", code);
    }
}

/* Flag the attempt's failed nodes in drop (job->nnodes entries); returns how many. */
static int failed_nodes(const struct dsl_job *job, unsigned char *drop)
{
    int k = 0;
    for (int i = 0; i < job->nnodes; i++)
        drop[i] = job->nodes[i].state == DSL_NODE_FAILED;
    if (job->failed_rank >= 0)
        drop[job->ranks[job->failed_rank].node] = 1;
    if (job->failed_node >= 0)
        drop[job->failed_node] = 1;
    for (int i = 0; i < job->nnodes; i++)
        k += drop[i];
    return k;
}

/* "node2, node3" of the flagged nodes, for a message. */
static void name_nodes(const struct dsl_job *job, const unsigned char *drop, char *buf,
                       size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < job->nnodes && len + 1 < n; i++)
        if (drop[i])
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? ", " : "",
                                    job->nodes[i].pn->host);
}

/*
 * After an attempt that failed: decide whether another one runs (1) or not (0), fill
 * a->next with what follows, and drop with the nodes to leave out (all zero unless
 * --exclude-failed-nodes). *lost_kept: a remote node that went silent stays in.
 */
static int decide(const struct dsl_job *job, int k, struct attempt *a, unsigned char *drop,
                  int *lost_kept)
{
    const struct dsl_launch_opts *o = job->opts;
    int max = o->max_restarts;
    char names[512];
    *lost_kept = 0;
    if (job->user_sig) {
        if (strncmp(a->cause, "stopped by ", 11) == 0)
            snprintf(a->next, sizeof(a->next), "not restarting");
        else
            snprintf(a->next, sizeof(a->next), "not restarting: stopped by %s",
                     dsl_signame(job->user_sig));
        return 0;
    }
    if (job->warned) {
        /* Slurm's warning: the allocation ends soon, and a rank that saved on it exits
           128 + SIGUSR1 for the batch script to requeue; a restart would spend the time
           left and end in the time limit's kill instead */
        snprintf(a->next, sizeof(a->next), "not restarting: the ranks had Slurm's warning "
                 "(SIGUSR1)");
        return 0;
    }
    if (job->exit_code == DSL_EXIT_LOGS) { /* the ranks succeeded; a rerun fixes no disk */
        snprintf(a->next, sizeof(a->next), "not restarting: every rank exited 0, only the "
                 "--log-dir files are incomplete");
        return 0;
    }
    if (k == 0 && !job->started) {
        snprintf(a->next, sizeof(a->next), "not restarting: the job could not start");
        return 0;
    }
    if (k >= max) {
        snprintf(a->next, sizeof(a->next), "no restarts left (%d of %d used)", k, max);
        return 0;
    }
    int nfailed = failed_nodes(job, drop);
    name_nodes(job, drop, names, sizeof(names));
    if (!o->exclude_failed_nodes) {
        for (int i = 0; i < job->nnodes; i++)
            if (drop[i] && job->nodes[i].state == DSL_NODE_FAILED && !job->nodes[i].local)
                *lost_kept = 1;
        for (int i = 0; i < job->nnodes; i++)
            drop[i] = 0;
        snprintf(a->next, sizeof(a->next), "restarting (%d of %d)", k + 1, max);
        return 1;
    }
    int left = job->nnodes - nfailed;
    if (left < o->min_nodes) {
        snprintf(a->next, sizeof(a->next),
                 "not restarting: without %s %d node%s would be left, fewer than "
                 "--min-nodes %d",
                 names, left, left == 1 ? "" : "s", o->min_nodes);
        return 0;
    }
    if (nfailed)
        snprintf(a->next, sizeof(a->next), "restarting (%d of %d) without %s", k + 1, max,
                 names);
    else
        snprintf(a->next, sizeof(a->next), "restarting (%d of %d)", k + 1, max);
    return 1;
}

static void print_attempts(const struct attempt *att, int n)
{
    if (dsl_log_level() < 1)
        return;
    dsl_info("%d attempt%s:", n, n == 1 ? "" : "s");
    for (int i = 0; i < n; i++) {
        const struct attempt *a = &att[i];
        fprintf(stderr, "  attempt %d: %s %s %.1f s%s%s\n", i + 1, a->cause,
                a->code == 0 ? "after" : "at", a->at, a->next[0] ? "; " : "", a->next);
    }
}

int dsl_restart_run(struct dsl_plan *p)
{
    const struct dsl_launch_opts *o = p->opts;
    int restartable = o->mode == DSL_MODE_RUN && o->max_restarts > 0;
    struct attempt *att = NULL;
    int natt = 0, code = 0, cancelled = 0;
    char err[DSL_ERR_LEN];

    between_sig = 0;
    for (int k = 0;; k++) {
        struct dsl_job job;
        if (k > 0) {
            /* the job's handler from now on: a signal is acted on by the attempt */
            dsl_job_signals_catch(-1);
            if (between_sig) {
                dsl_info("got %s between attempts: not restarting",
                         dsl_signame(between_sig));
                snprintf(att[natt - 1].next, sizeof(att[natt - 1].next),
                         "not restarting: got %s", dsl_signame(between_sig));
                code = 128 + between_sig;
                cancelled = 1;
                break;
            }
            dsl_info("attempt %d: %d node%s, %d rank%s, run id %s", k + 1, p->pl.nr,
                     p->pl.nr == 1 ? "" : "s", p->pl.world_size,
                     p->pl.world_size == 1 ? "" : "s", p->run_id);
        }
        dsl_job_init(&job, p);
        job.restart_count = k;
        code = dsl_job_run(&job);
        if (!restartable) {
            dsl_job_release(&job);
            break;
        }
        dsl_signals_set(on_between, 0, DSL_STOP_SIGNALS);

        att = dsl_xreallocarray(att, (size_t)natt + 1, sizeof(*att));
        struct attempt *a = &att[natt++];
        memset(a, 0, sizeof(*a));
        a->code = code;
        a->at = (job.stopping ? job.t_stop : dsl_now()) - job.t_begin;
        describe(&job, code, a->cause, sizeof(a->cause));
        if (code == 0) {
            dsl_job_release(&job);
            break;
        }
        unsigned char *drop = dsl_xcalloc((size_t)(job.nnodes > 0 ? job.nnodes : 1), 1);
        int lost_kept = 0, again = decide(&job, k, a, drop, &lost_kept);
        if (job.started || k > 0) /* else the job has said why it could not start */
            dsl_info("attempt %d: %s at %.1f s; %s", k + 1, a->cause, a->at, a->next);
        dsl_job_release(&job);
        if (!again) {
            free(drop);
            break;
        }
        if (lost_kept) {
            double w = o->tr.keepalive + 3.0;
            dsl_info("waiting %.0f s for the agents of the lost nodes to stop what they ran",
                     w);
            nap(w);
        }
        dsl_plan_restart(p, drop);
        free(drop);
        if (dsl_plan_new_ids(p, err) < 0 ||
            (p->all_local && dsl_plan_check_local_port(p, o->verbose < 1, err) < 0)) {
            dsl_error("%s", err);
            snprintf(att[natt - 1].next, sizeof(att[natt - 1].next),
                     "not restarting: %.200s", err);
            code = DSL_EXIT_USAGE;
            cancelled = 1;
            break;
        }
    }
    if (restartable)
        dsl_job_signals_restore();
    if (natt > 1 || cancelled)
        print_attempts(att, natt);
    free(att);
    return code;
}
