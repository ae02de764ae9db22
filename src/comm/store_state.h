/*
 * The rendezvous store's state without sockets (store_state.c): the keys and values, and
 * each client's buffers and parked request. The server thread (store_server.c) owns the
 * sockets and feeds every client's bytes through dsl_store_client_process().
 */
#ifndef DSL_STORE_STATE_H
#define DSL_STORE_STATE_H

#include <stddef.h>

#include "dslaunch/common/dynbuf.h"

#define DSL_STORE_MAX_CLIENTS 4096 /* authenticated clients */

struct store_kv {
    char *key;
    unsigned char *val;
    size_t len;
};

struct store_client {
    int fd;                /* -1 in the fuzz harness */
    struct dsl_dynbuf in;  /* unparsed input, at most one frame */
    struct dsl_dynbuf out; /* replies not yet written */
    int hello, closing;
    int rank;
    int pending;           /* GET or WAIT parked, or 0 */
    char **keys;           /* parked keys, owned */
    size_t nkeys;
    double t_open;         /* accepted at (dsl_now()) */
    double t_partial;      /* an incomplete frame has been waiting since, or 0 */
};

struct store_state {
    char *run_id, *token;
    struct store_kv *kv;
    size_t nkv, akv;
    int full;              /* set by the server: no room for another authenticated client */
};

/* Frees the keys, values, run id and token; s is zeroed. */
void dsl_store_state_release(struct store_state *s);

/* Sets up cl for socket fd (-1: none); dsl_store_client_release() frees its buffers and
 * closes fd. */
void dsl_store_client_init(struct store_client *cl, int fd);
void dsl_store_client_release(struct store_client *cl);

/* Parses every complete frame in cl->in (stopping while the client is parked) and queues
 * the replies in cl->out. Returns the number of frames handled, or -1 when the client
 * must be closed (its ERR reply is queued). */
int dsl_store_client_process(struct store_state *s, struct store_client *cl);

/* A parked GET/WAIT whose keys all exist now gets its reply. Returns 1 if answered. */
int dsl_store_client_answer(struct store_state *s, struct store_client *cl);

struct dsl_store_opts;
/* An open store (no token) of more than one rank is refused unless o->insecure: 0, or
 * DSL_EUSAGE with err saying what refused to verb it (use, start) and who could reach
 * where. */
int dsl_store_check_token(const struct dsl_store_opts *o, const char *verb, const char *where,
                          char *err);

#endif
