/*
 * Folding the same error line of many ranks (private to src/job). Ranks that read one
 * bad config, or lose one peer, all print the same line; the console shows it once,
 * for the rank that printed it first, and says once at the end which ranks wrote the
 * same. Pure bookkeeping over text, so it is unit-tested without a job.
 */
#ifndef DSLAUNCH_JOB_ERRFOLD_H
#define DSLAUNCH_JOB_ERRFOLD_H

#include <stddef.h>

#include "dslaunch/common/strvec.h"

#define DSL_ERRFOLD_LINES 64     /* distinct error lines remembered; later ones are shown */
#define DSL_ERRFOLD_MAXLEN 4096  /* longer lines are always shown */

struct dsl_errfold_line {
    char *text;                  /* owned */
    size_t len;
    int first;                   /* the rank whose line was shown */
    unsigned char *same;         /* nranks flags: ranks whose identical line was folded */
    int nsame;
};

struct dsl_errfold {
    int nranks;
    struct dsl_errfold_line v[DSL_ERRFOLD_LINES];
    int n;
};

/** Set up f for ranks 0..nranks-1; released by dsl_errfold_release(). */
void dsl_errfold_init(struct dsl_errfold *f, int nranks);
void dsl_errfold_release(struct dsl_errfold *f);
/** Whether a line of error text (it says "error" in any case) is to be shown. */
int dsl_errfold_is_error(const char *line, size_t len);
/**
 * A whole stderr line (without its end) of rank: 1 when another rank already showed
 * the same error line, so this one is folded into it and not to be shown; 0 when it is
 * to be shown (remembered when it is an error line and there is room).
 */
int dsl_errfold_line(struct dsl_errfold *f, int rank, const char *line, size_t len);
/**
 * One sentence per rank whose lines were folded into: "ranks 1-3 wrote the same error
 * line as rank 0 (shown once above)", pushed onto out in the order the lines were
 * first shown. Ranks of different sets (or first ranks) get sentences of their own.
 */
void dsl_errfold_report(const struct dsl_errfold *f, struct dsl_strvec *out);

#endif
