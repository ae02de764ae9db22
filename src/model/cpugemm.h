/*
 * One sgemm cut over the rank's threads (cpupool.h), shared by the CPU models
 * (model_mlp.c, model_gpt.c). Private to src/model.
 */
#ifndef DSL_CPUGEMM_H
#define DSL_CPUGEMM_H

#include <cblas.h>
#include <stddef.h>

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
};

void dsl_gemm_run(const struct dsl_gemm *g);

#endif
