/*
 * The communicator front end: opening from the env contract, argument checks, the ops
 * table dispatch, and asynchronous calls. The arithmetic the backends share (sums,
 * shards) is in comm_reduce.c, below them, so no backend ever calls back up into here.
 *
 * Theory of operation. dsl_comm_open_env() takes the worker's rank contract (or loads
 * it: common/rankenv.h) and keeps a copy for the backends. At world size 1
 * there is no store and no socket: every collective is a copy ("self" path below),
 * which keeps single-process training free of any networking. Otherwise rank 0 hosts
 * the rendezvous store and every rank opens a backend through it (comm_tcp.c,
 * comm_nccl.c).
 *
 * Asynchronous calls on a threaded backend (tcp) go into a FIFO served by one progress
 * thread, started on the first asynchronous call; requests are numbered 1, 2, ... in
 * issue order and complete in that order, so dsl_comm_wait(req) waits until
 * `completed >= req`. A blocking call first waits for everything issued before it and
 * then runs in the caller's thread (no hand-off, so small blocking calls pay no thread
 * wake-up). On the nccl backend every call is enqueued on the stream at issue time; a
 * wait orders the caller's compute stream after the request with an event (no host
 * wait), a blocking call drains the stream on the host (bounded), and
 * dsl_comm_stream_wait_host() is the bounded host wait for a compute stream. The
 * first failure is sticky: every later call returns it. The communicator is used by
 * one user thread at a time.
 *
 * Progress (common/progress.h): when the rank has a progress record, every call gets
 * the next collective number at issue, and the thread that runs it stores "inside #n"
 * before and "left #n" after (nccl: after the stream drained), so the node agent can
 * tell which collective a rank never entered. A failed call stays "inside". That is
 * two plain stores per call, no system call. Closing: the store's server (rank 0)
 * waits for the other ranks to disconnect only while some of them may still need it,
 * i.e. until a call that takes every rank's data has completed, and never after a
 * failure (a peer that is gone or stuck would hold it until the store timeout).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/cudalibs.h"
#include "dslaunch/common/envnames.h"
#include "dslaunch/comm/comm.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/progress.h"
#include "store.h"
#include "dslaunch/common/xalloc.h"
#include "comm_impl.h"
#include "comm_reduce.h"
#include "dslaunch/common/banned.h"

/* ---- world size 1: collectives are copies ---- */

static int self_run(struct dsl_comm *c, const struct dsl_comm_call *k)
{
    (void)c;
    size_t esz = dsl_dtype_size(k->dtype);
    switch (k->kind) {
    case DSL_COLL_ALLREDUCE:
    case DSL_COLL_REDUCE_SCATTER:
    case DSL_COLL_ALLGATHER:
        if (k->count && k->send != k->recv)
            memmove(k->recv, k->send, k->count * esz);
        break;
    case DSL_COLL_BROADCAST:
    case DSL_COLL_BARRIER:
        break;
    }
    return 0;
}

static void self_close(struct dsl_comm *c)
{
    (void)c;
}

static const struct dsl_comm_ops self_ops = {
    .name = "tcp", .run = self_run, .sync = NULL, .close = self_close, .threaded = 0,
};

/* ---- opening ---- */

int dsl_comm_open_env(struct dsl_comm **out, const struct dsl_comm_opts *o, char *err)
{
    struct dsl_comm_opts defaults = {0};
    struct dsl_comm *c = NULL;
    int r;

    *out = NULL;
    if (!o)
        o = &defaults;
    c = dsl_xcalloc(1, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    atomic_init(&c->bytes_sent, 0);
    c->deterministic = o->deterministic;
    c->device = o->device;
    c->prog = dsl_progress_self(NULL);
    if (o->env)
        c->env = *o->env;
    else if ((r = dsl_rankenv_load(&c->env, err)) < 0)
        goto out;
    c->world = c->env.world_size;
    c->rank = c->env.rank;
    c->timeout_s = o->timeout_s;
    if (c->timeout_s <= 0) {
        const char *s = getenv(DSL_ENV_COMM_TIMEOUT);
        c->timeout_s = 300;
        /* a collective may wait this long for its peers: a week at most */
        if (s && *s && (dsl_parse_seconds(s, &c->timeout_s) < 0 || c->timeout_s <= 0 ||
                        c->timeout_s > 7 * 86400.0)) {
            r = dsl_seterr(err, DSL_EUSAGE,
                           "bad DSLAUNCH_COMM_TIMEOUT: allowed a duration over 0 and up to "
                           "604800 seconds, got '%s'", s);
            goto out;
        }
    }

    const char *backend = o->backend && *o->backend ? o->backend : "auto";
    int want_nccl = 0, staged = 0;
    if (!strcmp(backend, "cuda-tcp")) {
        /* device buffers through host memory and tcp: several ranks on one GPU (tests) */
#ifdef DSL_HAVE_CUDA
        staged = 1;
#else
        r = dsl_seterr(err, DSL_ENOTSUP, "backend 'cuda-tcp' is not built in (no CUDA)");
        goto out;
#endif
    } else if (!strcmp(backend, "nccl")) {
        want_nccl = 1;
    } else if (!strcmp(backend, "auto")) {
#ifdef DSL_HAVE_CUDA
        want_nccl = dsl_comm_nccl_available();
#endif
    } else if (strcmp(backend, "tcp") != 0) {
        r = dsl_seterr(err, DSL_EUSAGE, "unknown backend '%s' (expected tcp, nccl, auto or cuda-tcp)",
                       backend);
        goto out;
    }
#ifndef DSL_HAVE_CUDA
    if (want_nccl) {
        r = dsl_seterr(err, DSL_ENOTSUP, "backend 'nccl' is not built in (no CUDA/NCCL)");
        goto out;
    }
#else
    /* the driver and NCCL are loaded on first use: say which one is missing here */
    char why[DSL_ERR_LEN];
    if (want_nccl && dsl_cudalib_load(DSL_CUDALIB_DRIVER | DSL_CUDALIB_NCCL, why) < 0) {
        r = dsl_seterr(err, DSL_ENOGPU, "backend 'nccl': %s", why);
        goto out;
    }
#endif

    (void)staged; /* read only in a CUDA build */
    if (c->world > 1) {
        struct dsl_store_opts so;
        if ((r = dsl_store_opts_from_rankenv(&so, &c->env, err)) < 0)
            goto out;
        so.rank = c->rank;
        so.world_size = c->world;
        if ((r = dsl_store_open(&c->store, &so, err)) < 0)
            goto out;
    }
    if (want_nccl) {
#ifdef DSL_HAVE_CUDA
        r = dsl_comm_nccl_open(c);
#endif
    } else if (c->world == 1) {
        c->ops = &self_ops;
        r = 0;
    } else {
        r = dsl_comm_tcp_open(c);
    }
#ifdef DSL_HAVE_CUDA
    if (r == 0 && staged)
        r = dsl_comm_cudahost_wrap(c);
#endif
    if (r < 0) {
        dsl_seterr(err, r, "%s", c->err[0] ? c->err : dsl_strerror(r));
        goto out;
    }
    c->err[0] = '\0';
    *out = c;
    c = NULL;
    r = 0;
out:
    if (c) {
        if (c->store) {
            dsl_store_set_linger(c->store, 0); /* the job fails: nobody waits for it */
            dsl_store_free(c->store);
        }
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        free(c);
    }
    return r;
}

void dsl_comm_close(struct dsl_comm *c)
{
    if (!c)
        return;
    if (c->thread_started) {
        pthread_mutex_lock(&c->mu);
        c->stopping = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
    }
    if (c->ops && c->ops->close)
        c->ops->close(c);
    if (c->store) {
        dsl_store_set_linger(c->store, c->failed || c->all_joined ? 0 : c->timeout_s);
        dsl_store_free(c->store);
    }
    free(c->q);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int dsl_comm_rank(const struct dsl_comm *c) { return c->rank; }
int dsl_comm_size(const struct dsl_comm *c) { return c->world; }
const char *dsl_comm_backend(const struct dsl_comm *c) { return c->ops->name; }
const char *dsl_comm_last_error(const struct dsl_comm *c) { return c->err; }
struct dsl_store *dsl_comm_store(struct dsl_comm *c) { return c->store; }

void *dsl_comm_alloc(struct dsl_comm *c, size_t bytes)
{
    if (c->ops->alloc)
        return c->ops->alloc(c, bytes);
    return calloc(bytes ? bytes : 1, 1);
}

void dsl_comm_free(struct dsl_comm *c, void *p)
{
    if (!p)
        return;
    if (c->ops->free)
        c->ops->free(c, p);
    else
        free(p);
}

uint64_t dsl_comm_bytes_sent(const struct dsl_comm *c)
{
    return atomic_load_explicit(&((struct dsl_comm *)c)->bytes_sent, memory_order_relaxed);
}

#ifndef DSL_HAVE_CUDA
void *dsl_comm_stream(struct dsl_comm *c)
{
    (void)c;
    return NULL;
}
#endif

/* ---- argument checks ---- */

static int check_call(struct dsl_comm *c, const struct dsl_comm_call *k)
{
    const char *name = dsl_comm_kind_name(k->kind);
    if (c->failed)
        return c->failed;
    if (!dsl_dtype_size(k->dtype))
        return dsl_seterr(c->err, -EINVAL, "%s: unknown data type %d", name, (int)k->dtype);
    if (k->op != DSL_SUM && k->op != DSL_MAX)
        return dsl_seterr(c->err, -EINVAL, "%s: unknown reduction %d", name, (int)k->op);
    if (k->kind == DSL_COLL_BROADCAST && (k->root < 0 || k->root >= c->world))
        return dsl_seterr(c->err, -EINVAL, "broadcast: root %d out of range [0, %d)", k->root,
                          c->world);
    if (k->count && k->kind != DSL_COLL_BARRIER && (!k->recv || !k->send))
        return dsl_seterr(c->err, -EINVAL, "%s: NULL buffer", name);
    return 0;
}

/* ---- progress ---- */

static void coll_mark(struct dsl_comm *c, uint64_t seq, enum dsl_comm_kind kind, int inside)
{
    dsl_progress_coll(c->prog, seq, (enum dsl_progress_coll)((int)kind + 1), inside);
}

/* After call seq completed without error. */
static void coll_done(struct dsl_comm *c, uint64_t seq, enum dsl_comm_kind kind)
{
    coll_mark(c, seq, kind, 0);
    if (kind != DSL_COLL_BROADCAST)
        c->all_joined = 1;
}

/* ---- asynchronous queue ---- */

static void *progress_main(void *arg)
{
    struct dsl_comm *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->q_len && !c->stopping)
            pthread_cond_wait(&c->cv, &c->mu);
        if (!c->q_len)
            break;
        struct dsl_comm_queue_item it = c->q[c->q_head];
        int failed = c->failed;
        pthread_mutex_unlock(&c->mu);
        int r = failed;
        if (!r) {
            coll_mark(c, it.seq, it.call.kind, 1);
            if ((r = c->ops->run(c, &it.call)) == 0)
                coll_done(c, it.seq, it.call.kind);
        }
        pthread_mutex_lock(&c->mu);
        if (r < 0 && !c->failed)
            c->failed = r;
        c->q_head = (c->q_head + 1) % c->q_alloc;
        c->q_len--;
        c->completed = it.req;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static int enqueue(struct dsl_comm *c, const struct dsl_comm_call *k, uint64_t seq, int *req)
{
    pthread_mutex_lock(&c->mu);
    if (!c->thread_started) {
        if (pthread_create(&c->thread, NULL, progress_main, c)) {
            pthread_mutex_unlock(&c->mu);
            return dsl_seterr(c->err, -EAGAIN, "cannot start the progress thread");
        }
        c->thread_started = 1;
    }
    if (c->q_len == c->q_alloc) {
        size_t na = c->q_alloc ? c->q_alloc * 2 : 16;
        struct dsl_comm_queue_item *nq = dsl_xcalloc(na, sizeof(*nq));
        for (size_t i = 0; i < c->q_len; i++)
            nq[i] = c->q[(c->q_head + i) % c->q_alloc];
        free(c->q);
        c->q = nq;
        c->q_head = 0;
        c->q_alloc = na;
    }
    int id = ++c->issued;
    c->q[(c->q_head + c->q_len) % c->q_alloc] = (struct dsl_comm_queue_item){*k, id, seq};
    c->q_len++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    *req = id;
    return 0;
}

void dsl_comm_set_compute_stream(struct dsl_comm *c, void *stream)
{
    c->compute_stream = stream;
}

int dsl_comm_reserve(struct dsl_comm *c, size_t bytes)
{
    if (c->failed)
        return c->failed;
    return c->ops->reserve ? c->ops->reserve(c, bytes) : 0;
}

int dsl_comm_stream_wait_host(struct dsl_comm *c, void *stream)
{
    int r = c->failed;
    if (r || !c->ops->stream_wait)
        return r;
    if ((r = c->ops->stream_wait(c, stream)) < 0) {
        c->failed = r;
        return r;
    }
    if (c->open_seq) { /* everything enqueued so far is complete */
        coll_done(c, c->open_seq, c->open_kind);
        c->open_seq = 0;
    }
    return 0;
}

void dsl_comm_abort(struct dsl_comm *c)
{
    if (!c || !c->ops)
        return;
    if (c->ops->abort)
        c->ops->abort(c);
    if (!c->failed) {
        c->failed = DSL_EPEER;
        if (!c->err[0])
            snprintf(c->err, sizeof(c->err), "the communicator was aborted");
    }
}

int dsl_comm_wait(struct dsl_comm *c, int req)
{
    if (!c->ops->threaded && c->ops->order) {
        /* nccl: order the compute stream after the request; the collective stays
         * "inside" in the progress record until the host sees it complete */
        int r = c->failed;
        if (!r && req > c->issued)
            return dsl_seterr(c->err, -EINVAL, "wait: request %d was never issued", req);
        if (!r && (r = c->ops->order(c, req)) < 0)
            c->failed = r;
        return r;
    }
    if (!c->ops->threaded) {
        int r = c->failed;
        if (!r && c->ops->sync && (r = c->ops->sync(c)) < 0)
            c->failed = r;
        if (!r && c->open_seq) {
            coll_done(c, c->open_seq, c->open_kind);
            c->open_seq = 0;
        }
        return r;
    }
    pthread_mutex_lock(&c->mu);
    if (req > c->issued) {
        pthread_mutex_unlock(&c->mu);
        return dsl_seterr(c->err, -EINVAL, "wait: request %d was never issued", req);
    }
    while (c->completed < req)
        pthread_cond_wait(&c->cv, &c->mu);
    int r = c->failed;
    pthread_mutex_unlock(&c->mu);
    return r;
}

static int submit(struct dsl_comm *c, const struct dsl_comm_call *k, int *req)
{
    int r = check_call(c, k);
    if (r < 0)
        return r;
    uint64_t seq = ++c->coll_seq;
    if (req) {
        if (c->ops->threaded)
            return enqueue(c, k, seq, req);
        /* self and nccl: run (enqueue on the stream) now */
        *req = ++c->issued;
        coll_mark(c, seq, k->kind, 1);
        if ((r = c->ops->run(c, k)) < 0) {
            c->failed = r;
        } else if (c->ops->sync) {
            c->open_seq = seq; /* left once dsl_comm_wait has drained the stream */
            c->open_kind = k->kind;
        } else {
            coll_done(c, seq, k->kind);
        }
        c->completed = *req;
        return r;
    }
    if (c->ops->threaded && c->issued > c->completed && (r = dsl_comm_wait(c, c->issued)) < 0)
        return r;
    coll_mark(c, seq, k->kind, 1);
    if ((r = c->ops->run(c, k)) < 0 || (c->ops->sync && (r = c->ops->sync(c)) < 0)) {
        c->failed = r;
        return r;
    }
    c->open_seq = 0; /* the sync drained whatever was enqueued before */
    coll_done(c, seq, k->kind);
    return 0;
}

/* ---- the API ---- */

int dsl_comm_allreduce(struct dsl_comm *c, const void *send, void *recv, size_t count,
                       enum dsl_dtype t, enum dsl_redop op)
{
    struct dsl_comm_call k = {DSL_COLL_ALLREDUCE, send, recv, count, t, op, 0};
    return submit(c, &k, NULL);
}

int dsl_comm_reduce_scatter(struct dsl_comm *c, const void *send, void *recv, size_t count,
                            enum dsl_dtype t, enum dsl_redop op)
{
    struct dsl_comm_call k = {DSL_COLL_REDUCE_SCATTER, send, recv, count, t, op, 0};
    return submit(c, &k, NULL);
}

int dsl_comm_allgather(struct dsl_comm *c, const void *send, void *recv, size_t count,
                       enum dsl_dtype t)
{
    struct dsl_comm_call k = {DSL_COLL_ALLGATHER, send, recv, count, t, DSL_SUM, 0};
    return submit(c, &k, NULL);
}

int dsl_comm_broadcast(struct dsl_comm *c, void *buf, size_t count, enum dsl_dtype t, int root)
{
    struct dsl_comm_call k = {DSL_COLL_BROADCAST, buf, buf, count, t, DSL_SUM, root};
    return submit(c, &k, NULL);
}

int dsl_comm_barrier(struct dsl_comm *c)
{
    struct dsl_comm_call k = {DSL_COLL_BARRIER, NULL, NULL, 0, DSL_INT32, DSL_SUM, 0};
    return submit(c, &k, NULL);
}

int dsl_comm_iallreduce(struct dsl_comm *c, const void *send, void *recv, size_t count,
                        enum dsl_dtype t, enum dsl_redop op, int *req)
{
    struct dsl_comm_call k = {DSL_COLL_ALLREDUCE, send, recv, count, t, op, 0};
    return submit(c, &k, req);
}

int dsl_comm_ireduce_scatter(struct dsl_comm *c, const void *send, void *recv, size_t count,
                             enum dsl_dtype t, enum dsl_redop op, int *req)
{
    struct dsl_comm_call k = {DSL_COLL_REDUCE_SCATTER, send, recv, count, t, op, 0};
    return submit(c, &k, req);
}

int dsl_comm_iallgather(struct dsl_comm *c, const void *send, void *recv, size_t count,
                        enum dsl_dtype t, int *req)
{
    struct dsl_comm_call k = {DSL_COLL_ALLGATHER, send, recv, count, t, DSL_SUM, 0};
    return submit(c, &k, req);
}
