/*
 * Checkpoints, the directory: tags, the save's own directories (<tag>.partial,
 * <tag>.old), `latest`, which directory a load reads (a tag, `latest`, a tag's own
 * directory named itself, a stage 3 save's), and the probe that tells whether every
 * rank sees checkpoint_dir.
 *
 * Theory of operation. The save's own directories are never tags
 * (dsl_ckpt_tag_bad), so neither a name nor `latest` can make the loader take one. A
 * stale partial is removed whole (dsl_ckpt_remove_tree: links unlinked, never
 * followed) by the next prepare of its tag, by every commit, and by the trainer after
 * a failed save (dsl_ckpt_abort). `latest` is written last in a save (temp file with a
 * random name, fsync, rename, fsync of the directory) and read as a regular file only,
 * so a FIFO in its place cannot hang a resume. A tag whose directory is missing while
 * its <tag>.old is there is a re-save that died between its two renames (checkpoint.c):
 * the old copy is complete and is read instead.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "checkpoint_internal.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/banned.h"

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

int dsl_ckpt_tag_bad(const char *tag)
{
    return !tag || !tag[0] || strchr(tag, '/') || strcmp(tag, ".") == 0 ||
           strcmp(tag, "..") == 0 || strlen(tag) > 200 || reserved_tag(tag);
}

/* the error for a bad tag; a reserved one says what it is */
int dsl_ckpt_tag_error(const char *tag, const char *dir, char *err)
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
int dsl_ckpt_remove_tree(const char *path)
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

int dsl_ckpt_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;
    if (fd < 0)
        return -errno;
    if (fsync(fd) < 0)
        r = -errno;
    close(fd);
    return r;
}

char *dsl_ckpt_partial_dir(const char *dir, const char *tag)
{
    return dsl_xasprintf("%s/%s.partial", dir, tag);
}

int dsl_ckpt_prepare(const char *dir, const char *tag, char *err)
{
    char *p;
    int r;
    if (dsl_ckpt_tag_bad(tag))
        return dsl_ckpt_tag_error(tag, dir, err);
    if ((r = dsl_dir_make_all(dir)) < 0)
        return dsl_seterr(err, r, "cannot create checkpoint directory '%s': %s", dir,
                          strerror(-r));
    p = dsl_ckpt_partial_dir(dir, tag);
    if ((r = dsl_ckpt_remove_tree(p)) < 0)
        dsl_seterr(err, r, "cannot remove stale '%s': %s", p, strerror(-r));
    else if (mkdir(p, 0755) < 0)
        r = dsl_seterr(err, -errno, "cannot create '%s': %s", p, strerror(errno));
    free(p);
    return r;
}

void dsl_ckpt_abort(const char *dir, const char *tag)
{
    if (dsl_ckpt_tag_bad(tag))
        return;
    char *p = dsl_ckpt_partial_dir(dir, tag);
    dsl_ckpt_remove_tree(p);
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

int dsl_ckpt_write_latest(const char *dir, const char *tag, char *err)
{
    char *path = dsl_xasprintf("%s/latest", dir);
    char *tmp = NULL;
    size_t n = strlen(tag);
    int fd = -1, r = 0;
    if (dsl_ckpt_tag_bad(tag)) {
        r = dsl_ckpt_tag_error(tag, dir, err);
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
    if ((r = dsl_ckpt_fsync_dir(dir)) < 0)
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
    if (dsl_ckpt_tag_bad(buf) || strlen(buf) != n) {
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
void dsl_ckpt_remove_leftovers(const char *dir)
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
                dsl_ckpt_remove_tree(p);
            else if (S_ISLNK(st.st_mode))
                unlink(p);
        } else if (strncmp(e->d_name, tmp, sizeof(tmp) - 1) == 0) {
            unlink(p);
        }
        free(p);
    }
    closedir(d);
}

int dsl_ckpt_is_zero3(const char *path)
{
    static const char post[] = "_mp_rank_00_model_states.safetensors";
    struct stat st;
    char *m = dsl_xasprintf("%s/" DSL_CKPT_MODEL_FILE, path);
    int model = lstat(m, &st) == 0 || errno != ENOENT, yes = 0;
    free(m);
    DIR *d = model ? NULL : opendir(path);
    struct dirent *e;
    while (d && !yes && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        yes = strncmp(e->d_name, "zero_pp_rank_", 13) == 0 && n > sizeof(post) - 1 &&
              strcmp(e->d_name + n - (sizeof(post) - 1), post) == 0;
    }
    if (d)
        closedir(d);
    return yes;
}

/* <dir>/<tag> into c; shards 0: the model file alone (the parameters) */
/* dir is a tag's directory itself: it has no 'latest' but a model file (or, saved at
 * stage 3, rank 0's parameter shard). *parent and
 * *tag (malloc'ed) split it: "ck/global_step40/" -> "ck", "global_step40". */
static int is_step_dir(const char *dir, char **parent, char **tag)
{
    struct stat st;
    char *l = dsl_xasprintf("%s/latest", dir), *m = dsl_xasprintf("%s/" DSL_CKPT_MODEL_FILE, dir);
    char *z = dsl_xasprintf("%s/" DSL_CKPT_SHARD_FMT, dir, 0, "model");
    int yes = lstat(l, &st) < 0 && errno == ENOENT &&
              ((stat(m, &st) == 0 && S_ISREG(st.st_mode)) ||
               (stat(z, &st) == 0 && S_ISREG(st.st_mode)));
    free(l);
    free(m);
    free(z);
    if (!yes)
        return 0;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/')
        b--;
    char *t = dsl_xstrndup(dir + b, n - b);
    if (dsl_ckpt_tag_bad(t)) { /* the load then says what is wrong, as for any directory */
        free(t);
        return 0;
    }
    *tag = t;
    *parent = b == 0 ? dsl_xstrdup(".") : dsl_xstrndup(dir, b > 1 ? b - 1 : 1);
    return 1;
}

int dsl_ckpt_resolve(const char *dir, const char *tag, unsigned flags, char **pathp, char **tp,
                     char *err)
{
    char *t = NULL, *path, *parent = NULL;
    int r = 0;
    if ((flags & DSL_CKPT_STEP_DIR) && (!tag || strcmp(tag, "latest") == 0) &&
        is_step_dir(dir, &parent, &t)) {
        /* a tag's directory named itself (ck/global_step40): its parent and its tag */
        dir = parent;
    } else if (!tag || strcmp(tag, "latest") == 0) {
        if ((r = dsl_ckpt_read_latest(dir, &t, err)) < 0)
            return r;
    } else {
        if (dsl_ckpt_tag_bad(tag))
            return dsl_ckpt_tag_error(tag, dir, err);
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
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "no checkpoint '%s' in '%s'%s", t, dir,
                       !tag || strcmp(tag, "latest") == 0 ? " (named by its 'latest' file)"
                                                          : "");
        free(path);
        free(t);
    } else {
        *pathp = path;
        *tp = t;
    }
    free(parent);
    return r;
}
