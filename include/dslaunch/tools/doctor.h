/*
 * `dslaunch doctor`: run the handshake and more on every node of a hostfile and print
 * one table of checks, with a remedy line for every problem (docs/doctor.md).
 *
 * doctor.c drives it (options, the job machinery in inspect mode, the diag probe, the
 * checks, the output); doctor_bench.c runs the all-reduce through dsbench;
 * doctor_report.c holds the report (rows, table) and the pure checks, which the unit
 * tests exercise directly.
 */
#ifndef DSLAUNCH_DOCTOR_H
#define DSLAUNCH_DOCTOR_H

#include <stdio.h>

#include "dslaunch/common/strvec.h"

/** `dslaunch doctor [options] [program args...]`; argv[0] is "doctor". Exit code. */
int dsl_doctor_main(int argc, char **argv);

enum dsl_doctor_status {
    DSL_DOCTOR_OK = 0,
    DSL_DOCTOR_NOTE, /* advice; does not fail the run */
    DSL_DOCTOR_FAIL, /* a problem: the run exits 1 */
};

struct dsl_doctor_row {
    char *host;   /* host label, or "cluster" for checks of the whole job (owned) */
    char *check;  /* short name: "dslaunch", "kernel", "master port", ... (owned) */
    char *value;  /* what was found (owned) */
    char *remedy; /* what to do about it; NULL for ok rows (owned) */
    enum dsl_doctor_status status;
};

/** The rows in the order they were added. Owns every row and its strings. */
struct dsl_doctor_report {
    struct dsl_doctor_row *rows;
    int nrows, alloc;
};

void dsl_doctor_report_init(struct dsl_doctor_report *r);
void dsl_doctor_report_release(struct dsl_doctor_report *r);
/** Add a row; remedy may be NULL (copied). value is a printf format. */
void dsl_doctor_report_add(struct dsl_doctor_report *r, const char *host, const char *check,
                           enum dsl_doctor_status st, const char *remedy, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/** Number of rows with status st. */
int dsl_doctor_report_count(const struct dsl_doctor_report *r, enum dsl_doctor_status st);
/**
 * Print the table, grouped by check in first-seen order (so the nodes' values of one
 * check stand together), each non-ok row followed by its "fix:" or "note:" line.
 */
void dsl_doctor_report_print(const struct dsl_doctor_report *r, FILE *f);

/**
 * Would NCCL select some interface of a node under NCCL_SOCKET_IFNAME=spec? spec is
 * NCCL's syntax: comma-separated prefixes, a leading '^' excludes them, a leading '='
 * (after '^' if any) asks for exact names. names holds the node's interface names.
 */
int dsl_doctor_ifname_matches(const char *spec, const char *const *names, int n);

/** Index of the value most entries have (ties: the earliest); -1 if n == 0. */
int dsl_doctor_majority(const char *const *vals, int n);

/**
 * Clock offset of a node against the launcher, NTP style: t0 request sent and t3 reply
 * seen (launcher's clock), t1 request received and t2 reply made (node's clock).
 * *offset = node - launcher; *bound = half the round trip without the node's work.
 */
void dsl_doctor_clock_offset(double t0, double t1, double t2, double t3, double *offset,
                             double *bound);

/**
 * The all-reduce of doctor (doctor_bench.c): the bundled dsbench run as a normal job by a
 * child dslaunch with the user's launcher options. Every member is owned by the struct
 * and freed by dsl_doctor_bench_release(), which leaves it ready for another run.
 */
struct dsl_doctor_bench {
    int ran, ok, code;       /* code: the child's exit status (128+signal if killed) */
    double busbw;            /* GB/s from dsbench's "# avg busbw" line */
    const char *backend;     /* "tcp" or "nccl" (static) */
    struct dsl_strvec table; /* dsbench's result lines */
    struct dsl_strvec tail;  /* last stderr lines; the first "error:" line comes last */
    char *cmdline;           /* the command, to run it by hand */
};

void dsl_doctor_bench_init(struct dsl_doctor_bench *b);
void dsl_doctor_bench_release(struct dsl_doctor_bench *b);
/**
 * Run `SELF_EXE OPTS... --no-prefix dsbench -b 1M -e 16M -f 4 -o allreduce -w 2 -n 5
 * --backend BACKEND` (dsbench beside self_exe), capture its output, and fill b. opts is
 * NULL-terminated. Bounded by DSL_DOCTOR_BENCH_TIMEOUT s (then SIGTERM to the child,
 * which stops its ranks). ok is set only for exit 0 with a bandwidth line.
 */
#define DSL_DOCTOR_BENCH_TIMEOUT 120.0
void dsl_doctor_bench_run(struct dsl_doctor_bench *b, const char *self_exe, char *const *opts,
                          const char *backend);

/** Parse dsbench's "# avg busbw (...): X GB/s" line into *gbps. 1 if it was one, else 0. */
int dsl_doctor_parse_busbw(const char *line, double *gbps);

#endif
