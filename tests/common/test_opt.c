/* The table-driven option parser (common/opt.c): spellings, values, errors, help. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/opt.h"
#include "test.h"

struct args {
    int flag, num, mode;
    char *name;
    size_t bytes;
    double secs;
    struct dsl_strvec list;
};

static int set_mode(void *target, const struct dsl_opt *d, const char *val, char *err)
{
    (void)err;
    ((struct args *)target)->mode = val ? atoi(val) : d->tag;
    return 0;
}

#define OFF(f) offsetof(struct args, f)
static const struct dsl_opt opts[] = {
    {"flag", 'f', DSL_OPT_FLAG, OFF(flag), NULL, "a flag", NULL, 0, 0, NULL, 0, NULL},
    {"num_items", 'n', DSL_OPT_INT, OFF(num), "N", "a number", "3", 1, 10, NULL, 0, NULL},
    {"name", 0, DSL_OPT_STRING, OFF(name), "NAME", "a name", NULL, 0, 0, NULL, 0, NULL},
    {"bytes", 'b', DSL_OPT_SIZE, OFF(bytes), "SIZE", "a size", NULL, 0, 0, NULL, 0, NULL},
    {"wait", 0, DSL_OPT_SECONDS, OFF(secs), "S", "a duration", NULL, 0, 0, NULL, 0, NULL},
    {"beat", 0, DSL_OPT_SECONDS, OFF(secs), "S", "a bounded duration", "15", 2, 3600, NULL, 0,
     NULL},
    {"buffer", 0, DSL_OPT_SIZE, OFF(bytes), "SIZE", "a bounded size", NULL, 64 << 10,
     64L << 30, NULL, 0, NULL},
    {"add", 0, DSL_OPT_LIST, OFF(list), "X", "repeatable", NULL, 0, 0, NULL, 0, NULL},
    {"fast", 0, DSL_OPT_CALL, 0, NULL, "mode 7", NULL, 0, 0, set_mode, 7, NULL},
    {"mode", 0, DSL_OPT_CALL, 0, "M", "any mode", NULL, 0, 0, set_mode, 0, NULL},
    {"secret", 0, DSL_OPT_FLAG, OFF(flag), NULL, NULL, NULL, 0, 0, NULL, 0, NULL},
    {"quiet", 'q', DSL_OPT_SET, OFF(num), NULL, "num becomes 0", NULL, 0, 0, NULL, 0, NULL},
    {"loud", 0, DSL_OPT_SET, OFF(num), NULL, "num becomes 9", NULL, 0, 0, NULL, 9, NULL},
};

static int parse(unsigned flags, struct args *a, struct dsl_strvec *rest, char *err,
                 const char *const *words)
{
    struct dsl_opt_parser p = {"prog", opts, sizeof(opts) / sizeof(opts[0]), flags};
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"prog";
    for (; *words; words++)
        argv[argc++] = (char *)*words;
    argv[argc] = NULL;
    memset(a, 0, sizeof(*a));
    dsl_strvec_init(&a->list);
    err[0] = '\0';
    return dsl_opt_parse(&p, a, argc, argv, rest, err);
}

static void release(struct args *a)
{
    free(a->name);
    dsl_strvec_release(&a->list);
}

TEST(opt_should_accept_both_spellings_and_both_value_forms)
{
    struct args a;
    char err[DSL_ERR_LEN];
    const char *w[] = {"--num-items", "4", "--name=x", "-f", "--bytes=64K", "--wait", "2m",
                       "--add", "a", "--add=b", "-n5", "--num_items=6", NULL};
    ASSERT_EQ(parse(0, &a, NULL, err, w), 0);
    ASSERT_EQ(a.num, 6);
    ASSERT_EQ(a.flag, 1);
    ASSERT_STR_EQ(a.name, "x");
    ASSERT_EQ(a.bytes, 65536);
    ASSERT(a.secs == 120.0);
    ASSERT_EQ(a.list.nr, 2);
    ASSERT_STR_EQ(a.list.v[1], "b");
    release(&a);
    const char *w2[] = {"-n=7", "--name", "y", "--name", "z", NULL};
    ASSERT_EQ(parse(0, &a, NULL, err, w2), 0);
    ASSERT_EQ(a.num, 7);
    ASSERT_STR_EQ(a.name, "z"); /* the last one wins, the first is freed */
    release(&a);
    const char *w3[] = {"--loud", "-q", "--loud", NULL};
    ASSERT_EQ(parse(0, &a, NULL, err, w3), 0);
    ASSERT_EQ(a.num, 9);
    release(&a);
    const char *w4[] = {"--quiet=1", NULL};
    ASSERT_EQ(parse(0, &a, NULL, err, w4), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "option '--quiet' takes no value");
    release(&a);
}

/* words parse (msg NULL), or are refused with an error holding msg */
static void expect_parse(const char *const *words, const char *msg)
{
    struct args a;
    char err[DSL_ERR_LEN];
    if (!msg) {
        ASSERT_EQ(parse(0, &a, NULL, err, words), 0);
    } else {
        ASSERT_EQ(parse(0, &a, NULL, err, words), DSL_EUSAGE);
        ASSERT_CONTAINS(err, msg);
    }
    release(&a);
}

TEST(opt_should_name_the_option_in_every_error)
{
    const struct {
        const char *w[4];
        const char *msg;
    } cases[] = {
        {{"--num-items", "11"}, "option '--num_items' is out of range: allowed 1..10, got '11'"},
        {{"--num-items", "9223372036854775808"},
         "option '--num_items' is out of range: allowed 1..10, got '9223372036854775808'"},
        {{"--num-items", "-9223372036854775809"},
         "option '--num_items' is out of range: allowed 1..10, got '-9223372036854775809'"},
        {{"--num-items", "1.5"}, "option '--num_items' needs an integer from 1 to 10, not '1.5'"},
        {{"--num-items", "x"}, "option '--num_items' needs an integer from 1 to 10, not 'x'"},
        {{"--bytes", "1Q"}, "option '--bytes' needs a size in bytes"},
        {{"--bytes", "99999999999999999999K"},
         "option '--bytes' is out of range: allowed 0..18446744073709551615 bytes, "
         "got '99999999999999999999K'"},
        {{"--wait", "soon"}, "option '--wait' needs a duration in seconds (e.g. 30, 2.5, "
                             "500ms, 2m), not 'soon'"},
        {{"--wait", "nan"}, "option '--wait' needs a duration in seconds"},
        {{"--wait", "-1"}, "option '--wait' is out of range"},
        {{"--wait", "1e308h"}, "option '--wait' is out of range: a duration is finite and not "
                               "negative, got '1e308h'"},
        {{"--beat", "0.2"}, "option '--beat' is out of range: allowed 2..3600 seconds, got '0.2'"},
        {{"--beat", "1e308"},
         "option '--beat' is out of range: allowed 2..3600 seconds, got '1e308'"},
        {{"--beat", "inf"}, "option '--beat' is out of range: allowed 2..3600 seconds, got 'inf'"},
        {{"--beat", "61m"}, "option '--beat' is out of range: allowed 2..3600 seconds, got '61m'"},
        {{"--buffer", "1K"}, "option '--buffer' is out of range: allowed 64K..64G bytes, got '1K'"},
        {{"--buffer", "65G"}, "option '--buffer' is out of range: allowed 64K..64G bytes"},
        {{"--name=\x1b[2J"}, NULL}, /* strings are anyone's: no error */
        {{"--num-items", "\x1b[31mred\n"},
         "option '--num_items' needs an integer from 1 to 10, not '\\x1b[31mred\\n'"},
        {{"--flag=1"}, "option '--flag' takes no value"},
        {{"-f1"}, "option '-f' takes no value"},
        {{"--name"}, "option '--name' needs a value"},
        {{"--name", "--flag"},
         "option '--name' needs a value, and '--flag' is an option; write --name=--flag if you "
         "mean that value"},
        {{"--name", "--beat=3"}, "option '--name' needs a value, and '--beat=3' is an option"},
        {{"--name", "--not-an-option"}, NULL}, /* not one of ours: a value */
        {{"--name=--flag"}, NULL},
        {{"--bogus"}, "unknown option '--bogus' (see prog --help)"},
        {{"-z"}, "unknown option '-z' (see prog --help)"},
        {{"word"}, "unexpected argument 'word' (see prog --help)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect_parse(cases[i].w, cases[i].msg);
}

TEST(opt_should_suggest_the_nearest_option_for_a_mistyped_one)
{
    static const struct {
        const char *w[3];
        const char *msg;
    } cases[] = {
        {{"--num-item", "3"}, "unknown option '--num-item': did you mean '--num-items'? (see "
                              "prog --help)"},
        {{"--num_itmes=3"}, "did you mean '--num_items'?"},
        {{"--flga"}, "unknown option '--flga': did you mean '--flag'?"},
        {{"--byts", "1"}, "did you mean '--bytes'?"},
        /* hidden options are never suggested, and a name near none has no suggestion */
        {{"--secrte"}, "unknown option '--secrte' (see prog --help)"},
        {{"--completely-different"}, "unknown option '--completely-different' (see prog"},
        /* two as near as each other: no guess */
        {{"--fait"}, "unknown option '--fait' (see prog --help)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect_parse(cases[i].w, cases[i].msg); /* every one refused: msg is never NULL */
}

TEST(opt_should_accept_bounded_values_at_both_ends)
{
    struct args a;
    char err[DSL_ERR_LEN];
    const char *w[] = {"--beat", "2", "--buffer", "64K", "-n", "10", NULL};
    ASSERT_EQ(parse(0, &a, NULL, err, w), 0);
    ASSERT(a.secs == 2.0);
    ASSERT_EQ(a.bytes, 65536);
    ASSERT_EQ(a.num, 10);
    release(&a);
    const char *w2[] = {"--beat", "1h", "--buffer", "64G", "-n", "1", NULL};
    ASSERT_EQ(parse(0, &a, NULL, err, w2), 0);
    ASSERT(a.secs == 3600.0);
    ASSERT_EQ(a.bytes, (size_t)64 << 30);
    release(&a);
}

TEST(opt_should_stop_at_the_program_and_keep_its_arguments)
{
    struct args a;
    struct dsl_strvec rest;
    char err[DSL_ERR_LEN];
    dsl_strvec_init(&rest);
    const char *w[] = {"-f", "prog", "--name", "x", "-n", "99", NULL};
    ASSERT_EQ(parse(DSL_OPT_STOP_AT_ARG, &a, &rest, err, w), 0);
    ASSERT_EQ(a.flag, 1);
    ASSERT(a.name == NULL);
    ASSERT_EQ(rest.nr, 5);
    ASSERT_STR_EQ(rest.v[0], "prog");
    ASSERT_STR_EQ(rest.v[4], "99");
    release(&a);
    dsl_strvec_release(&rest);
    /* "--" ends the options even before a word that looks like one */
    dsl_strvec_init(&rest);
    const char *w2[] = {"--", "--flag", NULL};
    ASSERT_EQ(parse(DSL_OPT_STOP_AT_ARG, &a, &rest, err, w2), 0);
    ASSERT_EQ(a.flag, 0);
    ASSERT_EQ(rest.nr, 1);
    ASSERT_STR_EQ(rest.v[0], "--flag");
    release(&a);
    dsl_strvec_release(&rest);
}

TEST(opt_should_collect_words_and_unknown_options_when_asked)
{
    struct args a;
    struct dsl_strvec rest;
    char err[DSL_ERR_LEN];
    dsl_strvec_init(&rest);
    const char *w[] = {"a", "--other", "v", "-f", "-x", "b", "--fast", NULL};
    ASSERT_EQ(parse(DSL_OPT_KEEP_UNKNOWN, &a, &rest, err, w), 0);
    ASSERT_EQ(a.flag, 1);
    ASSERT_EQ(a.mode, 7);
    ASSERT_EQ(rest.nr, 5);
    const char *want[] = {"a", "--other", "v", "-x", "b"};
    for (size_t i = 0; i < 5; i++)
        ASSERT_STR_EQ(rest.v[i], want[i]);
    release(&a);
    dsl_strvec_release(&rest);
    /* without KEEP_UNKNOWN, plain words are collected and unknown options refused */
    dsl_strvec_init(&rest);
    const char *w2[] = {"a", "-f", "b", "--mode", "3", NULL};
    ASSERT_EQ(parse(0, &a, &rest, err, w2), 0);
    ASSERT_EQ(a.mode, 3);
    ASSERT_EQ(rest.nr, 2);
    release(&a);
    const char *w3[] = {"a", "--other", NULL};
    ASSERT_EQ(parse(0, &a, &rest, err, w3), DSL_EUSAGE);
    release(&a);
    dsl_strvec_release(&rest);
}

TEST(opt_help_should_list_visible_options_with_dashes_and_defaults)
{
    struct dsl_opt_parser p = {"prog", opts, sizeof(opts) / sizeof(opts[0]), 0};
    char buf[8192] = "";
    FILE *f = fmemopen(buf, sizeof(buf), "w");
    ASSERT(f != NULL);
    dsl_opt_help(&p, f);
    fclose(f);
    ASSERT_CONTAINS(buf, "  -n, --num-items N");
    ASSERT_CONTAINS(buf, "a number (allowed 1..10, default: 3)");
    ASSERT_CONTAINS(buf, "a bounded duration (allowed 2..3600 s, default: 15)");
    ASSERT_CONTAINS(buf, "a bounded size (allowed 64K..64G)");
    ASSERT_CONTAINS(buf, "a duration\n"); /* unbounded: no range */
    ASSERT_CONTAINS(buf, "      --fast ");
    ASSERT_CONTAINS(buf, "      --mode M");
    ASSERT(strstr(buf, "secret") == NULL);
}

TEST(opt_help_if_asked_should_answer_help_only_before_a_double_dash)
{
    struct dsl_opt_parser p = {"prog sub", opts, sizeof(opts) / sizeof(opts[0]), 0};
    char buf[8192] = "";
    char *asked[] = {(char *)"sub", (char *)"--name", (char *)"x", (char *)"--help", NULL};
    char *short_asked[] = {(char *)"sub", (char *)"-h", NULL};
    char *after[] = {(char *)"sub", (char *)"--", (char *)"--help", NULL};
    char *none[] = {(char *)"sub", (char *)"--name", (char *)"x", NULL};
    FILE *f = fmemopen(buf, sizeof(buf), "w");
    ASSERT(f != NULL);
    ASSERT_EQ(dsl_opt_help_if_asked(&p, "usage: prog sub [options] PATH...", 4, asked, f), 1);
    fclose(f);
    ASSERT(strncmp(buf, "usage: prog sub [options] PATH...\n\n", 35) == 0);
    ASSERT_CONTAINS(buf, "  -n, --num-items N");
    f = fmemopen(buf, sizeof(buf), "w");
    ASSERT(f != NULL);
    ASSERT_EQ(dsl_opt_help_if_asked(&p, "u", 2, short_asked, f), 1);
    ASSERT_EQ(dsl_opt_help_if_asked(&p, "u", 3, after, f), 0);
    ASSERT_EQ(dsl_opt_help_if_asked(&p, "u", 3, none, f), 0);
    fclose(f);
}

TEST_MAIN()
