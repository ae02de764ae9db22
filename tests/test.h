/*
 * A tiny unit-test harness: one header, no library, so every test binary is a single
 * .c file. Each ASSERT prints both sides and aborts the test binary, so CTest sees the
 * failure with its reason.
 *
 *   TEST(hostfile_should_reject_zero_slots) { ... }
 *   TEST_MAIN()
 *
 * RUN_TESTS runs every registered test in the order of the file, or only those whose
 * name contains argv[1]. There is no limit on the number of tests: each TEST carries
 * its own list node, which a constructor appends to the list before main runs.
 */
#ifndef DSLAUNCH_TEST_H
#define DSLAUNCH_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* SplitMix64: a reproducible stream of 64-bit test data, state in *s */
static inline uint64_t dsl_test_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef void (*dsl_test_fn)(void);
struct dsl_test_entry {
    const char *name;
    dsl_test_fn fn;
    struct dsl_test_entry *next;
};
/* the registered tests, first to last; tail points at the last node's next */
static struct dsl_test_entry *dsl_tests;
static struct dsl_test_entry **dsl_tests_tail __attribute__((unused)) = &dsl_tests;

#define TEST(name)                                                             \
    static void test_##name(void);                                             \
    static struct dsl_test_entry dsl_test_entry_##name = {#name, test_##name, NULL}; \
    __attribute__((constructor)) static void register_##name(void)            \
    {                                                                          \
        *dsl_tests_tail = &dsl_test_entry_##name;                              \
        dsl_tests_tail = &dsl_test_entry_##name.next;                          \
    }                                                                          \
    static void test_##name(void)

#define DSL_FAIL_(...)                                                         \
    do {                                                                       \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                        \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
        abort();                                                               \
    } while (0)

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond))                                                           \
            DSL_FAIL_("assertion failed: %s", #cond);                          \
    } while (0)
#define ASSERT_EQ(a, b)                                                        \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_)                                                          \
            DSL_FAIL_("%s == %s failed: %lld != %lld", #a, #b, a_, b_);        \
    } while (0)
#define ASSERT_STR_EQ(a, b)                                                    \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                 \
            DSL_FAIL_("%s == %s failed:\n  '%s'\n  '%s'", #a, #b,              \
                      a_ ? a_ : "(null)", b_ ? b_ : "(null)");                 \
    } while (0)
#define ASSERT_CONTAINS(hay, needle)                                           \
    do {                                                                       \
        const char *h_ = (hay), *n_ = (needle);                                \
        if (!h_ || !strstr(h_, n_))                                            \
            DSL_FAIL_("'%s' does not contain '%s'", h_ ? h_ : "(null)", n_);   \
    } while (0)
#define ASSERT_OK(expr)                                                        \
    do {                                                                       \
        long long r_ = (long long)(expr);                                      \
        if (r_ < 0)                                                            \
            DSL_FAIL_("%s failed: %lld", #expr, r_);                           \
    } while (0)
#define ASSERT_ERR(expr)                                                       \
    do {                                                                       \
        long long r_ = (long long)(expr);                                      \
        if (r_ >= 0)                                                           \
            DSL_FAIL_("%s should have failed but returned %lld", #expr, r_);   \
    } while (0)

static inline int dsl_run_tests(int argc, char **argv)
{
    int ran = 0;
    for (const struct dsl_test_entry *t = dsl_tests; t; t = t->next) {
        if (argc > 1 && !strstr(t->name, argv[1]))
            continue;
        fprintf(stderr, "# %s\n", t->name);
        t->fn();
        ran++;
    }
    fprintf(stderr, "# %d test(s) passed\n", ran);
    return ran ? 0 : 1;
}
#define RUN_TESTS(argc, argv) dsl_run_tests((argc), (argv))
/* the main() of a test binary that needs nothing before or after its tests */
#define TEST_MAIN()                                                            \
    int main(int argc, char **argv)                                            \
    {                                                                          \
        return RUN_TESTS(argc, argv);                                          \
    }

#endif
