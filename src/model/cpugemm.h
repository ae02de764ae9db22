/*
 * One sgemm cut over the rank's threads (cpupool.h), shared by the CPU models
 * (model_mlp.c, model_gpt.c). Private to src/model.
 */
#ifndef DSL_CPUGEMM_H
#define DSL_CPUGEMM_H

#include <cblas.h>
#include <stddef.h>
#include <string.h>

/*
 * C = alpha op(A) op(B) + beta C (row-major). OpenBLAS runs single-threaded and the
 * pool cuts C into column blocks (by_rows 0) or row blocks (by_rows 1), one
 * single-threaded sgemm each. Every element of C is the same K-long dot product in the
 * same order whatever the cut, so the thread count changes no bits.
 *
 * The elementwise work around a product rides along on the same block while it is in
 * cache (column blocks only): `bias` fills each row of the block with the bias before
 * the product (which then adds to it: give beta 1), `relu` clamps the block at 0 after
 * it, and `mask` zeroes the block's elements where the same element of mask (same
 * layout as C) is <= 0.
 */
struct dsl_gemm {
    enum CBLAS_TRANSPOSE ta, tb;
    size_t m, n, k, lda, ldb, ldc;
    const float *a, *b;
    float alpha, beta;
    float *c;
    int by_rows;
    const float *bias, *mask;
    int relu;
    struct dsl_gemm_bf16 *bf16; /* non-NULL: A and B rounded to bf16, fp32 accumulation */
};

void dsl_gemm_run(const struct dsl_gemm *g);

/* a block of C (m x n at c, starting at row lo with by_rows, else at column lo):
 * the bias fill before its product, the ReLU and the mask after (both paths; inline, so
 * that cpugemm.c and cpugemm_bf16.c do not call each other both ways) */
static inline void dsl_gemm_block_pre(const struct dsl_gemm *g, float *c, size_t m, size_t n,
                                      size_t lo)
{
    const float *bias = g->bias ? g->bias + (g->by_rows ? 0 : lo) : NULL;
    for (size_t i = 0; bias && i < m; i++)
        memcpy(c + i * g->ldc, bias, n * sizeof(float));
}

static inline void dsl_gemm_block_post(const struct dsl_gemm *g, float *c, size_t m, size_t n,
                                       size_t lo)
{
    for (size_t i = 0; g->relu && i < m; i++) {
        float *ci = c + i * g->ldc;
        for (size_t j = 0; j < n; j++)
            ci[j] = ci[j] > 0.0f ? ci[j] : 0.0f;
    }
    for (size_t i = 0; g->mask && i < m; i++) {
        float *ci = c + i * g->ldc;
        const float *mi = g->mask + (g->by_rows ? (lo + i) * g->ldc : lo + i * g->ldc);
        for (size_t j = 0; j < n; j++)
            if (mi[j] <= 0.0f)
                ci[j] = 0.0f;
    }
}

/*
 * bf16 products (cpugemm_bf16.c, with oneDNN): A and B are rounded to bf16 (to nearest
 * even) into the scratch given as .bf16 and C gets the fp32 sums of their products, in
 * blocks fixed by the shape alone, so again the thread count changes no bits. Only where
 * dsl_gemm_bf16_supported(): built with oneDNN and a CPU with AVX512-BF16 or AMX;
 * elsewhere dsl_gemm_bf16_new() returns NULL (and says why through the former).
 * A scratch belongs to one model (not thread-safe).
 */
struct dsl_gemm_bf16;
int dsl_gemm_bf16_supported(char *why, size_t len);
struct dsl_gemm_bf16 *dsl_gemm_bf16_new(void);
void dsl_gemm_bf16_free(struct dsl_gemm_bf16 *s);
void dsl_gemm_run_bf16(const struct dsl_gemm *g);

#endif
