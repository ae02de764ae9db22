/*
 * `dstrain consolidate`: a checkpoint's parameters as one safetensors file, and the
 * 16-bit weights a stage 3 save writes beside its shards
 * (stage3_gather_16bit_weights_on_model_save).
 *
 * Theory of operation. A checkpoint with a model file is loaded whole and its model
 * written out. A stage 3 checkpoint has none, only per-rank parameter shards, and
 * consolidating it must not need the whole model in memory (that is what the model
 * was sharded for): its shards are opened with their headers only and judged as a
 * set as a load judges them, every file's data is checked against its checksum
 * through one buffer, the output's header is written first (dsl_st_stream), and then
 * one tensor at a time is read from the pieces of the shards that hold it, checked
 * finite, converted to the output's dtype and appended. The largest buffer is one
 * tensor's floats (and its 16-bit copy): c->stream_peak says how large. The output
 * is a temporary file renamed into place at the end, so a failure anywhere leaves
 * nothing at out_path.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "checkpoint_internal.h"
#include "dslaunch/common/dtype.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/xalloc.h"
#include "safetensors.h"
#include "dslaunch/common/banned.h"

/* out_path's missing directories, made once the checkpoint has loaded (as DeepSpeed's
 * zero_to_fp32 makes its output directory), so a bad checkpoint leaves none behind */
static int make_parent(const char *out_path, char *err)
{
    const char *slash = strrchr(out_path, '/');
    int r = 0;
    if (slash && slash != out_path) {
        char *parent = dsl_xstrndup(out_path, (size_t)(slash - out_path));
        if ((r = dsl_dir_make_all(parent)) < 0)
            dsl_seterr(err, r, "cannot make the directory '%s' for '%s': %s", parent,
                       out_path, strerror(-r));
        free(parent);
    }
    return r;
}

/* What the checkpoint says about its model and run (the GPT's shape "gpt", its tokens
 * "gpt_tokens", step, seed ...), so that `dstrain sample` reads the file; the
 * checkpoint's own bookkeeping (dsl.*) describes files this one is not. */
static void out_meta(const struct dsl_ckpt *c, struct dsl_strvec *m)
{
    dsl_strvec_init(m);
    dsl_env_set(m, "format", "pt");
    for (size_t i = 0; i < c->meta.nr; i++) {
        const char *kv = c->meta.v[i];
        if (strncmp(kv, "dsl.", 4) != 0 && strncmp(kv, "format=", 7) != 0)
            dsl_strvec_push(m, kv);
    }
}

/* The output's tensors, one per view of c, of dtype; their data c's parameters when it
 * holds them (names are c's; the array is the caller's to free). */
static struct dsl_st_tensor *tensors_of(const struct dsl_ckpt *c, enum dsl_st_dtype dtype)
{
    struct dsl_st_tensor *t = dsl_xcalloc(c->nviews ? c->nviews : 1, sizeof(*t));
    for (size_t i = 0; i < c->nviews; i++) {
        t[i].name = c->views[i].name;
        t[i].dtype = dtype;
        t[i].ndim = c->views[i].ndim;
        for (int d = 0; d < c->views[i].ndim; d++)
            t[i].shape[d] = c->views[i].shape[d];
        t[i].data = c->params ? c->params + c->views[i].offset : NULL;
    }
    return t;
}

static size_t view_len(const struct dsl_ckpt *c, size_t i)
{
    return (i + 1 < c->nviews ? c->views[i + 1].offset : c->numel) - c->views[i].offset;
}

/* The views one at a time: read from the shards, converted, appended to w. */
static int stream_views(struct dsl_ckpt *c, const struct dsl_ckpt_shards *set,
                        struct dsl_st_stream *w, enum dsl_st_dtype dtype, size_t maxv,
                        unsigned flags, char *err)
{
    size_t esz = dsl_st_dtype_size(dtype);
    float *buf = malloc(maxv ? maxv * sizeof(float) : 1);
    uint16_t *half = dtype == DSL_ST_F32 ? NULL : malloc(maxv ? maxv * sizeof(uint16_t) : 1);
    int r = 0;
    if (!buf || (dtype != DSL_ST_F32 && !half))
        r = dsl_seterr(err, -ENOMEM, "cannot allocate %zu bytes for one tensor",
                       maxv * (sizeof(float) + (half ? 2 : 0)));
    size_t peak = maxv * (sizeof(float) + (dtype == DSL_ST_F32 ? 0 : sizeof(uint16_t)));
    if (peak > c->stream_peak)
        c->stream_peak = peak;
    for (size_t i = 0; i < c->nviews && r >= 0; i++) {
        size_t len = view_len(c, i);
        if ((r = dsl_ckpt_shards_read(set, c, &c->views[i], len, buf, flags, err)) < 0)
            break;
        for (size_t k = 0; half && k < len; k++)
            half[k] = dtype == DSL_ST_BF16 ? dsl_bf16_from_float(buf[k])
                                           : dsl_fp16_from_float(buf[k]);
        r = dsl_st_stream_put(w, half ? (const void *)half : (const void *)buf, len * esz, err);
    }
    free(buf);
    free(half);
    return r;
}

int dsl_ckpt_consolidate_zero3(struct dsl_ckpt *c, const char *path, const char *tag,
                               const char *out_path, enum dsl_st_dtype dtype, unsigned flags,
                               char *err)
{
    struct dsl_ckpt_shards *set = NULL;
    struct dsl_st_stream w;
    struct dsl_strvec m;
    struct dsl_st_tensor *t = NULL;
    size_t maxv = 0;
    int bad = 0;
    dsl_ckpt_init(c);
    c->tag = dsl_xstrdup(tag);
    c->path = dsl_xstrdup(path);
    dsl_strvec_init(&m);
    int r = dsl_ckpt_load_zero3_head(c, path, tag, &bad, 0, flags, err);
    for (size_t i = 0; r >= 0 && i < c->nviews; i++)
        maxv = view_len(c, i) > maxv ? view_len(c, i) : maxv;
    if (r >= 0)
        r = dsl_ckpt_shards_open(c, path, tag, bad, flags, maxv * sizeof(float), &set, err);
    if (r < 0)
        goto out;
    t = tensors_of(c, dtype);
    dsl_strvec_release(&m);
    out_meta(c, &m);
    if ((r = make_parent(out_path, err)) < 0 ||
        (r = dsl_st_stream_begin(&w, out_path, t, c->nviews, &m, err)) < 0)
        goto out;
    if ((r = stream_views(c, set, &w, dtype, maxv, flags, err)) < 0)
        dsl_st_stream_abort(&w);
    else
        r = dsl_st_stream_end(&w, err);
out:
    dsl_ckpt_shards_free(set);
    dsl_strvec_release(&m);
    free(t);
    return r;
}

int dsl_ckpt_consolidate(struct dsl_ckpt *cp, const char *dir, const char *tag,
                         const char *out_path, unsigned flags, char *err)
{
    struct dsl_ckpt *c = cp;
    struct dsl_st_tensor *t;
    struct dsl_strvec m;
    char *path = NULL, *tg = NULL;
    int r = dsl_ckpt_resolve(dir, tag, flags, &path, &tg, err);
    dsl_ckpt_init(c);
    if (r >= 0 && dsl_ckpt_is_zero3(path))
        r = dsl_ckpt_consolidate_zero3(c, path, tg, out_path, DSL_ST_F32, flags, err);
    else if (r >= 0)
        r = 1;
    free(path);
    free(tg);
    if (r <= 0)
        return r;
    if ((r = dsl_ckpt_load(c, dir, tag, flags, err)) < 0)
        return r;
    t = tensors_of(c, DSL_ST_F32);
    out_meta(c, &m);
    r = make_parent(out_path, err);
    if (r >= 0)
        r = dsl_st_write(out_path, t, c->nviews, &m, err);
    dsl_strvec_release(&m);
    free(t);
    return r;
}
