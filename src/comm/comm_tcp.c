/*
 * The tcp engine: moves planned regions between this rank and its peers over the
 * job's sockets, reducing as bytes arrive. Interface: comm_tcp.h.
 *
 * Theory of operation. A collective is compiled (by comm_tcp_backend.c, or by
 * comm_cma.c for its synchronisation rounds) into a plan: for each peer, an ordered
 * list of send regions and an ordered list of receive regions (a region is a buffer
 * slice). A send region may depend on a progress counter (bytes of it that are ready);
 * a receive region may trigger a reduction hook as bytes arrive (the ring's step sum,
 * or the mesh's tree sum once a chunk has arrived from everyone). One engine
 * (dsl_tcp_engine_run) then drives all sockets with non-blocking send/recv and poll()
 * until every region is done, so sending, receiving and summing overlap at chunk
 * granularity and nothing is copied except into its destination. A reduce-scatter
 * receives into a small window per peer (region.wrap, DSL_COMM_RECV_WIN) that stays in
 * cache and is summed from there into the destination as bytes arrive; the mesh reads
 * no peer more than a window ahead of its sum. Bulk plans (struct tcp.bulk) sleep in
 * poll() at once when nothing moves; small ones spin first. The direct plan
 * (everyone sends everything to everyone, then a local sum in the tree order of
 * comm.h) lives here too, because the same-host path uses it to agree at open.
 *
 * The engine knows nothing of the paths built on it: it calls only the shared
 * arithmetic of comm_reduce.c, never back into comm_cma.c or the backend. What it
 * needs of the same-host setup is data in struct tcp (the peers' pids and cookie
 * addresses that dsl_cma_probe filled in), which is enough to tell whether a peer's
 * process is gone (dsl_tcp_find_dead) and to blame that peer for a failure.
 *
 * Failures: EOF or reset on a socket that still has work yields DSL_EPEER naming the
 * rank; poll() running past the deadline yields DSL_ETIMEDOUT naming the ranks whose
 * data was still awaited. The engine runs in the caller's thread or in comm.c's
 * progress thread, never both at once. Scratch buffers are allocated and touched once,
 * on first use or growth, never per call.
 */
#define _GNU_SOURCE /* POLLRDHUP, process_vm_readv */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/parse.h"
#include "comm_impl.h"
#include "comm_reduce.h"
#include "comm_tcp.h"
#include "dslaunch/common/banned.h"

#define IO_MAX ((size_t)1 << 20)
#define SUM_CHUNK ((size_t)128 << 10)

/* ---- scratch ---- */

int dsl_tcp_ensure(struct dsl_comm *c, char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    free(*buf);
    *buf = NULL;
    *cap = 0;
    char *p = malloc(need);
    if (!p)
        return dsl_seterr(c->err, -ENOMEM, "cannot allocate %zu bytes of collective scratch",
                          need);
    memset(p, 0, need); /* fault the pages in now, not in the middle of a transfer */
    *buf = p;
    *cap = need;
    return 0;
}

/* ---- plans ---- */

void dsl_tcp_plan_reset(struct dsl_comm *c, struct tcp *t, enum dsl_dtype dt, enum dsl_redop op)
{
    for (int p = 0; p < c->world; p++) {
        t->peer[p].send.n = t->peer[p].send.i = 0;
        t->peer[p].recv.n = t->peer[p].recv.i = 0;
    }
    t->dtype = dt;
    t->op = op;
    t->esz = dsl_dtype_size(dt);
    t->mesh_reduced = 0;
    t->mesh_win = 0;
    t->bulk = 0;
    t->mesh_len = 0;
}

static struct region *add_region(struct tcp *t, struct queue *q, void *buf, size_t len)
{
    if (q->n >= t->maxq)
        DSL_BUG("tcp plan: too many regions");
    struct region *rg = &q->r[q->n++];
    *rg = (struct region){.buf = buf, .len = len};
    return rg;
}

struct region *dsl_tcp_plan_send(struct tcp *t, int p, const void *buf, size_t len,
                                 const size_t *avail)
{
    struct region *rg = add_region(t, &t->peer[p].send, (void *)(uintptr_t)buf, len);
    rg->avail = avail;
    return rg;
}

struct region *dsl_tcp_plan_recv(struct tcp *t, int p, void *buf, size_t len,
                                 enum rg_kind k, int tag)
{
    struct region *rg = add_region(t, &t->peer[p].recv, buf, len);
    rg->kind = k;
    rg->tag = tag;
    return rg;
}

/* ---- reduction hooks (run as bytes arrive) ---- */

static size_t chunk_floor(size_t done, size_t len)
{
    return done == len ? len : done / SUM_CHUNK * SUM_CHUNK;
}

/*
 * A ring step received into a window (rg->wrap) sums every complete element at once,
 * while the bytes are still in cache and before the window is written again; the
 * window is a multiple of every element size and each recv stops at its end, so no
 * element straddles the wrap and [red, upto) lies in one pass of the window.
 */
static void hook_ring(struct tcp *t, const struct region *rg)
{
    size_t *red = &t->ring_reduced[rg->tag];
    size_t upto = rg->wrap ? (rg->done == rg->len ? rg->len : rg->done - rg->done % t->esz)
                           : chunk_floor(rg->done, rg->len);
    if (upto <= *red)
        return;
    const char *in = rg->buf + (rg->wrap ? *red % rg->wrap : *red);
    dsl_comm_combine(t->ring_dst[rg->tag] + *red, t->ring_src[rg->tag] + *red, in,
                     (upto - *red) / t->esz, t->dtype, t->op);
    *red = upto;
}

size_t dsl_tcp_ring_window(const struct tcp *t, size_t len)
{
    return t->recv_win && len > t->recv_win ? t->recv_win : len;
}

/*
 * The mesh sums a range once it has arrived from every peer. With windows (mesh_win)
 * it sums every complete element at once, in pieces that stop at the window's end
 * (the window is a multiple of every element size), and no peer is read further than
 * a window ahead of the sum (see the engine), so nothing is overwritten unsummed.
 */
static void hook_mesh(struct dsl_comm *c, struct tcp *t)
{
    size_t m = t->mesh_len, win = t->mesh_win;
    for (int p = 0; p < c->world; p++)
        if (p != c->rank && t->mesh_rg[p]->done < m)
            m = t->mesh_rg[p]->done;
    size_t upto = win ? (m == t->mesh_len ? m : m - m % t->esz) : chunk_floor(m, t->mesh_len);
    const void **s = t->srcv;
    while (t->mesh_reduced < upto) {
        size_t at = t->mesh_reduced, n = upto - at, woff = win ? at % win : at;
        if (win && n > win - woff)
            n = win - woff;
        for (int p = 0; p < c->world; p++)
            s[p] = p == c->rank ? t->mesh_src[p] + at : t->mesh_src[p] + woff;
        dsl_comm_tree_reduce(t->mesh_dst + at, s, c->world, n / t->esz, t->dtype, t->op,
                             t->tree_tmp);
        t->mesh_reduced = at + n;
    }
}

/* ---- the engine ---- */

static int peer_pending(const struct peer *pe)
{
    return pe->send.i < pe->send.n || pe->recv.i < pe->recv.n;
}

static void skip_done(struct queue *q)
{
    while (q->i < q->n && q->r[q->i].done == q->r[q->i].len)
        q->i++;
}


static int fail_peer(struct dsl_comm *c, const struct peer *pe, const char *what, int err)
{
    struct tcp *t = c->impl;
    int dead = t->cma ? dsl_tcp_find_dead(c, t) : -1;
    if (dead >= 0 && &t->peer[dead] != pe) /* pe only gave up because of dead */
        pe = &t->peer[dead];
    if (err == -ECONNRESET || err == -EPIPE || err == 0)
        return dsl_seterr(c->err, DSL_EPEER, "%s closed the connection during %s", pe->name,
                          what);
    return dsl_seterr(c->err, DSL_EPEER, "%s: connection failed during %s: %s", pe->name, what,
                      strerror(-err));
}

static int fail_timeout(struct dsl_comm *c, struct tcp *t, const char *what)
{
    struct dsl_dynbuf b;
    int n = 0;
    dsl_dynbuf_init(&b, 400);
    for (int p = 0; p < c->world; p++) {
        struct peer *pe = &t->peer[p];
        if (p == c->rank || pe->recv.i >= pe->recv.n)
            continue;
        if (dsl_dynbuf_addf(&b, "%s%s", n++ ? ", " : "", pe->name) < 0)
            break;
    }
    if (!n) { /* only sends left: the peers that are not reading */
        for (int p = 0; p < c->world; p++)
            if (p != c->rank && t->peer[p].send.i < t->peer[p].send.n &&
                dsl_dynbuf_addf(&b, "%s%s", n++ ? ", " : "", t->peer[p].name) < 0)
                break;
    }
    dsl_seterr(c->err, DSL_ETIMEDOUT, "%s timed out after %.1f s waiting for %s", what,
               c->timeout_s, n ? dsl_dynbuf_str(&b) : "(nobody)");
    dsl_dynbuf_release(&b);
    return DSL_ETIMEDOUT;
}

void dsl_tcp_spin_paid(struct tcp *t, int paid)
{
    /* adaptive: spin longer while spinning pays, back off while it does not (a loaded or
     * oversubscribed host), never below 1 us so that it can recover */
    if (paid)
        t->spin_cur = t->spin_cur * 2 < t->spin_s ? t->spin_cur * 2 : t->spin_s;
    else
        t->spin_cur = t->spin_cur / 2 > 1e-6 ? t->spin_cur / 2 : 1e-6;
}

/* Send what the peer's current send region has ready. 0, or the error. */
static int peer_send(struct dsl_comm *c, struct peer *pe, const char *what, short *ev,
                     int *progress)
{
    if (pe->send.i >= pe->send.n)
        return 0;
    struct region *rg = &pe->send.r[pe->send.i];
    size_t avail = rg->avail ? *rg->avail : rg->len;
    if (avail > rg->len)
        avail = rg->len;
    if (avail <= rg->done)
        return 0;
    size_t n = avail - rg->done;
    ssize_t w = send(pe->fd, rg->buf + rg->done, n < IO_MAX ? n : IO_MAX,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
        rg->done += (size_t)w;
        atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)w, memory_order_relaxed);
        *progress = 1;
    } else if (errno == EAGAIN || errno == EINTR) {
        *ev |= POLLOUT;
    } else {
        return fail_peer(c, pe, what, -errno);
    }
    return 0;
}

/* Receive into the peer's current recv region as far as its window allows; *held when
 * the window is full until the slower peers' data is summed. 0, or the error. */
static int peer_recv(struct dsl_comm *c, struct tcp *t, struct peer *pe, const char *what,
                     short *ev, int *held, int *progress)
{
    if (pe->recv.i >= pe->recv.n)
        return 0;
    struct region *rg = &pe->recv.r[pe->recv.i];
    size_t n = rg->len - rg->done;
    char *at = rg->buf + rg->done;
    if (rg->wrap) { /* up to the window's end, then from its start again */
        size_t off = rg->done % rg->wrap;
        at = rg->buf + off;
        if (n > rg->wrap - off)
            n = rg->wrap - off;
        /* the mesh: not past what is summed plus a window (the ring sums all
           it receives at once, so it is never ahead) */
        if (rg->kind == RG_MESH && n > t->mesh_reduced + rg->wrap - rg->done)
            n = t->mesh_reduced + rg->wrap - rg->done;
    }
    ssize_t got = n ? recv(pe->fd, at, n < IO_MAX ? n : IO_MAX, MSG_DONTWAIT) : -1;
    if (!n) {
        *held = 1; /* until the slower peers' data is summed: they wake us */
    } else if (got > 0) {
        rg->done += (size_t)got;
        *progress = 1;
        if (rg->kind == RG_RING)
            hook_ring(t, rg);
        else if (rg->kind == RG_MESH)
            hook_mesh(c, t);
    } else if (got == 0) {
        return fail_peer(c, pe, what, 0);
    } else if (errno == EAGAIN || errno == EINTR) {
        *ev |= POLLIN;
    } else {
        return fail_peer(c, pe, what, -errno);
    }
    return 0;
}

/* One non-blocking pass over every peer; fills t->pfd with the ones to wait for.
 * 0, or the error. */
static int engine_pass(struct dsl_comm *c, struct tcp *t, const char *what, int *progress,
                       int *busy, int *npfd)
{
    *progress = *busy = *npfd = 0;
    for (int p = 0; p < c->world; p++) {
        struct peer *pe = &t->peer[p];
        if (p == c->rank)
            continue;
        short ev = 0;
        int held = 0, r;
        skip_done(&pe->send);
        skip_done(&pe->recv);
        if ((r = peer_send(c, pe, what, &ev, progress)) < 0 ||
            (r = peer_recv(c, t, pe, what, &ev, &held, progress)) < 0)
            return r;
        skip_done(&pe->send);
        skip_done(&pe->recv);
        if (peer_pending(pe)) {
            *busy = 1;
            /* a peer read no further until the slower ones catch up: their data
               wakes us, not its (a hang-up shows once it is read again) */
            if (held && !ev && pe->send.i >= pe->send.n)
                continue;
            /* a send blocked only on a dependency needs no POLLOUT; still watch for
             * the peer going away */
            t->pfd[*npfd] = (struct pollfd){.fd = pe->fd, .events = (short)(ev | POLLRDHUP)};
            t->pfd_peer[(*npfd)++] = p;
        }
    }
    return 0;
}

/* Sleep in poll() on the npfd peers until one can move or the deadline; a peer that hung
 * up with nothing left to read fails the call. 0, or the error. */
static int engine_wait(struct dsl_comm *c, struct tcp *t, const char *what, int npfd,
                       int timeout_ms, double deadline)
{
    int n = poll(t->pfd, (nfds_t)npfd, timeout_ms);
    if (n < 0 && errno != EINTR)
        return dsl_seterr(c->err, -errno, "%s: poll: %s", what, strerror(errno));
    if (n == 0 && dsl_now() >= deadline)
        return fail_timeout(c, t, what);
    for (int i = 0; i < n && i < npfd; i++) {
        short re = t->pfd[i].revents;
        struct peer *pe = &t->peer[t->pfd_peer[i]];
        /* hang-up with nothing left to read: the peer is gone */
        if ((re & (POLLHUP | POLLERR)) && !(re & POLLIN))
            return fail_peer(c, pe, what, (re & POLLERR) ? -ECONNRESET : 0);
        if ((re & POLLRDHUP) && !(re & POLLIN) && !(t->pfd[i].events & POLLOUT))
            return fail_peer(c, pe, what, 0);
    }
    return 0;
}

int dsl_tcp_engine_run(struct dsl_comm *c, struct tcp *t, const char *what)
{
    double deadline = dsl_now() + c->timeout_s;
    double idle_since = 0;

    for (;;) {
        int progress, busy, npfd, r;
        if ((r = engine_pass(c, t, what, &progress, &busy, &npfd)) < 0)
            return r;
        if (!busy)
            return 0;
        if (progress) {
            if (idle_since != 0)
                dsl_tcp_spin_paid(t, 1);
            idle_since = 0;
            continue;
        }
        /* busy-poll a little before sleeping: a wake-up costs more than a short spin.
         * Not in bulk transfers: there the wait is for bandwidth, not a round trip, and
         * measured on a loaded 2-core host (docs/benchmarks.md, issue 17) the yields of
         * a 50 us spin cost a 256 KiB..1 MiB allreduce 2-10x its busbw, the peers'
         * work queueing behind whatever else the core runs */
        if (t->spin_cur > 0 && !t->bulk) {
            double now = dsl_now();
            if (idle_since == 0)
                idle_since = now;
            if (now - idle_since < t->spin_cur) {
                sched_yield();
                continue;
            }
            dsl_tcp_spin_paid(t, 0);
            idle_since = 0;
        }
        int timeout_ms = (int)((deadline - dsl_now()) * 1000.0) + 1;
        if (timeout_ms <= 0)
            return fail_timeout(c, t, what);
        if (!npfd) { /* only held peers: cannot last, the slowest is never held */
            sched_yield();
            continue;
        }
        if ((r = engine_wait(c, t, what, npfd, timeout_ms, deadline)) < 0)
            return r;
    }
}

/* ---- algorithms ---- */

void dsl_tcp_seg(size_t n, int j, int w, size_t esz, size_t *off, size_t *len)
{
    dsl_shard_of(n, j, w, off, len);
    *off *= esz;
    *len *= esz;
}

/* Direct: everyone sends everything to everyone, then sums locally in tree order. */
int dsl_tcp_run_direct(struct dsl_comm *c, struct tcp *t, const struct dsl_comm_call *k)
{
    size_t bytes = k->count * t->esz;
    int r;
    if ((r = dsl_tcp_ensure(c, &t->scratch, &t->scratch_cap, bytes * (size_t)c->world)) < 0)
        return r;
    for (int p = 0; p < c->world; p++) {
        if (p == c->rank)
            continue;
        dsl_tcp_plan_send(t, p, k->send, bytes, NULL);
        dsl_tcp_plan_recv(t, p, t->scratch + (size_t)p * bytes, bytes, RG_PLAIN, 0);
    }
    if ((r = dsl_tcp_engine_run(c, t, dsl_comm_kind_name(k->kind))) < 0)
        return r;
    const void **s = t->srcv;
    for (int p = 0; p < c->world; p++)
        s[p] = p == c->rank ? k->send : t->scratch + (size_t)p * bytes;
    dsl_comm_tree_reduce(k->recv, s, c->world, k->count, t->dtype, t->op, t->tree_tmp);
    return 0;
}

/* ---- peer liveness (same host) ---- */

int dsl_tcp_peer_dead(struct tcp *t, int q)
{
    uint64_t v;
    struct iovec l = {&v, sizeof(v)}, rv = {(void *)(uintptr_t)t->cookie_at[q], sizeof(v)};
    return process_vm_readv(t->pid[q], &l, 1, &rv, 1, 0) < 0 && errno == ESRCH;
}

int dsl_tcp_find_dead(struct dsl_comm *c, struct tcp *t)
{
    for (int q = 0; q < c->world; q++)
        if (q != c->rank && dsl_tcp_peer_dead(t, q))
            return q;
    return -1;
}
