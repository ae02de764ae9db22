/*
 * What both models' loss-statistics kernels (model_mlp_kernels.cu, model_gpt_kernels.cu)
 * end with: one block adds its threads' loss sums (double) and hit counts in a fixed
 * tree, so the result has the same bits on every run, and thread 0 writes
 * out[0] = the loss sum rounded to float, out[stride] = the hits. A block is
 * DSL_CUDA_THREADS threads. Internal to src/model; include it after cuda_kernels.h.
 */
#ifndef DSL_MODEL_LOSS_STATS_CUH
#define DSL_MODEL_LOSS_STATS_CUH

static __device__ void dsl_block_loss_stats(double l, unsigned long long h, float *out,
                                            size_t stride)
{
    __shared__ double sl[DSL_CUDA_THREADS];
    __shared__ unsigned long long sc[DSL_CUDA_THREADS];
    sl[threadIdx.x] = l;
    sc[threadIdx.x] = h;
    __syncthreads();
    for (unsigned s = DSL_CUDA_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            sl[threadIdx.x] = __dadd_rn(sl[threadIdx.x], sl[threadIdx.x + s]);
            sc[threadIdx.x] += sc[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[0] = (float)sl[0];
        out[stride] = (float)sc[0];
    }
}

#endif
