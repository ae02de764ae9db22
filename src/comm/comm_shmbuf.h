/*
 * The tcp backend's shared buffers (comm_shmbuf.c): memory that dsl_comm_alloc() hands
 * out and that same-host peers map, so the same-host path can address it directly.
 * It uses only the state in struct tcp (comm_tcp.h) and calls nothing else in src/comm.
 */
#ifndef DSL_COMM_SHMBUF_H
#define DSL_COMM_SHMBUF_H

#include <stddef.h>
#include <stdint.h>

#include "comm_impl.h"
#include "comm_tcp.h"

#define DSL_SHMBUF_MAPS 16 /* mappings of each peer's buffers kept at once */

/** Where a buffer lies: registered object id (0: not registered), the owner's fd,
 *  offset in the object, object length. */
struct dsl_shmref {
    uint32_t id;
    int32_t fd;
    uint64_t off;
    uint64_t len;
};

/** Create the (empty) registry and peer cache. */
void dsl_shmbuf_init(struct dsl_comm *c, struct tcp *t);
/** A zeroed buffer of bytes that peers can map; NULL on failure. */
void *dsl_shmbuf_make(struct tcp *t, size_t bytes);
/** Free a buffer of dsl_shmbuf_make(); returns 0 if p is not one. */
int dsl_shmbuf_free(struct tcp *t, void *p);
/** Is [p, p+len) inside one registered buffer? Fills ref (id 0 if not). */
int dsl_shmbuf_find(struct tcp *t, const void *p, size_t len, struct dsl_shmref *ref);
/** This process's address of peer's object ref (mapped on first use); NULL with c->err
 *  set on failure. The mapping is owned by the cache. */
char *dsl_shmbuf_map(struct dsl_comm *c, struct tcp *t, int peer, const struct dsl_shmref *ref);
/** Unmap every peer mapping and free every buffer still registered. */
void dsl_shmbuf_close(struct dsl_comm *c, struct tcp *t);

#endif
