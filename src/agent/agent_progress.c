/*
 * The node agent's watch over its ranks: progress files, process states, stacks.
 *
 * Theory of operation. Everything runs on the agent's one thread, from its poll loop;
 * nothing here blocks.
 *
 * Progress. When the start message asks for it (progress = tick seconds), every rank
 * gets a file of its own, created here before the rank is spawned: in /dev/shm (else
 * $TMPDIR or /tmp), named after the run id and the rank, mode 0600, one zeroed page,
 * and named in the rank's environment as DSLAUNCH_PROGRESS_FILE. Every tick each live
 * rank's file is read (common/progress.c: two agreeing preads, never a mapping) along
 * with the state of its processes (the rank and its descendants: T when one of them
 * is stopped, D when one waits in the kernel, else the rank's own letter) and whether
 * they used CPU time or moved bytes since the last look (busy: a tenth of a core or more,
 * or a byte read or written; one scan per
 * tick serves every rank), and whatever changed goes to the launcher in one progress
 * message: adv = 1 when the content changed (that is progress, whatever the writer put
 * there); the process state and busyness on their own are not, they are evidence the
 * launcher's judge weighs (hang.c). A rank's final
 * content is sent just before its exit is reported. The files are removed when the
 * agent ends; their names carry the agent's pid, so the files of an agent that was
 * killed before it could remove them are removed by its clean-up process, or by the
 * next agent on the host when that died too (progress_files.c).
 *
 * Stacks. On a stacks request every live rank goes through, concurrently:
 *   TOOL    eu-stack -p PID, or gdb -p PID -batch 'thread apply all bt' (the first in
 *           PATH), with its output on a pipe in the poll set; killed at the deadline
 *   PYDUMP  for a Python rank started with PYTHONFAULTHANDLER: SIGABRT (then SIGCONT,
 *           should it be stopped; core dumps off first), and the faulthandler's
 *           traceback is taken from the rank's stderr until it exits or a deadline
 *   DONE
 * When every rank is DONE one stacked message carries them all. A probe (the judge's
 * question "who waits inside a collective?", asked before any verdict) stops after
 * TOOL, and takes the stack of the Python process below a rank that is a wrapper
 * (sh -c 'python3 ...'), since the wrapper's own stack says nothing. The tools lead their
 * own process groups and die with the agent (parent-death signal); the agent's reaper
 * collects them like any other child.
 */
#define _GNU_SOURCE /* pipe2, prlimit */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_progress.h"
#include "contain.h"
#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/xalloc.h"
#include "progress_files.h"
#include "dslaunch/proto/proto.h"
#include "dslaunch/common/banned.h"

extern char **environ;

enum { ST_IDLE = 0, ST_TOOL, ST_PYDUMP, ST_DONE };

#define PYDUMP_WAIT 5.0 /* seconds a Python rank gets to print its traceback and die */
#define PART_MAX (DSL_PROTO_MAX_STACK / 2 - 1024) /* tool output, traceback: each */

/* Append what fits of data to b (a dynbuf would drop everything on overflow). */
static void cap_add(struct dsl_dynbuf *b, const void *data, size_t n)
{
    size_t room = b->max > b->len ? b->max - b->len : 0;
    dsl_dynbuf_add(b, data, n < room ? n : room);
}

static void after_tool(struct dsl_agent_progress *p, struct dsl_agent_rank_watch *w, double now);

void dsl_agent_progress_init(struct dsl_agent_progress *p)
{
    memset(p, 0, sizeof(*p));
}

void dsl_agent_progress_setup(struct dsl_agent_progress *p, double tick, int nranks)
{
    p->tick = tick > 0 ? tick : 0;
    p->n = nranks;
    p->r = dsl_xcalloc((size_t)nranks + 1, sizeof(*p->r));
    for (int i = 0; i < nranks; i++) {
        p->r[i].st_fd = -1;
        dsl_dynbuf_init(&p->r[i].st_out, PART_MAX);
        dsl_dynbuf_init(&p->r[i].st_py, PART_MAX);
    }
}

/* ---- progress files ---- */

static int create_file(const char *path)
{
    for (int tries = 0; tries < 2; tries++) {
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EEXIST && tries == 0) {
            unlink(path); /* left by an earlier agent of this run (same id and rank) */
            continue;
        }
        if (fd < 0)
            return -errno;
        int r = ftruncate(fd, DSL_PROGRESS_FILE_SIZE) < 0 ? -errno : 0;
        close(fd);
        if (r < 0)
            unlink(path);
        return r;
    }
    return -EEXIST;
}

void dsl_agent_progress_rank(struct dsl_agent_progress *p, int i, int rank,
                             struct dsl_strvec *env)
{
    struct dsl_agent_rank_watch *w = &p->r[i];
    w->rank = rank;
    const char *pf = dsl_env_get(env, DSL_ENV_PYTHONFAULTHANDLER);
    w->pyfault = pf && pf[0];
    if (!p->tick)
        return;
    const char *id = dsl_env_get(env, DSL_ENV_RUN_ID);
    if (!p->swept) {
        dsl_progress_files_sweep();
        p->swept = 1;
    }
    char *path = dsl_progress_files_path(id, rank, getpid());
    int r = create_file(path);
    if (r < 0) {
        fprintf(stderr, "dslaunch agent: cannot create progress file '%s': %s\n", path,
                strerror(-r));
        free(path);
        return;
    }
    w->path = path;
    dsl_env_set(env, DSL_ENV_PROGRESS_FILE, path);
}

void dsl_agent_progress_started(struct dsl_agent_progress *p, int i, pid_t pid)
{
    p->r[i].pid = pid;
}

/* The state letter of /proc/PID/stat ('R', 'S', 'T' ...), 0 when unreadable. */
static char proc_state(pid_t pid)
{
    struct dsl_procstat st;
    return dsl_contain_read_stat(pid, &st) == 0 ? st.state : 0;
}

/* Bytes the process has read and written (rchar + wchar of /proc/PID/io); 0 when
   unreadable. */
static unsigned long long proc_io(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/io", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    unsigned long long sum = 0;
    for (const char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, "rchar: ", 7) || !strncmp(p, "wchar: ", 7))
            sum += strtoull(p + 7, NULL, 10);
    return sum;
}

/*
 * The state, CPU time and bytes read and written of rank pid's processes, from the
 * scan ps[0..n) (mark: n bytes of scratch): its own state letter, unless one of them
 * is stopped (T) or waits in the kernel (D), which says more about a rank that is a
 * wrapper.
 */
static unsigned long long proc_io(pid_t pid);

static void tree_look(const struct dsl_procstat *ps, int n, char *mark, pid_t pid,
                      char *state, unsigned long long *cpu, unsigned long long *io)
{
    *state = 0;
    *cpu = 0;
    *io = 0;
    if (!ps || n <= 0)
        return;
    dsl_contain_descendants(ps, n, pid, mark);
    char worst = 0;
    for (int i = 0; i < n; i++) {
        if (ps[i].pid == pid) {
            *state = ps[i].state;
        } else if (!mark[i]) {
            continue;
        }
        *cpu += ps[i].cpu;
        *io += proc_io(ps[i].pid);
        if (ps[i].state == 'T' || (ps[i].state == 'D' && worst != 'T'))
            worst = ps[i].state;
    }
    if (worst && *state)
        *state = worst;
}

/*
 * Look at rank w; if anything changed, append an entry to m. A change of the file is
 * progress; so is, while the record names a phase (a checkpoint being written or
 * read), a change of the bytes the rank has moved. ps[0..nps) is this tick's process
 * scan (NULL for the final look), mark nps bytes of scratch.
 */
static void look(struct dsl_agent_rank_watch *w, int final, const struct dsl_procstat *ps,
                 int nps, char *mark, double now, struct dsl_msg *m)
{
    struct dsl_progress_view v;
    int adv = 0;
    if (dsl_progress_read_file(w->path, &v) == 0 && v.form != DSL_PROGRESS_EMPTY &&
        v.hash != w->last.hash) {
        adv = 1;
        w->last = v;
    }
    if (!final && w->last.form == DSL_PROGRESS_RECORD && w->last.phase) {
        unsigned long long io = proc_io(w->pid);
        if (io && io != w->io)
            adv |= w->io != 0; /* the first reading of a phase is a baseline */
        w->io = io;
    } else {
        w->io = 0;
    }
    char st = w->pstate;
    int busy = w->busy;
    if (!final) {
        unsigned long long cpu, io;
        tree_look(ps, nps, mark, w->pid, &st, &cpu, &io);
        if (!st)
            st = proc_state(w->pid);
        /* a tenth of a core or more since the last look (a rank that waits uses
           none; one that computes on a loaded node may get little more than that),
           or bytes read or written (a loader on a slow file system, in state D); the
           first look is a baseline */
        double ticks = (double)sysconf(_SC_CLK_TCK);
        busy = w->t_cpu > 0 && now > w->t_cpu &&
               ((cpu >= w->cpu && (double)(cpu - w->cpu) / ticks >= 0.1 * (now - w->t_cpu)) ||
                io != w->io_all);
        w->cpu = cpu;
        w->io_all = io;
        w->t_cpu = now;
    }
    if (!adv && st == w->pstate && busy == w->busy)
        return;
    w->pstate = st;
    w->busy = busy;
    struct dsl_rank_progress *e = &m->progress[m->nprogress++];
    e->rank = w->rank;
    e->advanced = adv;
    e->pstate = st;
    e->busy = busy;
    e->view = w->last;
}

static void progress_msg(struct dsl_agent_progress *p, struct dsl_msg *m)
{
    dsl_msg_init(m, DSL_MSG_PROGRESS);
    m->progress = dsl_xcalloc((size_t)p->n + 1, sizeof(*m->progress));
}

int dsl_agent_progress_exited(struct dsl_agent_progress *p, int i, struct dsl_msg *m)
{
    struct dsl_agent_rank_watch *w = &p->r[i];
    if (w->exited)
        return 0;
    w->exited = 1;
    if (w->st == ST_TOOL) { /* nothing left to look at: the capture ends now */
        kill(-w->st_pid, SIGKILL);
        cap_add(&w->st_out, "(the rank exited during the capture)\n", 37);
        after_tool(p, w, dsl_now());
    }
    if (!w->path)
        return 0;
    progress_msg(p, m);
    look(w, 1, NULL, 0, NULL, 0, m);
    if (m->nprogress)
        return 1;
    dsl_msg_release(m);
    return 0;
}

/* ---- stacks ---- */

static char *find_tool(const char **name)
{
    static const char *const tools[] = {"eu-stack", "gdb"};
    for (size_t k = 0; k < sizeof(tools) / sizeof(tools[0]); k++) {
        int code;
        char err[DSL_ERR_LEN];
        char *path = dsl_spawn_resolve(tools[k], environ, NULL, &code, err);
        if (path) {
            *name = tools[k];
            return path;
        }
    }
    return NULL;
}

static int start_tool(struct dsl_agent_rank_watch *w, pid_t target, const char *tool,
                      const char *path, double deadline)
{
    static const char *const gdb_args[] = {"-batch", "-nx", "-iex", "set auto-load off", "-ex",
                                           "set pagination off", "-ex", "thread apply all bt",
                                           NULL};
    struct dsl_strvec argv;
    dsl_strvec_init(&argv);
    dsl_strvec_push(&argv, path);
    dsl_strvec_push(&argv, "-p");
    dsl_strvec_pushf(&argv, "%d", (int)target);
    if (!strcmp(tool, "gdb"))
        dsl_strvec_pushv(&argv, gdb_args);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0) {
        dsl_strvec_release(&argv);
        return -errno;
    }
    struct dsl_child_opts co = {
        .path = path,
        .argv = argv.v,
        .fd_in = DSL_SPAWN_DEVNULL,
        .fd_out = fds[1],
        .fd_err = fds[1],
        .new_pgroup = 1,
        .pdeathsig = SIGKILL,
        .close_fds = 1,
    };
    pid_t child;
    char err[DSL_ERR_LEN];
    int r = dsl_spawn_child(&co, &child, err);
    close(fds[1]);
    dsl_strvec_release(&argv);
    if (r < 0) {
        close(fds[0]);
        cap_add(&w->st_out, "(cannot start the stack tool: ", 30);
        cap_add(&w->st_out, err, strlen(err));
        cap_add(&w->st_out, ")\n", 2);
        return r;
    }
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    w->st_fd = fds[0];
    w->st_pid = child;
    w->st_tool = tool;
    w->st_deadline = deadline;
    w->st = ST_TOOL;
    return 0;
}

static int is_python(pid_t pid)
{
    char path[64], exe[4096];
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, exe, sizeof(exe) - 1);
    if (n <= 0)
        return 0;
    exe[n] = '\0';
    const char *base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    return !strncmp(base, "python", 6);
}

/*
 * The Python processes below a rank that is not Python itself (`sh -c 'python3 x.py'`,
 * a wrapper script): at most max of them into py[], the count returned.
 */
static int python_below(pid_t rank, pid_t *py, int max)
{
    struct dsl_procstat *ps = NULL;
    int n = dsl_contain_scan(&ps), k = 0;
    char *mark = dsl_xcalloc((size_t)n + 1, 1);
    dsl_contain_descendants(ps, n, rank, mark);
    for (int i = 0; i < n && k < max; i++)
        if (mark[i] && ps[i].state != 'Z' && is_python(ps[i].pid))
            py[k++] = ps[i].pid;
    free(mark);
    free(ps);
    return k;
}

/*
 * The tool is done (or out of time): the Python dump next, else done. The dump is of
 * the rank when it is Python, else of the Python processes below it, whose tracebacks
 * reach the rank's stderr as theirs is inherited.
 */
static void after_tool(struct dsl_agent_progress *p, struct dsl_agent_rank_watch *w, double now)
{
    if (w->st_fd >= 0) {
        close(w->st_fd);
        w->st_fd = -1;
    }
    w->st = ST_DONE;
    w->st_npy = 0;
    if (w->exited || !w->pyfault || p->probe)
        return;
    pid_t py[DSL_AGENT_PY_MAX];
    int npy = is_python(w->pid) ? (py[0] = w->pid, 1) : python_below(w->pid, py, DSL_AGENT_PY_MAX);
    for (int k = 0; k < npy; k++) {
        struct rlimit none = {0, 0};
        prlimit(py[k], RLIMIT_CORE, &none, NULL); /* the dump is the point, not a core */
        if (kill(py[k], SIGABRT) == 0) {
            kill(py[k], SIGCONT);
            w->st = ST_PYDUMP;
            w->st_deadline = now + PYDUMP_WAIT;
            if (py[k] != w->pid)
                w->st_py_pid[w->st_npy++] = py[k];
        }
    }
}

void dsl_agent_progress_stacks(struct dsl_agent_progress *p, double timeout, int probe)
{
    if (p->capturing) {
        p->probe &= probe; /* a capture asked during a probe gets the Python dump too */
        return;
    }
    p->capturing = 1;
    p->probe = probe;
    p->stack_timeout = timeout > 0 ? timeout : 10;
    const char *tool = NULL;
    char *path = find_tool(&tool);
    double now = dsl_now();
    for (int i = 0; i < p->n; i++) {
        struct dsl_agent_rank_watch *w = &p->r[i];
        dsl_dynbuf_reset(&w->st_out);
        dsl_dynbuf_reset(&w->st_py);
        w->st = ST_DONE;
        if (w->pid <= 0 || w->exited)
            continue;
        if (!path)
            dsl_dynbuf_addstr(&w->st_out, "(no stack tool: install gdb or elfutils' eu-stack)\n");
        pid_t target = w->pid, py[1];
        if (probe && !is_python(w->pid) && python_below(w->pid, py, 1) == 1)
            target = py[0];
        if (!path || start_tool(w, target, tool, path, now + p->stack_timeout) < 0)
            after_tool(p, w, now);
    }
    free(path);
}

size_t dsl_agent_progress_pollfds(struct dsl_agent_progress *p, struct pollfd *pf)
{
    size_t k = 0;
    for (int i = 0; i < p->n; i++)
        if (p->r[i].st == ST_TOOL && p->r[i].st_fd >= 0)
            pf[k++] = (struct pollfd){.fd = p->r[i].st_fd, .events = POLLIN};
    return k;
}

int dsl_agent_progress_on_fd(struct dsl_agent_progress *p, int fd)
{
    for (int i = 0; i < p->n; i++) {
        struct dsl_agent_rank_watch *w = &p->r[i];
        if (w->st != ST_TOOL || w->st_fd != fd)
            continue;
        char buf[16384];
        for (;;) {
            ssize_t n = read(fd, buf, sizeof(buf));
            if (n > 0) {
                cap_add(&w->st_out, buf, (size_t)n); /* past the bound: drained, dropped */
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && errno == EAGAIN)
                return 1;
            after_tool(p, w, dsl_now()); /* EOF: the tool is done */
            return 1;
        }
    }
    return 0;
}

void dsl_agent_progress_stderr(struct dsl_agent_progress *p, int i, const char *line,
                               size_t n)
{
    if (i < 0 || i >= p->n || p->r[i].st != ST_PYDUMP)
        return;
    cap_add(&p->r[i].st_py, line, n);
    cap_add(&p->r[i].st_py, "\n", 1);
}

static void stacked_msg(struct dsl_agent_progress *p, struct dsl_msg *m)
{
    dsl_msg_init(m, DSL_MSG_STACKED);
    m->stack_probe = p->probe;
    m->stacks = dsl_xcalloc((size_t)p->n + 1, sizeof(*m->stacks));
    for (int i = 0; i < p->n; i++) {
        struct dsl_agent_rank_watch *w = &p->r[i];
        struct dsl_rank_stack *s = &m->stacks[m->nstacks++];
        s->rank = w->rank;
        s->pid = (int)w->pid;
        struct dsl_dynbuf t;
        dsl_dynbuf_init(&t, DSL_PROTO_MAX_STACK);
        if (w->pid <= 0) {
            dsl_dynbuf_addstr(&t, "(never started)\n");
        } else if (!w->st_tool && !w->st_out.len && !w->st_py.len) {
            dsl_dynbuf_addstr(&t, "(exited before the capture)\n");
        } else {
            dsl_dynbuf_add(&t, w->st_out.buf, w->st_out.len);
            if (w->st_py.len && w->st_npy) {
                dsl_dynbuf_addstr(&t, "--- Python traceback (faulthandler) of the rank's python");
                for (int k = 0; k < w->st_npy; k++)
                    dsl_dynbuf_addf(&t, "%s %d", k ? "," : " pid", (int)w->st_py_pid[k]);
                dsl_dynbuf_addstr(&t, " ---\n");
                dsl_dynbuf_add(&t, w->st_py.buf, w->st_py.len);
            } else if (w->st_py.len) {
                dsl_dynbuf_addstr(&t, "--- Python traceback (faulthandler) ---\n");
                dsl_dynbuf_add(&t, w->st_py.buf, w->st_py.len);
            }
        }
        s->tool = dsl_xasprintf("%s%s", w->st_tool ? w->st_tool : "none",
                                w->st_py.len ? "+faulthandler" : "");
        s->text = dsl_xstrdup(dsl_dynbuf_str(&t));
        dsl_dynbuf_release(&t);
        w->st_tool = NULL;
        w->st = ST_IDLE;
    }
}

int dsl_agent_progress_poll(struct dsl_agent_progress *p, double now, struct dsl_msg *m)
{
    if (p->capturing) {
        int busy = 0;
        for (int i = 0; i < p->n; i++) {
            struct dsl_agent_rank_watch *w = &p->r[i];
            if (w->st == ST_TOOL && now >= w->st_deadline) {
                kill(-w->st_pid, SIGKILL);
                char note[128];
                snprintf(note, sizeof(note), "(%s gave no complete stack within %.0f s)\n",
                         w->st_tool, p->stack_timeout);
                cap_add(&w->st_out, note, strlen(note));
                after_tool(p, w, now);
            }
            if (w->st == ST_PYDUMP && (w->exited || now >= w->st_deadline))
                w->st = ST_DONE;
            busy += w->st == ST_TOOL || w->st == ST_PYDUMP;
        }
        if (!busy) {
            p->capturing = 0;
            stacked_msg(p, m);
            return 1;
        }
    }
    if (!p->tick || now < p->next_tick)
        return 0;
    p->next_tick = now + p->tick;
    progress_msg(p, m);
    struct dsl_procstat *ps = NULL;
    int live = 0; /* no walk of /proc for ranks that are all gone (a short job's end) */
    for (int i = 0; i < p->n; i++)
        live |= p->r[i].path && p->r[i].pid > 0 && !p->r[i].exited && p->r[i].st != ST_TOOL;
    int nps = live ? dsl_contain_scan(&ps) : 0;
    char *mark = dsl_xcalloc((size_t)(nps > 0 ? nps : 0) + 1, 1);
    for (int i = 0; i < p->n; i++) {
        struct dsl_agent_rank_watch *w = &p->r[i];
        if (w->path && w->pid > 0 && !w->exited && w->st != ST_TOOL)
            look(w, 0, ps, nps, mark, now, m);
    }
    free(mark);
    free(ps);
    if (m->nprogress)
        return 1;
    dsl_msg_release(m);
    return 0;
}

void dsl_agent_progress_release(struct dsl_agent_progress *p)
{
    for (int i = 0; i < p->n; i++) {
        struct dsl_agent_rank_watch *w = &p->r[i];
        if (w->st == ST_TOOL) {
            kill(-w->st_pid, SIGKILL);
            close(w->st_fd);
        }
        if (w->path)
            unlink(w->path);
        free(w->path);
        dsl_dynbuf_release(&w->st_out);
        dsl_dynbuf_release(&w->st_py);
    }
    free(p->r);
    memset(p, 0, sizeof(*p));
}
