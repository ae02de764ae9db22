/*
 * The nccl backend: collectives on device buffers with NCCL, on one CUDA stream.
 *
 * Theory of operation. Rank 0 creates the NCCL unique id and publishes it in the store
 * ("dsl/nccl/id"); every rank fetches it and joins with ncclCommInitRankConfig in
 * non-blocking mode, so joining, like every later call, is bounded by the communicator
 * timeout: an operation that answers ncclInProgress is polled with
 * ncclCommGetAsyncError until it settles. Collectives are enqueued on the backend's own
 * stream (dsl_comm_stream()) after waiting on an event recorded on the legacy default
 * stream, where the device's kernels run, so a collective sees everything queued
 * before it without the caller synchronising; comm.c's blocking calls then drain the
 * stream in nccl_sync(), which polls cudaStreamQuery and
 * ncclCommGetAsyncError in a sleep loop: a failed or vanished peer becomes an error
 * (with ncclGetErrorString's text) or a timeout, never a hang; either aborts the
 * communicator (ncclCommAbort).
 *
 * The sharding convention (ceil(n / world) per rank, a short or empty last shard) is
 * NCCL's only when world divides n; otherwise reduce_scatter and allgather go through a
 * padded device scratch buffer. NCCL cannot say which rank it waits for, so timeouts say
 * "the other ranks". Bytes sent are counted by algorithm (ring volumes).
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dslaunch/common/parse.h"
#include "store.h"
#include "dslaunch/common/xalloc.h"
#include "comm_impl.h"
#include "comm_reduce.h"
#include "dslaunch/common/banned.h"

struct nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    void *pad;        /* device scratch for uneven shards */
    size_t pad_cap;
    int32_t *one;     /* device int for barrier */
    cudaEvent_t ready; /* recorded on stream 0 before each collective */
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

static int ensure_pad(struct dsl_comm *c, struct nccl *n, size_t bytes)
{
    if (bytes <= n->pad_cap)
        return 0;
    cudaStreamSynchronize(n->stream);
    cudaFree(n->pad);
    n->pad = NULL;
    n->pad_cap = 0;
    cudaError_t e = cudaMalloc(&n->pad, bytes);
    if (e != cudaSuccess)
        return dsl_seterr(c->err, -ENOMEM, "cuda: cannot allocate %zu bytes of scratch: %s",
                          bytes, cudaGetErrorString(e));
    n->pad_cap = bytes;
    return 0;
}

static void count_bytes(struct dsl_comm *c, double factor, size_t bytes)
{
    atomic_fetch_add_explicit(&c->bytes_sent, (uint64_t)(factor * (double)bytes),
                              memory_order_relaxed);
}

static int nccl_run(struct dsl_comm *c, const struct dsl_comm_call *k)
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
    if ((e = cudaEventRecord(n->ready, cudaStreamLegacy)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(n->stream, n->ready, 0)) != cudaSuccess)
        return cuda_fail(c, "ordering after stream 0", e);
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
        if (s * (size_t)w == k->count) {
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
        if (s * (size_t)w == k->count) {
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

static int nccl_sync(struct dsl_comm *c)
{
    struct nccl *n = c->impl;
    double start = dsl_now(), deadline = start + c->timeout_s, pause = 2e-6;
    if (!n->comm)
        return dsl_seterr(c->err, DSL_EPEER, "nccl: the communicator was aborted earlier");
    for (;;) {
        cudaError_t e = cudaStreamQuery(n->stream);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return cuda_fail(c, "stream", e);
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
                              "nccl: collective timed out after %.1f s waiting for the other ranks",
                              c->timeout_s);
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

static void nccl_close(struct dsl_comm *c)
{
    struct nccl *n = c->impl;
    if (!n)
        return;
    if (n->comm) {
        if (cudaStreamQuery(n->stream) == cudaSuccess)
            ncclCommDestroy(n->comm);
        else
            ncclCommAbort(n->comm);
    }
    if (n->stream)
        cudaStreamDestroy(n->stream);
    if (n->ready)
        cudaEventDestroy(n->ready);
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
    .alloc = nccl_alloc,
};

int dsl_comm_nccl_available(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void *dsl_comm_stream(struct dsl_comm *c)
{
    if (!c->ops || c->ops != &nccl_ops || !c->impl)
        return NULL;
    return (void *)((struct nccl *)c->impl)->stream;
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
    if ((e = cudaSetDevice(c->device)) != cudaSuccess) {
        r = cuda_fail(c, "cudaSetDevice", e);
        goto out;
    }
    if ((e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming)) != cudaSuccess ||
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
