/*
 * The rendezvous store's wire protocol, shared by the client and the server in store.c
 * and by the fuzz target.
 *
 * Every message is a frame: a 4-byte big-endian length L (1 <= L <= DSL_STORE_MAX_FRAME),
 * then L bytes: one opcode byte and its payload. Strings are a 2-byte big-endian length
 * and bytes; values a 4-byte length and bytes. The first client frame must be HELLO:
 * magic "DSLS", u16 version, string run id, string token, u32 rank. Until the hello is
 * accepted a frame may be at most DSL_STORE_MAX_HELLO bytes.
 *
 * Replies: OK (empty), VALUE (value), ERR (u8 reason, string message; the server closes
 * the connection after an ERR).
 */
#ifndef DSL_STORE_PROTO_H
#define DSL_STORE_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "dslaunch/common/dynbuf.h"

#define DSL_STORE_MAGIC 0x44534C53u /* "DSLS" */
#define DSL_STORE_VERSION 1
#define DSL_STORE_MAX_FRAME (1u << 20)
#define DSL_STORE_MAX_HELLO 4096u
#define DSL_STORE_MAX_KEY 1024u

enum dsl_store_op {
    DSL_STORE_HELLO = 1,
    DSL_STORE_SET = 2,
    DSL_STORE_GET = 3,
    DSL_STORE_ADD = 4,
    DSL_STORE_WAIT = 5,
    DSL_STORE_DEL = 6,
    DSL_STORE_OK = 0x80,
    DSL_STORE_VALUE = 0x81,
    DSL_STORE_ERR = 0x82,
};

enum dsl_store_reason {
    DSL_STORE_R_PROTO = 1,
    DSL_STORE_R_VERSION = 2,
    DSL_STORE_R_JOB = 3,
    DSL_STORE_R_TOKEN = 4,
    DSL_STORE_R_FULL = 5,
};

/* ---- byte helpers shared by the client and the server ---- */

static inline void put16(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static inline void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A cursor over a received payload; any overrun marks it bad. */
struct rd {
    const unsigned char *p;
    size_t left;
    int bad;
};

static inline const unsigned char *rd_take(struct rd *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = 1;
        return NULL;
    }
    const unsigned char *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

static inline uint32_t rd_u16(struct rd *r)
{
    const unsigned char *p = rd_take(r, 2);
    return p ? (uint32_t)p[0] << 8 | p[1] : 0;
}

static inline uint32_t rd_u32(struct rd *r)
{
    const unsigned char *p = rd_take(r, 4);
    return p ? get32(p) : 0;
}

static inline const unsigned char *rd_str(struct rd *r, size_t *len)
{
    *len = rd_u16(r);
    return rd_take(r, *len);
}

/* Frames being built: a dynbuf with the length patched in at the end. */
static inline void fr_begin(struct dsl_dynbuf *b, int op)
{
    unsigned char h[5] = {0, 0, 0, 0, (unsigned char)op};
    dsl_dynbuf_reset(b);
    dsl_dynbuf_add(b, h, 5);
}

static inline void fr_str(struct dsl_dynbuf *b, const void *s, size_t n)
{
    unsigned char h[2];
    put16(h, (uint32_t)n);
    dsl_dynbuf_add(b, h, 2);
    dsl_dynbuf_add(b, s, n);
}

static inline void fr_val(struct dsl_dynbuf *b, const void *s, size_t n)
{
    unsigned char h[4];
    put32(h, (uint32_t)n);
    dsl_dynbuf_add(b, h, 4);
    dsl_dynbuf_add(b, s, n);
}

static inline void fr_end(struct dsl_dynbuf *b)
{
    put32((unsigned char *)b->buf, (uint32_t)(b->len - 4));
}

struct dsl_store_server;
/** Wait until no authenticated client is connected or the deadline (dsl_now()) passes. */
void dsl_store_server_wait_idle(struct dsl_store_server *sv, double deadline);

/**
 * Feed bytes to a fresh server state as one client's stream (no sockets), as the
 * server would, then free everything. For the fuzz target; returns the number of
 * frames accepted before the state closed the client (or the data ran out).
 */
int dsl_store_proto_feed(const uint8_t *data, size_t n);

#endif
