/*
 * Cgroups for ranks: finding the hierarchies, making a rank's cgroups, signalling and
 * killing what is in them, reading their memory facts, removing them.
 *
 * Theory of operation. A machine mounts the unified (v2) tree, v1 controllers each on
 * a mount of its own, or both (v1 controllers beside a v2 tree that has none of them,
 * as systemd's "hybrid" layout and many container hosts do). This process's place in a
 * hierarchy is its line in /proc/self/cgroup ("4:memory:/a/b", "0::/a/b"), and where
 * that hierarchy is mounted is a line of /proc/self/mountinfo (fstype cgroup with the
 * controller among its options, or cgroup2); the directory is the mount point plus the
 * path below the mount's root. dsl_cghost_detect() does that for the v2 tree and the v1
 * memory, pids and freezer controllers, and takes each where this process may write
 * (faccessat: no permission and a read-only mount both show there), without making
 * anything: no probe directory per launch. Jobs go below the agent's own cgroup:
 * <own>/dslaunch-<run_id>/rank<N>.
 *
 * In the v2 tree a child has the memory controller only when its parent lists memory
 * in cgroup.subtree_control, and a cgroup that holds processes may not enable it (the
 * "no internal processes" rule; the root is exempt). The agent's own cgroup holds the
 * agent, so ranks get v2 memory only where the own cgroup already delegates it (the
 * agent runs in the root, or in a cgroup set up so). Jobs never go above the own
 * cgroup: that would take the ranks out of the limits and accounting of whatever runs
 * the agent (a service, a container, the rank of an outer dslaunch job). Without v2
 * memory the v2 tree is still used for membership and cgroup.kill, and memory is v1's
 * or nobody's.
 *
 * Joining: a rank is born in its v2 cgroup (clone3 with CLONE_INTO_CGROUP on an open
 * fd of the directory, spawn.c) and moves itself into its v1 ones by writing "0" into
 * their "tasks" files as the first step of the forked child. Both are for speed: a write
 * to cgroup.procs moves a thread group and takes the kernel's global
 * cgroup_threadgroup_rwsem for writing, which waits for an RCU grace period, 5-14 ms
 * measured here, the largest part of a launch of two /bin/true ranks; a thread moving
 * itself through "tasks" and a process born in its cgroup do not. The forked child has
 * one thread, so moving it moves the process, and both happen before the exec, as the
 * cgroup.procs writes did. Where clone3 is refused the child writes the v2
 * cgroup.procs instead.
 *
 * Killing: cgroup.kill (v2, kernel 5.14+) kills every member at once, new forks
 * included. Otherwise the members are frozen (v1 freezer, or v2 cgroup.freeze), listed,
 * SIGKILLed and thawed, so nothing forks between the listing and the kill; without a
 * freezer what is listed is killed and the caller repeats until the cgroup is empty.
 * A rank's cgroups are removed with rmdir, which the kernel refuses while a process
 * is inside, so removal can never lose track of a live process.
 */
#define _GNU_SOURCE /* O_CLOEXEC on older libcs, DT_DIR */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define CG_FILE_MAX (16u << 20) /* cgroup.procs of a huge job still fits */

static const char *const kind_ctl[DSL_CG_NKIND] = {
    [DSL_CG_V2] = "", [DSL_CG_MEMORY] = "memory", [DSL_CG_PIDS] = "pids",
    [DSL_CG_FREEZER] = "freezer",
};

/* ---- pure helpers ---- */

int dsl_cgroup_has_word(const char *list, const char *word, char sep)
{
    size_t wl = strlen(word);
    const char *p = list;
    while (p && *p) {
        const char *e = strchr(p, sep);
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len && (p[len - 1] == '\n' || p[len - 1] == ' '))
            len--;
        if (len == wl && !strncmp(p, word, wl))
            return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* Copy field i (space-separated) of line into out; mountinfo escapes are undone. */
static int field(const char *line, int i, char *out, size_t n)
{
    const char *p = line;
    for (int k = 0; k < i; k++) {
        p = strchr(p, ' ');
        if (!p)
            return -1;
        p++;
    }
    size_t o = 0;
    while (*p && *p != ' ' && *p != '\n') {
        char c = *p++;
        if (c == '\\' && p[0] >= '0' && p[0] <= '3' && p[1] >= '0' && p[1] <= '7' &&
            p[2] >= '0' && p[2] <= '7') {
            c = (char)((p[0] - '0') * 64 + (p[1] - '0') * 8 + (p[2] - '0'));
            p += 3;
        }
        if (o + 1 >= n)
            return -1;
        out[o++] = c;
    }
    out[o] = '\0';
    return 0;
}

/* The path of this process in the hierarchy of controller ("" = v2) from /proc/self/cgroup. */
static int self_path(const char *self_cgroup, const char *controller, char *out, size_t n)
{
    for (const char *l = self_cgroup; l && *l;) {
        const char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        const char *c1 = memchr(l, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - l)) : NULL;
        if (c2) {
            char ctls[256];
            size_t cl = (size_t)(c2 - c1 - 1);
            int match;
            if (cl < sizeof(ctls)) {
                memcpy(ctls, c1 + 1, cl);
                ctls[cl] = '\0';
                match = controller[0] ? dsl_cgroup_has_word(ctls, controller, ',')
                                      : (cl == 0 && !strncmp(l, "0:", 2));
            } else {
                match = 0;
            }
            size_t pl = len - (size_t)(c2 + 1 - l);
            if (match) {
                if (pl + 1 > n)
                    return -ENAMETOOLONG;
                memcpy(out, c2 + 1, pl);
                out[pl] = '\0';
                return 0;
            }
        }
        l = end ? end + 1 : NULL;
    }
    return -ENOENT;
}

int dsl_cgroup_locate(const char *mountinfo, const char *self_cgroup, const char *controller,
                      char *dir, size_t n)
{
    char path[4096];
    int r = self_path(self_cgroup, controller, path, sizeof(path));
    if (r < 0)
        return r;
    for (const char *l = mountinfo; l && *l;) {
        const char *end = strchr(l, '\n');
        char root[4096], mnt[4096], fstype[64], opts[1024];
        /* "id parent maj:min root mountpoint options [optional...] - fstype source super" */
        const char *dash = strstr(l, " - ");
        if (dash && (!end || dash < end) && field(l, 3, root, sizeof(root)) == 0 &&
            field(l, 4, mnt, sizeof(mnt)) == 0 && field(dash + 3, 0, fstype, sizeof(fstype)) == 0 &&
            field(dash + 3, 2, opts, sizeof(opts)) == 0) {
            int match = controller[0]
                            ? !strcmp(fstype, "cgroup") && dsl_cgroup_has_word(opts, controller, ',')
                            : !strcmp(fstype, "cgroup2");
            size_t rl = strlen(root);
            const char *rel = NULL;
            if (match && !strcmp(root, "/"))
                rel = path;
            else if (match && !strncmp(path, root, rl) && (path[rl] == '/' || path[rl] == '\0'))
                rel = path + rl;
            if (rel) {
                if (!strcmp(rel, "/"))
                    rel = "";
                int w = snprintf(dir, n, "%s%s", mnt, rel);
                if (w < 0 || (size_t)w >= n)
                    return -ENAMETOOLONG;
                return 0;
            }
        }
        l = end ? end + 1 : NULL;
    }
    return -ENOENT;
}

/* ---- files ---- */

/* dir/name into path (size len); 0, or -ENAMETOOLONG: a cut path names another file */
static int join(char *path, size_t len, const char *dir, const char *name)
{
    int n = snprintf(path, len, "%s/%s", dir, name);
    return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

static int write_file(const char *dir, const char *name, const char *val)
{
    char path[4200];
    if (join(path, sizeof(path), dir, name) < 0)
        return -ENAMETOOLONG;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t w = write(fd, val, strlen(val));
    int r = w < 0 ? -errno : 0;
    close(fd);
    return r;
}

/* The file dir/name into b (released by the caller). */
static int read_file(const char *dir, const char *name, struct dsl_dynbuf *b)
{
    char path[4200];
    dsl_dynbuf_init(b, CG_FILE_MAX);
    if (join(path, sizeof(path), dir, name) < 0)
        return -ENAMETOOLONG;
    return dsl_dynbuf_load_file(b, path);
}

/* The number after "key " in a "key value" per line file (memory.events, oom_control). */
static long long keyed(const char *text, const char *key)
{
    size_t kl = strlen(key);
    for (const char *l = text; l && *l;) {
        if (!strncmp(l, key, kl) && l[kl] == ' ')
            return strtoll(l + kl + 1, NULL, 10);
        l = strchr(l, '\n');
        if (l)
            l++;
    }
    return -1;
}

static double number_file(const char *dir, const char *name)
{
    struct dsl_dynbuf b;
    double v = -1;
    if (read_file(dir, name, &b) == 0) {
        const char *s = dsl_dynbuf_str(&b);
        if (!strncmp(s, "max", 3))
            v = 0; /* v2: no limit */
        else if (s[0] >= '0' && s[0] <= '9')
            v = strtod(s, NULL);
    }
    dsl_dynbuf_release(&b);
    return v;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- the host ---- */

int dsl_cgroup_kernel_at_least(const char *release, int major, int minor)
{
    char *end;
    long ma = strtol(release, &end, 10);
    if (end == release || *end != '.')
        return 0;
    const char *p = end + 1;
    long mi = strtol(p, &end, 10);
    if (end == p)
        return 0;
    return ma > major || (ma == major && mi >= minor);
}

/*
 * Whether jobs can be made in dir, without making anything: this process may write
 * there (no permission and a read-only mount both fail this). It used to be proven by
 * making and removing a probe directory in every hierarchy at each launch, which cost
 * a mkdir and an rmdir each (milliseconds on a loaded node). A wrong "yes" (a
 * controller's limit on descendants, a security module) costs nothing more: the job's
 * directories are then refused, and dsl_contain_start() falls back to process
 * tracking, as it always did when a creation failed.
 */
static int can_make_in(const char *dir)
{
    return faccessat(AT_FDCWD, dir, W_OK | X_OK, AT_EACCESS) == 0;
}

/* v2 cgroup.kill and cgroup.freeze: files of every non-root cgroup that has them, so the
   own cgroup's say; the root has neither, and there the kernel's version says (5.14,
   5.2). A wrong guess costs nothing but the mode's wording: a kill falls back to the
   freezer, and a freeze to a signal per listed process, when the write fails. */
static void v2_features(const char *dir, int *has_kill, int *has_freeze)
{
    char f[4300];
    struct stat st;
    snprintf(f, sizeof(f), "%s/cgroup.type", dir); /* every non-root v2 cgroup has it */
    if (stat(f, &st) == 0) {
        snprintf(f, sizeof(f), "%s/cgroup.kill", dir);
        *has_kill = stat(f, &st) == 0;
        snprintf(f, sizeof(f), "%s/cgroup.freeze", dir);
        *has_freeze = stat(f, &st) == 0;
        return;
    }
    struct utsname u;
    if (uname(&u) == 0) {
        *has_kill = dsl_cgroup_kernel_at_least(u.release, 5, 14);
        *has_freeze = dsl_cgroup_kernel_at_least(u.release, 5, 2);
    }
}

static int delegates_memory(const char *dir)
{
    struct dsl_dynbuf b;
    int yes = read_file(dir, "cgroup.subtree_control", &b) == 0 &&
              dsl_cgroup_has_word(dsl_dynbuf_str(&b), "memory", ' ');
    dsl_dynbuf_release(&b);
    return yes;
}

void dsl_cghost_detect(struct dsl_cghost *h, unsigned want)
{
    memset(h, 0, sizeof(*h));
    struct dsl_dynbuf mi, sc;
    dsl_dynbuf_init(&mi, CG_FILE_MAX);
    dsl_dynbuf_init(&sc, 1u << 20);
    if (dsl_dynbuf_load_file(&mi, "/proc/self/mountinfo") == 0 &&
        dsl_dynbuf_load_file(&sc, "/proc/self/cgroup") == 0) {
        for (int k = 0; k < DSL_CG_NKIND; k++) {
            if (!(want & (k == DSL_CG_V2 ? DSL_CG_WANT_V2 : DSL_CG_WANT_V1)))
                continue;
            char dir[4096];
            if (dsl_cgroup_locate(dsl_dynbuf_str(&mi), dsl_dynbuf_str(&sc), kind_ctl[k], dir,
                                  sizeof(dir)) < 0)
                continue;
            if (!can_make_in(dir))
                continue;
            h->own[k] = dsl_xstrdup(dir);
            if (k == DSL_CG_V2) {
                v2_features(dir, &h->v2_kill, &h->v2_freeze);
                h->v2_memory = delegates_memory(dir);
            }
        }
    }
    dsl_dynbuf_release(&mi);
    dsl_dynbuf_release(&sc);
    if (h->v2_memory && h->own[DSL_CG_MEMORY]) {
        /* cannot happen on one kernel (a controller lives in one hierarchy); be safe */
        free(h->own[DSL_CG_MEMORY]);
        h->own[DSL_CG_MEMORY] = NULL;
    }
    /* the mode line, as --check shows it */
    size_t o = 0;
    int v1 = 0;
    for (int k = DSL_CG_MEMORY; k < DSL_CG_NKIND; k++)
        if (h->own[k])
            o += (size_t)snprintf(h->mode + o, sizeof(h->mode) - o, "%s%s",
                                  v1++ ? "+" : "cgroup v1 ", kind_ctl[k]);
    if (h->own[DSL_CG_V2]) {
        char extra[64];
        snprintf(extra, sizeof(extra), "%s%s%s", h->v2_memory ? "memory" : "",
                 h->v2_memory && h->v2_kill ? ", " : "", h->v2_kill ? "cgroup.kill" : "");
        snprintf(h->mode + o, sizeof(h->mode) - o, "%s%s%s%s", v1 ? ", v2" : "cgroup v2",
                 extra[0] ? " (" : "", extra, extra[0] ? ")" : "");
    }
    if (!h->mode[0])
        snprintf(h->mode, sizeof(h->mode), "process tracking");
}

int dsl_cghost_memory(const struct dsl_cghost *h)
{
    return h->own[DSL_CG_MEMORY] || (h->own[DSL_CG_V2] && h->v2_memory);
}

int dsl_cghost_usable(const struct dsl_cghost *h)
{
    for (int k = 0; k < DSL_CG_NKIND; k++)
        if (h->own[k])
            return 1;
    return 0;
}

void dsl_cghost_remove_job(const struct dsl_cghost *h, const char *job)
{
    for (int k = 0; k < DSL_CG_NKIND; k++)
        if (h->own[k]) {
            char p[4200];
            if (join(p, sizeof(p), h->own[k], job) == 0)
                rmdir(p); /* fails while another agent of the job on this machine still has ranks */
        }
}

void dsl_cghost_release(struct dsl_cghost *h)
{
    for (int k = 0; k < DSL_CG_NKIND; k++)
        free(h->own[k]);
    memset(h, 0, sizeof(*h));
}

/* ---- a rank's cgroups ---- */

int dsl_cgrank_create(struct dsl_cgrank *r, const struct dsl_cghost *h, const char *job,
                      int rank, unsigned long long memory_limit, char *err)
{
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    for (int k = 0; k < DSL_CG_NKIND; k++) {
        if (!h->own[k])
            continue;
        char *jd = dsl_xasprintf("%s/%s", h->own[k], job);
        char *rd = dsl_xasprintf("%s/rank%d", jd, rank);
        int rc = 0;
        /* another agent of the job on this machine may remove the job directory the
           moment its own ranks are done: make it again then */
        for (int tries = 0; tries < 5; tries++) {
            rc = 0;
            if (mkdir(jd, 0755) < 0 && errno != EEXIST) {
                rc = -errno;
                break;
            }
            if (k == DSL_CG_V2 && h->v2_memory)
                write_file(jd, "cgroup.subtree_control", "+memory");
            if (mkdir(rd, 0755) == 0 || errno == EEXIST)
                break;
            rc = -errno;
            if (rc != -ENOENT)
                break;
        }
        if (rc == 0 && memory_limit && (k == DSL_CG_MEMORY || (k == DSL_CG_V2 && h->v2_memory))) {
            char v[32];
            snprintf(v, sizeof(v), "%llu", memory_limit);
            rc = write_file(rd, k == DSL_CG_V2 ? "memory.max" : "memory.limit_in_bytes", v);
            if (rc < 0) {
                dsl_seterr(err, rc, "cannot set the memory limit of cgroup '%s': %s", rd,
                           strerror(-rc));
                rmdir(rd);
            }
        } else if (rc < 0) {
            dsl_seterr(err, rc, "cannot create cgroup '%s': %s", rd, strerror(-rc));
        }
        free(jd);
        if (rc < 0) {
            free(rd);
            dsl_cgrank_remove(r);
            dsl_cgrank_release(r);
            return rc;
        }
        r->dir[k] = rd;
        if (k == DSL_CG_V2) {
            r->fd_procs = dsl_xasprintf("%s/cgroup.procs", rd);
            r->fd = open(rd, O_PATH | O_DIRECTORY | O_CLOEXEC);
            if (r->fd < 0)
                r->procs[r->nprocs++] = dsl_xstrdup(r->fd_procs);
        } else {
            /* "tasks" unless only cgroup.procs was made writable (a delegation to a
               user may chown cgroup.procs alone) */
            char *t = dsl_xasprintf("%s/tasks", rd);
            if (faccessat(AT_FDCWD, t, W_OK, AT_EACCESS) < 0) {
                free(t);
                t = dsl_xasprintf("%s/cgroup.procs", rd);
            }
            r->procs[r->nprocs++] = t;
        }
    }
    return 0;
}

/* The directory whose cgroup.procs lists the rank's processes. */
static const char *primary(const struct dsl_cgrank *r)
{
    for (int k = 0; k < DSL_CG_NKIND; k++)
        if (r->dir[k])
            return r->dir[k];
    return NULL;
}

/* Call fn(sub, depth + 1, arg) for each cgroup directly below dir; below 16 levels it
 * stops, which bounds the recursion of the walks built on it. */
static void each_child(const char *dir, int depth,
                       void (*fn)(const char *sub, int depth, void *arg), void *arg)
{
    DIR *d = depth < 16 ? opendir(dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_type != DT_DIR || e->d_name[0] == '.')
            continue;
        char sub[4400];
        if (join(sub, sizeof(sub), dir, e->d_name) == 0)
            fn(sub, depth + 1, arg);
    }
    if (d)
        closedir(d);
}

/*
 * Call fn for every pid in dir/cgroup.procs and in the cgroups below it (a rank may run
 * its own dslaunch, whose ranks are then in cgroups inside this one: cgroup.procs lists
 * direct members only). Returns how many, or -errno when dir cannot be read.
 */
static int each_pid_at(const char *dir, void (*fn)(pid_t pid, void *arg), void *arg, int depth);

struct pid_walk {
    void (*fn)(pid_t pid, void *arg);
    void *arg;
    int n;
};

static void pid_walk_below(const char *sub, int depth, void *arg)
{
    struct pid_walk *w = arg;
    int k = each_pid_at(sub, w->fn, w->arg, depth);
    if (k > 0)
        w->n += k;
}

static int each_pid_at(const char *dir, void (*fn)(pid_t pid, void *arg), void *arg, int depth)
{
    struct dsl_dynbuf b;
    int r = read_file(dir, "cgroup.procs", &b);
    if (r < 0) {
        dsl_dynbuf_release(&b);
        return r;
    }
    struct pid_walk w = {fn, arg, 0};
    each_child(dir, depth, pid_walk_below, &w);
    int n = w.n;
    for (const char *p = dsl_dynbuf_str(&b); *p;) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (pid > 0) {
            n++;
            if (fn)
                fn((pid_t)pid, arg);
        }
        p = end;
        while (*p == '\n')
            p++;
    }
    dsl_dynbuf_release(&b);
    return n;
}

static int each_pid(const char *dir, void (*fn)(pid_t pid, void *arg), void *arg)
{
    return each_pid_at(dir, fn, arg, 0);
}

int dsl_cgrank_count(const struct dsl_cgrank *r)
{
    const char *d = primary(r);
    return d ? each_pid(d, NULL, NULL) : 0;
}

struct sig_arg {
    int sig, n;
    pid_t skip_pgid;
};

static void sig_one(pid_t pid, void *arg)
{
    struct sig_arg *a = arg;
    if (a->skip_pgid > 0 && getpgid(pid) == a->skip_pgid)
        return;
    if (kill(pid, a->sig) == 0)
        a->n++;
}

int dsl_cgrank_signal(const struct dsl_cgrank *r, int sig, pid_t skip_pgid)
{
    struct sig_arg a = {sig, 0, skip_pgid};
    const char *d = primary(r);
    if (d)
        each_pid(d, sig_one, &a);
    return a.n;
}

/* Freeze dir (v1 freezer.state or v2 cgroup.freeze), kill its members, thaw it. */
static void freeze_kill(const char *dir, int v2)
{
    const char *file = v2 ? "cgroup.freeze" : "freezer.state";
    if (write_file(dir, file, v2 ? "1" : "FROZEN") == 0) {
        /* bounded: a task in uninterruptible sleep freezes only when it wakes */
        for (int i = 0; i < 100; i++) {
            struct dsl_dynbuf b;
            int frozen = 0;
            if (read_file(dir, v2 ? "cgroup.events" : "freezer.state", &b) == 0)
                frozen = v2 ? keyed(dsl_dynbuf_str(&b), "frozen") == 1
                            : !strncmp(dsl_dynbuf_str(&b), "FROZEN", 6);
            dsl_dynbuf_release(&b);
            if (frozen)
                break;
            nap_ms(2);
        }
    }
    struct sig_arg a = {SIGKILL, 0, 0};
    each_pid(dir, sig_one, &a);
    write_file(dir, file, v2 ? "0" : "THAWED"); /* the killed tasks die as they thaw */
}

void dsl_cgrank_kill(const struct dsl_cgrank *r, const struct dsl_cghost *h)
{
    if (r->dir[DSL_CG_V2] && h->v2_kill && write_file(r->dir[DSL_CG_V2], "cgroup.kill", "1") == 0)
        return;
    if (r->dir[DSL_CG_FREEZER]) {
        freeze_kill(r->dir[DSL_CG_FREEZER], 0);
        return;
    }
    if (r->dir[DSL_CG_V2] && h->v2_freeze) {
        freeze_kill(r->dir[DSL_CG_V2], 1);
        return;
    }
    dsl_cgrank_signal(r, SIGKILL, 0);
}

void dsl_cgrank_memory(const struct dsl_cgrank *r, struct dsl_cgmem *m)
{
    m->oom_kills = m->failcnt = -1;
    m->limit = m->peak = -1;
    struct dsl_dynbuf b;
    if (r->dir[DSL_CG_MEMORY]) {
        const char *d = r->dir[DSL_CG_MEMORY];
        if (read_file(d, "memory.oom_control", &b) == 0)
            m->oom_kills = keyed(dsl_dynbuf_str(&b), "oom_kill");
        dsl_dynbuf_release(&b);
        m->limit = number_file(d, "memory.limit_in_bytes");
        if (m->limit >= 4611686018427387904.0) /* v1 says "no limit" with a huge number */
            m->limit = 0;
        m->peak = number_file(d, "memory.max_usage_in_bytes");
        double f = number_file(d, "memory.failcnt");
        m->failcnt = f < 0 ? -1 : (long long)f;
    } else if (r->dir[DSL_CG_V2]) {
        const char *d = r->dir[DSL_CG_V2];
        if (read_file(d, "memory.events", &b) == 0)
            m->oom_kills = keyed(dsl_dynbuf_str(&b), "oom_kill");
        dsl_dynbuf_release(&b);
        m->limit = number_file(d, "memory.max");
        m->peak = number_file(d, "memory.peak"); /* kernel 5.19 and later */
    }
}

/* rmdir dir after the (empty) cgroups below it; the kernel refuses a populated one. */
static int rmdir_tree(const char *dir, int depth);

static void rmdir_below(const char *sub, int depth, void *arg)
{
    (void)arg;
    rmdir_tree(sub, depth);
}

static int rmdir_tree(const char *dir, int depth)
{
    each_child(dir, depth, rmdir_below, NULL);
    return rmdir(dir);
}

int dsl_cgrank_remove(struct dsl_cgrank *r)
{
    int rc = 0;
    if (r->fd >= 0) {
        close(r->fd);
        r->fd = -1;
    }
    for (int k = 0; k < DSL_CG_NKIND; k++) {
        if (!r->dir[k])
            continue;
        if (rmdir_tree(r->dir[k], 0) == 0 || errno == ENOENT) {
            free(r->dir[k]);
            r->dir[k] = NULL;
        } else if (!rc) {
            rc = -errno;
        }
    }
    return rc;
}

void dsl_cgrank_release(struct dsl_cgrank *r)
{
    if (r->fd >= 0)
        close(r->fd);
    for (int k = 0; k < DSL_CG_NKIND; k++)
        free(r->dir[k]);
    for (int i = 0; i < r->nprocs; i++)
        free(r->procs[i]);
    free(r->fd_procs);
    memset(r, 0, sizeof(*r));
    r->fd = -1;
}
