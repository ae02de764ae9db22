/*
 * The tcp backend's same-host path: cross-memory attach.
 *
 * Theory of operation. When every rank runs on this host in one pid namespace (proved
 * at open by dsl_cma_probe: each rank reads a cookie out of every peer with
 * process_vm_readv, and all ranks agree through a tiny allreduce), large collectives
 * skip the sockets for data: each rank reads what it needs straight out of its peers'
 * buffers (one copy, no kernel networking), and two tiny rounds remain: buffer
 * addresses (everyone has arrived) and "I am done with you" (nobody returns and reuses
 * its buffers while a peer still reads or writes them). An allreduce reduces its
 * segment chunk by chunk from what it read and pushes each reduced chunk into every
 * peer's recv buffer with process_vm_writev while the chunk is in cache (only rank r
 * writes segment r anywhere, and a peer's send there is read only by rank r, before
 * the push, so in-place calls are safe). Reductions run over chunks read from every
 * peer in the tree order of comm.h, so this path is deterministic as well. Runs in
 * whichever thread runs the collective (caller or progress thread).
 *
 * The rounds go through a small shared-memory segment when it could be set up (one
 * cache line per rank: a round counter, a failed flag and the call's buffer addresses;
 * a round is "bump my counter, wake my waiters, wait for everyone's" with a short spin
 * and then futex waits in 10 ms slices, checking the deadline and whether a peer died
 * or failed between slices); otherwise over the sockets.
 *
 * Zero-copy. When every rank's buffers of a call come from dsl_comm_alloc() (shared
 * memfd buffers, comm_shmbuf.c), round 1 also carries where they lie, and every rank
 * addresses its peers' buffers directly instead of copying through the kernel: rank r
 * reduces segment r out of everyone's send buffer and writes the result into
 * everyone's recv buffer, chunk by chunk while it is in cache; one closing round
 * replaces rounds 2 and 3. Whether to take it is decided from the slots all ranks see
 * after round 1, so all decide alike; any rank with other memory makes all copy.
 *
 * A read failing with ESRCH means the peer process is gone; any other failure first
 * looks for a peer that is gone (the one read from may only have freed its buffer
 * after giving up because of it) and names that one. A dead peer's shared buffers stay
 * mapped here, so writing into them cannot fault.
 */
#define _GNU_SOURCE /* process_vm_readv */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "comm_impl.h"
#include "comm_cma.h"
#include "comm_reduce.h"
#include "comm_shmbuf.h"
#include "comm_tcp.h"
#include "dslaunch/common/banned.h"


/* Every rank sends len bytes to every peer and receives len bytes from each. */
static int xchg(struct dsl_comm *c, struct tcp *t, const char *what, const void *msg,
                size_t len, char *in)
{
    dsl_tcp_plan_reset(c, t, DSL_INT32, DSL_SUM);
    for (int p = 0; p < c->world; p++) {
        if (p == c->rank)
            continue;
        dsl_tcp_plan_send(t, p, msg, len, NULL);
        dsl_tcp_plan_recv(t, p, in + (size_t)p * len, len, RG_PLAIN, 0);
    }
    return dsl_tcp_engine_run(c, t, what);
}

/* Sum of every rank's ok (an int32 allreduce over the sockets, the direct plan): the
 * open-time probes' way of agreeing that every rank managed. */
static int agree(struct dsl_comm *c, struct tcp *t, int32_t ok, int32_t *agreed)
{
    struct dsl_comm_call k = {DSL_COLL_ALLREDUCE, &ok, agreed, 1, DSL_INT32, DSL_SUM, 0};
    dsl_tcp_plan_reset(c, t, DSL_INT32, DSL_SUM);
    return dsl_tcp_run_direct(c, t, &k);
}

/* ---- synchronisation rounds in shared memory ---- */

struct cma_slot {
    _Atomic uint32_t seq;     /* rounds this rank has completed its part of */
    _Atomic uint32_t failed;  /* this rank's communicator has failed */
    _Atomic uint32_t waiters; /* peers asleep (or about to sleep) on seq */
    uint32_t unused;
    uint64_t send, recv;      /* this call's buffers (written before round 1) */
    struct dsl_shmref ref[2]; /* ... and where they lie in shared buffers, if they do */
    char pad[128 - 32 - 2 * sizeof(struct dsl_shmref)];
};

static void futex_wake(_Atomic uint32_t *a)
{
    syscall(SYS_futex, (uint32_t *)a, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
}

static void futex_wait(_Atomic uint32_t *a, uint32_t val, long ns)
{
    struct timespec ts = {0, ns};
    syscall(SYS_futex, (uint32_t *)a, FUTEX_WAIT, val, &ts, NULL, 0);
}

void dsl_cma_mark_failed(struct dsl_comm *c, struct tcp *t)
{
    struct cma_slot *s = t->shm;
    if (!s)
        return;
    atomic_store(&s[c->rank].failed, 1);
    futex_wake(&s[c->rank].seq);
}

static int lagging(uint32_t v, uint32_t seq)
{
    return (int32_t)(v - seq) < 0;
}

/* A hint to the core that this is a spin-wait (no syscall, no scheduler). */
static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/*
 * Bump my counter, then wait until every peer's counter has reached mine. The wake is
 * a syscall, so it is made only when a peer announced (waiters) that it sleeps or is
 * about to: a waiter raises waiters before it re-reads the counter and sleeps, the
 * bumper stores the counter before it reads waiters (both sequentially consistent),
 * so either the bumper sees the waiter or the waiter's futex_wait sees the new value
 * and returns at once. While the ranks of the job do not outnumber the cores, a
 * waiter spins on the cache line with the pause hint; otherwise it yields the core
 * (the peer it waits for may need it).
 */
static int shm_round(struct dsl_comm *c, struct tcp *t, const char *what)
{
    struct cma_slot *s = t->shm;
    int me = c->rank, w = c->world;
    uint32_t seq = ++t->seq;
    double start = dsl_now(), deadline = start + c->timeout_s;
    int spinning = t->spin_cur > 0, waited = 0;
    unsigned spins = 0;

    atomic_store(&s[me].seq, seq);
    if (atomic_load(&s[me].waiters))
        futex_wake(&s[me].seq);
    for (int p = 0; p < w; p++) {
        if (p == me)
            continue;
        for (;;) {
            uint32_t v = atomic_load_explicit(&s[p].seq, memory_order_acquire);
            if (!lagging(v, seq))
                break;
            if (atomic_load(&s[p].failed))
                return dsl_seterr(c->err, DSL_EPEER, "%s failed during %s", t->peer[p].name,
                                  what);
            if (spinning && !t->oversubscribed && (++spins & 63u) != 0) {
                cpu_relax(); /* read the clock only every 64 spins */
                continue;
            }
            double now = dsl_now();
            if (spinning && now - start < t->spin_cur) {
                if (t->oversubscribed)
                    sched_yield();
                continue;
            }
            if (spinning) {
                dsl_tcp_spin_paid(t, 0);
                spinning = 0;
            }
            /*
             * Only the peer this round still waits for can have vanished during it: a
             * faster peer that already passed the round may well have finished the job
             * and exited by now, which is no failure.
             */
            if (dsl_tcp_peer_dead(t, p) && lagging(atomic_load(&s[p].seq), seq))
                return dsl_seterr(c->err, DSL_EPEER, "%s vanished during %s",
                                  t->peer[p].name, what);
            if (now > deadline) {
                struct dsl_dynbuf b;
                dsl_dynbuf_init(&b, 400);
                for (int q = 0; q < w; q++)
                    if (q != me && lagging(atomic_load(&s[q].seq), seq))
                        dsl_dynbuf_addf(&b, "%s%s", b.len ? ", " : "", t->peer[q].name);
                dsl_seterr(c->err, DSL_ETIMEDOUT, "%s timed out after %.1f s waiting for %s",
                           what, c->timeout_s, dsl_dynbuf_str(&b));
                dsl_dynbuf_release(&b);
                return DSL_ETIMEDOUT;
            }
            atomic_fetch_add(&s[p].waiters, 1);
            if (lagging(atomic_load(&s[p].seq), seq))
                futex_wait(&s[p].seq, v, 10 * 1000 * 1000);
            atomic_fetch_sub(&s[p].waiters, 1);
        }
        waited = 1;
    }
    if (spinning && waited)
        dsl_tcp_spin_paid(t, 1);
    return 0;
}

/*
 * Small collectives entirely in the segment: each rank has two data slots of
 * DSL_CMA_SLOT bytes and uses them alternately, call by call. A rank copies its input
 * into its slot, does one round, and reads everyone's slots; no second round is needed
 * before reuse because a slot is written again only two calls later, after a round of
 * the call in between that every reader can only reach once it has finished reading.
 */
static char *slot_data(struct dsl_comm *c, struct tcp *t, int p, unsigned parity)
{
    return (char *)t->shm + (size_t)c->world * sizeof(struct cma_slot) +
           ((size_t)p * 2 + parity) * DSL_CMA_SLOT;
}

int dsl_cma_small_run(struct dsl_comm *c, struct tcp *t, const struct dsl_comm_call *k)
{
    const char *what = dsl_comm_kind_name(k->kind);
    int w = c->world, me = c->rank, r;
    size_t esz = dsl_dtype_size(k->dtype), bytes = k->count * esz, moff, mlen;
    unsigned parity = t->small_calls++ & 1u;
    dsl_tcp_seg(k->count, me, w, esz, &moff, &mlen);

    switch (k->kind) {
    case DSL_COLL_ALLREDUCE:
    case DSL_COLL_REDUCE_SCATTER:
        memcpy(slot_data(c, t, me, parity), k->send, bytes);
        break;
    case DSL_COLL_ALLGATHER:
        memcpy(slot_data(c, t, me, parity), k->send, mlen);
        break;
    case DSL_COLL_BROADCAST:
        if (me == k->root)
            memcpy(slot_data(c, t, me, parity), k->recv, bytes);
        break;
    case DSL_COLL_BARRIER:
        break;
    }
    if ((r = shm_round(c, t, what)) < 0)
        return r;
    /* bytes read out of the peers' slots (dsl_comm_bytes_sent) */
    size_t peer_bytes = 0;
    switch (k->kind) {
    case DSL_COLL_ALLREDUCE:
    case DSL_COLL_REDUCE_SCATTER: {
        peer_bytes = (k->kind == DSL_COLL_ALLREDUCE ? bytes : mlen) * (size_t)(w - 1);
        size_t off = k->kind == DSL_COLL_ALLREDUCE ? 0 : moff;
        size_t len = k->kind == DSL_COLL_ALLREDUCE ? bytes : mlen;
        for (int p = 0; p < w; p++)
            t->srcv[p] = slot_data(c, t, p, parity) + off;
        dsl_comm_tree_reduce(k->recv, t->srcv, w, len / esz, k->dtype, k->op, t->tree_tmp);
        break;
    }
    case DSL_COLL_ALLGATHER:
        for (int p = 0; p < w; p++) {
            size_t off, len;
            dsl_tcp_seg(k->count, p, w, esz, &off, &len);
            if (len)
                memcpy((char *)k->recv + off, slot_data(c, t, p, parity), len);
            if (p != me)
                peer_bytes += len;
        }
        break;
    case DSL_COLL_BROADCAST:
        if (me != k->root) {
            memcpy(k->recv, slot_data(c, t, k->root, parity), bytes);
            peer_bytes = bytes;
        }
        break;
    case DSL_COLL_BARRIER:
        break;
    }
    atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)peer_bytes, memory_order_relaxed);
    return 0;
}

/* One synchronisation round: in shared memory, or one byte to and from every peer. */
static int round_sync(struct dsl_comm *c, struct tcp *t, const char *what)
{
    static const char flag = 1;
    int r;
    if (t->shm)
        return shm_round(c, t, what);
    if ((r = dsl_tcp_ensure(c, &t->cma_scratch, &t->cma_scratch_cap, (size_t)c->world)) < 0)
        return r;
    return xchg(c, t, what, &flag, 1, t->cma_scratch);
}

/* A read from p failed: name the peer that is really gone (p may only have freed its
 * buffer after failing because of another rank). */
static int cma_blame(struct dsl_comm *c, struct tcp *t, int p, const char *what, int err)
{
    int q = dsl_tcp_find_dead(c, t);
    if (q >= 0)
        return dsl_seterr(c->err, DSL_EPEER, "%s vanished during %s", t->peer[q].name, what);
    return dsl_seterr(c->err, DSL_EPEER, "%s: cannot read its buffer during %s: %s",
                      t->peer[p].name, what, strerror(err));
}

/* len bytes between here and peer p's memory at remote: process_vm_writev when
 * writing, process_vm_readv otherwise; the bytes count as moved on this rank's behalf. */
static int cma_xfer(struct dsl_comm *c, struct tcp *t, int p, void *here, uint64_t remote,
                    size_t len, int write, const char *what)
{
    while (len) {
        struct iovec l = {here, len}, r = {(void *)(uintptr_t)remote, len};
        ssize_t got = write ? process_vm_writev(t->pid[p], &l, 1, &r, 1, 0)
                            : process_vm_readv(t->pid[p], &l, 1, &r, 1, 0);
        if (got <= 0) {
            if (got < 0 && errno == EINTR)
                continue;
            return cma_blame(c, t, p, what, got < 0 ? errno : EFAULT);
        }
        here = (char *)here + got;
        remote += (uint64_t)got;
        len -= (size_t)got;
        atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)got, memory_order_relaxed);
    }
    return 0;
}

static int cma_read(struct dsl_comm *c, struct tcp *t, int p, void *dst, uint64_t src,
                    size_t len, const char *what)
{
    return cma_xfer(c, t, p, dst, src, len, 0, what);
}

static int cma_write(struct dsl_comm *c, struct tcp *t, int p, uint64_t dst, const void *src,
                     size_t len, const char *what)
{
    return cma_xfer(c, t, p, (void *)(uintptr_t)src, dst, len, 1, what);
}

/* The bytes of send and recv that a call of this kind reads or writes. */
static void call_extent(const struct dsl_comm_call *k, size_t mlen, size_t *sbytes,
                        size_t *rbytes)
{
    size_t bytes = k->count * dsl_dtype_size(k->dtype);
    *sbytes = k->kind == DSL_COLL_ALLGATHER ? mlen : bytes;
    *rbytes = k->kind == DSL_COLL_REDUCE_SCATTER ? mlen : bytes;
    if (k->kind == DSL_COLL_BROADCAST)
        *sbytes = 0;
}

/* Which peers' buffers a zero-copy call addresses: allreduce everyone's send (read)
 * and recv (written), reduce-scatter everyone's send, allgather everyone's recv
 * (broadcast: the root's recv only, handled apart). */
static int zc_needs_send(const struct dsl_comm_call *k)
{
    return k->kind == DSL_COLL_ALLREDUCE || k->kind == DSL_COLL_REDUCE_SCATTER;
}

static int zc_needs_recv(const struct dsl_comm_call *k)
{
    return k->kind == DSL_COLL_ALLREDUCE || k->kind == DSL_COLL_ALLGATHER;
}

/*
 * After round 1: do the buffers that peers must address lie in shared buffers on every
 * rank? Every rank reads the same slots, so every rank decides alike.
 */
static int zc_ready(struct dsl_comm *c, struct tcp *t, const struct dsl_comm_call *k)
{
    const struct cma_slot *s = t->shm;
    int need_send = zc_needs_send(k), need_recv = zc_needs_recv(k);
    if (!t->shmbuf || !s)
        return 0;
    if (k->kind == DSL_COLL_BROADCAST)
        return s[k->root].ref[1].id != 0;
    for (int p = 0; p < c->world; p++)
        if ((need_send && !s[p].ref[0].id) || (need_recv && !s[p].ref[1].id))
            return 0;
    return 1;
}

/* Peer p's buffer b (0 send, 1 recv) in this process, mapped if need be. A failure
 * names the peer that is gone, if one is (its fds went with it). */
static char *zc_addr(struct dsl_comm *c, struct tcp *t, int p, int b, const char *what)
{
    const struct cma_slot *s = t->shm;
    char *base = dsl_shmbuf_map(c, t, p, &s[p].ref[b]);
    if (base)
        return base + s[p].ref[b].off;
    int q = dsl_tcp_find_dead(c, t);
    if (q >= 0)
        dsl_seterr(c->err, DSL_EPEER, "%s vanished during %s", t->peer[q].name, what);
    return NULL;
}

static void zc_copy(struct dsl_comm *c, void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
    atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)n, memory_order_relaxed);
}

/*
 * memcpy with non-temporal (streaming) stores: for results far larger than the caches,
 * a normal store first reads the destination line (read for ownership) only to
 * overwrite it; streaming stores skip that read, a third of the memory traffic of a
 * large zero-copy allreduce. Callers end with stream_fence().
 */
static void stream_copy(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__)
    char *d = dst;
    const char *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > n)
        head = n;
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    for (; n >= 64; d += 64, s += 64, n -= 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
        __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
        __m128i f = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
        _mm_stream_si128((__m128i *)(void *)d, a);
        _mm_stream_si128((__m128i *)(void *)(d + 16), b);
        _mm_stream_si128((__m128i *)(void *)(d + 32), e);
        _mm_stream_si128((__m128i *)(void *)(d + 48), f);
    }
    memcpy(d, s, n);
#else
    memcpy(dst, src, n);
#endif
}

static void stream_fence(void)
{
#if defined(__x86_64__)
    _mm_sfence(); /* streaming stores are weakly ordered: drain before the round */
#endif
}

/*
 * Zero-copy: every buffer is addressed directly. Rank r reduces segment r chunk by
 * chunk out of everyone's send buffer (tree order, as everywhere) and writes the
 * chunk into every rank's recv buffer while it is still in cache; allgather pushes
 * the own shard to everyone; broadcast pulls from the root. Only rank r reads or
 * writes segment r of anyone's buffers, and it reads a chunk before it writes it, so
 * in-place calls are safe. One closing round keeps everyone inside the call until no
 * peer touches its buffers any more (bytes counted: read from and written to peers).
 */
static int zc_run(struct dsl_comm *c, struct tcp *t, const struct dsl_comm_call *k,
                  size_t moff, size_t mlen)
{
    int w = c->world, me = c->rank;
    size_t esz = dsl_dtype_size(k->dtype), chunk = t->cma_chunk;
    const char *what = dsl_comm_kind_name(k->kind);
    char **snd = (char **)t->zc_send, **rcv = (char **)t->zc_recv;
    int need_send = zc_needs_send(k), need_recv = zc_needs_recv(k);

    for (int p = 0; p < w; p++) {
        snd[p] = rcv[p] = NULL;
        if (p == me)
            continue;
        if ((need_send && !(snd[p] = zc_addr(c, t, p, 0, what))) ||
            (need_recv && !(rcv[p] = zc_addr(c, t, p, 1, what))))
            return DSL_EPEER;
    }
    snd[me] = (char *)(uintptr_t)k->send;
    rcv[me] = k->recv;
    /* results far beyond the caches: reduce each chunk into a cached scratch chunk and
     * stream it to every recv buffer */
    int stream = k->kind == DSL_COLL_ALLREDUCE && k->count * esz >= t->stream_min;
    if (stream) {
        int r = dsl_tcp_ensure(c, &t->cma_scratch, &t->cma_scratch_cap, chunk);
        if (r < 0)
            return r;
    }
    switch (k->kind) {
    case DSL_COLL_ALLREDUCE:
    case DSL_COLL_REDUCE_SCATTER:
        for (size_t o = 0; o < mlen; o += chunk) {
            size_t n = mlen - o < chunk ? mlen - o : chunk;
            char *dst = k->kind == DSL_COLL_ALLREDUCE ? rcv[me] + moff + o : rcv[me] + o;
            for (int p = 0; p < w; p++)
                t->srcv[p] = snd[p] + moff + o;
            dsl_comm_tree_reduce(stream ? t->cma_scratch : dst, t->srcv, w, n / esz,
                                 k->dtype, k->op, t->tree_tmp);
            atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)(n * (size_t)(w - 1)),
                                      memory_order_relaxed);
            if (k->kind != DSL_COLL_ALLREDUCE)
                continue;
            for (int p = 0; p < w; p++) {
                if (stream)
                    stream_copy(rcv[p] + moff + o, t->cma_scratch, n);
                else if (p != me)
                    memcpy(rcv[p] + moff + o, dst, n);
                if (p != me)
                    atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)n,
                                              memory_order_relaxed);
            }
        }
        if (stream)
            stream_fence();
        break;
    case DSL_COLL_ALLGATHER:
        for (int p = 0; p < w; p++)
            if (p != me && mlen)
                zc_copy(c, rcv[p] + moff, rcv[me] + moff, mlen);
        break;
    case DSL_COLL_BROADCAST:
        if (me != k->root) {
            char *src = zc_addr(c, t, k->root, 1, what);
            if (!src)
                return DSL_EPEER;
            memcpy(k->recv, src, k->count * esz);
        }
        break;
    case DSL_COLL_BARRIER:
        break;
    }
    return shm_round(c, t, what);
}

int dsl_cma_run(struct dsl_comm *c, struct tcp *t, const struct dsl_comm_call *k)
{
    const char *what = dsl_comm_kind_name(k->kind);
    int w = c->world, me = c->rank, r;
    size_t esz = dsl_dtype_size(k->dtype), moff, mlen;
    uint64_t mine[2] = {(uint64_t)(uintptr_t)k->send, (uint64_t)(uintptr_t)k->recv};
    dsl_tcp_seg(k->count, me, w, esz, &moff, &mlen);

    if (k->kind == DSL_COLL_ALLGATHER && mlen && (char *)k->recv + moff != (const char *)k->send)
        memmove((char *)k->recv + moff, k->send, mlen);
    /* round 1: where everyone's buffers are (and that everyone has arrived) */
    if (t->shm) {
        struct cma_slot *s = t->shm;
        size_t sb, rb;
        call_extent(k, mlen, &sb, &rb);
        s[me].send = mine[0];
        s[me].recv = mine[1];
        dsl_shmbuf_find(t, k->send, sb, &s[me].ref[0]);
        dsl_shmbuf_find(t, k->recv, rb, &s[me].ref[1]);
        if ((r = shm_round(c, t, what)) < 0)
            return r;
        if (zc_ready(c, t, k))
            return zc_run(c, t, k, moff, mlen);
        for (int p = 0; p < w; p++) {
            t->addrs[2 * p] = s[p].send;
            t->addrs[2 * p + 1] = s[p].recv;
        }
    } else {
        if ((r = xchg(c, t, what, mine, sizeof(mine), (char *)t->addrs)) < 0)
            return r;
        t->addrs[2 * me] = mine[0];
        t->addrs[2 * me + 1] = mine[1];
    }

    if (k->kind == DSL_COLL_ALLREDUCE || k->kind == DSL_COLL_REDUCE_SCATTER) {
        char *dst = k->kind == DSL_COLL_ALLREDUCE ? (char *)k->recv + moff : k->recv;
        size_t chunk = t->cma_chunk;
        if ((r = dsl_tcp_ensure(c, &t->cma_scratch, &t->cma_scratch_cap, chunk * (size_t)w)) < 0)
            return r;
        for (size_t o = 0; o < mlen; o += chunk) {
            size_t n = mlen - o < chunk ? mlen - o : chunk;
            for (int p = 0; p < w; p++) {
                if (p == me) {
                    t->srcv[p] = (const char *)k->send + moff + o;
                    continue;
                }
                char *buf = t->cma_scratch + (size_t)p * chunk;
                if ((r = cma_read(c, t, p, buf, t->addrs[2 * p] + moff + o, n, what)) < 0)
                    return r;
                t->srcv[p] = buf;
            }
            dsl_comm_tree_reduce(dst + o, t->srcv, w, n / esz, k->dtype, k->op, t->tree_tmp);
            /* allreduce: push the reduced chunk into every peer's recv buffer while it
             * is in cache (only this rank writes segment me anywhere, and a peer reads
             * its own send there only through this rank, before this push) */
            for (int p = 0; p < w && k->kind == DSL_COLL_ALLREDUCE; p++)
                if (p != me && (r = cma_write(c, t, p, t->addrs[2 * p + 1] + moff + o,
                                              dst + o, n, what)) < 0)
                    return r;
        }
    }
    if (k->kind == DSL_COLL_ALLGATHER) {
        for (int p = 0; p < w; p++) {
            size_t off, len;
            if (p == me)
                continue;
            dsl_tcp_seg(k->count, p, w, esz, &off, &len);
            if (len && (r = cma_read(c, t, p, (char *)k->recv + off, t->addrs[2 * p + 1] + off,
                                     len, what)) < 0)
                return r;
        }
    }
    if (k->kind == DSL_COLL_BROADCAST && me != k->root &&
        (r = cma_read(c, t, k->root, k->recv, t->addrs[2 * k->root + 1], k->count * esz,
                      what)) < 0)
        return r;
    /* round 3: nobody returns (and reuses its buffers) while a peer still reads them */
    return round_sync(c, t, what);
}

/*
 * Rank 0 creates the segment and sends its name; every rank maps it; all agree that
 * everyone could, then rank 0 unlinks the name (the mappings stay). Without agreement
 * the rounds stay on the sockets.
 */
static int shm_setup(struct dsl_comm *c, struct tcp *t)
{
    int w = c->world, me = c->rank, r, fd = -1;
    size_t len = (size_t)w * (sizeof(struct cma_slot) + 2 * DSL_CMA_SLOT);
    char name[64] = "", *all = dsl_xcalloc((size_t)w, sizeof(name));
    int32_t ok = 0, agreed = 0;
    void *m = MAP_FAILED;

    if (me == 0) {
        snprintf(name, sizeof(name), "/dslaunch-comm-%ld-%lx", (long)getpid(),
                 (unsigned long)(uintptr_t)t);
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        if (fd >= 0 && ftruncate(fd, (off_t)len) < 0) {
            close(fd);
            fd = -1;
        }
    }
    if ((r = xchg(c, t, "setup", name, sizeof(name), all)) < 0)
        goto out;
    if (me != 0) {
        memcpy(name, all, sizeof(name));
        name[sizeof(name) - 1] = '\0';
        if (name[0])
            fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
    }
    if (fd >= 0) {
        m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        ok = m != MAP_FAILED;
    }
    r = agree(c, t, ok, &agreed);
    if (me == 0 && name[0])
        shm_unlink(name);
    if (r < 0)
        goto out;
    if (agreed == w) {
        t->shm = m;
        t->shm_len = len;
        m = MAP_FAILED;
    }
out:
    if (m != MAP_FAILED)
        munmap(m, len);
    free(all);
    return r;
}

/*
 * Can every rank map every peer's shared buffers? Each rank makes a small one holding
 * a cookie and publishes its fd; every rank maps every peer's and checks the cookie;
 * all agree. Sets t->shmbuf (dsl_comm_alloc() then hands out shared buffers).
 */
static int shmbuf_probe(struct dsl_comm *c, struct tcp *t)
{
    int w = c->world, me = c->rank, r;
    uint64_t pub[2] = {0, 0}, *all = dsl_xcalloc((size_t)w, sizeof(pub));
    const uint64_t magic = UINT64_C(0x73686d6275660000);
    struct dsl_shmref ref;
    int32_t ok, agreed = 0;
    dsl_shmbuf_init(c, t);
    uint64_t *mine = dsl_shmbuf_make(t, 4096);
    if ((ok = mine && dsl_shmbuf_find(t, mine, sizeof(*mine), &ref))) {
        mine[0] = magic | (uint64_t)me;
        pub[0] = (uint64_t)(uint32_t)ref.fd;
        pub[1] = ref.id;
    }
    if ((r = xchg(c, t, "setup", pub, sizeof(pub), (char *)all)) < 0)
        goto out;
    for (int p = 0; p < w && ok; p++) {
        if (p == me)
            continue;
        struct dsl_shmref peer = {(uint32_t)all[2 * p + 1], (int32_t)all[2 * p], 0, 4096};
        const uint64_t *v = peer.id ? (const uint64_t *)dsl_shmbuf_map(c, t, p, &peer) : NULL;
        ok = v && v[0] == (magic | (uint64_t)p);
    }
    c->err[0] = '\0'; /* a failed probe is no error: the copies remain */
    /* everyone has read everyone before anyone unmaps */
    r = agree(c, t, ok, &agreed);
out:
    dsl_shmbuf_close(c, t); /* the probe's buffer and mappings */
    t->shmbuf = r == 0 && agreed == w;
    if (t->shmbuf)
        dsl_shmbuf_init(c, t);
    free(all);
    return r;
}

/* Cores this process may run on (its affinity mask; 1 if unknown). */
static int cores_allowed(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* At open: can this rank read every peer? All ranks then agree (every rank must take the
 * same path). */
int dsl_cma_probe(struct dsl_comm *c, struct tcp *t)
{
    int w = c->world, me = c->rank, r;
    uint64_t mine[2] = {(uint64_t)getpid(), (uint64_t)(uintptr_t)&t->cookie};
    uint64_t *all = dsl_xcalloc((size_t)w * 2, sizeof(uint64_t));
    int32_t ok = 1, agreed = 0;
    t->cookie = UINT64_C(0x636d61636f6f6b69) ^ (uint64_t)me;
    if ((r = xchg(c, t, "setup", mine, sizeof(mine), (char *)all)) < 0)
        goto out;
    for (int p = 0; p < w; p++) {
        uint64_t v = 0;
        if (p == me)
            continue;
        t->pid[p] = (pid_t)all[2 * p];
        t->cookie_at[p] = all[2 * p + 1];
        struct iovec l = {&v, sizeof(v)}, rv = {(void *)(uintptr_t)all[2 * p + 1], sizeof(v)};
        if (process_vm_readv(t->pid[p], &l, 1, &rv, 1, 0) != (ssize_t)sizeof(v) ||
            v != (UINT64_C(0x636d61636f6f6b69) ^ (uint64_t)p))
            ok = 0;
    }
    /* everyone has read everyone before anyone goes on */
    if ((r = agree(c, t, ok, &agreed)) < 0)
        goto out;
    t->cma = agreed == w;
    t->oversubscribed = w > cores_allowed();
    r = 0;
    const char *use = getenv("DSL_COMM_SHMSYNC");
    if (t->cma && !(use && !strcmp(use, "0")))
        r = shm_setup(c, t);
    use = getenv("DSL_COMM_SHMBUF");
    if (r == 0 && t->shm && !(use && !strcmp(use, "0")))
        r = shmbuf_probe(c, t);
out:
    free(all);
    return r;
}

