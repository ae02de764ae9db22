/*
 * The tcp engine's interface (comm_tcp.c): the state of the tcp backend and the plans
 * and engine that every path of it sits on: the socket plans and setup
 * (comm_tcp_backend.c), the same-host path (comm_cma.c) and the shared buffers
 * (comm_shmbuf.c). The engine calls none of them, so they may all call it.
 */
#ifndef DSL_COMM_TCP_H
#define DSL_COMM_TCP_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "comm_impl.h"

enum algo { ALGO_AUTO, ALGO_RING, ALGO_MESH };

enum rg_kind { RG_PLAIN, RG_RING, RG_MESH };

struct region {
    char *buf;
    size_t len, done;
    const size_t *avail; /* send: bytes ready to go (NULL: all) */
    enum rg_kind kind;   /* recv: what to do as bytes arrive */
    int tag;             /* ring: the step */
    size_t wrap;         /* recv: nonzero: buf is a window of this many bytes, reused
                            from its start once full (the ring's in-cache scratch) */
};

struct queue {
    struct region *r;
    int n, i;
};

struct peer {
    int fd;
    char name[128]; /* "rank 1 (127.0.0.1:40000)" */
    struct queue send, recv;
};

struct tcp {
    struct peer *peer; /* [world]; peer[rank].fd = -1 */
    int maxq;          /* regions per queue */
    struct pollfd *pfd;
    int *pfd_peer;
    enum algo algo;
    size_t small_max; /* bytes: direct algorithm up to here */
    size_t recv_win;  /* ring and mesh: bytes of the in-cache window a reduce-scatter
                         receives each peer's data into (0: the whole segment) */
    size_t cma_min;   /* allreduce: same-host path above this many bytes */
    size_t shm_small; /* collectives up to this size go through the shared segment */
    double spin_s;    /* busy-poll this long before sleeping in poll() */
    double spin_cur;  /* the current (adaptive) spin budget, <= spin_s */
    int bulk;         /* this plan moves more than small_max bytes: the engine does not
                         spin (reset by dsl_tcp_plan_reset) */
    int oversubscribed; /* same host, more ranks than cores: waiters yield the core */

    /* same-host path: read peers' buffers with process_vm_readv (see cma_*) */
    int cma;              /* every peer is readable: use it for large messages */
    pid_t *pid;           /* [world] */
    uint64_t *cookie_at;  /* [world]: where each peer's cookie lives */
    uint64_t cookie;      /* read by peers at open to prove they can */
    uint64_t *addrs;      /* [world * 2]: this call's send/recv addresses */
    size_t cma_chunk;     /* bytes read from each peer per reduction step */
    size_t stream_min;    /* zero-copy allreduce: streaming stores from this many bytes */
    char *cma_scratch;
    size_t cma_scratch_cap;
    void **zc_send, **zc_recv; /* [world]: this call's buffers, mapped here */
    int shmbuf;           /* dsl_comm_alloc() gives memory every peer maps (comm_shmbuf.c) */
    struct shmbuf_reg *shmbuf_reg;
    void *shm;            /* the rounds' shared segment (comm_cma.c), or NULL */
    size_t shm_len;
    uint32_t seq;         /* rounds done */
    unsigned small_calls; /* collectives done in the segment's data slots */

    /* scratch, allocated and touched on growth */
    char *scratch;
    size_t scratch_cap;
    char *work;
    size_t work_cap;
    void *tree_tmp;

    /* the current plan's reduction state */
    enum dsl_dtype dtype;
    enum dsl_redop op;
    size_t esz;
    size_t *ring_reduced; /* [world]: bytes summed at RS step k */
    char **ring_dst;
    const char **ring_src;
    size_t mesh_reduced;
    size_t mesh_len;
    size_t mesh_win;       /* nonzero: each peer's contribution arrives in a window of this
                              many bytes, at most this far ahead of mesh_reduced */
    char *mesh_dst;
    const char **mesh_src; /* [world]: contributions to this rank's segment */
    struct region **mesh_rg; /* [world]: the RS receive region of each peer */
    const void **srcv;       /* [world]: tree-reduce inputs */
};

/* Grow a scratch buffer to need bytes, touching every page once. */
int dsl_tcp_ensure(struct dsl_comm *c, char **buf, size_t *cap, size_t need);
/* Empty every peer's queues and set the element type of the plan. */
void dsl_tcp_plan_reset(struct dsl_comm *c, struct tcp *t, enum dsl_dtype dt, enum dsl_redop op);
/* Append a region to peer p's send (recv) queue; the region lives until the next reset. */
struct region *dsl_tcp_plan_send(struct tcp *t, int p, const void *buf, size_t len,
                                 const size_t *avail);
struct region *dsl_tcp_plan_recv(struct tcp *t, int p, void *buf, size_t len, enum rg_kind k,
                                 int tag);
/* The window (bytes, a multiple of 64) the ring receives a segment of len bytes into. */
size_t dsl_tcp_ring_window(const struct tcp *t, size_t len);
/* Record whether a spin ended with the awaited event (adapts spin_cur). */
void dsl_tcp_spin_paid(struct tcp *t, int paid);
/* Move every planned region, bounded by the communicator timeout. */
int dsl_tcp_engine_run(struct dsl_comm *c, struct tcp *t, const char *what);
/* Byte offset and length of shard j of n elements. */
void dsl_tcp_seg(size_t n, int j, int w, size_t esz, size_t *off, size_t *len);
/* The direct algorithm (everyone to everyone, local tree sum). */
int dsl_tcp_run_direct(struct dsl_comm *c, struct tcp *t, const struct dsl_comm_call *k);

/* Is peer q's process gone? (reads its cookie with process_vm_readv: ESRCH) */
int dsl_tcp_peer_dead(struct tcp *t, int q);
/* The first peer whose process is gone, or -1. Needs the pids and cookie addresses
 * that dsl_cma_probe filled in. */
int dsl_tcp_find_dead(struct dsl_comm *c, struct tcp *t);

#endif
