/*
 * The private state of dslaunch sync, shared by its files: the scanned source tree,
 * one host's session and counters, and the run. sync.c drives the run; sync_scan.c
 * reads the sources, sync_walk.c walks one tree onto one host, sync_checksum.c compares
 * files by SHA-256, sync_remote.c does single remote file operations.
 */
#ifndef DSLAUNCH_SYNC_IMPL_H
#define DSLAUNCH_SYNC_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/tools/sync.h"

#define SYNC_CHUNK (128u * 1024u)   /* bytes per SFTP write (OpenSSH takes 256 KiB) */
#define SYNC_HASH_BATCH 64          /* files per remote sha256sum command */
#define SYNC_HASH_THREADS 8         /* local hashing threads per batch, at most */
#define SYNC_HASH_LOCKS 64          /* striped locks over the entries' hash state */
#define SYNC_KEEP_MAX 256           /* sessions kept open for their claims, at most */

struct sync_entry {
    char *name;                /* name in the parent directory; owned */
    char *local;               /* local path; owned */
    mode_t mode;               /* st_mode, type included */
    uint64_t size;
    int64_t mtime;
    char *link;                /* symlink target; owned */
    struct sync_entry *kids;   /* directories: children sorted by name; owned */
    size_t nkids, alloc;
    unsigned char sha[32];     /* --checksum: local hash */
    int hashed;
};

struct sync_root {
    struct sync_entry e;
    char *remote;              /* absolute (or --dest relative) remote path; owned */
};

struct sync_host {
    const char *name;          /* borrowed */
    const struct dsl_sync_opts *o;
    ssh_session s;
    sftp_session sftp;
    int can_fsync;
    const char *shared_with;   /* borrowed: the host that copied a shared destination */
    unsigned shared;           /* roots left to shared_with (same directory there) */
    _Atomic size_t looked;     /* roots whose claim this host has checked */
    _Atomic size_t finished;   /* roots this host is done with (copied, or gave up) */
    char *buf;                 /* SYNC_CHUNK bytes */
    _Atomic uint64_t bytes;
    _Atomic unsigned copied;
    _Atomic int done;
    unsigned same, deleted;
    unsigned long mut;         /* remote changes made (directory mtimes need redoing) */
    double t0, t1;
    int rc;
    char err[DSL_ERR_LEN];
    struct dsl_strvec kept;    /* claims kept past this host's end (fewer threads than
                                  hosts), its session open, until every host has looked */
    struct dsl_strvec pending; /* --checksum: remote paths whose hash must be compared */
    struct sync_entry **pending_e;
    size_t pending_alloc;
};

struct sync_run {
    const struct dsl_sync_opts *o;
    struct sync_root *roots;
    size_t nroots;
    struct sync_host *hosts;
    size_t nhosts;
    _Atomic size_t next;
    char token[17];            /* this run's id, in the claim file of a destination */
    int all_at_once;           /* a thread per host: hosts may wait for each other */
    _Atomic size_t keeping;    /* hosts whose session stays open for their claims */
    _Atomic int keep_full;     /* SYNC_KEEP_MAX reached: later claims went at once */
    pthread_mutex_t hash_locks[SYNC_HASH_LOCKS]; /* local hashes are computed once */
};

static inline int dsl_sync_rtype(sftp_attributes a)
{
    return a->type;
}

/* sync_scan.c */

/** Free what e owns (its children too), not e itself. */
void dsl_sync_entry_release(struct sync_entry *e);
/** Scan PATH into root (remote path under dest, or PATH's absolute form); on failure
 * root may hold part of a scan, released with dsl_sync_entry_release(). */
int dsl_sync_root_make(struct sync_root *root, const char *path, const char *dest, char *err);

/* sync_remote.c: each failure is recorded in h->rc and h->err, and returned */

int dsl_sync_host_fail(struct sync_host *h, const char *what, const char *path);
/** lstat: attributes (the caller frees them), or NULL with *missing set when the path
 * does not exist. */
sftp_attributes dsl_sync_remote_lstat(struct sync_host *h, const char *path, int *missing);
int dsl_sync_remote_remove(struct sync_host *h, const char *path, int type);
int dsl_sync_remote_set_meta(struct sync_host *h, const char *path, const struct sync_entry *e);
int dsl_sync_remote_set_mode(struct sync_host *h, const char *path, mode_t mode);
/** mkdir -p of the parent of path. */
int dsl_sync_remote_mkdirs(struct sync_host *h, const char *path);
/** Copy e to path through a temporary beside it; old: what is at path now, or NULL. */
int dsl_sync_file_copy(struct sync_host *h, const struct sync_entry *e, const char *path,
                       sftp_attributes old);

/* sync_checksum.c */

/** --checksum: compare the files queued in h->pending, copy those that differ. */
int dsl_sync_checksum_flush(struct sync_run *run, struct sync_host *h);

/* sync_walk.c */

/** Bring path on h to what e is; a: the remote attributes of path, or NULL. */
int dsl_sync_entry_sync(struct sync_run *run, struct sync_host *h, struct sync_entry *e,
                        const char *path, sftp_attributes a);

#endif
