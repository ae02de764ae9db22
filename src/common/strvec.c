/* Owned, NULL-terminated string vectors for argv and env. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

static char *empty_v[1] = {NULL};

void dsl_strvec_init(struct dsl_strvec *sv)
{
    sv->v = empty_v;
    sv->nr = 0;
    sv->alloc = 0;
}

void dsl_strvec_push_nodup(struct dsl_strvec *sv, char *s)
{
    if (sv->v == empty_v)
        sv->v = NULL;
    if (sv->nr + 2 > sv->alloc) {
        sv->alloc = sv->alloc ? sv->alloc * 2 : 8;
        sv->v = dsl_xreallocarray(sv->v, sv->alloc, sizeof(*sv->v));
    }
    sv->v[sv->nr++] = s;
    sv->v[sv->nr] = NULL;
}

const char *dsl_strvec_push(struct dsl_strvec *sv, const char *s)
{
    char *c = dsl_xstrdup(s);
    dsl_strvec_push_nodup(sv, c);
    return c;
}

const char *dsl_strvec_pushf(struct dsl_strvec *sv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = dsl_xmalloc((size_t)(n < 0 ? 0 : n) + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)(n < 0 ? 0 : n) + 1, fmt, ap);
    va_end(ap);
    dsl_strvec_push_nodup(sv, p);
    return p;
}

void dsl_strvec_pushv(struct dsl_strvec *sv, const char *const *items)
{
    for (; items && *items; items++)
        dsl_strvec_push(sv, *items);
}

void dsl_strvec_release(struct dsl_strvec *sv)
{
    if (sv->v != empty_v) {
        for (size_t i = 0; i < sv->nr; i++)
            free(sv->v[i]);
        free(sv->v);
    }
    dsl_strvec_init(sv);
}

void dsl_strvec_clear(struct dsl_strvec *sv)
{
    dsl_strvec_release(sv);
}

static long env_find(const struct dsl_strvec *env, const char *key)
{
    size_t klen = strlen(key);
    for (size_t i = 0; i < env->nr; i++) {
        const char *e = env->v[i];
        if (!strncmp(e, key, klen) && (e[klen] == '=' || e[klen] == '\0'))
            return (long)i;
    }
    return -1;
}

void dsl_env_set(struct dsl_strvec *env, const char *key, const char *value)
{
    char *entry = value ? dsl_xasprintf("%s=%s", key, value) : dsl_xstrdup(key);
    long i = env_find(env, key);
    if (i >= 0) {
        free(env->v[i]);
        env->v[i] = entry;
    } else {
        dsl_strvec_push_nodup(env, entry);
    }
}

const char *dsl_env_get(const struct dsl_strvec *env, const char *key)
{
    long i = env_find(env, key);
    if (i < 0)
        return NULL;
    const char *eq = strchr(env->v[i], '=');
    return eq ? eq + 1 : NULL;
}

const char *dsl_env_lookup(char *const *env, const char *key, size_t keylen)
{
    for (; env && *env; env++)
        if (!strncmp(*env, key, keylen) && (*env)[keylen] == '=')
            return *env + keylen + 1;
    return NULL;
}

int dsl_env_unset(struct dsl_strvec *env, const char *key)
{
    long i = env_find(env, key);
    if (i < 0)
        return 0;
    free(env->v[i]);
    memmove(&env->v[i], &env->v[i + 1], (env->nr - (size_t)i) * sizeof(*env->v));
    env->nr--;
    return 1;
}
