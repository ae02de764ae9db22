/*
 * What the ds_config.json tests (test_config_*.c) share: a parse of a text as the file
 * "t.json", and the check of the one message a text gives.
 */
#ifndef DSL_TESTS_TRAIN_CONFIG_TEST_H
#define DSL_TESTS_TRAIN_CONFIG_TEST_H

#include <stdio.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/train/train_config.h"
#include "test.h"

static inline int parse(struct dsl_train_config *cfg, const char *text, int world, char *err)
{
    dsl_train_config_init(cfg);
    err[0] = '\0';
    return dsl_train_config_parse(cfg, "t.json", text, strlen(text), world, err);
}

/* json parses at world 1 into cfg with the n warnings want (each whole, or contained);
   the caller releases cfg */
static inline void parse_warnings(struct dsl_train_config *cfg, const char *json,
                                  const char *const *want, size_t n, int whole)
{
    char err[DSL_ERR_LEN];
    ASSERT_OK(parse(cfg, json, 1, err));
    ASSERT_EQ(cfg->warnings.nr, n);
    for (size_t i = 0; i < n; i++) {
        if (whole)
            ASSERT_STR_EQ(cfg->warnings.v[i], want[i]);
        else
            ASSERT_CONTAINS(cfg->warnings.v[i], want[i]);
    }
}

/* json at world 1 gives one message: with ok its one warning, else its error; the
   message is want (whole) or contains it */
static inline void check_message(const char *json, int ok, const char *want, int whole)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    fprintf(stderr, "  %s\n", json);
    if (ok) {
        parse_warnings(&cfg, json, &want, 1, whole);
    } else {
        ASSERT_EQ(parse(&cfg, json, 1, err), DSL_ECONFIG);
        if (whole)
            ASSERT_STR_EQ(err, want);
        else
            ASSERT_CONTAINS(err, want);
    }
    dsl_train_config_release(&cfg);
}

#endif
