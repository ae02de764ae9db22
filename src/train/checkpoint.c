/*
 * Checkpoints: DeepSpeed's directory shape with safetensors files (see checkpoint.h).
 *
 * Theory of operation. A save is a small two-phase commit driven by the trainer:
 * rank 0 makes a fresh <dir>/<tag>.partial/, every rank writes its files there (each
 * one atomically: temp file, fsync, rename, fsync dir), and after a barrier rank 0
 * re-reads and validates the whole partial directory with the same code the loader
 * uses, renames it to <dir>/<tag> and only then rewrites <dir>/latest (temp file,
 * fsync, rename, fsync dir). Until that last rename, `latest` names the previous
 * checkpoint, which nothing in a save ever modifies. Re-saving an existing tag moves
 * the old directory to <tag>.old first and deletes it after the switch; a crash
 * between those two renames leaves <tag> missing with the complete <tag>.old beside
 * it, which the loader then uses.
 *
 * Loading reads every file and validates it (dsl_st_load(): the header against the
 * file's size before the data is allocated, then the checksums), then checks the
 * shard set: one file per rank of the saved world size, same tag and numel, and
 * slices that tile [0, numel) exactly. The reassembled full vectors make the world
 * size at resume independent of the one at save. A file without any checksum stops
 * the load unless the caller allows it (DSL_CKPT_ALLOW_UNVERIFIED), and every value
 * is checked to be finite as it is copied in, which nothing allows: the commit runs
 * the same load over the partial directory (CKPT_SAVING only changes the advice in
 * the message), so a diverged run's save fails instead of moving `latest`.
 *
 * The save's own directories, <tag>.partial and <tag>.old, are never tags (bad_tag),
 * so neither a name nor `latest` can make the loader take one. A stale partial is
 * removed whole (remove_tree: links unlinked, never followed) by the next prepare of
 * its tag, by every commit, and by the trainer after a failed save (dsl_ckpt_abort).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/parse.h"
#include "safetensors.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoints store little-endian floats; a big-endian host needs byte swapping here"
#endif

#define SHARD_FMT "zero_pp_rank_%d_mp_rank_00_optim_states.safetensors"

void dsl_ckpt_tag(char *buf, size_t n, uint64_t step)
{
    snprintf(buf, n, "global_step%" PRIu64, step);
}

void dsl_ckpt_slice(size_t numel, int rank, int world, size_t *off, size_t *len)
{
    size_t w = world > 0 ? (size_t)world : 1, r = rank > 0 ? (size_t)rank : 0;
    size_t base = numel / w, rem = numel % w;
    *off = r * base + (r < rem ? r : rem);
    *len = base + (r < rem ? 1 : 0);
}

/* a name that ends in suffix (and has more before it) */
static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

/* The suffixes of a save's own directories: <tag>.partial (being written, or left by a
 * save that died) and <tag>.old (the copy a re-save moves aside). No tag ends so, so
 * neither is ever taken for a checkpoint by name or through `latest`. */
static int reserved_tag(const char *tag)
{
    return ends_with(tag, ".partial") || ends_with(tag, ".old");
}

static int bad_tag(const char *tag)
{
    return !tag || !tag[0] || strchr(tag, '/') || strcmp(tag, ".") == 0 ||
           strcmp(tag, "..") == 0 || strlen(tag) > 200 || reserved_tag(tag);
}

/* the error for a bad tag; a reserved one says what it is */
static int tag_error(const char *tag, const char *dir, char *err)
{
    if (tag && reserved_tag(tag))
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "'%s' in '%s' is not a checkpoint: a '.partial' directory is a save "
                          "that did not finish (a '.old' one the copy a re-save moved aside); "
                          "name a tag without the suffix, or 'latest'",
                          tag, dir ? dir : ".");
    return dsl_seterr(err, DSL_ECHECKPOINT, "bad checkpoint tag '%s'", tag ? tag : "");
}

/* Empty the directory open at dfd (closed here): files and links are unlinked (a link's
 * target is never touched), directories emptied and removed, at most depth levels deep. */
static int empty_dir(int dfd, int depth)
{
    DIR *d = fdopendir(dfd);
    struct dirent *e;
    int r = 0;
    if (!d) {
        r = -errno;
        close(dfd);
        return r;
    }
    while ((e = readdir(d))) {
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
            int sub = depth > 0 ? openat(dfd, e->d_name,
                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                                : -1;
            int k = sub < 0 ? (depth > 0 ? -errno : -ELOOP) : empty_dir(sub, depth - 1);
            if (k == 0 && unlinkat(dfd, e->d_name, AT_REMOVEDIR) < 0)
                k = -errno;
            if (k < 0 && r == 0)
                r = k;
        } else if (unlinkat(dfd, e->d_name, 0) < 0 && errno != ENOENT && r == 0) {
            r = -errno;
        }
    }
    closedir(d);
    return r;
}

/* Remove what is at path, a directory of ours (a .partial or .old one): a link or file
 * there is unlinked, not followed; a directory is emptied (whatever a killed save or
 * anyone else left in it, a few levels deep) and removed. 0 when nothing is left. */
static int remove_tree(const char *path)
{
    struct stat st;
    int dfd, r;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISDIR(st.st_mode))
        return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
    if ((dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return -errno;
    if ((r = empty_dir(dfd, 8)) < 0)
        return r;
    return rmdir(path) < 0 && errno != ENOENT ? -errno : 0;
}

static int fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;
    if (fd < 0)
        return -errno;
    if (fsync(fd) < 0)
        r = -errno;
    close(fd);
    return r;
}

static char *partial_dir(const char *dir, const char *tag)
{
    return dsl_xasprintf("%s/%s.partial", dir, tag);
}

int dsl_ckpt_prepare(const char *dir, const char *tag, char *err)
{
    char *p;
    int r;
    if (bad_tag(tag))
        return tag_error(tag, dir, err);
    if ((r = dsl_dir_make_all(dir)) < 0)
        return dsl_seterr(err, r, "cannot create checkpoint directory '%s': %s", dir,
                          strerror(-r));
    p = partial_dir(dir, tag);
    if ((r = remove_tree(p)) < 0)
        dsl_seterr(err, r, "cannot remove stale '%s': %s", p, strerror(-r));
    else if (mkdir(p, 0755) < 0)
        r = dsl_seterr(err, -errno, "cannot create '%s': %s", p, strerror(errno));
    free(p);
    return r;
}

void dsl_ckpt_abort(const char *dir, const char *tag)
{
    if (bad_tag(tag))
        return;
    char *p = partial_dir(dir, tag);
    remove_tree(p);
    free(p);
}

#define PROBE_PREFIX ".dstrain-shared-"

int dsl_ckpt_probe_write(const char *dir, const char *hex, char *err)
{
    int r;
    if ((r = dsl_dir_make_all(dir)) < 0)
        return dsl_seterr(err, r, "cannot create checkpoint directory '%s': %s", dir,
                          strerror(-r));
    char *path = dsl_xasprintf("%s/" PROBE_PREFIX "%s", dir, hex);
    int fd = dsl_file_create(AT_FDCWD, path, path, 0644, DSL_FILE_FAIL, err);
    if (fd >= 0) {
        size_t len = strlen(hex);
        if (write(fd, hex, len) != (ssize_t)len)
            fd = dsl_seterr(err, -EIO, "cannot write '%s': %s", path, strerror(errno));
        else if (close(fd) < 0)
            fd = dsl_seterr(err, -errno, "cannot write '%s': %s", path, strerror(errno));
        if (fd < 0)
            unlink(path);
    }
    free(path);
    return fd < 0 ? fd : 0;
}

int dsl_ckpt_probe_sees(const char *dir, const char *hex, char *err)
{
    char *path = dsl_xasprintf("%s/" PROBE_PREFIX "%s", dir, hex);
    size_t size;
    int fd = dsl_file_open_regular(path, &size, err), r = 0;
    if (fd == -ENOENT) {
        r = 0;
    } else if (fd < 0) {
        r = fd;
    } else {
        char buf[128];
        size_t len = strlen(hex);
        ssize_t n = size == len && len < sizeof(buf) ? read(fd, buf, len) : -1;
        r = n == (ssize_t)len && !memcmp(buf, hex, len);
        close(fd);
    }
    free(path);
    return r;
}

void dsl_ckpt_probe_remove(const char *dir, const char *hex)
{
    char *path = dsl_xasprintf("%s/" PROBE_PREFIX "%s", dir, hex);
    unlink(path);
    free(path);
}

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
    if (bad_tag(tag))
        return tag_error(tag, dir, err);
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
    if (bad_tag(tag))
        return tag_error(tag, dir, err);
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

/* ---- loading ---------------------------------------------------------------------- */

static int meta_num(const struct dsl_st_file *f, const char *key, uint64_t *out, char *err)
{
    const char *v = dsl_env_get(&f->meta, key);
    long x;
    if (!v || dsl_parse_long(v, 0, LONG_MAX, &x) < 0)
        return dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint file '%s': %s metadata '%s'",
                          f->path, v ? "bad" : "missing", key);
    *out = (uint64_t)x;
    return 0;
}

static void ckpt_init(struct dsl_ckpt *c)
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
    for (size_t i = 0; i < DSL_CKPT_MAX_STATE; i++) {
        free(c->state_names[i]);
        free(c->state[i]);
    }
    dsl_strvec_release(&c->meta);
    ckpt_init(c);
}

/* Internal load flag: the commit validating a save (messages speak of the save). */
#define CKPT_SAVING (1u << 30)

/* the view that holds flat element i, or NULL */
static const struct dsl_ckpt_param *view_of(const struct dsl_ckpt *c, size_t i)
{
    const struct dsl_ckpt_param *v = NULL;
    for (size_t k = 0; k < c->nviews; k++)
        if (c->views[k].offset <= i)
            v = &c->views[k];
    return v;
}

static const char *nonfinite_word(float x)
{
    return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
}

static int nonfinite_hint(unsigned flags, char *err)
{
    size_t n = err ? strlen(err) : 0;
    if (err)
        snprintf(err + n, DSL_ERR_LEN - n, "%s",
                 flags & CKPT_SAVING
                     ? ": the training has diverged; nothing was saved, and 'latest' (if "
                       "any) still names the last good checkpoint (a lower learning rate, "
                       "warmup or gradient clipping may help)"
                     : ": the run that saved it had diverged, or the file was edited; load "
                       "an earlier checkpoint by its tag instead (no option loads this one)");
    return DSL_ECHECKPOINT;
}

/* The first element of v[0..n) that is not a finite number, or n; *count: how many. */
static size_t first_nonfinite(const float *v, size_t n, size_t *count)
{
    size_t first = n, k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) {
            if (first == n)
                first = i;
            k++;
        }
    }
    *count = k;
    return first;
}

/* "[3, 17]": element i of a tensor of that shape, row-major */
static void index_text(const struct dsl_ckpt_param *v, size_t i, char *buf, size_t len)
{
    size_t idx[4] = {0, 0, 0, 0}, rest = i, at = 0;
    for (int d = v->ndim - 1; d >= 0; d--) {
        uint64_t sz = v->shape[d] ? v->shape[d] : 1;
        idx[d] = (size_t)(rest % sz);
        rest = (size_t)(rest / sz);
    }
    at += (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < v->ndim && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, "%s%zu", d ? ", " : "", idx[d]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

/* Every parameter finite: the first that is not is named by tensor and index. */
static int params_finite(const struct dsl_ckpt *c, const char *file, unsigned flags, char *err)
{
    for (size_t k = 0; k < c->nviews; k++) {
        const struct dsl_ckpt_param *v = &c->views[k];
        size_t n = (k + 1 < c->nviews ? c->views[k + 1].offset : c->numel) - v->offset, cnt;
        size_t i = first_nonfinite(c->params + v->offset, n, &cnt);
        if (i == n)
            continue;
        char at[96];
        index_text(v, i, at, sizeof(at));
        dsl_seterr(err, DSL_ECHECKPOINT,
                   "checkpoint file '%s': parameter '%s' element %s is %s (not finite: %zu "
                   "of its %zu elements)",
                   file, v->name, at, nonfinite_word(c->params[v->offset + i]), cnt, n);
        return nonfinite_hint(flags, err);
    }
    return 0;
}

/*
 * A file without any checksum (no dsl.sha256, dsl.data_sha256 or dsl.crc32): another
 * tool's, or ours with the checksums cut out, so nothing tells its bytes from what was
 * saved. Refused unless DSL_CKPT_ALLOW_UNVERIFIED; allowed, the first such file is
 * noted in c->unverified for the caller's warning.
 */
static int unverified(struct dsl_ckpt *c, const char *file, unsigned flags, char *err)
{
    if (!(flags & DSL_CKPT_ALLOW_UNVERIFIED))
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "checkpoint file '%s' has no checksums (no dsl.sha256 or "
                          "dsl.data_sha256: written by another tool, or they were removed), "
                          "so corrupt or edited data cannot be detected; pass "
                          "--allow-unverified-checkpoint to load it anyway",
                          file);
    if (!c->unverified)
        c->unverified = dsl_xstrdup(file);
    return 0;
}

/* The safetensors flags of a load: files without checksums refused from their header,
 * before their data is read, unless the caller allows them. */
static unsigned st_flags(unsigned flags)
{
    return DSL_ST_HEADER_SUM_LATER |
           (flags & DSL_CKPT_ALLOW_UNVERIFIED ? 0u : (unsigned)DSL_ST_NEED_SUM);
}

/*
 * A file larger than any checkpoint file of a model of numel parameters can be (the
 * header's limit plus nstate fp32 vectors of numel), when the caller knows numel (0:
 * not known): refused from its size alone, before it is opened for reading, so a
 * huge or sparse file whose header agrees with its size costs nothing either. A file
 * that cannot be stat'ed is left to the load, which names the reason.
 */
static int too_large(const char *file, size_t numel, size_t nstate, char *err)
{
    struct stat st;
    if (numel == 0 || stat(file, &st) < 0 || !S_ISREG(st.st_mode))
        return 0;
    uint64_t max = 8 + (uint64_t)DSL_ST_MAX_HEADER + (uint64_t)nstate * numel * sizeof(float);
    if ((uint64_t)st.st_size <= max)
        return 0;
    return dsl_seterr(err, DSL_ECHECKPOINT,
                      "checkpoint file '%s' is %" PRIu64 " bytes, more than a checkpoint of "
                      "this model (%zu parameters) can hold (%" PRIu64 " bytes at most): not a "
                      "checkpoint of this model, or damaged",
                      file, (uint64_t)st.st_size, numel, max);
}

/* The model file into c; *bad: its header failed its checksum (the load goes on, so
 * that comparing it with the shards can name the field; load_dir refuses it). */
/* The model file of <path> (tag given), or a file of its own: `dstrain consolidate`'s
 * output (tag NULL; no dsl.kind, dsl.tag, dsl.numel or dsl.world_size to check). */
static int load_model_file(struct dsl_ckpt *c, const char *fp, const char *tag, int *bad,
                           unsigned flags, size_t numel_hint, char *err)
{
    struct dsl_st_file f;
    uint64_t numel = 0, ws = 1;
    int r = too_large(fp, numel_hint, 1, err);
    if (r < 0)
        return r;
    r = dsl_st_load(&f, fp, st_flags(flags), err);
    *bad = f.header_bad;
    c->sum = f.sum;
    if (r < 0 && f.no_sums) /* refused from its header, before its data was read */
        r = unverified(c, f.path, flags, err);
    if (r < 0)
        goto out;
    const char *kind = dsl_env_get(&f.meta, "dsl.kind"), *ftag = dsl_env_get(&f.meta, "dsl.tag");
    if (tag && (!kind || strcmp(kind, "model") != 0 || !ftag || strcmp(ftag, tag) != 0)) {
        r = dsl_seterr(err, DSL_ECHECKPOINT,
                       "checkpoint file '%s' is not the model state of tag '%s'", f.path, tag);
        goto out;
    }
    if (!f.header_bad && f.sum == DSL_ST_SUM_NONE) {
        if ((r = unverified(c, f.path, flags, err)) < 0)
            goto out;
    }
    if (tag && (r = meta_num(&f, "dsl.numel", &numel, err)) < 0)
        goto out;
    if (tag && (r = meta_num(&f, "dsl.world_size", &ws, err)) < 0)
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
    r = f.header_bad ? 0 : params_finite(c, f.path, flags, err);
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

#define EDITED "header does not match its checksum (dsl.sha256): it was edited or is corrupt"

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
        if ((r = meta_num(&s->f, "dsl.numel", &numel, err)) < 0 ||
            (r = meta_num(&s->f, "dsl.world_size", &ws, err)) < 0 ||
            (r = meta_num(&s->f, "dsl.rank", &rank, err)) < 0 ||
            (r = meta_num(&s->f, "dsl.shard_offset", &s->off, err)) < 0 ||
            (r = meta_num(&s->f, "dsl.shard_len", &s->len, err)) < 0)
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
            if ((j = first_nonfinite(v, len, &cnt)) < len) {
                size_t flat = (size_t)sh[i].off + j;
                const struct dsl_ckpt_param *pv = view_of(c, flat);
                char at[96] = "?";
                if (pv)
                    index_text(pv, flat - pv->offset, at, sizeof(at));
                dsl_seterr(err, DSL_ECHECKPOINT,
                           "checkpoint file '%s': optimizer state '%s' of parameter '%s' "
                           "element %s (flat element %zu) is %s (not finite: %zu of the "
                           "shard's %zu elements)",
                           sh[i].file, t->name, pv ? pv->name : "?", at, flat,
                           nonfinite_word(v[j]), cnt, len);
                r = nonfinite_hint(flags, err);
                return r;
            }
        }
    }
    return 0;
}

static int load_shards(struct dsl_ckpt *c, const char *path, const char *tag, int model_bad,
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
        if ((r = too_large(s->file, numel_hint, DSL_CKPT_MAX_STATE, err)) < 0)
            break;
        if ((r = dsl_st_load(&s->f, s->file, st_flags(flags), err)) < 0 && s->f.no_sums) {
            if (model_sha) /* refused from its header, before its data was read */
                r = dsl_seterr(err, DSL_ECHECKPOINT,
                               "checkpoint file '%s' lacks a SHA-256 checksum but the model "
                               "file '%s' has one: a checksum was removed",
                               s->file, model);
            else
                r = unverified(c, s->file, flags, err);
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
            r = unverified(c, s->file, flags, err);
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

/* Load the checkpoint in directory path (the tag's directory or a partial one). */
static int load_dir(struct dsl_ckpt *c, const char *path, const char *tag, int shards,
                    unsigned flags, size_t numel_hint, char *err)
{
    int r, bad = 0;
    c->tag = dsl_xstrdup(tag);
    c->path = dsl_xstrdup(path);
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
    return load_shards(c, path, tag, bad, flags, numel_hint, err);
}

int dsl_ckpt_write_latest(const char *dir, const char *tag, char *err)
{
    char *path = dsl_xasprintf("%s/latest", dir);
    char *tmp = NULL;
    size_t n = strlen(tag);
    int fd = -1, r = 0;
    if (bad_tag(tag)) {
        r = tag_error(tag, dir, err);
        goto out;
    }
    if ((fd = dsl_file_create_temp(path, 0644, &tmp, err)) < 0) {
        r = fd;
        goto out;
    }
    if (write(fd, tag, n) != (ssize_t)n || fsync(fd) < 0) {
        r = dsl_seterr(err, errno ? -errno : -EIO, "cannot write '%s': %s", tmp,
                       strerror(errno ? errno : EIO));
        goto out;
    }
    if (close(fd) < 0) {
        fd = -1;
        r = dsl_seterr(err, -errno, "cannot write '%s': %s", tmp, strerror(errno));
        goto out;
    }
    fd = -1;
    if (rename(tmp, path) < 0) {
        r = dsl_seterr(err, -errno, "cannot rename '%s' to '%s': %s", tmp, path,
                       strerror(errno));
        goto out;
    }
    if ((r = fsync_path(dir)) < 0)
        dsl_seterr(err, r, "cannot sync '%s': %s", dir, strerror(-r));
out:
    if (fd >= 0)
        close(fd);
    if (r < 0 && tmp)
        unlink(tmp);
    free(tmp);
    free(path);
    return r;
}

int dsl_ckpt_has_latest(const char *dir, char *err)
{
    char *path = dsl_xasprintf("%s/latest", dir);
    struct stat st;
    int r = 1;
    if (stat(path, &st) < 0)
        r = errno == ENOENT ? 0
                            : dsl_seterr(err, -errno, "cannot look for '%s': %s", path,
                                         strerror(errno));
    free(path);
    return r;
}

int dsl_ckpt_read_latest(const char *dir, char **tag, char *err)
{
    char *path = dsl_xasprintf("%s/latest", dir), buf[256], why[DSL_ERR_LEN];
    size_t n = 0, size;
    int r = 0;
    *tag = NULL;
    /* a regular file only: a FIFO at 'latest' must not hang the resume */
    int fd = dsl_file_open_regular(path, &size, why);
    if (fd < 0) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "no checkpoint in '%s': %s", dir, why);
        goto out;
    }
    while (n < sizeof(buf) - 1) {
        ssize_t k = read(fd, buf + n, sizeof(buf) - 1 - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    close(fd);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    buf[n] = '\0';
    if (strlen(buf) == n && reserved_tag(buf)) {
        r = dsl_seterr(err, DSL_ECHECKPOINT,
                       "'%s' names '%s', the directory of a save that did not finish, not a "
                       "checkpoint: write the tag of a complete checkpoint there, or resume "
                       "from one by its tag",
                       path, buf);
        goto out;
    }
    if (bad_tag(buf) || strlen(buf) != n) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "'%s' does not hold a valid tag", path);
        goto out;
    }
    *tag = dsl_xstrdup(buf);
out:
    free(path);
    return r;
}

/*
 * After a commit: what failed saves left in dir, <tag>.partial directories (a kill, a
 * full disk) and latest.tmp.* files (a kill inside dsl_ckpt_write_latest). Only names
 * of that shape, only real directories (a link is removed, not followed), best effort:
 * the commit already succeeded.
 */
static void remove_leftovers(const char *dir)
{
    static const char part[] = ".partial", tmp[] = "latest.tmp.";
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d)
        return;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        char *p = dsl_xasprintf("%s/%s", dir, e->d_name);
        struct stat st;
        if (n > sizeof(part) - 1 && strcmp(e->d_name + n - (sizeof(part) - 1), part) == 0 &&
            lstat(p, &st) == 0) {
            if (S_ISDIR(st.st_mode))
                remove_tree(p);
            else if (S_ISLNK(st.st_mode))
                unlink(p);
        } else if (strncmp(e->d_name, tmp, sizeof(tmp) - 1) == 0) {
            unlink(p);
        }
        free(p);
    }
    closedir(d);
}

int dsl_ckpt_commit(const char *dir, const char *tag, int world, char *err)
{
    struct dsl_ckpt c;
    char *part = NULL, *final = NULL, *old = NULL;
    struct stat st;
    int r;
    ckpt_init(&c);
    if (bad_tag(tag))
        return tag_error(tag, dir, err);
    part = partial_dir(dir, tag);
    final = dsl_xasprintf("%s/%s", dir, tag);
    old = dsl_xasprintf("%s/%s.old", dir, tag);
    /* the same checks as a resume, before anything is switched */
    if ((r = load_dir(&c, part, tag, 1, CKPT_SAVING, 0, err)) < 0)
        goto out;
    if (c.saved_world != world) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint '%s' was written by %d ranks, not %d",
                       part, c.saved_world, world);
        goto out;
    }
    if ((r = fsync_path(part)) < 0) {
        dsl_seterr(err, r, "cannot sync '%s': %s", part, strerror(-r));
        goto out;
    }
    if (stat(final, &st) == 0) {
        if ((r = remove_tree(old)) < 0 || rename(final, old) < 0) {
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
    if ((r = fsync_path(dir)) < 0) {
        dsl_seterr(err, r, "cannot sync '%s': %s", dir, strerror(-r));
        goto out;
    }
    if ((r = dsl_ckpt_write_latest(dir, tag, err)) < 0)
        goto out;
    remove_tree(old);
    remove_leftovers(dir);
    r = 0;
out:
    dsl_ckpt_release(&c);
    free(part);
    free(final);
    free(old);
    return r;
}

/* <dir>/<tag> into c; shards 0: the model file alone (the parameters) */
/* dir is a tag's directory itself: it has no 'latest' but a model file. *parent and
 * *tag (malloc'ed) split it: "ck/global_step40/" -> "ck", "global_step40". */
static int is_step_dir(const char *dir, char **parent, char **tag)
{
    struct stat st;
    char *l = dsl_xasprintf("%s/latest", dir), *m = dsl_xasprintf("%s/" DSL_CKPT_MODEL_FILE, dir);
    int yes = lstat(l, &st) < 0 && errno == ENOENT && stat(m, &st) == 0 && S_ISREG(st.st_mode);
    free(l);
    free(m);
    if (!yes)
        return 0;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/')
        b--;
    char *t = dsl_xstrndup(dir + b, n - b);
    if (bad_tag(t)) { /* the load then says what is wrong, as for any directory */
        free(t);
        return 0;
    }
    *tag = t;
    *parent = b == 0 ? dsl_xstrdup(".") : dsl_xstrndup(dir, b > 1 ? b - 1 : 1);
    return 1;
}

static int load_tag(struct dsl_ckpt *c, const char *dir, const char *tag, int shards,
                    unsigned flags, size_t numel_hint, char *err)
{
    char *t = NULL, *path;
    int r;
    ckpt_init(c);
    char *parent = NULL;
    if ((flags & DSL_CKPT_STEP_DIR) && (!tag || strcmp(tag, "latest") == 0) &&
        is_step_dir(dir, &parent, &t)) {
        /* a tag's directory named itself (ck/global_step40): its parent and its tag */
        dir = parent;
    } else if (!tag || strcmp(tag, "latest") == 0) {
        if ((r = dsl_ckpt_read_latest(dir, &t, err)) < 0)
            return r;
    } else {
        if (bad_tag(tag))
            return tag_error(tag, dir, err);
        t = dsl_xstrdup(tag);
    }
    path = dsl_xasprintf("%s/%s", dir, t);
    struct stat st;
    if (stat(path, &st) < 0) {
        /* a re-save of this tag died between moving the old copy aside and renaming
         * the new one in: the old copy is complete (see the top of this file) */
        char *old = dsl_xasprintf("%s.old", path);
        if (stat(old, &st) == 0 && S_ISDIR(st.st_mode)) {
            free(path);
            path = old;
        } else {
            free(old);
        }
    }
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
        r = dsl_seterr(err, DSL_ECHECKPOINT, "no checkpoint '%s' in '%s'%s", t, dir,
                       !tag || strcmp(tag, "latest") == 0 ? " (named by its 'latest' file)"
                                                          : "");
    else
        r = load_dir(c, path, t, shards, flags & DSL_CKPT_ALLOW_UNVERIFIED, numel_hint, err);
    free(path);
    free(t);
    free(parent);
    return r;
}

int dsl_ckpt_load_file(struct dsl_ckpt *c, const char *file, unsigned flags, char *err)
{
    int bad = 0;
    ckpt_init(c);
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
