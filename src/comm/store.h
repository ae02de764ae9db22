/*
 * The rendezvous store: a TCP key-value store hosted by rank 0 at
 * MASTER_ADDR:MASTER_PORT, used to exchange NCCL unique ids and peer addresses and to
 * build barriers.
 *
 * Every connection starts with a hello carrying the protocol version, the job's run id
 * (DSLAUNCH_RUN_ID) and secret (DSLAUNCH_RUN_TOKEN); the server refuses a client of
 * another version, job or token with a clear error, and answers nothing else to it.
 * Malformed frames (bad lengths, garbage) close that client's connection; the server
 * never crashes or blocks on one client.
 *
 * The server runs in a background thread of the rank that hosts it; clients are
 * blocking and every call is bounded by the store timeout. A call that fails on the
 * connection (timeout, refusal, lost server) closes it: the client is unusable
 * afterwards and dsl_store_last_error() says why. Keys are 1..1024 bytes; values up to
 * about 1 MiB. The wire protocol is in store_proto.h.
 */
#ifndef DSLAUNCH_STORE_H
#define DSLAUNCH_STORE_H

#include <stddef.h>
#include <stdint.h>

struct dsl_store;        /* a client connection (opaque) */
struct dsl_store_server; /* the server thread (opaque) */
struct dsl_rankenv;

struct dsl_store_opts {
    const char *addr;    /* MASTER_ADDR */
    int port;            /* MASTER_PORT */
    const char *run_id;  /* DSLAUNCH_RUN_ID ("" if unset) */
    const char *token;   /* DSLAUNCH_RUN_TOKEN ("" if unset) */
    double timeout_s;    /* DSLAUNCH_STORE_TIMEOUT, default 300 */
    int rank, world_size;
    int insecure;        /* DSLAUNCH_STORE_INSECURE=1: allow an empty token with world > 1 */
    int inherited_fd;    /* DSLAUNCH_STORE_FD: a listening socket on port to serve on
                            instead of binding (0: none; fds 0-2 never are one) */
    double hello_timeout_s; /* a new connection's hello must be complete within this
                            (0: 5 s); an authenticated client's frame within 6 times it */
    int debug;           /* DSLAUNCH_STORE_DEBUG=1: the server prints its counters when freed */
};

/* What the server thread did, for debugging and for tests of its resource handling. */
struct dsl_store_stats {
    unsigned long accepted;        /* connections accepted */
    unsigned long wakeups;         /* poll() returns with events */
    unsigned long idle_wakeups;    /* ... of which nothing came (no byte, accept or drop) */
    unsigned long accept_failures; /* accept() failed (EMFILE, ENFILE, ...) */
    unsigned long shed;            /* accepted on the reserve fd and closed at once */
    unsigned long backoffs;        /* the listener rested after a failure */
    unsigned long dropped_unauth;  /* unauthenticated connections dropped to make room */
    unsigned long timed_out;       /* dropped at their hello or frame deadline */
};

/** Fill opts from the environment (RANK, WORLD_SIZE, MASTER_*, DSLAUNCH_*). */
int dsl_store_opts_from_env(struct dsl_store_opts *o, char *err);
/** The same from a loaded rank contract (the store's own knobs from the environment). */
int dsl_store_opts_from_rankenv(struct dsl_store_opts *o, const struct dsl_rankenv *env,
                                char *err);

/**
 * Start a server on opts->port (port 0 = any; the chosen port is returned by
 * dsl_store_server_port): on opts->inherited_fd when set, else listening on opts->addr
 * when that is an address of this machine, else on all addresses. Refuses an empty
 * token when world_size > 1 unless opts->insecure. Connections owe a hello within
 * opts->hello_timeout_s; those that have not said it do not count towards the client
 * limit and are the first dropped when connections or fds run short. The server is owned
 * by the caller and stopped with dsl_store_server_free().
 */
int dsl_store_server_start(struct dsl_store_server **out, const struct dsl_store_opts *o,
                           char *err);
int dsl_store_server_port(const struct dsl_store_server *s);
/** A snapshot of the server's counters. */
void dsl_store_server_stats(struct dsl_store_server *s, struct dsl_store_stats *out);
void dsl_store_server_free(struct dsl_store_server *s);

/**
 * Connect and say hello, retrying refused connections and hellos that got no answer
 * (reset, closed, or silent for 10 s) with backoff until the timeout. A refusal (wrong
 * token, job or version) is final.
 */
int dsl_store_connect(struct dsl_store **out, const struct dsl_store_opts *o, char *err);
/**
 * Rank 0 starts the server and connects to it; other ranks connect. The server, if
 * any, is owned by the returned client and stopped by dsl_store_free() after the other
 * ranks have disconnected (bounded by the timeout).
 */
int dsl_store_open(struct dsl_store **out, const struct dsl_store_opts *o, char *err);
void dsl_store_free(struct dsl_store *st);
/**
 * How long dsl_store_free() on the hosting rank may wait for the other clients to
 * disconnect: at most the store timeout (the default), 0 for not at all.
 */
void dsl_store_set_linger(struct dsl_store *st, double seconds);

int dsl_store_set(struct dsl_store *st, const char *key, const void *val, size_t len);
/** Block until key exists (bounded by the timeout). *val is malloc'd, owned by caller. */
int dsl_store_get(struct dsl_store *st, const char *key, void **val, size_t *len);
/** Atomically add delta to the integer at key (missing = 0); *result gets the new value. */
int dsl_store_add(struct dsl_store *st, const char *key, int64_t delta, int64_t *result);
/** Block until every key exists. */
int dsl_store_wait(struct dsl_store *st, const char *const *keys, size_t nkeys);
int dsl_store_delete(struct dsl_store *st, const char *key);
/** Barrier of all world_size ranks, named so that several can be used in sequence. */
int dsl_store_barrier(struct dsl_store *st, const char *name);
/** Text of the last failure on this client. */
const char *dsl_store_last_error(const struct dsl_store *st);

#endif
