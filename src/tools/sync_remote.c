/*
 * dslaunch sync: one remote file operation at a time on one host's SFTP session.
 *
 * A file is copied to ".NAME.dsl-sync-XXXX" in the same directory, fsync'ed when the
 * server offers fsync@openssh.com, given mode and mtime, and renamed over NAME: an SFTP
 * rename for a new NAME, `mv -f` (rename(2)) on an exec channel for an existing one,
 * as OpenSSH's SFTP v3 rename is link(2) and libssh 0.10 has no posix-rename call. A
 * failed copy never replaces a good file, and an updated file is never missing. Each
 * failure is written into the host's err as "HOST: cannot VERB 'PATH': WHY". Only the
 * host's own thread uses its session.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "digest.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "sync_impl.h"
#include "dslaunch/common/banned.h"

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
int dsl_sync_host_fail(struct sync_host *h, const char *what, const char *path)
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
sftp_attributes dsl_sync_remote_lstat(struct sync_host *h, const char *path, int *missing)
{
    sftp_attributes a = sftp_lstat(h->sftp, path);
    *missing = !a && sftp_get_error(h->sftp) == SSH_FX_NO_SUCH_FILE;
    return a;
}

int dsl_sync_remote_remove(struct sync_host *h, const char *path, int type)
{
    if (type == SSH_FILEXFER_TYPE_DIRECTORY) {
        sftp_dir d = sftp_opendir(h->sftp, path);
        if (!d)
            return dsl_sync_host_fail(h, "read directory", path);
        sftp_attributes a;
        int r = 0;
        while (r == 0 && (a = sftp_readdir(h->sftp, d))) {
            if (strcmp(a->name, ".") && strcmp(a->name, "..")) {
                char *sub = dsl_xasprintf("%s/%s", path, a->name);
                r = dsl_sync_remote_remove(h, sub, dsl_sync_rtype(a));
                free(sub);
            }
            sftp_attributes_free(a);
        }
        sftp_closedir(d);
        if (r < 0)
            return r;
        if (sftp_rmdir(h->sftp, path) < 0)
            return dsl_sync_host_fail(h, "remove directory", path);
    } else if (sftp_unlink(h->sftp, path) < 0) {
        return dsl_sync_host_fail(h, "remove", path);
    }
    h->mut++;
    return 0;
}

int dsl_sync_remote_set_meta(struct sync_host *h, const char *path, const struct sync_entry *e)
{
    struct sftp_attributes_struct at;
    memset(&at, 0, sizeof(at));
    at.flags = SSH_FILEXFER_ATTR_PERMISSIONS | SSH_FILEXFER_ATTR_ACMODTIME;
    at.permissions = (uint32_t)(e->mode & 07777);
    at.atime = (uint32_t)e->mtime;
    at.mtime = (uint32_t)e->mtime;
    if (sftp_setstat(h->sftp, path, &at) < 0)
        return dsl_sync_host_fail(h, "set mode and mtime of", path);
    return 0;
}

int dsl_sync_remote_set_mode(struct sync_host *h, const char *path, mode_t mode)
{
    if (sftp_chmod(h->sftp, path, mode & 07777) < 0)
        return dsl_sync_host_fail(h, "set the mode of", path);
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
    sftp_attributes a = dsl_sync_remote_lstat(h, path, &missing);
    if (!a || dsl_sync_rtype(a) != SSH_FILEXFER_TYPE_REGULAR || a->size != e->size) {
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

int dsl_sync_file_copy(struct sync_host *h, const struct sync_entry *e, const char *path,
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
        r = dsl_sync_host_fail(h, "create", tmp);
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
                r = dsl_sync_host_fail(h, "write", tmp);
                goto out;
            }
            off += (size_t)w;
            atomic_fetch_add(&h->bytes, (uint64_t)w);
        }
    }
    if (h->can_fsync && sftp_fsync(f) < 0) {
        r = dsl_sync_host_fail(h, "fsync", tmp);
        goto out;
    }
    int cr = sftp_close(f);
    f = NULL;
    if (cr < 0) {
        r = dsl_sync_host_fail(h, "write", tmp);
        goto out;
    }
    if ((r = dsl_sync_remote_set_meta(h, tmp, e)) < 0)
        goto out;
    if (old && dsl_sync_rtype(old) == SSH_FILEXFER_TYPE_DIRECTORY && (r = dsl_sync_remote_remove(h, path, dsl_sync_rtype(old))) < 0)
        goto out;
    /* An existing target (or one another node placed meanwhile) is replaced with
     * rename(2) on the node, never unlinked first: there is no moment without a file. */
    if ((old && dsl_sync_rtype(old) == SSH_FILEXFER_TYPE_REGULAR) || sftp_rename(h->sftp, tmp, path) < 0) {
        if (remote_replace(h, tmp, path) < 0) {
            if (already_there(h, e, path)) { /* another node placed the same file */
                sftp_unlink(h->sftp, tmp);
                free(tmp);
                tmp = NULL;
                h->same++;
                goto out;
            }
            r = dsl_sync_host_fail(h, "rename into place", path);
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

/* mkdir -p of the parent of path. */
int dsl_sync_remote_mkdirs(struct sync_host *h, const char *path)
{
    char *p = dsl_xstrdup(path);
    int r = 0;
    for (char *s = strchr(p + 1, '/'); s && r == 0; s = strchr(s + 1, '/')) {
        *s = '\0';
        int missing;
        sftp_attributes a = dsl_sync_remote_lstat(h, p, &missing);
        if (!a && missing && sftp_mkdir(h->sftp, p, 0755) < 0)
            r = dsl_sync_host_fail(h, "create directory", p);
        else if (!a && !missing)
            r = dsl_sync_host_fail(h, "read", p);
        sftp_attributes_free(a);
        *s = '/';
    }
    free(p);
    return r;
}