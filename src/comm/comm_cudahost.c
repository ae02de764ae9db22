/*
 * The cuda-tcp backend: collectives on device buffers, staged through host memory into
 * the tcp backend (or, at world size 1, the copy path). For tests, not for speed: NCCL
 * refuses two ranks on one GPU, and many test hosts have one, so the trainer's
 * multi-rank GPU logic (buckets, ZeRO-1/2 shards, uneven shards, overlap) is proven at
 * world 2 and 4 with every rank on the same device through this backend instead
 * (tests/train/test_gpu_worlds.c).
 *
 * Theory of operation. The backend opens the ordinary host backend first and then
 * wraps its ops table (the inner one is kept in the stage struct, c->stage; c->impl
 * stays the inner backend's). It is not threaded: every call, blocking or not, runs to
 * completion in the caller's thread, so dsl_comm_wait has nothing left to wait for and
 * an overlapped request is simply complete when issued. One call:
 *   1. waits on the host for the compute stream (dsl_comm_set_compute_stream), so the
 *      device buffers hold what the kernels queued before the call wrote;
 *   2. copies the input from device (or host: cudaMemcpyDefault, unified addressing)
 *      into a host staging buffer;
 *   3. runs the inner backend's collective on the staging buffers (the tcp backend's
 *      own arithmetic and summation order);
 *   4. copies the result back into the device buffer and waits for the copy.
 * Staging buffers come from the inner backend's allocator (the tcp backend's shared
 * buffers on one host), sized by dsl_comm_reserve at setup and grown when a call needs
 * more. The host waits are plain cudaStreamSynchronize calls, not counted as the
 * trainer's host synchronisations (that count is the nccl backend's contract).
 *
 * Uneven shards: reduce-scatter and all-gather of n elements that world does not
 * divide (or every one with DSLAUNCH_NCCL_PAD_ALWAYS=1) take the nccl backend's padded
 * form on the host: the input padded with zeros to s x world elements (s = ceil(n /
 * world)), the collective on the padded buffer, this rank's part copied out. The same
 * shard convention as the direct path, so the results must agree (the test checks).
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/common/xalloc.h"
#include "comm_impl.h"
#include "dslaunch/common/banned.h"

struct stage {
    const struct dsl_comm_ops *inner;
    void *hs, *hr; /* host staging: input and output */
    size_t cap;    /* bytes of each */
    int pad_always;
};

static int cuda_fail(struct dsl_comm *c, const char *what, cudaError_t e)
{
    return dsl_seterr(c->err, DSL_EREMOTE, "cuda-tcp: %s: %s", what, cudaGetErrorString(e));
}

static void stage_free_bufs(struct dsl_comm *c, struct stage *s)
{
    void *p[2] = {s->hs, s->hr};
    for (int i = 0; i < 2; i++) {
        if (!p[i])
            continue;
        if (s->inner->free)
            s->inner->free(c, p[i]);
        else
            free(p[i]);
    }
    s->hs = s->hr = NULL;
    s->cap = 0;
}

static void *stage_alloc1(struct dsl_comm *c, struct stage *s, size_t bytes)
{
    return s->inner->alloc ? s->inner->alloc(c, bytes) : calloc(bytes ? bytes : 1, 1);
}

/* both staging buffers hold at least bytes */
static int ensure(struct dsl_comm *c, struct stage *s, size_t bytes)
{
    if (bytes <= s->cap)
        return 0;
    stage_free_bufs(c, s);
    s->hs = stage_alloc1(c, s, bytes);
    s->hr = stage_alloc1(c, s, bytes);
    if (!s->hs || !s->hr) {
        stage_free_bufs(c, s);
        return dsl_seterr(c->err, -ENOMEM, "cuda-tcp: cannot allocate 2 x %zu bytes of "
                          "staging memory", bytes);
    }
    s->cap = bytes;
    return 0;
}

static int wait_compute(struct dsl_comm *c)
{
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)c->compute_stream);
    return e == cudaSuccess ? 0 : cuda_fail(c, "waiting for the compute stream", e);
}

static int copy(struct dsl_comm *c, void *dst, const void *src, size_t bytes, const char *what)
{
    if (!bytes)
        return 0;
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
    return e == cudaSuccess ? 0 : cuda_fail(c, what, e);
}

static int inner_run(struct dsl_comm *c, struct stage *s, const struct dsl_comm_call *k)
{
    return s->inner->run(c, k);
}

static int stage_run(struct dsl_comm *c, const struct dsl_comm_call *k)
{
    struct stage *s = c->stage;
    size_t esz = dsl_dtype_size(k->dtype), w = (size_t)c->world;
    size_t sh = dsl_shard_size(k->count, c->world), off = 0, len = 0;
    int padded = (k->kind == DSL_COLL_REDUCE_SCATTER || k->kind == DSL_COLL_ALLGATHER) &&
                 (sh * w != k->count || s->pad_always);
    size_t n = padded ? sh * w : k->count; /* elements of the host collective */
    struct dsl_comm_call h = *k;
    int r;
    if (k->kind == DSL_COLL_BARRIER)
        return inner_run(c, s, k);
    if ((r = wait_compute(c)) < 0 || (r = ensure(c, s, n * esz)) < 0)
        return r;
    dsl_shard_of(k->count, c->rank, c->world, &off, &len);
    h.count = n;
    h.send = s->hs;
    h.recv = s->hr;
    switch (k->kind) {
    case DSL_COLL_ALLREDUCE:
        if ((r = copy(c, s->hs, k->send, k->count * esz, "input to the host")) < 0)
            return r;
        break;
    case DSL_COLL_BROADCAST: /* in place on the output buffer */
        if ((r = copy(c, s->hr, k->recv, k->count * esz, "input to the host")) < 0)
            return r;
        h.send = s->hr;
        break;
    case DSL_COLL_REDUCE_SCATTER:
        if ((r = copy(c, s->hs, k->send, k->count * esz, "input to the host")) < 0)
            return r;
        memset((char *)s->hs + k->count * esz, 0, (n - k->count) * esz);
        break;
    case DSL_COLL_ALLGATHER:
        /* this rank's shard at its place in the padded (or plain) layout: rank r's
         * shard starts at r x sh either way */
        if ((r = copy(c, (char *)s->hs + (size_t)c->rank * sh * esz, k->send, len * esz,
                      "input to the host")) < 0)
            return r;
        memset((char *)s->hs + ((size_t)c->rank * sh + len) * esz, 0, (sh - len) * esz);
        h.send = (char *)s->hs + (size_t)c->rank * sh * esz;
        break;
    case DSL_COLL_BARRIER:
        break;
    }
    if ((r = inner_run(c, s, &h)) < 0)
        return r;
    switch (k->kind) {
    case DSL_COLL_ALLREDUCE:
    case DSL_COLL_BROADCAST:
        return copy(c, k->recv, s->hr, k->count * esz, "result to the device");
    case DSL_COLL_REDUCE_SCATTER:
        /* the inner collective left this rank's shard of n at the start of hr */
        return copy(c, k->recv, s->hr, len * esz, "result to the device");
    case DSL_COLL_ALLGATHER:
        return copy(c, k->recv, s->hr, k->count * esz, "result to the device");
    case DSL_COLL_BARRIER:
        break;
    }
    return 0;
}

static int stage_reserve(struct dsl_comm *c, size_t bytes)
{
    struct stage *s = c->stage;
    /* the padded form needs at most one shard more */
    return ensure(c, s, bytes + dsl_shard_size(bytes, c->world) + 64);
}

static void stage_close(struct dsl_comm *c)
{
    struct stage *s = c->stage;
    if (!s)
        return;
    stage_free_bufs(c, s);
    if (s->inner->close)
        s->inner->close(c);
    free(s);
    c->stage = NULL;
}

static void stage_abort(struct dsl_comm *c)
{
    struct stage *s = c->stage;
    if (s && s->inner->abort)
        s->inner->abort(c);
}

static const struct dsl_comm_ops cudahost_ops = {
    .name = "cuda-tcp", .run = stage_run, .sync = NULL, .close = stage_close,
    .threaded = 0, .reserve = stage_reserve, .abort = stage_abort,
};

int dsl_comm_cudahost_wrap(struct dsl_comm *c)
{
    struct stage *s = dsl_xcalloc(1, sizeof(*s));
    const char *pa = getenv(DSL_ENV_NCCL_PAD_ALWAYS);
    s->inner = c->ops;
    s->pad_always = pa && !strcmp(pa, "1");
    c->stage = s;
    c->ops = &cudahost_ops;
    return 0;
}
