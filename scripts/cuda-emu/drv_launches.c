/*
 * The CUDA GPT's launches per training micro step under the emulation (run.sh BUILD
 * cuda_launches): the model alone, as dstrain's DSTRAIN_COUNT_LAUNCHES counts them
 * (common/gpuprof.h: each kernel launcher and cuBLAS(Lt) call is one), in bf16 with the
 * cuBLASLt epilogues (width a multiple of 8, as GPT-2's 768), with 1 and 2 blocks, so
 * the count splits into a fixed part and a part per block. The count depends on the
 * shapes only through the LM head's chunks (4 launches each, one chunk here; GPT-2 124M
 * at micro batch 16 takes 13) and the gradient segments (one per tensor here), so the
 * figures carry over to GPT-2's depth: fixed + 12 x per block + 4 x 12 more chunks.
 * Exits non-zero when a count cannot be taken.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/gpuprof.h"
#include "dslaunch/model/model.h"

struct flat {
    char *base;
    const struct dsl_model *m;
};

static float *flat_dest(void *ctx, size_t seg)
{
    struct flat *f = ctx;
    return (float *)(void *)(f->base + f->m->segs[seg].off * 2);
}

static void flat_done(void *ctx, size_t seg)
{
    (void)ctx;
    (void)seg;
}

/* the launches of one forward_backward of a bf16 GPT with L blocks; 0 on failure */
static uint64_t launches(size_t L)
{
    const size_t C = 64, NH = 2, T = 32, V = 256, B = 1;
    struct dsl_model_spec sp = {.type = "gpt", .in_dim = T + 1, .out_dim = V, .max_batch = B,
                                .dtype = DSL_BFLOAT16,
                                .gpt = {.layers = L, .dim = C, .heads = NH, .context = T}};
    struct dsl_model m;
    char err[DSL_ERR_LEN];
    if (dsl_model_create_cuda(&m, &sp, err) < 0) {
        fprintf(stderr, "drv_launches: %s\n", err);
        return 0;
    }
    void *params = NULL, *grads = NULL;
    float *stats = NULL, x[T + 1];
    for (size_t i = 0; i <= T; i++)
        x[i] = (float)((i * 7) % V);
    uint64_t before = 0, in = 0;
    if (cudaMalloc(&params, m.nparams * 2) == cudaSuccess &&
        cudaMalloc(&grads, m.nparams * 2) == cudaSuccess &&
        cudaMalloc((void **)&stats, 2 * sizeof(float)) == cudaSuccess &&
        cudaMemset(params, 0, m.nparams * 2) == cudaSuccess) {
        struct flat f = {grads, &m};
        struct dsl_grad_sink k = {.dest = flat_dest, .done = flat_done, .ctx = &f,
                                  .dev_stats = stats, .dev_stats_stride = 1};
        struct dsl_model_stats st;
        dsl_gpuprof_step_begin(1);
        int r = m.ops->forward_backward(&m, params, x, NULL, B, 1.0f, &k, &st);
        dsl_gpuprof_step_end();
        if (r < 0)
            fprintf(stderr, "drv_launches: %s\n", m.err);
        else
            dsl_gpuprof_step_launches(&before, &in);
    }
    cudaFree(params);
    cudaFree(grads);
    cudaFree(stats);
    dsl_model_release(&m);
    return in;
}

int main(void)
{
    dsl_gpuprof_count_launches();
    uint64_t one = launches(1), two = launches(2);
    if (!one || two <= one) {
        fprintf(stderr, "drv_launches: no count (%llu, %llu)\n", (unsigned long long)one,
                (unsigned long long)two);
        return 1;
    }
    uint64_t per = two - one, fixed = one - per;
    printf("gpt launches per micro step (bf16, epilogues): fixed %llu, per block %llu; "
           "GPT-2 124M (12 blocks, 13 head chunks): %llu\n",
           (unsigned long long)fixed, (unsigned long long)per,
           (unsigned long long)(fixed + 12 * per + 4 * 12));
    return 0;
}
