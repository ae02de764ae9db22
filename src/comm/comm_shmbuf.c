/*
 * The tcp backend's shared buffers: collective buffers that same-host peers map.
 *
 * Theory of operation. dsl_comm_alloc() on a communicator whose ranks all run on this
 * host (the cross-memory-attach path is on and the open-time probe, shmbuf_probe in
 * comm_cma.c, succeeded)
 * makes a memfd of the requested size, maps it shared, and records (base, len, fd, id)
 * in this rank's registry. When a collective's buffers lie inside registered memory on
 * every rank, each rank publishes (id, fd, offset, object length) per buffer in the
 * call's first round, and the peers address those buffers directly: a peer maps the
 * owner's memfd through /proc/<pid>/fd/<fd> on first sight and keeps the mapping in a
 * small per-peer cache keyed by id. That takes the same permission as
 * process_vm_readv (same user, ptrace access), which the open-time probe proved.
 *
 * Lifetimes: ids are never reused, so a buffer freed and made again is a new id. The
 * owner closes its fd and unmaps at dsl_comm_free(); a peer's mapping of a freed
 * buffer stays (harmlessly: the memory lives on until it is unmapped) until the cache
 * evicts it (least recently used, DSL_SHMBUF_MAPS entries per peer) or the
 * communicator closes. The fd a peer opens is the owner's at the time of the call,
 * while the owner sits inside the collective, so it cannot have been reused.
 *
 * Threads: the registry is written by the caller's thread (alloc/free) and read by
 * whichever thread runs collectives (caller or progress thread), so a mutex guards
 * it. The peer cache is touched only by the thread running collectives, one at a time.
 */
#define _GNU_SOURCE /* memfd_create */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dslaunch/common/xalloc.h"
#include "comm_impl.h"
#include "comm_shmbuf.h"
#include "comm_tcp.h"
#include "dslaunch/common/banned.h"

struct shmbuf {
    char *base;
    size_t len;
    int fd;
    uint32_t id;
};

struct shmbuf_map {
    uint32_t id; /* 0: empty */
    char *base;
    size_t len;
    uint64_t used; /* clock of the last use, for eviction */
};

struct shmbuf_reg {
    pthread_mutex_t mu;
    struct shmbuf *v;
    size_t n, cap;
    uint32_t next_id;
    struct shmbuf_map *maps; /* [world * DSL_SHMBUF_MAPS] */
    uint64_t clock;
};

void dsl_shmbuf_init(struct dsl_comm *c, struct tcp *t)
{
    struct shmbuf_reg *g = dsl_xcalloc(1, sizeof(*g));
    pthread_mutex_init(&g->mu, NULL);
    g->next_id = 1;
    g->maps = dsl_xcalloc((size_t)c->world * DSL_SHMBUF_MAPS, sizeof(*g->maps));
    t->shmbuf_reg = g;
}

void *dsl_shmbuf_make(struct tcp *t, size_t bytes)
{
    struct shmbuf_reg *g = t->shmbuf_reg;
    size_t len = bytes ? bytes : 1;
    if (!g)
        return NULL;
    int fd = memfd_create("dslaunch-buf", MFD_CLOEXEC);
    if (fd < 0)
        return NULL;
    if (ftruncate(fd, (off_t)len) < 0) {
        close(fd);
        return NULL;
    }
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return NULL;
    }
    pthread_mutex_lock(&g->mu);
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 8;
        g->v = dsl_xreallocarray(g->v, g->cap, sizeof(*g->v));
    }
    g->v[g->n++] = (struct shmbuf){p, len, fd, g->next_id++};
    pthread_mutex_unlock(&g->mu);
    return p;
}

int dsl_shmbuf_free(struct tcp *t, void *p)
{
    struct shmbuf_reg *g = t->shmbuf_reg;
    if (!g || !p)
        return 0;
    pthread_mutex_lock(&g->mu);
    for (size_t i = 0; i < g->n; i++) {
        if (g->v[i].base != p)
            continue;
        struct shmbuf b = g->v[i];
        g->v[i] = g->v[--g->n];
        pthread_mutex_unlock(&g->mu);
        munmap(b.base, b.len);
        close(b.fd);
        return 1;
    }
    pthread_mutex_unlock(&g->mu);
    return 0;
}

int dsl_shmbuf_find(struct tcp *t, const void *p, size_t len, struct dsl_shmref *ref)
{
    struct shmbuf_reg *g = t->shmbuf_reg;
    memset(ref, 0, sizeof(*ref));
    if (!g || !p)
        return 0;
    const char *q = p;
    pthread_mutex_lock(&g->mu);
    for (size_t i = 0; i < g->n; i++) {
        const struct shmbuf *b = &g->v[i];
        if (q >= b->base && len <= b->len && (size_t)(q - b->base) <= b->len - len) {
            *ref = (struct dsl_shmref){b->id, (int32_t)b->fd, (uint64_t)(q - b->base),
                                       (uint64_t)b->len};
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return ref->id != 0;
}

char *dsl_shmbuf_map(struct dsl_comm *c, struct tcp *t, int peer,
                     const struct dsl_shmref *ref)
{
    struct shmbuf_reg *g = t->shmbuf_reg;
    struct shmbuf_map *m = g->maps + (size_t)peer * DSL_SHMBUF_MAPS, *slot = m;
    g->clock++;
    for (int i = 0; i < DSL_SHMBUF_MAPS; i++) {
        if (m[i].id == ref->id && m[i].len == ref->len) {
            m[i].used = g->clock;
            return m[i].base;
        }
        if (m[i].used < slot->used)
            slot = &m[i];
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/fd/%d", (long)t->pid[peer], (int)ref->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        dsl_seterr(c->err, -errno, "%s: cannot open its buffer %s: %s", t->peer[peer].name,
                   path, strerror(errno));
        return NULL;
    }
    /* populated at once: the page faults of a large buffer are taken here, once, and not
     * inside the timed collectives that first touch each part of it */
    void *p = mmap(NULL, (size_t)ref->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                   fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        dsl_seterr(c->err, -e, "%s: cannot map its buffer: %s", t->peer[peer].name,
                   strerror(e));
        return NULL;
    }
    if (slot->id)
        munmap(slot->base, slot->len);
    *slot = (struct shmbuf_map){ref->id, p, (size_t)ref->len, g->clock};
    return p;
}

void dsl_shmbuf_close(struct dsl_comm *c, struct tcp *t)
{
    struct shmbuf_reg *g = t->shmbuf_reg;
    if (!g)
        return;
    for (size_t i = 0; i < (size_t)c->world * DSL_SHMBUF_MAPS; i++)
        if (g->maps[i].id)
            munmap(g->maps[i].base, g->maps[i].len);
    /* buffers the user did not free are released with the communicator */
    for (size_t i = 0; i < g->n; i++) {
        munmap(g->v[i].base, g->v[i].len);
        close(g->v[i].fd);
    }
    pthread_mutex_destroy(&g->mu);
    free(g->v);
    free(g->maps);
    free(g);
    t->shmbuf_reg = NULL;
}
