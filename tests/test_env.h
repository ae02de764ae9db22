/*
 * Environment variables as lists of "NAME=VALUE" for the tests of what a rank or an
 * agent reads from its environment: set in one call, and checked in one call, where
 * "NAME=(unset)" means the variable is absent.
 */
#ifndef DSLAUNCH_TEST_ENV_H
#define DSLAUNCH_TEST_ENV_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

/* A NULL-terminated list of "NAME=VALUE" strings: TEST_ENV("A=1", "B=2"). */
#define TEST_ENV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* "NAME=VALUE" split into name (of n bytes at the most) and the value it points at. */
static inline const char *test_env_split(const char *kv, char *name, size_t n)
{
    const char *eq = strchr(kv, '=');
    ASSERT(eq != NULL && (size_t)(eq - kv) < n);
    memcpy(name, kv, (size_t)(eq - kv));
    name[eq - kv] = '\0';
    return eq + 1;
}

/* Each "NAME=VALUE" of the NULL-terminated list kv set, replacing what was there. */
static inline void test_setenvs(const char *const *kv)
{
    for (; *kv; kv++) {
        char name[128];
        const char *value = test_env_split(*kv, name, sizeof(name));
        ASSERT(setenv(name, value, 1) == 0);
    }
}

/* Each "NAME=VALUE" of the NULL-terminated list kv is in the environment as given. */
static inline void test_expect_env(const char *const *kv)
{
    for (; *kv; kv++) {
        char name[128];
        const char *want = test_env_split(*kv, name, sizeof(name)), *got = getenv(name);
        if (!got || strcmp(got, want) != 0)
            fprintf(stderr, "  %s is '%s'\n", name, got ? got : "(unset)");
        ASSERT_STR_EQ(got ? got : "(unset)", want);
    }
}

#endif
