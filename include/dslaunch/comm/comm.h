/*
 * Collective communication for data-parallel training.
 *
 * A communicator is opened from the env contract (RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT, DSLAUNCH_RUN_ID, DSLAUNCH_RUN_TOKEN) through the rendezvous store, with
 * one of two backends behind a small ops table: "tcp" (CPU buffers, ring and direct
 * algorithms over TCP, every multi-rank test) and "nccl" (device buffers, CUDA + NCCL).
 *
 * Sharding convention used by reduce_scatter and allgather (and by the trainer's ZeRO
 * arithmetic): n elements are cut into world_size shards of s = ceil(n / world)
 * elements; rank r owns [r*s, min(n, (r+1)*s)), which may be empty for the last ranks.
 * This is the same as padding n up to a multiple of world.
 *
 * Every call is bounded by the communicator timeout (DSLAUNCH_COMM_TIMEOUT seconds,
 * default 300): a collective that cannot finish returns DSL_ETIMEDOUT or DSL_EPEER and
 * dsl_comm_last_error() names the rank(s) it was waiting for. After such an error the
 * communicator is unusable except for dsl_comm_close().
 *
 * Deterministic mode (tcp backend): every sum is evaluated in one fixed order that
 * depends only on world size and data: the balanced pairwise tree over ranks in rank
 * order, (((r0 + r1) + (r2 + r3)) + ...), where each level adds neighbours (2i, 2i+1)
 * and an odd last element is carried up unchanged. Runs repeat bit for bit. (Small
 * allreduces and the same-host path sum in this order in every mode; only the ring used
 * for large messages over sockets does not.) Details: docs/collectives.md.
 *
 * fp16 and bf16 (both backends): allgather and broadcast move bytes; a reduction widens
 * each pair of elements to float, adds (or compares), and rounds the sum back to 16
 * bits to nearest even, once per pairwise addition, as NCCL does. On tcp the tree above
 * applies to 16-bit sums as well, with every inner node rounded to 16 bits.
 *
 * Asynchronous calls (dsl_comm_i*) are executed in the order they were issued, by one
 * progress thread (tcp) or on the communication stream (nccl); every rank must issue
 * the same sequence. Buffers must stay untouched until dsl_comm_wait() returns.
 */
#ifndef DSLAUNCH_COMM_H
#define DSLAUNCH_COMM_H

#include <stddef.h>
#include <stdint.h>

struct dsl_rankenv;

#include "dslaunch/common/dtype.h"

enum dsl_redop {
    DSL_SUM = 0,
    DSL_MAX = 1,
};

struct dsl_comm;

struct dsl_comm_opts {
    const char *backend; /* "tcp", "nccl", or NULL/"auto" (nccl when built and a GPU is there);
                            "cuda-tcp" (CUDA builds, tests): device buffers staged through
                            host memory into tcp, so several ranks may share one GPU */
    double timeout_s;    /* <= 0: DSLAUNCH_COMM_TIMEOUT or 300 */
    int deterministic;   /* tcp: fixed summation order */
    int device;          /* nccl: CUDA device to use (usually 0 of CUDA_VISIBLE_DEVICES) */
    const struct dsl_rankenv *env; /* the worker's rank contract, loaded once (NULL: the
                                      comm loads it); kept for the comm's lifetime */
};

/** Shard of n elements for rank (see the convention above). */
void dsl_shard_of(size_t n, int rank, int world, size_t *offset, size_t *len);
/** ceil(n / world): the padded shard size. */
size_t dsl_shard_size(size_t n, int world);

/**
 * Open a communicator from the environment. A missing WORLD_SIZE means world size 1
 * (no store, no sockets). On failure *out stays NULL and err says why.
 * The communicator owns its store connection and sockets until dsl_comm_close().
 */
int dsl_comm_open_env(struct dsl_comm **out, const struct dsl_comm_opts *o, char *err);
void dsl_comm_close(struct dsl_comm *c);

int dsl_comm_rank(const struct dsl_comm *c);
int dsl_comm_size(const struct dsl_comm *c);
const char *dsl_comm_backend(const struct dsl_comm *c); /* "tcp", "nccl" or "cuda-tcp" */
/** Text of the last failure, naming the rank(s) waited for; "" if none. */
const char *dsl_comm_last_error(const struct dsl_comm *c);
/** Payload bytes this rank has sent since open (both backends count by algorithm). */
uint64_t dsl_comm_bytes_sent(const struct dsl_comm *c);
/** The store of this job (for extra key exchange); owned by the communicator. */
struct dsl_store *dsl_comm_store(struct dsl_comm *c);
/** nccl: the communication cudaStream_t (as void *); tcp: NULL. */
void *dsl_comm_stream(struct dsl_comm *c);
/**
 * nccl: the CUDA stream the caller computes on (a cudaStream_t as void *; NULL, the
 * default, is the legacy default stream). Every collective starts after the work
 * queued on it before the call (an event, no host wait), and dsl_comm_wait() makes
 * that stream wait for the request (an event, no host wait). Other backends: ignored.
 */
void dsl_comm_set_compute_stream(struct dsl_comm *c, void *stream);
/**
 * Size the backend's scratch for collectives of up to bytes (count x element size)
 * now, at setup, so that no later collective allocates or frees (nccl: the padded
 * buffer of shards that do not divide evenly; a larger collective still works but
 * reallocates, after a bounded wait). Returns 0 or a negative code (out of device
 * memory) with the text in dsl_comm_last_error(). Other backends: 0.
 */
int dsl_comm_reserve(struct dsl_comm *c, size_t bytes);
/**
 * nccl: wait on the host until the work queued on stream (a cudaStream_t as void *,
 * the caller's compute stream) so far has finished, bounded by the comm timeout and
 * watching the communicator for a failed peer (ncclCommGetAsyncError); the collectives
 * the stream waits for complete with it. This is the safe way to wait for a stream
 * ordered after collectives: a plain cudaStreamSynchronize would hang on a dead peer.
 * Counts one host synchronisation (common/hostsync.h). Other backends: 0.
 */
int dsl_comm_stream_wait_host(struct dsl_comm *c, void *stream);
/**
 * Give up the communicator without waiting for the peers (nccl: ncclCommAbort, which
 * also ends a collective stuck on a dead peer). Call it on an error path before
 * freeing device memory that a collective may still use: cudaFree waits for every
 * kernel, a stuck NCCL kernel included. Later calls fail; dsl_comm_close() still frees.
 */
void dsl_comm_abort(struct dsl_comm *c);

/**
 * Zeroed host memory for collective buffers (tcp backend and world size 1; the nccl
 * backend returns NULL: use device memory there). When every rank runs on this host,
 * the memory is shared with the peers, and large collectives whose buffers all come
 * from here read and write the peers' buffers directly, with no copy through the
 * kernel (docs/collectives.md); any other memory works too, through copies. NULL on
 * failure. Free with dsl_comm_free() before dsl_comm_close(); close frees what is left.
 */
void *dsl_comm_alloc(struct dsl_comm *c, size_t bytes);
void dsl_comm_free(struct dsl_comm *c, void *p);

/* Blocking collectives. send == recv (in-place) is allowed everywhere. */
int dsl_comm_allreduce(struct dsl_comm *c, const void *send, void *recv, size_t count,
                       enum dsl_dtype t, enum dsl_redop op);
/** send holds count elements; recv receives this rank's shard (dsl_shard_of) of the sum.
 *  In-place: recv may equal send + offset of this rank's shard. */
int dsl_comm_reduce_scatter(struct dsl_comm *c, const void *send, void *recv, size_t count,
                            enum dsl_dtype t, enum dsl_redop op);
/** send holds this rank's shard of count elements; recv receives all count.
 *  In-place: send may equal recv + offset of this rank's shard. */
int dsl_comm_allgather(struct dsl_comm *c, const void *send, void *recv, size_t count,
                       enum dsl_dtype t);
int dsl_comm_broadcast(struct dsl_comm *c, void *buf, size_t count, enum dsl_dtype t, int root);
int dsl_comm_barrier(struct dsl_comm *c);

/* Asynchronous forms: issue now, complete in issue order. *req identifies the call. */
int dsl_comm_iallreduce(struct dsl_comm *c, const void *send, void *recv, size_t count,
                        enum dsl_dtype t, enum dsl_redop op, int *req);
int dsl_comm_ireduce_scatter(struct dsl_comm *c, const void *send, void *recv, size_t count,
                             enum dsl_dtype t, enum dsl_redop op, int *req);
int dsl_comm_iallgather(struct dsl_comm *c, const void *send, void *recv, size_t count,
                        enum dsl_dtype t, int *req);
/** Wait for one request (and, implicitly, every request issued before it). nccl: the
 *  compute stream (dsl_comm_set_compute_stream) is made to wait for it, the host does
 *  not: work queued afterwards sees the result; dsl_comm_stream_wait_host() or a
 *  blocking call observe completion and failures on the host. */
int dsl_comm_wait(struct dsl_comm *c, int req);

#endif
