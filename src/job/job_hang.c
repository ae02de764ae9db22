/*
 * The launcher's record of the ranks' progress, the verdict when there is one, and
 * the hang report.
 *
 * Theory of operation. Everything runs on the launcher's one thread. job_loop.c hands
 * over what the agents send: progress messages (a rank's file changed: that is an
 * advance, timed by the launcher's clock on arrival, so no node's clock matters; its
 * process state and busyness), output lines (an advance of the job; of the rank too
 * when its file never changed), exits, and the stacks. The watchdog (job_watch.c)
 * judges from the same record.
 *
 * The job as a whole. Every file change or output line starts a new quiet spell
 * (t_quiet, spell). Within a spell the watchdog asks the agents for probes (native
 * stacks, the ranks left running), and their answers are kept per rank with the
 * spell they belong to: inside a collective (hang_stack.c) since which probe, and
 * whether the rank was busy since. An answer from an earlier spell, or one that
 * arrives after a verdict, is dropped; a rank whose agent does not know probes (it
 * never sent busy) or did not answer is unknown. dsl_job_hang_look turns this into
 * the judge's evidence: a rank waits when every probe of the spell found it inside,
 * idle, the first half a timeout before the last. Arming: with --hang-timeout N
 * every rank is judged by N; without it only ranks that have reported progress are,
 * by DSL_HANG_DEFAULT (dstrain always reports); --hang-timeout 0 turns it all off and
 * the agents make no progress files.
 *
 * A verdict is final: from then on exits do not count as failures of their own (a
 * rank that times out in its collective, or a Python rank dying of the SIGABRT that
 * made it dump its stack, is a consequence), and the summary is the verdict's. A
 * verdict comes from the judge (a hang, --job-timeout) or from the first error exit,
 * when the rank that exited was waiting in a collective a stuck peer never entered
 * (hang.c's dsl_hang_cause): then the peer is named, not the rank that reported first.
 *
 * The report goes to --log-dir, or the working directory: dslaunch-hang-<run id>.txt
 * for people and .json for programs, with every rank's state, progress and stack.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/xalloc.h"
#include "job_hang.h"
#include "dslaunch/common/banned.h"

void dsl_job_hang_init(struct dsl_job *job)
{
    struct dsl_job_hang *h = dsl_xcalloc(1, sizeof(*h));
    double t = job->opts->hang_timeout;
    h->off = t == 0;
    h->given = t > 0;
    h->timeout = t > 0 ? t : DSL_HANG_DEFAULT;
    if (!h->off || job->opts->job_timeout > 0) {
        double q = h->timeout / 4;
        h->tick = q < 0.2 ? 0.2 : q > 1.0 ? 1.0 : q;
    }
    h->r = dsl_xcalloc((size_t)job->nranks + 1, sizeof(*h->r));
    h->view = dsl_xcalloc((size_t)job->nranks + 1, sizeof(*h->view));
    h->verdict.stuck = dsl_xcalloc((size_t)job->nranks + 1, sizeof(int));
    h->verdict.first = -1;
    h->t0 = dsl_now();
    h->t_quiet = h->t0;
    for (int i = 0; i < job->nranks; i++)
        h->r[i].t_advance = h->t0;
    job->hang = h;
}

void dsl_job_hang_release(struct dsl_job *job)
{
    struct dsl_job_hang *h = job->hang;
    if (!h)
        return;
    for (int i = 0; i < job->nranks; i++) {
        free(h->r[i].stack_tool);
        free(h->r[i].stack);
    }
    free(h->r);
    free(h->view);
    free(h->verdict.stuck);
    free(h->answered);
    free(h->probe_asked);
    free(h->report_txt);
    free(h->report_json);
    free(h);
    job->hang = NULL;
}

void dsl_job_hang_start_msg(struct dsl_job *job, struct dsl_msg *m)
{
    struct dsl_job_hang *h = job->hang;
    if (!h)
        return;
    h->t0 = dsl_now(); /* the ranks start now: no progress is due before */
    h->t_quiet = h->t0;
    for (int i = 0; i < job->nranks; i++)
        h->r[i].t_advance = h->t0;
    m->progress_tick = h->tick;
    /* Python ranks dump their stacks on the SIGABRT a capture sends (agent_progress.c) */
    if (!h->off && !dsl_env_get(&job->plan->exported, DSL_ENV_PYTHONFAULTHANDLER) &&
        !getenv(DSL_ENV_PYTHONFAULTHANDLER))
        dsl_strvec_push(&m->env, DSL_ENV_PYTHONFAULTHANDLER "=1");
}

static struct dsl_job_hang_rank *rank_of(struct dsl_job *job, struct dsl_job_node *n, int rank)
{
    if (rank < 0 || rank >= job->nranks || job->ranks[rank].node != (int)(n - job->nodes))
        return NULL;
    return &job->hang->r[rank];
}

/* Progress somewhere: a new quiet spell begins, and what the probes found is stale. */
static void progress_seen(struct dsl_job_hang *h, double now)
{
    h->t_quiet = now;
    h->lively = 1;
    h->spell++;
    h->nprobes = 0;
}

/* A probe's answer from node n: what each rank's native stack shows. */
static void on_probe(struct dsl_job *job, struct dsl_job_node *n, const struct dsl_msg *m)
{
    struct dsl_job_hang *h = job->hang;
    size_t k = (size_t)(n - job->nodes);
    if (!h->probing || !h->probe_asked || !h->probe_asked[k])
        return;
    h->probe_asked[k] = 0;
    if (h->probe_spell != h->spell)
        return; /* progress came meanwhile: the answer is of an earlier spell */
    for (int i = 0; i < m->nstacks; i++) {
        struct dsl_job_hang_rank *r = rank_of(job, n, m->stacks[i].rank);
        if (!r)
            continue;
        const char *what;
        enum dsl_hang_wait w = dsl_hang_stack_wait(m->stacks[i].text, &what);
        /* the wait counts from the first probe that found it there, idle since: a
           rank seen busy meanwhile (not spinning in NCCL) moved, and starts again */
        int moved = !dsl_hang_wait_spins(what) &&
                    (r->busy || r->t_busy > r->t_wait + 2 * h->tick);
        if (w == DSL_HANG_WAIT_IN &&
            (r->wait_spell != h->spell || r->wait != DSL_HANG_WAIT_IN || moved))
            r->t_wait = h->t_probe_ask;
        r->wait_spell = h->spell;
        r->wait = w;
        r->wait_what = what;
    }
}

void dsl_job_hang_probe_check(struct dsl_job *job, double now)
{
    struct dsl_job_hang *h = job->hang;
    if (!h->probing)
        return;
    int waiting = 0;
    for (int i = 0; i < job->nnodes; i++)
        waiting += h->probe_asked[i] && job->nodes[i].state == DSL_NODE_RUNNING;
    if (waiting && now < h->probe_deadline)
        return;
    h->probing = 0;
    if (h->probe_spell != h->spell)
        return;
    /* ranks whose node did not answer are unknown */
    for (int i = 0; i < job->nranks; i++)
        if (h->probe_asked[job->ranks[i].node])
            h->r[i].wait_spell = 0, h->r[i].wait = DSL_HANG_WAIT_UNKNOWN;
    memset(h->probe_asked, 0, (size_t)job->nnodes);
    h->nprobes++;
    h->t_probe_last = h->t_probe_ask;
}

void dsl_job_hang_on_msg(struct dsl_job *job, struct dsl_job_node *n, const struct dsl_msg *m)
{
    struct dsl_job_hang *h = job->hang;
    if (!h)
        return;
    double now = dsl_now();
    if (m->type == DSL_MSG_PROGRESS) {
        for (int i = 0; i < m->nprogress; i++) {
            const struct dsl_rank_progress *p = &m->progress[i];
            struct dsl_job_hang_rank *r = rank_of(job, n, p->rank);
            if (!r)
                continue;
            r->heard = 1;
            if (p->advanced) {
                r->t_advance = now;
                r->reports = 1;
                r->v = p->view;
                progress_seen(h, now);
            }
            r->pstate = p->pstate;
            if (p->busy > 0 || r->busy) /* busy from now, or until now */
                r->t_busy = now;
            r->busy = p->busy > 0;
            r->probes |= p->busy >= 0;
        }
    } else if (m->type == DSL_MSG_STACKED && m->stack_probe) {
        on_probe(job, n, m);
        dsl_job_hang_probe_check(job, now);
    } else if (m->type == DSL_MSG_STACKED) {
        for (int i = 0; i < m->nstacks; i++) {
            struct dsl_job_hang_rank *r = rank_of(job, n, m->stacks[i].rank);
            if (!r)
                continue;
            free(r->stack_tool);
            free(r->stack);
            r->stack_tool = dsl_xstrdup(m->stacks[i].tool);
            r->stack = dsl_xstrdup(m->stacks[i].text);
        }
        if (h->answered)
            h->answered[n - job->nodes] = 1;
    }
}

void dsl_job_hang_on_output(struct dsl_job *job, const struct dsl_job_rank *r)
{
    struct dsl_job_hang *h = job->hang;
    if (!h)
        return;
    double now = dsl_now();
    if (!h->r[r->rank].reports)
        h->r[r->rank].t_advance = now;
    progress_seen(h, now);
}

void dsl_job_hang_look(struct dsl_job *job)
{
    struct dsl_job_hang *h = job->hang;
    int unconfirmed = 0;
    for (int i = 0; i < job->nranks; i++) {
        const struct dsl_job_rank *jr = &job->ranks[i];
        const struct dsl_job_hang_rank *r = &h->r[i];
        struct dsl_hang_rank *v = &h->view[i];
        memset(v, 0, sizeof(*v));
        v->rank = jr->rank;
        v->host = job->pl->nodes[jr->node].host;
        v->pid = jr->pid;
        v->life = jr->exited ? DSL_HANG_EXITED : jr->started ? DSL_HANG_RUNNING : DSL_HANG_PENDING;
        v->code = jr->code;
        v->sig = jr->sig;
        v->t_exit = r->t_exit - h->t0;
        v->armed = !h->off && (h->given || r->reports);
        v->reports = r->reports;
        v->t_advance = r->t_advance - h->t0;
        v->v = r->v;
        v->pstate = r->pstate;
        v->busy = r->busy;
        /* inside a collective as evidence: found there by every probe of this spell,
           the first half a timeout before the last (before the job showed any
           progress, while ranks still start, load, rendezvous: a timeout before, less
           a tick), and idle all along: no CPU time, no byte moved since two ticks
           after the first (an agent sees a rank turn idle a tick late, its message
           takes a moment more). A healthy job's ranks are found in a collective by any probe
           often enough, but they move between probes: compute, send, receive.
           NCCL's waits spin, so its waiters are judged by their stacks alone. */
        double need = h->lively ? h->timeout / 2 : h->timeout - h->tick;
        int idle = dsl_hang_wait_spins(r->wait_what) ||
                   (!r->busy && r->t_busy <= r->t_wait + 2 * h->tick);
        if (r->wait_spell == h->spell && h->nprobes && r->wait == DSL_HANG_WAIT_IN && idle &&
            h->t_probe_last - r->t_wait >= need - 1e-3) {
            v->wait = DSL_HANG_WAIT_IN;
            v->wait_what = r->wait_what;
            v->waited = h->t_probe_last - r->t_wait;
        } else if (r->wait_spell == h->spell && h->nprobes) {
            v->wait = r->wait == DSL_HANG_WAIT_IN ? DSL_HANG_WAIT_UNKNOWN : r->wait;
            if (r->wait == DSL_HANG_WAIT_IN && jr->started && !jr->exited)
                unconfirmed++;
        }
    }
    /* the evidence is in when the last probe was asked a timeout into the quiet spell
       (less a tick, so the answer is back by then) and nothing found inside a
       collective waits for its confirmation by the next */
    h->jobv.t_quiet = h->t_quiet - h->t0;
    h->jobv.lively = h->lively;
    h->jobv.probed = h->nprobes && !unconfirmed &&
                     h->t_probe_last - h->t_quiet >= h->timeout - h->tick - 1e-3;
}

void dsl_job_hang_declare(struct dsl_job *job, int code)
{
    struct dsl_job_hang *h = job->hang;
    h->state = DSL_HANG_DECLARED;
    h->probing = 0; /* an answer still on its way is ignored */
    h->reason = code;
    h->t_declared = dsl_now();
    snprintf(h->said, sizeof(h->said), "%s: %s",
             code == DSL_EXIT_JOB_TIMEOUT ? "job timeout" : "hang", h->verdict.text);
    job->exit_code = code;
    job->failed_node = -1;
    job->failed_rank = h->verdict.first >= 0 ? h->verdict.first
                       : h->verdict.nstuck  ? job->ranks[h->verdict.stuck[0]].rank
                                            : 0;
    job->t_first_fail = h->t_declared;
}

int dsl_job_hang_on_exit(struct dsl_job *job, const struct dsl_job_rank *r)
{
    struct dsl_job_hang *h = job->hang;
    if (!h)
        return 0;
    double now = dsl_now();
    h->r[r->rank].t_exit = now;
    if (h->state != DSL_HANG_WATCH)
        return 1;
    if (h->off || r->sig || r->code == 0 || job->stopping || job->failed_rank >= 0 ||
        job->failed_node >= 0)
        return 0;
    dsl_job_hang_look(job);
    if (dsl_hang_cause(h->view, job->nranks, r->rank, now - h->t0, &h->verdict)) {
        dsl_job_hang_declare(job, DSL_EXIT_HANG);
        dsl_warn("rank %d failed because a peer is stuck: %s; collecting stacks, then "
                 "stopping the job", r->rank, h->verdict.text);
        return 1;
    }
    int lost = 0;
    for (size_t i = 0; i < r->tail.nr && !lost; i++)
        lost = dsl_hang_lost_peer_line(r->tail.v[i]);
    if (!dsl_hang_left_early(h->view, job->nranks, r->rank, lost, &h->verdict))
        return 0;
    dsl_job_hang_declare(job, DSL_EXIT_HANG);
    dsl_warn("rank %d failed because a peer left early: %s; collecting stacks, then "
             "stopping the job", r->rank, h->verdict.text);
    return 1;
}

/* ---- the report ---- */

static const char *life_name(const struct dsl_hang_rank *v)
{
    return v->life == DSL_HANG_RUNNING ? "running" : v->life == DSL_HANG_EXITED ? "exited"
                                                                                : "not started";
}

static const char *form_name(enum dsl_progress_form f)
{
    return f == DSL_PROGRESS_RECORD ? "record" : f == DSL_PROGRESS_TEXT ? "text" : "none";
}

static void progress_words(const struct dsl_hang_rank *v, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = '\0';
    if (v->v.form == DSL_PROGRESS_EMPTY) {
        snprintf(buf, cap, "no progress reported");
        return;
    }
    if (v->v.has_step)
        o += (size_t)snprintf(buf + o, cap - o, "step %llu", (unsigned long long)v->v.step);
    if (o < cap && v->v.form == DSL_PROGRESS_RECORD && v->v.coll_seq)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s %s #%llu", o ? ", " : "",
                              v->v.in_coll ? "inside" : "left",
                              dsl_progress_coll_name(v->v.coll_kind),
                              (unsigned long long)v->v.coll_seq);
    if (o < cap && v->v.form == DSL_PROGRESS_TEXT && !v->v.has_step)
        o += (size_t)snprintf(buf + o, cap - o, "\"%s\"", v->v.text);
    if (o < cap && dsl_progress_phase_name(v->v.phase))
        snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", dsl_progress_phase_name(v->v.phase));
}

static void write_text(struct dsl_job *job, FILE *f, double now)
{
    struct dsl_job_hang *h = job->hang;
    fprintf(f, "dslaunch %s report, run %s\n\n",
            h->reason == DSL_EXIT_JOB_TIMEOUT ? "job timeout" : "hang", job->plan->run_id);
    fprintf(f, "%s\n\n", h->verdict.text);
    fprintf(f, "detected %.1f s after the start", h->t_declared - h->t0);
    if (h->reason == DSL_EXIT_JOB_TIMEOUT)
        fprintf(f, " (--job-timeout %.0f s)", job->opts->job_timeout);
    else if (!h->off)
        fprintf(f, " (hang timeout %.0f s%s)", h->timeout, h->given ? "" : ", the default");
    fprintf(f, "; exit code %d\n\n", h->reason);
    fprintf(f, "%-6s %-20s %-8s %-22s %-10s %s\n", "rank", "host", "pid", "state", "quiet (s)",
            "progress");
    for (int i = 0; i < job->nranks; i++) {
        const struct dsl_hang_rank *v = &h->view[i];
        char state[64], prog[160], quiet[32] = "-";
        if (v->life == DSL_HANG_EXITED && v->sig)
            snprintf(state, sizeof(state), "killed by %s", dsl_signame(v->sig));
        else if (v->life == DSL_HANG_EXITED)
            snprintf(state, sizeof(state), "exited %d at %.1f s", v->code, v->t_exit);
        else
            snprintf(state, sizeof(state), "%s%s%c%s", life_name(v), v->pstate ? " (" : "",
                     v->pstate ? v->pstate : ' ', v->pstate ? ")" : "");
        if (v->life == DSL_HANG_RUNNING)
            snprintf(quiet, sizeof(quiet), "%.1f", (now - h->t0) - v->t_advance);
        progress_words(v, prog, sizeof(prog));
        fprintf(f, "%-6d %-20s %-8d %-22s %-10s %s\n", v->rank, v->host, v->pid, state, quiet,
                prog);
    }
    for (int i = 0; i < job->nranks; i++) {
        const struct dsl_job_hang_rank *r = &h->r[i];
        fprintf(f, "\n==== rank %d (%s, pid %d): stack (%s) ====\n%s", i, h->view[i].host,
                h->view[i].pid, r->stack_tool ? r->stack_tool : "none",
                r->stack ? r->stack
                : h->view[i].life == DSL_HANG_EXITED ? "(exited before the capture)\n"
                                                     : "(no answer from its node agent)\n");
    }
}

static char *write_json(struct dsl_job *job, double now)
{
    struct dsl_job_hang *h = job->hang;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "run_id", job->plan->run_id);
    cJSON_AddStringToObject(o, "reason", h->reason == DSL_EXIT_JOB_TIMEOUT ? "job_timeout"
                                                                             : "hang");
    cJSON_AddStringToObject(o, "verdict", h->verdict.text);
    cJSON_AddNumberToObject(o, "exit_code", h->reason);
    cJSON_AddNumberToObject(o, "t_detect", h->t_declared - h->t0);
    cJSON_AddNumberToObject(o, "hang_timeout", h->off ? 0 : h->timeout);
    cJSON_AddNumberToObject(o, "job_timeout", job->opts->job_timeout);
    cJSON_AddNumberToObject(o, "blamed", h->verdict.first);
    cJSON *st = cJSON_AddArrayToObject(o, "stuck");
    for (int k = 0; k < h->verdict.nstuck; k++)
        cJSON_AddItemToArray(st, cJSON_CreateNumber(h->view[h->verdict.stuck[k]].rank));
    cJSON *a = cJSON_AddArrayToObject(o, "ranks");
    for (int i = 0; i < job->nranks; i++) {
        const struct dsl_hang_rank *v = &h->view[i];
        const struct dsl_job_hang_rank *r = &h->r[i];
        char ps[2] = {v->pstate, '\0'};
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "rank", v->rank);
        cJSON_AddStringToObject(e, "host", v->host);
        cJSON_AddNumberToObject(e, "pid", v->pid);
        cJSON_AddStringToObject(e, "state", life_name(v));
        if (v->life == DSL_HANG_EXITED) {
            cJSON_AddNumberToObject(e, "exit_code", v->sig ? -1 : v->code);
            cJSON_AddNumberToObject(e, "signal", v->sig);
            cJSON_AddNumberToObject(e, "t_exit", v->t_exit);
        } else {
            cJSON_AddNumberToObject(e, "no_progress_s", (now - h->t0) - v->t_advance);
        }
        cJSON_AddStringToObject(e, "process_state", ps);
        cJSON *p = cJSON_AddObjectToObject(e, "progress");
        cJSON_AddStringToObject(p, "form", form_name(v->v.form));
        if (v->v.has_step)
            cJSON_AddNumberToObject(p, "step", (double)v->v.step);
        if (v->v.form == DSL_PROGRESS_RECORD && v->v.coll_seq) {
            cJSON_AddNumberToObject(p, "collective", (double)v->v.coll_seq);
            cJSON_AddStringToObject(p, "kind", dsl_progress_coll_name(v->v.coll_kind));
            cJSON_AddBoolToObject(p, "inside", v->v.in_coll);
        }
        if (v->v.form == DSL_PROGRESS_TEXT)
            cJSON_AddStringToObject(p, "text", v->v.text);
        if (dsl_progress_phase_name(v->v.phase))
            cJSON_AddStringToObject(p, "phase", dsl_progress_phase_name(v->v.phase));
        cJSON_AddStringToObject(e, "stack_tool", r->stack_tool ? r->stack_tool : "none");
        cJSON_AddStringToObject(e, "stack", r->stack ? r->stack : "");
        cJSON_AddItemToArray(a, e);
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

/*
 * Create a report file: in --log-dir (checked to be ours alone) an old report of the
 * same name is replaced; in the working directory, which may be shared, nothing that
 * is already there is touched (file.h). NULL with err on failure.
 */
static FILE *report_open(int dfd, int replace, const char *path, char *err)
{
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    int fd = dsl_file_create(dfd, name, path, 0644, replace ? DSL_FILE_REPLACE : DSL_FILE_FAIL,
                             err);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        snprintf(err, DSL_ERR_LEN, "cannot write '%s': %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

static int save_json(int dfd, int replace, const char *path, const char *text, char *err)
{
    FILE *f = report_open(dfd, replace, path, err);
    if (!f)
        return -1;
    fputs(text, f);
    fputc('\n', f);
    if (fclose(f) != 0) {
        snprintf(err, DSL_ERR_LEN, "cannot write '%s': %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

void dsl_job_hang_report(struct dsl_job *job)
{
    struct dsl_job_hang *h = job->hang;
    char err[DSL_ERR_LEN] = "";
    if (!h || h->reported || h->state == DSL_HANG_WATCH)
        return;
    h->reported = 1;
    double now = dsl_now();
    dsl_job_hang_look(job);
    const char *dir = job->opts->log_dir ? job->opts->log_dir : ".";
    int dfd = job->opts->log_dir ? dsl_dir_open_private(dir, err) : AT_FDCWD;
    int r = dfd == AT_FDCWD || dfd >= 0 ? 0 : -1;
    h->report_txt = dsl_xasprintf("%s/dslaunch-hang-%s.txt", dir, job->plan->run_id);
    h->report_json = dsl_xasprintf("%s/dslaunch-hang-%s.json", dir, job->plan->run_id);
    FILE *f = r == 0 ? report_open(dfd, job->opts->log_dir != NULL, h->report_txt, err) : NULL;
    if (f) {
        write_text(job, f, now);
        if (fclose(f) != 0) {
            snprintf(err, sizeof(err), "cannot write '%s': %s", h->report_txt, strerror(errno));
            r = -1;
        }
    } else {
        r = -1;
    }
    char *js = r == 0 ? write_json(job, now) : NULL;
    if (r == 0 && !js) {
        snprintf(err, sizeof(err), "cannot format '%s': out of memory", h->report_json);
        r = -1;
    }
    if (r == 0)
        r = save_json(dfd, job->opts->log_dir != NULL, h->report_json, js, err);
    cJSON_free(js);
    if (dfd >= 0)
        close(dfd);
    if (r < 0) {
        dsl_warn("cannot write the hang report: %s", err);
        free(h->report_txt);
        h->report_txt = NULL;
    }
}

const char *dsl_job_hang_verdict(const struct dsl_job *job)
{
    return job->hang && job->hang->state != DSL_HANG_WATCH ? job->hang->said : NULL;
}

int dsl_job_hang_summary(struct dsl_job *job)
{
    struct dsl_job_hang *h = job->hang;
    if (!h || h->state == DSL_HANG_WATCH)
        return 0;
    dsl_job_hang_report(job);
    dsl_error("%s", h->said);
    if (h->report_txt)
        dsl_info("report with every rank's progress and stack: %s (and .json)", h->report_txt);
    int stopped = 0, killed = 0;
    for (int i = 0; i < job->nranks; i++) {
        const struct dsl_job_rank *r = &job->ranks[i];
        if (!r->started || (r->exited && h->r[i].t_exit < h->t_declared))
            continue;
        stopped++;
        killed += r->sig == SIGKILL;
    }
    if (stopped)
        dsl_info("stopped %d rank(s)%s", stopped,
                 killed ? " (some needed SIGKILL after the grace period)" : "");
    return 1;
}
