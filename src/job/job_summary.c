/*
 * The end of a job in words: what stopped it (the failed rank with its cause and the
 * tail of its stderr, a lost node, a stop the user asked for, a hang verdict), which
 * ranks wrote an error line the console showed once, and --log-dir files that are not
 * whole. Runs once, after the byes, on the launcher's thread.
 */
#include <signal.h>
#include <stdio.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/job/job.h"
#include "dslaunch/proto/cause.h"
#include "errfold.h"
#include "job_hang.h"
#include "job_impl.h"
#include "dslaunch/common/banned.h"

/*
 * The summary of a stop the user asked for: not an error, whatever the ranks did on the
 * way down, so one calm line (debug level when the reader of the output went away, as a
 * shell says nothing when `| head` ends a pipeline), and a warning per node lost.
 */
static void print_stop(struct dsl_job *job)
{
    int stopped = 0, killed = 0, unconfirmed = 0;
    for (int i = 0; i < job->nranks; i++) {
        struct dsl_job_rank *r = &job->ranks[i];
        if (!r->started || (r->exited && !r->exited_in_stop))
            continue;
        if (!r->exited)
            unconfirmed++;
        else if (r->sig == SIGKILL)
            killed++;
        else
            stopped++;
    }
    char why[64], grace[64], left[64] = "";
    if (job->stop_requested == SIGPIPE)
        snprintf(why, sizeof(why), "stopped: the reader of the output went away");
    else
        snprintf(why, sizeof(why), "stopped by %s", dsl_signame(job->stop_requested));
    if (job->killed_now)
        snprintf(grace, sizeof(grace), "at the second interrupt");
    else
        snprintf(grace, sizeof(grace), "after the %g s grace", job->opts->term_timeout);
    if (unconfirmed)
        snprintf(left, sizeof(left), ", %d not confirmed by %s node", unconfirmed,
                 unconfirmed == 1 ? "its" : "their");
    if (job->stop_requested == SIGPIPE)
        dsl_debug("%s; %d rank%s stopped, %d killed %s%s", why, stopped, stopped == 1 ? "" : "s",
                  killed, grace, left);
    else
        dsl_info("%s; %d rank%s stopped, %d killed %s%s", why, stopped, stopped == 1 ? "" : "s",
                 killed, grace, left);
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        if (n->state == DSL_NODE_FAILED && n->err[0])
            dsl_warn("node %d (%s) was lost while stopping: %s", i, n->pn->host, n->err);
    }
}

/*
 * Whether the console shows every stderr line the rank wrote right above the summary:
 * it wrote no more than its tail holds, nothing was dropped, and no more lines came
 * after its last one than the other ranks have (each saying the same, as ranks that
 * read one bad config do). Then the summary does not print them a second time. A line
 * with control characters is quoted all the same: streamed as written, a terminal may
 * have run its escape sequences instead of showing them, and the quote shows them
 * escaped.
 */
static int tail_just_shown(const struct dsl_job *job, const struct dsl_job_rank *r)
{
    if (!job->out || job->opts->verbose < 1 || r->err_lines != r->tail.nr)
        return 0;
    for (size_t i = 0; i < r->tail.nr; i++)
        for (const char *c = r->tail.v[i]; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                return 0;
    for (int i = 0; i < job->out->ndest; i++)
        if (job->out->dest[i].dropped || job->out->dest[i].broken)
            return 0;
    return job->console_lines - r->err_seq < (unsigned long)job->nranks;
}

/* Which ranks wrote an error line the console showed once (errfold.h). */
static void report_folds(const struct dsl_job *job)
{
    if (!job->fold)
        return;
    struct dsl_strvec lines;
    dsl_strvec_init(&lines);
    dsl_errfold_report(job->fold, &lines);
    for (size_t i = 0; i < lines.nr; i++)
        dsl_info("%s", lines.v[i]);
    dsl_strvec_release(&lines);
}

static void print_summary(struct dsl_job *job)
{
    if (dsl_job_hang_summary(job))
        return; /* a hang or --job-timeout: the verdict names the cause */
    if (job->failed_rank >= 0) {
        struct dsl_job_rank *r = &job->ranks[job->failed_rank];
        const char *host = job->pl->nodes[r->node].host;
        char why[512];
        dsl_cause_describe(&r->cause, r->sig, why, sizeof(why));
        if (r->sig)
            dsl_error("rank %d (host %s, pid %d) was killed by %s after %.1f s%s", r->rank, host,
                      r->pid, r->cause.oom == DSL_OOM_RANK ? "the OOM killer" : dsl_signame(r->sig),
                      r->wall, why);
        else if (!r->started)
            dsl_error("rank %d (host %s) could not be started", r->rank, host);
        else if (job->warned && r->code == 128 + SIGUSR1)
            dsl_info("rank %d (host %s, pid %d) exited with code %d after %.1f s, as a rank "
                     "does that saved on Slurm's warning (SIGUSR1, passed on by dslaunch)",
                     r->rank, host, r->pid, r->code, r->wall);
        else
            dsl_error("rank %d (host %s, pid %d) exited with code %d after %.1f s%s", r->rank,
                      host, r->pid, r->code, r->wall, why);
        if (r->tail.nr && !tail_just_shown(job, r)) {
            dsl_job_eprintf(job, "  last lines of rank %d's stderr:\n", r->rank);
            for (size_t i = 0; i < r->tail.nr; i++)
                dsl_job_eprintf(job, "  | %s\n", r->tail.v[i]);
        }
    } else if (job->failed_node >= 0) {
        struct dsl_job_node *n = &job->nodes[job->failed_node];
        dsl_error("node %d (%s) lost: %s", job->failed_node, n->pn->host, n->err);
    } else if (job->paused_for > 0 && !job->stop_requested) {
        dsl_error("dslaunch itself did not run for %.1f s (stopped by SIGSTOP or ^Z, or "
                  "suspended), past --keepalive %g s: the node agents lost it and stopped "
                  "the ranks", job->paused_for, job->opts->tr.keepalive);
    } else if (job->stop_requested) {
        print_stop(job);
        return;
    }
    if (job->failed_rank >= 0 || job->failed_node >= 0 || job->exit_code) {
        /* the ranks the stop ended; not those that had finished before it, nor those
         * whose node was lost (they went with it, or dslaunch cannot know) */
        int stopped = 0, killed = 0, lost = 0, done = 0;
        for (int i = 0; i < job->nranks; i++) {
            struct dsl_job_rank *r = &job->ranks[i];
            if (i == job->failed_rank || !r->started)
                continue;
            if (r->exited && !r->exited_in_stop) {
                done++;
            } else if (!r->exited) {
                lost++;
            } else {
                stopped++;
                killed += r->sig == SIGKILL;
            }
        }
        char extra[160] = "";
        int k = 0;
        if (killed)
            k += snprintf(extra + k, sizeof(extra) - (size_t)k,
                          " (%d needed SIGKILL after the grace period)", killed);
        if (done)
            k += snprintf(extra + k, sizeof(extra) - (size_t)k, "; %d had finished before",
                          done);
        if (lost)
            snprintf(extra + k, sizeof(extra) - (size_t)k,
                     "; %d on lost node(s), never confirmed", lost);
        if (stopped)
            dsl_info("stopped %d other rank(s)%s", stopped, extra);
        else if (done || lost)
            dsl_info("no other rank was running%s", extra);
    }
}

/*
 * A --log-dir file that could not be written (a full disk, an I/O error) was reported
 * when it happened; the end says it again with what each log misses. A job whose ranks
 * all succeeded exits DSL_EXIT_LOGS, so a script that keeps the logs learns they are
 * not whole; a failed job keeps the exit code of its failure.
 */
static void lost_logs_summary(struct dsl_job *job)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1u << 16);
    int n = 0;
    for (int i = 0; i < job->nranks; i++)
        if (job->ranks[i].log_lost)
            dsl_dynbuf_addf(&b, "%srank %d lost %llu bytes ('%s')", n++ ? ", " : "",
                            job->ranks[i].rank, job->ranks[i].log_lost,
                            job->ranks[i].log_path ? job->ranks[i].log_path : "?");
    if (n && job->exit_code == 0) {
        dsl_error("every rank exited 0, but the --log-dir files are incomplete: %s; the "
                  "console had every line",
                  dsl_dynbuf_str(&b));
        job->exit_code = DSL_EXIT_LOGS;
    } else if (n) {
        dsl_warn("the --log-dir files are incomplete: %s", dsl_dynbuf_str(&b));
    }
    dsl_dynbuf_release(&b);
}

void dsl_job_summary(struct dsl_job *job)
{
    report_folds(job);
    print_summary(job);
    lost_logs_summary(job);
}
