/*
 * dslaunch sync: copy files and directories to every host over SFTP (docs/sync.md).
 *
 *   dslaunch sync [--hostfile H] [--dest DIR] [--delete] [--checksum] PATH...
 *   dslaunch --sync PATH [--sync PATH...] ... PROGRAM   (sync first, then launch)
 *
 * Each PATH goes to the same absolute path on every host, or to DIR/<basename of PATH>
 * with --dest. Ownership: the options struct only borrows its strings and arrays.
 */
#ifndef DSLAUNCH_SYNC_H
#define DSLAUNCH_SYNC_H

#include <stddef.h>

#include "dslaunch/remote/transport.h"

struct dsl_sync_opts {
    char *const *paths;        /* local files, directories or symlinks; borrowed */
    size_t npaths;
    const char *dest;          /* --dest DIR (NULL: the same absolute path) */
    int delete_extra;          /* --delete: remove remote entries gone at the source */
    int checksum;              /* --checksum: compare SHA-256 instead of size + mtime */
    int fanout;                /* hosts copied to at once (>= 1) */
    int verbose;               /* -1 quiet (errors only), 0 summary, 1 per-file lines */
    struct dsl_transport_opts tr; /* ssh settings (config, port, identity, timeouts) */
};

/**
 * Copy o->paths to every host in hosts (nhosts of them; "user@host" logs in as user, over
 * the ssh config's User). Prints the progress line
 * (stderr), one summary line per host and a total (stdout). Returns 0 when every host
 * succeeded, else the first failure's negative code (DSL_ECONNECT, DSL_EAUTH,
 * DSL_EREMOTE for a file that could not be written, -errno for a local file that
 * could not be read during the copy, DSL_EUSAGE for bad or missing PATHs: nothing is
 * copied then); each failure names host and file.
 */
int dsl_sync_run(const struct dsl_sync_opts *o, char *const *hosts, size_t nhosts);

/** The exit code for dsl_sync_run's return value (0, 1, 2, 200, 201). */
int dsl_sync_exit_code(int rc);

/** `dslaunch sync ...` (argv[0] is "sync"): returns the process exit code. */
int dsl_sync_main(int argc, char **argv);

#endif
