/*
 * dslaunch sync: files and directories to every host over SFTP.
 *
 * Theory of operation. The sources are scanned once, locally, into a tree of entries
 * (directories with their children sorted by name, regular files, symlinks); other file
 * types are skipped with a warning. Then min(--fanout, hosts) worker threads take hosts
 * from a shared counter; each opens one blocking libssh session (sshsession.c: the
 * launcher's config, host-key and authentication rules) and one SFTP session on it,
 * and walks the tree:
 *
 *   directory  one SFTP readdir of the remote directory gives name, type, size, mtime
 *              and mode of every remote child at once (no stat per file), so a no-change
 *              run costs one round trip per directory; missing directories are made,
 *              with --delete remote children absent at the source are removed
 *              (recursively); mode and mtime are set after the children are done
 *   file       skipped when the remote one is a regular file of the same size and mtime
 *              (seconds); with --checksum, when the SHA-256 of both sides match (the
 *              remote side hashes with `sha256sum` on an exec channel of the same
 *              session, in batches, so no file is read back over the network; its lines
 *              are matched by path, and the local side hashes the batch meanwhile on
 *              several threads). Copies
 *              go to ".NAME.dsl-sync-XXXX" in the same directory, are fsync'ed when the
 *              server offers fsync@openssh.com, get mode and mtime, and are renamed over
 *              NAME: an SFTP rename for a new NAME, `mv -f` (rename(2)) on an exec
 *              channel for an existing one, as OpenSSH's SFTP v3 rename is link(2) and
 *              libssh 0.10 has no posix-rename call: a failed copy never replaces a good
 *              file, and an updated file is never missing
 *   symlink    copied as a link (same target text); a different remote entry is replaced
 *
 * Shared destinations: before each PATH a host creates ".NAME.dsl-sync-claim-RUN" beside
 * it with O_EXCL, RUN a random id of this run. The host that makes it copies; a host that
 * finds it (the nodes share the directory: NFS, a bind mount) waits for the owner, copies
 * nothing and says so. The owner removes the claim once every other host has looked.
 *
 * A host stops at its first failure (the message names host and path); the others go
 * on. The main thread prints a progress line every second on stderr once a copy has
 * run for a second (bytes, files, rate, slowest host), then one summary line per host
 * and a total on stdout.
 */
#define _DEFAULT_SOURCE /* realpath */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/file.h"
#include "dslaunch/plan/hostfile.h"
#include "dslaunch/job/job.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/plan/placement.h"
#include "digest.h"
#include "dslaunch/remote/sshsession.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/tools/sync.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define SYNC_CHUNK (128u * 1024u)   /* bytes per SFTP write (OpenSSH takes 256 KiB) */
#define SYNC_HASH_BATCH 64          /* files per remote sha256sum command */
#define SYNC_HASH_THREADS 8         /* local hashing threads per batch, at most */
#define SYNC_HASH_LOCKS 64          /* striped locks over the entries' hash state */

struct sync_entry {
    char *name;                /* name in the parent directory; owned */
    char *local;               /* local path; owned */
    mode_t mode;               /* st_mode, type included */
    uint64_t size;
    int64_t mtime;
    char *link;                /* symlink target; owned */
    struct sync_entry *kids;   /* directories: children sorted by name; owned */
    size_t nkids, alloc;
    unsigned char sha[32];     /* --checksum: local hash */
    int hashed;
};

struct sync_root {
    struct sync_entry e;
    char *remote;              /* absolute (or --dest relative) remote path; owned */
};

struct sync_host {
    const char *name;          /* borrowed */
    const struct dsl_sync_opts *o;
    ssh_session s;
    sftp_session sftp;
    int can_fsync;
    const char *shared_with;   /* borrowed: the host that copied a shared destination */
    unsigned shared;           /* roots left to shared_with (same directory there) */
    _Atomic size_t looked;     /* roots whose claim this host has checked */
    _Atomic size_t finished;   /* roots this host is done with (copied, or gave up) */
    char *buf;                 /* SYNC_CHUNK bytes */
    _Atomic uint64_t bytes;
    _Atomic unsigned copied;
    _Atomic int done;
    unsigned same, deleted;
    unsigned long mut;         /* remote changes made (directory mtimes need redoing) */
    double t0, t1;
    int rc;
    char err[DSL_ERR_LEN];
    struct dsl_strvec pending; /* --checksum: remote paths whose hash must be compared */
    struct sync_entry **pending_e;
    size_t pending_alloc;
};

struct sync_run {
    const struct dsl_sync_opts *o;
    struct sync_root *roots;
    size_t nroots;
    struct sync_host *hosts;
    size_t nhosts;
    _Atomic size_t next;
    char token[17];            /* this run's id, in the claim file of a destination */
    int all_at_once;           /* a thread per host: hosts may wait for each other */
    pthread_mutex_t hash_locks[SYNC_HASH_LOCKS]; /* local hashes are computed once */
};

/* ---- local scan ---- */

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct sync_entry *)a)->name, ((const struct sync_entry *)b)->name);
}

static void entry_release(struct sync_entry *e)
{
    for (size_t i = 0; i < e->nkids; i++)
        entry_release(&e->kids[i]);
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
            entry_release(k);
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
static int make_root(struct sync_root *root, const char *path, const char *dest, char *err)
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

/* ---- remote side ---- */

static const char *fx_text(int fx)
{
    switch (fx) {
    case SSH_FX_NO_SUCH_FILE: return "no such file or directory";
    case SSH_FX_PERMISSION_DENIED: return "permission denied";
    case SSH_FX_NO_CONNECTION:
    case SSH_FX_CONNECTION_LOST: return "connection lost";
    case SSH_FX_OP_UNSUPPORTED: return "operation not supported by the server";
    case SSH_FX_FILE_ALREADY_EXISTS: return "file exists";
    case SSH_FX_WRITE_PROTECT: return "read-only file system";
    case SSH_FX_NO_MEDIA: return "no media";
    default: return "failure";
    }
}

/*
 * Record the host's failure: "cannot create '/d/f': read-only file system". OpenSSH
 * reports EROFS and ENOSPC as a bare SSH_FX_FAILURE; ask statvfs@openssh.com which.
 */
static int host_fail(struct sync_host *h, const char *what, const char *path)
{
    int fx = h->sftp ? sftp_get_error(h->sftp) : -1;
    const char *why = fx_text(fx);
    if (fx == SSH_FX_FAILURE && h->sftp &&
        sftp_extension_supported(h->sftp, "statvfs@openssh.com", "2")) {
        char *dir = dsl_xstrdup(path);
        char *sl = strrchr(dir, '/');
        if (sl && sl != dir)
            *sl = '\0';
        sftp_statvfs_t v = sftp_statvfs(h->sftp, dir);
        if (v && (v->f_flag & SSH_FXE_STATVFS_ST_RDONLY))
            why = "read-only file system";
        else if (v && v->f_bavail == 0)
            why = "no space left on device";
        sftp_statvfs_free(v);
        free(dir);
    }
    if (!ssh_is_connected(h->s))
        why = ssh_get_error(h->s);
    h->rc = fx == SSH_FX_NO_CONNECTION || fx == SSH_FX_CONNECTION_LOST ? DSL_ECONNECT
                                                                       : DSL_EREMOTE;
    snprintf(h->err, sizeof(h->err), "%s: cannot %s '%s': %s", h->name, what, path, why);
    return h->rc;
}

/* lstat: attributes, or NULL with *missing set when the path does not exist. */
static sftp_attributes rlstat(struct sync_host *h, const char *path, int *missing)
{
    sftp_attributes a = sftp_lstat(h->sftp, path);
    *missing = !a && sftp_get_error(h->sftp) == SSH_FX_NO_SUCH_FILE;
    return a;
}

static int rtype(sftp_attributes a)
{
    return a->type;
}

static int rm_rf(struct sync_host *h, const char *path, int type)
{
    if (type == SSH_FILEXFER_TYPE_DIRECTORY) {
        sftp_dir d = sftp_opendir(h->sftp, path);
        if (!d)
            return host_fail(h, "read directory", path);
        sftp_attributes a;
        int r = 0;
        while (r == 0 && (a = sftp_readdir(h->sftp, d))) {
            if (strcmp(a->name, ".") && strcmp(a->name, "..")) {
                char *sub = dsl_xasprintf("%s/%s", path, a->name);
                r = rm_rf(h, sub, rtype(a));
                free(sub);
            }
            sftp_attributes_free(a);
        }
        sftp_closedir(d);
        if (r < 0)
            return r;
        if (sftp_rmdir(h->sftp, path) < 0)
            return host_fail(h, "remove directory", path);
    } else if (sftp_unlink(h->sftp, path) < 0) {
        return host_fail(h, "remove", path);
    }
    h->mut++;
    return 0;
}

static int set_meta(struct sync_host *h, const char *path, const struct sync_entry *e)
{
    struct sftp_attributes_struct at;
    memset(&at, 0, sizeof(at));
    at.flags = SSH_FILEXFER_ATTR_PERMISSIONS | SSH_FILEXFER_ATTR_ACMODTIME;
    at.permissions = (uint32_t)(e->mode & 07777);
    at.atime = (uint32_t)e->mtime;
    at.mtime = (uint32_t)e->mtime;
    if (sftp_setstat(h->sftp, path, &at) < 0)
        return host_fail(h, "set mode and mtime of", path);
    return 0;
}

static int set_mode(struct sync_host *h, const char *path, mode_t mode)
{
    if (sftp_chmod(h->sftp, path, mode & 07777) < 0)
        return host_fail(h, "set the mode of", path);
    return 0;
}

/* rename(2) of tmp over path on the node, replacing an existing file atomically.
 * OpenSSH's sftp-server does a plain SFTP v3 RENAME with link(2), which refuses an
 * existing target, and libssh 0.10 has no call for posix-rename@openssh.com; `mv -f`
 * of a file within one directory is rename(2). One exec channel on the same session. */
static int remote_replace(struct sync_host *h, const char *tmp, const char *path)
{
    char *qs = dsl_shell_quote(tmp), *qd = dsl_shell_quote(path);
    char *cmd = dsl_xasprintf("exec mv -f -- %s %s", qs, qd);
    free(qs);
    free(qd);
    int st = -1;
    ssh_channel ch = ssh_channel_new(h->s);
    if (ch && ssh_channel_open_session(ch) == SSH_OK &&
        ssh_channel_request_exec(ch, cmd) == SSH_OK) {
        char buf[512];
        while (ssh_channel_read(ch, buf, sizeof(buf), 0) > 0)
            ;
        ssh_channel_send_eof(ch);
        ssh_channel_close(ch);
        st = ssh_channel_get_exit_status(ch);
    }
    if (ch)
        ssh_channel_free(ch);
    free(cmd);
    return st == 0 ? 0 : -1;
}

/* After a lost race where no rename could replace the file (a server without a shell
 * for mv): is path already what e is, by size and SHA-256? Read back over SFTP, so it
 * costs the file's bytes, and only ever on that path. */
static int already_there(struct sync_host *h, const struct sync_entry *e, const char *path)
{
    int missing, same = 0;
    sftp_attributes a = rlstat(h, path, &missing);
    if (!a || rtype(a) != SSH_FILEXFER_TYPE_REGULAR || a->size != e->size) {
        sftp_attributes_free(a);
        return 0;
    }
    sftp_attributes_free(a);
    unsigned char want[DSL_SHA256_LEN], got[DSL_SHA256_LEN];
    char err[DSL_ERR_LEN];
    if (dsl_sha256_file(e->local, want, err) < 0)
        return 0;
    sftp_file f = sftp_open(h->sftp, path, O_RDONLY, 0);
    struct dsl_sha256 c;
    if (!f || dsl_sha256_init(&c) < 0) {
        if (f)
            sftp_close(f);
        return 0;
    }
    ssize_t n;
    uint64_t total = 0;
    while ((n = sftp_read(f, h->buf, SYNC_CHUNK)) > 0) {
        dsl_sha256_update(&c, h->buf, (size_t)n);
        total += (uint64_t)n;
    }
    sftp_close(f);
    if (dsl_sha256_final(&c, got) == 0 && n == 0 && total == e->size)
        same = !memcmp(want, got, sizeof(want));
    return same;
}

static int copy_file(struct sync_host *h, const struct sync_entry *e, const char *path,
                     sftp_attributes old)
{
    char *tmp = NULL;
    const char *sl = strrchr(path, '/');
    unsigned rnd = (unsigned)rand() ^ (unsigned)getpid();
    if (sl)
        tmp = dsl_xasprintf("%.*s.%s.dsl-sync-%06x", (int)(sl - path + 1), path, sl + 1,
                            rnd & 0xffffffu);
    else
        tmp = dsl_xasprintf(".%s.dsl-sync-%06x", path, rnd & 0xffffffu);
    int r = 0, fd = -1;
    sftp_file f = NULL;
    fd = open(e->local, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        h->rc = -errno;
        snprintf(h->err, sizeof(h->err), "%s: cannot read local '%s': %s", h->name, e->local,
                 strerror(errno));
        r = h->rc;
        goto out;
    }
    f = sftp_open(h->sftp, tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (!f) {
        r = host_fail(h, "create", tmp);
        goto out;
    }
    for (;;) {
        ssize_t n = read(fd, h->buf, SYNC_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            h->rc = -errno;
            snprintf(h->err, sizeof(h->err), "%s: cannot read local '%s': %s", h->name,
                     e->local, strerror(errno));
            r = h->rc;
            goto out;
        }
        if (n == 0)
            break;
        size_t off = 0;
        while (off < (size_t)n) {
            ssize_t w = sftp_write(f, h->buf + off, (size_t)n - off);
            if (w <= 0) {
                r = host_fail(h, "write", tmp);
                goto out;
            }
            off += (size_t)w;
            atomic_fetch_add(&h->bytes, (uint64_t)w);
        }
    }
    if (h->can_fsync && sftp_fsync(f) < 0) {
        r = host_fail(h, "fsync", tmp);
        goto out;
    }
    int cr = sftp_close(f);
    f = NULL;
    if (cr < 0) {
        r = host_fail(h, "write", tmp);
        goto out;
    }
    if ((r = set_meta(h, tmp, e)) < 0)
        goto out;
    if (old && rtype(old) == SSH_FILEXFER_TYPE_DIRECTORY && (r = rm_rf(h, path, rtype(old))) < 0)
        goto out;
    /* An existing target (or one another node placed meanwhile) is replaced with
     * rename(2) on the node, never unlinked first: there is no moment without a file. */
    if ((old && rtype(old) == SSH_FILEXFER_TYPE_REGULAR) || sftp_rename(h->sftp, tmp, path) < 0) {
        if (remote_replace(h, tmp, path) < 0) {
            if (already_there(h, e, path)) { /* another node placed the same file */
                sftp_unlink(h->sftp, tmp);
                free(tmp);
                tmp = NULL;
                h->same++;
                goto out;
            }
            r = host_fail(h, "rename into place", path);
            goto out;
        }
    }
    free(tmp);
    tmp = NULL;
    h->mut++;
    atomic_fetch_add(&h->copied, 1u);
    if (h->o->verbose > 0)
        printf("%s: copied %s\n", h->name, path);
out:
    if (f)
        sftp_close(f);
    if (tmp && h->sftp && ssh_is_connected(h->s))
        sftp_unlink(h->sftp, tmp); /* best effort: never leave half a copy behind */
    free(tmp);
    if (fd >= 0)
        close(fd);
    return r;
}

static int sync_entry(struct sync_run *run, struct sync_host *h, struct sync_entry *e,
                      const char *path, sftp_attributes a);
static int flush_pending(struct sync_run *run, struct sync_host *h);

static int attr_cmp(const void *x, const void *y)
{
    return strcmp((*(sftp_attributes const *)x)->name, (*(sftp_attributes const *)y)->name);
}

static int sync_dir(struct sync_run *run, struct sync_host *h, struct sync_entry *e,
                    const char *path, sftp_attributes a)
{
    int r = 0;
    if (a && rtype(a) != SSH_FILEXFER_TYPE_DIRECTORY) {
        if ((r = rm_rf(h, path, rtype(a))) < 0)
            return r;
        a = NULL;
    }
    if (!a) {
        if (sftp_mkdir(h->sftp, path, 0700) < 0)
            return host_fail(h, "create directory", path);
        h->mut++;
    }
    /* every remote child with its attributes, in one listing */
    sftp_attributes *list = NULL;
    size_t nlist = 0, alloc = 0;
    if (a) {
        sftp_dir d = sftp_opendir(h->sftp, path);
        if (!d)
            return host_fail(h, "read directory", path);
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
            r = host_fail(h, "read directory", path);
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
        r = sync_entry(run, h, k, sub, hit ? *hit : NULL);
        free(sub);
    }
    if (r == 0)
        r = flush_pending(run, h); /* --checksum copies land before the mtime is set */
    if (r == 0 && run->o->delete_extra) {
        for (size_t i = 0; i < nlist && r == 0; i++) {
            if (seen[i])
                continue;
            char *sub = dsl_xasprintf("%s/%s", path, list[i]->name);
            r = rm_rf(h, sub, rtype(list[i]));
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
        r = set_meta(h, path, e);
out:
    for (size_t i = 0; i < nlist; i++)
        sftp_attributes_free(list[i]);
    free(list);
    return r;
}

/* --checksum: hash the local file once (several hosts may ask for it at once, and a
 * host hashes its batch on several threads). Each entry's state is guarded by one of
 * SYNC_HASH_LOCKS striped locks, so different files hash in parallel. */
static pthread_mutex_t *hash_lock_of(struct sync_run *run, const struct sync_entry *e)
{
    return &run->hash_locks[((uintptr_t)e / sizeof(*e)) % SYNC_HASH_LOCKS];
}

static int local_hash(struct sync_run *run, struct sync_entry *e, char *err)
{
    int r = 0;
    pthread_mutex_t *m = hash_lock_of(run, e);
    pthread_mutex_lock(m);
    if (!e->hashed) {
        r = dsl_sha256_file(e->local, e->sha, err);
        if (r == 0)
            e->hashed = 1;
    }
    pthread_mutex_unlock(m);
    return r;
}

struct hash_batch {
    struct sync_run *run;
    struct sync_entry **e;
    size_t n;
    _Atomic size_t next;
    pthread_mutex_t lock;
    int rc;                 /* first failure, under lock */
    char err[DSL_ERR_LEN];
};

static void *hash_worker(void *arg)
{
    struct hash_batch *b = arg;
    char err[DSL_ERR_LEN];
    size_t i;
    while ((i = atomic_fetch_add(&b->next, 1)) < b->n) {
        int r = local_hash(b->run, b->e[i], err);
        if (r < 0) {
            pthread_mutex_lock(&b->lock);
            if (!b->rc) {
                b->rc = r;
                snprintf(b->err, sizeof(b->err), "%s", err);
            }
            pthread_mutex_unlock(&b->lock);
        }
    }
    return NULL;
}

/* Start hashing b's entries on up to SYNC_HASH_THREADS threads (and the cores there
 * are); *nt says how many started, 0 when the caller must hash them itself. */
static void hash_batch_start(struct hash_batch *b, pthread_t *t, size_t *nt)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t want = cpus > 1 ? (size_t)cpus : 1;
    if (want > SYNC_HASH_THREADS)
        want = SYNC_HASH_THREADS;
    if (want > b->n)
        want = b->n;
    *nt = 0;
    while (*nt < want && pthread_create(&t[*nt], NULL, hash_worker, b) == 0)
        (*nt)++;
}

/* Hash the pending remote files with one sha256sum while the local side hashes them on
 * several threads; copy those that differ. Remote lines are matched to files by path,
 * not by position: a file sha256sum cannot read prints no line (its error goes to
 * stderr), and any file without a matching line counts as different. */
static int flush_pending(struct sync_run *run, struct sync_host *h)
{
    if (!h->pending.nr)
        return 0;
    struct dsl_dynbuf cmd, out;
    dsl_dynbuf_init(&cmd, 1u << 20); /* SYNC_HASH_BATCH quoted paths */
    dsl_dynbuf_init(&out, 1u << 20); /* as many "<hash>  <path>" lines */
    int r = 0;
    size_t n = h->pending.nr;
    char (*remote)[65] = dsl_xcalloc(n, sizeof(*remote)); /* "" = no line for it */

    struct hash_batch b;
    memset(&b, 0, sizeof(b));
    b.run = run;
    b.e = h->pending_e;
    b.n = n;
    pthread_mutex_init(&b.lock, NULL);
    pthread_t t[SYNC_HASH_THREADS];
    size_t nt;
    hash_batch_start(&b, t, &nt);

    dsl_dynbuf_addstr(&cmd, "exec sha256sum --");
    for (size_t i = 0; i < n; i++) {
        char *q = dsl_shell_quote(h->pending.v[i]);
        dsl_dynbuf_addf(&cmd, " %s", q);
        free(q);
    }
    ssh_channel ch = ssh_channel_new(h->s);
    if (!ch || ssh_channel_open_session(ch) != SSH_OK ||
        ssh_channel_request_exec(ch, dsl_dynbuf_str(&cmd)) != SSH_OK) {
        if (ch)
            ssh_channel_free(ch);
        h->rc = DSL_EREMOTE;
        snprintf(h->err, sizeof(h->err), "%s: cannot run sha256sum for --checksum: %s",
                 h->name, ssh_get_error(h->s));
        r = h->rc;
    } else {
        char buf[8192];
        int got;
        while ((got = ssh_channel_read(ch, buf, sizeof(buf), 0)) > 0)
            dsl_dynbuf_add(&out, buf, (size_t)got);
        ssh_channel_send_eof(ch);
        ssh_channel_close(ch);
        ssh_channel_free(ch);
    }
    if (nt == 0)
        hash_worker(&b);
    for (size_t k = 0; k < nt; k++)
        pthread_join(t[k], NULL);
    pthread_mutex_destroy(&b.lock);
    if (r < 0)
        goto out;
    if (b.rc < 0) {
        h->rc = r = b.rc;
        snprintf(h->err, sizeof(h->err), "%s: %.400s", h->name, b.err);
        goto out;
    }

    const char *p = dsl_dynbuf_str(&out), *end = p + strlen(p);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        char hex[65], *path;
        if (dsl_sha256_parse_sum_line(p, len, hex, &path) == 0) {
            for (size_t i = 0; i < n; i++) {
                if (!remote[i][0] && !strcmp(h->pending.v[i], path)) {
                    memcpy(remote[i], hex, sizeof(hex));
                    break;
                }
            }
            free(path);
        }
        p += len + (nl ? 1 : 0);
    }
    for (size_t i = 0; i < n && r == 0; i++) {
        struct sync_entry *e = h->pending_e[i];
        int same = 0;
        if (remote[i][0]) {
            char hex[65];
            for (int k = 0; k < 32; k++)
                snprintf(hex + 2 * k, 3, "%02x", e->sha[k]);
            same = !strcmp(remote[i], hex);
        }
        if (same) {
            h->same++;
            continue;
        }
        int missing;
        sftp_attributes a = rlstat(h, h->pending.v[i], &missing);
        r = copy_file(h, e, h->pending.v[i], a);
        sftp_attributes_free(a);
    }
out:
    free(remote);
    dsl_strvec_clear(&h->pending);
    dsl_dynbuf_release(&cmd);
    dsl_dynbuf_release(&out);
    return r;
}

static int sync_entry(struct sync_run *run, struct sync_host *h, struct sync_entry *e,
                      const char *path, sftp_attributes a)
{
    int r;
    if (S_ISDIR(e->mode))
        return sync_dir(run, h, e, path, a);
    if (S_ISLNK(e->mode)) {
        if (a && rtype(a) == SSH_FILEXFER_TYPE_SYMLINK) {
            char *t = sftp_readlink(h->sftp, path);
            int same = t && !strcmp(t, e->link);
            ssh_string_free_char(t);
            if (same) {
                h->same++;
                return 0;
            }
        }
        if (a && (r = rm_rf(h, path, rtype(a))) < 0)
            return r;
        if (sftp_symlink(h->sftp, e->link, path) < 0)
            return host_fail(h, "create symlink", path);
        h->mut++;
        atomic_fetch_add(&h->copied, 1u);
        return 0;
    }
    /* regular file */
    if (a && rtype(a) == SSH_FILEXFER_TYPE_REGULAR && a->size == e->size) {
        if (run->o->checksum) {
            if ((a->permissions & 07777) != (e->mode & 07777) &&
                (r = set_mode(h, path, e->mode)) < 0)
                return r;
            DSL_ALLOC_GROW(h->pending_e, h->pending.nr, h->pending_alloc);
            h->pending_e[h->pending.nr] = e;
            dsl_strvec_push(&h->pending, path);
            return h->pending.nr >= SYNC_HASH_BATCH ? flush_pending(run, h) : 0;
        }
        if ((int64_t)a->mtime == e->mtime) {
            h->same++;
            if ((a->permissions & 07777) != (e->mode & 07777))
                return set_mode(h, path, e->mode);
            return 0;
        }
    }
    if (a && rtype(a) != SSH_FILEXFER_TYPE_REGULAR && rtype(a) != SSH_FILEXFER_TYPE_DIRECTORY) {
        if ((r = rm_rf(h, path, rtype(a))) < 0)
            return r;
        a = NULL;
    }
    return copy_file(h, e, path, a);
}

/* mkdir -p of the parent of path. */
static int make_parents(struct sync_host *h, const char *path)
{
    char *p = dsl_xstrdup(path);
    int r = 0;
    for (char *s = strchr(p + 1, '/'); s && r == 0; s = strchr(s + 1, '/')) {
        *s = '\0';
        int missing;
        sftp_attributes a = rlstat(h, p, &missing);
        if (!a && missing && sftp_mkdir(h->sftp, p, 0755) < 0)
            r = host_fail(h, "create directory", p);
        else if (!a && !missing)
            r = host_fail(h, "read", p);
        sftp_attributes_free(a);
        *s = '/';
    }
    free(p);
    return r;
}

static void nap(void)
{
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* Claim file of a root: ".NAME.dsl-sync-claim-TOKEN" beside it, made with O_EXCL.
 * The host that makes it copies; a host of this run that finds it (another node sharing
 * the directory: NFS, a bind mount) waits for that host and copies nothing.
 * Returns the owning host when another host owns it, else NULL (*made: ours to remove). */
static char *claim_path(const struct sync_run *run, const char *remote)
{
    const char *sl = strrchr(remote, '/');
    if (sl)
        return dsl_xasprintf("%.*s.%s.dsl-sync-claim-%s", (int)(sl - remote + 1), remote,
                             sl + 1, run->token);
    return dsl_xasprintf(".%s.dsl-sync-claim-%s", remote, run->token);
}

static struct sync_host *claim(struct sync_run *run, struct sync_host *h, const char *cp,
                               int *made)
{
    size_t self = (size_t)(h - run->hosts);
    *made = 0;
    sftp_file f = sftp_open(h->sftp, cp, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (f) {
        char line[32];
        int n = snprintf(line, sizeof(line), "%zu\n", self);
        /* a short write leaves a claim the others cannot read: they copy too, and the
         * atomic replace keeps that safe, only not once */
        (void)sftp_write(f, line, (size_t)n);
        sftp_close(f);
        *made = 1;
        return NULL;
    }
    /* the owner creates, then writes: an empty claim is read again for up to 2 s */
    char line[32];
    ssize_t n = 0;
    for (int tries = 0; n == 0 && tries < 100; tries++) {
        if (tries)
            nap();
        f = sftp_open(h->sftp, cp, O_RDONLY, 0);
        if (!f)
            return NULL; /* no claim to be seen: copy as usual */
        n = sftp_read(f, line, sizeof(line) - 1);
        sftp_close(f);
    }
    if (n <= 0)
        return NULL;
    line[n] = '\0';
    char *end;
    unsigned long idx = strtoul(line, &end, 10);
    if (end == line || *end != '\n' || idx >= run->nhosts || idx == self)
        return NULL;
    return &run->hosts[idx];
}

/* The owner of root i keeps its claim until every other host has looked at it (or is
 * done), so a fast copy cannot hide the sharing from a host that connected later. Only
 * when every host has a thread: otherwise one may wait for a host that cannot start. */
static void wait_looked(struct sync_run *run, struct sync_host *h, size_t i)
{
    if (!run->all_at_once)
        return;
    for (size_t j = 0; j < run->nhosts; j++) {
        struct sync_host *o = &run->hosts[j];
        while (o != h && !atomic_load(&o->done) && atomic_load(&o->looked) <= i)
            nap();
    }
}

static void sync_host_run(struct sync_run *run, struct sync_host *h)
{
    const struct dsl_sync_opts *o = run->o;
    int r;
    h->t0 = dsl_now();
    /* "user@host" (a hostfile's login user): that user, over the ssh config's User */
    struct dsl_transport_opts tr = o->tr;
    const char *at = strchr(h->name, '@');
    char *user = at ? dsl_xstrndup(h->name, (size_t)(at - h->name)) : NULL;
    if (user)
        tr.ssh_user = user;
    r = dsl_ssh_session_open(&h->s, at ? at + 1 : h->name, &tr, DSL_SSH_BULK, NULL, h->err);
    free(user);
    if (r < 0) {
        h->rc = r;
        goto out;
    }
    if (!(h->sftp = sftp_new(h->s)) || sftp_init(h->sftp) < 0) {
        h->rc = DSL_EREMOTE;
        snprintf(h->err, sizeof(h->err), "%s: the SFTP subsystem was refused: %s", h->name,
                 ssh_get_error(h->s));
        goto out;
    }
    h->can_fsync = sftp_extension_supported(h->sftp, "fsync@openssh.com", "1");
    h->buf = dsl_xmalloc(SYNC_CHUNK);
    for (size_t i = 0; i < run->nroots && h->rc == 0; i++) {
        struct sync_root *root = &run->roots[i];
        if (make_parents(h, root->remote) < 0)
            break;
        int made;
        char *cp = claim_path(run, root->remote);
        struct sync_host *owner = claim(run, h, cp, &made);
        atomic_store(&h->looked, i + 1);
        if (owner) {
            /* the owner made its claim in this run, so it is running: wait for it */
            while (!atomic_load(&owner->done) && atomic_load(&owner->finished) <= i)
                nap();
            if (owner->rc == 0) {
                h->shared_with = owner->name;
                h->shared++;
                atomic_store(&h->finished, i + 1);
                free(cp);
                continue;
            }
            /* the owner failed: copy from here after all */
        }
        int missing;
        sftp_attributes a = rlstat(h, root->remote, &missing);
        if (!a && !missing) {
            host_fail(h, "read", root->remote);
            if (made) {
                wait_looked(run, h, i);
                sftp_unlink(h->sftp, cp);
            }
            free(cp);
            break;
        }
        r = sync_entry(run, h, &root->e, root->remote, a);
        sftp_attributes_free(a);
        if (r == 0)
            r = flush_pending(run, h);
        if (r < 0 && h->rc == 0)
            h->rc = r; /* before finished: a waiting host must see the failure */
        if (made) {
            wait_looked(run, h, i);
            if (sftp_unlink(h->sftp, cp) < 0 && r == 0)
                r = host_fail(h, "remove", cp);
        }
        atomic_store(&h->finished, i + 1);
        free(cp);
        if (r < 0 && h->rc == 0)
            h->rc = r;
    }
out:
    if (h->sftp)
        sftp_free(h->sftp);
    h->sftp = NULL;
    dsl_ssh_session_close(h->s);
    h->s = NULL;
    free(h->buf);
    h->buf = NULL;
    h->t1 = dsl_now();
    atomic_store(&h->done, 1);
}

static void *sync_worker(void *arg)
{
    struct sync_run *run = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&run->next, 1);
        if (i >= run->nhosts)
            return NULL;
        sync_host_run(run, &run->hosts[i]);
    }
}

/* ---- progress and summary ---- */

static void human(double b, char *out, size_t len)
{
    static const char *const unit[] = {"B", "KB", "MB", "GB", "TB"};
    int u = 0;
    while (b >= 1000.0 && u < 4) {
        b /= 1000.0;
        u++;
    }
    snprintf(out, len, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

static void progress_line(struct sync_run *run, double t0, int tty)
{
    uint64_t bytes = 0, low = UINT64_MAX;
    unsigned files = 0, done = 0;
    const char *slow = NULL;
    for (size_t i = 0; i < run->nhosts; i++) {
        struct sync_host *h = &run->hosts[i];
        uint64_t b = atomic_load(&h->bytes);
        bytes += b;
        files += atomic_load(&h->copied);
        if (atomic_load(&h->done)) {
            done++;
        } else if (b < low) {
            low = b;
            slow = h->name;
        }
    }
    double dt = dsl_now() - t0;
    char hb[32], hr[32], hl[32];
    human((double)bytes, hb, sizeof(hb));
    human(dt > 0 ? (double)bytes / dt : 0, hr, sizeof(hr));
    human((double)(low == UINT64_MAX ? 0 : low), hl, sizeof(hl));
    fprintf(stderr, "%ssync: %s copied, %u files, %s/s, %u/%zu hosts done%s%s%s%s%s",
            tty ? "\r\033[K" : "", hb, files, hr, done, run->nhosts, slow ? ", slowest " : "",
            slow ? slow : "", slow ? " (" : "", slow ? hl : "", slow ? ")" : "");
    if (!tty)
        fputc('\n', stderr);
    fflush(stderr);
}

static void wait_hosts(struct sync_run *run, double t0)
{
    int tty = isatty(2);
    double last = t0;
    int shown = 0;
    for (;;) {
        size_t done = 0;
        for (size_t i = 0; i < run->nhosts; i++)
            done += atomic_load(&run->hosts[i].done) ? 1u : 0u;
        if (done == run->nhosts)
            break;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        double now = dsl_now();
        if (run->o->verbose >= 0 && now - t0 >= 1.0 && now - last >= (tty ? 1.0 : 5.0)) {
            progress_line(run, t0, tty);
            last = now;
            shown = 1;
        }
    }
    if (shown && tty)
        fputs("\r\033[K", stderr);
}

int dsl_sync_exit_code(int rc)
{
    if (rc == 0)
        return 0;
    if (rc == DSL_EUSAGE)
        return DSL_EXIT_USAGE;
    if (rc == DSL_ECONNECT || rc == DSL_ETIMEDOUT)
        return DSL_EXIT_UNREACHABLE;
    if (rc == DSL_EAUTH)
        return DSL_EXIT_AUTH;
    return 1;
}

int dsl_sync_run(const struct dsl_sync_opts *o, char *const *hosts, size_t nhosts)
{
    struct sync_run run;
    char err[DSL_ERR_LEN];
    int rc = 0;
    memset(&run, 0, sizeof(run));
    run.o = o;
    for (size_t i = 0; i < SYNC_HASH_LOCKS; i++)
        pthread_mutex_init(&run.hash_locks[i], NULL);
    run.roots = dsl_xcalloc(o->npaths ? o->npaths : 1, sizeof(*run.roots));
    for (size_t i = 0; i < o->npaths; i++) {
        run.nroots++;
        if ((rc = make_root(&run.roots[i], o->paths[i], o->dest, err)) < 0) {
            dsl_error("sync: %s", err);
            rc = DSL_EUSAGE; /* nothing was copied anywhere */
            goto out;
        }
    }
    run.nhosts = nhosts;
    run.hosts = dsl_xcalloc(nhosts ? nhosts : 1, sizeof(*run.hosts));
    for (size_t i = 0; i < nhosts; i++) {
        run.hosts[i].name = hosts[i];
        run.hosts[i].o = o;
        dsl_strvec_init(&run.hosts[i].pending);
    }
    ssh_init();
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    {
        uint64_t tok = ((uint64_t)(unsigned)rand() << 32) ^ (uint64_t)(unsigned)rand() ^
                       ((uint64_t)getpid() << 16) ^ (uint64_t)time(NULL);
        snprintf(run.token, sizeof(run.token), "%016llx", (unsigned long long)tok);
    }
    size_t nthreads = (size_t)(o->fanout > 0 ? o->fanout : 1);
    if (nthreads > nhosts)
        nthreads = nhosts;
    run.all_at_once = nthreads == nhosts;
    pthread_t *tid = dsl_xcalloc(nthreads ? nthreads : 1, sizeof(*tid));
    size_t started = 0;
    double t0 = dsl_now();
    for (size_t i = 0; i < nthreads; i++) {
        if (pthread_create(&tid[i], NULL, sync_worker, &run) != 0)
            break;
        started++;
    }
    if (!started && nhosts)
        sync_worker(&run); /* no threads to be had: one host after another */
    wait_hosts(&run, t0);
    for (size_t i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    free(tid);
    double dt = dsl_now() - t0;

    uint64_t total = 0;
    unsigned copied = 0, failed = 0, deleted = 0;
    for (size_t i = 0; i < nhosts; i++) {
        struct sync_host *h = &run.hosts[i];
        uint64_t b = atomic_load(&h->bytes);
        unsigned c = atomic_load(&h->copied);
        total += b;
        copied += c;
        deleted += h->deleted;
        if (h->rc < 0) {
            failed++;
            if (!rc)
                rc = h->rc;
            printf("%s: FAILED after %u copied: %s\n", h->name, c, h->err);
            continue;
        }
        if (h->shared) /* said even with -q: the user must know the nodes share it */
            printf("%s: shares the destination with %s, copied there once (%u path%s)\n",
                   h->name, h->shared_with, h->shared, h->shared == 1 ? "" : "s");
        if (o->verbose >= 0) {
            char hb[32];
            human((double)b, hb, sizeof(hb));
            printf("%s: %u copied (%s), %u up to date, %u deleted, %.2f s\n", h->name, c, hb,
                   h->same, h->deleted, h->t1 - h->t0);
        }
    }
    char ht[32], hr[32];
    human((double)total, ht, sizeof(ht));
    human(dt > 0 ? (double)total / dt : 0, hr, sizeof(hr));
    if (failed) {
        for (size_t i = 0; i < nhosts; i++)
            if (run.hosts[i].rc < 0)
                dsl_error("sync: %s", run.hosts[i].err);
        dsl_error("sync failed on %u of %zu hosts", failed, nhosts);
    } else if (o->verbose >= 0 && copied == 0 && deleted == 0) {
        printf("sync: nothing to copy, %zu hosts up to date (%.2f s)\n", nhosts, dt);
    } else if (o->verbose >= 0) {
        printf("sync: %zu hosts, %u entries copied (%s), %u deleted in %.2f s (%s/s)\n", nhosts,
               copied, ht, deleted, dt, hr);
    }
    fflush(stdout);
out:
    for (size_t i = 0; i < run.nroots; i++) {
        entry_release(&run.roots[i].e);
        free(run.roots[i].remote);
    }
    free(run.roots);
    for (size_t i = 0; i < run.nhosts; i++) {
        dsl_strvec_release(&run.hosts[i].pending);
        free(run.hosts[i].pending_e);
    }
    free(run.hosts);
    for (size_t i = 0; i < SYNC_HASH_LOCKS; i++)
        pthread_mutex_destroy(&run.hash_locks[i]);
    return rc;
}

/* ---- command line ---- */

struct sync_args {
    char *hostfile, *include, *exclude, *dest, *ssh_config, *ssh_identity;
    int delete_extra, checksum, fanout, ssh_port, accept_new, verbose, help;
    double connect_timeout;
};

#define SOFF(f) offsetof(struct sync_args, f)
static const struct dsl_opt sync_opts[] = {
    {"hostfile", 'H', DSL_OPT_STRING, SOFF(hostfile), "FILE", "hosts ('host slots=N' lines)",
     "/job/hostfile", 0, 0, NULL, 0, NULL},
    {"include", 'i', DSL_OPT_STRING, SOFF(include), "SPEC", "only these hosts", NULL, 0, 0,
     NULL, 0, NULL},
    {"exclude", 'e', DSL_OPT_STRING, SOFF(exclude), "SPEC", "all but these hosts", NULL, 0, 0,
     NULL, 0, NULL},
    {"dest", 0, DSL_OPT_STRING, SOFF(dest), "DIR", "copy to DIR/<name of PATH> instead", NULL,
     0, 0, NULL, 0, NULL},
    {"delete", 0, DSL_OPT_FLAG, SOFF(delete_extra), NULL,
     "remove remote files gone at the source", NULL, 0, 0, NULL, 0, NULL},
    {"checksum", 0, DSL_OPT_FLAG, SOFF(checksum), NULL,
     "compare SHA-256 (remote sha256sum) instead of size+mtime", NULL, 0, 0, NULL, 0, NULL},
    {"fanout", 0, DSL_OPT_INT, SOFF(fanout), "N", "hosts copied to at once", "32", 1, 4096,
     NULL, 0, NULL},
    {"ssh_config", 0, DSL_OPT_STRING, SOFF(ssh_config), "FILE", "ssh client configuration",
     "~/.ssh/config", 0, 0, NULL, 0, NULL},
    {"ssh_port", 0, DSL_OPT_INT, SOFF(ssh_port), "PORT", "ssh port", "from ssh config, or 22",
     1, 65535, NULL, 0, NULL},
    {"ssh_identity", 0, DSL_OPT_STRING, SOFF(ssh_identity), "FILE", "ssh private key",
     "ssh-agent and default keys", 0, 0, NULL, 0, NULL},
    {"ssh_accept_new", 0, DSL_OPT_FLAG, SOFF(accept_new), NULL,
     "trust unknown host keys on first use", NULL, 0, 0, NULL, 0, NULL},
    {"connect_timeout", 0, DSL_OPT_SECONDS, SOFF(connect_timeout), "SECONDS",
     "give up on a host that does not answer", "10", 1, 3600, NULL, 0, NULL},
    {"verbose", 'v', DSL_OPT_SET, SOFF(verbose), NULL, "one line per copied or deleted entry",
     NULL, 0, 0, NULL, 1, NULL},
    {"quiet", 'q', DSL_OPT_SET, SOFF(verbose), NULL, "errors only",
     NULL, 0, 0, NULL, -1, NULL},
    {"help", 'h', DSL_OPT_FLAG, SOFF(help), NULL, "show this help", NULL, 0, 0, NULL, 0, NULL},
};
static const struct dsl_opt_parser sync_parser = {
    .prog = "dslaunch sync",
    .opts = sync_opts,
    .nopts = sizeof(sync_opts) / sizeof(sync_opts[0]),
};

static void usage(FILE *f)
{
    fputs("usage: dslaunch sync [options] PATH...\n"
          "Copy files and directories to the same absolute path on every host (SFTP).\n", f);
    dsl_opt_help(&sync_parser, f);
}

int dsl_sync_main(int argc, char **argv)
{
    struct dsl_sync_opts o;
    struct sync_args sa = {.fanout = 32, .connect_timeout = 10};
    struct dsl_hostfile hf;
    struct dsl_placement pl;
    struct dsl_strvec paths, hosts;
    const char *hostfile = NULL;
    char err[DSL_ERR_LEN];
    int code = DSL_EXIT_USAGE, r;
    memset(&o, 0, sizeof(o));
    dsl_hostfile_init(&hf);
    dsl_placement_init(&pl);
    dsl_strvec_init(&paths);
    dsl_strvec_init(&hosts);

    if (dsl_opt_parse(&sync_parser, &sa, argc, argv, &paths, err) < 0) {
        dsl_error("sync: %s", err);
        goto out;
    }
    if (sa.help) {
        usage(stdout);
        code = 0;
        goto out;
    }
    if ((sa.ssh_config && dsl_file_check_readable("--ssh-config", sa.ssh_config, err) < 0) ||
        (sa.ssh_identity &&
         dsl_file_check_readable("--ssh-identity", sa.ssh_identity, err) < 0)) {
        dsl_error("sync: %s", err);
        goto out;
    }
    o.dest = sa.dest;
    o.delete_extra = sa.delete_extra;
    o.checksum = sa.checksum;
    o.fanout = sa.fanout;
    o.verbose = sa.verbose;
    o.tr.ssh_config = sa.ssh_config;
    o.tr.ssh_identity = sa.ssh_identity;
    o.tr.ssh_port = sa.ssh_port;
    o.tr.accept_new = sa.accept_new;
    o.tr.connect_timeout = sa.connect_timeout;
    o.tr.keepalive = 30;
    hostfile = sa.hostfile;
    if (!paths.nr) {
        dsl_error("sync: nothing to copy: give one or more PATHs (see dslaunch sync --help)");
        goto out;
    }
    if (!hostfile && access("/job/hostfile", R_OK) == 0)
        hostfile = "/job/hostfile";
    if (!hostfile) {
        dsl_error("sync: no hosts: give --hostfile (or create /job/hostfile)");
        goto out;
    }
    if ((r = dsl_hostfile_load(&hf, hostfile, err)) < 0) {
        dsl_error("%s", err);
        goto out;
    }
    struct dsl_placement_opts po = {
        .include = sa.include, .exclude = sa.exclude, .num_nodes = -1, .num_gpus = -1};
    if ((r = dsl_placement_build(&pl, &hf, &po, err)) < 0) {
        dsl_error("%s", err);
        goto out;
    }
    for (int i = 0; i < pl.nr; i++) {
        if (pl.nodes[i].user)
            dsl_strvec_pushf(&hosts, "%s@%s", pl.nodes[i].user, pl.nodes[i].host);
        else
            dsl_strvec_push(&hosts, pl.nodes[i].host);
    }
    o.paths = paths.v;
    o.npaths = paths.nr;
    code = dsl_sync_exit_code(dsl_sync_run(&o, hosts.v, hosts.nr));
out:
    dsl_placement_release(&pl);
    dsl_hostfile_release(&hf);
    dsl_strvec_release(&paths);
    dsl_strvec_release(&hosts);
    free(sa.hostfile);
    free(sa.include);
    free(sa.exclude);
    free(sa.dest);
    free(sa.ssh_config);
    free(sa.ssh_identity);
    return code;
}
