/*
 * The exported environment: the variables every worker gets beyond the per-rank ones.
 *
 * Theory of operation: three layers, each overriding the one before (dsl_env_set
 * replaces a key in place, so the first appearance fixes a key's position):
 *   1. the launcher's environment, filtered by name prefix (NCCL_, PYTHON, UCX_, OMP_,
 *      MV2_, GLOO_, CUDA_ except CUDA_VISIBLE_DEVICES, which the placement sets);
 *   2. the env files ~/.deepspeed_env, ~/.dslaunch_env, ./.deepspeed_env, ./.dslaunch_env,
 *      in that order; a missing file is skipped, a malformed line is an error;
 *   3. --export VAR (its value from the launcher's environment) and --export VAR=VALUE.
 * Nothing else is sent, so a private variable of the launching shell never reaches a
 * remote node. Values are data: they are never given to a shell, so an env file's
 * quotes are only stripped, never interpreted (no escapes, no $expansion).
 *
 * DeepSpeed reads its env file with `key, val = line.split('=', 1)` and keeps the
 * newline in the value; here a line is "KEY=VALUE" with an optional "export " prefix,
 * KEY a C identifier, trailing blanks and CR dropped, and one pair of matching quotes
 * around the whole value removed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/plan/envexport.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define ENVFILE_MAX_BYTES (1u << 20)

static const char *const export_prefixes[] = {"NCCL_", "PYTHON", "UCX_", "OMP_",
                                              "MV2_",  "GLOO_",  "CUDA_"};

int dsl_env_name_exported(const char *name)
{
    if (strcmp(name, DSL_ENV_CUDA_VISIBLE_DEVICES) == 0)
        return 0;
    for (size_t i = 0; i < sizeof(export_prefixes) / sizeof(export_prefixes[0]); i++)
        if (strncmp(name, export_prefixes[i], strlen(export_prefixes[i])) == 0)
            return 1;
    return 0;
}

/* Length of the variable name at s[0..n): [A-Za-z_][A-Za-z0-9_]*; 0 if none. */
static size_t name_len(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (s[i] == '_' || (s[i] >= 'A' && s[i] <= 'Z') ||
                     (s[i] >= 'a' && s[i] <= 'z') || (i > 0 && s[i] >= '0' && s[i] <= '9')))
        i++;
    return i;
}

static int line_err(char *err, const char *path, int line, const char *what, const char *s,
                    size_t n)
{
    char ex[DSL_EXCERPT_LEN];
    dsl_excerpt(ex, sizeof(ex), s, n);
    return dsl_seterr(err, DSL_ECONFIG, "env file '%s':%d: %s '%s'", path, line, what, ex);
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

int dsl_envfile_parse(struct dsl_strvec *env, const char *path, const char *text, size_t len,
                      char *err)
{
    struct dsl_strvec tmp;
    size_t i = 0;
    int line = 0, r = 0;

    if (!path)
        path = "-";
    dsl_strvec_init(&tmp);
    while (i < len) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len;
        const char *s = text + i, *full = s;
        size_t n = end - i, fulln = n;
        i = end + 1;
        line++;
        if (memchr(s, '\0', n)) {
            r = line_err(err, path, line, "NUL byte in", full, fulln);
            goto out;
        }
        while (n && is_blank(s[n - 1]))
            n--;
        while (n && is_blank(*s)) {
            s++;
            n--;
        }
        if (n == 0 || *s == '#')
            continue;
        if (n > 7 && memcmp(s, "export", 6) == 0 && (s[6] == ' ' || s[6] == '\t')) {
            s += 7;
            n -= 7;
            while (n && is_blank(*s)) {
                s++;
                n--;
            }
        }
        size_t kn = name_len(s, n);
        if (kn == 0 || kn == n || s[kn] != '=') {
            r = line_err(err, path, line, "expected KEY=VALUE, not", full, fulln);
            goto out;
        }
        const char *v = s + kn + 1;
        size_t vn = n - kn - 1;
        if (vn && (v[0] == '"' || v[0] == '\'')) {
            if (vn < 2 || v[vn - 1] != v[0]) {
                r = line_err(err, path, line, "unterminated quote in", full, fulln);
                goto out;
            }
            v++;
            vn -= 2;
        }
        char *key = dsl_xstrndup(s, kn), *val = dsl_xstrndup(v, vn);
        dsl_env_set(&tmp, key, val);
        free(key);
        free(val);
    }
    for (size_t k = 0; k < tmp.nr; k++) {
        char *eq = strchr(tmp.v[k], '=');
        *eq = '\0';
        dsl_env_set(env, tmp.v[k], eq + 1);
    }
out:
    dsl_strvec_release(&tmp);
    return r;
}

int dsl_envfile_load(struct dsl_strvec *env, const char *path, char *err)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, ENVFILE_MAX_BYTES);
    int r = dsl_dynbuf_load_named(&b, path, "env file", DSL_ECONFIG, err);
    if (r == -ENOENT || r == -ENOTDIR) {
        r = 0; /* a missing env file is no error */
        if (err)
            err[0] = '\0';
    } else if (r == 0) {
        r = dsl_envfile_parse(env, path, dsl_dynbuf_str(&b), b.len, err);
    }
    dsl_dynbuf_release(&b);
    return r;
}

static int add_export(struct dsl_strvec *env, char *const *environ_, const char *spec, char *err)
{
    size_t n = strlen(spec), kn = name_len(spec, n);
    if (kn == 0 || (kn < n && spec[kn] != '='))
        return dsl_seterr(err, DSL_EUSAGE,
                          "--export '%s': expected VAR or VAR=VALUE with VAR a variable name",
                          spec);
    char *key = dsl_xstrndup(spec, kn);
    const char *val = kn < n ? spec + kn + 1 : dsl_env_lookup(environ_, spec, kn);
    if (!val) {
        free(key);
        return dsl_seterr(err, DSL_EUSAGE, "--export '%s': not set in the environment", spec);
    }
    dsl_env_set(env, key, val);
    free(key);
    return 0;
}

int dsl_envexport_build(struct dsl_strvec *out, char *const *environ_, const char *home,
                        const char *cwd, char *const *exports, size_t nexports, char *err)
{
    static const char *const files[] = {".deepspeed_env", ".dslaunch_env"};
    struct dsl_strvec env;
    int r;

    dsl_strvec_init(&env);
    for (size_t i = 0; environ_ && environ_[i]; i++) {
        const char *eq = strchr(environ_[i], '=');
        if (!eq)
            continue;
        char *key = dsl_xstrndup(environ_[i], (size_t)(eq - environ_[i]));
        if (dsl_env_name_exported(key))
            dsl_env_set(&env, key, eq + 1);
        free(key);
    }
    const char *dirs[] = {home, cwd};
    for (size_t d = 0; d < 2; d++) {
        if (!dirs[d] || !*dirs[d])
            continue;
        for (size_t f = 0; f < 2; f++) {
            char *path = dsl_xasprintf("%s/%s", dirs[d], files[f]);
            r = dsl_envfile_load(&env, path, err);
            free(path);
            if (r < 0)
                goto out;
        }
    }
    for (size_t i = 0; i < nexports; i++)
        if ((r = add_export(&env, environ_, exports[i], err)) < 0)
            goto out;
    for (size_t i = 0; i < env.nr; i++) {
        char *eq = strchr(env.v[i], '=');
        *eq = '\0';
        dsl_env_set(out, env.v[i], eq + 1);
    }
    r = 0;
out:
    dsl_strvec_release(&env);
    return r;
}
