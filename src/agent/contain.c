/*
 * Containing a node's ranks: cgroups where the machine allows them, process tracking
 * where it does not, and a clean-up process that outlives the agent.
 *
 * Theory of operation. A rank's process group is not a container: a program that calls
 * setsid() (setsid(1), a daemon's double fork, Python's start_new_session) leaves it,
 * and killpg() no longer reaches it. So every rank gets cgroups of its own below the
 * agent's (cgroup.c): the child joins them before its exec (spawn.c), everything it
 * ever starts is born inside, and teardown kills the cgroup instead of a group. The
 * memory cgroup also carries the rank's memory limit and counts its OOM kills, which
 * is how the agent tells "killed by the OOM killer" from "killed by SIGKILL".
 *
 * Where no cgroup can be made (no permission, a read-only /sys/fs/cgroup, no usable
 * hierarchy, DSLAUNCH_CONTAIN=tracking), the agent tracks its descendants instead. It
 * is a child subreaper, so a process whose parent dies is reparented to the agent
 * rather than to init: every live process started under a rank stays in the agent's
 * subtree, and walking /proc (each process's parent) finds all of them. Teardown
 * signals what the walk finds, again until a walk finds nothing.
 *
 * The clean-up process ("keeper") covers the agent's own death. The agent starts it
 * when the job starts, in a session of its own (a group kill of the agent misses it)
 * and holding the read end of a pipe whose write end only the agent has. When the job
 * is over and nothing is left, the agent writes "D" and the keeper exits. When the pipe
 * reaches EOF without it, the agent died (SIGKILL, a crash, the OOM killer) and the
 * keeper does the teardown the agent could not: it kills the ranks' cgroups until they
 * are empty and removes them, and then the ranks' progress files (progress_files.c).
 * Under process tracking the orphans now belong to init,
 * so the agent's /proc walks are what the keeper knows: the agent tells it every
 * process it finds (pid and start time, so a reused pid is never killed) twice a
 * second; the keeper stops what it was told of and whatever descends from those,
 * rescans until nothing new appears, then kills them all. A process started and
 * orphaned in the last half second before the agent died is missed there; cgroups have
 * no such gap.
 *
 * The kernel log (/dev/kmsg, readable by root) names OOM victims by pid; it is read
 * from the job's start for ranks that have no memory cgroup, to explain a SIGKILL.
 */
#define _GNU_SOURCE /* pipe2 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/proto/cause.h"
#include "contain.h"
#include "progress_files.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define SCAN_EVERY 0.5        /* seconds between reports to the keeper (tracking) */
#define TOLD_MAX 65536        /* processes the keeper is told of at most */
#define KEEPER_PATIENCE 10.0  /* seconds the keeper keeps killing before it gives up */
#define KEEPER_REMOVE_PATIENCE 5.0 /* seconds it then tries to remove the emptied cgroups */

/* ---- /proc (the walk itself: procfs.c) ---- */

/* Live descendants of the agent other than the keeper: ps/mark filled, count returned. */
static int live_descendants(const struct dsl_contain *c, struct dsl_procstat **ps, char **mark)
{
    int n = dsl_contain_scan(ps);
    *mark = dsl_xcalloc((size_t)n + 1, 1);
    dsl_contain_descendants(*ps, n, c->self, *mark);
    int live = 0;
    for (int i = 0; i < n; i++) {
        if ((*ps)[i].state == 'Z' || (*ps)[i].pid == c->keeper)
            (*mark)[i] = 0;
        live += (*mark)[i];
    }
    (void)live;
    return n;
}

static int is_skipped_group(const struct dsl_contain *c, const char *skip, pid_t pgid)
{
    for (int i = 0; skip && i < c->nranks; i++)
        if (skip[i] && c->ranks[i].pid > 0 && c->ranks[i].pid == pgid)
            return 1;
    return 0;
}

/* ---- the keeper ---- */

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int told_has(const struct dsl_tracked *t, size_t n, pid_t pid, unsigned long long start)
{
    for (size_t i = 0; i < n; i++)
        if (t[i].pid == pid && t[i].start == start)
            return 1;
    return 0;
}

static void told_add(struct dsl_tracked **t, size_t *n, size_t *cap, pid_t pid,
                     unsigned long long start)
{
    if (*n >= TOLD_MAX)
        return;
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *t = dsl_xrealloc(*t, *cap * sizeof(**t));
    }
    (*t)[*n].pid = pid;
    (*t)[*n].start = start;
    (*n)++;
}

/*
 * rmdir every rank cgroup still there, again until all are gone or `patience` seconds
 * passed. An empty cgroup.procs is not yet an empty cgroup: the last thread of a
 * process leaves cgroup.procs as it begins to exit, but the cgroup only once it has
 * freed the process's memory, and until then rmdir fails with EBUSY (a trainer that
 * frees gigabytes takes tens of milliseconds; under load, more). Returns 0 when every
 * rank cgroup is gone, else the first error (-EBUSY: still populated).
 */
static int remove_rank_cgroups(struct dsl_contain *c, double patience)
{
    double give_up = dsl_now() + patience;
    for (;;) {
        int rc = 0;
        for (int i = 0; i < c->nranks; i++) {
            int r = dsl_cgrank_remove(&c->ranks[i].cg);
            if (r < 0 && !rc)
                rc = r;
        }
        if (!rc) {
            dsl_cghost_remove_job(&c->host, c->job);
            return 0;
        }
        if (dsl_now() >= give_up)
            return rc;
        nap_ms(10);
    }
}

/* Name every rank cgroup directory still there, into buf ("" when none). */
static void left_cgroups(const struct dsl_contain *c, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->nranks; i++)
        for (int k = 0; k < DSL_CG_NKIND && len + 1 < n; k++)
            if (c->ranks[i].cg.dir[k]) {
                int w = snprintf(buf + len, n - len, "%s'%s'", len ? ", " : "",
                                 c->ranks[i].cg.dir[k]);
                len = w < 0 ? n : len + (size_t)w;
            }
}

/* The agent is gone: empty and remove the ranks' cgroups. */
static void keeper_clean_cgroups(struct dsl_contain *c)
{
    double give_up = dsl_now() + KEEPER_PATIENCE;
    for (;;) {
        int left = 0;
        for (int i = 0; i < c->nranks; i++) {
            dsl_cgrank_kill(&c->ranks[i].cg, &c->host);
            int k = dsl_cgrank_count(&c->ranks[i].cg);
            left += k > 0 ? k : 0;
        }
        if (!left || dsl_now() > give_up)
            break;
        nap_ms(20);
    }
    int r = remove_rank_cgroups(c, KEEPER_REMOVE_PATIENCE);
    if (r < 0) {
        /* nobody reads the keeper's stderr (it must not hold the agent's channel open
           after the agent died): the system log is where this is said */
        char left[2048];
        left_cgroups(c, left, sizeof(left));
        openlog("dslaunch", LOG_PID, LOG_DAEMON);
        syslog(LOG_WARNING, "clean-up of job '%s': cannot remove cgroup(s) %s: %s", c->job,
               left, strerror(-r));
        closelog();
    }
}

/* Mark the processes of ps that the agent told of (or that are in held), and every
   process below one of those (a fixpoint over the parent links). */
static void mark_tracked(const struct dsl_procstat *ps, int n, const struct dsl_tracked *told,
                         size_t ntold, const struct dsl_tracked *held, size_t nheld, char *mark)
{
    for (int i = 0; i < n; i++)
        mark[i] = told_has(told, ntold, ps[i].pid, ps[i].start) ||
                  told_has(held, nheld, ps[i].pid, ps[i].start);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < n; i++) {
            if (mark[i])
                continue;
            for (int j = 0; j < n; j++)
                if (mark[j] && ps[j].pid == ps[i].ppid) {
                    mark[i] = 1;
                    changed = 1;
                    break;
                }
        }
    }
}

/*
 * The agent is gone and its orphans belong to init: stop every process it told of
 * (same pid and start time) and everything below those, rescan until nothing new
 * stops (a stopped process cannot fork), then kill them all.
 */
static void keeper_clean_tracked(struct dsl_tracked *told, size_t ntold)
{
    struct dsl_tracked *held = NULL;
    size_t nheld = 0, cap = 0;
    double give_up = dsl_now() + KEEPER_PATIENCE;
    for (int round = 0; dsl_now() < give_up; round++) {
        struct dsl_procstat *ps;
        int n = dsl_contain_scan(&ps);
        char *mark = dsl_xcalloc((size_t)n + 1, 1);
        mark_tracked(ps, n, told, ntold, held, nheld, mark);
        int fresh = 0;
        for (int i = 0; i < n; i++) {
            if (!mark[i] || ps[i].state == 'Z' || ps[i].pid == getpid() ||
                told_has(held, nheld, ps[i].pid, ps[i].start))
                continue;
            kill(ps[i].pid, SIGSTOP);
            told_add(&held, &nheld, &cap, ps[i].pid, ps[i].start);
            fresh++;
        }
        free(mark);
        free(ps);
        if (!fresh && round > 0)
            break;
        nap_ms(5);
    }
    for (size_t i = 0; i < nheld; i++) {
        kill(held[i].pid, SIGKILL);
        kill(held[i].pid, SIGCONT);
    }
    free(held);
}

/* The fence's first step: sig to every process of the job the keeper knows of. */
static void keeper_signal(struct dsl_contain *c, const struct dsl_tracked *told, size_t ntold,
                          int sig)
{
    if (c->cgroups) {
        for (int i = 0; i < c->nranks; i++)
            dsl_cgrank_signal(&c->ranks[i].cg, sig, 0);
        return;
    }
    struct dsl_procstat *ps;
    int n = dsl_contain_scan(&ps);
    char *mark = dsl_xcalloc((size_t)n + 1, 1);
    mark_tracked(ps, n, told, ntold, NULL, 0, mark);
    for (int i = 0; i < n; i++)
        if (mark[i] && ps[i].state != 'Z' && ps[i].pid != getpid() && ps[i].pid != c->self) {
            kill(ps[i].pid, sig);
            if (sig != SIGKILL)
                kill(ps[i].pid, SIGCONT); /* a stopped rank acts on it at once */
        }
    free(mark);
    free(ps);
}

/* Everything the keeper knows of is gone (cgroups: empty; tracking: cannot tell). */
static int keeper_all_gone(struct dsl_contain *c)
{
    if (!c->cgroups)
        return 0;
    for (int i = 0; i < c->nranks; i++)
        if (dsl_cgrank_count(&c->ranks[i].cg) > 0)
            return 0;
    return 1;
}

/*
 * The keeper's program: wait for "D" (dismissed) or EOF (the agent died); "P pid start"
 * tells it of a process (tracking), "H" only that the agent lives.
 *
 * The fence. An agent that is alive but silent (SIGSTOPped, wedged, its machine
 * frozen) neither stops its ranks nor dies, and its launcher can only call the node
 * lost: the ranks would run on, holding GPUs and talking to peers of a job that is
 * over, until someone resumed it. So when fence_after seconds pass without a word
 * from the agent, the keeper stops the ranks itself, as the agent would on losing
 * its launcher: SIGTERM to every process of the job it knows of, SIGKILL after the
 * job's grace. It then waits as before: a resumed agent finds its launcher gone (or
 * silent past the keepalive), sweeps whatever is left, removes the cgroups and
 * dismisses the keeper; a dead one leaves the keeper to do that. fence_after is the
 * job's keepalive, the deadline after which the launcher calls the node lost, so the
 * fence falls when the job has given up on the node anyway. A keeper that was itself
 * not running (the whole job frozen and thawed, as a Slurm suspend does) does not count
 * that time as the agent's silence.
 */
static int keeper_main(void *arg)
{
    struct dsl_contain *c = arg; /* this process's copy, from the fork */
    setsid();
    for (int i = 0; i < c->nranks; i++)
        c->ranks[i].cg.fd = -1; /* closed with every other fd at the fork */
    struct dsl_tracked *told = NULL;
    size_t ntold = 0, cap = 0;
    char buf[4096];
    size_t have = 0;
    double heard = dsl_now(), kill_at = 0;
    enum { FENCE_NONE, FENCE_TERM, FENCE_DONE } fence = FENCE_NONE;
    for (;;) {
        double before = dsl_now();
        int timeout = -1;
        if (c->fence_after > 0 && fence == FENCE_NONE) {
            double left = heard + c->fence_after - before;
            timeout = left <= 0 ? 0 : (int)(left * 1000) + 1;
        } else if (fence == FENCE_TERM) {
            timeout = 20; /* done early once everything is gone */
        }
        struct pollfd pf = {.fd = 0, .events = POLLIN};
        int pr = poll(&pf, 1, timeout);
        double now = dsl_now();
        if (pr < 0 && errno != EINTR)
            break;
        if (timeout >= 0 && now - before > timeout / 1000.0 + 1.0)
            heard = now; /* overslept by more than a second: the keeper was not running */
        if (pr > 0) {
            ssize_t n = read(0, buf + have, sizeof(buf) - 1 - have);
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n <= 0)
                break;
            heard = now;
            have += (size_t)n;
            buf[have] = '\0';
            char *p = buf, *nl;
            while ((nl = strchr(p, '\n'))) {
                *nl = '\0';
                if (p[0] == 'D') {
                    free(told);
                    return 0;
                }
                if (p[0] == 'P') {
                    char *end;
                    long pid = strtol(p + 1, &end, 10);
                    unsigned long long start = strtoull(end, NULL, 10);
                    if (pid > 1)
                        told_add(&told, &ntold, &cap, (pid_t)pid, start);
                }
                p = nl + 1;
            }
            have = (size_t)(buf + have - p);
            memmove(buf, p, have);
            if (have >= sizeof(buf) - 1)
                have = 0; /* not a line of ours */
        }
        if (fence == FENCE_NONE && c->fence_after > 0 && now - heard >= c->fence_after) {
            keeper_signal(c, told, ntold, SIGTERM);
            fence = FENCE_TERM;
            kill_at = now + c->fence_grace;
        }
        if (fence == FENCE_TERM && (now >= kill_at || keeper_all_gone(c))) {
            if (c->cgroups)
                for (int i = 0; i < c->nranks; i++)
                    dsl_cgrank_kill(&c->ranks[i].cg, &c->host);
            else
                keeper_clean_tracked(told, ntold);
            fence = FENCE_DONE;
        }
    }
    if (c->cgroups)
        keeper_clean_cgroups(c);
    else
        keeper_clean_tracked(told, ntold);
    free(told);
    dsl_progress_files_remove(c->run_id, c->self);
    return 0;
}

static void keeper_say(struct dsl_contain *c, const char *line)
{
    if (c->keeper_fd < 0)
        return;
    ssize_t w = write(c->keeper_fd, line, strlen(line));
    (void)w; /* best effort: a full pipe means a keeper that stopped reading */
}

static void keeper_start(struct dsl_contain *c)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return;
    c->keeper_fd = pfd[1]; /* set before the fork: the keeper's copy must not write */
    struct dsl_child_opts co = {
        .run = keeper_main,
        .run_arg = c,
        .fd_in = pfd[0],
        .fd_out = DSL_SPAWN_DEVNULL,
        .fd_err = DSL_SPAWN_DEVNULL,
        .close_fds = 1,
        /* not waited for: once fork() returned the keeper exists and holds the pipe, so
           the agent's death reaches it whenever it first runs; waiting for it to be
           scheduled cost a context switch (ms on a loaded node) before any rank started */
        .report_errors = 0,
        .setup_exit = 1,
    };
    char err[DSL_ERR_LEN];
    pid_t pid;
    int r = dsl_spawn_child(&co, &pid, err);
    close(pfd[0]);
    if (r < 0) {
        fprintf(stderr, "dslaunch agent: cannot start the clean-up process: %s\n", err);
        close(pfd[1]);
        c->keeper_fd = -1;
        return;
    }
    fcntl(pfd[1], F_SETFL, O_NONBLOCK);
    c->keeper = pid;
}

/* ---- the agent's side ---- */

void dsl_contain_init(struct dsl_contain *c)
{
    memset(c, 0, sizeof(*c));
    c->keeper_fd = -1;
    c->kmsg_fd = -1;
    c->self = getpid();
    const char *want = getenv("DSLAUNCH_CONTAIN");
    unsigned w = DSL_CG_WANT_V1 | DSL_CG_WANT_V2;
    if (want && !strcmp(want, "v1"))
        w = DSL_CG_WANT_V1;
    else if (want && !strcmp(want, "v2"))
        w = DSL_CG_WANT_V2;
    else if (want && !strcmp(want, "tracking"))
        w = 0;
    dsl_cghost_detect(&c->host, w);
    c->cgroups = dsl_cghost_usable(&c->host);
}

const char *dsl_contain_mode(const struct dsl_contain *c)
{
    return c->host.mode;
}

int dsl_contain_memory(const struct dsl_contain *c)
{
    return c->cgroups && dsl_cghost_memory(&c->host);
}

/* "dslaunch-<run_id>" when the id is a safe name, else one from the agent's pid. */
static void job_name(struct dsl_contain *c, const char *run_id)
{
    int ok = run_id && run_id[0] && run_id[0] != '.' && strlen(run_id) <= 64;
    for (const char *p = run_id; ok && *p; p++)
        ok = isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.';
    if (ok)
        snprintf(c->job, sizeof(c->job), "dslaunch-%s", run_id);
    else
        snprintf(c->job, sizeof(c->job), "dslaunch-pid%d", (int)c->self);
}

int dsl_contain_start(struct dsl_contain *c, const char *run_id, const int *ranks, int nranks,
                      unsigned long long memory_limit, char *err)
{
    job_name(c, run_id);
    snprintf(c->run_id, sizeof(c->run_id), "%s", run_id ? run_id : "");
    c->nranks = nranks;
    c->ranks = dsl_xcalloc((size_t)nranks + 1, sizeof(*c->ranks));
    for (int i = 0; i <= nranks; i++)
        c->ranks[i].cg.fd = -1; /* none yet (0 is an fd) */
    if (memory_limit && !dsl_contain_memory(c))
        return dsl_seterr(err, DSL_ENOTSUP,
                          "cannot limit a rank's memory here: no memory cgroup (%s)",
                          c->host.mode);
    for (int i = 0; c->cgroups && i < nranks; i++) {
        if (dsl_cgrank_create(&c->ranks[i].cg, &c->host, c->job, ranks[i], memory_limit, err) < 0) {
            for (int k = 0; k < i; k++) {
                dsl_cgrank_remove(&c->ranks[k].cg);
                dsl_cgrank_release(&c->ranks[k].cg);
            }
            dsl_cghost_remove_job(&c->host, c->job);
            if (memory_limit)
                return DSL_ENOTSUP;
            fprintf(stderr, "dslaunch agent: %s; tracking the ranks' processes instead\n", err);
            c->cgroups = 0;
        }
    }
    if (!dsl_contain_memory(c)) {
        c->kmsg_fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (c->kmsg_fd >= 0)
            lseek(c->kmsg_fd, 0, SEEK_END); /* only what happens from now on */
    }
    keeper_start(c);
    c->next_scan = dsl_now() + SCAN_EVERY;
    return 0;
}

const char *const *dsl_contain_procs(const struct dsl_contain *c, int i)
{
    if (!c->cgroups || i < 0 || i >= c->nranks || !c->ranks[i].cg.nprocs)
        return NULL;
    return (const char *const *)c->ranks[i].cg.procs;
}

int dsl_contain_cgroup_fd(const struct dsl_contain *c, int i, const char **procs)
{
    *procs = NULL;
    if (!c->cgroups || i < 0 || i >= c->nranks || c->ranks[i].cg.fd <= 0)
        return 0;
    *procs = c->ranks[i].cg.fd_procs;
    return c->ranks[i].cg.fd;
}

static void tell_keeper(struct dsl_contain *c, pid_t pid, unsigned long long start)
{
    if (told_has(c->told, c->ntold, pid, start))
        return;
    told_add(&c->told, &c->ntold, &c->told_cap, pid, start);
    char line[64];
    snprintf(line, sizeof(line), "P %d %llu\n", (int)pid, start);
    keeper_say(c, line);
}

void dsl_contain_started(struct dsl_contain *c, int i, pid_t pid)
{
    if (i < 0 || i >= c->nranks)
        return;
    c->ranks[i].pid = pid;
    if (c->cgroups)
        return;
    struct dsl_procstat st;
    if (dsl_contain_read_stat(pid, &st) == 0)
        tell_keeper(c, pid, st.start);
}

void dsl_contain_signal(struct dsl_contain *c, int sig, const char *skip_group)
{
    if (c->cgroups) {
        for (int i = 0; i < c->nranks; i++)
            dsl_cgrank_signal(&c->ranks[i].cg, sig,
                              skip_group && skip_group[i] ? c->ranks[i].pid : 0);
        return;
    }
    if (!c->ranks)
        return;
    struct dsl_procstat *ps;
    char *mark;
    int n = live_descendants(c, &ps, &mark);
    for (int i = 0; i < n; i++)
        if (mark[i] && !is_skipped_group(c, skip_group, ps[i].pgid))
            kill(ps[i].pid, sig);
    free(ps);
    free(mark);
}

void dsl_contain_kill(struct dsl_contain *c)
{
    if (c->cgroups) {
        for (int i = 0; i < c->nranks; i++)
            dsl_cgrank_kill(&c->ranks[i].cg, &c->host);
        return;
    }
    if (!c->ranks)
        return;
    /* a few rounds: children of a process killed in one round show up in the next */
    for (int round = 0; round < 3; round++) {
        struct dsl_procstat *ps;
        char *mark;
        int n = live_descendants(c, &ps, &mark), hit = 0;
        for (int i = 0; i < n; i++)
            if (mark[i] && kill(ps[i].pid, SIGKILL) == 0)
                hit++;
        free(ps);
        free(mark);
        if (!hit)
            break;
    }
}

int dsl_contain_count(struct dsl_contain *c)
{
    int left = 0;
    if (c->cgroups) {
        for (int i = 0; i < c->nranks; i++) {
            int k = dsl_cgrank_count(&c->ranks[i].cg);
            left += k > 0 ? k : 0;
        }
        return left;
    }
    if (!c->ranks)
        return 0;
    struct dsl_procstat *ps;
    char *mark;
    int n = live_descendants(c, &ps, &mark);
    for (int i = 0; i < n; i++)
        left += mark[i];
    free(ps);
    free(mark);
    return left;
}

void dsl_contain_set_fence(struct dsl_contain *c, double silence, double grace)
{
    c->fence_after = silence > 0 ? silence : 0;
    c->fence_grace = grace > 0 ? grace : 0;
}

void dsl_contain_tick(struct dsl_contain *c, double now)
{
    if (c->keeper_fd >= 0 && c->fence_after > 0 && now >= c->next_beat) {
        /* four words per silence: a late tick or two never reads as a stopped agent */
        double every = c->fence_after / 8;
        c->next_beat = now + (every < 1.0 ? every : 1.0);
        keeper_say(c, "H\n");
    }
    if (c->cgroups || c->keeper_fd < 0 || now < c->next_scan)
        return;
    c->next_scan = now + SCAN_EVERY;
    struct dsl_procstat *ps;
    char *mark;
    int n = live_descendants(c, &ps, &mark);
    for (int i = 0; i < n; i++)
        if (mark[i])
            tell_keeper(c, ps[i].pid, ps[i].start);
    free(ps);
    free(mark);
}

/* Read what the kernel logged since the last call; remember the OOM victims. */
static void kmsg_drain(struct dsl_contain *c)
{
    char rec[8192];
    for (int guard = 0; guard < 100000; guard++) {
        ssize_t n = read(c->kmsg_fd, rec, sizeof(rec) - 1);
        if (n < 0 && errno == EPIPE)
            continue; /* records were overwritten before we read them: go on */
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        rec[n] = '\0';
        int pid = dsl_cause_kmsg_oom_pid(rec);
        if (pid > 0) {
            int len = (int)(sizeof(c->oom_seen) / sizeof(c->oom_seen[0]));
            c->oom_seen[c->noom % len] = pid;
            c->noom++;
        }
    }
}

static int kmsg_named(const struct dsl_contain *c, pid_t pid)
{
    int len = (int)(sizeof(c->oom_seen) / sizeof(c->oom_seen[0]));
    for (int i = 0; i < c->noom && i < len; i++)
        if (c->oom_seen[i] == pid)
            return 1;
    return 0;
}

void dsl_contain_cause(struct dsl_contain *c, int i, int sig, int by_stop,
                       struct dsl_exit_cause *out)
{
    memset(out, 0, sizeof(*out));
    out->known = 1;
    out->by_stop = by_stop;
    if (i < 0 || i >= c->nranks)
        return;
    struct dsl_contain_rank *r = &c->ranks[i];
    if (dsl_contain_memory(c)) {
        struct dsl_cgmem m;
        dsl_cgrank_memory(&r->cg, &m);
        out->mem_limit = m.limit > 0 ? m.limit : 0;
        out->mem_peak = m.peak > 0 ? m.peak : 0;
        /* without the oom_kill counter (kernels before 4.13), a SIGKILL at the limit */
        int hit = m.oom_kills > 0 ||
                  (m.oom_kills < 0 && m.failcnt > 0 && m.limit > 0 && sig == SIGKILL);
        if (hit) {
            /* a SIGKILL of the stop's own is the stop's, whatever else the OOM killer did */
            out->oom = sig == SIGKILL && !by_stop ? DSL_OOM_RANK : DSL_OOM_OTHER;
            out->oom_src = DSL_OOMSRC_CGROUP;
            out->oom_kills = m.oom_kills > 0 ? (int)m.oom_kills : 1;
            if (out->oom == DSL_OOM_RANK)
                out->oom_kills--; /* the others, besides the rank */
        }
    } else if (sig == SIGKILL && c->kmsg_fd >= 0 && r->pid > 0) {
        kmsg_drain(c);
        if (!kmsg_named(c, r->pid) && !by_stop) {
            /* the report is logged as the kill is sent; give a late line a moment (not
               for the stop's own SIGKILLs: a teardown of many ranks would wait for each) */
            struct pollfd pf = {.fd = c->kmsg_fd, .events = POLLIN};
            if (poll(&pf, 1, 50) > 0)
                kmsg_drain(c);
        }
        if (kmsg_named(c, r->pid)) {
            out->oom = DSL_OOM_RANK;
            out->oom_src = DSL_OOMSRC_KMSG;
        }
    }
    if (sig == SIGKILL || out->oom) {
        struct dsl_dynbuf b;
        dsl_dynbuf_init(&b, 1u << 20);
        double avail;
        if (dsl_dynbuf_load_file(&b, "/proc/meminfo") == 0 &&
            dsl_cause_meminfo_available(dsl_dynbuf_str(&b), &avail) == 0)
            out->mem_avail = avail;
        dsl_dynbuf_release(&b);
    }
}

int dsl_contain_remove(struct dsl_contain *c)
{
    if (!c->cgroups)
        return 0;
    return remove_rank_cgroups(c, 0);
}

int dsl_contain_finish(struct dsl_contain *c, int counted_empty)
{
    int busy = 0;
    if (c->cgroups) {
        busy = remove_rank_cgroups(c, 0) < 0;
        if (busy) {
            char left[2048];
            left_cgroups(c, left, sizeof(left));
            fprintf(stderr, "dslaunch agent: cannot remove cgroup(s) %s yet; the clean-up "
                            "process takes over\n", left);
        }
    } else {
        busy = !counted_empty && dsl_contain_count(c) > 0;
    }
    if (!busy)
        keeper_say(c, "D\n");
    if (c->keeper_fd >= 0)
        close(c->keeper_fd);
    c->keeper_fd = -1;
    return busy ? -EBUSY : 0;
}

void dsl_contain_release(struct dsl_contain *c)
{
    if (c->keeper_fd >= 0)
        close(c->keeper_fd); /* without "D": the keeper cleans up */
    if (c->kmsg_fd >= 0)
        close(c->kmsg_fd);
    for (int i = 0; i < c->nranks; i++)
        dsl_cgrank_release(&c->ranks[i].cg);
    free(c->ranks);
    free(c->told);
    dsl_cghost_release(&c->host);
    memset(c, 0, sizeof(*c));
    c->keeper_fd = c->kmsg_fd = -1;
}
