/*
 * The nccl backend at world size 1 on a real GPU (label gpu): every collective on fp32,
 * fp16, bf16 and int32, in-place and out-of-place, against the values the CPU expects
 * (at world 1 every reduction is the identity, so results must match bit for bit), also
 * through the padded path of uneven shards (DSLAUNCH_NCCL_PAD_ALWAYS=1: at world 1 no
 * shard is uneven), and the host-synchronisation accounting: an asynchronous call and
 * its wait never wait on the host, a blocking call and dsl_comm_stream_wait_host() do
 * once each. Exits 77 (skip) without a CUDA device.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/hostsync.h"
#include "test.h"

static struct dsl_comm *comm, *cpad; /* cpad: every shard through the padded path */

static void fill(unsigned char *h, size_t bytes, int seed)
{
    for (size_t i = 0; i < bytes; i++)
        h[i] = (unsigned char)((i * 37 + (size_t)seed * 11) % 251 % 120); /* no NaN patterns */
}

static void check_one(struct dsl_comm *c, enum dsl_dtype t, size_t n, int inplace)
{
    size_t esz = dsl_dtype_size(t), bytes = n * esz;
    unsigned char *h = malloc(bytes + 1), *out = malloc(bytes + 1);
    void *d_send = NULL, *d_recv = NULL;
    ASSERT(cudaMalloc(&d_send, bytes + 4) == cudaSuccess);
    ASSERT(cudaMalloc(&d_recv, bytes + 4) == cudaSuccess);
    fill(h, bytes, (int)n);
    void *dst = inplace ? d_send : d_recv;

    for (int op = 0; op < 4; op++) {
        ASSERT(cudaMemcpy(d_send, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
        ASSERT(cudaMemset(d_recv, 0xff, bytes) == cudaSuccess);
        int r;
        switch (op) {
        case 0: r = dsl_comm_allreduce(c, d_send, dst, n, t, DSL_SUM); break;
        case 1: r = dsl_comm_reduce_scatter(c, d_send, dst, n, t, DSL_MAX); break;
        case 2: r = dsl_comm_allgather(c, d_send, dst, n, t); break;
        default: dst = d_send; r = dsl_comm_broadcast(c, d_send, n, t, 0); break;
        }
        if (r < 0)
            fprintf(stderr, "op %d: %s\n", op, dsl_comm_last_error(c));
        ASSERT_OK(r);
        ASSERT(cudaMemcpy(out, dst, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
        if (memcmp(out, h, bytes)) {
            size_t k = 0;
            while (k < bytes && out[k] == h[k])
                k++;
            size_t e = k / esz * esz;
            fprintf(stderr, "dtype %d n %zu inplace %d op %d: result differs at element %zu:",
                    (int)t, n, inplace, op, k / esz);
            for (size_t b = 0; b < esz; b++)
                fprintf(stderr, " %02x/%02x", out[e + b], h[e + b]);
            fprintf(stderr, " (got/expected bytes)\n");
            ASSERT(0);
        }
        dst = inplace ? d_send : d_recv;
    }
    int req;
    ASSERT(cudaMemcpy(d_send, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    ASSERT_OK(dsl_comm_iallreduce(c, d_send, d_recv, n, t, DSL_SUM, &req));
    ASSERT_OK(dsl_comm_wait(c, req));
    ASSERT(cudaMemcpy(out, d_recv, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    ASSERT(memcmp(out, h, bytes) == 0);
    cudaFree(d_send);
    cudaFree(d_recv);
    free(h);
    free(out);
}

TEST(nccl_should_run_every_collective_at_world_1)
{
    static const enum dsl_dtype types[] = {DSL_FLOAT32, DSL_FLOAT16, DSL_BFLOAT16, DSL_INT32};
    static const size_t counts[] = {0, 1, 7, 1000, 1u << 20};
    for (size_t ti = 0; ti < 4; ti++)
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
            for (int inplace = 0; inplace < 2; inplace++)
                check_one(comm, types[ti], counts[ci], inplace);
    ASSERT_OK(dsl_comm_barrier(comm));
    ASSERT(dsl_comm_stream(comm) != NULL);
    ASSERT_STR_EQ(dsl_comm_backend(comm), "nccl");
}

TEST(nccl_padded_path_should_give_the_same_results)
{
    static const enum dsl_dtype types[] = {DSL_FLOAT32, DSL_FLOAT16, DSL_BFLOAT16, DSL_INT32};
    static const size_t counts[] = {1, 7, 1000, 12345};
    /* reserved once: none of these reallocates */
    ASSERT_OK(dsl_comm_reserve(cpad, 12345 * 4));
    for (size_t ti = 0; ti < 4; ti++)
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
            for (int inplace = 0; inplace < 2; inplace++)
                check_one(cpad, types[ti], counts[ci], inplace);
}

/* Upload, an out-of-place all-reduce and a download, all queued without a host wait:
 * the collective must start after the upload on the compute stream (else it reads d
 * before the samples arrive) and the download after the collective (else it reads
 * d2's fill pattern, a NaN). The host buffers are never touched while a queued copy
 * may still use them: the source is written before the upload is queued and only
 * read after, and the destination is filled before the download is queued and read
 * after the host wait. */
TEST(nccl_waits_should_order_the_stream_and_not_the_host)
{
    size_t n = 1u << 16, bytes = n * sizeof(float);
    float *src = NULL, *dst = NULL, *d = NULL, *d2 = NULL;
    cudaStream_t s;
    ASSERT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    ASSERT(cudaMallocHost((void **)&src, bytes) == cudaSuccess);
    ASSERT(cudaMallocHost((void **)&dst, bytes) == cudaSuccess);
    ASSERT(cudaMalloc((void **)&d, bytes) == cudaSuccess);
    ASSERT(cudaMalloc((void **)&d2, bytes) == cudaSuccess);
    for (size_t i = 0; i < n; i++)
        src[i] = (float)(i % 1000);
    memset(dst, 0, bytes);
    ASSERT(cudaMemset(d2, 0xff, bytes) == cudaSuccess); /* NaN: not yet reduced */
    ASSERT(cudaDeviceSynchronize() == cudaSuccess);
    dsl_comm_set_compute_stream(comm, s);
    uint64_t h0 = dsl_hostsync_count();
    ASSERT(cudaMemcpyAsync(d, src, bytes, cudaMemcpyHostToDevice, s) == cudaSuccess);
    int req;
    ASSERT_OK(dsl_comm_iallreduce(comm, d, d2, n, DSL_FLOAT32, DSL_SUM, &req));
    ASSERT_OK(dsl_comm_wait(comm, req));
    ASSERT(dsl_hostsync_count() == h0); /* no host wait so far */
    ASSERT(cudaMemcpyAsync(dst, d2, bytes, cudaMemcpyDeviceToHost, s) == cudaSuccess);
    ASSERT_OK(dsl_comm_stream_wait_host(comm, s));
    ASSERT(dsl_hostsync_count() == h0 + 1);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !(dst[i] == src[i]);
    if (bad)
        fprintf(stderr, "# %zu of %zu elements differ (element 0: %g, expected %g)\n", bad,
                n, (double)dst[0], (double)src[0]);
    ASSERT_EQ(bad, 0);
    ASSERT_OK(dsl_comm_allreduce(comm, d, d, n, DSL_FLOAT32, DSL_SUM)); /* blocking: one */
    ASSERT(dsl_hostsync_count() == h0 + 2);
    dsl_comm_set_compute_stream(comm, NULL);
    cudaFree(d);
    cudaFree(d2);
    cudaFreeHost(src);
    cudaFreeHost(dst);
    cudaStreamDestroy(s);
}

int main(int argc, char **argv)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "# no CUDA device: skipped\n");
        return 77;
    }
    char err[DSL_ERR_LEN] = "";
    struct dsl_comm_opts o = {.backend = "nccl"};
    unsetenv("WORLD_SIZE");
    unsetenv("RANK");
    if (dsl_comm_open_env(&comm, &o, err) < 0) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    setenv(DSL_ENV_NCCL_PAD_ALWAYS, "1", 1);
    if (dsl_comm_open_env(&cpad, &o, err) < 0) {
        fprintf(stderr, "open (padded): %s\n", err);
        return 1;
    }
    unsetenv(DSL_ENV_NCCL_PAD_ALWAYS);
    int r = RUN_TESTS(argc, argv);
    dsl_comm_close(cpad);
    dsl_comm_close(comm);
    return r;
}
