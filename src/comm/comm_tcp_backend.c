/*
 * The tcp backend: collectives on CPU buffers over a full mesh of TCP connections, or
 * through same-host memory when every rank shares this host.
 *
 * Theory of operation. At open every rank listens on an ephemeral port, publishes
 * "addr:port" in the store (the address it reaches MASTER_ADDR from), connects to every
 * lower rank and accepts every higher one; each connection starts with a hello
 * (magic, rank, world, job token), so a stray connection is dropped. Sockets are
 * non-blocking, TCP_NODELAY, with the kernel's autotuned buffers (DSL_COMM_SOCKBUF sets
 * fixed ones instead; see below why not by default). Then the same-host probe
 * (comm_cma.c) decides, for all ranks alike, whether the same-host path is on.
 *
 * Each call picks its path here: small collectives in the shared segment's slots, large
 * ones through the same-host path (comm_cma.c), everything else as a socket plan that
 * the engine (comm_tcp.c) moves:
 *
 *  - direct (dsl_tcp_run_direct, kept in the engine because the same-host probes use
 *    it too): every rank sends its whole buffer to every peer and sums locally in the
 *    tree order of comm.h: one round trip, for small messages (latency);
 *  - ring: reduce-scatter then all-gather around the ring r -> r+1; the segment a rank
 *    forwards at step k+1 is the one it received and summed at step k, chunk by chunk,
 *    so all steps stream through at once (bandwidth, default for large messages);
 *  - mesh: each rank receives its own segment from every peer and sums it in the tree
 *    order as soon as a chunk has arrived from everyone, then sends the result to every
 *    peer (the deterministic mode, also selectable with DSL_COMM_ALGO=mesh).
 *
 * Direct and mesh sum every element in the balanced pairwise tree over ranks; ring sums
 * in ring order (repeatable too, but not the tree). When all ranks share this host,
 * the sockets carry only the same-host path's synchronisation rounds, if even those.
 *
 * Layering: this file is the top of the backend. It calls down into the engine, the
 * same-host path and the shared buffers; none of them calls back up here, and the only
 * way in from comm.c is dsl_comm_tcp_open and the ops table it installs.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/common/parse.h"
#include "store.h"
#include "dslaunch/common/xalloc.h"
#include "comm_impl.h"
#include "comm_cma.h"
#include "comm_reduce.h"
#include "comm_shmbuf.h"
#include "comm_tcp.h"
#include "dslaunch/common/banned.h"

#define TCP_MAGIC 0x44534C54u /* "DSLT" */

static int mod(int a, int w)
{
    return ((a % w) + w) % w;
}

/*
 * Mesh reduce-scatter into own_dst (this rank's segment), then (do_ag) all-gather of
 * every segment into accum (laid out like the full buffer).
 */
static int plan_mesh(struct dsl_comm *c, struct tcp *t, const char *src, char *accum,
                     char *own_dst, size_t n, int do_rs, int do_ag)
{
    int w = c->world, me = c->rank, r;
    size_t esz = t->esz, moff, mlen;
    dsl_tcp_seg(n, me, w, esz, &moff, &mlen);
    if (do_rs) {
        size_t win = dsl_tcp_ring_window(t, mlen);
        if ((r = dsl_tcp_ensure(c, &t->scratch, &t->scratch_cap, win * (size_t)w)) < 0)
            return r;
        t->mesh_len = mlen;
        t->mesh_win = win < mlen ? win : 0;
        t->mesh_dst = own_dst;
        for (int p = 0; p < w; p++) {
            size_t off, len;
            if (p == me) {
                t->mesh_src[p] = src + moff;
                continue;
            }
            dsl_tcp_seg(n, p, w, esz, &off, &len);
            dsl_tcp_plan_send(t, p, src + off, len, NULL);
            t->mesh_src[p] = t->scratch + (size_t)p * win;
            t->mesh_rg[p] = dsl_tcp_plan_recv(t, p, t->scratch + (size_t)p * win, mlen, RG_MESH, 0);
            t->mesh_rg[p]->wrap = t->mesh_win;
        }
    }
    if (do_ag) {
        for (int p = 0; p < w; p++) {
            size_t off, len;
            if (p == me)
                continue;
            dsl_tcp_seg(n, p, w, esz, &off, &len);
            dsl_tcp_plan_send(t, p, own_dst, mlen, do_rs ? &t->mesh_reduced : NULL);
            dsl_tcp_plan_recv(t, p, accum + off, len, RG_PLAIN, 0);
        }
    }
    return 0;
}

/* Where segment j of the result lives: this rank's own segment may be elsewhere. */
static char *seg_dst(char *accum, char *own_dst, size_t n, int j, int me, int w, size_t esz)
{
    size_t off, len;
    if (j == me)
        return own_dst;
    dsl_tcp_seg(n, j, w, esz, &off, &len);
    return accum + off;
}

/* Ring reduce-scatter (+ all-gather): see the theory of operation. */
static int plan_ring(struct dsl_comm *c, struct tcp *t, const char *src, char *accum,
                     char *own_dst, size_t n, int do_ag)
{
    int w = c->world, me = c->rank, right = mod(me + 1, w), left = mod(me - 1, w), r;
    size_t esz = t->esz, off, len, maxseg = dsl_shard_size(n, w) * esz;
    size_t win = dsl_tcp_ring_window(t, maxseg);
    if ((r = dsl_tcp_ensure(c, &t->scratch, &t->scratch_cap, win)) < 0)
        return r;
    for (int k = 0; k < w - 1; k++) {
        int a = mod(me - k - 1, w), b = mod(me - k - 2, w);
        dsl_tcp_seg(n, a, w, esz, &off, &len);
        if (k == 0)
            dsl_tcp_plan_send(t, right, src + off, len, NULL);
        else
            dsl_tcp_plan_send(t, right, seg_dst(accum, own_dst, n, a, me, w, esz), len,
                      &t->ring_reduced[k - 1]);
        dsl_tcp_seg(n, b, w, esz, &off, &len);
        t->ring_src[k] = src + off;
        t->ring_reduced[k] = 0;
        t->ring_dst[k] = seg_dst(accum, own_dst, n, b, me, w, esz);
        dsl_tcp_plan_recv(t, left, t->scratch, len, RG_RING, k)->wrap = len > win ? win : 0;
    }
    if (do_ag) {
        struct region *prev = NULL;
        for (int k = 0; k < w - 1; k++) {
            int a = mod(me - k, w), b = mod(me - k - 1, w);
            dsl_tcp_seg(n, a, w, esz, &off, &len);
            dsl_tcp_plan_send(t, right, seg_dst(accum, own_dst, n, a, me, w, esz), len,
                      k == 0 ? &t->ring_reduced[w - 2] : &prev->done);
            dsl_tcp_seg(n, b, w, esz, &off, &len);
            prev = dsl_tcp_plan_recv(t, left, seg_dst(accum, own_dst, n, b, me, w, esz), len,
                             RG_PLAIN, 0);
        }
    }
    return 0;
}

/*
 * The ring unless asked otherwise. At world 2 ring and mesh are the same exchange; from
 * 3 ranks on they move the same bytes per rank, and measured side by side on one 2-core
 * host at worlds 3 and 4, 64 KiB..64 MiB (docs/benchmarks.md, issue 17), neither won
 * consistently, so the ring, which talks to two peers whatever the world, stays.
 */
static int use_mesh(struct dsl_comm *c, struct tcp *t)
{
    return c->deterministic || t->algo == ALGO_MESH;
}

static int tcp_run_once(struct dsl_comm *c, const struct dsl_comm_call *k)
{
    struct tcp *t = c->impl;
    const char *what = dsl_comm_kind_name(k->kind);
    int w = c->world, me = c->rank, r;
    dsl_tcp_plan_reset(c, t, k->dtype, k->op);
    size_t bytes = k->count * t->esz, moff, mlen;
    dsl_tcp_seg(k->count, me, w, t->esz, &moff, &mlen);

    if (bytes == 0 && k->kind != DSL_COLL_BARRIER)
        return 0;
    if (t->shm && bytes <= t->shm_small)
        return dsl_cma_small_run(c, t, k);
    if (t->cma && bytes > t->small_max && k->kind != DSL_COLL_BARRIER &&
        (k->kind != DSL_COLL_ALLREDUCE || bytes > t->cma_min))
        return dsl_cma_run(c, t, k);
    t->bulk = bytes > t->small_max;
    switch (k->kind) {
    case DSL_COLL_ALLREDUCE:
        if (bytes == 0)
            return 0;
        if (bytes <= t->small_max)
            return dsl_tcp_run_direct(c, t, k);
        if (use_mesh(c, t))
            r = plan_mesh(c, t, k->send, k->recv, (char *)k->recv + moff, k->count, 1, 1);
        else
            r = plan_ring(c, t, k->send, k->recv, (char *)k->recv + moff, k->count, 1);
        break;
    case DSL_COLL_REDUCE_SCATTER:
        if (bytes == 0)
            return 0;
        if (use_mesh(c, t) || bytes <= t->small_max) {
            r = plan_mesh(c, t, k->send, NULL, k->recv, k->count, 1, 0);
        } else {
            if ((r = dsl_tcp_ensure(c, &t->work, &t->work_cap, bytes)) < 0)
                return r;
            r = plan_ring(c, t, k->send, t->work, k->recv, k->count, 0);
        }
        break;
    case DSL_COLL_ALLGATHER:
        if (bytes == 0)
            return 0;
        if (mlen && (char *)k->recv + moff != (const char *)k->send)
            memmove((char *)k->recv + moff, k->send, mlen);
        r = plan_mesh(c, t, NULL, k->recv, (char *)k->recv + moff, k->count, 0, 1);
        break;
    case DSL_COLL_BROADCAST: {
        if (bytes == 0)
            return 0;
        int pos = mod(me - k->root, w);
        if (bytes <= t->small_max) { /* flat: the root sends to everyone */
            if (pos == 0) {
                for (int p = 0; p < w; p++)
                    if (p != me)
                        dsl_tcp_plan_send(t, p, k->recv, bytes, NULL);
            } else {
                dsl_tcp_plan_recv(t, k->root, k->recv, bytes, RG_PLAIN, 0);
            }
        } else { /* pipelined chain root -> root+1 -> ... */
            struct region *in = NULL;
            if (pos > 0)
                in = dsl_tcp_plan_recv(t, mod(me - 1, w), k->recv, bytes, RG_PLAIN, 0);
            if (pos < w - 1)
                dsl_tcp_plan_send(t, mod(me + 1, w), k->recv, bytes, in ? &in->done : NULL);
        }
        r = 0;
        break;
    }
    case DSL_COLL_BARRIER: {
        static const char one = 1;
        char *sink;
        if ((r = dsl_tcp_ensure(c, &t->scratch, &t->scratch_cap, (size_t)w)) < 0)
            return r;
        sink = t->scratch;
        for (int p = 0; p < w; p++) {
            if (p == me)
                continue;
            dsl_tcp_plan_send(t, p, &one, 1, NULL);
            dsl_tcp_plan_recv(t, p, sink + p, 1, RG_PLAIN, 0);
        }
        r = 0;
        break;
    }
    default:
        return dsl_seterr(c->err, -EINVAL, "tcp: unknown collective");
    }
    if (r < 0)
        return r;
    return dsl_tcp_engine_run(c, t, what);
}

static int tcp_run(struct dsl_comm *c, const struct dsl_comm_call *k)
{
    int r = tcp_run_once(c, k);
    if (r < 0) /* peers waiting for this rank in shared memory learn it at once */
        dsl_cma_mark_failed(c, c->impl);
    return r;
}

/* ---- setup ---- */

static void tcp_close(struct dsl_comm *c)
{
    struct tcp *t = c->impl;
    if (!t)
        return;
    /* no peers yet when the open failed on its settings (a bad DSL_COMM_* knob) */
    for (int p = 0; t->peer && p < c->world; p++) {
        if (t->peer[p].fd >= 0)
            close(t->peer[p].fd);
        free(t->peer[p].send.r);
        free(t->peer[p].recv.r);
    }
    free(t->peer);
    free(t->pfd);
    free(t->pfd_peer);
    free(t->scratch);
    free(t->work);
    free(t->tree_tmp);
    free(t->ring_reduced);
    free(t->ring_dst);
    free(t->ring_src);
    free(t->mesh_src);
    free(t->mesh_rg);
    free(t->srcv);
    free(t->pid);
    free(t->cookie_at);
    free(t->addrs);
    free(t->cma_scratch);
    free(t->zc_send);
    free(t->zc_recv);
    dsl_shmbuf_close(c, t);
    if (t->shm)
        munmap(t->shm, t->shm_len);
    free(t);
    c->impl = NULL;
}

/* Shared buffers when every peer can map them, plain memory otherwise. */
static void *tcp_alloc(struct dsl_comm *c, size_t bytes)
{
    struct tcp *t = c->impl;
    void *p = t->shmbuf ? dsl_shmbuf_make(t, bytes) : NULL;
    return p ? p : calloc(bytes ? bytes : 1, 1);
}

static void tcp_free(struct dsl_comm *c, void *p)
{
    if (!dsl_shmbuf_free(c->impl, p))
        free(p);
}

static const struct dsl_comm_ops tcp_ops = {
    .name = "tcp", .run = tcp_run, .sync = NULL, .close = tcp_close, .threaded = 1,
    .alloc = tcp_alloc, .free = tcp_free,
};

/* The local address this host uses to reach MASTER_ADDR (a UDP connect sends nothing). */
static int local_addr_for(const char *master, char *out, size_t outlen, char *err)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *res = NULL;
    int gr = getaddrinfo(master, "9", &hints, &res);
    if (gr)
        return dsl_seterr(err, DSL_ECONNECT, "cannot resolve MASTER_ADDR '%s': %s", master,
                          gai_strerror(gr));
    struct sockaddr_in *sa = (struct sockaddr_in *)res->ai_addr;
    int r = 0;
    if ((ntohl(sa->sin_addr.s_addr) >> 24) == 127) {
        snprintf(out, outlen, "127.0.0.1");
    } else {
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in me;
        socklen_t ml = sizeof(me);
        if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) ||
            getsockname(fd, (struct sockaddr *)&me, &ml) ||
            !inet_ntop(AF_INET, &me.sin_addr, out, (socklen_t)outlen))
            r = dsl_seterr(err, DSL_ECONNECT, "no route to MASTER_ADDR '%s': %s", master,
                           strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    freeaddrinfo(res);
    return r;
}

struct hello {
    unsigned char b[12 + 2 + 1024];
    size_t len;
};

static void make_hello(struct hello *h, int rank, int world, const char *token)
{
    uint32_t v[3] = {htonl(TCP_MAGIC), htonl((uint32_t)rank), htonl((uint32_t)world)};
    size_t tn = strlen(token);
    if (tn > 1024)
        tn = 1024;
    uint16_t tl = htons((uint16_t)tn);
    memcpy(h->b, v, 12);
    memcpy(h->b + 12, &tl, 2);
    memcpy(h->b + 14, token, tn);
    h->len = 14 + tn;
}

int dsl_comm_tcp_read_hello(int fd, int world, const char *token, double deadline)
{
    uint32_t v[3];
    uint16_t tl;
    char tok[1025];
    if (dsl_net_read_all(fd, v, 12, deadline) < 0 || ntohl(v[0]) != TCP_MAGIC ||
        (int)ntohl(v[2]) != world || dsl_net_read_all(fd, &tl, 2, deadline) < 0)
        return DSL_EPROTO;
    size_t n = ntohs(tl);
    if (n > 1024 || dsl_net_read_all(fd, tok, n, deadline) < 0)
        return DSL_EPROTO;
    if (n != strlen(token) || CRYPTO_memcmp(tok, token, n) != 0) /* constant time */
        return DSL_ETOKEN;
    uint32_t rank = ntohl(v[1]);
    return rank < (uint32_t)world ? (int)rank : DSL_EPROTO;
}

static void tune_socket(int fd, int bufsize)
{
    dsl_net_set_nodelay(fd);
    if (bufsize > 0)
        dsl_net_set_bufsize(fd, bufsize);
}

/* a tuning knob from the environment (bytes, a count or microseconds) in [min, max] */
static int env_size(const char *name, size_t def, size_t min, size_t max, size_t *out,
                    char *err)
{
    const char *s = getenv(name);
    *out = def;
    if (s && *s && (dsl_parse_size(s, out) < 0 || *out < min || *out > max)) {
        char lo[32], hi[32];
        dsl_opt_format_size(lo, sizeof(lo), min);
        dsl_opt_format_size(hi, sizeof(hi), max);
        return dsl_seterr(err, DSL_EUSAGE, "bad %s: allowed %s..%s, got '%s'", name, lo,
                          max == SIZE_MAX ? "any size" : hi, s);
    }
    return 0;
}

/* Knobs read from the environment at open (DSL_COMM_*). */
struct tcp_knobs {
    size_t use_cma, spin, sockbuf;
};

static int tcp_read_knobs(struct dsl_comm *c, struct tcp *t, struct tcp_knobs *k)
{
    const char *algo = getenv("DSL_COMM_ALGO");
    int r;
    t->algo = ALGO_AUTO;
    if (algo && !strcmp(algo, "ring"))
        t->algo = ALGO_RING;
    else if (algo && !strcmp(algo, "mesh"))
        t->algo = ALGO_MESH;
    else if (algo && *algo && strcmp(algo, "auto"))
        return dsl_seterr(c->err, DSL_EUSAGE, "bad DSL_COMM_ALGO '%s' (ring, mesh or auto)", algo);
    /* thresholds may be anything (a huge one means never); the CMA chunk is a buffer,
       the spin budget a wait, the socket buffer memory: those have bounds */
    if ((r = env_size("DSL_COMM_SMALL", 16 << 10, 0, SIZE_MAX, &t->small_max, c->err)) < 0 ||
        (r = env_size("DSL_COMM_CMA", 1, 0, 1, &k->use_cma, c->err)) < 0 ||
        (r = env_size("DSL_COMM_CMA_MIN", 16 << 10, 0, SIZE_MAX, &t->cma_min, c->err)) < 0 ||
        (r = env_size("DSL_COMM_SHM_SMALL", 32 << 10, 0, SIZE_MAX, &t->shm_small, c->err)) <
            0 ||
        (r = env_size("DSL_COMM_CMA_CHUNK", 256 << 10, 4096, 64 << 20, &t->cma_chunk,
                      c->err)) < 0 ||
        (r = env_size("DSL_COMM_STREAM_MIN", 16 << 20, 0, SIZE_MAX, &t->stream_min, c->err)) <
            0 ||
        (r = env_size("DSL_COMM_SPIN_US", 50, 0, 1000000, &k->spin, c->err)) < 0 ||
        /* 0: autotuning. A fixed SO_RCVBUF is capped at net.core.rmem_max (often 4 MiB)
           and turns the receive window's autotuning off, while autotuning may grow it to
           tcp_rmem's maximum; measured interleaved at 16-256 MiB, worlds 2 and 4 over
           loopback (docs/benchmarks.md, issue 17), autotuning gave 10-20% more busbw
           from 64 MiB on than fixed 4 MiB buffers */
        (r = env_size("DSL_COMM_SOCKBUF", 0, 0, 1 << 30, &k->sockbuf, c->err)) < 0 ||
        (r = env_size("DSL_COMM_RECV_WIN", 256 << 10, 0, 1 << 30, &t->recv_win, c->err)) < 0)
        return r;
    if (k->sockbuf > (1u << 30))
        k->sockbuf = 1u << 30;
    return 0;
}

static void tcp_peers_alloc(struct tcp *t, int w)
{
    t->maxq = 2 * w + 2;
    t->peer = dsl_xcalloc((size_t)w, sizeof(*t->peer));
    for (int p = 0; p < w; p++) {
        t->peer[p].fd = -1;
        t->peer[p].send.r = dsl_xcalloc((size_t)t->maxq, sizeof(struct region));
        t->peer[p].recv.r = dsl_xcalloc((size_t)t->maxq, sizeof(struct region));
        snprintf(t->peer[p].name, sizeof(t->peer[p].name), "rank %d", p);
    }
    t->pfd = dsl_xcalloc((size_t)w, sizeof(*t->pfd));
    t->pfd_peer = dsl_xcalloc((size_t)w, sizeof(int));
    t->tree_tmp = dsl_xcalloc((size_t)(w / 2 + 1) * DSL_TREE_CHUNK, 4);
    t->ring_reduced = dsl_xcalloc((size_t)w, sizeof(size_t));
    t->ring_dst = dsl_xcalloc((size_t)w, sizeof(char *));
    t->ring_src = dsl_xcalloc((size_t)w, sizeof(char *));
    t->mesh_src = dsl_xcalloc((size_t)w, sizeof(char *));
    t->mesh_rg = dsl_xcalloc((size_t)w, sizeof(struct region *));
    t->srcv = dsl_xcalloc((size_t)w, sizeof(void *));
    t->pid = dsl_xcalloc((size_t)w, sizeof(pid_t));
    t->cookie_at = dsl_xcalloc((size_t)w, sizeof(uint64_t));
    t->addrs = dsl_xcalloc((size_t)w * 2, sizeof(uint64_t));
    t->zc_send = dsl_xcalloc((size_t)w, sizeof(void *));
    t->zc_recv = dsl_xcalloc((size_t)w, sizeof(void *));
}

/* Connect to rank p at its published "addr:port" (v, consumed) and say hello. */
static int tcp_dial_peer(struct dsl_comm *c, struct tcp *t, int p, char *v, const char *token,
                         int sockbuf, double deadline)
{
    char *colon = strrchr(v, ':');
    int port = 0, r;
    if (!colon || dsl_parse_int(colon + 1, 1, 65535, &port) < 0) {
        free(v);
        return dsl_seterr(c->err, DSL_EPROTO, "rank %d published a bad address", p);
    }
    *colon = '\0';
    int fd = dsl_net_connect(v, port, deadline - dsl_now(), c->err);
    free(v);
    if (fd < 0)
        return fd;
    t->peer[p].fd = fd;
    tune_socket(fd, sockbuf);
    struct hello h;
    make_hello(&h, c->rank, c->world, token);
    if ((r = dsl_net_write_all(fd, h.b, h.len, deadline)) < 0)
        return dsl_seterr(c->err, DSL_EPEER, "%s: cannot send hello: %s", t->peer[p].name,
                          dsl_strerror(r));
    return 0;
}

/* Publish this rank's listener (at val), learn every peer's address and dial the lower
 * ranks; errors name the rank. */
static int tcp_dial_lower(struct dsl_comm *c, struct tcp *t, const char *val, const char *token,
                          int sockbuf, double deadline)
{
    char key[64];
    int me = c->rank, r;
    snprintf(key, sizeof(key), "dsl/tcp/%d", me);
    if ((r = dsl_store_set(c->store, key, val, strlen(val))) < 0)
        return dsl_seterr(c->err, r, "%s", dsl_store_last_error(c->store));
    for (int p = 0; p < c->world; p++) {
        void *v = NULL;
        size_t vn;
        if (p == me) {
            snprintf(t->peer[p].name, sizeof(t->peer[p].name), "rank %d (%s)", p, val);
            continue;
        }
        snprintf(key, sizeof(key), "dsl/tcp/%d", p);
        if ((r = dsl_store_get(c->store, key, &v, &vn)) < 0)
            return dsl_seterr(c->err, r, "waiting for rank %d's address: %s", p,
                              dsl_store_last_error(c->store));
        snprintf(t->peer[p].name, sizeof(t->peer[p].name), "rank %d (%.100s)", p, (char *)v);
        if (p >= me)
            free(v);
        else if ((r = tcp_dial_peer(c, t, p, v, token, sockbuf, deadline)) < 0)
            return r;
    }
    return 0;
}

/* Accept the higher ranks; drop anything that does not say a proper hello. */
static int tcp_accept_higher(struct dsl_comm *c, struct tcp *t, int lfd, const char *token,
                             int sockbuf, double deadline)
{
    int w = c->world, me = c->rank;
    for (int need = w - 1 - me; need > 0;) {
        int fd = dsl_net_accept(lfd, deadline, c->err);
        if (fd < 0) {
            struct dsl_dynbuf b;
            dsl_dynbuf_init(&b, 300);
            for (int p = me + 1; p < w; p++)
                if (t->peer[p].fd < 0)
                    dsl_dynbuf_addf(&b, "%s%s", b.len ? ", " : "", t->peer[p].name);
            int r = dsl_seterr(c->err, DSL_ETIMEDOUT,
                               "connecting the mesh timed out waiting for %s", dsl_dynbuf_str(&b));
            dsl_dynbuf_release(&b);
            return r;
        }
        double hd = dsl_now() + 10 < deadline ? dsl_now() + 10 : deadline;
        int p = dsl_comm_tcp_read_hello(fd, w, token, hd);
        if (p <= me || t->peer[p].fd >= 0) {
            close(fd);
            continue;
        }
        tune_socket(fd, sockbuf);
        t->peer[p].fd = fd;
        need--;
    }
    return 0;
}

/* Bring the knobs into the ranges the engine relies on. */
static void tcp_clamp_knobs(struct tcp *t, size_t spin)
{
    t->cma_chunk = t->cma_chunk < 4096 ? 4096 : t->cma_chunk > (64u << 20) ? 64u << 20 : t->cma_chunk;
    t->cma_chunk &= ~(size_t)63;
    t->recv_win &= ~(size_t)63; /* a multiple of every element size */
    if (t->shm_small > DSL_CMA_SLOT)
        t->shm_small = DSL_CMA_SLOT;
    t->spin_s = (double)(spin > 1000000 ? 1000000 : spin) * 1e-6;
    t->spin_cur = t->spin_s;
}

int dsl_comm_tcp_open(struct dsl_comm *c)
{
    struct tcp *t = dsl_xcalloc(1, sizeof(*t));
    int w = c->world, me = c->rank, lfd = -1, r;
    const char *token = c->env.run_token;
    const char *master = c->env.master_addr;
    char addr[64], val[128];
    struct tcp_knobs k;
    double deadline = dsl_now() + c->timeout_s;

    c->impl = t;
    if (!token)
        token = "";
    if (!master || !*master)
        master = "127.0.0.1";
    if ((r = tcp_read_knobs(c, t, &k)) < 0)
        goto out;
    tcp_peers_alloc(t, w);
    if ((r = local_addr_for(master, addr, sizeof(addr), c->err)) < 0)
        goto out;
    /* listen only where the peers are told to connect: loopback for a job on one
     * machine, the interface that reaches MASTER_ADDR otherwise */
    if ((lfd = dsl_net_listen(addr, 0, w + 64, c->err)) < 0) {
        r = lfd;
        goto out;
    }
    if (k.sockbuf)
        dsl_net_set_bufsize(lfd, (int)k.sockbuf);
    snprintf(val, sizeof(val), "%s:%d", addr, dsl_net_local_port(lfd));
    if ((r = tcp_dial_lower(c, t, val, token, (int)k.sockbuf, deadline)) < 0 ||
        (r = tcp_accept_higher(c, t, lfd, token, (int)k.sockbuf, deadline)) < 0)
        goto out;
    for (int p = 0; p < w; p++)
        if (p != me)
            dsl_net_set_nonblock(t->peer[p].fd, 1);
    tcp_clamp_knobs(t, k.spin);
    c->ops = &tcp_ops;
    if (k.use_cma && (r = dsl_cma_probe(c, t)) < 0)
        goto out;
    r = 0;
out:
    if (lfd >= 0)
        close(lfd);
    if (r < 0)
        tcp_close(c);
    return r;
}
