/*
 * Checkpoints, loading: the model file, then the shards (checkpoint_shards.c); at stage
 * 3 rank 0's parameter shard's header, then every rank's parameter and optimizer
 * shards.
 *
 * Theory of operation. Loading reads every file and validates it (dsl_st_load(): the
 * header against the file's size before the data is allocated, then the checksums),
 * then checks the shard set; the reassembled full vectors make the world size at
 * resume independent of the one at save. The commit judges a stage 3 save's sets from
 * the files' headers (CKPT_HEADERS), since each rank read its own files back as it
 * wrote them.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "checkpoint_internal.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "safetensors.h"
#include "dslaunch/common/banned.h"

/* The model file into c; *bad: its header failed its checksum (the load goes on, so
 * that comparing it with the shards can name the field; dsl_ckpt_load_dir refuses it).
 * The model file of <path> (tag given), or a file of its own: `dstrain consolidate`'s
 * output (tag NULL; no dsl.kind, dsl.tag, dsl.numel or dsl.world_size to check). */
static int load_model_file(struct dsl_ckpt *c, const char *fp, const char *tag, int *bad,
                           unsigned flags, size_t numel_hint, char *err)
{
    struct dsl_st_file f;
    uint64_t numel = 0, ws = 1;
    int r = dsl_ckpt_too_large(fp, numel_hint, 1, err);
    if (r < 0)
        return r;
    r = dsl_st_load(&f, fp, dsl_ckpt_st_flags(flags), err);
    *bad = f.header_bad;
    c->sum = f.sum;
    if (r < 0 && f.no_sums) /* refused from its header, before its data was read */
        r = dsl_ckpt_unverified(c, f.path, flags, err);
    if (r < 0)
        goto out;
    const char *kind = dsl_env_get(&f.meta, "dsl.kind"), *ftag = dsl_env_get(&f.meta, "dsl.tag");
    if (tag && (!kind || strcmp(kind, "model") != 0 || !ftag || strcmp(ftag, tag) != 0)) {
        r = dsl_seterr(err, DSL_ECHECKPOINT,
                       "checkpoint file '%s' is not the model state of tag '%s'", f.path, tag);
        goto out;
    }
    if (!f.header_bad && f.sum == DSL_ST_SUM_NONE) {
        if ((r = dsl_ckpt_unverified(c, f.path, flags, err)) < 0)
            goto out;
    }
    if (tag && (r = dsl_ckpt_meta_num(&f, "dsl.numel", &numel, err)) < 0)
        goto out;
    if (tag && (r = dsl_ckpt_meta_num(&f, "dsl.world_size", &ws, err)) < 0)
        goto out;
    if (ws < 1 || ws > 1u << 20) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint file '%s': bad world size %" PRIu64,
                       f.path, ws);
        goto out;
    }
    size_t total = 0;
    for (size_t i = 0; i < f.n; i++) {
        if (f.t[i].dtype != DSL_ST_F32 || f.t[i].ndim > 4) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "checkpoint file '%s': tensor '%s' is not an fp32 parameter", f.path,
                           f.t[i].name);
            goto out;
        }
        total += (size_t)(f.t[i].nbytes / 4);
    }
    if (!tag)
        numel = total;
    if (total != numel) {
        r = dsl_seterr(err, DSL_ECHECKPOINT,
                       "checkpoint file '%s': tensors hold %zu elements, metadata says %" PRIu64,
                       f.path, total, numel);
        goto out;
    }
    c->numel = (size_t)numel;
    c->saved_world = (int)ws;
    c->params = malloc(c->numel ? c->numel * sizeof(float) : 1);
    if (!c->params) {
        r = dsl_seterr(err, -ENOMEM, "cannot allocate %zu parameters", c->numel);
        goto out;
    }
    c->views = dsl_xcalloc(f.n ? f.n : 1, sizeof(*c->views));
    size_t pos = 0;
    for (size_t i = 0; i < f.n; i++) { /* f.t is sorted by data offset = flat order */
        struct dsl_ckpt_param *v = &c->views[c->nviews++];
        v->name = dsl_xstrdup(f.t[i].name);
        v->offset = pos;
        v->ndim = f.t[i].ndim;
        for (int d = 0; d < v->ndim; d++)
            v->shape[d] = f.t[i].shape[d];
        memcpy(c->params + pos, f.t[i].data, (size_t)f.t[i].nbytes);
        pos += (size_t)(f.t[i].nbytes / 4);
    }
    for (size_t i = 0; i < f.meta.nr; i++)
        dsl_strvec_push(&c->meta, f.meta.v[i]);
    /* an edited header is named by the caller first (the data was not checked) */
    r = f.header_bad ? 0 : dsl_ckpt_params_finite(c, f.path, flags, err);
out:
    dsl_st_release(&f);
    return r;
}

static int load_model(struct dsl_ckpt *c, const char *path, const char *tag, int *bad,
                      unsigned flags, size_t numel_hint, char *err)
{
    char *fp = dsl_xasprintf("%s/" DSL_CKPT_MODEL_FILE, path);
    int r = load_model_file(c, fp, tag, bad, flags, numel_hint, err);
    free(fp);
    return r;
}

/* Load the checkpoint in directory path (the tag's directory or a partial one). */
int dsl_ckpt_load_dir(struct dsl_ckpt *c, const char *path, const char *tag, int shards,
                      unsigned flags, size_t numel_hint, char *err)
{
    int r, bad = 0;
    c->tag = dsl_xstrdup(tag);
    c->path = dsl_xstrdup(path);
    if (dsl_ckpt_is_zero3(path) && (flags & DSL_CKPT_HEAD_ONLY) && !shards)
        return dsl_ckpt_load_zero3_head(c, path, tag, &bad, 0, flags, err);
    if (dsl_ckpt_is_zero3(path) && (flags & CKPT_HEADERS)) {
        if ((r = dsl_ckpt_load_zero3_head(c, path, tag, &bad, 0, flags, err)) < 0 ||
            (r = dsl_ckpt_shards_judge(c, path, tag, bad, 1, flags, err)) < 0)
            return r;
        return dsl_ckpt_shards_judge(c, path, tag, 0, 0, flags, err);
    }
    if (dsl_ckpt_is_zero3(path)) {
        if ((r = dsl_ckpt_load_zero3_head(c, path, tag, &bad, 1, flags, err)) < 0 ||
            (r = dsl_ckpt_load_shards(c, path, tag, bad, 1, flags, numel_hint, err)) < 0 ||
            !shards)
            return r;
        return dsl_ckpt_load_shards(c, path, tag, 0, 0, flags, numel_hint, err);
    }
    if ((r = load_model(c, path, tag, &bad, flags, numel_hint, err)) < 0) {
        if (bad && err) {
            size_t n = strlen(err);
            snprintf(err + n, DSL_ERR_LEN - n, "; its " EDITED);
        }
        return r;
    }
    if (!shards) { /* the parameters alone: the model file's own checksums decide */
        if (bad)
            return dsl_seterr(err, DSL_ECHECKPOINT,
                              "checkpoint file '%s/" DSL_CKPT_MODEL_FILE "': its " EDITED,
                              path);
        return 0;
    }
    return dsl_ckpt_load_shards(c, path, tag, bad, 0, flags, numel_hint, err);
}

static int load_tag(struct dsl_ckpt *c, const char *dir, const char *tag, int shards,
                    unsigned flags, size_t numel_hint, char *err)
{
    char *t = NULL, *path = NULL;
    dsl_ckpt_init(c);
    int r = dsl_ckpt_resolve(dir, tag, flags, &path, &t, err);
    if (r < 0)
        return r;
    r = dsl_ckpt_load_dir(c, path, t, shards,
                          flags & (DSL_CKPT_ALLOW_UNVERIFIED | DSL_CKPT_HEAD_ONLY), numel_hint,
                          err);
    free(path);
    free(t);
    return r;
}

int dsl_ckpt_load_file(struct dsl_ckpt *c, const char *file, unsigned flags, char *err)
{
    int bad = 0;
    dsl_ckpt_init(c);
    const char *base = strrchr(file, '/');
    c->tag = dsl_xstrdup(base ? base + 1 : file);
    c->path = dsl_xstrdup(file);
    int r = load_model_file(c, file, NULL, &bad, flags & DSL_CKPT_ALLOW_UNVERIFIED, 0, err);
    if (r < 0 && bad && err) {
        size_t n = strlen(err);
        snprintf(err + n, DSL_ERR_LEN - n, "; its " EDITED);
    } else if (r >= 0 && bad) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint file '%s': its " EDITED, file);
    }
    return r;
}

int dsl_ckpt_load(struct dsl_ckpt *c, const char *dir, const char *tag, unsigned flags,
                  char *err)
{
    return load_tag(c, dir, tag, 1, flags, 0, err);
}

int dsl_ckpt_load_for(struct dsl_ckpt *c, const char *dir, const char *tag, unsigned flags,
                      size_t numel, char *err)
{
    return load_tag(c, dir, tag, 1, flags, numel, err);
}

int dsl_ckpt_load_params(struct dsl_ckpt *c, const char *dir, const char *tag, unsigned flags,
                         char *err)
{
    return load_tag(c, dir, tag, 0, flags, 0, err);
}
