/*
 * Checkpoints, the save: the writers of the model file and the optimizer shards, the
 * commit, and `dstrain consolidate`'s file (the layout in checkpoint.h).
 *
 * Theory of operation. A save is a small two-phase commit driven by the trainer:
 * rank 0 makes a fresh <dir>/<tag>.partial/ (checkpoint_dir.c), every rank writes its
 * files there (each one atomically: temp file, fsync, rename, fsync dir), and after a
 * barrier rank 0 re-reads and validates the whole partial directory with the same code
 * the loader uses (checkpoint_load.c; CKPT_SAVING only changes the advice in its
 * messages, so a diverged run's save fails instead of moving `latest`), renames it to
 * <dir>/<tag> and only then rewrites <dir>/latest (temp file, fsync, rename, fsync
 * dir). Until that last rename, `latest` names the previous checkpoint, which nothing
 * in a save ever modifies. Re-saving an existing tag moves the old directory to
 * <tag>.old first and deletes it after the switch; a crash between those two renames
 * leaves <tag> missing with the complete <tag>.old beside it, which the loader then
 * uses.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "checkpoint_internal.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/file.h"
#include "safetensors.h"
#include "dslaunch/common/banned.h"

static void meta_common(struct dsl_strvec *m, const struct dsl_strvec *user, const char *kind,
                        const char *tag, size_t numel)
{
    dsl_strvec_init(m);
    for (size_t i = 0; user && i < user->nr; i++)
        dsl_strvec_push(m, user->v[i]);
    dsl_env_set(m, "format", "pt");
    dsl_env_set(m, "dsl.kind", kind);
    dsl_env_set(m, "dsl.tag", tag);
    char num[32];
    snprintf(num, sizeof(num), "%zu", numel);
    dsl_env_set(m, "dsl.numel", num);
}

static void meta_setnum(struct dsl_strvec *m, const char *key, uint64_t v)
{
    char num[32];
    snprintf(num, sizeof(num), "%" PRIu64, v);
    dsl_env_set(m, key, num);
}

/* Views must tile [0, numel) in order, each of its shape's size. */
static int check_views(const struct dsl_ckpt_param *v, size_t n, size_t numel, char *err)
{
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t sz = 1;
        if (!v[i].name || !v[i].name[0] || v[i].ndim < 0 || v[i].ndim > 4)
            return dsl_seterr(err, DSL_ECHECKPOINT, "parameter view %zu is malformed", i);
        for (int d = 0; d < v[i].ndim; d++)
            sz *= v[i].shape[d];
        if (v[i].offset != pos)
            return dsl_seterr(err, DSL_ECHECKPOINT,
                              "parameter view '%s' starts at %zu, expected %zu", v[i].name,
                              v[i].offset, pos);
        pos += (size_t)sz;
    }
    if (pos != numel)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "parameter views cover %zu elements, the model has %zu", pos, numel);
    return 0;
}

int dsl_ckpt_write_model(const char *dir, const char *tag, int world,
                         const struct dsl_ckpt_param *views, size_t nviews,
                         const float *params, size_t numel, const struct dsl_strvec *meta,
                         char *err)
{
    struct dsl_st_tensor *t;
    struct dsl_strvec m;
    char *path;
    int r;
    if (dsl_ckpt_tag_bad(tag))
        return dsl_ckpt_tag_error(tag, dir, err);
    if (world < 1)
        return dsl_seterr(err, DSL_ECHECKPOINT, "bad world size %d", world);
    if ((r = check_views(views, nviews, numel, err)) < 0)
        return r;
    t = dsl_xcalloc(nviews ? nviews : 1, sizeof(*t));
    for (size_t i = 0; i < nviews; i++) {
        t[i].name = views[i].name;
        t[i].dtype = DSL_ST_F32;
        t[i].ndim = views[i].ndim;
        for (int d = 0; d < views[i].ndim; d++)
            t[i].shape[d] = views[i].shape[d];
        t[i].data = params + views[i].offset;
    }
    meta_common(&m, meta, "model", tag, numel);
    meta_setnum(&m, "dsl.world_size", (uint64_t)world);
    path = dsl_xasprintf("%s/%s.partial/" DSL_CKPT_MODEL_FILE, dir, tag);
    r = dsl_st_write(path, t, nviews, &m, err);
    free(path);
    dsl_strvec_release(&m);
    free(t);
    return r;
}

int dsl_ckpt_write_optim(const char *dir, const char *tag, int rank, int world,
                         const char *const *names, const float *const *slices,
                         size_t nstate, size_t offset, size_t len, size_t numel,
                         const struct dsl_strvec *meta, char *err)
{
    struct dsl_st_tensor t[DSL_CKPT_MAX_STATE];
    struct dsl_strvec m;
    char *path;
    int r;
    if (dsl_ckpt_tag_bad(tag))
        return dsl_ckpt_tag_error(tag, dir, err);
    if (nstate > DSL_CKPT_MAX_STATE || rank < 0 || rank >= world || offset > numel ||
        len > numel - offset)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "bad optimizer shard: rank %d of %d, [%zu, +%zu) of %zu, %zu states",
                          rank, world, offset, len, numel, nstate);
    memset(t, 0, sizeof(t));
    for (size_t i = 0; i < nstate; i++) {
        t[i].name = names[i];
        t[i].dtype = DSL_ST_F32;
        t[i].ndim = 1;
        t[i].shape[0] = len;
        t[i].data = slices[i];
    }
    meta_common(&m, meta, "optim", tag, numel);
    meta_setnum(&m, "dsl.world_size", (uint64_t)world);
    meta_setnum(&m, "dsl.rank", (uint64_t)rank);
    meta_setnum(&m, "dsl.shard_offset", offset);
    meta_setnum(&m, "dsl.shard_len", len);
    path = dsl_xasprintf("%s/%s.partial/" SHARD_FMT, dir, tag, rank);
    r = dsl_st_write(path, t, nstate, &m, err);
    free(path);
    dsl_strvec_release(&m);
    return r;
}



int dsl_ckpt_commit(const char *dir, const char *tag, int world, char *err)
{
    struct dsl_ckpt c;
    char *part = NULL, *final = NULL, *old = NULL;
    struct stat st;
    int r;
    dsl_ckpt_init(&c);
    if (dsl_ckpt_tag_bad(tag))
        return dsl_ckpt_tag_error(tag, dir, err);
    part = dsl_ckpt_partial_dir(dir, tag);
    final = dsl_xasprintf("%s/%s", dir, tag);
    old = dsl_xasprintf("%s/%s.old", dir, tag);
    /* the same checks as a resume, before anything is switched */
    if ((r = dsl_ckpt_load_dir(&c, part, tag, 1, CKPT_SAVING, 0, err)) < 0)
        goto out;
    if (c.saved_world != world) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint '%s' was written by %d ranks, not %d",
                       part, c.saved_world, world);
        goto out;
    }
    if ((r = dsl_ckpt_fsync_dir(part)) < 0) {
        dsl_seterr(err, r, "cannot sync '%s': %s", part, strerror(-r));
        goto out;
    }
    if (stat(final, &st) == 0) {
        if ((r = dsl_ckpt_remove_tree(old)) < 0 || rename(final, old) < 0) {
            r = dsl_seterr(err, r < 0 ? r : -errno, "cannot move '%s' aside: %s", final,
                           strerror(r < 0 ? -r : errno));
            goto out;
        }
    }
    if (rename(part, final) < 0) {
        r = dsl_seterr(err, -errno, "cannot rename '%s' to '%s': %s", part, final,
                       strerror(errno));
        goto out;
    }
    if ((r = dsl_ckpt_fsync_dir(dir)) < 0) {
        dsl_seterr(err, r, "cannot sync '%s': %s", dir, strerror(-r));
        goto out;
    }
    if ((r = dsl_ckpt_write_latest(dir, tag, err)) < 0)
        goto out;
    dsl_ckpt_remove_tree(old);
    dsl_ckpt_remove_leftovers(dir);
    r = 0;
out:
    dsl_ckpt_release(&c);
    free(part);
    free(final);
    free(old);
    return r;
}

int dsl_ckpt_consolidate(struct dsl_ckpt *cp, const char *dir, const char *tag,
                         const char *out_path, unsigned flags, char *err)
{
    struct dsl_ckpt *c = cp;
    struct dsl_st_tensor *t;
    struct dsl_strvec m;
    int r = dsl_ckpt_load(c, dir, tag, flags, err);
    if (r < 0)
        return r;
    t = dsl_xcalloc(c->nviews ? c->nviews : 1, sizeof(*t));
    for (size_t i = 0; i < c->nviews; i++) {
        t[i].name = c->views[i].name;
        t[i].dtype = DSL_ST_F32;
        t[i].ndim = c->views[i].ndim;
        for (int d = 0; d < c->views[i].ndim; d++)
            t[i].shape[d] = c->views[i].shape[d];
        t[i].data = c->params + c->views[i].offset;
    }
    dsl_strvec_init(&m);
    dsl_env_set(&m, "format", "pt");
    /* what the checkpoint says about its model and run (the GPT's shape "gpt", its
     * tokens "gpt_tokens", step, seed ...), so that `dstrain sample` reads the file;
     * the checkpoint's own bookkeeping (dsl.*) describes files this one is not */
    for (size_t i = 0; i < c->meta.nr; i++) {
        const char *kv = c->meta.v[i];
        if (strncmp(kv, "dsl.", 4) != 0 && strncmp(kv, "format=", 7) != 0)
            dsl_strvec_push(&m, kv);
    }
    /* out_path's missing directories are made once the checkpoint has loaded (as
     * DeepSpeed's zero_to_fp32 makes its output directory), so a bad checkpoint leaves
     * none behind */
    const char *slash = strrchr(out_path, '/');
    if (slash && slash != out_path) {
        char *parent = dsl_xstrndup(out_path, (size_t)(slash - out_path));
        if ((r = dsl_dir_make_all(parent)) < 0)
            dsl_seterr(err, r, "cannot make the directory '%s' for '%s': %s", parent,
                       out_path, strerror(-r));
        free(parent);
    }
    if (r >= 0)
        r = dsl_st_write(out_path, t, c->nviews, &m, err);
    dsl_strvec_release(&m);
    free(t);
    return r;
}
