/*
 * Hang verdicts: pure functions from the ranks' last known progress to "is this a
 * hang, and whom do we name".
 *
 * Theory of operation. Silence is not evidence: in a collective job every rank
 * stalls once one does, and a rank that never speaks (DDP printing on rank 0 only)
 * runs in lock step with those that do. So a rank is judged on its own only when it
 * reports progress (its file changes: armed and reports) and has made none for the
 * timeout, and only on evidence that it holds the others up; else the job is judged
 * as a whole. In order:
 *
 *  1. A collective picture (ranks with a binary record): F is the highest collective
 *     number any rank reached. The live ranks inside F wait in it; a live rank that
 *     never entered F (or left it and went quiet) is the one the others wait for:
 *     "rank 5 (node2, pid 4242) never entered allreduce #1582; ranks 0-4,6-7 wait in
 *     it". When every live rank waits in F, a rank that exited without entering it is
 *     named, then a stopped process (state T), and failing all that every rank is:
 *     nobody is missing, so the collective itself does not complete.
 *  2. Text progress: a stalled rank that others still report beyond (they advanced
 *     within half a timeout, at a higher step when both count steps). Ranks in lock
 *     step stop within a step of each other, so the order of their last reports is
 *     noise, not evidence.
 *  3. The job (judge_job): no progress anywhere (no file change, no output line) for
 *     the timeout, and the evidence the launcher gathered (job_hang.c): per rank the
 *     process state, whether it uses CPU time or moves bytes (busy), and whether the
 *     probes' native stacks found it idle inside a collective for half a timeout (W).
 *     Ranks outside while W wait are the culprits, said as what they do: stopped,
 *     asleep, busy (only once W waited three quarters of the timeout), in the kernel. With nobody outside, a rank that exited 0 is, else
 *     the backend (every rank waits, none is missing). With nobody waiting: stopped
 *     ranks; a busy rank means work (no verdict); all asleep is a hang once the job
 *     showed progress or a rank finished. Before the job showed any progress a busy
 *     rank outside is still starting, and silence alone judges nobody.
 *
 * Excused (dsl_hang_excuse): ranks waiting in F while every live rank outside it works
 * in a phase (saving or loading a checkpoint) and still advances. The launcher counts
 * such waiting as progress, so a long save is no hang, and the waiters get a whole
 * timeout once the save is over. A rank in a phase is named with it: "rank 0 (node1, pid 77, saving a checkpoint) never
 * entered allreduce #90".
 *
 * dsl_hang_cause answers a different question at the moment a rank exits with an
 * error: was it the victim? A rank that timed out waiting in collective F while a
 * peer never entered F is; the peer is the cause, and the summary names the peer.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/xalloc.h"
#include "hang.h"
#include "dslaunch/common/banned.h"

/* ---- text ---- */

struct out {
    char *buf;
    size_t cap, len;
};

static void app(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void app(struct out *o, const char *fmt, ...)
{
    if (o->len + 1 >= o->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    o->len += (size_t)n;
    if (o->len >= o->cap)
        o->len = o->cap - 1;
}

void dsl_hang_ranklist(const int *ranks, int n, char *buf, size_t cap)
{
    struct out o = {buf, cap, 0};
    if (cap)
        buf[0] = '\0';
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
            j++;
        size_t before = o.len;
        if (j > i)
            app(&o, "%s%d-%d", i ? "," : "", ranks[i], ranks[j]);
        else
            app(&o, "%s%d", i ? "," : "", ranks[i]);
        if (o.len + 1 >= cap && cap > 4) { /* cut: end with "..." */
            o.len = before < cap - 4 ? before : cap - 4;
            memcpy(buf + o.len, "...", 4);
            return;
        }
        i = j + 1;
    }
}

static int live(const struct dsl_hang_rank *r)
{
    return r->life == DSL_HANG_RUNNING;
}

static int stopped(const struct dsl_hang_rank *r)
{
    return r->pstate == 'T';
}

static int has_coll(const struct dsl_hang_rank *r)
{
    return r->v.form == DSL_PROGRESS_RECORD && r->v.coll_seq > 0;
}

/* "rank 5 (node2, pid 4242, stopped)", "rank 0 (node1, pid 77, saving a checkpoint)" */
static void say_rank(struct out *o, const struct dsl_hang_rank *r)
{
    const char *phase = r->v.form == DSL_PROGRESS_RECORD ? dsl_progress_phase_name(r->v.phase)
                                                         : NULL;
    app(o, "rank %d (%s, pid %d%s%s%s)", r->rank, r->host ? r->host : "?", r->pid,
        stopped(r)                 ? ", stopped"
        : r->pstate == 'D'         ? ", in uninterruptible sleep"
                                   : "",
        phase ? ", " : "", phase ? phase : "");
}

/* The ranks idx[0..k) in words: one or a few in full, many as a list. */
static void say_ranks(struct out *o, const struct dsl_hang_rank *r, const int *idx, int k)
{
    if (k == 1) {
        say_rank(o, &r[idx[0]]);
        return;
    }
    if (k <= 4) {
        for (int i = 0; i < k; i++) {
            app(o, "%s", i == 0 ? "" : i == k - 1 ? " and " : ", ");
            say_rank(o, &r[idx[i]]);
        }
        return;
    }
    int nums[64] = {0};
    int m = k < 64 ? k : 64;
    for (int i = 0; i < m; i++)
        nums[i] = r[idx[i]].rank;
    char list[256];
    dsl_hang_ranklist(nums, m, list, sizeof(list));
    app(o, "ranks %s%s", list, k > m ? ",..." : "");
}

/* "ranks 0-4,6-7" / "rank 3" for the ranks whose flag is set; how many */
static int say_numbers(struct out *o, const struct dsl_hang_rank *r, int n,
                        const unsigned char *flag)
{
    int nums[256] = {0}, k = 0, total = 0;
    for (int i = 0; i < n; i++)
        if (flag[i]) {
            total++;
            if (k < 256)
                nums[k++] = r[i].rank;
        }
    char list[512];
    dsl_hang_ranklist(nums, k, list, sizeof(list));
    app(o, "%s %s%s", total == 1 ? "rank" : "ranks", list, total > k ? ",..." : "");
    return total;
}

static void verdict_init(struct dsl_hang_verdict *v)
{
    v->hang = 0;
    v->nstuck = 0;
    v->first = -1;
    v->text[0] = '\0';
}

static void name(struct dsl_hang_verdict *v, const struct dsl_hang_rank *r, int i)
{
    v->stuck[v->nstuck++] = i;
    if (v->first < 0)
        v->first = r[i].rank;
}

/* ---- the judge ---- */

/* Prefix for ranks that already exited 0: "rank 0 exited 0 at 12.0 s; " */
static void say_finished(struct out *o, const struct dsl_hang_rank *r, int n)
{
    int k = 0, first = -1;
    double t = 0;
    for (int i = 0; i < n; i++)
        if (r[i].life == DSL_HANG_EXITED && !r[i].sig && r[i].code == 0) {
            if (first < 0 || r[i].t_exit < t)
                t = r[i].t_exit;
            if (first < 0)
                first = i;
            k++;
        }
    if (!k)
        return;
    if (k == 1)
        app(o, "rank %d exited 0 at %.1f s; ", r[first].rank, t);
    else
        app(o, "%d ranks exited 0 (the first at %.1f s); ", k, t);
}

static int judge_collective(const struct dsl_hang_rank *r, int n, double now,
                            unsigned char *wait, struct dsl_hang_verdict *v, struct out *o)
{
    uint64_t F = 0;
    int kind = 0;
    for (int i = 0; i < n; i++)
        if (has_coll(&r[i]) && r[i].v.coll_seq > F) {
            F = r[i].v.coll_seq;
            kind = r[i].v.coll_kind;
        }
    int nwait = 0;
    for (int i = 0; i < n; i++) {
        wait[i] = live(&r[i]) && has_coll(&r[i]) && r[i].v.in_coll && r[i].v.coll_seq == F;
        nwait += wait[i];
    }
    if (!F || !nwait)
        return 0;
    const char *what = dsl_progress_coll_name(kind);
    /*
     * Live ranks not in F: never entered it, or left it and went quiet. Those of them
     * waiting inside an older collective are victims too (of a rank that stopped in
     * the middle of it) when a culprit is among the others: one that is stopped, or
     * in no collective at all.
     */
    int left = 0, culprits = 0;
    for (int i = 0; i < n; i++)
        if (live(&r[i]) && !wait[i])
            culprits += stopped(&r[i]) || !has_coll(&r[i]) || !r[i].v.in_coll;
    for (int i = 0; i < n; i++)
        if (live(&r[i]) && !wait[i] &&
            (!culprits || stopped(&r[i]) || !has_coll(&r[i]) || !r[i].v.in_coll)) {
            name(v, r, i);
            left += has_coll(&r[i]) && r[i].v.coll_seq >= F;
        }
    if (v->nstuck) {
        say_finished(o, r, n);
        say_ranks(o, r, v->stuck, v->nstuck);
        if (left == v->nstuck)
            app(o, " left %s #%llu and made no progress since; ", what, (unsigned long long)F);
        else
            app(o, " never entered %s #%llu; ", what, (unsigned long long)F);
        app(o, say_numbers(o, r, n, wait) == 1 ? " waits in it" : " wait in it");
        return 1;
    }
    /* every live rank waits in F: did a rank exit without entering it? */
    for (int i = 0; i < n; i++) {
        if (r[i].life != DSL_HANG_EXITED || (has_coll(&r[i]) && r[i].v.coll_seq >= F))
            continue;
        for (int j = 0; j < n; j++)
            if (wait[j])
                name(v, r, j);
        v->first = r[i].rank;
        if (r[i].sig)
            app(o, "rank %d was killed by signal %d at %.1f s without entering %s #%llu; ",
                r[i].rank, r[i].sig, r[i].t_exit, what, (unsigned long long)F);
        else
            app(o, "rank %d exited %d at %.1f s without entering %s #%llu; ", r[i].rank,
                r[i].code, r[i].t_exit, what, (unsigned long long)F);
        say_ranks(o, r, v->stuck, v->nstuck);
        app(o, " still running at %.1f s, waiting in it", now);
        return 1;
    }
    for (int i = 0; i < n; i++)
        if (wait[i] && stopped(&r[i]))
            name(v, r, i);
    if (v->nstuck) {
        say_ranks(o, r, v->stuck, v->nstuck);
        app(o, " %s no progress inside %s #%llu; ", v->nstuck == 1 ? "makes" : "make", what,
            (unsigned long long)F);
        unsigned char *others = wait; /* the waiters that are not named */
        for (int k = 0; k < v->nstuck; k++)
            others[v->stuck[k]] = 0;
        app(o, say_numbers(o, r, n, others) == 1 ? " waits in it" : " wait in it");
        return 1;
    }
    for (int i = 0; i < n; i++)
        if (wait[i])
            name(v, r, i);
    app(o, "every rank waits in %s #%llu (", what, (unsigned long long)F);
    say_numbers(o, r, n, wait);
    app(o, "): none is missing, so the collective itself does not complete");
    return 1;
}

int dsl_hang_excuse(const struct dsl_hang_rank *r, int n, double now, double timeout,
                    unsigned char *mark)
{
    uint64_t F = 0;
    for (int i = 0; i < n; i++) {
        mark[i] = 0;
        if (has_coll(&r[i]) && r[i].v.coll_seq > F)
            F = r[i].v.coll_seq;
    }
    int nwait = 0, working = 0;
    for (int i = 0; i < n; i++) {
        if (!live(&r[i]))
            continue;
        if (has_coll(&r[i]) && r[i].v.in_coll && r[i].v.coll_seq == F) {
            mark[i] = 1;
            nwait++;
            continue;
        }
        if (r[i].v.form != DSL_PROGRESS_RECORD || !r[i].v.phase || stopped(&r[i]) ||
            now - r[i].t_advance >= timeout) {
            memset(mark, 0, (size_t)n); /* a peer that does not work in a phase */
            return 0;
        }
        working++;
    }
    if (!F || !working) {
        memset(mark, 0, (size_t)n);
        return 0;
    }
    return nwait;
}

/* Did rank i fall behind? It reports, made no progress for timeout, and another
   reporting rank still advances (within half a timeout) beyond it: at a higher step
   when both count steps. In lock step the others stop within a step of the culprit,
   so a difference of milliseconds in the last report is not "beyond". */
static int behind(const struct dsl_hang_rank *r, int n, int i, double now, double timeout)
{
    const struct dsl_hang_rank *x = &r[i];
    if (!live(x) || !x->armed || !x->reports || now - x->t_advance < timeout)
        return 0;
    for (int j = 0; j < n; j++) {
        const struct dsl_hang_rank *y = &r[j];
        if (j == i || !live(y) || !y->reports || now - y->t_advance >= timeout / 2 ||
            y->t_advance <= x->t_advance)
            continue;
        if (x->v.has_step && y->v.has_step && y->v.step <= x->v.step)
            continue;
        return 1;
    }
    return 0;
}

/* How rank x is outside the collectives, in words */
static const char *outside_words(const struct dsl_hang_rank *x)
{
    if (stopped(x))
        return "is stopped";
    if (x->pstate == 'D')
        return "waits in the kernel outside any collective";
    if (x->busy)
        return "is busy outside any collective (CPU time or I/O advancing)";
    return "sleeps outside any collective (no CPU time)";
}

/* "rank 1 (...) sleeps outside ... and rank 2 (...) is stopped", or "ranks 1-9 are
   outside any collective" */
static void say_culprits(struct out *o, const struct dsl_hang_rank *r, const int *idx, int k)
{
    if (k > 4) {
        say_ranks(o, r, idx, k);
        app(o, " are outside any collective");
        return;
    }
    for (int i = 0; i < k; i++) {
        app(o, "%s", i == 0 ? "" : i == k - 1 ? " and " : ", ");
        say_rank(o, &r[idx[i]]);
        app(o, " %s", outside_words(&r[idx[i]]));
    }
}

/* the shortest wait of the ranks flagged in wait */
static double min_waited(const struct dsl_hang_rank *r, int n, const unsigned char *wait)
{
    double m = -1;
    for (int i = 0; i < n; i++)
        if (wait[i] && (m < 0 || r[i].waited < m))
            m = r[i].waited;
    return m < 0 ? 0 : m;
}

/*
 * The job as a whole: no progress anywhere for the timeout, and the probes' evidence
 * in. W: the live ranks every probe found inside a collective; C: the live ranks
 * that hold them up (stopped, or outside the collectives while W wait).
 */
static int judge_job(const struct dsl_hang_rank *r, int n, double now, double timeout,
                     const struct dsl_hang_job *job, unsigned char *wait,
                     struct dsl_hang_verdict *v, struct out *o)
{
    double quiet = now - job->t_quiet;
    int nlive = 0, nwait = 0, nbusy = 0, nstop = 0, ndone = 0, done = -1;
    const char *what = NULL;
    for (int i = 0; i < n; i++) {
        wait[i] = 0;
        if (r[i].life == DSL_HANG_EXITED && !r[i].sig && r[i].code == 0) {
            ndone++;
            if (done < 0 || r[i].t_exit < r[done].t_exit)
                done = i;
        }
        if (!live(&r[i]))
            continue;
        nlive++;
        if (stopped(&r[i])) {
            nstop++;
            continue;
        }
        if (r[i].wait == DSL_HANG_WAIT_IN) {
            wait[i] = 1;
            nwait++;
            what = what ? what : r[i].wait_what;
        }
        nbusy += r[i].busy && !wait[i]; /* NCCL's waits spin */
    }
    if (!nlive)
        return 0;
    what = what ? what : "a collective";
    if (nwait) {
        /* before any progress, a rank that computes outside is starting or loading;
           after, it is named once the others waited for it three quarters of the
           timeout (a rank that saves or evaluates alone may keep them waiting a while,
           one that does nothing at all may not) */
        if (nbusy && (!job->lively || min_waited(r, n, wait) < 0.75 * timeout - 0.25))
            return 0;
        for (int i = 0; i < n; i++)
            if (live(&r[i]) && !wait[i])
                name(v, r, i);
        if (v->nstuck) { /* the culprits hold up the others */
            say_culprits(o, r, v->stuck, v->nstuck);
            app(o, "; ");
            app(o, say_numbers(o, r, n, wait) == 1 ? " waits" : " wait");
            app(o, " inside %s for %s; no progress anywhere for %.1f s", what,
                v->nstuck == 1 ? "it" : "them", quiet);
            return 1;
        }
        if (done >= 0) { /* the others wait for a rank that has finished */
            name(v, r, done);
            app(o, "rank %d (%s) exited 0 at %.1f s", r[done].rank,
                r[done].host ? r[done].host : "?", r[done].t_exit);
            if (ndone > 1)
                app(o, " (and %d more)", ndone - 1);
            app(o, "; ");
            app(o, say_numbers(o, r, n, wait) == 1 ? " still waits" : " still wait");
            app(o, " inside %s for it; no progress anywhere for %.1f s", what, quiet);
            return 1;
        }
        for (int i = 0; i < n; i++)
            if (wait[i])
                name(v, r, i);
        app(o, "every rank waits inside %s that does not complete (", what);
        say_numbers(o, r, n, wait);
        app(o, "): none is missing, so the network or the communication backend is at "
               "fault; no progress anywhere for %.1f s", quiet);
        return 1;
    }
    if (nstop) {
        for (int i = 0; i < n; i++)
            if (live(&r[i]) && stopped(&r[i]))
                name(v, r, i);
        say_ranks(o, r, v->stuck, v->nstuck);
        app(o, " %s stopped; no progress anywhere for %.1f s", v->nstuck == 1 ? "is" : "are",
            quiet);
        return 1;
    }
    if (nbusy) /* silent, but working outside the collectives: a long computation */
        return 0;
    if (!ndone && !job->lively) /* never showed progress: silence alone is no evidence */
        return 0;
    for (int i = 0; i < n; i++)
        if (live(&r[i]))
            name(v, r, i);
    if (ndone) {
        say_finished(o, r, n);
        say_ranks(o, r, v->stuck, v->nstuck);
        app(o, " still running at %.1f s, no progress for %.1f s", now, quiet);
        return 1;
    }
    app(o, "no progress anywhere for %.1f s and no rank waits in a collective: ", quiet);
    say_ranks(o, r, v->stuck, v->nstuck);
    app(o, " %s outside any collective (no CPU time)", v->nstuck == 1 ? "sleeps" : "sleep");
    return 1;
}

int dsl_hang_judge(const struct dsl_hang_rank *r, int n, double now, double timeout,
                   const struct dsl_hang_job *job, struct dsl_hang_verdict *v)
{
    verdict_init(v);
    if (timeout <= 0 || n <= 0)
        return 0;
    unsigned char flag[4096], *wait = flag;
    unsigned char *heap = NULL;
    if ((size_t)n > sizeof(flag)) {
        heap = dsl_xcalloc((size_t)n, 1);
        wait = heap;
    }
    struct out o = {v->text, sizeof(v->text), 0};
    int stalled = 0, armed = 1;
    for (int i = 0; i < n; i++) {
        if (!live(&r[i]))
            continue;
        armed &= r[i].armed;
        stalled += r[i].armed && r[i].reports && now - r[i].t_advance >= timeout;
    }
    /* 1. the collective record of ranks that report */
    if (stalled && judge_collective(r, n, now, wait, v, &o))
        goto hang;
    verdict_init(v);
    o.len = 0;
    /* 2. ranks that report, left behind by others that still do */
    for (int i = 0; stalled && i < n; i++)
        if (behind(r, n, i, now, timeout))
            name(v, r, i);
    if (v->nstuck) {
        double quiet = 0;
        for (int k = 0; k < v->nstuck; k++)
            if (now - r[v->stuck[k]].t_advance > quiet)
                quiet = now - r[v->stuck[k]].t_advance;
        say_finished(&o, r, n);
        say_ranks(&o, r, v->stuck, v->nstuck);
        app(&o, " made no progress for %.1f s", quiet);
        if (v->nstuck == 1 && r[v->stuck[0]].v.has_step)
            app(&o, " (at step %llu)", (unsigned long long)r[v->stuck[0]].v.step);
        for (int i = 0; i < n; i++)
            wait[i] = live(&r[i]) && r[i].reports && now - r[i].t_advance < timeout / 2;
        app(&o, "; ");
        say_numbers(&o, r, n, wait);
        app(&o, " advanced meanwhile");
        goto hang;
    }
    /* 3. the job as a whole */
    if (job && armed && job->probed && now - job->t_quiet >= timeout &&
        judge_job(r, n, now, timeout, job, wait, v, &o))
        goto hang;
    verdict_init(v);
    free(heap);
    return 0;
hang:
    v->hang = 1;
    free(heap);
    return 1;
}

/* ---- the cause of a failure ---- */

int dsl_hang_cause(const struct dsl_hang_rank *r, int n, int failed, double now,
                   struct dsl_hang_verdict *v)
{
    verdict_init(v);
    if (failed < 0 || failed >= n)
        return 0;
    const struct dsl_hang_rank *x = &r[failed];
    if (x->life != DSL_HANG_EXITED || x->sig || x->code == 0)
        return 0;
    double waited = x->t_exit - x->t_advance;
    double need = waited / 2 > 1.0 ? waited / 2 : 1.0;
    int in = has_coll(x) && x->v.in_coll;
    uint64_t F = in ? x->v.coll_seq : 0;
    int by_coll = 0;
    for (int i = 0; i < n; i++) {
        const struct dsl_hang_rank *p = &r[i];
        if (i == failed || !live(p))
            continue;
        int missing = in && (!has_coll(p) || p->v.coll_seq < F ||
                             (p->v.coll_seq == F && !p->v.in_coll));
        if (stopped(p) || (missing && now - p->t_advance >= need)) {
            name(v, r, i);
            by_coll += missing;
        }
    }
    if (!v->nstuck)
        return 0;
    v->hang = 1;
    struct out o = {v->text, sizeof(v->text), 0};
    say_ranks(&o, r, v->stuck, v->nstuck);
    double quiet = now - r[v->stuck[0]].t_advance;
    if (by_coll == v->nstuck)
        app(&o, " never entered %s #%llu (no progress for %.1f s); rank %d waited in it and "
                "exited with code %d after %.1f s",
            dsl_progress_coll_name(x->v.coll_kind), (unsigned long long)F, quiet, x->rank,
            x->code, x->t_exit);
    else
        app(&o, " makes no progress (for %.1f s); rank %d exited with code %d after %.1f s",
            quiet, x->rank, x->code, x->t_exit);
    return 1;
}

/* ---- a peer that left early ---- */

int dsl_hang_lost_peer_line(const char *line)
{
    static const char *const gone[] = {
        "Connection closed by peer",               /* gloo */
        "Connection reset by peer",                /* gloo, TCPStore */
        "remote process exited or there was a network error", /* NCCL */
    };
    for (size_t k = 0; k < sizeof(gone) / sizeof(gone[0]); k++)
        if (strstr(line, gone[k]))
            return 1;
    return 0;
}

int dsl_hang_left_early(const struct dsl_hang_rank *r, int n, int failed, int lost_peer,
                        struct dsl_hang_verdict *v)
{
    verdict_init(v);
    if (!lost_peer || failed < 0 || failed >= n)
        return 0;
    const struct dsl_hang_rank *x = &r[failed];
    if (x->life != DSL_HANG_EXITED || x->sig || x->code == 0)
        return 0;
    int first = -1;
    for (int i = 0; i < n; i++)
        if (i != failed && r[i].life == DSL_HANG_EXITED && !r[i].sig && r[i].code == 0 &&
            r[i].t_exit <= x->t_exit && (first < 0 || r[i].t_exit < r[first].t_exit))
            first = i;
    if (first < 0)
        return 0;
    name(v, r, first);
    v->hang = 1;
    struct out o = {v->text, sizeof(v->text), 0};
    app(&o, "rank %d (%s) exited 0 at %.1f s while its peers still ran; rank %d lost it in a "
            "collective and exited with code %d at %.1f s",
        r[first].rank, r[first].host ? r[first].host : "?", r[first].t_exit, x->rank, x->code,
        x->t_exit);
    return 1;
}
