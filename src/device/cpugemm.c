/*
 * One sgemm over the rank's threads, the same bits at any cut (cpugemm.h).
 *
 * Theory of operation. The whole product C (full_m x full_n) has one tiling, fixed by
 * its shape (tiles()), and every tile is one single-threaded OpenBLAS sgemm of the
 * tile's own shape, on a pool thread (dsl_cpupool_for over the tiles the call
 * touches, in row-major order, contiguous runs per thread). Why: an element of C is
 * not the same sum everywhere in a call. OpenBLAS's FMA kernels (Haswell, Zen,
 * SkylakeX, Cooperlake) take other instruction sequences for edge tiles of M or N
 * remainders, for the N-remainders of their wide kernels and, on the AVX-512 ones,
 * for small calls (its small-matrix kernels), so the bits of an element depended on
 * where the thread blocks, the weight-gradient segments or the forward's first-layer
 * blocks happened to cut. Measured with 0.3.21 on a Haswell and a Zen kernel choice:
 * 234 of 255 row cuts of a 256 x 784 x 100 product change some element.
 *
 * A tile depends only on its shape, the transposes, alpha, beta and the data of its
 * own rows of op(A) and columns of op(B), and an element on its place in the tile.
 * So a tile that the call covers only in part is run on zero-padded copies: the rows
 * of op(A) and columns of op(B) the call has, at their places in the tile, zeros
 * elsewhere (the caller may not have the rest yet: the forward's first layer arrives
 * block by block), the covered part of C copied in (for beta and the bias) and back
 * out. Zeros change no other element. The padded tile costs a whole tile's work; the
 * models avoid it: the MLP's forward computes whole tiles as its blocks come in, and
 * a product handed over by rows (weight-gradient segments) goes through
 * dsl_gemm_rows, which computes a tile row a segment boundary cuts once, whole, into
 * a carry and copies its rows out to both segments.
 *
 * The tile shape trades the packing OpenBLAS repeats per call (op(A) rows and op(B)
 * columns, K floats each) against tiles for the threads to share: tiles() takes the
 * split that packs least among those with one tile per WORK_TILE of work (at least
 * MIN_TILES, at most MAX_TILES), with row tiles of at most ROWS_TILE rows for products
 * handed over by rows (fewer rows copied through the carry). A shape never depends on
 * the thread count, so a rank with more threads than a small product has tiles leaves
 * some idle on it: that is the price of the same bits at any thread count. Measured
 * on the MLP benchmark's step (bench/train.sh shapes, one thread, products timed
 * inside dstrain, five runs each alternating with the untiled build): the same time
 * within the noise (medians 1.925 and 1.943 s of products over 200 steps).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/device/cpugemm.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/device/cpupool.h"
#include "dslaunch/common/banned.h"

static int to_int(size_t v)
{
    return (int)v;
}

static size_t ceil_div(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

/* parts tiles over full: equal, whole cache lines, no longer than full */
static size_t split(size_t full, size_t parts)
{
    size_t t = (ceil_div(full, parts) + 15) / 16 * 16;
    return t < full ? t : full;
}

/*
 * The tiling of an fm x fn x k product: nr x nc tiles. Each call packs its rows of
 * op(A) and columns of op(B) again, so nr x nc tiles pack k (nc fm + nr fn) floats in
 * all: the split that packs least among those with enough tiles. Enough: one per
 * WORK_TILE of work, at least MIN_TILES (threads to share out), at most MAX_TILES,
 * with tiles of at least 16 rows and columns where the product has them, and of at most
 * ROWS_TILE rows for a product handed over by rows.
 */
#define MIN_TILES 2
#define MAX_TILES 64
#define WORK_TILE (128.0 * 1024 * 1024) /* flops */
#define ROWS_TILE DSL_GEMM_ROWS_TILE /* by_rows: rows per tile, at most */

static void tiles(size_t fm, size_t fn, size_t k, int by_rows, int by_cols, size_t *tr,
                  size_t *tc)
{
    /* a caller that hands the product over in blocks calls for a few tiles at a time:
     * each tile row (by_rows) has MIN_TILES tiles, each block of half the columns
     * (by_cols) too, so that the threads share every call, not only whole products */
    size_t nc0 = by_rows ? MIN_TILES : by_cols ? 2 * MIN_TILES : 1;
    while (nc0 > 1 && fn / nc0 < 16)
        nc0 /= 2;
    double work = 2.0 * (double)fm * (double)fn * (double)k;
    size_t want = (size_t)(work / WORK_TILE);
    want = want < MIN_TILES ? MIN_TILES : want > MAX_TILES ? MAX_TILES : want;
    /* rows handed over in blocks (dsl_gemm_rows) copy the tile rows a block boundary
     * cuts through: keep those short, even past MAX_TILES */
    size_t nr0 = by_rows && fm > ROWS_TILE ? ceil_div(fm, ROWS_TILE) : 1;
    size_t most = nr0 > MAX_TILES ? nr0 : MAX_TILES;
    size_t best_r = nr0, best_c = nc0;
    double best = -1.0;
    for (size_t nr = nr0; nr <= most; nr *= 2)
        for (size_t nc = nc0; nr * nc <= most; nc *= 2) {
            if ((nr > nr0 && fm / nr < 16) || (nc > nc0 && fn / nc < 16) ||
                (nr0 > 1 && nr > nr0)) /* by_rows: ROWS_TILE exactly (cpugemm.h) */
                continue;
            /* short of tiles: only as a last resort, the most tiles first */
            double pack = (double)nc * (double)fm + (double)nr * (double)fn;
            double cost = nr * nc >= want ? pack : 1e300 / (double)(nr * nc);
            if (best < 0.0 || cost < best ||
                (cost == best && nr * nc < best_r * best_c)) {
                best = cost;
                best_r = nr;
                best_c = nc;
            }
        }
    *tr = nr0 > 1 ? ROWS_TILE : fm ? split(fm, best_r) : 1;
    *tc = fn ? split(fn, best_c) : 1;
}

static size_t full_m(const struct dsl_gemm *g)
{
    return g->full_m ? g->full_m : g->m;
}

static size_t full_n(const struct dsl_gemm *g)
{
    return g->full_n ? g->full_n : g->n;
}

void dsl_gemm_tiles(const struct dsl_gemm *g, size_t *tr, size_t *tc)
{
    tiles(full_m(g), full_n(g), g->k, g->by_rows, g->by_cols, tr, tc);
}

struct plan {
    const struct dsl_gemm *g;
    size_t tr, tc;     /* the tile */
    size_t ti0, tj0;   /* the first tile row and column the call touches */
    size_t ntj;        /* tile columns it touches */
};

/* element (i, k) of op(A) at a, i.e. a's row i with NoTrans */
static const float *a_row(const struct dsl_gemm *g, size_t i)
{
    return g->ta == CblasNoTrans ? g->a + i * g->lda : g->a + i;
}

/* column j of op(B) */
static const float *b_col(const struct dsl_gemm *g, size_t j)
{
    return g->tb == CblasNoTrans ? g->b + j : g->b + j * g->ldb;
}

/* rows [i0, i0 + n) of op(A) (call-local) into the zeroed tm x k scratch at row at,
 * stored as A is (ld k, or tm transposed) */
static void copy_a(const struct dsl_gemm *g, float *s, size_t tm, size_t at, size_t i0,
                   size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (g->ta == CblasNoTrans) {
            memcpy(s + (at + i) * g->k, a_row(g, i0 + i), g->k * sizeof(float));
        } else {
            const float *src = a_row(g, i0 + i);
            for (size_t k = 0; k < g->k; k++)
                s[k * tm + at + i] = src[k * g->lda];
        }
    }
}

/* columns [j0, j0 + n) of op(B) into the zeroed k x tn scratch at column at */
static void copy_b(const struct dsl_gemm *g, float *s, size_t tn, size_t at, size_t j0,
                   size_t n)
{
    if (g->tb == CblasNoTrans) {
        for (size_t k = 0; k < g->k; k++)
            memcpy(s + k * tn + at, g->b + k * g->ldb + j0, n * sizeof(float));
    } else {
        for (size_t j = 0; j < n; j++)
            memcpy(s + (at + j) * g->k, b_col(g, j0 + j), g->k * sizeof(float));
    }
}

/* tile (ti, tj) of the whole product, for the part the call covers */
static void run_tile(const struct plan *pl, size_t ti, size_t tj)
{
    const struct dsl_gemm *g = pl->g;
    size_t fm = full_m(g), fn = full_n(g);
    /* the tile, in whole-product coordinates, and the part of it in the call */
    size_t R0 = ti * pl->tr, R1 = R0 + pl->tr < fm ? R0 + pl->tr : fm;
    size_t C0 = tj * pl->tc, C1 = C0 + pl->tc < fn ? C0 + pl->tc : fn;
    size_t r0 = R0 > g->row0 ? R0 : g->row0, r1 = R1 < g->row0 + g->m ? R1 : g->row0 + g->m;
    size_t c0 = C0 > g->col0 ? C0 : g->col0, c1 = C1 < g->col0 + g->n ? C1 : g->col0 + g->n;
    size_t tm = R1 - R0, tn = C1 - C0, m = r1 - r0, n = c1 - c0;
    size_t i0 = r0 - g->row0, j0 = c0 - g->col0; /* the part, call-local */
    dsl_gemm_block_pre(g, i0, j0, m, n);
    if (m == tm && n == tn) {
        cblas_sgemm(CblasRowMajor, g->ta, g->tb, to_int(tm), to_int(tn), to_int(g->k),
                    g->alpha, a_row(g, i0), to_int(g->lda), b_col(g, j0), to_int(g->ldb),
                    g->beta, g->c + i0 * g->ldc + j0, to_int(g->ldc));
    } else {
        /* zero-padded copies at the tile's shape; the rows or columns the call has
         * in full are read in place */
        float *sa = NULL, *sb = NULL, *sc = dsl_xcalloc(tm * tn, sizeof(float));
        const float *a = a_row(g, i0), *b = b_col(g, j0);
        int lda = to_int(g->lda), ldb = to_int(g->ldb);
        if (m < tm) {
            sa = dsl_xcalloc(tm * g->k, sizeof(float));
            copy_a(g, sa, tm, r0 - R0, i0, m);
            a = sa;
            lda = to_int(g->ta == CblasNoTrans ? g->k : tm);
        }
        if (n < tn) {
            sb = dsl_xcalloc(g->k * tn, sizeof(float));
            copy_b(g, sb, tn, c0 - C0, j0, n);
            b = sb;
            ldb = to_int(g->tb == CblasNoTrans ? tn : g->k);
        }
        float *cc = g->c + i0 * g->ldc + j0, *sc0 = sc + (r0 - R0) * tn + (c0 - C0);
        if (g->beta != 0.0f)
            for (size_t i = 0; i < m; i++)
                memcpy(sc0 + i * tn, cc + i * g->ldc, n * sizeof(float));
        cblas_sgemm(CblasRowMajor, g->ta, g->tb, to_int(tm), to_int(tn), to_int(g->k),
                    g->alpha, a, lda, b, ldb, g->beta, sc, to_int(tn));
        for (size_t i = 0; i < m; i++)
            memcpy(cc + i * g->ldc, sc0 + i * tn, n * sizeof(float));
        free(sa);
        free(sb);
        free(sc);
    }
    dsl_gemm_block_post(g, i0, j0, m, n);
}

/* the call's tiles [lo, hi), row-major over the tiles it touches */
static void run_tiles(void *arg, size_t lo, size_t hi)
{
    const struct plan *pl = arg;
    for (size_t t = lo; t < hi; t++)
        run_tile(pl, pl->ti0 + t / pl->ntj, pl->tj0 + t % pl->ntj);
}

void dsl_gemm_carry_release(struct dsl_gemm_carry *cy)
{
    free(cy->buf);
    memset(cy, 0, sizeof(*cy));
}

/* rows [R0, R1) of the whole product g into c (ldc), as that block of it */
static void run_rows(const struct dsl_gemm *g, size_t R0, size_t R1, float *c, size_t ldc)
{
    struct dsl_gemm w = *g;
    w.full_m = g->m;
    w.m = R1 - R0;
    w.row0 = R0;
    w.a = a_row(g, R0);
    w.c = c;
    w.ldc = ldc;
    dsl_gemm_run(&w);
}

/* rows [r0, r1) of tile row t of the whole product (g) into dst (ldd), from the carry,
 * which is computed whole for t first unless it holds t already */
static void rows_from_carry(const struct dsl_gemm *g, size_t tr, size_t t, size_t r0,
                            size_t r1, float *dst, size_t ldd, struct dsl_gemm_carry *cy)
{
    size_t R0 = t * tr, R1 = R0 + tr < g->m ? R0 + tr : g->m;
    if (!cy->valid || cy->tile != t) {
        size_t need = tr * g->n;
        if (cy->cap < need) {
            free(cy->buf);
            cy->buf = dsl_xmalloc(need * sizeof(float));
            cy->cap = need;
        }
        run_rows(g, R0, R1, cy->buf, g->n);
        cy->tile = t;
        cy->valid = 1;
    }
    for (size_t r = r0; r < r1; r++)
        memcpy(dst + (r - r0) * ldd, cy->buf + (r - R0) * g->n, g->n * sizeof(float));
}

void dsl_gemm_rows(const struct dsl_gemm *g, size_t r0, size_t rows, float *dst, size_t ldd,
                   struct dsl_gemm_carry *cy)
{
    if (g->bias || g->mask || g->relu || g->full_m || g->row0)
        DSL_BUG("dsl_gemm_rows takes a plain whole product");
    if (g->bf16) { /* the bf16 path's blocks are its own: the block as it comes */
        struct dsl_gemm w = *g;
        w.m = rows;
        w.a = a_row(g, r0);
        w.c = dst;
        w.ldc = ldd;
        dsl_gemm_run(&w);
        return;
    }
    size_t tr, tc, r1 = r0 + rows;
    dsl_gemm_tiles(g, &tr, &tc);
    size_t a0 = (r0 + tr - 1) / tr * tr, a1 = r1 / tr * tr;
    if (r1 == g->m)
        a1 = r1; /* the last tile row ends with the product: whole */
    /* higher rows first: their tile row is the one the block above (handed over
     * before this one) left in the carry; the lowest cut tile row stays there for the
     * block below */
    if (a0 >= a1) { /* inside one tile row, or across the edge of two */
        size_t t = r0 / tr, e = (t + 1) * tr < r1 ? (t + 1) * tr : r1;
        if (e < r1)
            rows_from_carry(g, tr, t + 1, e, r1, dst + (e - r0) * ldd, ldd, cy);
        rows_from_carry(g, tr, t, r0, e, dst, ldd, cy);
        return;
    }
    if (a1 < r1) /* the tail: the start of a tile row that ends below r1 */
        rows_from_carry(g, tr, a1 / tr, a1, r1, dst + (a1 - r0) * ldd, ldd, cy);
    run_rows(g, a0, a1, dst + (a0 - r0) * ldd, ldd); /* whole tile rows, in place */
    if (r0 < a0) /* the head: the end of a tile row that starts above r0 */
        rows_from_carry(g, tr, r0 / tr, r0, a0, dst, ldd, cy);
}

#ifndef DSL_HAVE_DNNL
int dsl_gemm_bf16_supported(char *why, size_t len)
{
    if (why && len)
        snprintf(why, len, "this build has no oneDNN (Debian's libdnnl-dev)");
    return 0;
}

struct dsl_gemm_bf16 *dsl_gemm_bf16_new(void)
{
    return NULL;
}

void dsl_gemm_bf16_free(struct dsl_gemm_bf16 *s)
{
    (void)s;
}

void dsl_gemm_run_bf16(const struct dsl_gemm *g)
{
    (void)g;
    DSL_BUG("a bf16 product without oneDNN");
}
#endif

void dsl_gemm_run(const struct dsl_gemm *g)
{
    if (g->bf16) {
        dsl_gemm_run_bf16(g);
        return;
    }
    if (!g->m || !g->n)
        return;
    if (g->row0 + g->m > full_m(g) || g->col0 + g->n > full_n(g))
        DSL_BUG("a product block outside its whole product");
    struct plan pl = {.g = g};
    dsl_gemm_tiles(g, &pl.tr, &pl.tc);
    pl.ti0 = g->row0 / pl.tr;
    pl.tj0 = g->col0 / pl.tc;
    size_t nti = (g->row0 + g->m - 1) / pl.tr + 1 - pl.ti0;
    pl.ntj = (g->col0 + g->n - 1) / pl.tc + 1 - pl.tj0;
    size_t nt = nti * pl.ntj, th = (size_t)dsl_cpupool_threads();
    dsl_cpupool_for(nt, ceil_div(nt, th), run_tiles, &pl);
}
