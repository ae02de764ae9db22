/*
 * Why a rank died: the evidence a node reads and the words the summary uses.
 *
 * Theory of operation. A rank that was killed by a signal says only the signal; the
 * interesting question is who sent it. The agent answers from three places: its own
 * record of the signals its stop sent to the rank; the rank cgroup's OOM counter
 * (contain.c, cgroup.c), which the kernel raises before it sends the OOM killer's
 * SIGKILL; and, where the rank has no memory cgroup, the kernel log, whose OOM report
 * names the victim's pid (dsl_cause_kmsg_oom_pid). It adds the node's MemAvailable for
 * deaths that look like memory (SIGKILL), read from /proc/meminfo. The launcher turns
 * the resulting struct dsl_exit_cause into one parenthesis of its summary
 * (dsl_cause_describe). Everything here works on text and numbers only.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/proto/cause.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/banned.h"

int dsl_cause_meminfo_available(const char *meminfo, double *bytes)
{
    for (const char *l = meminfo; l && *l;) {
        if (!strncmp(l, "MemAvailable:", 13)) {
            char *end;
            double kib = strtod(l + 13, &end);
            /* the kernel writes an integer; "inf", "nan" or a number past a double
               would reach the summary's sizes as such */
            if (end == l + 13 || !(kib >= 0) || !isfinite(kib * 1024.0))
                return -ENOENT;
            *bytes = kib * 1024.0; /* the file says "kB" and means KiB */
            return 0;
        }
        l = strchr(l, '\n');
        if (l)
            l++;
    }
    return -ENOENT;
}

/* The decimal number at p when it is one (at least one digit), else 0. */
static int pid_at(const char *p)
{
    long v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 10) {
        v = v * 10 + (*p++ - '0');
        digits++;
    }
    return digits && v > 0 && v <= 0x3fffffff ? (int)v : 0;
}

int dsl_cause_kmsg_oom_pid(const char *line)
{
    /* /dev/kmsg records start "prio,seq,usec,flags;"; the message follows the ';' */
    const char *semi = strchr(line, ';');
    const char *comma = strchr(line, ',');
    if (semi && comma && comma < semi && line[0] >= '0' && line[0] <= '9')
        line = semi + 1;
    static const char *const killed[] = {"Killed process ", "reaped process "};
    for (size_t i = 0; i < sizeof(killed) / sizeof(killed[0]); i++) {
        const char *p = strstr(line, killed[i]);
        if (p && (strstr(line, "out of memory") || strstr(line, "Out of memory") ||
                  !strncmp(line, "oom_reaper:", 11)))
            return pid_at(p + strlen(killed[i]));
    }
    if (!strncmp(line, "oom-kill:", 9)) {
        const char *p = strstr(line, ",pid=");
        if (p)
            return pid_at(p + 5);
    }
    return 0;
}

void dsl_cause_size(double bytes, char *buf, size_t n)
{
    static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (bytes < 1024) {
        snprintf(buf, n, "%.0f B", bytes < 0 ? 0 : bytes);
        return;
    }
    int u = -1;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, n, "%.1f %s", bytes, unit[u]);
}

/* Append "; " (unless first) and text to buf. */
static void part(char *buf, size_t n, size_t *o, const char *text)
{
    if (*o >= n)
        return;
    int w = snprintf(buf + *o, n - *o, "%s%s", *o > 2 ? "; " : "", text);
    if (w > 0)
        *o += (size_t)w;
}

void dsl_cause_describe(const struct dsl_exit_cause *c, int sig, char *buf, size_t n)
{
    if (!n)
        return;
    buf[0] = '\0';
    if (!c->known || n < 8)
        return;
    char text[256], a[32], b[32];
    size_t o = 0;
    /* built as " (" + parts + ")"; o > 2 means a part is already there */
    snprintf(buf, n, " (");
    o = 2;
    if (c->oom == DSL_OOM_RANK) {
        snprintf(text, sizeof(text), "%s%s", dsl_signame(sig ? sig : SIGKILL),
                 c->oom_src == DSL_OOMSRC_KMSG ? ", named in the kernel log" : "");
        part(buf, n, &o, text);
    } else if (sig) {
        part(buf, n, &o, c->by_stop ? "sent by dslaunch's stop" : "not sent by dslaunch");
    }
    if (c->oom == DSL_OOM_OTHER) {
        snprintf(text, sizeof(text), "the OOM killer ended %d other process%s of its cgroup",
                 c->oom_kills > 0 ? c->oom_kills : 1, c->oom_kills > 1 ? "es" : "");
        part(buf, n, &o, text);
    }
    if (c->oom && (c->mem_limit > 0 || c->mem_peak > 0)) {
        dsl_cause_size(c->mem_limit, a, sizeof(a));
        dsl_cause_size(c->mem_peak, b, sizeof(b));
        if (c->mem_limit > 0 && c->mem_peak > 0)
            snprintf(text, sizeof(text), "memory limit %s of its cgroup, peak %s", a, b);
        else if (c->mem_limit > 0)
            snprintf(text, sizeof(text), "memory limit %s of its cgroup", a);
        else
            snprintf(text, sizeof(text), "no memory limit on its cgroup, peak %s", b);
        part(buf, n, &o, text);
    }
    if (c->mem_avail > 0) {
        dsl_cause_size(c->mem_avail, a, sizeof(a));
        snprintf(text, sizeof(text), "node had %s available", a);
        part(buf, n, &o, text);
    }
    if (o <= 2) {
        buf[0] = '\0';
        return;
    }
    if (o + 2 <= n) {
        buf[o] = ')';
        buf[o + 1] = '\0';
    } else {
        buf[n - 2] = ')';
        buf[n - 1] = '\0';
    }
}
