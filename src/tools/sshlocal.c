/*
 * The local side of ssh-setup: files under ~/.ssh of this host and the dedicated key
 * pair (see sshlocal.h).
 *
 * Theory of operation: plain blocking file I/O. A write goes to a new NAME.tmp.<random>
 * (created O_EXCL|O_NOFOLLOW, common/file.h) with the old file's mode (or the given
 * one), then is renamed over NAME, so known_hosts or config is never left half written
 * and no link planted beside it is written through. The key pair is generated with libssh
 * (ssh_pki_generate, ed25519) and written under umask 077, so the private key is never
 * readable by others, not even for a moment; an existing .pub must hold the same key
 * (it keeps its comment), a missing one is written.
 */
#define _DEFAULT_SOURCE /* explicit_bzero */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "authkeys.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/log.h"
#include "sshlocal.h"
#include "dslaunch/remote/sshsession.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

char *dsl_sshlocal_path(const char *rel)
{
    /* the home whose .ssh/ the launcher's sessions use too */
    char *home = dsl_ssh_home(), *path = dsl_xasprintf("%s/%s", home, rel);
    free(home);
    return path;
}

int dsl_sshlocal_read(const char *path, char **out, char *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dsl_seterr(err, -errno, "cannot open '%s': %s", path, strerror(errno));
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, DSL_SSHLOCAL_MAX);
    char buf[4096];
    ssize_t n;
    int r = 0;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        if ((r = dsl_dynbuf_add(&b, buf, (size_t)n)) < 0)
            break;
    if (n < 0)
        r = -errno;
    close(fd);
    if (r < 0) {
        dsl_dynbuf_release(&b);
        return dsl_seterr(err, r, "cannot read '%s': %s", path, dsl_strerror(r));
    }
    *out = dsl_xstrdup(dsl_dynbuf_str(&b));
    dsl_dynbuf_release(&b);
    return 0;
}

/* Write text to path via a fresh temporary file and rename; mode for a new file. */
int dsl_sshlocal_write(const char *path, const char *text, mode_t mode, char *err)
{
    char *tmp = NULL;
    struct stat st;
    if (stat(path, &st) == 0)
        mode = st.st_mode & 07777;
    int r = 0, fd = dsl_file_create_temp(path, mode & 0700, &tmp, err);
    if (fd < 0) {
        r = fd;
        goto out;
    }
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r = dsl_seterr(err, -errno, "cannot write '%s': %s", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            goto out;
        }
        off += (size_t)n;
    }
    if (fchmod(fd, mode) < 0 || close(fd) < 0 || rename(tmp, path) < 0) {
        r = dsl_seterr(err, -errno, "cannot write '%s': %s", path, strerror(errno));
        unlink(tmp);
    }
out:
    free(tmp);
    return r;
}

void dsl_sshlocal_mkdir_ssh(const char *path)
{
    char *dir = dsl_xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        const char *base = strrchr(dir, '/');
        if (base && !strcmp(base, "/.ssh"))
            mkdir(dir, 0700);
    }
    free(dir);
}

/* Load the dedicated key pair, or create it. */
int dsl_sshkeypair_load(struct dsl_sshkeypair *kp, const char *path, char *err)
{
    int r;
    char *b64 = NULL, *pubtext = NULL;
    memset(kp, 0, sizeof(*kp));
    kp->path = path ? dsl_xstrdup(path) : dsl_sshlocal_path(".ssh/id_dslaunch");
    const char *base = strrchr(kp->path, '/');
    kp->name = dsl_xstrdup(base ? base + 1 : kp->path);
    char *pub_path = dsl_xasprintf("%s.pub", kp->path);

    if (access(kp->path, F_OK) == 0) {
        if (ssh_pki_import_privkey_file(kp->path, NULL, NULL, NULL, &kp->key) != SSH_OK) {
            r = dsl_seterr(err, DSL_EAUTH,
                           "cannot load the key '%s' (unreadable or passphrase-protected: "
                           "ssh-setup needs a key without a passphrase, or pass --key)",
                           kp->path);
            goto out;
        }
        struct stat sb;
        if (stat(kp->path, &sb) == 0) {
            const char *why;
            int fix = dsl_sshperm_fix(DSL_SSHPERM_PRIVKEY, (unsigned int)sb.st_mode, &why);
            if (fix >= 0 && chmod(kp->path, (mode_t)fix) == 0)
                dsl_info("'%s': %s; mode set to %04o", kp->path, why, (unsigned int)fix);
        }
        dsl_info("using the key '%s'", kp->path);
    } else {
        dsl_sshlocal_mkdir_ssh(kp->path);
        if (ssh_pki_generate(SSH_KEYTYPE_ED25519, 0, &kp->key) != SSH_OK) {
            r = dsl_seterr(err, DSL_EAUTH, "cannot generate an ed25519 key");
            goto out;
        }
        mode_t old = umask(077);
        int e = ssh_pki_export_privkey_file(kp->key, NULL, NULL, NULL, kp->path);
        umask(old);
        if (e != SSH_OK) {
            r = dsl_seterr(err, -EIO, "cannot write the key '%s' (does its directory exist?)",
                           kp->path);
            goto out;
        }
        unlink(pub_path); /* a stale public key of another pair */
        dsl_info("created the ed25519 key pair '%s' and '%s'", kp->path, pub_path);
    }
    if (ssh_pki_export_pubkey_base64(kp->key, &b64) != SSH_OK) {
        r = dsl_seterr(err, DSL_EAUTH, "cannot derive the public key of '%s'", kp->path);
        goto out;
    }
    char hn[256] = "localhost";
    gethostname(hn, sizeof(hn) - 1);
    hn[sizeof(hn) - 1] = '\0';
    kp->pub_line = dsl_xasprintf("%s %s dslaunch@%s", ssh_key_type_to_char(ssh_key_type(kp->key)),
                                 b64, hn);
    /* an existing .pub of the same key keeps its comment */
    char perr[DSL_ERR_LEN];
    if (dsl_sshlocal_read(pub_path, &pubtext, perr) == 0) {
        char *merged = NULL;
        if (dsl_authkeys_merge(pubtext, kp->pub_line, &merged) == 0) {
            size_t l = strlen(pubtext);
            while (l && (pubtext[l - 1] == '\n' || pubtext[l - 1] == '\r'))
                pubtext[--l] = '\0';
            free(kp->pub_line);
            kp->pub_line = dsl_xstrdup(pubtext);
        } else {
            r = dsl_seterr(err, DSL_EAUTH, "'%s' does not hold the public key of '%s'",
                           pub_path, kp->path);
            free(merged);
            goto out;
        }
    } else {
        char *text = dsl_xasprintf("%s\n", kp->pub_line);
        r = dsl_sshlocal_write(pub_path, text, 0644, err);
        free(text);
        if (r < 0)
            goto out;
    }
    if ((r = dsl_sshlocal_read(kp->path, &kp->priv_text, err)) < 0)
        goto out;
    r = 0;
out:
    if (r < 0)
        dsl_sshkeypair_release(kp);
    ssh_string_free_char(b64);
    free(pubtext);
    free(pub_path);
    return r;
}

void dsl_sshkeypair_release(struct dsl_sshkeypair *kp)
{
    if (kp->priv_text) {
        explicit_bzero(kp->priv_text, strlen(kp->priv_text));
        free(kp->priv_text);
    }
    ssh_key_free(kp->key);
    free(kp->path);
    free(kp->name);
    free(kp->pub_line);
    memset(kp, 0, sizeof(*kp));
}
