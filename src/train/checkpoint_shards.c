/*
 * Checkpoints, the per-rank files of a tag: the optimizer shards, and at stage 3 the
 * parameter shards, found by name, each validated and compared with the model file
 * (at stage 3 rank 0's parameter shard), then judged as a set and reassembled.
 *
 * Theory of operation. Every shard file is read and compared with the model file
 * before the set is judged, so an edited world size is named as such; then one file
 * per rank of the saved world size, same tag and numel, and ranges that tile
 * [0, numel) exactly (one slice per file, or at stage 3 one piece per bucket, as each
 * rank held them); then the state is copied into full vectors, each value checked
 * to be finite. The same judgement serves a stage 3 save's commit and streamed
 * consolidation with the files' headers only (their data read later, or by its writer),
 * and a resume at a stage 3 save's world with one rank's own two files only
 * (dsl_ckpt_load_rank).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "checkpoint_internal.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/parse.h"
#include "safetensors.h"
#include "dslaunch/common/banned.h"

/* What to do about a stage 3 shard that does not read back as it was saved: it is one
 * rank's part of the model, which no other file holds (appended to err). */
static void advise(unsigned flags, char *err)
{
    size_t n = err ? strlen(err) : 0;
    if (err && !(flags & CKPT_SAVING) && n < DSL_ERR_LEN)
        snprintf(err + n, DSL_ERR_LEN - n, "; no other file holds this rank's part of the "
                 "model: restore the file from where the checkpoint was saved, or resume an "
                 "earlier checkpoint by its tag (--resume TAG)");
}

/* The two sets of per-rank files: optimizer shards (every stage) and, at stage 3,
 * parameter shards; kind is their dsl.kind. */
struct shard_kind {
    const char *post, *kind, *what;
};
static const struct shard_kind kinds[2] = {
    {"_mp_rank_00_optim_states.safetensors", "optim", "an optimizer shard"},
    {"_mp_rank_00_model_states.safetensors", "model_shard", "a parameter shard"},
};

/* "zero_pp_rank_<r><post>" -> r, or -1 (not such a name: another kind's, or none), or
 * -2 (looks like one but is malformed). */
static int shard_rank(const char *name, const struct shard_kind *k)
{
    static const char pre[] = "zero_pp_rank_";
    if (strncmp(name, pre, sizeof(pre) - 1) != 0)
        return -1;
    const char *s = name + sizeof(pre) - 1, *u = strchr(s, '_');
    for (size_t i = 0; i < 2; i++)
        if (&kinds[i] != k && u && strcmp(u, kinds[i].post) == 0)
            return -1;
    if (!u || strcmp(u, k->post) != 0)
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
    uint64_t len;        /* elements of each of its tensors */
    uint64_t (*rg)[2];   /* the flat ranges [offset, length) it holds, in its order */
    size_t nrg;
};

/* Metadata that describes one file only; every other key describes the checkpoint
 * (step, seed, lossscale, world size, tag, numel, the caller's own keys) and must be
 * the same in the model file and every shard. */
static int per_file_key(const char *k, size_t n)
{
    static const char *const own[] = {"dsl.kind",        "dsl.rank",        "dsl.shard_offset",
                                      "dsl.shard_len",   "dsl.shard_ranges", "dsl.crc32",
                                      "dsl.sha256",      "dsl.data_sha256"};
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

/* one range of one shard, to sort all of them by offset */
struct piece {
    uint64_t off, len;
    size_t shard;
};

static int cmp_piece(const void *a, const void *b)
{
    const struct piece *x = a, *y = b;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    return x->shard < y->shard ? -1 : x->shard > y->shard;
}

/* Every rank below the saved world size, each exactly once. */
static int check_ranks(const char *path, const struct shard *sh, size_t n, int W,
                       const struct shard_kind *k, char *err)
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
                           "checkpoint '%s' is incomplete: missing shard file "
                           "'zero_pp_rank_%d%s' (rank %d of %d): copy it back from where the "
                           "checkpoint was saved, or resume an earlier checkpoint by its tag",
                           path, rk, k->post, rk, W);
            return r;
        }
    }
    return 0;
}

/* The ranges a shard holds: dsl.shard_ranges (a stage 3 save: one per bucket), else
 * the one slice dsl.shard_offset, dsl.shard_len. */
static int shard_ranges(struct shard *s, uint64_t numel, char *err)
{
    const char *v = dsl_env_get(&s->f.meta, "dsl.shard_ranges");
    uint64_t off = 0, len = 0;
    int r;
    if (v) {
        if (dsl_ckpt_ranges_parse(v, numel, &s->rg, &s->nrg, &s->len) < 0)
            return dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint file '%s': bad metadata "
                              "'dsl.shard_ranges'", s->file);
        return 0;
    }
    if ((r = dsl_ckpt_meta_num(&s->f, "dsl.shard_offset", &off, err)) < 0 ||
        (r = dsl_ckpt_meta_num(&s->f, "dsl.shard_len", &len, err)) < 0)
        return r;
    if (off > numel || len > numel - off)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "checkpoint file '%s': [%" PRIu64 ", +%" PRIu64 ") is outside the "
                          "%" PRIu64 " elements", s->file, off, len, numel);
    s->rg = dsl_xcalloc(1, sizeof(*s->rg));
    s->rg[0][0] = off;
    s->rg[0][1] = len;
    s->nrg = len ? 1 : 0;
    s->len = len;
    return 0;
}

/* Each shard's own record: an optimizer shard of tag, its rank and range, the same state
 * tensors as the first shard's; sets each shard's range and c->nstate. */
static int check_shard_meta(struct dsl_ckpt *c, const char *tag, struct shard *sh, size_t n,
                            int W, const struct shard_kind *kd, char *err)
{
    int r;
    for (size_t i = 0; i < n; i++) {
        struct shard *s = &sh[i];
        uint64_t numel = 0, ws = 0, rank = 0;
        const char *kind = dsl_env_get(&s->f.meta, "dsl.kind");
        const char *ftag = dsl_env_get(&s->f.meta, "dsl.tag");
        if (!kind || strcmp(kind, kd->kind) != 0 || !ftag || strcmp(ftag, tag) != 0) {
            r = dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint file '%s' is not %s of tag '%s'",
                           s->file, kd->what, tag);
            return r;
        }
        if ((r = dsl_ckpt_meta_num(&s->f, "dsl.numel", &numel, err)) < 0 ||
            (r = dsl_ckpt_meta_num(&s->f, "dsl.world_size", &ws, err)) < 0 ||
            (r = dsl_ckpt_meta_num(&s->f, "dsl.rank", &rank, err)) < 0 ||
            (r = shard_ranges(s, numel, err)) < 0)
            return r;
        if (numel != c->numel || ws != (uint64_t)W || rank != (uint64_t)s->rank) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "checkpoint file '%s' does not match the checkpoint: rank %" PRIu64
                           " of %" PRIu64 ", %" PRIu64 " elements, expected rank %d of %d and "
                           "%zu elements",
                           s->file, rank, ws, numel, s->rank, W, c->numel);
            return r;
        }
        if (kd->kind == kinds[1].kind) { /* parameters: one fp32 vector */
            const struct dsl_st_tensor *t = s->f.n == 1 ? &s->f.t[0] : NULL;
            if (!t || strcmp(t->name, DSL_CKPT_FLAT) != 0 || t->dtype != DSL_ST_F32 ||
                t->ndim != 1 || t->shape[0] != s->len)
                return dsl_seterr(err, DSL_ECHECKPOINT,
                                  "checkpoint file '%s' must hold one fp32 vector '"
                                  DSL_CKPT_FLAT "' of its %" PRIu64 " elements",
                                  s->file, s->len);
            continue;
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

/* The shards' ranges, sorted by offset, cover the c->numel elements without gap or
 * overlap. */
static int check_coverage(const struct dsl_ckpt *c, const char *path, struct shard *sh,
                          size_t n, char *err)
{
    size_t np = 0, k = 0;
    int r = 0;
    for (size_t i = 0; i < n; i++)
        np += sh[i].nrg;
    struct piece *pc = dsl_xcalloc(np ? np : 1, sizeof(*pc));
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < sh[i].nrg; j++)
            pc[k++] = (struct piece){sh[i].rg[j][0], sh[i].rg[j][1], i};
    qsort(pc, np, sizeof(*pc), cmp_piece);
    uint64_t pos = 0;
    for (size_t i = 0; i < np && r == 0; i++) {
        if (pc[i].off != pos)
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "checkpoint '%s': shard file '%s' holds element %" PRIu64
                           ", expected %" PRIu64 " next (%s)",
                           path, sh[pc[i].shard].file, pc[i].off, pos,
                           pc[i].off < pos ? "overlapping shards" : "a gap between shards");
        pos += pc[i].len;
    }
    if (r == 0 && pos != c->numel)
        r = dsl_seterr(err, DSL_ECHECKPOINT,
                       "checkpoint '%s': shards cover %" PRIu64 " of %zu elements", path, pos,
                       c->numel);
    free(pc);
    return r;
}

/* One tensor of shard s (its data: s->len floats) copied to its ranges of dst (numel
 * floats; NULL: none), each value checked to be finite; what is "the parameter" or "optimizer state
 * 'exp_avg' of parameter" in the message. */
static int scatter_ranges(const struct dsl_ckpt *c, const struct shard *s,
                          const struct dsl_st_tensor *t, float *dst, int params, unsigned flags,
                          char *err)
{
    const float *src = t->data;
    for (size_t g = 0; g < s->nrg; g++) {
        size_t off = (size_t)s->rg[g][0], len = (size_t)s->rg[g][1], cnt, j;
        if (dst)
            memcpy(dst + off, src, len * sizeof(float));
        src += len;
        if ((j = dsl_ckpt_first_nonfinite(src - len, len, &cnt)) == len)
            continue;
        size_t flat = off + j;
        const struct dsl_ckpt_param *pv = dsl_ckpt_view_of(c, flat);
        char at[96] = "?", what[160];
        if (pv)
            dsl_ckpt_index_text(pv, flat - pv->offset, at, sizeof(at));
        snprintf(what, sizeof(what), params ? "parameter '%s'" : "optimizer state '%s' of "
                 "parameter '%s'", params ? (pv ? pv->name : "?") : t->name, pv ? pv->name : "?");
        dsl_seterr(err, DSL_ECHECKPOINT,
                   "checkpoint file '%s': %s element %s (flat element %zu) is %s (not finite: "
                   "%zu of the %s %zu elements)",
                   s->file, what, at, flat, dsl_ckpt_nonfinite_word((src - len)[j]), cnt,
                   s->nrg == 1 ? "shard's" : "piece's", len);
        return dsl_ckpt_nonfinite_hint(flags, err);
    }
    return 0;
}

/* The optimizer state (or, params, the parameters), whole, from the shards into c. */
static int gather_state(struct dsl_ckpt *c, struct shard *sh, size_t n, int params,
                        unsigned flags, char *err)
{
    int r;
    for (size_t i = 0; params && i < n; i++)
        if ((r = scatter_ranges(c, &sh[i], &sh[i].f.t[0], c->params, 1, flags, err)) < 0)
            return r;
    for (size_t k = 0; !params && k < c->nstate; k++) {
        c->state_names[k] = dsl_xstrdup(sh[0].f.t[k].name);
        c->state[k] = malloc(c->numel ? c->numel * sizeof(float) : 1);
        if (!c->state[k]) {
            r = dsl_seterr(err, -ENOMEM, "cannot allocate %zu state elements", c->numel);
            return r;
        }
        for (size_t i = 0; i < n; i++) {
            const struct dsl_st_tensor *t = dsl_st_find(&sh[i].f, c->state_names[k]);
            if ((r = scatter_ranges(c, &sh[i], t, c->state[k], 0, flags, err)) < 0)
                return r;
        }
    }
    return 0;
}

/* (its data is read with the other shards) */
int dsl_ckpt_load_zero3_head(struct dsl_ckpt *c, const char *path, const char *tag, int *bad,
                             int alloc, unsigned flags, char *err)
{
    struct dsl_st_file f;
    uint64_t numel = 0, ws = 0;
    char *fp = dsl_xasprintf("%s/" DSL_CKPT_SHARD_FMT, path, 0, "model");
    int r = dsl_st_open(&f, fp, dsl_ckpt_st_flags(flags), err);
    *bad = f.header_bad;
    if (r == DSL_ECHECKPOINT && !f.no_sums && access(fp, F_OK) < 0)
        r = dsl_seterr(err, DSL_ECHECKPOINT,
                       "checkpoint '%s' is incomplete: missing shard file '" DSL_CKPT_SHARD_FMT
                       "' (rank 0): copy it back from where the checkpoint was saved, or "
                       "resume an earlier checkpoint by its tag",
                       path, 0, "model");
    if (r < 0 && f.no_sums)
        r = dsl_ckpt_unverified(c, f.path, flags, err);
    if (r < 0)
        goto out;
    const char *kind = dsl_env_get(&f.meta, "dsl.kind"), *ftag = dsl_env_get(&f.meta, "dsl.tag");
    const char *views = dsl_env_get(&f.meta, "dsl.views");
    if (!kind || strcmp(kind, "model_shard") != 0 || !ftag || strcmp(ftag, tag) != 0) {
        r = dsl_seterr(err, DSL_ECHECKPOINT,
                       "checkpoint file '%s' is not a parameter shard of tag '%s'", fp, tag);
        goto out;
    }
    if ((r = dsl_ckpt_meta_num(&f, "dsl.numel", &numel, err)) < 0 ||
        (r = dsl_ckpt_meta_num(&f, "dsl.world_size", &ws, err)) < 0)
        goto out;
    if (ws < 1 || ws > 1u << 20 || numel > SIZE_MAX / sizeof(float) || !views ||
        dsl_ckpt_views_parse(views, (size_t)numel, &c->views, &c->nviews) < 0) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint file '%s': bad world size, size or "
                       "'dsl.views' metadata", fp);
        goto out;
    }
    c->zero3 = 1;
    c->numel = (size_t)numel;
    c->saved_world = (int)ws;
    c->sum = DSL_ST_SUM_SHA256; /* lowered by the shards' own, as they are read */
    for (size_t i = 0; i < f.meta.nr; i++)
        dsl_strvec_push(&c->meta, f.meta.v[i]);
    c->params = alloc ? malloc(c->numel ? c->numel * sizeof(float) : 1) : NULL;
    if (alloc && !c->params)
        r = dsl_seterr(err, -ENOMEM, "cannot allocate %zu parameters", c->numel);
out:
    dsl_st_release(&f);
    free(fp);
    return r;
}

/* The shard files of one kind in path, each read (stream: its header only, the file
 * kept open) and compared with the reference file, then judged as a set: *shp, *np
 * (the caller's to free with free_shards, also on failure). */
static int collect(struct dsl_ckpt *c, const char *path, const char *tag, int model_bad,
                   int params, int stream, unsigned flags, size_t numel_hint, struct shard **shp,
                   size_t *np, char *err)
{
    const struct shard_kind *kd = &kinds[params ? 1 : 0];
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
        int rk = shard_rank(e->d_name, kd);
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
    char *model = c->zero3 ? dsl_xasprintf("%s/" DSL_CKPT_SHARD_FMT, path, 0, "model")
                           : dsl_xasprintf("%s/" DSL_CKPT_MODEL_FILE, path);
    int model_sha = dsl_ckpt_meta(c, "dsl.sha256") != NULL;
    for (size_t i = 0; i < n && r == 0; i++) {
        struct shard *s = &sh[i];
        if ((r = dsl_ckpt_too_large(s->file, numel_hint, DSL_CKPT_MAX_STATE, err)) < 0)
            break;
        r = stream ? dsl_st_open(&s->f, s->file, dsl_ckpt_st_flags(flags), err)
                   : dsl_st_load(&s->f, s->file, dsl_ckpt_st_flags(flags), err);
        if (r < 0 && !s->f.no_sums && c->zero3)
            advise(flags, err);
        if (r < 0 && s->f.no_sums) {
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
    if ((r = check_ranks(path, sh, n, W, kd, err)) < 0 ||
        (r = check_shard_meta(c, tag, sh, n, W, kd, err)) < 0)
        goto out;
    r = check_coverage(c, path, sh, n, err);
out:
    *shp = sh;
    *np = n;
    return r;
}

static void free_shards(struct shard *sh, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(sh[i].file);
        free(sh[i].rg);
        dsl_st_release(&sh[i].f);
    }
    free(sh);
}

int dsl_ckpt_load_shards(struct dsl_ckpt *c, const char *path, const char *tag, int model_bad,
                         int params, unsigned flags, size_t numel_hint, char *err)
{
    struct shard *sh = NULL;
    size_t n = 0;
    int r = collect(c, path, tag, model_bad, params, 0, flags, numel_hint, &sh, &n, err);
    if (r >= 0)
        r = gather_state(c, sh, n, params, flags, err);
    free_shards(sh, n);
    return r < 0 ? r : 0;
}

int dsl_ckpt_shards_judge(struct dsl_ckpt *c, const char *path, const char *tag, int model_bad,
                          int params, unsigned flags, char *err)
{
    struct shard *sh = NULL;
    size_t n = 0;
    int r = collect(c, path, tag, model_bad, params, 1, flags, 0, &sh, &n, err);
    free_shards(sh, n);
    return r < 0 ? r : 0;
}

struct dsl_ckpt_shards {
    struct shard *sh;
    size_t n;
};

int dsl_ckpt_shards_open(struct dsl_ckpt *c, const char *path, const char *tag, int model_bad,
                         unsigned flags, size_t bufsize, struct dsl_ckpt_shards **out, char *err)
{
    struct dsl_ckpt_shards *set = dsl_xcalloc(1, sizeof(*set));
    int r = collect(c, path, tag, model_bad, 1, 1, flags, 0, &set->sh, &set->n, err);
    void *buf = r < 0 ? NULL : malloc(bufsize ? bufsize : 1);
    if (r >= 0 && !buf)
        r = dsl_seterr(err, -ENOMEM, "cannot allocate %zu bytes to check '%s'", bufsize, path);
    /* every file's data against its checksum before any of it is used */
    for (size_t i = 0; r >= 0 && i < set->n; i++)
        if ((r = dsl_st_verify(&set->sh[i].f, buf, bufsize ? bufsize : 1, err)) < 0)
            advise(flags, err);
    free(buf);
    if (r < 0) {
        dsl_ckpt_shards_free(set);
        return r;
    }
    if (bufsize > c->stream_peak)
        c->stream_peak = bufsize;
    *out = set;
    return 0;
}

int dsl_ckpt_shards_read(const struct dsl_ckpt_shards *set, const struct dsl_ckpt *c,
                         const struct dsl_ckpt_param *v, size_t len, float *buf,
                         unsigned flags, char *err)
{
    size_t lo = v->offset, hi = v->offset + len, cnt, j;
    for (size_t i = 0; i < set->n; i++) {
        const struct shard *s = &set->sh[i];
        uint64_t at = 0; /* the range's first element in the file's vector */
        for (size_t g = 0; g < s->nrg; at += s->rg[g][1], g++) {
            size_t a = (size_t)s->rg[g][0], b = a + (size_t)s->rg[g][1];
            size_t x = a > lo ? a : lo, y = b < hi ? b : hi;
            if (x >= y)
                continue;
            int r = dsl_st_pread(&s->f, &s->f.t[0], (at + (x - a)) * sizeof(float),
                                 buf + (x - lo), (y - x) * sizeof(float), err);
            if (r < 0)
                return r;
        }
    }
    if ((j = dsl_ckpt_first_nonfinite(buf, len, &cnt)) == len)
        return 0;
    char where[96];
    dsl_ckpt_index_text(v, j, where, sizeof(where));
    dsl_seterr(err, DSL_ECHECKPOINT,
               "checkpoint '%s': parameter '%s' element %s is %s (not finite: %zu of its %zu "
               "elements)",
               c->path, v->name, where, dsl_ckpt_nonfinite_word(buf[j]), cnt, len);
    return dsl_ckpt_nonfinite_hint(flags, err);
}

void dsl_ckpt_shards_free(struct dsl_ckpt_shards *set)
{
    if (!set)
        return;
    free_shards(set->sh, set->n);
    free(set);
}

/* One of rank's own files of a stage 3 save in path, read whole and judged on its own
 * (kind, tag, rank, world, ranges) and against rank 0's parameter shard, ref, whose
 * header c holds. */
static int own_file(struct dsl_ckpt *c, const char *path, const char *tag, int rank, int world,
                    int params, unsigned flags, size_t numel_hint, struct shard *s,
                    const char *ref, char *err)
{
    const struct shard_kind *kd = &kinds[params ? 1 : 0];
    int r;
    s->rank = rank;
    s->file = dsl_xasprintf("%s/zero_pp_rank_%d%s", path, rank, kd->post);
    if ((r = dsl_ckpt_too_large(s->file, numel_hint, DSL_CKPT_MAX_STATE, err)) < 0)
        return r;
    if ((r = dsl_st_load(&s->f, s->file, dsl_ckpt_st_flags(flags), err)) < 0 && !s->f.no_sums)
        advise(flags, err);
    if (r < 0 && s->f.no_sums)
        r = dsl_ckpt_unverified(c, s->file, flags, err);
    if (r == DSL_ECHECKPOINT && access(s->file, F_OK) < 0)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "checkpoint '%s' is incomplete: missing shard file 'zero_pp_rank_%d%s' "
                          "(rank %d): copy it back from where the checkpoint was saved, or "
                          "resume an earlier checkpoint by its tag",
                          path, rank, kd->post, rank);
    if (r < 0)
        return r;
    if (s->f.header_bad)
        return dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint file '%s': its " EDITED, s->file);
    if (s->f.sum == DSL_ST_SUM_NONE && (r = dsl_ckpt_unverified(c, s->file, flags, err)) < 0)
        return r;
    c->sum = s->f.sum < c->sum ? s->f.sum : c->sum;
    if ((r = compare_meta(c, ref, 0, &s->f, err)) < 0)
        return r;
    return check_shard_meta(c, tag, s, 1, world, kd, err);
}

/* rank's pieces of one tensor of s into a vector of its own, checked finite */
static float *own_vector(struct dsl_ckpt *c, const struct shard *s,
                         const struct dsl_st_tensor *t, int params, unsigned flags, char *err)
{
    float *v = malloc(s->len ? (size_t)s->len * sizeof(float) : 1);
    if (!v) {
        dsl_seterr(err, -ENOMEM, "cannot allocate %" PRIu64 " elements", s->len);
        return NULL;
    }
    memcpy(v, t->data, (size_t)t->nbytes);
    if (scatter_ranges(c, s, t, NULL, params, flags, err) < 0) {
        free(v);
        return NULL;
    }
    return v;
}

int dsl_ckpt_load_rank(struct dsl_ckpt *c, const char *dir, const char *tag, int rank,
                       int world, unsigned flags, size_t numel, char *err)
{
    struct shard sh[2];
    char *path = NULL, *t = NULL, *ref = NULL;
    int bad = 0, r;
    memset(sh, 0, sizeof(sh));
    dsl_strvec_init(&sh[0].f.meta);
    dsl_strvec_init(&sh[1].f.meta);
    dsl_ckpt_init(c);
    if ((r = dsl_ckpt_resolve(dir, tag, flags, &path, &t, err)) < 0)
        return r;
    c->tag = t;
    c->path = path;
    if (!dsl_ckpt_is_zero3(path))
        goto whole;
    ref = dsl_xasprintf("%s/" DSL_CKPT_SHARD_FMT, path, 0, "model");
    /* rank 0's header says the world size, which every rank can read */
    if ((r = dsl_ckpt_load_zero3_head(c, path, t, &bad, 0, flags, err)) < 0)
        goto out;
    if (bad) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint file '%s': its " EDITED, ref);
        goto out;
    }
    if (c->saved_world != world)
        goto whole;
    if ((r = own_file(c, path, t, rank, world, 1, flags, numel, &sh[0], ref, err)) < 0 ||
        (r = own_file(c, path, t, rank, world, 0, flags, numel, &sh[1], ref, err)) < 0)
        goto out;
    if (sh[0].nrg != sh[1].nrg || memcmp(sh[0].rg, sh[1].rg, sh[0].nrg * sizeof(*sh[0].rg))) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint file '%s' holds other pieces than '%s'",
                       sh[1].file, sh[0].file);
        goto out;
    }
    c->zero3 = 1;
    c->shard_len = (size_t)sh[0].len;
    c->nranges = sh[0].nrg;
    c->ranges = dsl_xcalloc(c->nranges ? c->nranges : 1, sizeof(*c->ranges));
    for (size_t i = 0; i < c->nranges; i++) {
        c->ranges[i][0] = (size_t)sh[0].rg[i][0];
        c->ranges[i][1] = (size_t)sh[0].rg[i][1];
    }
    r = (c->params = own_vector(c, &sh[0], &sh[0].f.t[0], 1, flags, err)) ? 0 : DSL_ECHECKPOINT;
    for (size_t k = 0; r == 0 && k < c->nstate; k++) {
        c->state_names[k] = dsl_xstrdup(sh[1].f.t[k].name);
        if (!(c->state[k] = own_vector(c, &sh[1], &sh[1].f.t[k], 0, flags, err)))
            r = DSL_ECHECKPOINT;
    }
    goto out;
whole:
    r = 1;
out:
    for (int i = 0; i < 2; i++) {
        free(sh[i].file);
        free(sh[i].rg);
        dsl_st_release(&sh[i].f);
    }
    free(ref);
    if (r != 0)
        dsl_ckpt_release(c);
    return r;
}
