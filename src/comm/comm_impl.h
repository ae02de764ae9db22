/*
 * Inside the communicator: the state every backend shares and the small ops table that
 * comm.c dispatches to (one table per backend: after open, comm.c runs every call, the
 * queue and the waits the same way whatever the backend). Only comm*.c include this.
 */
#ifndef DSL_COMM_IMPL_H
#define DSL_COMM_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/progress.h"
#include "dslaunch/common/rankenv.h"

enum dsl_comm_kind {
    DSL_COLL_ALLREDUCE,
    DSL_COLL_REDUCE_SCATTER,
    DSL_COLL_ALLGATHER,
    DSL_COLL_BROADCAST,
    DSL_COLL_BARRIER,
};

/* One collective call, as issued by the user. */
struct dsl_comm_call {
    enum dsl_comm_kind kind;
    const void *send;
    void *recv;
    size_t count;
    enum dsl_dtype dtype;
    enum dsl_redop op;
    int root;
};

struct dsl_comm_ops {
    const char *name;
    /*
     * Run one call. tcp: runs it to completion (bounded by c->timeout_s). nccl: enqueues
     * it on the communication stream. Failures fill c->err and return a negative code.
     */
    int (*run)(struct dsl_comm *c, const struct dsl_comm_call *call);
    /* nccl: wait until the stream has drained (bounded, polling async errors); else NULL. */
    int (*sync)(struct dsl_comm *c);
    /* Release the backend's state (c->impl). */
    void (*close)(struct dsl_comm *c);
    /* Nonzero: asynchronous calls run on comm.c's progress thread. */
    int threaded;
    /* dsl_comm_alloc/free; NULL: calloc/free of host memory (nccl's alloc answers NULL:
     * its collectives take device memory only) */
    void *(*alloc)(struct dsl_comm *c, size_t bytes);
    void (*free)(struct dsl_comm *c, void *p);
    /* nccl (NULL elsewhere): dsl_comm_wait as stream ordering, no host wait */
    int (*order)(struct dsl_comm *c, int req);
    /* nccl: dsl_comm_reserve, dsl_comm_stream_wait_host, dsl_comm_abort */
    int (*reserve)(struct dsl_comm *c, size_t bytes);
    int (*stream_wait)(struct dsl_comm *c, void *stream);
    void (*abort)(struct dsl_comm *c);
};

struct dsl_comm_queue_item {
    struct dsl_comm_call call;
    int req;
    uint64_t seq; /* the call's collective number (progress record) */
};

struct dsl_comm {
    const struct dsl_comm_ops *ops;
    void *impl; /* the backend's state, owned by it */
    void *stage; /* cuda-tcp: the staging wrapper around the host backend (comm_cudahost.c) */
    int rank, world;
    struct dsl_rankenv env; /* the rank contract it was opened with */
    double timeout_s;
    int deterministic;
    int device;
    void *compute_stream;    /* nccl: the caller's cudaStream_t; NULL: legacy default */
    struct dsl_store *store; /* owned; NULL at world size 1 */
    _Atomic uint64_t bytes_sent;
    int failed;              /* first fatal error; sticky */
    char err[DSL_ERR_LEN];   /* last error text */

    /* Progress record (common/progress.h), NULL when the rank reports none: every call
     * gets the next number; entering and leaving it are one store each. */
    struct dsl_progress_rec *prog;
    uint64_t coll_seq;             /* numbers handed out so far */
    uint64_t open_seq;             /* nccl: enqueued, left when the stream drains */
    enum dsl_comm_kind open_kind;
    /* a call that needs every rank's data completed: every rank is past its open and
     * has no more use for the store, so closing need not wait for them */
    int all_joined;

    /* Asynchronous calls (threaded backends): a FIFO executed by one progress thread. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int thread_started, stopping;
    struct dsl_comm_queue_item *q;
    size_t q_head, q_len, q_alloc; /* ring buffer */
    int issued, completed;         /* request numbers: 1, 2, ... */
};

/* Backends: fill c->ops and c->impl, or return a negative code with c->err set. */
int dsl_comm_tcp_open(struct dsl_comm *c);
/**
 * Read a peer's hello from fd, the first bytes a connection to a rank's mesh port sends
 * (magic, rank, world, token): the peer's rank, DSL_ETOKEN for another job's token, or
 * DSL_EPROTO for anything else, including silence past deadline. The tcp backend's, out
 * of line for its fuzz target.
 */
int dsl_comm_tcp_read_hello(int fd, int world, const char *token, double deadline);
#ifdef DSL_HAVE_CUDA
int dsl_comm_nccl_open(struct dsl_comm *c);
int dsl_comm_nccl_available(void);
/* cuda-tcp: wrap the host backend c was just opened with (tcp, or the world-1 copies)
 * so that its collectives take device buffers, staged through host memory */
int dsl_comm_cudahost_wrap(struct dsl_comm *c);
#endif

#endif
