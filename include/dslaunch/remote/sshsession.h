/*
 * One implementation of the SSH session rules, shared by the non-blocking transport
 * (transport_ssh.c) and the blocking operator tools (sync, ssh-setup, doctor):
 *
 * - configuration: the host alias first, then the ssh config (--ssh-config, else
 *   ~/.ssh/config and /etc/ssh/ssh_config), then the command-line overrides (--ssh_port,
 *   user, known_hosts, connect timeout) and libssh verbosity (DSLAUNCH_SSH_DEBUG=0..4);
 * - host keys: known -> ok; unknown -> DSL_EAUTH with advice unless accept_new (then
 *   recorded in known_hosts); changed or of another type -> always refused;
 * - authentication: --ssh-identity given: that key only; otherwise the ssh-agent, the
 *   config's IdentityFile entries and the default identities (publickey_auto); a
 *   password only for callers that ask for it (DSL_SSH_ALLOW_PASSWORD).
 *
 * Errors are written into err (DSL_ERR_LEN bytes) as one sentence naming the host;
 * the return value is 0 or a negative DSL_E* code (DSL_ECONNECT, DSL_EAUTH, DSL_EUSAGE,
 * DSL_ETIMEDOUT, DSL_EREMOTE).
 *
 * Ownership: a session from dsl_ssh_session_open() belongs to the caller, who ends it
 * with dsl_ssh_session_close(). The step functions never free what they are given.
 */
#ifndef DSLAUNCH_SSHSESSION_H
#define DSLAUNCH_SSHSESSION_H

#include <stddef.h>

#include <libssh/libssh.h>

#include "dslaunch/common/error.h"
#include "dslaunch/remote/transport.h"

/**
 * The home directory whose .ssh/ dslaunch uses: $HOME when it is an absolute path to an
 * existing directory, else the account's home from the password database, else ".".
 * Sessions take their default config, known_hosts and keys from <home>/.ssh, and
 * ssh-setup writes there, so both agree with what the user's $HOME says. Caller frees.
 */
char *dsl_ssh_home(void);

/* flags of dsl_ssh_session_open() */
#define DSL_SSH_ALLOW_PASSWORD 0x1   /* try password (argument) when public keys fail */
#define DSL_SSH_NO_HOSTKEY_CHECK 0x2 /* first contact: the caller checks the key itself
                                        (dsl_ssh_fingerprint, dsl_ssh_record_host_key) */
#define DSL_SSH_NO_AUTH 0x4          /* stop after the key exchange (host key only) */
#define DSL_SSH_BULK 0x8             /* bulk data (sync): prefer AES-GCM where the CPU has
                                        AES instructions, unless the config sets Ciphers */

/**
 * Create a session for host (an alias of the ssh config) with o's settings applied
 * (see above); blocking mode, not connected. 0 or DSL_EUSAGE/-ENOMEM with err.
 */
int dsl_ssh_session_new(ssh_session *out, const char *host, const struct dsl_transport_opts *o,
                        char *err);

/**
 * Check the connected session's host key against known_hosts with the rules above.
 * 0 when trusted (an unknown key with accept_new is recorded first), else DSL_EAUTH.
 */
int dsl_ssh_check_host_key(ssh_session s, const char *host, int accept_new, char *err);

/** "ssh-ed25519 SHA256:..." of the connected server's host key ("?" if unavailable). */
void dsl_ssh_fingerprint(ssh_session s, char *out, size_t len);

/** Append the connected server's host key to the session's known_hosts file. */
int dsl_ssh_record_host_key(ssh_session s, const char *host, char *err);

/** "user@alias (hostname:port)" or "user@alias:port" as resolved, for messages: the
 *  login user always beside the name the user wrote. */
void dsl_ssh_target_text(ssh_session s, const char *alias, char *out, size_t len);

/**
 * One public-key authentication attempt (re-entrant in non-blocking mode). identity
 * NULL: agent + IdentityFile + defaults; else that file, loaded once into *key (owned
 * by the caller, ssh_key_free). Returns 0 authenticated, 1 SSH_AUTH_AGAIN (call again),
 * DSL_EAUTH (denied) or DSL_ECONNECT (the connection failed), with err.
 */
int dsl_ssh_auth_publickey(ssh_session s, const char *host, const char *identity,
                           ssh_key *key, char *err);

/** TCP keepalive and TCP_USER_TIMEOUT from --keepalive seconds (0: leave alone). */
void dsl_ssh_set_keepalive(ssh_session s, double keepalive);

/**
 * Blocking: new + connect (bounded by o->connect_timeout) + host key check (unless
 * DSL_SSH_NO_HOSTKEY_CHECK) + authentication (unless DSL_SSH_NO_AUTH; with
 * DSL_SSH_ALLOW_PASSWORD and a non-NULL password, the password is tried when the
 * public keys are denied). On success *out is a connected session owned by the caller;
 * on failure *out is NULL and err says why.
 */
int dsl_ssh_session_open(ssh_session *out, const char *host, const struct dsl_transport_opts *o,
                         int flags, const char *password, char *err);

/** Disconnect and free (NULL is fine). */
void dsl_ssh_session_close(ssh_session s);

#endif
