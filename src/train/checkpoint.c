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
#include "dslaunch/common/dynbuf.h"
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

/* nstate fp32 vectors of len elements into path with the metadata m */
static int write_state(const char *path, const char *const *names, const float *const *slices,
                       size_t nstate, size_t len, const struct dsl_strvec *m, char *err)
{
    struct dsl_st_tensor t[DSL_CKPT_MAX_STATE];
    memset(t, 0, sizeof(t));
    for (size_t i = 0; i < nstate; i++) {
        t[i].name = names[i];
        t[i].dtype = DSL_ST_F32;
        t[i].ndim = 1;
        t[i].shape[0] = len;
        t[i].data = slices[i];
    }
    return dsl_st_write(path, t, nstate, m, err);
}

int dsl_ckpt_write_optim(const char *dir, const char *tag, int rank, int world,
                         const char *const *names, const float *const *slices,
                         size_t nstate, size_t offset, size_t len, size_t numel,
                         const struct dsl_strvec *meta, char *err)
{
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
    meta_common(&m, meta, "optim", tag, numel);
    meta_setnum(&m, "dsl.world_size", (uint64_t)world);
    meta_setnum(&m, "dsl.rank", (uint64_t)rank);
    meta_setnum(&m, "dsl.shard_offset", offset);
    meta_setnum(&m, "dsl.shard_len", len);
    path = dsl_xasprintf("%s/%s.partial/" SHARD_FMT, dir, tag, rank);
    r = write_state(path, names, slices, nstate, len, &m, err);
    free(path);
    dsl_strvec_release(&m);
    return r;
}

/* "0.weight[64,784];0.bias[64]" (dsl.views) into b; -1 for a name that cannot be told
 * apart from the separators */
static int views_text(struct dsl_dynbuf *b, const struct dsl_ckpt_param *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strpbrk(v[i].name, "[];="))
            return -1;
        dsl_dynbuf_addf(b, "%s%s[", i ? ";" : "", v[i].name);
        for (int d = 0; d < v[i].ndim; d++)
            dsl_dynbuf_addf(b, "%s%" PRIu64, d ? "," : "", v[i].shape[d]);
        dsl_dynbuf_addstr(b, "]");
    }
    return 0;
}

/* the checkpoint's keys (caller's, format, tag, numel, world, views) and this rank's */
static int zero3_meta(struct dsl_strvec *m, const struct dsl_strvec *meta, const char *tag,
                      int rank, int world, const struct dsl_ckpt_param *views, size_t nviews,
                      size_t numel, const size_t (*ranges)[2], size_t nranges, size_t *len)
{
    struct dsl_dynbuf b;
    int r;
    dsl_dynbuf_init(&b, (size_t)-1 / 2);
    *len = 0;
    for (size_t i = 0; i < nranges; i++) {
        dsl_dynbuf_addf(&b, "%s%zu+%zu", i ? "," : "", ranges[i][0], ranges[i][1]);
        *len += ranges[i][1];
    }
    meta_common(m, meta, "model_shard", tag, numel);
    meta_setnum(m, "dsl.world_size", (uint64_t)world);
    meta_setnum(m, "dsl.rank", (uint64_t)rank);
    dsl_env_set(m, "dsl.shard_ranges", b.buf ? b.buf : "");
    b.len = 0;
    if (b.buf)
        b.buf[0] = '\0';
    r = views_text(&b, views, nviews);
    dsl_env_set(m, "dsl.views", b.buf ? b.buf : "");
    dsl_dynbuf_release(&b);
    return r;
}

/* A stage 3 file just written, read back as a load reads it: its checksums, and every
 * value finite (the commit judges the set from the headers alone). */
static int reread(const char *path, char *err)
{
    struct dsl_st_file f;
    int r = dsl_st_load(&f, path, DSL_ST_NEED_SUM, err);
    for (size_t k = 0; r >= 0 && k < f.n; k++) {
        size_t n = (size_t)(f.t[k].nbytes / sizeof(float)), cnt;
        size_t j = dsl_ckpt_first_nonfinite(f.t[k].data, n, &cnt);
        if (j == n)
            continue;
        dsl_seterr(err, DSL_ECHECKPOINT,
                   "checkpoint file '%s': '%s' element %zu is %s (not finite: %zu of %zu)",
                   path, f.t[k].name, j, dsl_ckpt_nonfinite_word(((const float *)f.t[k].data)[j]),
                   cnt, n);
        r = dsl_ckpt_nonfinite_hint(CKPT_SAVING, err);
    }
    dsl_st_release(&f);
    return r;
}

int dsl_ckpt_write_zero3(const char *dir, const char *tag, int rank, int world,
                         const struct dsl_ckpt_param *views, size_t nviews, size_t numel,
                         const size_t (*ranges)[2], size_t nranges, const float *params,
                         const char *const *names, const float *const *slices, size_t nstate,
                         const struct dsl_strvec *meta, char *err)
{
    struct dsl_strvec m;
    size_t len = 0;
    int r;
    if (dsl_ckpt_tag_bad(tag))
        return dsl_ckpt_tag_error(tag, dir, err);
    if (nstate > DSL_CKPT_MAX_STATE || rank < 0 || rank >= world)
        return dsl_seterr(err, DSL_ECHECKPOINT, "bad parameter shard: rank %d of %d, %zu "
                          "states", rank, world, nstate);
    if ((r = check_views(views, nviews, numel, err)) < 0)
        return r;
    if (zero3_meta(&m, meta, tag, rank, world, views, nviews, numel, ranges, nranges, &len) < 0) {
        dsl_strvec_release(&m);
        return dsl_seterr(err, DSL_ECHECKPOINT, "a parameter name holds '[', ']', ';' or '=': "
                          "it cannot be written into a stage 3 checkpoint");
    }
    const char *flat[1] = {DSL_CKPT_FLAT};
    const float *pv[1] = {params};
    char *path = dsl_xasprintf("%s/%s.partial/" DSL_CKPT_SHARD_FMT, dir, tag, rank, "model");
    if ((r = write_state(path, flat, pv, 1, len, &m, err)) >= 0)
        r = reread(path, err);
    free(path);
    if (r >= 0) {
        dsl_env_set(&m, "dsl.kind", "optim");
        path = dsl_xasprintf("%s/%s.partial/" SHARD_FMT, dir, tag, rank);
        if ((r = write_state(path, names, slices, nstate, len, &m, err)) >= 0)
            r = reread(path, err);
        free(path);
    }
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
    /* the same checks as a resume, before anything is switched; a stage 3 save's from
     * the headers (each rank checked its own files' data), so no rank reads the model */
    if ((r = dsl_ckpt_load_dir(&c, part, tag, 1, CKPT_SAVING | CKPT_HEADERS, 0, err)) < 0)
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
