/*
 * Checkpoints, the optimizer shards of a tag: found by name, each validated and
 * compared with the model file, then judged as a set and reassembled.
 *
 * Theory of operation. Every shard file is read and compared with the model file
 * before the set is judged, so an edited world size is named as such; then one file
 * per rank of the saved world size, same tag and numel, and slices that tile
 * [0, numel) exactly; then the state is copied into full vectors, each value checked
 * to be finite.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "checkpoint_internal.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/parse.h"
#include "safetensors.h"
#include "dslaunch/common/banned.h"

/* "zero_pp_rank_<r>_mp_rank_00_optim_states.safetensors" -> r, or -1 (not a shard
 * name), or -2 (looks like one but is malformed). */
static int shard_rank(const char *name)
{
    static const char pre[] = "zero_pp_rank_", post[] = "_mp_rank_00_optim_states.safetensors";
    if (strncmp(name, pre, sizeof(pre) - 1) != 0)
        return -1;
    const char *s = name + sizeof(pre) - 1, *u = strchr(s, '_');
    if (!u || strcmp(u, post) != 0)
        return -2;
    char *num = dsl_xstrndup(s, (size_t)(u - s));
    int r;
    if (dsl_parse_int(num, 0, 1 << 20, &r) < 0 || (num[0] == '0' && num[1]))
        r = -2;
    free(num);
    return r;
}

struct shard {
    int rank;
    char *file;
    struct dsl_st_file f;
    uint64_t off, len;
};

/* Metadata that describes one file only; every other key describes the checkpoint
 * (step, seed, lossscale, world size, tag, numel, the caller's own keys) and must be
 * the same in the model file and every shard. */
static int per_file_key(const char *k, size_t n)
{
    static const char *const own[] = {"dsl.kind",         "dsl.rank",  "dsl.shard_offset",
                                      "dsl.shard_len",    "dsl.crc32", "dsl.sha256",
                                      "dsl.data_sha256"};
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        if (strlen(own[i]) == n && strncmp(k, own[i], n) == 0)
            return 1;
    return 0;
}


/* One key that differs between the model file (value mv) and shard s (sv); either may
 * be NULL (missing). The file named first, by its path, is the one whose checksum
 * failed when only one did; the other is in the same directory, named by its name. */
static int meta_differs(const char *model, int model_bad, const struct dsl_st_file *s,
                        const char *key, const char *mv, const char *sv, char *err)
{
    char a[96], b[96];
    const char *sname = strrchr(s->path, '/') ? strrchr(s->path, '/') + 1 : s->path;
    snprintf(a, sizeof(a), mv ? "'%.80s'" : "missing", mv);
    snprintf(b, sizeof(b), sv ? "'%.80s'" : "missing", sv);
    if (model_bad && !s->header_bad)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "checkpoint file '%s': metadata '%s' is %s but '%s' says %s; "
                          "the model file's " EDITED,
                          model, key, a, sname, b);
    return dsl_seterr(err, DSL_ECHECKPOINT,
                      "checkpoint file '%s': metadata '%s' is %s but the model file says %s%s",
                      s->path, key, b, a, s->header_bad ? "; its " EDITED : "");
}

static int compare_meta(const struct dsl_ckpt *c, const char *model, int model_bad,
                        const struct dsl_st_file *s, char *err)
{
    for (size_t i = 0; i < c->meta.nr; i++) {
        const char *kv = c->meta.v[i], *eq = strchr(kv, '=');
        if (!eq || per_file_key(kv, (size_t)(eq - kv)))
            continue;
        char *k = dsl_xstrndup(kv, (size_t)(eq - kv));
        const char *sv = dsl_env_get(&s->meta, k);
        int r = 0;
        if (!sv || strcmp(sv, eq + 1) != 0)
            r = meta_differs(model, model_bad, s, k, eq + 1, sv, err);
        free(k);
        if (r < 0)
            return r;
    }
    for (size_t i = 0; i < s->meta.nr; i++) {
        const char *kv = s->meta.v[i], *eq = strchr(kv, '=');
        if (!eq || per_file_key(kv, (size_t)(eq - kv)))
            continue;
        char *k = dsl_xstrndup(kv, (size_t)(eq - kv));
        int r = dsl_env_get(&c->meta, k)
                    ? 0
                    : meta_differs(model, model_bad, s, k, NULL, eq + 1, err);
        free(k);
        if (r < 0)
            return r;
    }
    return 0;
}

static int cmp_shard_off(const void *a, const void *b)
{
    const struct shard *x = a, *y = b;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    return x->rank - y->rank;
}

/* Every rank below the saved world size, each exactly once. */
static int check_ranks(const char *path, const struct shard *sh, size_t n, int W, char *err)
{
    int r;
    for (size_t i = 0; i < n; i++) {
        if (sh[i].rank >= W) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "unexpected shard file '%s': the checkpoint was saved by %d rank%s",
                           sh[i].file, W, W == 1 ? "" : "s");
            return r;
        }
    }
    /* every rank exactly once (names are unique in a directory, ranks < W) */
    for (int rk = 0; rk < W; rk++) {
        int found = 0;
        for (size_t i = 0; i < n; i++)
            found += sh[i].rank == rk;
        if (!found) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "checkpoint '%s' is incomplete: missing shard file '" SHARD_FMT
                           "' (rank %d of %d)",
                           path, rk, rk, W);
            return r;
        }
    }
    return 0;
}

/* Each shard's own record: an optimizer shard of tag, its rank and range, the same state
 * tensors as the first shard's; sets each shard's range and c->nstate. */
static int check_shard_meta(struct dsl_ckpt *c, const char *tag, struct shard *sh, size_t n,
                            int W, char *err)
{
    int r;
    for (size_t i = 0; i < n; i++) {
        struct shard *s = &sh[i];
        uint64_t numel = 0, ws = 0, rank = 0;
        const char *kind = dsl_env_get(&s->f.meta, "dsl.kind");
        const char *ftag = dsl_env_get(&s->f.meta, "dsl.tag");
        if (!kind || strcmp(kind, "optim") != 0 || !ftag || strcmp(ftag, tag) != 0) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "checkpoint file '%s' is not an optimizer shard of tag '%s'",
                           s->file, tag);
            return r;
        }
        if ((r = dsl_ckpt_meta_num(&s->f, "dsl.numel", &numel, err)) < 0 ||
            (r = dsl_ckpt_meta_num(&s->f, "dsl.world_size", &ws, err)) < 0 ||
            (r = dsl_ckpt_meta_num(&s->f, "dsl.rank", &rank, err)) < 0 ||
            (r = dsl_ckpt_meta_num(&s->f, "dsl.shard_offset", &s->off, err)) < 0 ||
            (r = dsl_ckpt_meta_num(&s->f, "dsl.shard_len", &s->len, err)) < 0)
            return r;
        if (numel != c->numel || ws != (uint64_t)W || rank != (uint64_t)s->rank ||
            s->off > numel || s->len > numel - s->off) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "checkpoint file '%s' does not match the checkpoint: rank %" PRIu64
                           " of %" PRIu64 ", [%" PRIu64 ", +%" PRIu64 ") of %" PRIu64
                           " elements, expected rank %d of %d and %zu elements",
                           s->file, rank, ws, s->off, s->len, numel, s->rank, W, c->numel);
            return r;
        }
        if (i == 0) {
            if (s->f.n > DSL_CKPT_MAX_STATE) {
                r = dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint file '%s': too many tensors",
                               s->file);
                return r;
            }
            c->nstate = s->f.n;
        }
        if (s->f.n != c->nstate) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "checkpoint file '%s' holds %zu state tensors, '%s' holds %zu",
                           s->file, s->f.n, sh[0].file, c->nstate);
            return r;
        }
        for (size_t k = 0; k < s->f.n; k++) {
            const struct dsl_st_tensor *t = &s->f.t[k];
            if (t->dtype != DSL_ST_F32 || t->ndim != 1 || t->shape[0] != s->len ||
                (i > 0 && !dsl_st_find(&sh[0].f, t->name))) {
                r = dsl_seterr(err, DSL_ECHECKPOINT,
                               "checkpoint file '%s': state tensor '%s' is not an fp32 vector "
                               "of the shard's %" PRIu64 " elements present in every shard",
                               s->file, t->name, s->len);
                return r;
            }
        }
    }
    return 0;
}

/* The shards, sorted by offset, cover the c->numel elements without gap or overlap. */
static int check_coverage(const struct dsl_ckpt *c, const char *path, struct shard *sh,
                          size_t n, char *err)
{
    int r;
    qsort(sh, n, sizeof(*sh), cmp_shard_off);
    uint64_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        if (sh[i].off != pos) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "checkpoint '%s': shard file '%s' starts at element %" PRIu64
                           ", expected %" PRIu64 " (%s)",
                           path, sh[i].file, sh[i].off, pos,
                           sh[i].off < pos ? "overlapping shards" : "a gap between shards");
            return r;
        }
        pos += sh[i].len;
    }
    if (pos != c->numel) {
        r = dsl_seterr(err, DSL_ECHECKPOINT,
                       "checkpoint '%s': shards cover %" PRIu64 " of %zu elements", path, pos,
                       c->numel);
        return r;
    }
    return 0;
}

/* The optimizer state, whole, from the shards into c, refused if not finite. */
static int gather_state(struct dsl_ckpt *c, struct shard *sh, size_t n, unsigned flags,
                        char *err)
{
    int r;
    for (size_t k = 0; k < c->nstate; k++) {
        c->state_names[k] = dsl_xstrdup(sh[0].f.t[k].name);
        c->state[k] = malloc(c->numel ? c->numel * sizeof(float) : 1);
        if (!c->state[k]) {
            r = dsl_seterr(err, -ENOMEM, "cannot allocate %zu state elements", c->numel);
            return r;
        }
        for (size_t i = 0; i < n; i++) {
            const struct dsl_st_tensor *t = dsl_st_find(&sh[i].f, c->state_names[k]);
            float *v = c->state[k] + sh[i].off;
            size_t len = (size_t)sh[i].len, cnt, j;
            memcpy(v, t->data, (size_t)t->nbytes);
            if ((j = dsl_ckpt_first_nonfinite(v, len, &cnt)) < len) {
                size_t flat = (size_t)sh[i].off + j;
                const struct dsl_ckpt_param *pv = dsl_ckpt_view_of(c, flat);
                char at[96] = "?";
                if (pv)
                    dsl_ckpt_index_text(pv, flat - pv->offset, at, sizeof(at));
                dsl_seterr(err, DSL_ECHECKPOINT,
                           "checkpoint file '%s': optimizer state '%s' of parameter '%s' "
                           "element %s (flat element %zu) is %s (not finite: %zu of the "
                           "shard's %zu elements)",
                           sh[i].file, t->name, pv ? pv->name : "?", at, flat,
                           dsl_ckpt_nonfinite_word(v[j]), cnt, len);
                r = dsl_ckpt_nonfinite_hint(flags, err);
                return r;
            }
        }
    }
    return 0;
}

int dsl_ckpt_load_shards(struct dsl_ckpt *c, const char *path, const char *tag, int model_bad,
                       unsigned flags, size_t numel_hint, char *err)
{
    int W = c->saved_world, r = 0;
    struct shard *sh = NULL;
    size_t n = 0, alloc = 0;
    DIR *d = opendir(path);
    struct dirent *e;
    if (!d)
        return dsl_seterr(err, DSL_ECHECKPOINT, "cannot open checkpoint '%s': %s", path,
                          strerror(errno));
    /* every shard file is read and compared with the model file before the shard set
     * is judged, so that an edited world size is named as such */
    while ((e = readdir(d))) {
        int rk = shard_rank(e->d_name);
        if (rk == -1)
            continue;
        if (rk == -2) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "unexpected shard file '%s/%s': the checkpoint was saved by %d "
                           "rank%s",
                           path, e->d_name, W, W == 1 ? "" : "s");
            break;
        }
        if (n == alloc) {
            alloc = alloc ? 2 * alloc : 8;
            sh = dsl_xreallocarray(sh, alloc, sizeof(*sh));
        }
        memset(&sh[n], 0, sizeof(sh[n]));
        sh[n].rank = rk;
        sh[n].file = dsl_xasprintf("%s/%s", path, e->d_name);
        dsl_strvec_init(&sh[n].f.meta);
        n++;
    }
    closedir(d);
    if (r < 0)
        goto out;
    char *model = dsl_xasprintf("%s/" DSL_CKPT_MODEL_FILE, path);
    int model_sha = dsl_ckpt_meta(c, "dsl.sha256") != NULL;
    for (size_t i = 0; i < n && r == 0; i++) {
        struct shard *s = &sh[i];
        if ((r = dsl_ckpt_too_large(s->file, numel_hint, DSL_CKPT_MAX_STATE, err)) < 0)
            break;
        if ((r = dsl_st_load(&s->f, s->file, dsl_ckpt_st_flags(flags), err)) < 0 && s->f.no_sums) {
            if (model_sha) /* refused from its header, before its data was read */
                r = dsl_seterr(err, DSL_ECHECKPOINT,
                               "checkpoint file '%s' lacks a SHA-256 checksum but the model "
                               "file '%s' has one: a checksum was removed",
                               s->file, model);
            else
                r = dsl_ckpt_unverified(c, s->file, flags, err);
        }
        if (r < 0 || (r = compare_meta(c, model, model_bad, &s->f, err)) < 0)
            break;
        if (s->f.header_bad)
            r = dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint file '%s': its " EDITED, s->file);
        else if ((dsl_env_get(&s->f.meta, "dsl.sha256") != NULL) != model_sha)
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "checkpoint file '%s' %s a SHA-256 checksum but the model file '%s' "
                           "%s: a checksum was removed",
                           model_sha ? s->file : model, model_sha ? "lacks" : "has",
                           model_sha ? model : s->file, model_sha ? "has one" : "does not");
        else if (s->f.sum == DSL_ST_SUM_NONE && !model_bad)
            r = dsl_ckpt_unverified(c, s->file, flags, err);
        if (r == 0 && s->f.sum < c->sum)
            c->sum = s->f.sum;
    }
    if (r == 0 && model_bad)
        r = dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint file '%s': its " EDITED, model);
    free(model);
    if (r < 0)
        goto out;
    if ((r = check_ranks(path, sh, n, W, err)) < 0 ||
        (r = check_shard_meta(c, tag, sh, n, W, err)) < 0 ||
        (r = check_coverage(c, path, sh, n, err)) < 0 ||
        (r = gather_state(c, sh, n, flags, err)) < 0)
        goto out;
    r = 0;
out:
    for (size_t i = 0; i < n; i++) {
        free(sh[i].file);
        dsl_st_release(&sh[i].f);
    }
    free(sh);
    return r;
}
