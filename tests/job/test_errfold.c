/* Unit tests of folding the same error line of many ranks (errfold.c). */
#include <stdio.h>
#include <string.h>

#include "job/errfold.h"
#include "test.h"

static int fold(struct dsl_errfold *f, int rank, const char *line)
{
    return dsl_errfold_line(f, rank, line, strlen(line));
}

/* f's report is the n lines of want; f is released. */
static void expect_report(struct dsl_errfold *f, const char *const *want, size_t n)
{
    struct dsl_strvec out;
    dsl_strvec_init(&out);
    dsl_errfold_report(f, &out);
    ASSERT_EQ(out.nr, n);
    for (size_t i = 0; i < n; i++)
        ASSERT_STR_EQ(out.v[i], want[i]);
    dsl_strvec_release(&out);
    dsl_errfold_release(f);
}

TEST(errfold_should_show_an_error_line_once_and_say_which_ranks_wrote_it)
{
    struct dsl_errfold f;
    dsl_errfold_init(&f, 4);
    const char *e = "dstrain: error: bad.json:1:2: expected an integer";
    ASSERT_EQ(fold(&f, 2, e), 0);
    ASSERT_EQ(fold(&f, 0, e), 1);
    ASSERT_EQ(fold(&f, 3, e), 1);
    ASSERT_EQ(fold(&f, 1, e), 1);
    ASSERT_EQ(fold(&f, 1, e), 1); /* a folded rank saying it again: folded again */
    static const char *const want[] = {
        "ranks 0-1, 3 wrote the same error line as rank 2 (shown once above)"};
    expect_report(&f, want, 1);
}

TEST(errfold_should_leave_other_lines_and_a_rank_repeating_itself_alone)
{
    struct dsl_errfold f;
    dsl_errfold_init(&f, 3);
    /* the same text that is no error: shown for every rank */
    ASSERT_EQ(fold(&f, 0, "loading data"), 0);
    ASSERT_EQ(fold(&f, 1, "loading data"), 0);
    /* the rank that showed it, again: shown as it wrote it */
    ASSERT_EQ(fold(&f, 0, "RuntimeError: boom"), 0);
    ASSERT_EQ(fold(&f, 0, "RuntimeError: boom"), 0);
    /* a line that differs by one byte is another line */
    ASSERT_EQ(fold(&f, 1, "RuntimeError: boom!"), 0);
    ASSERT_EQ(fold(&f, 2, "RuntimeError: boom"), 1);
    /* out of range ranks are never folded */
    ASSERT_EQ(fold(&f, 3, "RuntimeError: boom"), 0);
    ASSERT_EQ(fold(&f, -1, "RuntimeError: boom"), 0);
    static const char *const want[] = {
        "rank 2 wrote the same error line as rank 0 (shown once above)"};
    expect_report(&f, want, 1);
}

TEST(errfold_should_tell_an_error_by_the_word_in_any_case)
{
    ASSERT(dsl_errfold_is_error("error", 5));
    ASSERT(dsl_errfold_is_error("ValueError: x", 13));
    ASSERT(dsl_errfold_is_error("FATAL ERROR", 11));
    ASSERT(!dsl_errfold_is_error("erro", 4));
    ASSERT(!dsl_errfold_is_error("errors", 4)); /* only len bytes are read */
    ASSERT(!dsl_errfold_is_error("warning: slow", 13));
}

TEST(errfold_should_group_lines_folded_for_the_same_ranks)
{
    struct dsl_errfold f;
    dsl_errfold_init(&f, 4);
    for (int r = 0; r < 4; r++) {
        fold(&f, r, "error: first");
        fold(&f, r, "error: second");
    }
    fold(&f, 3, "error: third");
    fold(&f, 1, "error: third");
    static const char *const want[] = {
        "ranks 1-3 wrote the same 2 error lines as rank 0 (shown once above)",
        "rank 1 wrote the same error line as rank 3 (shown once above)"};
    expect_report(&f, want, 2);
}

TEST(errfold_should_stay_bounded_and_show_what_it_cannot_remember)
{
    struct dsl_errfold f;
    char line[64];
    dsl_errfold_init(&f, 2);
    for (int i = 0; i < DSL_ERRFOLD_LINES + 10; i++) {
        snprintf(line, sizeof(line), "error %d", i);
        ASSERT_EQ(fold(&f, 0, line), 0);
    }
    ASSERT_EQ(f.n, DSL_ERRFOLD_LINES);
    ASSERT_EQ(fold(&f, 1, "error 0"), 1);
    snprintf(line, sizeof(line), "error %d", DSL_ERRFOLD_LINES + 5);
    ASSERT_EQ(fold(&f, 1, line), 0); /* never remembered: shown */
    static char big[DSL_ERRFOLD_MAXLEN + 2];
    memset(big, 'x', sizeof(big) - 1);
    memcpy(big, "error", 5);
    dsl_errfold_release(&f);
    dsl_errfold_init(&f, 2);
    ASSERT_EQ(fold(&f, 0, big), 0);
    ASSERT_EQ(fold(&f, 1, big), 0); /* too long to remember: shown */
    dsl_errfold_release(&f);
}

TEST_MAIN()
