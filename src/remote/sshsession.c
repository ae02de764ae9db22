/*
 * SSH session rules shared by the transport and the operator tools (sshsession.h).
 *
 * Theory of operation. The pieces (configure, host key, public-key step, keepalive)
 * are written so that they work in both libssh modes: the transport calls them from its
 * non-blocking state machine, dsl_ssh_session_open() calls them in blocking mode, where
 * ssh_connect and the auth calls are bounded by SSH_OPTIONS_TIMEOUT (connect timeout +
 * 1 s). Keeping them in one file means a host-key or authentication rule changes in one
 * place for every tool.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libssh/libssh.h>

#include "dslaunch/common/parse.h"
#include "dslaunch/remote/sshsession.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

/*
 * Bulk transfers: with AES instructions, AES-GCM costs about a third less CPU than
 * chacha20-poly1305 (libssh's and OpenSSH's first choice), which is what bounds a copy to
 * many hosts at once (bench/sync.sh). Set before the config is read, so a Ciphers line
 * there still wins.
 */
static void prefer_bulk_ciphers(ssh_session s)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (!__builtin_cpu_supports("aes"))
        return;
    static const char list[] = "aes128-gcm@openssh.com,aes256-gcm@openssh.com,"
                               "chacha20-poly1305@openssh.com,aes128-ctr,aes192-ctr,aes256-ctr";
    ssh_options_set(s, SSH_OPTIONS_CIPHERS_C_S, list);
    ssh_options_set(s, SSH_OPTIONS_CIPHERS_S_C, list);
#else
    (void)s;
#endif
}

char *dsl_ssh_home(void)
{
    const char *home = getenv("HOME");
    struct stat st;
    if (home && home[0] == '/' && stat(home, &st) == 0 && S_ISDIR(st.st_mode))
        return dsl_xstrdup(home);
    struct passwd *pw = getpwuid(getuid());
    if (pw && pw->pw_dir && pw->pw_dir[0])
        return dsl_xstrdup(pw->pw_dir);
    return dsl_xstrdup(".");
}

static int session_new(ssh_session *out, const char *host, const struct dsl_transport_opts *o,
                       int flags, char *err)
{
    ssh_session s = ssh_new();
    *out = NULL;
    if (!s)
        return dsl_seterr(err, -ENOMEM, "cannot create an ssh session for '%s'", host);
    if (flags & DSL_SSH_BULK)
        prefer_bulk_ciphers(s);
    if (ssh_options_set(s, SSH_OPTIONS_HOST, host) < 0) {
        dsl_seterr(err, DSL_EUSAGE, "bad host name '%s': %s", host, ssh_get_error(s));
        ssh_free(s);
        return DSL_EUSAGE;
    }
    /* ~/.ssh as dsl_ssh_home() says, for the default config, known_hosts and keys */
    char *home = dsl_ssh_home(), *sshdir = dsl_xasprintf("%s/.ssh", home);
    ssh_options_set(s, SSH_OPTIONS_SSH_DIR, sshdir);
    free(sshdir);
    free(home);
    /* the host alias must be set first: Host blocks match against it */
    if (ssh_options_parse_config(s, o->ssh_config) < 0) {
        dsl_seterr(err, DSL_EUSAGE, "cannot read ssh config '%s': %s",
                   o->ssh_config ? o->ssh_config : "~/.ssh/config", ssh_get_error(s));
        ssh_free(s);
        return DSL_EUSAGE;
    }
    /* command-line settings win over the config file */
    if (o->ssh_port > 0) {
        unsigned int port = (unsigned int)o->ssh_port;
        ssh_options_set(s, SSH_OPTIONS_PORT, &port);
    }
    if (o->ssh_user)
        ssh_options_set(s, SSH_OPTIONS_USER, o->ssh_user);
    if (o->known_hosts)
        ssh_options_set(s, SSH_OPTIONS_KNOWNHOSTS, o->known_hosts);
    if (o->connect_timeout > 0) {
        long t = (long)o->connect_timeout + 1;
        ssh_options_set(s, SSH_OPTIONS_TIMEOUT, &t);
    }
    /* after the config, whose LogLevel would otherwise turn libssh chatter on;
     * DSLAUNCH_SSH_DEBUG=1..4 turns it on for debugging */
    int verbosity = 0;
    const char *dbg = getenv("DSLAUNCH_SSH_DEBUG");
    if (dbg && dsl_parse_int(dbg, 0, 4, &verbosity) < 0)
        verbosity = 0;
    ssh_options_set(s, SSH_OPTIONS_LOG_VERBOSITY, &verbosity);
    *out = s;
    return 0;
}

int dsl_ssh_session_new(ssh_session *out, const char *host, const struct dsl_transport_opts *o,
                        char *err)
{
    return session_new(out, host, o, 0, err);
}

void dsl_ssh_target_text(ssh_session s, const char *alias, char *out, size_t len)
{
    char *user = NULL, *host = NULL;
    unsigned int port = 22;
    ssh_options_get(s, SSH_OPTIONS_USER, &user);
    ssh_options_get(s, SSH_OPTIONS_HOST, &host);
    ssh_options_get_port(s, &port);
    if (host && strcmp(host, alias) != 0)
        snprintf(out, len, "%s@%s (%s:%u)", user ? user : "?", alias, host, port);
    else
        snprintf(out, len, "%s@%s:%u", user ? user : "?", alias, port);
    ssh_string_free_char(user);
    ssh_string_free_char(host);
}

void dsl_ssh_fingerprint(ssh_session s, char *out, size_t len)
{
    ssh_key srv = NULL;
    unsigned char *hash = NULL;
    size_t hlen = 0;
    snprintf(out, len, "?");
    if (ssh_get_server_publickey(s, &srv) != SSH_OK)
        return;
    if (ssh_get_publickey_hash(srv, SSH_PUBLICKEY_HASH_SHA256, &hash, &hlen) == SSH_OK) {
        char *fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hlen);
        snprintf(out, len, "%s %s", ssh_key_type_to_char(ssh_key_type(srv)), fp ? fp : "?");
        ssh_string_free_char(fp);
        ssh_clean_pubkey_hash(&hash);
    }
    ssh_key_free(srv);
}

static void known_hosts_text(ssh_session s, char *out, size_t len)
{
    char *kh = NULL;
    ssh_options_get(s, SSH_OPTIONS_KNOWNHOSTS, &kh);
    snprintf(out, len, "%s", kh ? kh : "~/.ssh/known_hosts");
    ssh_string_free_char(kh);
}

int dsl_ssh_record_host_key(ssh_session s, const char *host, char *err)
{
    if (ssh_session_update_known_hosts(s) == SSH_OK)
        return 0;
    char khtext[300];
    known_hosts_text(s, khtext, sizeof(khtext));
    return dsl_seterr(err, DSL_EAUTH, "cannot add the host key of '%s' to '%s': %s", host,
                      khtext, ssh_get_error(s));
}

/* On a port other than 22, known_hosts lines are "[host]:port key"; with none for this
 * host and port, OpenSSH also accepts the key of a port-less "host key" line ("found
 * matching key w/out port") and records nothing new. So do we: the check again as if
 * on port 22, and only a matching key counts (another key there is still "unknown",
 * as in OpenSSH: a different service may listen on the other port). */
static int known_without_port(ssh_session s)
{
    unsigned int port = 0, p22 = 22;
    if (ssh_options_get_port(s, &port) < 0 || port == 22)
        return 0;
    if (ssh_options_set(s, SSH_OPTIONS_PORT, &p22) < 0)
        return 0;
    int ok = ssh_session_is_known_server(s) == SSH_KNOWN_HOSTS_OK;
    ssh_options_set(s, SSH_OPTIONS_PORT, &port);
    return ok;
}

int dsl_ssh_check_host_key(ssh_session s, const char *host, int accept_new, char *err)
{
    char fp[256], khtext[300];
    known_hosts_text(s, khtext, sizeof(khtext));
    dsl_ssh_fingerprint(s, fp, sizeof(fp));

    switch (ssh_session_is_known_server(s)) {
    case SSH_KNOWN_HOSTS_OK:
        return 0;
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND:
        if (known_without_port(s))
            return 0;
        if (accept_new)
            return dsl_ssh_record_host_key(s, host, err);
        return dsl_seterr(err, DSL_EAUTH,
                          "host key for '%s' is not known (%s, not in '%s'); verify it and "
                          "rerun with --ssh-accept-new, or run ssh %s once",
                          host, fp, khtext, host);
    case SSH_KNOWN_HOSTS_CHANGED:
        return dsl_seterr(err, DSL_EAUTH,
                          "host key for '%s' has CHANGED (now %s); it does not match '%s': "
                          "someone may be intercepting the connection, or the host was "
                          "reinstalled; check, then remove the old key (ssh-keygen -R)",
                          host, fp, khtext);
    case SSH_KNOWN_HOSTS_OTHER:
        return dsl_seterr(err, DSL_EAUTH,
                          "host key for '%s' is of another type than the one in '%s' (now "
                          "%s); treating it as changed: check the host, then fix known_hosts",
                          host, khtext, fp);
    case SSH_KNOWN_HOSTS_ERROR:
    default:
        return dsl_seterr(err, DSL_EAUTH, "cannot check the host key of '%s': %s", host,
                          ssh_get_error(s));
    }
}

void dsl_ssh_set_keepalive(ssh_session s, double keepalive)
{
    int fd = ssh_get_fd(s);
    if (fd < 0 || keepalive <= 0)
        return;
    int ka = (int)keepalive;
    if (ka < 3)
        ka = 3;
    int one = 1, idle = ka / 3, cnt = 3;
    unsigned int ut = (unsigned int)(keepalive * 1000.0);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
}

int dsl_ssh_auth_publickey(ssh_session s, const char *host, const char *identity,
                           ssh_key *key, char *err)
{
    int rc;
    if (identity) {
        if (!*key && ssh_pki_import_privkey_file(identity, NULL, NULL, NULL, key) != SSH_OK)
            return dsl_seterr(err, DSL_EAUTH,
                              "cannot load identity '%s' (missing, unreadable or passphrase-"
                              "protected: use ssh-agent for those)",
                              identity);
        rc = ssh_userauth_publickey(s, NULL, *key);
    } else {
        rc = ssh_userauth_publickey_auto(s, NULL, NULL);
    }
    if (rc == SSH_AUTH_AGAIN)
        return 1;
    if (rc == SSH_AUTH_SUCCESS)
        return 0;
    char t[600];
    dsl_ssh_target_text(s, host, t, sizeof(t));
    if (rc == SSH_AUTH_ERROR)
        return dsl_seterr(err, DSL_ECONNECT,
                          "connection to %s failed during authentication: %s", t,
                          ssh_get_error(s));
    if (identity)
        return dsl_seterr(err, DSL_EAUTH, "permission denied for %s with identity '%s'", t,
                          identity);
    return dsl_seterr(err, DSL_EAUTH,
                      "permission denied for %s (tried ssh-agent, IdentityFile and default "
                      "keys); check authorized_keys there, or pass --ssh-identity",
                      t);
}

int dsl_ssh_session_open(ssh_session *out, const char *host, const struct dsl_transport_opts *o,
                         int flags, const char *password, char *err)
{
    ssh_session s = NULL;
    ssh_key key = NULL;
    int r;
    *out = NULL;
    if ((r = session_new(&s, host, o, flags, err)) < 0)
        return r;
    ssh_set_blocking(s, 1);
    if (ssh_connect(s) != SSH_OK) {
        char t[600];
        dsl_ssh_target_text(s, host, t, sizeof(t));
        const char *e = ssh_get_error(s);
        r = dsl_seterr(err, strstr(e, "imeout") || strstr(e, "imed out") ? DSL_ETIMEDOUT
                                                                          : DSL_ECONNECT,
                       "cannot connect to %s: %s", t, e);
        goto out;
    }
    dsl_ssh_set_keepalive(s, o->keepalive);
    if (!(flags & DSL_SSH_NO_HOSTKEY_CHECK) &&
        (r = dsl_ssh_check_host_key(s, host, o->accept_new, err)) < 0)
        goto out;
    if (flags & DSL_SSH_NO_AUTH)
        goto ok;
    r = dsl_ssh_auth_publickey(s, host, o->ssh_identity, &key, err);
    if (r == 1) /* blocking mode never says "again"; treat it as a timeout */
        r = dsl_seterr(err, DSL_ETIMEDOUT, "authentication to '%s' did not finish", host);
    if (r == DSL_EAUTH && (flags & DSL_SSH_ALLOW_PASSWORD) && password) {
        int rc = ssh_userauth_password(s, NULL, password);
        if (rc == SSH_AUTH_SUCCESS) {
            r = 0;
        } else {
            char t[600];
            dsl_ssh_target_text(s, host, t, sizeof(t));
            r = dsl_seterr(err, rc == SSH_AUTH_ERROR ? DSL_ECONNECT : DSL_EAUTH,
                           "permission denied for %s (public keys and password): %s", t,
                           rc == SSH_AUTH_ERROR ? ssh_get_error(s) : "wrong password?");
        }
    }
    if (r < 0)
        goto out;
ok:
    *out = s;
    s = NULL;
    r = 0;
out:
    ssh_key_free(key);
    dsl_ssh_session_close(s);
    return r;
}

void dsl_ssh_session_close(ssh_session s)
{
    if (!s)
        return;
    if (ssh_is_connected(s))
        ssh_disconnect(s);
    ssh_free(s);
}
