/*
 * Folding the same error line of many ranks (errfold.h).
 *
 * Theory of operation. The launcher's loop hands every whole stderr line a rank wrote
 * to dsl_errfold_line() before the console gets it (job_loop.c; --log-dir files are
 * written elsewhere and keep every line). A line that says "error" in any case is
 * remembered with the rank that showed it; the same bytes from another rank later are
 * folded: not shown, the rank marked. Only error lines fold, so ordinary output that
 * happens to match (the same progress line from every rank) stays as written, and
 * what one rank says differently from the others is never hidden. At most
 * DSL_ERRFOLD_LINES distinct lines are remembered and lines past DSL_ERRFOLD_MAXLEN
 * are not, which bounds the memory whatever the ranks print; past either, lines are
 * shown as before. At the end of an attempt dsl_errfold_report() says which ranks wrote
 * the same, once per set of ranks, without repeating the text. Single-threaded: the
 * launcher's loop only.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/xalloc.h"
#include "errfold.h"
#include "dslaunch/common/banned.h"

void dsl_errfold_init(struct dsl_errfold *f, int nranks)
{
    memset(f, 0, sizeof(*f));
    f->nranks = nranks;
}

void dsl_errfold_release(struct dsl_errfold *f)
{
    for (int i = 0; i < f->n; i++) {
        free(f->v[i].text);
        free(f->v[i].same);
    }
    f->n = 0;
}

int dsl_errfold_is_error(const char *line, size_t len)
{
    static const char word[] = "error";
    for (size_t i = 0; i + sizeof(word) - 1 <= len; i++) {
        size_t k = 0;
        while (k < sizeof(word) - 1 && tolower((unsigned char)line[i + k]) == word[k])
            k++;
        if (k == sizeof(word) - 1)
            return 1;
    }
    return 0;
}

int dsl_errfold_line(struct dsl_errfold *f, int rank, const char *line, size_t len)
{
    if (rank < 0 || rank >= f->nranks || len > DSL_ERRFOLD_MAXLEN ||
        !dsl_errfold_is_error(line, len))
        return 0;
    for (int i = 0; i < f->n; i++) {
        struct dsl_errfold_line *e = &f->v[i];
        if (e->len != len || memcmp(e->text, line, len) != 0)
            continue;
        if (e->first == rank)
            return 0; /* a rank repeating itself is shown as it wrote it */
        if (!e->same[rank]) {
            e->same[rank] = 1;
            e->nsame++;
        }
        return 1;
    }
    if (f->n < DSL_ERRFOLD_LINES) {
        struct dsl_errfold_line *e = &f->v[f->n++];
        e->text = dsl_xstrndup(line, len);
        e->len = len;
        e->first = rank;
        e->same = dsl_xcalloc((size_t)f->nranks, 1);
        e->nsame = 0;
    }
    return 0;
}

/* "rank 3" or "ranks 1-3, 5" */
static void add_ranks(struct dsl_dynbuf *b, const unsigned char *same, int nranks, int count)
{
    dsl_dynbuf_addstr(b, count == 1 ? "rank " : "ranks ");
    int sep = 0;
    for (int r = 0; r < nranks; r++) {
        if (!same[r])
            continue;
        int end = r;
        while (end + 1 < nranks && same[end + 1])
            end++;
        if (end > r)
            dsl_dynbuf_addf(b, "%s%d-%d", sep ? ", " : "", r, end);
        else
            dsl_dynbuf_addf(b, "%s%d", sep ? ", " : "", r);
        sep = 1;
        r = end;
    }
}

void dsl_errfold_report(const struct dsl_errfold *f, struct dsl_strvec *out)
{
    unsigned char *done = f->n ? dsl_xcalloc((size_t)f->n, 1) : NULL;
    for (int i = 0; i < f->n; i++) {
        const struct dsl_errfold_line *e = &f->v[i];
        if (done[i] || !e->nsame)
            continue;
        /* the lines folded for the same ranks into the same first rank: one sentence */
        int lines = 0;
        for (int j = i; j < f->n; j++) {
            const struct dsl_errfold_line *o = &f->v[j];
            if (!done[j] && o->first == e->first && o->nsame == e->nsame &&
                !memcmp(o->same, e->same, (size_t)f->nranks)) {
                done[j] = 1;
                lines++;
            }
        }
        struct dsl_dynbuf b;
        dsl_dynbuf_init(&b, 1u << 20);
        add_ranks(&b, e->same, f->nranks, e->nsame);
        if (lines == 1)
            dsl_dynbuf_addf(&b, " wrote the same error line as rank %d (shown once above)",
                            e->first);
        else
            dsl_dynbuf_addf(&b, " wrote the same %d error lines as rank %d (shown once above)",
                            lines, e->first);
        dsl_strvec_push(out, dsl_dynbuf_str(&b));
        dsl_dynbuf_release(&b);
    }
    free(done);
}
