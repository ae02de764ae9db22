/*
 * Files under a remote home directory, over the SFTP subsystem of an authenticated
 * libssh session, for the tools that edit ~/.ssh (ssh-setup). Paths are relative to the
 * remote home (the SFTP server's starting directory), e.g. ".ssh/authorized_keys".
 *
 * Each struct keeps its host's last error in err, so the final report can name every
 * failed host with its reason, and the list of
 * permission fixes made, for the final report. Nothing goes through a remote shell
 * except the fixed commands a caller passes to dsl_sshfiles_exec*() (and the one
 * `mv -f -- 'tmp' 'file'` the write falls back to, with both paths quoted).
 */
#ifndef DSLAUNCH_SSHFILES_H
#define DSLAUNCH_SSHFILES_H

#include <sys/types.h>

#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include "authkeys.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/strvec.h"

/** The largest remote file read (bytes); larger ones are an error. */
#define DSL_SSHFILES_MAX (4u << 20)

struct dsl_sshfiles {
    ssh_session s;           /* not owned */
    sftp_session sftp;       /* owned: made by _open, freed by _close */
    const char *host;        /* for messages; not owned, outlives the struct */
    struct dsl_strvec notes; /* "~/.ssh: group/other-writable, ...; mode 0777 -> 0700" */
    char err[DSL_ERR_LEN];   /* the last error */
};

/** Zero f and set the host name (no session yet). */
void dsl_sshfiles_init(struct dsl_sshfiles *f, const char *host);
/** Start SFTP on the authenticated session s (not owned). DSL_EREMOTE when refused. */
int dsl_sshfiles_open(struct dsl_sshfiles *f, ssh_session s);
/** Free the SFTP session and the notes; the ssh session is the caller's. */
void dsl_sshfiles_release(struct dsl_sshfiles *f);

/** Text of ~/path into *out (malloc'd; NULL, returning 0, when it does not exist). */
int dsl_sshfiles_read(struct dsl_sshfiles *f, const char *path, char **out);
/**
 * Replace ~/path with text: written to path.dslaunch-tmp, given the old file's mode (or
 * mode for a new file), then renamed over path, so a failure never leaves half a file.
 */
int dsl_sshfiles_write(struct dsl_sshfiles *f, const char *path, const char *text,
                       mode_t mode);
/**
 * Merge entry into ~/path with merge (dsl_authkeys_merge, dsl_knownhosts_merge, ...);
 * 1 when the file was written, 0 when the entry was present (file untouched).
 */
int dsl_sshfiles_merge(struct dsl_sshfiles *f, const char *path, const char *entry,
                       int (*merge)(const char *, const char *, char **), mode_t mode);
/** Write ~/path with text unless it holds exactly that, then dsl_sshfiles_fix_mode(). */
int dsl_sshfiles_put(struct dsl_sshfiles *f, const char *path, const char *text,
                     mode_t mode, enum dsl_sshperm_kind kind);
/** Fix the mode of ~/path (path "." is the home) when sshd or ssh would refuse it. */
void dsl_sshfiles_fix_mode(struct dsl_sshfiles *f, const char *path, const char *shown,
                           enum dsl_sshperm_kind kind);
/** Create ~/.ssh (0700) or fix its mode. */
int dsl_sshfiles_ensure_ssh_dir(struct dsl_sshfiles *f);

/** Start the fixed command cmd (run by the login shell in the home) on a new channel. */
int dsl_sshfiles_exec_start(struct dsl_sshfiles *f, const char *cmd, ssh_channel *out);
/** Collect a started command's stdout, then stderr, into out; its status; frees ch. */
void dsl_sshfiles_exec_finish(ssh_channel ch, struct dsl_dynbuf *out, int *status);
/** Start and finish: the command's output and exit status (-1 if none was sent). */
int dsl_sshfiles_exec(struct dsl_sshfiles *f, const char *cmd, struct dsl_dynbuf *out,
                      int *status);

#endif
