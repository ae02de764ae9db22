/*
 * One sgemm cut over the rank's threads (cpupool.h), shared by the CPU models
 * (model_mlp.c, model_gpt.c).
 */
#ifndef DSL_CPUGEMM_H
#define DSL_CPUGEMM_H

#include <cblas.h>
#include <stddef.h>
#include <string.h>

/*
 * C = alpha op(A) op(B) + beta C (row-major), fp32 on OpenBLAS's sgemm, cut over the
 * rank's threads (cpupool.h), with every element's bits independent of the cut.
 *
 * OpenBLAS's kernels do not compute an element the same way wherever it sits in a
 * call: its FMA kernels (Haswell, Zen, SkylakeX, ...) sum an element of an edge tile,
 * or of a small call, in another order than one of a full tile. So the products here
 * are never cut where a caller or the thread count says: the whole product (full_m x
 * full_n) has one fixed tiling, chosen from its shape alone (dsl_gemm_tiles), and each
 * tile is always one sgemm of the tile's own shape. A call computes the block
 * [row0, row0 + m) x [col0, col0 + n) of the whole product (C, A and B point at the
 * block's first row and column): the tiles it covers whole run in place; a tile it
 * covers in part runs on zero-padded copies of its rows and columns at the tile's
 * shape, and only the covered elements are written back. An element is thus always
 * the same sgemm element, whatever the block, the segment or the thread count.
 * full_m, full_n 0 mean m, n (the call is the whole product); row0, col0 are then 0.
 * by_rows says that callers hand the product over by rows (weight-gradient segments,
 * dsl_gemm_rows): its row tiles are then short, so that a segment boundary cuts little
 * work, and each tile row has tiles for every thread; by_cols that they hand it over
 * by columns (the MLP forward's first layer): its columns are cut finer, so that a
 * block of them is more than one tile.
 *
 * The elementwise work around a product rides along on the same tile while it is in
 * cache: `bias` (one value per column of the block) fills each row before the product
 * (which then adds to it: give beta 1), `relu` clamps at 0 after it, and `mask` zeroes
 * the elements where the same element of mask (same layout and ldc as C) is <= 0.
 */
/* a by_rows product's row tiles are at most this tall, and are exactly this tall when
 * the product has more rows: the models cut gradient segments in multiples of it */
#define DSL_GEMM_ROWS_TILE 256

struct dsl_gemm {
    enum CBLAS_TRANSPOSE ta, tb;
    size_t m, n, k, lda, ldb, ldc;
    const float *a, *b;
    float alpha, beta;
    float *c;
    int by_rows, by_cols; /* callers hand the product over by rows / by columns */
    size_t full_m, full_n, row0, col0; /* the block's place in the whole product */
    const float *bias, *mask;
    int relu;
    struct dsl_gemm_bf16 *bf16; /* non-NULL: A and B rounded to bf16, fp32 accumulation */
};

void dsl_gemm_run(const struct dsl_gemm *g);

/** The fixed tile of g's whole product: *tr rows by *tc columns (the last row and
 *  column of tiles may be shorter). A function of full_m, full_n, k and by_rows only.
 *  A caller that can wait may compute tile-aligned blocks to avoid partial tiles. */
void dsl_gemm_tiles(const struct dsl_gemm *g, size_t *tr, size_t *tc);

/*
 * Rows [r0, r0 + rows) of the whole product g (g->m rows; g->c unused) into dst (ld
 * ldd), for a caller that hands a product's rows over block by block (the weight
 * gradients' segments, last block first): the tile rows the block covers go straight
 * to dst; a tile row the block cuts through is computed whole into the carry and its
 * rows copied, and the carry keeps it for the adjacent block, so no tile is computed
 * in part or twice. A plain product: no bias, mask or ReLU. With .bf16 the block is
 * computed as it comes (the bf16 path's blocks are its own).
 * dsl_gemm_carry_reset() before the first block of each product (the carry's tile is
 * only valid for the same product's inputs).
 */
struct dsl_gemm_carry {
    float *buf;
    size_t cap, tile;
    int valid;
};
void dsl_gemm_rows(const struct dsl_gemm *g, size_t r0, size_t rows, float *dst, size_t ldd,
                   struct dsl_gemm_carry *cy);
static inline void dsl_gemm_carry_reset(struct dsl_gemm_carry *cy)
{
    cy->valid = 0;
}
/** Frees the carry's buffer; the carry is then empty (as zero-initialised). */
void dsl_gemm_carry_release(struct dsl_gemm_carry *cy);

/* the block of C at (i0, j0) of the call, m x n: the bias fill before its product, the
 * ReLU and the mask after (both paths; inline, so that cpugemm.c and cpugemm_bf16.c
 * do not call each other both ways) */
static inline void dsl_gemm_block_pre(const struct dsl_gemm *g, size_t i0, size_t j0,
                                      size_t m, size_t n)
{
    float *c = g->c + i0 * g->ldc + j0;
    for (size_t i = 0; g->bias && i < m; i++)
        memcpy(c + i * g->ldc, g->bias + j0, n * sizeof(float));
}

static inline void dsl_gemm_block_post(const struct dsl_gemm *g, size_t i0, size_t j0,
                                       size_t m, size_t n)
{
    float *c = g->c + i0 * g->ldc + j0;
    for (size_t i = 0; g->relu && i < m; i++) {
        float *ci = c + i * g->ldc;
        for (size_t j = 0; j < n; j++)
            ci[j] = ci[j] > 0.0f ? ci[j] : 0.0f;
    }
    for (size_t i = 0; g->mask && i < m; i++) {
        float *ci = c + i * g->ldc;
        const float *mi = g->mask + (i0 + i) * g->ldc + j0;
        for (size_t j = 0; j < n; j++) /* a store every time: the loop vectorizes */
            ci[j] = mi[j] <= 0.0f ? 0.0f : ci[j];
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
