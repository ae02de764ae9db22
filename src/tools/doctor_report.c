/*
 * The report of `dslaunch doctor` and its pure checks.
 *
 * Theory of operation. doctor.c adds one row per (host, check) as it learns facts; a
 * row is ok, a note (advice that does not fail the run, e.g. NCCL_IB_DISABLE=1 on a
 * node without InfiniBand) or a failure with its remedy. Printing groups the rows by
 * check, in the order checks first appeared, so one glance down a group shows which
 * node differs. The helpers below (interface matching with NCCL's syntax, the majority
 * value, the NTP-style clock offset, dsbench's summary line) touch no I/O and are unit
 * tested in tests/tools/test_doctor.c.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/tools/doctor.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

void dsl_doctor_report_init(struct dsl_doctor_report *r)
{
    memset(r, 0, sizeof(*r));
}

void dsl_doctor_report_release(struct dsl_doctor_report *r)
{
    for (int i = 0; i < r->nrows; i++) {
        free(r->rows[i].host);
        free(r->rows[i].check);
        free(r->rows[i].value);
        free(r->rows[i].remedy);
    }
    free(r->rows);
    dsl_doctor_report_init(r);
}

void dsl_doctor_report_add(struct dsl_doctor_report *r, const char *host, const char *check,
                           enum dsl_doctor_status st, const char *remedy, const char *fmt, ...)
{
    if (r->nrows == r->alloc) {
        r->alloc = r->alloc ? 2 * r->alloc : 32;
        r->rows = dsl_xrealloc(r->rows, (size_t)r->alloc * sizeof(*r->rows));
    }
    struct dsl_doctor_row *row = &r->rows[r->nrows++];
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    row->host = dsl_xstrdup(host);
    row->check = dsl_xstrdup(check);
    row->value = dsl_xstrdup(buf);
    row->remedy = remedy ? dsl_xstrdup(remedy) : NULL;
    row->status = st;
}

int dsl_doctor_report_count(const struct dsl_doctor_report *r, enum dsl_doctor_status st)
{
    int n = 0;
    for (int i = 0; i < r->nrows; i++)
        n += r->rows[i].status == st;
    return n;
}

static const char *status_name(enum dsl_doctor_status st)
{
    switch (st) {
    case DSL_DOCTOR_OK: return "ok";
    case DSL_DOCTOR_NOTE: return "note";
    case DSL_DOCTOR_FAIL: return "FAIL";
    }
    return "?";
}

void dsl_doctor_report_print(const struct dsl_doctor_report *r, FILE *f)
{
    int hw = 8;
    for (int i = 0; i < r->nrows; i++) {
        int l = (int)strlen(r->rows[i].host);
        if (l > hw)
            hw = l < 40 ? l : 40;
    }
    fprintf(f, "%-*s  %-18s %-6s %s\n", hw, "HOST", "CHECK", "STATUS", "VALUE");
    char *done = dsl_xcalloc((size_t)r->nrows + 1, 1);
    for (int i = 0; i < r->nrows; i++) {
        if (done[i])
            continue;
        for (int j = i; j < r->nrows; j++) {
            const struct dsl_doctor_row *row = &r->rows[j];
            if (done[j] || strcmp(row->check, r->rows[i].check) != 0)
                continue;
            done[j] = 1;
            fprintf(f, "%-*s  %-18s %-6s %s\n", hw, row->host, row->check,
                    status_name(row->status), row->value);
            if (row->status != DSL_DOCTOR_OK && row->remedy)
                fprintf(f, "%*s  %s %s\n", hw, "",
                        row->status == DSL_DOCTOR_FAIL ? "fix:" : "note:", row->remedy);
        }
    }
    free(done);
}

/* Does name match one comma-separated entry of list (prefix, or exact when exact)? */
static int list_matches(const char *list, const char *name, int exact)
{
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len > 0) {
            if (exact ? (strlen(name) == len && !strncmp(name, p, len))
                      : !strncmp(name, p, len))
                return 1;
        }
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

int dsl_doctor_ifname_matches(const char *spec, const char *const *names, int n)
{
    int exclude = 0, exact = 0;
    if (*spec == '^') {
        exclude = 1;
        spec++;
    }
    if (*spec == '=') {
        exact = 1;
        spec++;
    }
    for (int i = 0; i < n; i++) {
        int m = list_matches(spec, names[i], exact);
        if (exclude ? !m && strcmp(names[i], "lo") != 0 : m)
            return 1;
    }
    return 0;
}

int dsl_doctor_majority(const char *const *vals, int n)
{
    int best = -1, bestn = 0;
    for (int i = 0; i < n; i++) {
        int c = 0;
        for (int j = 0; j < n; j++)
            c += !strcmp(vals[i], vals[j]);
        if (c > bestn) {
            best = i;
            bestn = c;
        }
    }
    return best;
}

void dsl_doctor_clock_offset(double t0, double t1, double t2, double t3, double *offset,
                             double *bound)
{
    *offset = ((t1 - t0) + (t2 - t3)) / 2;
    double rtt = (t3 - t0) - (t2 - t1);
    *bound = rtt > 0 ? rtt / 2 : 0;
}

int dsl_doctor_parse_busbw(const char *line, double *gbps)
{
    const char *p = strstr(line, "avg busbw");
    if (line[0] != '#' || !p)
        return 0;
    p = strstr(p, "):");
    if (!p)
        return 0;
    char *end;
    double v = strtod(p + 2, &end);
    if (end == p + 2 || !strstr(end, "GB/s") || !isfinite(v) || v < 0)
        return 0; /* "inf", "nan" or a negative rate is no measurement */
    *gbps = v;
    return 1;
}
