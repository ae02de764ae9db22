/*
 * `dslaunch ssh-setup`: make every host of a hostfile reachable without a password.
 *
 * Theory of operation. Everything runs in one thread, one host after the other, with
 * blocking libssh sessions: the work per host is a handful of round trips, and doing it
 * in order keeps the prompts (host-key confirmation, the password) readable.
 *
 *   1. key       the dedicated ed25519 pair (--key, default ~/.ssh/id_dslaunch) is
 *                loaded, or generated (private key 0600, written under umask 077)
 *   2. connect   per host, with sshsession.c's rules (the ssh config for the alias,
 *                --ssh-config or ~/.ssh/config, --ssh_port over it); the host key
 *                is checked against known_hosts; an unknown key's fingerprint is
 *                printed and needs a "yes" on the terminal or --yes (no terminal and
 *                no --yes: the host fails); a changed key always fails. Accepted
 *                keys are recorded in the local known_hosts as "alias,hostname" (or
 *                [alias]:port,[hostname]:port).
 *   3. auth      the dedicated key, then ssh-agent/default keys, then the password,
 *                read once (--password-fd N, DSLAUNCH_SSH_PASSWORD, or /dev/tty with
 *                echo off) when the first host needs it, kept in memory only and
 *                wiped with explicit_bzero at the end
 *   4. install   over SFTP: the home, ~/.ssh and authorized_keys modes sshd would refuse
 *                are fixed (and reported), the public key is merged into
 *                authorized_keys (authkeys.c: present keys are never added twice, an
 *                unchanged file is never rewritten); a changed file is written to a
 *                temporary name and renamed over the old one
 *   5. --mesh    on every reachable host: the key pair as ~/.ssh/<key name>, the
 *                known_hosts lines of all hosts, and a managed ~/.ssh/config block
 *                "Host <all hosts> / IdentityFile ~/.ssh/<key name>"; then, from every
 *                host, one exec channel runs `ssh -o BatchMode=yes -o
 *                StrictHostKeyChecking=yes <other> true` to every other host, so the
 *                node-to-node column is a real check
 *   6. table     one row per host; exit 1 if any row failed
 *
 * No user data goes through a remote shell: files travel over SFTP; the only remote
 * commands are fixed (a rename fallback with quoted relative paths, and the mesh check
 * whose host names are quoted with dsl_shell_quote()).
 *
 * ^C: the default action; sessions die with the process and no file is left half
 * written (temporary names, then rename). The terminal's echo is restored on return
 * from the prompt; a ^C during the password prompt leaves echo off, as with ssh.
 */
#define _DEFAULT_SOURCE /* explicit_bzero */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include "authkeys.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/plan/hostfile.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/common/parse.h"
#include "sshfiles.h"
#include "sshlocal.h"
#include "dslaunch/remote/sshsession.h"
#include "dslaunch/tools/sshsetup.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "toolargs.h"
#include "dslaunch/common/banned.h"

#define SETUP_FILE_MAX DSL_SSHFILES_MAX /* the largest ssh file we read */
#define SETUP_PW_MAX 1024

enum row_state { ROW_NOTRUN = 0, ROW_OK, ROW_CHANGED, ROW_FAILED };

struct setup_host {
    const char *name;        /* the hostfile's name (owned by the hostfile) */
    const char *user;        /* its "user@" login user, or NULL (owned by the hostfile) */
    ssh_session s;
    char *hostname;          /* as the config resolved it; owned */
    unsigned int port;
    int reachable;           /* ROW_OK / ROW_FAILED */
    int key;                 /* ROW_OK: present, ROW_CHANGED: added */
    int hostkey;             /* ROW_OK: known, ROW_CHANGED: recorded now */
    int mesh;
    int mesh_ok, mesh_total;
    ssh_channel check;       /* the running node-to-node check */
    char *khline;            /* this host's known_hosts line; owned */
    struct dsl_sshfiles files; /* SFTP on s, what was fixed, file errors */
    char err[DSL_ERR_LEN];
};

struct sshsetup {
    /* options */
    const char *hostfile;
    const char *key_path_opt;
    const char *ssh_config;
    int ssh_port;
    int mesh, yes;
    int password_fd;
    double connect_timeout;
    /* state */
    struct dsl_sshkeypair kp;  /* the dedicated key pair */
    char pw[SETUP_PW_MAX];
    int pw_state;              /* 0 not asked, 1 have it, -1 none available */
    char pw_err[DSL_ERR_LEN];
    struct setup_host *h;
    size_t nr;
};

static void note(struct setup_host *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(struct setup_host *h, const char *fmt, ...)
{
    char buf[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    dsl_strvec_push(&h->files.notes, buf);
    dsl_info("%s: %s", h->name, buf);
}

static int host_fail(struct setup_host *h, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int host_fail(struct setup_host *h, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->err, sizeof(h->err), fmt, ap);
    va_end(ap);
    return code;
}

/* ---------------------------------------------------------------- the terminal */

/* Read one line from fd into buf (at most len-1 bytes, newline dropped). */
static int read_line_fd(int fd, char *buf, size_t len)
{
    size_t o = 0;
    for (;;) {
        char c;
        ssize_t n = read(fd, &c, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0 || c == '\n')
            break;
        if (o + 1 < len)
            buf[o++] = c;
    }
    while (o && buf[o - 1] == '\r')
        o--;
    buf[o] = '\0';
    return (int)o;
}

/* The password, asked for once: --password-fd, DSLAUNCH_SSH_PASSWORD, or /dev/tty. */
static const char *password_get(struct sshsetup *st)
{
    if (st->pw_state)
        return st->pw_state > 0 ? st->pw : NULL;
    st->pw_state = -1;
    if (st->password_fd >= 0) {
        int n = read_line_fd(st->password_fd, st->pw, sizeof(st->pw));
        if (n < 0) {
            snprintf(st->pw_err, sizeof(st->pw_err), "cannot read the password from fd %d: %s",
                     st->password_fd, strerror(-n));
            return NULL;
        }
        st->pw_state = 1;
        return st->pw;
    }
    const char *env = getenv("DSLAUNCH_SSH_PASSWORD");
    if (env) {
        snprintf(st->pw, sizeof(st->pw), "%s", env);
        st->pw_state = 1;
        return st->pw;
    }
    int fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        snprintf(st->pw_err, sizeof(st->pw_err),
                 "no password to try: no terminal to ask on (use --password-fd N, or install "
                 "a key first)");
        return NULL;
    }
    struct termios old, quiet;
    int have_tc = tcgetattr(fd, &old) == 0;
    if (have_tc) {
        quiet = old;
        quiet.c_lflag &= ~(tcflag_t)(ECHO | ECHONL);
        quiet.c_lflag |= (tcflag_t)ICANON;
        tcsetattr(fd, TCSAFLUSH, &quiet);
    }
    static const char prompt[] = "SSH password (asked once, used for every host that needs it): ";
    if (write(fd, prompt, sizeof(prompt) - 1) < 0)
        dsl_debug("cannot write the prompt");
    int n = read_line_fd(fd, st->pw, sizeof(st->pw));
    if (have_tc)
        tcsetattr(fd, TCSAFLUSH, &old);
    if (write(fd, "\n", 1) < 0)
        dsl_debug("cannot write the newline");
    close(fd);
    if (n < 0) {
        snprintf(st->pw_err, sizeof(st->pw_err), "cannot read the password: %s", strerror(-n));
        return NULL;
    }
    st->pw_state = 1;
    return st->pw;
}

/* 1: accepted, 0: declined, negative: no way to ask (message in h->err). */
static int confirm_hostkey(struct sshsetup *st, struct setup_host *h, const char *fp)
{
    printf("host key of '%s' (%s port %u): %s\n", h->name, h->hostname, h->port, fp);
    fflush(stdout);
    if (st->yes)
        return 1;
    int fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return host_fail(h, DSL_EAUTH,
                         "host key of '%s' is not known (%s) and there is no terminal to "
                         "confirm it: verify the fingerprint, then rerun with --yes",
                         h->name, fp);
    char line[64];
    static const char q[] = "record it in known_hosts and continue? [y/N] ";
    if (write(fd, q, sizeof(q) - 1) < 0)
        dsl_debug("cannot write the question");
    int n = read_line_fd(fd, line, sizeof(line));
    close(fd);
    if (n > 0 && (!strcmp(line, "y") || !strcmp(line, "Y") || !strcmp(line, "yes")))
        return 1;
    return host_fail(h, DSL_EAUTH, "host key of '%s' (%s) not accepted", h->name, fp);
}

/* ---------------------------------------------------------------- session */

static char *local_known_hosts(ssh_session s)
{
    char *kh = NULL;
    if (ssh_options_get(s, SSH_OPTIONS_KNOWNHOSTS, &kh) == SSH_OK && kh) {
        char *r = dsl_xstrdup(kh);
        ssh_string_free_char(kh);
        return r;
    }
    return dsl_sshlocal_path(".ssh/known_hosts");
}

/* Check the host key; record an accepted new one (local known_hosts) and h->khline. */
static int host_key(struct sshsetup *st, struct setup_host *h)
{
    ssh_key srv = NULL;
    char fp[256], *b64 = NULL, *khpath = local_known_hosts(h->s), *text = NULL, *merged = NULL;
    char err[DSL_ERR_LEN];
    int r;
    if (ssh_get_server_publickey(h->s, &srv) != SSH_OK ||
        ssh_pki_export_pubkey_base64(srv, &b64) != SSH_OK) {
        r = host_fail(h, DSL_EAUTH, "cannot get the host key of '%s': %s", h->name,
                      ssh_get_error(h->s));
        goto out;
    }
    dsl_ssh_fingerprint(h->s, fp, sizeof(fp));
    const char *names[2] = {h->name, h->hostname};
    h->khline = dsl_knownhosts_line(names, 2, (int)h->port, ssh_key_type_to_char(ssh_key_type(srv)),
                                    b64);
    switch (ssh_session_is_known_server(h->s)) {
    case SSH_KNOWN_HOSTS_OK:
        h->hostkey = ROW_OK;
        r = 0;
        goto out;
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND:
        break;
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER:
        r = host_fail(h, DSL_EAUTH,
                      "host key of '%s' has CHANGED (now %s) from the one in '%s': someone may "
                      "be intercepting the connection, or the host was reinstalled; check, "
                      "then remove the old key (ssh-keygen -R %s)",
                      h->name, fp, khpath, h->name);
        goto out;
    case SSH_KNOWN_HOSTS_ERROR:
    default:
        r = host_fail(h, DSL_EAUTH, "cannot check the host key of '%s': %s", h->name,
                      ssh_get_error(h->s));
        goto out;
    }
    if ((r = confirm_hostkey(st, h, fp)) <= 0) {
        r = r < 0 ? r : DSL_EAUTH;
        goto out;
    }
    if (dsl_sshlocal_read(khpath, &text, err) < 0)
        text = NULL;
    dsl_sshlocal_mkdir_ssh(khpath);
    if ((r = dsl_knownhosts_merge(text, h->khline, &merged)) == 1 &&
        (r = dsl_sshlocal_write(khpath, merged, 0600, err)) < 0) {
        r = host_fail(h, r, "%s", err);
        goto out;
    }
    h->hostkey = ROW_CHANGED;
    r = 0;
out:
    if (r < 0) {
        h->hostkey = ROW_FAILED;
        free(h->khline); /* an unverified key is never handed to the other nodes */
        h->khline = NULL;
    }
    ssh_string_free_char(b64);
    ssh_key_free(srv);
    free(text);
    free(merged);
    free(khpath);
    return r;
}

/* The dedicated key, then the agent and default keys, then the password (asked once). */
static int host_auth(struct sshsetup *st, struct setup_host *h)
{
    char err[DSL_ERR_LEN];
    int r = dsl_ssh_auth_publickey(h->s, h->name, st->kp.path, &st->kp.key, err);
    if (r == DSL_EAUTH) {
        ssh_key unused = NULL;
        r = dsl_ssh_auth_publickey(h->s, h->name, NULL, &unused, err);
        ssh_key_free(unused);
    }
    if (r == 0)
        return 0;
    if (r != DSL_EAUTH)
        return host_fail(h, r, "%s", err);
    unsigned int methods = (unsigned int)ssh_userauth_list(h->s, NULL);
    if (!(methods & SSH_AUTH_METHOD_PASSWORD))
        return host_fail(h, DSL_EAUTH,
                         "permission denied for '%s' (no key worked and the server takes no "
                         "password)",
                         h->name);
    const char *pw = password_get(st);
    if (!pw)
        return host_fail(h, DSL_EAUTH, "permission denied for '%s' by key; %s", h->name,
                         st->pw_err);
    int rc = ssh_userauth_password(h->s, NULL, pw);
    if (rc == SSH_AUTH_SUCCESS)
        return 0;
    if (rc == SSH_AUTH_ERROR)
        return host_fail(h, DSL_ECONNECT,
                         "connection to '%s' failed during authentication: %s", h->name,
                         ssh_get_error(h->s));
    return host_fail(h, DSL_EAUTH, "permission denied for '%s': wrong password", h->name);
}

/* Connect (config, --ssh_port, timeout: sshsession.c), host key, log in, start SFTP. */
static int host_connect(struct sshsetup *st, struct setup_host *h)
{
    struct dsl_transport_opts o;
    char err[DSL_ERR_LEN], *hn = NULL;
    int r;
    memset(&o, 0, sizeof(o));
    o.ssh_config = st->ssh_config;
    o.ssh_port = st->ssh_port;
    o.connect_timeout = st->connect_timeout;
    o.ssh_user = h->user; /* the hostfile's "user@host" wins over the config's User */
    r = dsl_ssh_session_open(&h->s, h->name, &o, DSL_SSH_NO_HOSTKEY_CHECK | DSL_SSH_NO_AUTH,
                             NULL, err);
    if (r < 0) {
        h->reachable = ROW_FAILED;
        return host_fail(h, r, "%s", err);
    }
    ssh_options_get(h->s, SSH_OPTIONS_HOST, &hn);
    h->hostname = dsl_xstrdup(hn ? hn : h->name);
    ssh_string_free_char(hn);
    h->port = 22;
    ssh_options_get_port(h->s, &h->port);
    if ((r = host_key(st, h)) < 0)
        return r;
    if ((r = host_auth(st, h)) < 0) {
        h->reachable = ROW_FAILED;
        return r;
    }
    h->reachable = ROW_OK;
    return dsl_sshfiles_open(&h->files, h->s);
}

static int install_key(struct sshsetup *st, struct setup_host *h)
{
    int r;
    dsl_sshfiles_fix_mode(&h->files, ".", "home directory", DSL_SSHPERM_HOME);
    if ((r = dsl_sshfiles_ensure_ssh_dir(&h->files)) < 0)
        goto fail;
    r = dsl_sshfiles_merge(&h->files, ".ssh/authorized_keys", st->kp.pub_line,
                           dsl_authkeys_merge, 0600);
    if (r < 0)
        goto fail;
    h->key = r == 1 ? ROW_CHANGED : ROW_OK;
    dsl_sshfiles_fix_mode(&h->files, ".ssh/authorized_keys", "~/.ssh/authorized_keys",
                          DSL_SSHPERM_AUTHKEYS);
    return 0;
fail:
    h->key = ROW_FAILED;
    return r;
}

/* The managed ~/.ssh/config block: every host uses the dedicated key. */
static char *mesh_config_block(struct sshsetup *st)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, SETUP_FILE_MAX);
    dsl_dynbuf_addstr(&b, "Host");
    for (size_t i = 0; i < st->nr; i++)
        dsl_dynbuf_addf(&b, " %s", st->h[i].name);
    dsl_dynbuf_addf(&b, "\n  IdentityFile ~/.ssh/%s\n", st->kp.name);
    if (st->ssh_port > 0)
        dsl_dynbuf_addf(&b, "  Port %d\n", st->ssh_port);
    char *s = dsl_xstrdup(dsl_dynbuf_str(&b));
    dsl_dynbuf_release(&b);
    return s;
}

static int mesh_install(struct sshsetup *st, struct setup_host *h, const char *block)
{
    int r, changed = 0;
    char *priv = dsl_xasprintf(".ssh/%s", st->kp.name);
    char *pub = dsl_xasprintf(".ssh/%s.pub", st->kp.name);
    char *pubtext = dsl_xasprintf("%s\n", st->kp.pub_line);
    if ((r = dsl_sshfiles_put(&h->files, priv, st->kp.priv_text, 0600,
                              DSL_SSHPERM_PRIVKEY)) < 0 ||
        (r = dsl_sshfiles_put(&h->files, pub, pubtext, 0644, DSL_SSHPERM_AUTHKEYS)) < 0)
        goto out;
    for (size_t i = 0; i < st->nr; i++) {
        if (!st->h[i].khline)
            continue;
        r = dsl_sshfiles_merge(&h->files, ".ssh/known_hosts", st->h[i].khline,
                               dsl_knownhosts_merge, 0600);
        if (r < 0)
            goto out;
        changed |= r;
    }
    r = dsl_sshfiles_merge(&h->files, ".ssh/config", block, dsl_sshconfig_merge, 0600);
    if (r < 0)
        goto out;
    dsl_sshfiles_fix_mode(&h->files, ".ssh/config", "~/.ssh/config", DSL_SSHPERM_CONFIG);
    if (changed)
        note(h, "known_hosts entries of the hosts added to ~/.ssh/known_hosts");
    r = 0;
out:
    if (r < 0)
        h->mesh = ROW_FAILED;
    free(priv);
    free(pub);
    free(pubtext);
    return r;
}

/* Did the host get through set-up, so that others should reach it? */
static int mesh_member(const struct setup_host *h)
{
    return h->files.sftp && h->key != ROW_FAILED && h->mesh != ROW_FAILED;
}

/*
 * From h, ssh to every other host that got through set-up, with BatchMode: the real
 * check. Started on every host first (mesh_check_start), then collected
 * (mesh_check_finish), so the hosts check concurrently, and each host runs its ssh
 * commands in parallel; each prints one short line ("ok H" or "fail H <last error
 * line>"), written with one write, so the lines do not interleave.
 */
static int mesh_check_start(struct sshsetup *st, struct setup_host *h)
{
    struct dsl_dynbuf cmd;
    int r;
    dsl_dynbuf_init(&cmd, SETUP_FILE_MAX);
    if (st->ssh_port > 0)
        dsl_dynbuf_addf(&cmd, "DSL_PORT=%d; ", st->ssh_port);
    dsl_dynbuf_addstr(&cmd, "for h in");
    h->mesh_total = 0;
    for (size_t i = 0; i < st->nr; i++) {
        if (&st->h[i] == h || !mesh_member(&st->h[i]))
            continue; /* a host that failed set-up has its own row saying so */
        char *q = dsl_shell_quote(st->h[i].name);
        dsl_dynbuf_addf(&cmd, " %s", q);
        free(q);
        h->mesh_total++;
    }
    if (!h->mesh_total) {
        h->mesh = ROW_OK;
        r = 0;
        goto out;
    }
    dsl_dynbuf_addf(&cmd, "; do ( if e=$(ssh -o BatchMode=yes -o StrictHostKeyChecking=yes "
                          "-o ConnectTimeout=%d%s -- \"$h\" true 2>&1 </dev/null); then "
                          "echo \"ok $h\"; else echo \"fail $h $(printf %%s \"$e\" | tail -n 1)\"; "
                          "fi ) & done; wait",
                    (int)st->connect_timeout, st->ssh_port > 0 ? " -p \"$DSL_PORT\"" : "");
    r = dsl_sshfiles_exec_start(&h->files, dsl_dynbuf_str(&cmd), &h->check);
    if (r < 0)
        h->mesh = ROW_FAILED;
out:
    dsl_dynbuf_release(&cmd);
    return r;
}

static int mesh_check_finish(struct setup_host *h)
{
    struct dsl_dynbuf out, fails;
    int status, r = 0;
    if (!h->check)
        return 0;
    dsl_dynbuf_init(&out, SETUP_FILE_MAX);
    dsl_dynbuf_init(&fails, DSL_ERR_LEN);
    dsl_sshfiles_exec_finish(h->check, &out, &status);
    h->check = NULL;
    h->mesh_ok = 0;
    for (const char *l = dsl_dynbuf_str(&out); *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        if (len > 3 && !strncmp(l, "ok ", 3))
            h->mesh_ok++;
        else if (len > 5 && !strncmp(l, "fail ", 5))
            dsl_dynbuf_addf(&fails, "%s%.*s", fails.len ? "; " : "", (int)(len - 5), l + 5);
        l += len + (nl ? 1 : 0);
    }
    if (h->mesh_ok == h->mesh_total) {
        h->mesh = ROW_OK;
    } else {
        h->mesh = ROW_FAILED;
        host_fail(h, DSL_EREMOTE, "from '%s', ssh -o BatchMode=yes failed to: %s", h->name,
                  fails.len ? dsl_dynbuf_str(&fails) : dsl_dynbuf_str(&out));
        r = DSL_EREMOTE;
    }
    dsl_dynbuf_release(&fails);
    dsl_dynbuf_release(&out);
    return r;
}

/* With the default key, the ssh config the launcher will read (--ssh-config, else
 * ~/.ssh/config) names it for the hosts, so a launch with the same --ssh-config finds
 * it; the path is absolute because libssh expands "~" to the passwd home, not $HOME.
 * With --key the user chose a path and wires it up (--ssh-identity). */
static void local_config(struct sshsetup *st)
{
    if (st->key_path_opt)
        return;
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, SETUP_FILE_MAX);
    dsl_dynbuf_addstr(&b, "Host");
    for (size_t i = 0; i < st->nr; i++)
        dsl_dynbuf_addf(&b, " %s", st->h[i].name);
    dsl_dynbuf_addf(&b, "\n  IdentityFile %s\n", st->kp.path);
    char *path = st->ssh_config ? dsl_xstrdup(st->ssh_config) : dsl_sshlocal_path(".ssh/config");
    char *text = NULL, *merged = NULL, err[DSL_ERR_LEN];
    if (dsl_sshlocal_read(path, &text, err) < 0)
        text = NULL;
    if (dsl_sshconfig_merge(text, dsl_dynbuf_str(&b), &merged) == 1) {
        if (dsl_sshlocal_write(path, merged, 0600, err) < 0)
            dsl_warn("%s", err);
        else
            dsl_info("'%s': IdentityFile %s set for the hosts", path, st->kp.path);
    }
    dsl_dynbuf_release(&b);
    free(text);
    free(merged);
    free(path);
}

/* ---------------------------------------------------------------- report */

static const char *cell(int state, const char *ok, const char *changed)
{
    switch (state) {
    case ROW_OK: return ok;
    case ROW_CHANGED: return changed;
    case ROW_FAILED: return "FAILED";
    default: return "-";
    }
}

static int report(struct sshsetup *st)
{
    int failed = 0;
    size_t w = 4;
    for (size_t i = 0; i < st->nr; i++)
        if (strlen(st->h[i].name) > w)
            w = strlen(st->h[i].name);
    printf("\n%-*s  %-9s  %-13s  %-17s", (int)w, "host", "reachable", "key installed",
           "host key recorded");
    if (st->mesh)
        printf("  node-to-node");
    printf("\n");
    for (size_t i = 0; i < st->nr; i++) {
        struct setup_host *h = &st->h[i];
        int row_failed = h->reachable != ROW_OK || h->key == ROW_FAILED ||
                         h->hostkey == ROW_FAILED || h->key == ROW_NOTRUN ||
                         (st->mesh && h->mesh != ROW_OK);
        failed |= row_failed;
        printf("%-*s  %-9s  %-13s  %-17s", (int)w, h->name,
               h->reachable == ROW_OK ? "yes" : h->reachable == ROW_FAILED ? "NO" : "-",
               cell(h->key, "yes (present)", "yes (added)"),
               cell(h->hostkey, "yes (known)", "yes (new)"));
        if (st->mesh) {
            if (h->mesh_total > 0 || h->mesh == ROW_OK)
                printf("  %s %d/%d", h->mesh == ROW_OK ? "ok" : "FAILED", h->mesh_ok,
                       h->mesh_total);
            else
                printf("  %s", cell(h->mesh, "ok", "ok"));
        }
        printf("\n");
    }
    for (size_t i = 0; i < st->nr; i++) {
        struct setup_host *h = &st->h[i];
        for (size_t k = 0; k < h->files.notes.nr; k++)
            printf("%s: fixed: %s\n", h->name, h->files.notes.v[k]);
        if (h->files.err[0] && strcmp(h->files.err, h->err) != 0)
            printf("%s: error: %s\n", h->name, h->files.err);
        if (h->err[0])
            printf("%s: error: %s\n", h->name, h->err);
    }
    fflush(stdout);
    return failed;
}

/* ---------------------------------------------------------------- main */

struct setup_args {
    char *hostfile, *key, *ssh_config;
    int ssh_port, mesh, yes, password_fd, verbose, help;
    double connect_timeout;
};

#define AOFF(f) offsetof(struct setup_args, f)
static const struct dsl_opt setup_opts[] = {
    {"hostfile", 'H', DSL_OPT_STRING, AOFF(hostfile), "FILE", "hosts", "/job/hostfile", 0, 0,
     NULL, 0, NULL},
    {"mesh", 0, DSL_OPT_FLAG, AOFF(mesh), NULL,
     "key pair, known_hosts and config on every host, checked from every host to every "
     "other with ssh -o BatchMode=yes", NULL, 0, 0, NULL, 0, NULL},
    {"key", 0, DSL_OPT_STRING, AOFF(key), "FILE", "the key pair (made if missing)",
     "~/.ssh/id_dslaunch", 0, 0, NULL, 0, NULL},
    {"yes", 'y', DSL_OPT_FLAG, AOFF(yes), NULL, "accept every unknown host key (after printing it)",
     NULL, 0, 0, NULL, 0, NULL},
    {"password_fd", 0, DSL_OPT_INT, AOFF(password_fd), "N",
     "read the password from file descriptor N (automation; DSLAUNCH_SSH_PASSWORD works too "
     "but is visible in /proc)", NULL, 0, INT_MAX, NULL, 0, NULL},
    {"ssh_config", 0, DSL_OPT_STRING, AOFF(ssh_config), "FILE", "ssh client configuration",
     "~/.ssh/config", 0, 0, NULL, 0, NULL},
    {"ssh_port", 0, DSL_OPT_INT, AOFF(ssh_port), "PORT", "ssh port over the config", NULL, 1,
     65535, NULL, 0, NULL},
    {"connect_timeout", 0, DSL_OPT_SECONDS, AOFF(connect_timeout), "SECONDS", "per host",
     "10", 1, 3600, NULL, 0, NULL},
    {"verbose", 'v', DSL_OPT_SET, AOFF(verbose), NULL, "more output",
     NULL, 0, 0, NULL, 2, NULL},
    {"quiet", 'q', DSL_OPT_SET, AOFF(verbose), NULL, "errors only",
     NULL, 0, 0, NULL, 0, NULL},
    {"help", 'h', DSL_OPT_FLAG, AOFF(help), NULL, "show this help", NULL, 0, 0, NULL, 0, NULL},
};
static const struct dsl_opt_parser setup_parser = {
    .prog = "dslaunch ssh-setup",
    .opts = setup_opts,
    .nopts = sizeof(setup_opts) / sizeof(setup_opts[0]),
};

static void usage(FILE *f)
{
    fputs("usage: dslaunch ssh-setup --hostfile H [--mesh] [options]\n"
          "  installs a dedicated key on every host of H (reachable with a password or a\n"
          "  key) and records their host keys; --mesh also lets every host reach every\n"
          "  other (docs/ssh-setup.md)\n", f);
    dsl_opt_help(&setup_parser, f);
}

int dsl_sshsetup_main(int argc, char **argv)
{
    struct sshsetup st;
    struct dsl_hostfile hf;
    char err[DSL_ERR_LEN];
    char *block = NULL;
    int code = 2;
    struct setup_args sa = {.password_fd = -1, .connect_timeout = 10, .verbose = 1};

    memset(&st, 0, sizeof(st));
    dsl_hostfile_init(&hf);

    static const struct dsl_tool_usage tu = {"ssh-setup", usage, 1};
    if (!dsl_tool_args_parse(&setup_parser, &tu, &sa, &sa.help, argc, argv, NULL, &code))
        goto out;
    st.hostfile = sa.hostfile;
    st.key_path_opt = sa.key;
    st.ssh_config = sa.ssh_config;
    st.ssh_port = sa.ssh_port;
    st.mesh = sa.mesh;
    st.yes = sa.yes;
    st.password_fd = sa.password_fd;
    st.connect_timeout = sa.connect_timeout;
    dsl_log_set_level(sa.verbose);
    if (!st.hostfile && access("/job/hostfile", F_OK) == 0)
        st.hostfile = "/job/hostfile";
    if (!st.hostfile) {
        dsl_error("ssh-setup: no hostfile (pass --hostfile FILE)");
        usage(stderr);
        goto out;
    }
    if (dsl_hostfile_load(&hf, st.hostfile, err) < 0) {
        dsl_error("%s", err);
        goto out;
    }
    if (!hf.nr) {
        dsl_error("hostfile '%s' lists no hosts", st.hostfile);
        goto out;
    }
    code = 1;
    if (dsl_sshkeypair_load(&st.kp, st.key_path_opt, err) < 0) {
        dsl_error("%s", err);
        goto out;
    }
    st.h = dsl_xcalloc(hf.nr, sizeof(*st.h));
    for (size_t i = 0; i < hf.nr; i++) {
        size_t j;
        for (j = 0; j < st.nr; j++)
            if (!strcmp(st.h[j].name, hf.hosts[i].name))
                break;
        if (j < st.nr)
            continue; /* a host listed twice is set up once */
        st.h[st.nr].name = hf.hosts[i].name;
        st.h[st.nr].user = hf.hosts[i].user;
        dsl_sshfiles_init(&st.h[st.nr].files, st.h[st.nr].name);
        st.nr++;
    }
    for (size_t i = 0; i < st.nr; i++) {
        struct setup_host *h = &st.h[i];
        if (host_connect(&st, h) == 0)
            install_key(&st, h);
    }
    block = mesh_config_block(&st);
    local_config(&st);
    if (st.mesh) {
        for (size_t i = 0; i < st.nr; i++)
            if (st.h[i].files.sftp && st.h[i].key != ROW_FAILED)
                mesh_install(&st, &st.h[i], block);
        for (size_t i = 0; i < st.nr; i++)
            if (mesh_member(&st.h[i]))
                mesh_check_start(&st, &st.h[i]);
        for (size_t i = 0; i < st.nr; i++)
            mesh_check_finish(&st.h[i]);
    }
    code = report(&st) ? 1 : 0;
out:
    for (size_t i = 0; i < st.nr; i++) {
        struct setup_host *h = &st.h[i];
        if (h->check)
            ssh_channel_free(h->check);
        dsl_sshfiles_release(&h->files); /* SFTP before its session */
        dsl_ssh_session_close(h->s);
        free(h->hostname);
        free(h->khline);
    }
    free(st.h);
    free(block);
    explicit_bzero(st.pw, sizeof(st.pw));
    dsl_sshkeypair_release(&st.kp);
    dsl_hostfile_release(&hf);
    free(sa.hostfile);
    free(sa.key);
    free(sa.ssh_config);
    return code;
}
