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

/**
 * Feed bytes to a fresh server state as one client's stream (no sockets), as the
 * server would, then free everything. For the fuzz target; returns the number of
 * frames accepted before the state closed the client (or the data ran out).
 */
int dsl_store_proto_feed(const uint8_t *data, size_t n);

#endif
