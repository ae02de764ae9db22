/*
 * The line logic of `dslaunch ssh-setup`: merging a public key into authorized_keys,
 * formatting and merging known_hosts entries, the managed block in ~/.ssh/config, and
 * which permissions sshd or ssh would refuse. Pure functions on strings and modes, no
 * I/O, so every rule is unit-tested (tests/tools/test_authkeys.c).
 *
 * Merges are idempotent: a key already present (same type and base64 blob, whatever
 * its options or comment) is never added again, and the text of a file that needs no
 * change is never rewritten, so running ssh-setup twice changes nothing byte for byte.
 */
#ifndef DSLAUNCH_AUTHKEYS_H
#define DSLAUNCH_AUTHKEYS_H

#include <stddef.h>

/**
 * Find the key of an authorized_keys or known_hosts line: the first whitespace-separated
 * field (double quotes in options respected) that names a key type (ssh-*, ecdsa-*,
 * sk-*) and the field after it. Returns 0 and sets the spans (pointing into line), or
 * -1 for a blank line, a comment or a line without a key. Fields end at whitespace or
 * a newline.
 */
int dsl_authkeys_find_key(const char *line, const char **type, size_t *tlen,
                          const char **blob, size_t *blen);

/**
 * Merge keyline ("ssh-ed25519 AAAA... comment") into the authorized_keys text (may be
 * NULL or empty). Returns 1 and sets *out to the new text (malloc'd, caller frees):
 * text, a newline if text did not end with one, keyline and a newline. Returns 0 and
 * sets *out to NULL when a line with the same key is present. Returns DSL_EUSAGE when
 * keyline holds no key.
 */
int dsl_authkeys_merge(const char *text, const char *keyline, char **out);

/**
 * One known_hosts line: the host field, the key type and the base64 blob, no newline.
 * The host field lists names (duplicates and empty names dropped, order kept) joined by
 * commas; with a port other than 22 (and > 0) each is written [name]:port, as ssh
 * looks it up. Returns a malloc'd string the caller frees.
 */
char *dsl_knownhosts_line(const char *const *names, size_t n, int port, const char *type,
                          const char *blob);

/**
 * Merge a known_hosts line into text (may be NULL). The line counts as present when a
 * line of text (not a comment, not @revoked/@cert-authority) has the same key and its
 * host field contains every name of the new line's host field. Returns 1 with *out the
 * new text (caller frees), 0 with *out NULL when present, DSL_EUSAGE for a bad line.
 */
int dsl_knownhosts_merge(const char *text, const char *line, char **out);

/** The markers around the block ssh-setup manages in ~/.ssh/config. */
#define DSL_SSHCONFIG_BEGIN "# >>> dslaunch ssh-setup >>> (managed, rewritten on each run)"
#define DSL_SSHCONFIG_END "# <<< dslaunch ssh-setup <<<"
/** The last line of the managed block: the text after it keeps its top-of-file scope. */
#define DSL_SSHCONFIG_RESET "Host *\n"

/**
 * Put block (lines, ending with a newline) between the markers at the top of the ssh
 * config text, followed by a "Host *" line so that the options after it keep the scope
 * they had; an existing managed block elsewhere is removed. The top, because the first
 * value obtained wins in OpenSSH, and libssh matches the Host lines that follow a
 * HostName against that HostName instead of the alias. Returns 1 with
 * *out the new text (caller frees) when that changes text, 0 with *out NULL when the
 * same block is there already.
 */
int dsl_sshconfig_merge(const char *text, const char *block, char **out);

/** What a file or directory of the ssh set-up is, for dsl_sshperm_fix(). */
enum dsl_sshperm_kind {
    DSL_SSHPERM_HOME,    /* the home directory: sshd refuses group/other-writable */
    DSL_SSHPERM_SSHDIR,  /* ~/.ssh: sshd refuses group/other-writable; fixed to 0700 */
    DSL_SSHPERM_AUTHKEYS, /* authorized_keys: sshd refuses group/other-writable; 0600 */
    DSL_SSHPERM_PRIVKEY, /* a private key: ssh refuses it group/other-readable; 0600 */
    DSL_SSHPERM_CONFIG,  /* ~/.ssh/config: ssh refuses it group/other-writable; 0600 */
};

/**
 * The permission bits to set on a path of this kind whose mode is mode (the st_mode
 * permission bits), or -1 when the mode is one sshd and ssh accept (then nothing is
 * changed). *why (if not NULL) gets a static reason for the message, or NULL.
 */
int dsl_sshperm_fix(enum dsl_sshperm_kind kind, unsigned int mode, const char **why);

#endif
