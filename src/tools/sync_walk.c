/*
 * dslaunch sync: one source tree onto one host. A directory costs one SFTP readdir,
 * which gives name, type, size, mtime and mode of every remote child at once (no stat
 * per file), so a no-change run costs one round trip per directory. Missing directories
 * are made; with --delete remote children absent at the source are removed
 * (recursively); a directory's mode and mtime are set after its children, again when a
 * change inside moved its mtime. A file is skipped when the remote one is a regular
 * file of the same size and mtime (with --checksum it is queued for sync_checksum.c);
 * a symlink is copied as a link. Runs on the host's own thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dslaunch/common/xalloc.h"
#include "sync_impl.h"
#include "dslaunch/common/banned.h"

static int attr_cmp(const void *x, const void *y)
{
    return strcmp((*(sftp_attributes const *)x)->name, (*(sftp_attributes const *)y)->name);
}

static int sync_dir(struct sync_run *run, struct sync_host *h, struct sync_entry *e,
                    const char *path, sftp_attributes a)
{
    int r = 0;
    if (a && dsl_sync_rtype(a) != SSH_FILEXFER_TYPE_DIRECTORY) {
        if ((r = dsl_sync_remote_remove(h, path, dsl_sync_rtype(a))) < 0)
            return r;
        a = NULL;
    }
    if (!a) {
        if (sftp_mkdir(h->sftp, path, 0700) < 0)
            return dsl_sync_host_fail(h, "create directory", path);
        h->mut++;
    }
    /* every remote child with its attributes, in one listing */
    sftp_attributes *list = NULL;
    size_t nlist = 0, alloc = 0;
    if (a) {
        sftp_dir d = sftp_opendir(h->sftp, path);
        if (!d)
            return dsl_sync_host_fail(h, "read directory", path);
        sftp_attributes x;
        while ((x = sftp_readdir(h->sftp, d))) {
            if (!strcmp(x->name, ".") || !strcmp(x->name, "..")) {
                sftp_attributes_free(x);
                continue;
            }
            DSL_ALLOC_GROW(list, nlist, alloc);
            list[nlist++] = x;
        }
        int eof = sftp_dir_eof(d);
        sftp_closedir(d);
        if (!eof) {
            r = dsl_sync_host_fail(h, "read directory", path);
            goto out;
        }
        if (nlist)
            qsort(list, nlist, sizeof(*list), attr_cmp);
    }
    unsigned long mut0 = h->mut;
    char *seen = nlist ? dsl_xcalloc(nlist, 1) : NULL;
    for (size_t i = 0; i < e->nkids && r == 0; i++) {
        struct sync_entry *k = &e->kids[i];
        sftp_attributes *hit = NULL;
        if (nlist) {
            struct sftp_attributes_struct key;
            sftp_attributes kp = &key;
            key.name = k->name;
            hit = bsearch(&kp, list, nlist, sizeof(*list), attr_cmp);
        }
        if (hit)
            seen[hit - list] = 1;
        char *sub = dsl_xasprintf("%s/%s", path, k->name);
        r = dsl_sync_entry_sync(run, h, k, sub, hit ? *hit : NULL);
        free(sub);
    }
    if (r == 0)
        r = dsl_sync_checksum_flush(run, h); /* --checksum copies land before the mtime is set */
    if (r == 0 && run->o->delete_extra) {
        for (size_t i = 0; i < nlist && r == 0; i++) {
            if (seen[i])
                continue;
            char *sub = dsl_xasprintf("%s/%s", path, list[i]->name);
            r = dsl_sync_remote_remove(h, sub, dsl_sync_rtype(list[i]));
            if (r == 0) {
                h->deleted++;
                if (h->o->verbose > 0)
                    printf("%s: deleted %s\n", h->name, sub);
            }
            free(sub);
        }
    }
    free(seen);
    /* a change inside the directory moved its mtime: set it again */
    if (r == 0 && (!a || h->mut != mut0 || (a->permissions & 07777) != (e->mode & 07777) ||
                   (int64_t)a->mtime != e->mtime))
        r = dsl_sync_remote_set_meta(h, path, e);
out:
    for (size_t i = 0; i < nlist; i++)
        sftp_attributes_free(list[i]);
    free(list);
    return r;
}

int dsl_sync_entry_sync(struct sync_run *run, struct sync_host *h, struct sync_entry *e,
                      const char *path, sftp_attributes a)
{
    int r;
    if (S_ISDIR(e->mode))
        return sync_dir(run, h, e, path, a);
    if (S_ISLNK(e->mode)) {
        if (a && dsl_sync_rtype(a) == SSH_FILEXFER_TYPE_SYMLINK) {
            char *t = sftp_readlink(h->sftp, path);
            int same = t && !strcmp(t, e->link);
            ssh_string_free_char(t);
            if (same) {
                h->same++;
                return 0;
            }
        }
        if (a && (r = dsl_sync_remote_remove(h, path, dsl_sync_rtype(a))) < 0)
            return r;
        if (sftp_symlink(h->sftp, e->link, path) < 0)
            return dsl_sync_host_fail(h, "create symlink", path);
        h->mut++;
        atomic_fetch_add(&h->copied, 1u);
        return 0;
    }
    /* regular file */
    if (a && dsl_sync_rtype(a) == SSH_FILEXFER_TYPE_REGULAR && a->size == e->size) {
        if (run->o->checksum) {
            if ((a->permissions & 07777) != (e->mode & 07777) &&
                (r = dsl_sync_remote_set_mode(h, path, e->mode)) < 0)
                return r;
            DSL_ALLOC_GROW(h->pending_e, h->pending.nr, h->pending_alloc);
            h->pending_e[h->pending.nr] = e;
            dsl_strvec_push(&h->pending, path);
            return h->pending.nr >= SYNC_HASH_BATCH ? dsl_sync_checksum_flush(run, h) : 0;
        }
        if ((int64_t)a->mtime == e->mtime) {
            h->same++;
            if ((a->permissions & 07777) != (e->mode & 07777))
                return dsl_sync_remote_set_mode(h, path, e->mode);
            return 0;
        }
    }
    if (a && dsl_sync_rtype(a) != SSH_FILEXFER_TYPE_REGULAR && dsl_sync_rtype(a) != SSH_FILEXFER_TYPE_DIRECTORY) {
        if ((r = dsl_sync_remote_remove(h, path, dsl_sync_rtype(a))) < 0)
            return r;
        a = NULL;
    }
    return dsl_sync_file_copy(h, e, path, a);
}
