/*
 * The nccl backend at world size 1 on a real GPU (label gpu): every collective on fp32,
 * fp16, bf16 and int32, in-place and out-of-place, against the values the CPU expects
 * (at world 1 every reduction is the identity, so results must match bit for bit).
 * Exits 77 (skip) without a CUDA device.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/common/error.h"
#include "test.h"

static struct dsl_comm *c;

static void fill(unsigned char *h, size_t bytes, int seed)
{
    for (size_t i = 0; i < bytes; i++)
        h[i] = (unsigned char)((i * 37 + (size_t)seed * 11) % 251 % 120); /* no NaN patterns */
}

static void check_one(enum dsl_dtype t, size_t n, int inplace)
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
                check_one(types[ti], counts[ci], inplace);
    ASSERT_OK(dsl_comm_barrier(c));
    ASSERT(dsl_comm_stream(c) != NULL);
    ASSERT_STR_EQ(dsl_comm_backend(c), "nccl");
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
    if (dsl_comm_open_env(&c, &o, err) < 0) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    int r = RUN_TESTS(argc, argv);
    dsl_comm_close(c);
    return r;
}
