/*
 * Files under a remote home over SFTP (see sshfiles.h).
 *
 * Theory of operation: every call is blocking and works on one host's session. Reads
 * are bounded (DSL_SSHFILES_MAX). A write goes to NAME.dslaunch-tmp first, gets its mode
 * (the old file's, so a rewrite never widens or narrows what the user chose; fix_mode
 * handles modes sshd refuses), and is renamed over NAME. OpenSSH's SFTP server speaks
 * protocol version 3, whose rename refuses an existing target, and libssh 0.10 cannot
 * send the posix-rename extension, so replacing a file falls back to the fixed command
 * `mv -f -- 'NAME.dslaunch-tmp' 'NAME'` on an exec channel, both paths quoted.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/log.h"
#include "sshfiles.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define SETUP_FILE_MAX DSL_SSHFILES_MAX

static int files_fail(struct dsl_sshfiles *f, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int files_fail(struct dsl_sshfiles *f, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->err, sizeof(f->err), fmt, ap);
    va_end(ap);
    return code;
}

static void files_note(struct dsl_sshfiles *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void files_note(struct dsl_sshfiles *f, const char *fmt, ...)
{
    char buf[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    dsl_strvec_push(&f->notes, buf);
    dsl_info("%s: %s", f->host, buf);
}

void dsl_sshfiles_init(struct dsl_sshfiles *f, const char *host)
{
    memset(f, 0, sizeof(*f));
    f->host = host;
    dsl_strvec_init(&f->notes);
}

int dsl_sshfiles_open(struct dsl_sshfiles *f, ssh_session s)
{
    f->s = s;
    if (!(f->sftp = sftp_new(s)) || sftp_init(f->sftp) != SSH_OK) {
        if (f->sftp)
            sftp_free(f->sftp);
        f->sftp = NULL;
        return files_fail(f, DSL_EREMOTE,
                          "'%s' offers no SFTP (add 'Subsystem sftp internal-sftp' to its "
                          "sshd_config): %s",
                          f->host, ssh_get_error(s));
    }
    return 0;
}

void dsl_sshfiles_release(struct dsl_sshfiles *f)
{
    if (f->sftp)
        sftp_free(f->sftp);
    f->sftp = NULL;
    dsl_strvec_release(&f->notes);
}

/* Remote file text into *out (NULL when the file does not exist). */
int dsl_sshfiles_read(struct dsl_sshfiles *fs, const char *path, char **out)
{
    *out = NULL;
    sftp_file fh = sftp_open(fs->sftp, path, O_RDONLY, 0);
    if (!fh) {
        if (sftp_get_error(fs->sftp) == SSH_FX_NO_SUCH_FILE)
            return 0;
        return files_fail(fs, DSL_EREMOTE, "cannot read '~/%s' on '%s': %s", path, fs->host,
                         ssh_get_error(fs->s));
    }
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, SETUP_FILE_MAX);
    char buf[16384];
    ssize_t n;
    int r = 0;
    while ((n = sftp_read(fh, buf, sizeof(buf))) > 0)
        if ((r = dsl_dynbuf_add(&b, buf, (size_t)n)) < 0)
            break;
    sftp_close(fh);
    if (n < 0 || r < 0) {
        dsl_dynbuf_release(&b);
        return files_fail(fs, DSL_EREMOTE, "cannot read '~/%s' on '%s': %s", path, fs->host,
                         r < 0 ? dsl_strerror(r) : ssh_get_error(fs->s));
    }
    *out = dsl_xstrdup(dsl_dynbuf_str(&b));
    dsl_dynbuf_release(&b);
    return 0;
}

/* Start a fixed command in the home directory on an exec channel of h's session. */
int dsl_sshfiles_exec_start(struct dsl_sshfiles *fs, const char *cmd, ssh_channel *out)
{
    ssh_channel ch = ssh_channel_new(fs->s);
    *out = NULL;
    if (!ch || ssh_channel_open_session(ch) != SSH_OK ||
        ssh_channel_request_exec(ch, cmd) != SSH_OK) {
        if (ch)
            ssh_channel_free(ch);
        return files_fail(fs, DSL_EREMOTE, "'%s' refused to run a command: %s", fs->host,
                         ssh_get_error(fs->s));
    }
    *out = ch;
    return 0;
}

/* Read a started command's stdout and stderr into out until it ends; frees ch. */
void dsl_sshfiles_exec_finish(ssh_channel ch, struct dsl_dynbuf *out, int *status)
{
    char buf[4096];
    int n;
    while ((n = ssh_channel_read(ch, buf, sizeof(buf), 0)) > 0)
        if (dsl_dynbuf_add(out, buf, (size_t)n) < 0)
            break;
    while ((n = ssh_channel_read(ch, buf, sizeof(buf), 1)) > 0)
        if (dsl_dynbuf_add(out, buf, (size_t)n) < 0)
            break;
    ssh_channel_send_eof(ch);
    *status = ssh_channel_get_exit_status(ch);
    ssh_channel_close(ch);
    ssh_channel_free(ch);
}

int dsl_sshfiles_exec(struct dsl_sshfiles *fs, const char *cmd, struct dsl_dynbuf *out,
                      int *status)
{
    ssh_channel ch;
    *status = -1;
    int r = dsl_sshfiles_exec_start(fs, cmd, &ch);
    if (r == 0)
        dsl_sshfiles_exec_finish(ch, out, status);
    return r;
}

/* Replace ~/path with text: temporary name, mode, then rename over the old file. */
int dsl_sshfiles_write(struct dsl_sshfiles *fs, const char *path, const char *text,
                       mode_t mode)
{
    char *tmp = dsl_xasprintf("%s.dslaunch-tmp", path);
    int r = 0;
    sftp_attributes a = sftp_stat(fs->sftp, path);
    if (a) {
        mode = (mode_t)(a->permissions & 07777);
        sftp_attributes_free(a);
    }
    sftp_unlink(fs->sftp, tmp);
    /* after the unlink, exclusive: a link planted at the name is never written through */
    sftp_file fh = sftp_open(fs->sftp, tmp, O_WRONLY | O_CREAT | O_EXCL, mode);
    if (!fh) {
        r = files_fail(fs, DSL_EREMOTE, "cannot create '~/%s' on '%s': %s", tmp, fs->host,
                      ssh_get_error(fs->s));
        goto out;
    }
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t n = sftp_write(fh, text + off, len - off);
        if (n <= 0) {
            sftp_close(fh);
            sftp_unlink(fs->sftp, tmp);
            r = files_fail(fs, DSL_EREMOTE, "cannot write '~/%s' on '%s': %s", tmp, fs->host,
                          ssh_get_error(fs->s));
            goto out;
        }
        off += (size_t)n;
    }
    sftp_close(fh);
    sftp_chmod(fs->sftp, tmp, mode); /* the server's umask applied at open */
    if (sftp_rename(fs->sftp, tmp, path) < 0) {
        /* SFTP v3 rename does not replace an existing file: a fixed mv, paths quoted */
        char *qt = dsl_shell_quote(tmp), *qp = dsl_shell_quote(path);
        char *cmd = dsl_xasprintf("mv -f -- %s %s", qt, qp);
        struct dsl_dynbuf o;
        int status;
        dsl_dynbuf_init(&o, 4096);
        r = dsl_sshfiles_exec(fs, cmd, &o, &status);
        if (r == 0 && status != 0)
            r = files_fail(fs, DSL_EREMOTE, "cannot replace '~/%s' on '%s': %s", path, fs->host,
                          dsl_dynbuf_str(&o));
        if (r < 0)
            sftp_unlink(fs->sftp, tmp);
        dsl_dynbuf_release(&o);
        free(cmd);
        free(qt);
        free(qp);
    }
out:
    free(tmp);
    return r;
}

/* Fix the mode of ~/path if sshd or ssh would refuse it (relpath "" is the home). */
void dsl_sshfiles_fix_mode(struct dsl_sshfiles *fs, const char *path, const char *shown,
                           enum dsl_sshperm_kind kind)
{
    sftp_attributes a = sftp_stat(fs->sftp, path);
    if (!a)
        return;
    unsigned int mode = a->permissions & 07777;
    sftp_attributes_free(a);
    const char *why;
    int fix = dsl_sshperm_fix(kind, mode, &why);
    if (fix < 0)
        return;
    if (sftp_chmod(fs->sftp, path, (mode_t)fix) < 0)
        files_note(fs, "%s: %s, and cannot change mode %04o: %s", shown, why, mode,
             ssh_get_error(fs->s));
    else
        files_note(fs, "%s: %s; mode %04o -> %04o", shown, why, mode, (unsigned int)fix);
}

/* Merge entry into ~/path with merge(); returns 1 when written, 0 when present. */
int dsl_sshfiles_merge(struct dsl_sshfiles *fs, const char *path, const char *entry,
                       int (*merge)(const char *, const char *, char **), mode_t mode)
{
    char *text = NULL, *merged = NULL;
    int r = dsl_sshfiles_read(fs, path, &text);
    if (r < 0)
        return r;
    r = merge(text, entry, &merged);
    if (r == 1 && dsl_sshfiles_write(fs, path, merged, mode) < 0)
        r = DSL_EREMOTE;
    else if (r < 0)
        files_fail(fs, r, "cannot merge into '~/%s' on '%s'", path, fs->host);
    free(text);
    free(merged);
    return r;
}

/* Make sure ~/.ssh exists with a mode sshd accepts. */
int dsl_sshfiles_ensure_ssh_dir(struct dsl_sshfiles *fs)
{
    sftp_attributes a = sftp_stat(fs->sftp, ".ssh");
    if (!a) {
        if (sftp_mkdir(fs->sftp, ".ssh", 0700) < 0)
            return files_fail(fs, DSL_EREMOTE, "cannot create '~/.ssh' on '%s': %s", fs->host,
                             ssh_get_error(fs->s));
        sftp_chmod(fs->sftp, ".ssh", 0700);
        files_note(fs, "created ~/.ssh (0700)");
        return 0;
    }
    sftp_attributes_free(a);
    dsl_sshfiles_fix_mode(fs, ".ssh", "~/.ssh", DSL_SSHPERM_SSHDIR);
    return 0;
}

/* Write ~/.ssh/<name> with text unless it already holds exactly that. */
int dsl_sshfiles_put(struct dsl_sshfiles *fs, const char *path, const char *text,
                     mode_t mode, enum dsl_sshperm_kind kind)
{
    char *cur = NULL;
    int r = dsl_sshfiles_read(fs, path, &cur);
    if (r == 0 && (!cur || strcmp(cur, text) != 0))
        r = dsl_sshfiles_write(fs, path, text, mode);
    free(cur);
    if (r == 0) {
        char *shown = dsl_xasprintf("~/%s", path);
        dsl_sshfiles_fix_mode(fs, path, shown, kind);
        free(shown);
    }
    return r;
}

