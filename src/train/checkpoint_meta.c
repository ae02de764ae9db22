/*
 * Checkpoints, a loaded one: its init and release, and what it says: its metadata, its optimizer state by name, its
 * parameter views against the model's, and what its load could not check.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "checkpoint_internal.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

int dsl_ckpt_caveat(const struct dsl_ckpt *c, char *buf, size_t n)
{
    if (c->unverified)
        snprintf(buf, n,
                 "checkpoint '%s' loaded unverified (allow_unverified_checkpoint): '%s' has "
                 "no checksums, so corruption or edits in it cannot be detected; the next "
                 "save writes them",
                 c->path, c->unverified);
    else if (c->sum != DSL_ST_SUM_SHA256)
        snprintf(buf, n,
                 "checkpoint '%s' has no SHA-256 checksums (written by an older dstrain): "
                 "edits of its metadata cannot be detected; the next save writes them",
                 c->path);
    else
        return 0;
    return 1;
}

int dsl_ckpt_check_params(const struct dsl_ckpt *c, const struct dsl_ckpt_param *views,
                          size_t nviews, size_t numel, char *err)
{
    if (c->numel != numel)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "checkpoint '%s' has %zu parameters, the model has %zu", c->path,
                          c->numel, numel);
    if (c->nviews != nviews)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "checkpoint '%s' has %zu parameter tensors, the model has %zu",
                          c->path, c->nviews, nviews);
    for (size_t i = 0; i < nviews; i++) {
        const struct dsl_ckpt_param *a = &c->views[i], *b = &views[i];
        int same = strcmp(a->name, b->name) == 0 && a->offset == b->offset && a->ndim == b->ndim;
        for (int d = 0; same && d < a->ndim; d++)
            same = a->shape[d] == b->shape[d];
        if (!same)
            return dsl_seterr(err, DSL_ECHECKPOINT,
                              "checkpoint '%s': parameter tensor %zu is '%s', the model's is "
                              "'%s' (or the shapes differ)",
                              c->path, i, a->name, b->name);
    }
    return 0;
}

const float *dsl_ckpt_state(const struct dsl_ckpt *c, const char *name)
{
    for (size_t i = 0; i < c->nstate; i++)
        if (strcmp(c->state_names[i], name) == 0)
            return c->state[i];
    return NULL;
}

const char *dsl_ckpt_meta(const struct dsl_ckpt *c, const char *key)
{
    return dsl_env_get(&c->meta, key);
}

int dsl_ckpt_meta_u64(const struct dsl_ckpt *c, const char *key, uint64_t *out, char *err)
{
    const char *v = dsl_env_get(&c->meta, key);
    char *end;
    unsigned long long x;
    if (!v || !v[0] || v[0] == '-')
        goto bad;
    errno = 0;
    x = strtoull(v, &end, 10);
    if (errno || *end)
        goto bad;
    *out = (uint64_t)x;
    return 0;
bad:
    return dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint '%s': %s metadata '%s'", c->path,
                      v ? "bad" : "missing", key);
}

int dsl_ckpt_meta_sizes(const struct dsl_ckpt *c, const char *key, size_t *out, size_t n,
                        char *err)
{
    const char *v = dsl_env_get(&c->meta, key), *p = v;
    size_t got[DSL_CKPT_META_SIZES];
    if (!v || n < 1 || n > DSL_CKPT_META_SIZES)
        goto bad;
    for (size_t i = 0; i < n; i++) { /* sscanf's %zu would be undefined past SIZE_MAX */
        char *end;
        if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
            goto bad; /* as the trainer writes them: no sign, space or leading zero */
        errno = 0;
        unsigned long long x = strtoull(p, &end, 10);
        if (errno || x > SIZE_MAX || *end != (i + 1 < n ? ',' : '\0'))
            goto bad;
        got[i] = (size_t)x;
        p = end + 1;
    }
    memcpy(out, got, n * sizeof(*out));
    return 0;
bad:
    return dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint '%s': %s metadata '%s'", c->path,
                      v ? "bad" : "missing", key);
}

void dsl_ckpt_init(struct dsl_ckpt *c)
{
    memset(c, 0, sizeof(*c));
    dsl_strvec_init(&c->meta);
}

void dsl_ckpt_release(struct dsl_ckpt *c)
{
    free(c->tag);
    free(c->path);
    free(c->unverified);
    free(c->params);
    for (size_t i = 0; i < c->nviews; i++)
        free((char *)(uintptr_t)c->views[i].name);
    free(c->views);
    free(c->ranges);
    for (size_t i = 0; i < DSL_CKPT_MAX_STATE; i++) {
        free(c->state_names[i]);
        free(c->state[i]);
    }
    dsl_strvec_release(&c->meta);
    dsl_ckpt_init(c);
}
