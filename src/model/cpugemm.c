/*
 * One sgemm over the rank's threads (cpugemm.h).
 *
 * Theory of operation. The output C is cut into one block per thread (whole cache
 * lines: multiples of 16 floats or rows), and each block is one single-threaded
 * OpenBLAS sgemm on a pool thread (dsl_cpupool_for). The same K-long dot product
 * makes every element whatever the cut, as it is under OpenBLAS's own threading; what
 * changes is that the threads are the pool's, which spin briefly and then sleep, where
 * OpenBLAS's idle workers spin on sched_yield for a long while after every call and
 * take the second core from the optimizer.
 */
#include <stdio.h>
#include <string.h>

#include "cpugemm.h"
#include "dslaunch/common/error.h"
#include "dslaunch/model/cpupool.h"
#include "dslaunch/common/banned.h"

static int to_int(size_t v)
{
    return (int)v;
}

static void gemm_piece(void *arg, size_t lo, size_t hi)
{
    const struct dsl_gemm *g = arg;
    const float *a = g->a, *b = g->b;
    float *c = g->c;
    size_t m = g->m, n = g->n;
    if (g->by_rows) {
        a += g->ta == CblasNoTrans ? lo * g->lda : lo;
        c += lo * g->ldc;
        m = hi - lo;
    } else {
        b += g->tb == CblasNoTrans ? lo : lo * g->ldb;
        c += lo;
        n = hi - lo;
    }
    dsl_gemm_block_pre(g, c, m, n, lo);
    cblas_sgemm(CblasRowMajor, g->ta, g->tb, to_int(m), to_int(n), to_int(g->k), g->alpha, a,
                to_int(g->lda), b, to_int(g->ldb), g->beta, c, to_int(g->ldc));
    dsl_gemm_block_post(g, c, m, n, lo);
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
    size_t dim = g->by_rows ? g->m : g->n, th = (size_t)dsl_cpupool_threads();
    /* one block per thread, whole cache lines of C */
    size_t chunk = ((dim + th - 1) / th + 15) / 16 * 16;
    dsl_cpupool_for(dim, chunk, gemm_piece, (void *)(uintptr_t)g);
}
