/*
 * The bf16 products of cpugemm.h (struct dsl_gemm with .bf16 set), on oneDNN.
 *
 * Theory of operation. A and B are rounded to bf16 (to nearest, ties to even, by
 * AVX512-BF16's conversion: narrow_row) into the caller's scratch, each in its stored
 * layout made dense, by row blocks over the pool. Then C is cut into row or column
 * blocks (by_rows, as the fp32 path) and each block is one oneDNN matmul on a pool
 * thread: bf16 A and B (strided views of the dense copies), fp32 C, the products
 * accumulated in fp32, alpha as the output scale and beta as a sum post-op.
 * oneDNN runs on OpenMP; every thread that calls it is held to one OpenMP thread, so
 * a block runs where the pool put it and the pool alone decides the parallelism.
 *
 * Primitives are cached per thread (a pthread key whose destructor frees them),
 * keyed by everything that fixes one: the block's shape, the strides, ldc, alpha and
 * beta. A model's products have a handful of shapes, so after the first step no
 * primitive is made again; memory objects (cheap) are made per call around the
 * caller's pointers.
 *
 * Determinism. Unlike sgemm's, oneDNN's kernels are chosen by the block's shape, and
 * an element's bits can change with the height or width of the block it is computed
 * in. So here the blocks are fixed by the product's shape alone (up to BLOCKS_MAX
 * blocks of at least BLOCK_MIN rows or columns, whole cache lines), and the pool only
 * decides which thread runs which: every call, and so every bit, is the same at any
 * thread count, and with the models' shapes fixed by the micro batch and the segment
 * size (never the world size), at any world size and stage. Rounding is elementwise.
 * tests/model/test_cpugemm.c checks 1 against 3 threads.
 *
 * Used only when dsl_gemm_bf16_supported(): oneDNN's effective ISA has AVX512-BF16
 * (or AMX, which includes it). Elsewhere oneDNN would emulate bf16 slower than sgemm.
 */
#include <immintrin.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/device/cpugemm.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/halfvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/device/cpupool.h"
#include "dslaunch/common/banned.h"

#define CACHE_SLOTS 64
#define BLOCK_MIN 64 /* rows or columns of C per oneDNN call, at least (but the last) */
#define BLOCKS_MAX 8 /* calls per product, at most: work for up to 8 threads */

struct dsl_gemm_bf16 {
    uint16_t *a, *b;
    size_t acap, bcap;
};

struct prim_key {
    int64_t m, n, k, as0, as1, bs0, bs1, ldc;
    float alpha, beta;
};

struct prim {
    struct prim_key key;
    dnnl_primitive_t p;
    dnnl_memory_desc_t a, b, c;
};

/* one per thread that runs blocks */
struct tstate {
    dnnl_stream_t stream;
    struct prim slot[CACHE_SLOTS];
    size_t used, next;
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static pthread_key_t tkey;
static int usable;
static char unusable_why[200];

static void tstate_free(void *v)
{
    struct tstate *t = v;
    for (size_t i = 0; i < t->used; i++)
        dnnl_primitive_destroy(t->slot[i].p);
    if (t->stream)
        dnnl_stream_destroy(t->stream);
    free(t);
}

static void init(void)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) !=
        (unsigned)dnnl_cpu_isa_avx512_core_bf16) {
        snprintf(unusable_why, sizeof(unusable_why),
                 "this CPU has no bf16 instructions (AVX512-BF16 or AMX; oneDNN's ISA here "
                 "is 0x%x)",
                 (unsigned)isa);
        return;
    }
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
        snprintf(unusable_why, sizeof(unusable_why), "oneDNN cannot make a CPU engine");
        return;
    }
    if (pthread_key_create(&tkey, tstate_free) != 0) {
        snprintf(unusable_why, sizeof(unusable_why), "no thread-specific key left");
        return;
    }
    usable = 1;
}

int dsl_gemm_bf16_supported(char *why, size_t len)
{
    pthread_once(&once, init);
    if (!usable && why && len)
        snprintf(why, len, "%s", unusable_why);
    return usable;
}

struct dsl_gemm_bf16 *dsl_gemm_bf16_new(void)
{
    return dsl_gemm_bf16_supported(NULL, 0) ? dsl_xcalloc(1, sizeof(struct dsl_gemm_bf16))
                                            : NULL;
}

void dsl_gemm_bf16_free(struct dsl_gemm_bf16 *s)
{
    if (!s)
        return;
    free(s->a);
    free(s->b);
    free(s);
}

static struct tstate *tstate(void)
{
    struct tstate *t = pthread_getspecific(tkey);
    if (t)
        return t;
    t = dsl_xcalloc(1, sizeof(*t));
    omp_set_num_threads(1); /* this thread's blocks run here, on this thread alone */
    if (dnnl_stream_create(&t->stream, engine, dnnl_stream_default_flags) != dnnl_success)
        DSL_BUG("oneDNN: cannot make a stream");
    if (pthread_setspecific(tkey, t) != 0)
        DSL_BUG("cannot set a thread-specific value");
    return t;
}

static void shape_bug(const char *what, const struct prim_key *k)
{
    char msg[160];
    snprintf(msg, sizeof(msg), "oneDNN %s a bf16 product of %lld x %lld x %lld", what,
             (long long)k->m, (long long)k->n, (long long)k->k);
    DSL_BUG(msg);
}

static const struct prim *prim_get(struct tstate *t, const struct prim_key *k)
{
    for (size_t i = 0; i < t->used; i++)
        if (!memcmp(&t->slot[i].key, k, sizeof(*k)))
            return &t->slot[i];
    struct prim *s;
    if (t->used < CACHE_SLOTS) {
        s = &t->slot[t->used++];
    } else {
        s = &t->slot[t->next];
        t->next = (t->next + 1) % CACHE_SLOTS;
        dnnl_primitive_destroy(s->p);
    }
    memset(s, 0, sizeof(*s));
    s->key = *k;
    dnnl_dims_t da = {k->m, k->k}, db = {k->k, k->n}, dc = {k->m, k->n};
    dnnl_dims_t sa = {k->as0, k->as1}, sb = {k->bs0, k->bs1}, sc = {k->ldc, 1};
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_memory_desc_init_by_strides(&s->a, 2, da, dnnl_bf16, sa) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&s->b, 2, db, dnnl_bf16, sb) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&s->c, 2, dc, dnnl_f32, sc) != dnnl_success ||
        dnnl_matmul_desc_init(&md, &s->a, &s->b, NULL, &s->c) != dnnl_success ||
        dnnl_primitive_attr_create(&attr) != dnnl_success ||
        dnnl_post_ops_create(&po) != dnnl_success)
        shape_bug("cannot describe", k);
    if (k->alpha != 1.0f &&
        dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha) != dnnl_success)
        DSL_BUG("oneDNN: cannot set an output scale");
    if (k->beta != 0.0f && dnnl_post_ops_append_sum(po, k->beta) != dnnl_success)
        DSL_BUG("oneDNN: cannot add a sum post-op");
    if (dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL) != dnnl_success ||
        dnnl_primitive_create(&s->p, pd) != dnnl_success)
        shape_bug("has no primitive for", k);
    dnnl_primitive_desc_destroy(pd);
    dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    return s;
}

static void matmul(const struct prim_key *k, const uint16_t *a, const uint16_t *b, float *c)
{
    struct tstate *t = tstate();
    const struct prim *p = prim_get(t, k);
    dnnl_memory_t ma, mb, mc;
    if (dnnl_memory_create(&ma, &p->a, engine, (void *)(uintptr_t)a) != dnnl_success ||
        dnnl_memory_create(&mb, &p->b, engine, (void *)(uintptr_t)b) != dnnl_success ||
        dnnl_memory_create(&mc, &p->c, engine, c) != dnnl_success)
        DSL_BUG("oneDNN: cannot wrap a product's buffers");
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    if (dnnl_primitive_execute(p->p, t->stream, 3, args) != dnnl_success ||
        dnnl_stream_wait(t->stream) != dnnl_success)
        DSL_BUG("oneDNN: a bf16 matmul failed");
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
}

/* rows x cols of src (row stride ld) rounded into dst, dense */
struct narrow_job {
    const float *src;
    size_t ld, cols;
    uint16_t *dst;
};

/*
 * VCVTNE2PS2BF16 rounds 32 floats to nearest even at a time: this file runs only where
 * oneDNN found AVX512-BF16 (which comes with AVX512BW and VL). It reads denormal
 * inputs as zero, unlike halfvec.h's scalar rounding, and every element goes through
 * it (the tail of a row masked), so an element rounds the same wherever it sits.
 */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
narrow_row(uint16_t *d, const float *s, size_t n)
{
    size_t c = 0;
    for (; c + 32 <= n; c += 32) {
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + c + 16), _mm512_loadu_ps(s + c));
        _mm512_storeu_si512((void *)(d + c), (__m512i)v);
    }
    for (; c < n; c += 16) {
        size_t left = n - c < 16 ? n - c : 16;
        __mmask16 k = (__mmask16)((1u << left) - 1u);
        __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, s + c));
        _mm256_mask_storeu_epi16((void *)(d + c), k, (__m256i)v);
    }
}

static void narrow_rows(void *arg, size_t lo, size_t hi)
{
    const struct narrow_job *j = arg;
    for (size_t r = lo; r < hi; r++)
        narrow_row(j->dst + r * j->cols, j->src + r * j->ld, j->cols);
}

static uint16_t *narrow(uint16_t **buf, size_t *cap, const float *src, size_t rows,
                        size_t cols, size_t ld)
{
    if (rows * cols > *cap) {
        free(*buf);
        *cap = rows * cols;
        *buf = dsl_xmalloc(*cap * sizeof(uint16_t));
    }
    struct narrow_job j = {src, ld, cols, *buf};
    size_t th = (size_t)dsl_cpupool_threads();
    dsl_cpupool_for(rows, (rows + th - 1) / th, narrow_rows, &j);
    return *buf;
}

struct run {
    const struct dsl_gemm *g;
    const uint16_t *a, *b;
    int64_t as0, as1, bs0, bs1;
    size_t dim, chunk; /* C's rows (by_rows) or columns, cut into blocks of chunk */
};

static void piece(void *arg, size_t lo, size_t hi)
{
    const struct run *r = arg;
    const struct dsl_gemm *g = r->g;
    const uint16_t *a = r->a, *b = r->b;
    float *c = g->c;
    size_t m = g->m, n = g->n;
    if (g->by_rows) {
        a += lo * (size_t)r->as0;
        c += lo * g->ldc;
        m = hi - lo;
    } else {
        b += lo * (size_t)r->bs1;
        c += lo;
        n = hi - lo;
    }
    size_t i0 = g->by_rows ? lo : 0, j0 = g->by_rows ? 0 : lo;
    dsl_gemm_block_pre(g, i0, j0, m, n);
    struct prim_key k = {(int64_t)m, (int64_t)n, (int64_t)g->k, r->as0, r->as1, r->bs0,
                         r->bs1, (int64_t)g->ldc, g->alpha, g->beta};
    matmul(&k, a, b, c);
    dsl_gemm_block_post(g, i0, j0, m, n);
}

/* blocks [b0, b1): one oneDNN call each, whichever thread runs them */
static void blocks(void *arg, size_t b0, size_t b1)
{
    const struct run *r = arg;
    for (size_t b = b0; b < b1; b++) {
        size_t lo = b * r->chunk, hi = lo + r->chunk < r->dim ? lo + r->chunk : r->dim;
        piece(arg, lo, hi);
    }
}

void dsl_gemm_run_bf16(const struct dsl_gemm *g)
{
    struct dsl_gemm_bf16 *s = g->bf16;
    int an = g->ta == CblasNoTrans, bn = g->tb == CblasNoTrans;
    /* the stored matrices: A is m x k (or k x m transposed), B k x n (or n x k) */
    size_t ar = an ? g->m : g->k, ac = an ? g->k : g->m;
    size_t br = bn ? g->k : g->n, bc = bn ? g->n : g->k;
    struct run r = {
        .g = g,
        .a = narrow(&s->a, &s->acap, g->a, ar, ac, g->lda),
        .b = narrow(&s->b, &s->bcap, g->b, br, bc, g->ldb),
        /* element (i, k) of op(A) and (k, j) of op(B) in the dense copies */
        .as0 = an ? (int64_t)g->k : 1,
        .as1 = an ? 1 : (int64_t)g->m,
        .bs0 = bn ? (int64_t)g->n : 1,
        .bs1 = bn ? 1 : (int64_t)g->k,
    };
    /* blocks fixed by the product's shape alone, never by the thread count (above) */
    r.dim = g->by_rows ? g->m : g->n;
    size_t nb = (r.dim + BLOCK_MIN - 1) / BLOCK_MIN;
    nb = nb < BLOCKS_MAX ? nb : BLOCKS_MAX;
    r.chunk = ((r.dim + nb - 1) / nb + 15) / 16 * 16;
    nb = (r.dim + r.chunk - 1) / r.chunk;
    /* one block per pool task, so that one thread, running them all, makes the same
     * calls as many */
    dsl_cpupool_for(nb, 1, blocks, &r);
}
