/*
 * dsbench: collective benchmark in the shape of nccl-tests, run under dslaunch (or any
 * launcher that sets the env contract).
 *
 *   dslaunch --include localhost:0,1 dsbench -b 1K -e 512M -f 4 -o allreduce
 *
 * For each size it runs -w warm-up and -n timed iterations of the collective, then one
 * checked iteration whose input is seeded by (rank, iteration), so every rank can
 * compute the expected result and count wrong values. Times are the slowest rank's;
 * busbw uses nccl-tests' factors (allreduce 2(n-1)/n, reduce_scatter and allgather
 * (n-1)/n, broadcast 1). Rank 0 prints the table; every rank agrees on the wrong count
 * and exits non-zero if it is not zero.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/rankenv.h"
#include "dslaunch/comm/comm.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/common/parse.h"
#ifdef DSL_HAVE_CUDA
#include <cuda_runtime.h>

#include "dslaunch/common/cudalibs.h"
#endif
#include "dslaunch/common/banned.h"

enum bench_op { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_BROADCAST, OP_N };
static const char *const op_names[OP_N] = {"allreduce", "reduce_scatter", "allgather",
                                           "broadcast"};

struct bench_opts {
    size_t min_bytes, max_bytes; /* -b, -e */
    int factor;                  /* -f */
    int ops[OP_N];               /* -o */
    int warmup, iters;           /* -w, -n */
    char *backend;               /* --backend (NULL: tcp) */
    int deterministic;           /* -d */
    int check;                   /* -c 0|1 */
    int plain_malloc;            /* --malloc: buffers from malloc, not dsl_comm_alloc */
    int any_op, help;
};

struct bench {
    struct dsl_comm *c;
    int rank, world, on_device, plain_malloc; /* plain_malloc: --malloc */
    float *send, *recv; /* max_bytes each (device memory on nccl) */
    float *host;        /* host staging for checks */
    size_t max_count;
};

static float seed_val(int rank, size_t i, int iter)
{
    return (float)((int)((i * 13 + (size_t)rank * 7 + (size_t)iter * 5) % 17) - 8);
}

/* a copy between the host and the benchmark's buffers (on the GPU with --backend nccl);
 * to_device: host to buffer, else buffer to host */
static int copy_buf(struct bench *b, float *dst, const float *src, size_t n, int to_device)
{
#ifdef DSL_HAVE_CUDA
    if (b->on_device)
        return cudaMemcpy(dst, src, n * sizeof(float),
                          to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost) ==
                       cudaSuccess
                   ? 0
                   : -1;
#endif
    (void)b;
    (void)to_device;
    memcpy(dst, src, n * sizeof(float));
    return 0;
}

static int run_op(struct bench *b, enum bench_op op, size_t n)
{
    size_t off, len;
    dsl_shard_of(n, b->rank, b->world, &off, &len);
    switch (op) {
    case OP_ALLREDUCE:
        return dsl_comm_allreduce(b->c, b->send, b->recv, n, DSL_FLOAT32, DSL_SUM);
    case OP_REDUCE_SCATTER:
        return dsl_comm_reduce_scatter(b->c, b->send, b->recv, n, DSL_FLOAT32, DSL_SUM);
    case OP_ALLGATHER:
        return dsl_comm_allgather(b->c, b->send, b->recv, n, DSL_FLOAT32);
    case OP_BROADCAST:
        return dsl_comm_broadcast(b->c, b->recv, n, DSL_FLOAT32, 0);
    default:
        return -1;
    }
}

/* Seed the inputs of a checked iteration. */
static int seed(struct bench *b, enum bench_op op, size_t n, int iter)
{
    size_t off, len;
    dsl_shard_of(n, b->rank, b->world, &off, &len);
    float *h = b->host;
    if (op == OP_ALLGATHER) {
        for (size_t i = 0; i < len; i++)
            h[i] = seed_val(b->rank, off + i, iter);
        return copy_buf(b, b->send, h, len, 1);
    }
    if (op == OP_BROADCAST) {
        for (size_t i = 0; i < n; i++)
            h[i] = b->rank == 0 ? seed_val(0, i, iter) : -99.0f;
        return copy_buf(b, b->recv, h, n, 1);
    }
    for (size_t i = 0; i < n; i++)
        h[i] = seed_val(b->rank, i, iter);
    return copy_buf(b, b->send, h, n, 1);
}

/* Count wrong values of a checked iteration on this rank. */
static uint64_t count_wrong(struct bench *b, enum bench_op op, size_t n, int iter)
{
    size_t off, len, s = dsl_shard_size(n, b->world);
    dsl_shard_of(n, b->rank, b->world, &off, &len);
    size_t m = op == OP_REDUCE_SCATTER ? len : n;
    uint64_t wrong = 0;
    if (copy_buf(b, b->host, b->recv, m, 0) < 0)
        return m ? m : 1;
    for (size_t i = 0; i < m; i++) {
        float want = 0;
        if (op == OP_ALLREDUCE || op == OP_REDUCE_SCATTER) {
            size_t gi = op == OP_ALLREDUCE ? i : off + i;
            for (int r = 0; r < b->world; r++)
                want += seed_val(r, gi, iter);
        } else if (op == OP_ALLGATHER) {
            want = seed_val((int)(i / s), i, iter);
        } else {
            want = seed_val(0, i, iter);
        }
        if (b->host[i] != want)
            wrong++;
    }
    return wrong;
}

/*
 * The slowest rank's time and the sum of every rank's wrong count, on every rank: two
 * tiny collectives on host values, or on the nccl backend (which reduces device memory
 * only) on the first two elements of the device buffers, staged through the host.
 */
static int agree(struct bench *b, float dt, int32_t wr, float *dtmax, int32_t *wsum)
{
    if (!b->on_device)
        return dsl_comm_allreduce(b->c, &dt, dtmax, 1, DSL_FLOAT32, DSL_MAX) < 0 ||
                       dsl_comm_allreduce(b->c, &wr, wsum, 1, DSL_INT32, DSL_SUM) < 0
                   ? -1
                   : 0;
    float v[2] = {dt, 0};
    memcpy(&v[1], &wr, sizeof(wr)); /* an int32 in a float's place */
    if (copy_buf(b, b->send, v, 2, 1) < 0 ||
        dsl_comm_allreduce(b->c, b->send, b->recv, 1, DSL_FLOAT32, DSL_MAX) < 0 ||
        dsl_comm_allreduce(b->c, b->send + 1, b->recv + 1, 1, DSL_INT32, DSL_SUM) < 0 ||
        copy_buf(b, v, b->recv, 2, 0) < 0)
        return -1;
    *dtmax = v[0];
    memcpy(wsum, &v[1], sizeof(*wsum));
    return 0;
}

static double busbw_factor(enum bench_op op, int world)
{
    double n = world;
    switch (op) {
    case OP_ALLREDUCE: return 2 * (n - 1) / n;
    case OP_REDUCE_SCATTER:
    case OP_ALLGATHER: return (n - 1) / n;
    default: return 1;
    }
}

static int set_op(void *target, const struct dsl_opt *d, const char *v, char *err)
{
    struct bench_opts *o = target;
    (void)d;
    for (int i = 0; i < OP_N; i++)
        if (!strcmp(v, "all") || !strcmp(v, op_names[i]))
            o->ops[i] = o->any_op = 1;
    if (!o->any_op)
        return dsl_seterr(err, DSL_EUSAGE, "unknown op '%s' (allreduce, reduce_scatter, "
                          "allgather, broadcast or all)", v);
    return 0;
}

#define OFF(f) offsetof(struct bench_opts, f)
static const struct dsl_opt opts[] = {
    {"minbytes", 'b', DSL_OPT_SIZE, OFF(min_bytes), "BYTES", "smallest size (K/M/G suffixes)",
     "1K", 4, 16L << 30, NULL, 0, NULL},
    {"maxbytes", 'e', DSL_OPT_SIZE, OFF(max_bytes), "BYTES", "largest size", "32M", 4,
     16L << 30, NULL, 0, NULL},
    {"stepfactor", 'f', DSL_OPT_INT, OFF(factor), "N", "multiply the size by N each step", "4", 2,
     1024, NULL, 0, NULL},
    {"op", 'o', DSL_OPT_CALL, 0, "OP",
     "allreduce, reduce_scatter, allgather, broadcast or all (repeatable)", "allreduce", 0, 0,
     set_op, 0, NULL},
    {"warmup_iters", 'w', DSL_OPT_INT, OFF(warmup), "N", "untimed iterations per size", "5", 0,
     1000000, NULL, 0, NULL},
    {"iters", 'n', DSL_OPT_INT, OFF(iters), "N", "timed iterations per size", "20", 1, 1000000,
     NULL, 0, NULL},
    {"backend", 0, DSL_OPT_STRING, OFF(backend), "NAME", "tcp or nccl", "tcp", 0, 0, NULL, 0,
     NULL},
    {"deterministic", 'd', DSL_OPT_FLAG, OFF(deterministic), NULL,
     "the deterministic (tree-order) sums", NULL, 0, 0, NULL, 0, NULL},
    {"check", 'c', DSL_OPT_INT, OFF(check), "0|1", "check every result", "1", 0, 1, NULL, 0,
     NULL},
    {"malloc", 0, DSL_OPT_FLAG, OFF(plain_malloc), NULL,
     "host buffers from plain malloc (copied paths) instead of dsl_comm_alloc (shared with "
     "same-host peers, so collectives need no copy)", NULL, 0, 0, NULL, 0, NULL},
    {"help", 'h', DSL_OPT_FLAG, offsetof(struct bench_opts, help), NULL, "show this help", NULL, 0, 0,
     NULL, 0, NULL},
};
static const struct dsl_opt_parser parser = {
    .prog = "dsbench", .opts = opts, .nopts = sizeof(opts) / sizeof(opts[0])};

static void usage(FILE *f)
{
    fprintf(f, "usage: dsbench [options]   (one rank per process, under dslaunch)\n");
    dsl_opt_help(&parser, f);
}

/* 0 to run, 1 after --help, -1 on a usage error (reported) */
static int parse_args(int argc, char **argv, struct bench_opts *o)
{
    char err[DSL_ERR_LEN];
    *o = (struct bench_opts){.min_bytes = 1024, .max_bytes = 32 << 20, .factor = 4,
                             .warmup = 5, .iters = 20, .check = 1};
    if (dsl_opt_parse(&parser, o, argc, argv, NULL, err) < 0) {
        fprintf(stderr, "dsbench: error: %s\n", err);
        return -1;
    }
    if (o->help) {
        usage(stdout);
        return 1;
    }
    if (!o->any_op)
        o->ops[OP_ALLREDUCE] = 1;
    if (o->min_bytes < 4)
        o->min_bytes = 4;
    if (o->max_bytes < o->min_bytes) {
        fprintf(stderr, "dsbench: error: --maxbytes is smaller than --minbytes\n");
        return -1;
    }
    return 0;
}

static int alloc_buffers(struct bench *b, size_t bytes)
{
    b->host = malloc(bytes);
#ifdef DSL_HAVE_CUDA
    if (b->on_device) {
        if (!b->host || cudaMalloc((void **)&b->send, bytes) != cudaSuccess ||
            cudaMalloc((void **)&b->recv, bytes) != cudaSuccess)
            return -1;
        cudaMemset(b->send, 0, bytes);
        cudaMemset(b->recv, 0, bytes);
        return 0;
    }
#endif
    b->send = b->plain_malloc ? malloc(bytes) : dsl_comm_alloc(b->c, bytes);
    b->recv = b->plain_malloc ? malloc(bytes) : dsl_comm_alloc(b->c, bytes);
    if (!b->host || !b->send || !b->recv)
        return -1;
    /* touch everything once so page faults stay out of the timings */
    memset(b->host, 0, bytes);
    memset(b->send, 0, bytes);
    memset(b->recv, 0, bytes);
    return 0;
}

static void free_buffers(struct bench *b)
{
#ifdef DSL_HAVE_CUDA
    if (b->on_device) {
        cudaFree(b->send);
        cudaFree(b->recv);
        free(b->host);
        return;
    }
#endif
    if (b->plain_malloc) {
        free(b->send);
        free(b->recv);
    } else {
        dsl_comm_free(b->c, b->send);
        dsl_comm_free(b->c, b->recv);
    }
    free(b->host);
}

int main(int argc, char **argv)
{
    struct bench_opts o;
    struct bench b = {0};
    char err[DSL_ERR_LEN] = "";
    int failed = 0;
    uint64_t total_wrong = 0;
    double bw_sum = 0;
    int bw_n = 0;

    int pr = parse_args(argc, argv, &o);
    if (pr != 0) {
        free(o.backend);
        return pr > 0 ? 0 : 2;
    }
    const char *source; /* ranks of srun or mpirun: their variables into the contract */
    if (dsl_rankenv_adopt(&source, err) < 0) {
        fprintf(stderr, "dsbench: error: %s\n", err);
        free(o.backend);
        return 2;
    }
    struct dsl_rankenv env; /* the contract, read once and passed down */
    if (dsl_rankenv_load(&env, err) < 0) {
        fprintf(stderr, "dsbench: error: %s\n", err);
        free(o.backend);
        return 2;
    }
    struct dsl_comm_opts co = {.backend = o.backend ? o.backend : "tcp",
                               .deterministic = o.deterministic,
                               .env = &env};
#ifdef DSL_HAVE_CUDA
    /* nccl: this rank's GPU by the rule of common/gpupick.h, with the driver and NCCL
     * loaded, or exit 3 saying what is missing; auto: that, or tcp with a notice */
    if (!strcmp(co.backend, "nccl") || !strcmp(co.backend, "auto")) {
        int auto_ = !strcmp(co.backend, "auto");
        if (dsl_cudalib_place(DSL_CUDALIB_DRIVER | DSL_CUDALIB_NCCL, &env, &co.device,
                              err) == 0) {
            co.backend = "nccl";
        } else if (auto_) {
            fprintf(stderr, "dsbench: backend auto: on the CPU (tcp): %s\n", err);
            co.backend = "tcp";
        } else {
            fprintf(stderr, "dsbench: error: backend 'nccl' needs a GPU for this rank: %s\n",
                    err);
            free(o.backend);
            return 3;
        }
    }
#endif
    int opened = dsl_comm_open_env(&b.c, &co, err);
    if (opened < 0) {
        fprintf(stderr, "dsbench: error: %s\n", err);
        free(o.backend);
        /* a bad setting (DSLAUNCH_COMM_TIMEOUT, a DSL_COMM_* knob, the backend, or a
           backend this build lacks) is a usage error, 2, as in dstrain; a failure to
           meet the other ranks is 1; the GPU not to be had on this node 3 */
        return opened == DSL_ENOGPU                              ? 3
               : opened == DSL_EUSAGE || opened == DSL_ENOTSUP ? 2
                                                                : 1;
    }
    b.rank = dsl_comm_rank(b.c);
    b.world = dsl_comm_size(b.c);
    b.on_device = !strcmp(dsl_comm_backend(b.c), "nccl");
    b.max_count = o.max_bytes / sizeof(float);
    b.plain_malloc = o.plain_malloc;
    /* at least two elements: agree() stages its two values there */
    if (alloc_buffers(&b, (b.max_count < 2 ? 2 : b.max_count) * sizeof(float)) < 0) {
        fprintf(stderr, "dsbench: error: cannot allocate 3 x %zu bytes\n", o.max_bytes);
        dsl_comm_close(b.c);
        free(o.backend);
        return 1;
    }
    if (b.rank == 0) {
        printf("# dsbench: backend %s, world %d, deterministic %d, warmup %d, iters %d, "
               "buffers %s\n",
               dsl_comm_backend(b.c), b.world, o.deterministic, o.warmup, o.iters,
               b.on_device ? "device" : b.plain_malloc ? "malloc" : "dsl_comm_alloc");
    }
    for (int op = 0; op < OP_N && !failed; op++) {
        if (!o.ops[op])
            continue;
        if (b.rank == 0) {
            printf("#\n# %s\n", op_names[op]);
            printf("# %12s %12s %6s %10s %9s %9s %7s\n", "size", "count", "type", "time",
                   "algbw", "busbw", "#wrong");
            printf("# %12s %12s %6s %10s %9s %9s %7s\n", "(B)", "(elements)", "", "(us)",
                   "(GB/s)", "(GB/s)", "");
        }
        for (size_t bytes = o.min_bytes; bytes <= o.max_bytes && !failed;
             bytes *= (size_t)o.factor) {
            size_t n = bytes / sizeof(float);
            int r = 0;
            for (int i = 0; i < o.warmup && r == 0; i++)
                r = run_op(&b, (enum bench_op)op, n);
            if (r == 0)
                r = dsl_comm_barrier(b.c);
            double t0 = dsl_now();
            for (int i = 0; i < o.iters && r == 0; i++)
                r = run_op(&b, (enum bench_op)op, n);
            float dt = (float)((dsl_now() - t0) / o.iters);
            if (r < 0) {
                fprintf(stderr, "dsbench: rank %d: error: %s\n", b.rank, dsl_comm_last_error(b.c));
                failed = 1;
                break;
            }
            float dtmax = dt;
            uint64_t wrong = 0;
            int32_t wr = 0, wsum = 0;
            if (o.check) {
                int iter = o.iters + 1;
                if (seed(&b, (enum bench_op)op, n, iter) < 0 ||
                    run_op(&b, (enum bench_op)op, n) < 0)
                    wrong = n ? n : 1;
                else
                    wrong = count_wrong(&b, (enum bench_op)op, n, iter);
            }
            wr = wrong > INT32_MAX / 1024 ? INT32_MAX / 1024 : (int32_t)wrong;
            /* agree: slowest time and total wrong, on every backend and world size */
            if (agree(&b, dt, wr, &dtmax, &wsum) < 0) {
                fprintf(stderr, "dsbench: rank %d: error: %s\n", b.rank, dsl_comm_last_error(b.c));
                failed = 1;
                break;
            }
            total_wrong += (uint64_t)wsum;
            double algbw = (double)bytes / dtmax / 1e9;
            double busbw = algbw * busbw_factor((enum bench_op)op, b.world);
            if (bytes >= ((size_t)1 << 20)) {
                bw_sum += busbw;
                bw_n++;
            }
            if (b.rank == 0) {
                printf("  %12zu %12zu %6s %10.1f %9.3f %9.3f %7d\n", bytes, n, "float",
                       (double)dtmax * 1e6, algbw, busbw, (int)wsum);
                fflush(stdout);
            }
        }
    }
    if (b.rank == 0) {
        printf("#\n# wrong values: %llu\n", (unsigned long long)total_wrong);
        printf("# ranks agree: %s\n", failed ? "no (error)" : "yes");
        if (bw_n)
            printf("# avg busbw (sizes >= 1 MiB): %.3f GB/s\n", bw_sum / bw_n);
        printf("# bytes sent by rank 0: %llu\n",
               (unsigned long long)dsl_comm_bytes_sent(b.c));
    }
    free_buffers(&b);
    dsl_comm_close(b.c);
    free(o.backend);
    return failed || total_wrong ? 1 : 0;
}
