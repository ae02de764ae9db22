/*
 * The process table as /proc gives it, for process tracking (contain.c) and the
 * agent's watch of its ranks (agent_progress.c): one process's stat line, every
 * process now, and which of them descend from a given one.
 *
 * A walk is a snapshot taken one file at a time, so processes come and go during it:
 * one gone meanwhile is left out, and a pid reused mid-walk can make a parent chain
 * loop, which is cut (the process counts as not descending). Descent is found by
 * following each process's parent through the pids sorted once, remembering every
 * answer, so a walk of n processes costs n log n.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "contain.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

int dsl_contain_parse_stat(const char *text, struct dsl_procstat *out)
{
    char *end;
    long pid = strtol(text, &end, 10);
    const char *rp = strrchr(text, ')'); /* the command name may hold ')' and spaces */
    /* a pid the agent may signal: kill() of 0 or a negative one (a wrapped cast) would
       reach whole process groups */
    if (end == text || pid <= 0 || pid > INT_MAX || !rp || rp[1] != ' ' || !rp[2])
        return -EINVAL;
    const char *p = rp + 2;
    out->pid = (pid_t)pid;
    out->state = *p;
    /* after the state: ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
       cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime */
    unsigned long long v[19];
    p++;
    for (int i = 0; i < 19; i++) {
        while (*p == ' ')
            p++;
        if (!*p)
            return -EINVAL;
        v[i] = strtoull(p, &end, 10); /* a negative field (priority) is not used */
        if (end == p)
            return -EINVAL;
        p = end;
    }
    if (v[0] > INT_MAX || v[1] > INT_MAX)
        return -EINVAL; /* parent and group are never negative */
    out->ppid = (pid_t)v[0];
    out->pgid = (pid_t)v[1];
    out->start = v[18];
    out->cpu = v[10] + v[11];
    return 0;
}

int dsl_contain_read_stat(pid_t pid, struct dsl_procstat *out)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t got = read(fd, buf, sizeof(buf) - 1);
    int e = errno;
    close(fd);
    if (got < 0)
        return -e;
    buf[got] = '\0';
    return dsl_contain_parse_stat(buf, out);
}

int dsl_contain_scan(struct dsl_procstat **out)
{
    size_t n = 0, cap = 256;
    struct dsl_procstat *p = dsl_xcalloc(cap, sizeof(*p));
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        if (n == cap) {
            cap *= 2;
            p = dsl_xrealloc(p, cap * sizeof(*p));
        }
        if (dsl_contain_read_stat((pid_t)strtol(e->d_name, NULL, 10), &p[n]) == 0)
            n++; /* else gone meanwhile */
    }
    if (d)
        closedir(d);
    *out = p;
    return (int)n;
}

static const struct dsl_procstat *sort_base;

static int by_pid(const void *a, const void *b)
{
    pid_t x = sort_base[*(const int *)a].pid, y = sort_base[*(const int *)b].pid;
    return (x > y) - (x < y);
}

int dsl_contain_descendants(const struct dsl_procstat *p, int n, pid_t root, char *mark)
{
    if (n <= 0)
        return 0;
    int *idx = dsl_xcalloc((size_t)n, sizeof(int));
    int *stack = dsl_xcalloc((size_t)n, sizeof(int));
    char *st = dsl_xcalloc((size_t)n, 1); /* 0 unknown, 1 descends, 2 does not, 3 on stack */
    for (int i = 0; i < n; i++)
        idx[i] = i;
    sort_base = p;
    qsort(idx, (size_t)n, sizeof(int), by_pid);
    int count = 0;
    for (int i = 0; i < n; i++) {
        int top = 0, cur = i;
        char ans;
        for (;;) {
            if (st[cur] == 1 || st[cur] == 2) {
                ans = st[cur];
                break;
            }
            if (st[cur] == 3 || p[cur].pid == root) {
                ans = 2; /* a loop (pids reused mid-scan), or root itself */
                break;
            }
            if (p[cur].ppid == root) {
                st[cur] = 1;
                ans = 1;
                break;
            }
            stack[top++] = cur;
            st[cur] = 3;
            /* the parent, by binary search over the sorted pids */
            int lo = 0, hi = n - 1, j = -1;
            while (lo <= hi) {
                int mid = (lo + hi) / 2;
                pid_t mp = p[idx[mid]].pid;
                if (mp == p[cur].ppid) {
                    j = idx[mid];
                    break;
                }
                if (mp < p[cur].ppid)
                    lo = mid + 1;
                else
                    hi = mid - 1;
            }
            if (j < 0) {
                ans = 2;
                break;
            }
            cur = j;
        }
        for (int k = 0; k < top; k++)
            st[stack[k]] = ans;
    }
    for (int i = 0; i < n; i++) {
        mark[i] = st[i] == 1;
        count += mark[i];
    }
    free(idx);
    free(stack);
    free(st);
    return count;
}
