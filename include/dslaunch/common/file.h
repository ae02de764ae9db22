/*
 * Files made where another local user may have been first: log directories, log files,
 * reports and temporary files (after the rules of mkstemp and of the kernel's
 * protected_symlinks). Nothing here follows a symbolic link it did not ask for:
 *
 * - a file is created with O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, so a link or a file
 *   planted at the name makes the creation fail instead of writing through it;
 * - a temporary file has an unpredictable name (getrandom) beside its destination and
 *   is renamed into place by its writer;
 * - a directory that collects files under fixed names (a --log-dir) must belong to this
 *   user and be writable by nobody else, so no one else can plant anything in it;
 * - a file is read only when it is a regular file (opened O_NONBLOCK, so a FIFO in its
 *   place fails at once instead of hanging the reader).
 *
 * Errors are written into err (DSL_ERR_LEN bytes) naming the path.
 */
#ifndef DSLAUNCH_FILE_H
#define DSLAUNCH_FILE_H

#include <stddef.h>
#include <sys/types.h>

/**
 * Open directory dir for creating files in it, creating it (mode 0755 less the umask;
 * the parent must exist) when it is missing. An existing one must be a directory owned
 * by this user (the effective uid) and not writable by group or others; a final
 * symbolic link is followed only when this user owns the link too. Returns an
 * O_DIRECTORY descriptor (close-on-exec) or a negative code: DSL_EUSAGE for a
 * directory that fails the checks, -errno when it cannot be made or opened.
 */
int dsl_dir_open_private(const char *dir, char *err);

/** How dsl_file_create() treats a file already at the name. */
enum dsl_file_exist {
    DSL_FILE_FAIL,    /* it is an error (EEXIST): for directories others can write */
    DSL_FILE_REPLACE, /* it is unlinked (a link itself, never its target), then created */
    DSL_FILE_APPEND,  /* a regular file of ours with one link is appended to */
};

/**
 * Create (or per how, replace or append to) name in directory dirfd (AT_FDCWD: name is
 * a path) for writing, with O_NOFOLLOW and O_CLOEXEC; a new file gets mode less the
 * umask. shown is the path for messages. Returns the fd or a negative code.
 */
int dsl_file_create(int dirfd, const char *name, const char *shown, mode_t mode,
                    enum dsl_file_exist how, char *err);

/**
 * A new temporary file beside path, "<path>.tmp.<16 random hex digits>", made with
 * O_EXCL|O_NOFOLLOW (mode less the umask). *tmp (malloc'ed, the caller's) is its name,
 * to rename() into place or unlink(). Returns the fd or a negative code.
 */
int dsl_file_create_temp(const char *path, mode_t mode, char **tmp, char *err);

/**
 * Open path for reading if it is a regular file: opened with O_NONBLOCK (a FIFO or a
 * device neither blocks nor is read), checked with fstat, then made blocking again.
 * Returns the fd (close-on-exec) and *size, or a negative code: -errno when it cannot
 * be opened (-ENOENT: missing), -EINVAL when it is not a regular file.
 */
int dsl_file_open_regular(const char *path, size_t *size, char *err);

/**
 * A file the user named with an option (what: "--ssh-config") must be there and
 * readable: opened for reading and closed (a device such as /dev/null is fine, a
 * directory is not). 0, or DSL_EUSAGE with err ("--ssh-config '/x': No such file or
 * directory"). For files a library would otherwise skip silently when missing.
 */
int dsl_file_check_readable(const char *what, const char *path, char *err);

/**
 * Make directory path and any missing parents (mode 0755 less the umask), as
 * `mkdir -p`: 0 when it exists as a directory afterwards, else -errno (-ENOTDIR when
 * path or a parent is something else).
 */
int dsl_dir_make_all(const char *path);

/** fsync the directory that holds path (for a rename into it to be durable). */
int dsl_file_sync_dir_of(const char *path);

#endif
