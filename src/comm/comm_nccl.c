/*
 * The nccl backend: collectives on device buffers with NCCL, on one CUDA stream.
 *
 * Theory of operation. Rank 0 creates the NCCL unique id and publishes it in the store
 * ("dsl/nccl/id"); every rank fetches it and joins with ncclCommInitRankConfig in
 * non-blocking mode, so joining, like every later call, is bounded by the communicator
 * timeout: an operation that answers ncclInProgress is polled with
 * ncclCommGetAsyncError until it settles.
 *
 * Streams and events, never the host, order compute and communication (as llm.c's
 * ZeRO code does): each collective is enqueued on the backend's own stream
 * (dsl_comm_stream()) after a cudaStreamWaitEvent on an event just recorded on the
 * caller's compute stream (dsl_comm_set_compute_stream(); the legacy default stream
 * until one is set), so it sees every kernel queued before it. After the collective
 * an event of its request (a ring of REQ_RING events, slot req % REQ_RING) is recorded
 * on the comm stream; dsl_comm_wait() makes the compute stream wait for that event,
 * so work queued after the wait sees the result while the host runs on. A slot reused
 * by a later request only makes an old wait wait for more (requests complete in
 * order), never for less. The host waits only in blocking calls (nccl_sync drains the
 * comm stream) and in dsl_comm_stream_wait_host() (the trainer's once-per-step wait
 * on its compute stream); both poll cudaStreamQuery and ncclCommGetAsyncError in a
 * sleep loop up to the timeout, so a failed or vanished peer becomes an error (with
 * ncclGetErrorString's text) or a timeout, never a hang; either aborts the
 * communicator (ncclCommAbort). Each such wait counts one host synchronisation
 * (common/hostsync.h).
 *
 * Closing: a communicator whose stream drained in time is finalized
 * (ncclCommFinalize, non-blocking, polled up to the timeout) and destroyed; otherwise,
 * and on dsl_comm_abort() (dstrain's error paths, before device memory is freed), it
 * is aborted.
 *
 * The sharding convention (ceil(n / world) per rank, a short or empty last shard) is
 * NCCL's only when world divides n; otherwise reduce_scatter and allgather go through a
 * padded device scratch buffer, sized once by dsl_comm_reserve() at setup (the trainer
 * reserves its largest bucket), so no step allocates or frees; a larger collective
 * first drains the stream (bounded, as above) and reallocates.
 * DSLAUNCH_NCCL_PAD_ALWAYS=1 sends every reduce-scatter and all-gather through the
 * padded path, so a test at world size 1 (where every shard divides) runs it. NCCL
 * cannot say which rank it waits for, so timeouts say "the other ranks". Bytes sent
 * are counted by algorithm (ring volumes).
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dslaunch/common/cudalibs.h"
#include "dslaunch/common/envnames.h"
#include "dslaunch/common/hostsync.h"
#include "dslaunch/common/parse.h"
#include "store.h"
#include "dslaunch/common/xalloc.h"
#include "comm_impl.h"
#include "comm_reduce.h"
#include "dslaunch/common/banned.h"

#define REQ_RING 64

struct nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    void *pad;        /* device scratch for uneven shards */
    size_t pad_cap;
    int pad_always;   /* DSLAUNCH_NCCL_PAD_ALWAYS: the padded path for every shard */
    int32_t *one;     /* device int for barrier */
    cudaEvent_t ready; /* recorded on the compute stream before each collective */
    cudaEvent_t done[REQ_RING]; /* recorded on the comm stream after request req */
};

static void nap(double s)
{
    struct timespec ts = {0, (long)(s * 1e9)};
    nanosleep(&ts, NULL);
}

static int nccl_fail(struct dsl_comm *c, const char *what, ncclResult_t res)
{
    return dsl_seterr(c->err, DSL_EPEER, "nccl: %s failed: %s", what, ncclGetErrorString(res));
}

static int cuda_fail(struct dsl_comm *c, const char *what, cudaError_t e)
{
    return dsl_seterr(c->err, DSL_EREMOTE, "cuda: %s failed: %s", what, cudaGetErrorString(e));
}

/* Wait until a non-blocking NCCL call has settled (bounded by the timeout). */
static int settle(struct dsl_comm *c, struct nccl *n, ncclResult_t res, const char *what)
{
    double deadline = dsl_now() + c->timeout_s, pause = 1e-5;
    while (res == ncclInProgress) {
        if (dsl_now() > deadline) {
            ncclCommAbort(n->comm);
            n->comm = NULL;
            return dsl_seterr(c->err, DSL_ETIMEDOUT,
                              "nccl: %s timed out after %.1f s waiting for the other ranks", what,
                              c->timeout_s);
        }
        nap(pause);
        pause = pause < 1e-3 ? pause * 2 : pause;
        if (ncclCommGetAsyncError(n->comm, &res) != ncclSuccess)
            break;
    }
    if (res != ncclSuccess) {
        int r = nccl_fail(c, what, res);
        if (n->comm) {
            ncclCommAbort(n->comm);
            n->comm = NULL;
        }
        return r;
    }
    return 0;
}

static ncclDataType_t nccl_type(enum dsl_dtype t)
{
    switch (t) {
    case DSL_FLOAT16: return ncclFloat16;
    case DSL_BFLOAT16: return ncclBfloat16;
    case DSL_INT32: return ncclInt32;
    default: return ncclFloat32;
    }
}

static int nccl_sync(struct dsl_comm *c);

/* The pad buffer must hold bytes. Sized at setup by dsl_comm_reserve(); growing here
 * (a collective larger than reserved) first waits, bounded, for the stream, since a
 * collective queued earlier may still use the old buffer. */
static int ensure_pad(struct dsl_comm *c, struct nccl *n, size_t bytes)
{
    int r;
    if (bytes <= n->pad_cap)
        return 0;
    if (n->pad && (r = nccl_sync(c)) < 0)
        return r;
    cudaFree(n->pad);
    n->pad = NULL;
    n->pad_cap = 0;
    cudaError_t e = cudaMalloc(&n->pad, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return dsl_seterr(c->err, -ENOMEM, "cuda: cannot allocate %zu bytes of scratch: %s",
                          bytes, cudaGetErrorString(e));
    }
    n->pad_cap = bytes;
    return 0;
}

/* scratch of a padded collective of count elements of esz bytes: the padded input or
 * output (s x world) and one shard */
static size_t pad_bytes(size_t count, int world, size_t esz)
{
    size_t s = dsl_shard_size(count, world);
    return (s * (size_t)world + s) * esz;
}

static int nccl_reserve(struct dsl_comm *c, size_t bytes)
{
    struct nccl *n = c->impl;
    /* bytes of the largest collective: its padded form needs at most this many more
     * elements; counting in bytes is exact for every element size that divides them */
    return ensure_pad(c, n, pad_bytes(bytes, c->world, 1) + (size_t)c->world * 8);
}

static void count_bytes(struct dsl_comm *c, double factor, size_t bytes)
{
    atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)(factor * (double)bytes),
                              memory_order_relaxed);
}

static int nccl_run_one(struct dsl_comm *c, const struct dsl_comm_call *k)
{
    struct nccl *n = c->impl;
    const char *what = dsl_comm_kind_name(k->kind);
    ncclDataType_t ty = nccl_type(k->dtype);
    ncclRedOp_t op = k->op == DSL_MAX ? ncclMax : ncclSum;
    size_t esz = dsl_dtype_size(k->dtype), s = dsl_shard_size(k->count, c->world), off, len;
    int w = c->world, r;
    double part = (double)(w - 1) / (double)w;
    ncclResult_t res;
    cudaError_t e;

    if (!n->comm)
        return dsl_seterr(c->err, DSL_EPEER, "nccl: the communicator was aborted earlier");
    cudaStream_t compute = c->compute_stream ? (cudaStream_t)c->compute_stream
                                             : cudaStreamLegacy;
    if ((e = cudaEventRecord(n->ready, compute)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(n->stream, n->ready, 0)) != cudaSuccess)
        return cuda_fail(c, "ordering after the compute stream", e);
    dsl_shard_of(k->count, c->rank, w, &off, &len);
    switch (k->kind) {
    case DSL_COLL_ALLREDUCE:
        if (!k->count)
            return 0;
        res = ncclAllReduce(k->send, k->recv, k->count, ty, op, n->comm, n->stream);
        count_bytes(c, 2 * part, k->count * esz);
        return settle(c, n, res, what);
    case DSL_COLL_BROADCAST:
        if (!k->count)
            return 0;
        res = ncclBroadcast(k->send, k->recv, k->count, ty, k->root, n->comm, n->stream);
        count_bytes(c, w > 1 ? 1 : 0, k->count * esz);
        return settle(c, n, res, what);
    case DSL_COLL_BARRIER:
        res = ncclAllReduce(n->one, n->one, 1, ncclInt32, ncclSum, n->comm, n->stream);
        return settle(c, n, res, what);
    case DSL_COLL_REDUCE_SCATTER:
        if (!k->count)
            return 0;
        count_bytes(c, part, k->count * esz);
        if (s * (size_t)w == k->count && !n->pad_always) {
            res = ncclReduceScatter(k->send, k->recv, s, ty, op, n->comm, n->stream);
            return settle(c, n, res, what);
        }
        /* pad: [send | zeros] -> reduce-scatter -> copy this rank's part out */
        if ((r = ensure_pad(c, n, (s * (size_t)w + s) * esz)) < 0)
            return r;
        if ((e = cudaMemcpyAsync(n->pad, k->send, k->count * esz, cudaMemcpyDeviceToDevice,
                                 n->stream)) != cudaSuccess ||
            (e = cudaMemsetAsync((char *)n->pad + k->count * esz, 0,
                                 (s * (size_t)w - k->count) * esz, n->stream)) != cudaSuccess)
            return cuda_fail(c, "copy to scratch", e);
        res = ncclReduceScatter(n->pad, (char *)n->pad + s * (size_t)w * esz, s, ty, op,
                                n->comm, n->stream);
        if ((r = settle(c, n, res, what)) < 0)
            return r;
        if (len && (e = cudaMemcpyAsync(k->recv, (char *)n->pad + s * (size_t)w * esz, len * esz,
                                        cudaMemcpyDeviceToDevice, n->stream)) != cudaSuccess)
            return cuda_fail(c, "copy from scratch", e);
        return 0;
    case DSL_COLL_ALLGATHER:
        if (!k->count)
            return 0;
        count_bytes(c, part, k->count * esz);
        if (s * (size_t)w == k->count && !n->pad_always) {
            res = ncclAllGather(k->send, k->recv, s, ty, n->comm, n->stream);
            return settle(c, n, res, what);
        }
        if ((r = ensure_pad(c, n, (s * (size_t)w + s) * esz)) < 0)
            return r;
        char *sendpad = (char *)n->pad + s * (size_t)w * esz;
        if ((e = cudaMemsetAsync(sendpad, 0, s * esz, n->stream)) != cudaSuccess ||
            (len && (e = cudaMemcpyAsync(sendpad, k->send, len * esz, cudaMemcpyDeviceToDevice,
                                         n->stream)) != cudaSuccess))
            return cuda_fail(c, "copy to scratch", e);
        res = ncclAllGather(sendpad, n->pad, s, ty, n->comm, n->stream);
        if ((r = settle(c, n, res, what)) < 0)
            return r;
        if ((e = cudaMemcpyAsync(k->recv, n->pad, k->count * esz, cudaMemcpyDeviceToDevice,
                                 n->stream)) != cudaSuccess)
            return cuda_fail(c, "copy from scratch", e);
        return 0;
    }
    return dsl_seterr(c->err, -EINVAL, "nccl: unknown collective");
}

/* run one call and record its request's event: comm.c numbers an asynchronous call
 * before running it, so c->issued is its request; a blocking call re-records the
 * latest request's slot, which only makes a wait for that request wait longer */
static int nccl_run(struct dsl_comm *c, const struct dsl_comm_call *k)
{
    struct nccl *n = c->impl;
    int r = nccl_run_one(c, k);
    if (r < 0)
        return r;
    cudaError_t e = cudaEventRecord(n->done[(unsigned)c->issued % REQ_RING], n->stream);
    return e == cudaSuccess ? 0 : cuda_fail(c, "recording the request's event", e);
}

/* dsl_comm_wait: the compute stream waits for request req's event */
static int nccl_order(struct dsl_comm *c, int req)
{
    struct nccl *n = c->impl;
    cudaStream_t compute = c->compute_stream ? (cudaStream_t)c->compute_stream
                                             : cudaStreamLegacy;
    if (!n->comm)
        return dsl_seterr(c->err, DSL_EPEER, "nccl: the communicator was aborted earlier");
    if (req <= 0)
        return 0;
    cudaError_t e = cudaStreamWaitEvent(compute, n->done[(unsigned)req % REQ_RING], 0);
    return e == cudaSuccess ? 0 : cuda_fail(c, "ordering the compute stream", e);
}

/* Poll until stream has drained: bounded by the timeout, watching the communicator's
 * asynchronous error; a failure or a timeout aborts the communicator. One host
 * synchronisation. */
static int drain(struct dsl_comm *c, cudaStream_t stream, const char *what)
{
    struct nccl *n = c->impl;
    double start = dsl_now(), deadline = start + c->timeout_s, pause = 2e-6;
    if (!n->comm)
        return dsl_seterr(c->err, DSL_EPEER, "nccl: the communicator was aborted earlier");
    dsl_hostsync_note();
    for (;;) {
        cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return cuda_fail(c, what, e);
        ncclResult_t as = ncclSuccess;
        ncclCommGetAsyncError(n->comm, &as);
        if (as != ncclSuccess && as != ncclInProgress) {
            int r = nccl_fail(c, "collective", as);
            ncclCommAbort(n->comm);
            n->comm = NULL;
            return r;
        }
        if (dsl_now() > deadline) {
            ncclCommAbort(n->comm);
            n->comm = NULL;
            return dsl_seterr(c->err, DSL_ETIMEDOUT,
                              "nccl: %s timed out after %.1f s waiting for the other ranks",
                              what, c->timeout_s);
        }
        /* spin for the first 200 us: a nanosleep costs the timer slack (about 50 us),
         * which used to be the floor of every small collective */
        if (dsl_now() - start < 200e-6) {
            sched_yield();
            continue;
        }
        nap(pause);
        pause = pause < 1e-4 ? pause * 2 : pause;
    }
}

static int nccl_sync(struct dsl_comm *c)
{
    struct nccl *n = c->impl;
    return drain(c, n->stream, "collective");
}

static int nccl_stream_wait(struct dsl_comm *c, void *stream)
{
    return drain(c, stream ? (cudaStream_t)stream : cudaStreamLegacy, "compute stream");
}

static void nccl_abort(struct dsl_comm *c)
{
    struct nccl *n = c->impl;
    if (n && n->comm) {
        ncclCommAbort(n->comm);
        n->comm = NULL;
    }
}

/* A clean close: the stream drained (bounded), then ncclCommFinalize, polled up to the
 * timeout (it flushes NCCL's own outstanding work with the peers), then destroy.
 * Anything else aborts. */
static void finalize(struct dsl_comm *c, struct nccl *n)
{
    if (cudaStreamQuery(n->stream) != cudaSuccess && (c->failed || nccl_sync(c) < 0)) {
        nccl_abort(c);
        return;
    }
    ncclResult_t res = ncclCommFinalize(n->comm);
    double deadline = dsl_now() + c->timeout_s, pause = 1e-5;
    while (res == ncclInProgress && dsl_now() <= deadline) {
        nap(pause);
        pause = pause < 1e-3 ? pause * 2 : pause;
        if (ncclCommGetAsyncError(n->comm, &res) != ncclSuccess)
            break;
    }
    if (res != ncclSuccess) {
        nccl_abort(c);
        return;
    }
    ncclCommDestroy(n->comm);
    n->comm = NULL;
}

static void nccl_close(struct dsl_comm *c)
{
    struct nccl *n = c->impl;
    if (!n)
        return;
    if (n->comm)
        finalize(c, n);
    if (n->stream)
        cudaStreamDestroy(n->stream);
    if (n->ready)
        cudaEventDestroy(n->ready);
    for (int i = 0; i < REQ_RING; i++)
        if (n->done[i])
            cudaEventDestroy(n->done[i]);
    cudaFree(n->pad);
    cudaFree(n->one);
    free(n);
    c->impl = NULL;
}

/* dsl_comm_alloc hands out host memory, which nccl's collectives cannot take */
static void *nccl_alloc(struct dsl_comm *c, size_t bytes)
{
    (void)c;
    (void)bytes;
    return NULL;
}

static const struct dsl_comm_ops nccl_ops = {
    .name = "nccl", .run = nccl_run, .sync = nccl_sync, .close = nccl_close, .threaded = 0,
    .alloc = nccl_alloc, .order = nccl_order, .reserve = nccl_reserve,
    .stream_wait = nccl_stream_wait, .abort = nccl_abort,
};

int dsl_comm_nccl_available(void)
{
    char err[DSL_ERR_LEN];
    int n = 0;
    /* the driver and a device first: a CPU node does not open NCCL */
    return dsl_cudalib_device_count(&n, err) == 0 && n > 0 &&
           dsl_cudalib_load(DSL_CUDALIB_NCCL, err) == 0;
}

void *dsl_comm_stream(struct dsl_comm *c)
{
    if (!c->ops || c->ops != &nccl_ops || !c->impl)
        return NULL;
    return (void *)((struct nccl *)c->impl)->stream;
}

static cudaError_t create_events(struct nccl *n)
{
    for (int i = 0; i < REQ_RING; i++) {
        cudaError_t e = cudaEventCreateWithFlags(&n->done[i], cudaEventDisableTiming);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

int dsl_comm_nccl_open(struct dsl_comm *c)
{
    struct nccl *n = dsl_xcalloc(1, sizeof(*n));
    ncclUniqueId id;
    cudaError_t e;
    ncclResult_t res;
    int r;

    c->impl = n;
    c->ops = &nccl_ops;
    const char *pa = getenv(DSL_ENV_NCCL_PAD_ALWAYS);
    n->pad_always = pa && !strcmp(pa, "1");
    if ((e = cudaSetDevice(c->device)) != cudaSuccess) {
        r = cuda_fail(c, "cudaSetDevice", e);
        goto out;
    }
    if ((e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming)) != cudaSuccess ||
        (e = create_events(n)) != cudaSuccess ||
        (e = cudaMalloc((void **)&n->one, sizeof(int32_t))) != cudaSuccess ||
        (e = cudaMemset(n->one, 0, sizeof(int32_t))) != cudaSuccess) {
        r = cuda_fail(c, "setup", e);
        goto out;
    }
    if (c->rank == 0) {
        if ((res = ncclGetUniqueId(&id)) != ncclSuccess) {
            r = nccl_fail(c, "ncclGetUniqueId", res);
            goto out;
        }
        if (c->store && (r = dsl_store_set(c->store, "dsl/nccl/id", &id, sizeof(id))) < 0) {
            dsl_seterr(c->err, r, "%s", dsl_store_last_error(c->store));
            goto out;
        }
    } else {
        void *v = NULL;
        size_t vn = 0;
        if ((r = dsl_store_get(c->store, "dsl/nccl/id", &v, &vn)) < 0) {
            dsl_seterr(c->err, r, "waiting for rank 0's nccl id: %s",
                       dsl_store_last_error(c->store));
            goto out;
        }
        if (vn != sizeof(id)) {
            free(v);
            r = dsl_seterr(c->err, DSL_EPROTO, "nccl id from the store has %zu bytes", vn);
            goto out;
        }
        memcpy(&id, v, sizeof(id));
        free(v);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    res = ncclCommInitRankConfig(&n->comm, c->world, id, c->rank, &config);
    if (res != ncclSuccess && res != ncclInProgress) {
        n->comm = NULL;
        r = nccl_fail(c, "ncclCommInitRank", res);
        goto out;
    }
    if ((r = settle(c, n, res, "ncclCommInitRank")) < 0)
        goto out;
    r = 0;
out:
    if (r < 0) {
        nccl_close(c);
        c->ops = NULL;
    }
    return r;
}
