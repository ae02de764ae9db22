/*
 * dslaunch sync: the local scan. Each PATH is read once, before any host is reached,
 * into a tree of entries (directories with their children sorted by name, so a remote
 * listing can be matched with bsearch; regular files; symlinks with their target
 * text). Other file types are skipped with a warning. Single-threaded; the tree is
 * read-only afterwards except for the --checksum hashes (sync_checksum.c).
 */
#define _DEFAULT_SOURCE /* realpath */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/log.h"
#include "dslaunch/common/xalloc.h"
#include "sync_impl.h"
#include "dslaunch/common/banned.h"

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct sync_entry *)a)->name, ((const struct sync_entry *)b)->name);
}

void dsl_sync_entry_release(struct sync_entry *e)
{
    for (size_t i = 0; i < e->nkids; i++)
        dsl_sync_entry_release(&e->kids[i]);
    free(e->kids);
    free(e->name);
    free(e->local);
    free(e->link);
}

/* lstat local and fill e (name and local set by the caller); 1: skipped type. */
static int scan(struct sync_entry *e, char *err)
{
    struct stat st;
    if (lstat(e->local, &st) < 0)
        return dsl_seterr(err, -errno, "cannot read '%s': %s", e->local, strerror(errno));
    e->mode = st.st_mode;
    e->size = (uint64_t)st.st_size;
    e->mtime = (int64_t)st.st_mtime;
    if (S_ISLNK(st.st_mode)) {
        char buf[PATH_MAX];
        ssize_t n = readlink(e->local, buf, sizeof(buf) - 1);
        if (n < 0)
            return dsl_seterr(err, -errno, "cannot read link '%s': %s", e->local,
                              strerror(errno));
        buf[n] = '\0';
        e->link = dsl_xstrdup(buf);
        return 0;
    }
    if (S_ISREG(st.st_mode))
        return 0;
    if (!S_ISDIR(st.st_mode)) {
        dsl_warn("sync: skipping '%s': not a file, directory or symlink", e->local);
        return 1;
    }
    DIR *d = opendir(e->local);
    if (!d)
        return dsl_seterr(err, -errno, "cannot read directory '%s': %s", e->local,
                          strerror(errno));
    struct dirent *de;
    int r = 0;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        DSL_ALLOC_GROW(e->kids, e->nkids, e->alloc);
        struct sync_entry *k = &e->kids[e->nkids];
        memset(k, 0, sizeof(*k));
        k->name = dsl_xstrdup(de->d_name);
        k->local = dsl_xasprintf("%s/%s", e->local, de->d_name);
        r = scan(k, err);
        if (r < 0) {
            e->nkids++;
            break;
        }
        if (r == 1) {
            dsl_sync_entry_release(k);
            r = 0;
            continue;
        }
        e->nkids++;
    }
    closedir(d);
    if (r < 0)
        return r;
    if (e->nkids)
        qsort(e->kids, e->nkids, sizeof(*e->kids), entry_cmp);
    return 0;
}

/* PATH -> its absolute form without resolving the last component, and the remote path. */
int dsl_sync_root_make(struct sync_root *root, const char *path, const char *dest, char *err)
{
    char *p = dsl_xstrdup(path);
    size_t len = strlen(p);
    while (len > 1 && p[len - 1] == '/')
        p[--len] = '\0';
    char *slash = strrchr(p, '/');
    const char *base = slash ? slash + 1 : p;
    char *dir = slash ? (slash == p ? dsl_xstrdup("/") : dsl_xstrndup(p, (size_t)(slash - p)))
                      : dsl_xstrdup(".");
    char real[PATH_MAX];
    int r = 0;
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
        /* "." or "dir/..": resolve the whole thing */
        if (!realpath(p, real)) {
            r = dsl_seterr(err, -errno, "cannot read '%s': %s", path, strerror(errno));
            goto out;
        }
        root->e.local = dsl_xstrdup(real);
    } else {
        if (!realpath(dir, real)) {
            r = dsl_seterr(err, -errno, "cannot read '%s': %s", path, strerror(errno));
            goto out;
        }
        root->e.local = dsl_xasprintf("%s%s%s", real, strcmp(real, "/") ? "/" : "", base);
    }
    if (!strcmp(root->e.local, "/")) {
        r = dsl_seterr(err, DSL_EUSAGE, "refusing to sync '/'");
        goto out;
    }
    const char *b = strrchr(root->e.local, '/') + 1;
    root->e.name = dsl_xstrdup(b);
    if (dest)
        root->remote = dsl_xasprintf("%s%s%s", dest,
                                     dest[0] && dest[strlen(dest) - 1] == '/' ? "" : "/", b);
    else
        root->remote = dsl_xstrdup(root->e.local);
    r = scan(&root->e, err);
    if (r == 1)
        r = dsl_seterr(err, DSL_EUSAGE, "cannot sync '%s': not a file, directory or symlink",
                       path);
out:
    free(p);
    free(dir);
    return r;
}
