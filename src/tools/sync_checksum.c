/*
 * dslaunch sync --checksum: files of equal size are compared by SHA-256 instead of
 * mtime. A host queues such files (sync_walk.c) and flushes them in batches: one
 * `sha256sum` on an exec channel of its session hashes the batch on the node, so no
 * file is read back over the network, while the local side hashes the same files on up
 * to SYNC_HASH_THREADS threads. A local hash is computed once for all hosts, under one
 * of SYNC_HASH_LOCKS striped locks. Files that differ, or that got no line, are copied.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "digest.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "sync_impl.h"
#include "dslaunch/common/banned.h"

/* --checksum: hash the local file once (several hosts may ask for it at once, and a
 * host hashes its batch on several threads). Each entry's state is guarded by one of
 * SYNC_HASH_LOCKS striped locks, so different files hash in parallel. */
static pthread_mutex_t *hash_lock_of(struct sync_run *run, const struct sync_entry *e)
{
    return &run->hash_locks[((uintptr_t)e / sizeof(*e)) % SYNC_HASH_LOCKS];
}

static int local_hash(struct sync_run *run, struct sync_entry *e, char *err)
{
    int r = 0;
    pthread_mutex_t *m = hash_lock_of(run, e);
    pthread_mutex_lock(m);
    if (!e->hashed) {
        r = dsl_sha256_file(e->local, e->sha, err);
        if (r == 0)
            e->hashed = 1;
    }
    pthread_mutex_unlock(m);
    return r;
}

struct hash_batch {
    struct sync_run *run;
    struct sync_entry **e;
    size_t n;
    _Atomic size_t next;
    pthread_mutex_t lock;
    int rc;                 /* first failure, under lock */
    char err[DSL_ERR_LEN];
};

static void *hash_worker(void *arg)
{
    struct hash_batch *b = arg;
    char err[DSL_ERR_LEN];
    size_t i;
    while ((i = atomic_fetch_add(&b->next, 1)) < b->n) {
        int r = local_hash(b->run, b->e[i], err);
        if (r < 0) {
            pthread_mutex_lock(&b->lock);
            if (!b->rc) {
                b->rc = r;
                snprintf(b->err, sizeof(b->err), "%s", err);
            }
            pthread_mutex_unlock(&b->lock);
        }
    }
    return NULL;
}

/* Start hashing b's entries on up to SYNC_HASH_THREADS threads (and the cores there
 * are); *nt says how many started, 0 when the caller must hash them itself. */
static void hash_batch_start(struct hash_batch *b, pthread_t *t, size_t *nt)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t want = cpus > 1 ? (size_t)cpus : 1;
    if (want > SYNC_HASH_THREADS)
        want = SYNC_HASH_THREADS;
    if (want > b->n)
        want = b->n;
    *nt = 0;
    while (*nt < want && pthread_create(&t[*nt], NULL, hash_worker, b) == 0)
        (*nt)++;
}

/* Hash the pending remote files with one sha256sum while the local side hashes them on
 * several threads; copy those that differ. Remote lines are matched to files by path,
 * not by position: a file sha256sum cannot read prints no line (its error goes to
 * stderr), and any file without a matching line counts as different. */
int dsl_sync_checksum_flush(struct sync_run *run, struct sync_host *h)
{
    if (!h->pending.nr)
        return 0;
    struct dsl_dynbuf cmd, out;
    dsl_dynbuf_init(&cmd, 1u << 20); /* SYNC_HASH_BATCH quoted paths */
    dsl_dynbuf_init(&out, 1u << 20); /* as many "<hash>  <path>" lines */
    int r = 0;
    size_t n = h->pending.nr;
    char (*remote)[65] = dsl_xcalloc(n, sizeof(*remote)); /* "" = no line for it */

    struct hash_batch b;
    memset(&b, 0, sizeof(b));
    b.run = run;
    b.e = h->pending_e;
    b.n = n;
    pthread_mutex_init(&b.lock, NULL);
    pthread_t t[SYNC_HASH_THREADS];
    size_t nt;
    hash_batch_start(&b, t, &nt);

    dsl_dynbuf_addstr(&cmd, "exec sha256sum --");
    for (size_t i = 0; i < n; i++) {
        char *q = dsl_shell_quote(h->pending.v[i]);
        dsl_dynbuf_addf(&cmd, " %s", q);
        free(q);
    }
    ssh_channel ch = ssh_channel_new(h->s);
    if (!ch || ssh_channel_open_session(ch) != SSH_OK ||
        ssh_channel_request_exec(ch, dsl_dynbuf_str(&cmd)) != SSH_OK) {
        if (ch)
            ssh_channel_free(ch);
        h->rc = DSL_EREMOTE;
        snprintf(h->err, sizeof(h->err), "%s: cannot run sha256sum for --checksum: %s",
                 h->name, ssh_get_error(h->s));
        r = h->rc;
    } else {
        char buf[8192];
        int got;
        while ((got = ssh_channel_read(ch, buf, sizeof(buf), 0)) > 0)
            dsl_dynbuf_add(&out, buf, (size_t)got);
        ssh_channel_send_eof(ch);
        ssh_channel_close(ch);
        ssh_channel_free(ch);
    }
    if (nt == 0)
        hash_worker(&b);
    for (size_t k = 0; k < nt; k++)
        pthread_join(t[k], NULL);
    pthread_mutex_destroy(&b.lock);
    if (r < 0)
        goto out;
    if (b.rc < 0) {
        h->rc = r = b.rc;
        snprintf(h->err, sizeof(h->err), "%s: %.400s", h->name, b.err);
        goto out;
    }

    const char *p = dsl_dynbuf_str(&out), *end = p + strlen(p);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        char hex[65], *path;
        if (dsl_sha256_parse_sum_line(p, len, hex, &path) == 0) {
            for (size_t i = 0; i < n; i++) {
                if (!remote[i][0] && !strcmp(h->pending.v[i], path)) {
                    memcpy(remote[i], hex, sizeof(hex));
                    break;
                }
            }
            free(path);
        }
        p += len + (nl ? 1 : 0);
    }
    for (size_t i = 0; i < n && r == 0; i++) {
        struct sync_entry *e = h->pending_e[i];
        int same = 0;
        if (remote[i][0]) {
            char hex[65];
            for (int k = 0; k < 32; k++)
                snprintf(hex + 2 * k, 3, "%02x", e->sha[k]);
            same = !strcmp(remote[i], hex);
        }
        if (same) {
            h->same++;
            continue;
        }
        int missing;
        sftp_attributes a = dsl_sync_remote_lstat(h, h->pending.v[i], &missing);
        r = dsl_sync_file_copy(h, e, h->pending.v[i], a);
        sftp_attributes_free(a);
    }
out:
    free(remote);
    dsl_strvec_clear(&h->pending);
    dsl_dynbuf_release(&cmd);
    dsl_dynbuf_release(&out);
    return r;
}