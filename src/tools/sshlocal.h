/*
 * The local side of `dslaunch ssh-setup`: files under this host's ~/.ssh (known_hosts,
 * config, the key pair) and the dedicated key pair itself.
 */
#ifndef DSLAUNCH_SSHLOCAL_H
#define DSLAUNCH_SSHLOCAL_H

#include <sys/types.h>

#include <libssh/libssh.h>

/** The largest local ssh file read (bytes). */
#define DSL_SSHLOCAL_MAX (4u << 20)

/** "<home>/rel" with the account's home (as ssh uses), else $HOME; the caller frees it. */
char *dsl_sshlocal_path(const char *rel);
/** Read path into *out (malloc'd, NUL-terminated); -errno with err on failure. */
int dsl_sshlocal_read(const char *path, char **out, char *err);
/**
 * Replace path with text via a new path.tmp.<random> (O_EXCL|O_NOFOLLOW) and rename; the
 * old file's mode is kept,
 * a new file gets mode. -errno with err on failure (the old file is then untouched).
 */
int dsl_sshlocal_write(const char *path, const char *text, mode_t mode, char *err);
/** Create the parent directory of path with mode 0700 if it is named .ssh and missing. */
void dsl_sshlocal_mkdir_ssh(const char *path);

/** The dedicated key pair; every field is owned and freed by dsl_sshkeypair_release(). */
struct dsl_sshkeypair {
    char *path;      /* the private key file */
    char *name;      /* its file name, used for the copy on the nodes */
    char *pub_line;  /* "ssh-ed25519 AAAA... comment", no newline */
    char *priv_text; /* the private key file's text (for --mesh), wiped on release */
    ssh_key key;
};

/**
 * Load the pair at path (NULL: ~/.ssh/id_dslaunch), creating an ed25519 pair (private
 * key 0600, .pub 0644) when the private key does not exist. Fails (DSL_EAUTH, with err)
 * for a passphrase-protected key or a .pub holding another key. On failure kp is empty.
 */
int dsl_sshkeypair_load(struct dsl_sshkeypair *kp, const char *path, char *err);
void dsl_sshkeypair_release(struct dsl_sshkeypair *kp);

#endif
