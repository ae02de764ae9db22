/*
 * The CPU models' products (cpugemm.h): the bf16 path (oneDNN) against a double
 * reference on the bf16-rounded inputs, for every transpose, alpha, beta and the bias
 * fill; and the same bits at 1 and 3 threads, which is what lets the thread count
 * (and so the world size) change no result. The fp32 path (OpenBLAS): the same bits
 * for any block of the whole product a caller computes (weight-gradient segments,
 * the first layer's blocks) and at any thread count, under whatever kernels OpenBLAS
 * runs (CTest runs it again per kernel family: test_model_cpugemm@Haswell, ...). Where the
 * build or the CPU has no bf16 path, that is checked to be said and refused instead.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dslaunch/common/halfvec.h"
#include "dslaunch/device/blascore.h"
#include "dslaunch/device/cpupool.h"
#include "dslaunch/device/cpugemm.h"
#include "test.h"
#include "dslaunch/common/banned.h"

static uint64_t rng = 12345;

static float uni(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

static float *randv(size_t n)
{
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = uni();
    return v;
}

static float r16(float x)
{
    return dsl_hv_bf16_to_float(dsl_hv_bf16_from_float(x));
}

/* element (i, k) of op(A), (k, j) of op(B) */
static float opa(const struct dsl_gemm *g, size_t i, size_t k)
{
    return g->ta == CblasNoTrans ? g->a[i * g->lda + k] : g->a[k * g->lda + i];
}

static float opb(const struct dsl_gemm *g, size_t k, size_t j)
{
    return g->tb == CblasNoTrans ? g->b[k * g->ldb + j] : g->b[j * g->ldb + k];
}

struct shape {
    enum CBLAS_TRANSPOSE ta, tb;
    size_t m, n, k;
};

static const struct shape shapes[] = {
    {CblasNoTrans, CblasNoTrans, 70, 96, 64},   /* a projection, x W */
    {CblasNoTrans, CblasTrans, 53, 48, 160},    /* dX = dY W^T, logits = x wte^T */
    {CblasTrans, CblasNoTrans, 64, 80, 131},    /* dW = X^T dY */
    {CblasTrans, CblasTrans, 33, 40, 24},
    {CblasNoTrans, CblasNoTrans, 1, 256, 32},   /* one row (sampling's last position) */
};

/* fp32 shapes with several tiles (cpugemm.c's tiling), edge tiles and one tile */
static const struct shape fshapes[] = {
    {CblasNoTrans, CblasNoTrans, 300, 700, 40}, /* 2 x 2 tiles, both with edges */
    {CblasNoTrans, CblasTrans, 64, 1030, 50},   /* the MLP's first layer: column tiles */
    {CblasTrans, CblasNoTrans, 200, 130, 64},   /* a weight gradient: row tiles */
    {CblasTrans, CblasTrans, 97, 45, 33},
    {CblasNoTrans, CblasNoTrans, 70, 96, 64},   /* one tile */
};

/* a product with room around it: lda/ldb/ldc wider than the matrix */
static void setup(struct dsl_gemm *g, const struct shape *s, float **a, float **b, float **c)
{
    size_t ar = s->ta == CblasNoTrans ? s->m : s->k, ac = s->ta == CblasNoTrans ? s->k : s->m;
    size_t br = s->tb == CblasNoTrans ? s->k : s->n, bc = s->tb == CblasNoTrans ? s->n : s->k;
    *a = randv(ar * (ac + 3));
    *b = randv(br * (bc + 5));
    *c = randv(s->m * (s->n + 7));
    *g = (struct dsl_gemm){.ta = s->ta, .tb = s->tb, .m = s->m, .n = s->n, .k = s->k,
                           .a = *a, .lda = ac + 3, .b = *b, .ldb = bc + 5, .c = *c,
                           .ldc = s->n + 7, .alpha = 1.0f};
}

TEST(bf16_products_should_be_fp32_sums_of_bf16_rounded_inputs)
{
    char why[200] = "";
    if (!dsl_gemm_bf16_supported(why, sizeof(why))) {
        printf("# no bf16 path here: %s\n", why);
        ASSERT(why[0] != '\0');
        ASSERT(dsl_gemm_bf16_new() == NULL);
        return;
    }
    struct dsl_gemm_bf16 *s16 = dsl_gemm_bf16_new();
    ASSERT(s16 != NULL);
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        for (int v = 0; v < 3; v++) {
            struct dsl_gemm g;
            float *a, *b, *c;
            setup(&g, &shapes[si], &a, &b, &c);
            float *bias = randv(g.n), *c0 = malloc(g.m * g.ldc * sizeof(float));
            g.alpha = v == 1 ? 0.5f : 1.0f;
            g.beta = v == 0 ? 0.0f : 1.0f;
            g.bias = v == 2 ? bias : NULL;
            memcpy(c0, c, g.m * g.ldc * sizeof(float));
            g.bf16 = s16;
            dsl_gemm_run(&g);
            double worst = 0.0, off = 0.0;
            for (size_t i = 0; i < g.m; i++)
                for (size_t j = 0; j < g.n; j++) {
                    double ref = 0.0, mag = 0.0, exact = 0.0;
                    for (size_t k = 0; k < g.k; k++) {
                        double p = (double)r16(opa(&g, i, k)) * r16(opb(&g, k, j));
                        ref += p;
                        mag += fabs(p);
                        exact += (double)opa(&g, i, k) * opb(&g, k, j);
                    }
                    double before = g.bias ? bias[j] : c0[i * g.ldc + j];
                    ref = g.alpha * ref + (g.beta != 0.0f ? before : 0.0);
                    exact = g.alpha * exact + (g.beta != 0.0f ? before : 0.0);
                    double got = c[i * g.ldc + j];
                    /* fp32 accumulation of K products (plus the scale and the sum) */
                    double e = fabs(got - ref) / (mag * (g.k + 2) * 0x1p-24 + fabs(before) * 0x1p-23 + 1e-30);
                    worst = e > worst ? e : worst;
                    off = fabs(got - exact) > off ? fabs(got - exact) : off;
                }
            /* the padding beside C is untouched */
            for (size_t i = 0; i < g.m; i++)
                for (size_t j = g.n; j < g.ldc; j++)
                    ASSERT(c[i * g.ldc + j] == c0[i * g.ldc + j]);
            ASSERT(worst <= 1.0);
            /* and the inputs really were rounded: the fp32 product is another one */
            ASSERT(off > 1e-5);
            free(a);
            free(b);
            free(c);
            free(c0);
            free(bias);
        }
    }
    dsl_gemm_bf16_free(s16);
}

static int fp32_child; /* products_at: the fp32 products of fshapes, not bf16's */

/* every shape's product, by rows and by columns, at the given thread count (run in a
 * child, whose pool has not started), written to fd */

static void products_at(int threads, int fd)
{
    dsl_cpupool_set_threads(threads);
    struct dsl_gemm_bf16 *s16 = fp32_child ? NULL : dsl_gemm_bf16_new();
    const struct shape *set = fp32_child ? fshapes : shapes;
    size_t n = fp32_child ? sizeof(fshapes) / sizeof(fshapes[0])
                          : sizeof(shapes) / sizeof(shapes[0]);
    for (size_t si = 0; si < n; si++)
        for (int by_rows = 0; by_rows < 2; by_rows++) {
            struct dsl_gemm g;
            float *a, *b, *c;
            rng = 99 + si; /* the same inputs in every child */
            setup(&g, &set[si], &a, &b, &c);
            g.bf16 = s16;
            g.beta = 1.0f;
            g.by_rows = by_rows;
            dsl_gemm_run(&g);
            size_t bytes = g.m * g.ldc * sizeof(float);
            if (write(fd, c, bytes) != (ssize_t)bytes)
                _exit(3);
            free(a);
            free(b);
            free(c);
        }
    dsl_gemm_bf16_free(s16);
}


static size_t run_child(int threads, char *buf, size_t cap)
{
    int p[2];
    ASSERT(pipe(p) == 0);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        products_at(threads, p[1]);
        _exit(0);
    }
    close(p[1]);
    size_t got = 0;
    ssize_t r;
    while (got < cap && (r = read(p[0], buf + got, cap - got)) > 0)
        got += (size_t)r;
    close(p[0]);
    int st;
    ASSERT(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return got;
}

TEST(bf16_products_should_give_the_same_bits_at_any_thread_count)
{
    char why[200] = "";
    if (!dsl_gemm_bf16_supported(why, sizeof(why))) {
        printf("# no bf16 path here: %s\n", why);
        ASSERT(dsl_gemm_bf16_new() == NULL);
        return;
    }
    size_t cap = 1 << 22;
    char *one = malloc(cap), *three = malloc(cap);
    size_t n1 = run_child(1, one, cap), n3 = run_child(3, three, cap);
    ASSERT(n1 > 0 && n1 < cap);
    ASSERT_EQ(n1, n3);
    ASSERT(memcmp(one, three, n1) == 0);
    free(one);
    free(three);
}


/* the product of g (whole) as blocks: by_rows, rows [0, m) in pieces of random height,
 * else columns in pieces of random width; each piece a call on its own block */
static void run_in_blocks(const struct dsl_gemm *g, uint64_t *seed)
{
    size_t dim = g->by_rows ? g->m : g->n;
    for (size_t lo = 0; lo < dim;) {
        size_t len = 1 + dsl_test_rng(seed) % (dim / 3 + 1);
        len = lo + len < dim ? len : dim - lo;
        struct dsl_gemm b = *g;
        if (g->by_rows) {
            b.m = len;
            b.full_m = g->m;
            b.row0 = lo;
            b.a = g->ta == CblasNoTrans ? g->a + lo * g->lda : g->a + lo;
            b.c = g->c + lo * g->ldc;
            b.mask = g->mask ? g->mask + lo * g->ldc : NULL;
        } else {
            b.n = len;
            b.full_n = g->n;
            b.col0 = lo;
            b.b = g->tb == CblasNoTrans ? g->b + lo : g->b + lo * g->ldb;
            b.c = g->c + lo;
            b.bias = g->bias ? g->bias + lo : NULL;
            b.mask = g->mask ? g->mask + lo : NULL;
        }
        dsl_gemm_run(&b);
        lo += len;
    }
}

/* the elements of C (m x n at ldc) that differ between x and y */
static size_t differing(const float *x, const float *y, size_t m, size_t n, size_t ldc)
{
    size_t d = 0;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++)
            d += memcmp(x + i * ldc + j, y + i * ldc + j, sizeof(float)) != 0;
    return d;
}

TEST(fp32_products_should_give_the_same_bits_for_any_block_of_the_whole_product)
{
    uint64_t seed = 7;
    size_t naive = 0, total = 0;
    for (size_t si = 0; si < sizeof(fshapes) / sizeof(fshapes[0]); si++)
        for (int v = 0; v < 4; v++) {
            /* v: by_rows, and the elementwise work: bias + ReLU (beta 1) or mask */
            struct dsl_gemm g;
            float *a, *b, *c;
            rng = 31 + si;
            setup(&g, &fshapes[si], &a, &b, &c);
            float *bias = randv(g.n), *mask = randv(g.m * g.ldc);
            g.by_rows = v & 1;
            g.alpha = v == 3 ? 0.5f : 1.0f;
            g.beta = v < 2 ? 1.0f : 0.0f;
            g.bias = v < 2 ? bias : NULL;
            g.relu = v < 2;
            g.mask = v >= 2 ? mask : NULL;
            size_t bytes = g.m * g.ldc * sizeof(float);
            float *c0 = malloc(bytes), *whole = malloc(bytes);
            memcpy(c0, c, bytes);
            dsl_gemm_run(&g);
            memcpy(whole, c, bytes);
            for (int trial = 0; trial < 5; trial++) {
                memcpy(c, c0, bytes);
                run_in_blocks(&g, &seed);
                size_t d = differing(whole, c, g.m, g.n, g.ldc);
                if (d)
                    DSL_FAIL_("shape %zu variant %d trial %d: %zu of %zu elements differ "
                              "from the whole product",
                              si, v, trial, d, g.m * g.n);
                /* the padding around C (ldc > n) is never written */
                ASSERT(differing(c0 + g.n, c + g.n, g.m, g.ldc - g.n, g.ldc) == 0);
            }
            /* what the tiling is for: plain sgemm calls on the same blocks */
            if (v == 2) {
                size_t dim = g.by_rows ? g.m : g.n, cut = dim / 3 + 1;
                memcpy(c, c0, bytes);
                for (size_t lo = 0; lo < g.n; lo += cut) {
                    size_t w = lo + cut < g.n ? cut : g.n - lo;
                    cblas_sgemm(CblasRowMajor, g.ta, g.tb, (int)g.m, (int)w, (int)g.k,
                                g.alpha, g.a, (int)g.lda,
                                g.tb == CblasNoTrans ? g.b + lo : g.b + lo * g.ldb,
                                (int)g.ldb, 0.0f, c + lo, (int)g.ldc);
                }
                memcpy(whole, c, bytes);
                memcpy(c, c0, bytes);
                cblas_sgemm(CblasRowMajor, g.ta, g.tb, (int)g.m, (int)g.n, (int)g.k, g.alpha,
                            g.a, (int)g.lda, g.b, (int)g.ldb, 0.0f, c, (int)g.ldc);
                naive += differing(whole, c, g.m, g.n, g.ldc);
                total += g.m * g.n;
            }
            free(c0);
            free(whole);
            free(bias);
            free(mask);
            free(a);
            free(b);
            free(c);
        }
    /* informative: 0 on kernels that happen to be cut-proof (Sandybridge) */
    printf("# plain sgemm cut into column blocks: %zu of %zu elements differ from one call "
           "(OpenBLAS %s)\n",
           naive, total, dsl_blas_core());
}

TEST(fp32_rows_handed_over_block_by_block_should_be_the_whole_products_rows)
{
    uint64_t seed = 11;
    for (size_t si = 0; si < sizeof(fshapes) / sizeof(fshapes[0]); si++) {
        struct dsl_gemm g;
        float *a, *b, *c;
        rng = 51 + si;
        setup(&g, &fshapes[si], &a, &b, &c);
        g.by_rows = 1;
        dsl_gemm_run(&g);
        struct dsl_gemm_carry cy = {0};
        float *dst = malloc(g.m * g.n * sizeof(float));
        for (int trial = 0; trial < 6; trial++) {
            /* blocks of one random height (as segments are), last block first */
            size_t h = 1 + dsl_test_rng(&seed) % (g.m / 2 + 1);
            dsl_gemm_carry_reset(&cy);
            memset(dst, 0xff, g.m * g.n * sizeof(float));
            for (size_t hi = g.m; hi > 0;) {
                size_t lo = hi > h ? hi - h : 0;
                dsl_gemm_rows(&g, lo, hi - lo, dst + lo * g.n, g.n, &cy);
                hi = lo;
            }
            for (size_t i = 0; i < g.m; i++)
                if (memcmp(dst + i * g.n, c + i * g.ldc, g.n * sizeof(float)))
                    DSL_FAIL_("shape %zu, blocks of %zu rows: row %zu differs from the "
                              "whole product",
                              si, h, i);
        }
        dsl_gemm_carry_release(&cy);
        free(dst);
        free(a);
        free(b);
        free(c);
    }
}

TEST(fp32_products_should_give_the_same_bits_at_any_thread_count)
{
    size_t cap = 1 << 23;
    char *one = malloc(cap), *three = malloc(cap);
    fp32_child = 1;
    size_t n1 = run_child(1, one, cap), n3 = run_child(3, three, cap);
    fp32_child = 0;
    ASSERT(n1 > 0 && n1 < cap);
    ASSERT_EQ(n1, n3);
    ASSERT(memcmp(one, three, n1) == 0);
    free(one);
    free(three);
}

TEST_MAIN()
