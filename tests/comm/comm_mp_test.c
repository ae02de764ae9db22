/*
 * Multi-process tests of the tcp collectives: each test forks N ranks with the env
 * contract (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT, run id and
 * token); every rank checks its own results against values it can compute itself, the
 * ranks agree on the error count through an allreduce, and the parent fails if any child
 * fails. Rank data are small integers in float, so every sum is exact in any order,
 * except in the deterministic tests, which compare bit patterns with a tree-order
 * reference computed here independently. The fp16/bf16 tests use random 16-bit values
 * instead, whose sums round: bitwise against the tree of rounded pairwise sums in
 * deterministic mode, within a stated bound otherwise (check_half_sum). The harness is
 * comm_mp.h's; the tests of failures are comm_mp_failure_test.c's.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/dtype.h"
#include "dslaunch/common/net.h"
#include "comm_mp.h"
#include "test.h"

static float val(int rank, size_t i, int iter)
{
    return (float)((int)((i * 13 + (size_t)rank * 7 + (size_t)iter * 5) % 17) - 8);
}

static const size_t counts[] = {0, 1, 3, 7, 1000, 4097, 100003, (1u << 20) + 5};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

static int check_all_collectives(struct dsl_comm *c, int rank, int world)
{
    int bad = 0;
    for (size_t ci = 0; ci < NCOUNTS && !bad; ci++) {
        size_t n = counts[ci];
        float *a = tbuf(c, (n + 1) * sizeof(float)), *b = tbuf(c, (n + 1) * sizeof(float));
        int32_t *ia = tbuf(c, (n + 1) * sizeof(int32_t)), *ib = tbuf(c, (n + 1) * sizeof(int32_t));
        CHECK(a && b && ia && ib, "out of memory");
        if (shared_here() && world > 1 && ci == 0)
            CHECK(is_shared_mapping(a), "dsl_comm_alloc did not give a shared buffer");
        for (int inplace = 0; inplace < 2 && !bad; inplace++) {
            int iter = (int)ci * 2 + inplace;
            /* allreduce sum fp32 */
            for (size_t i = 0; i < n; i++)
                a[i] = val(rank, i, iter), b[i] = -99;
            float *out = inplace ? a : b;
            CHECK(dsl_comm_allreduce(c, a, out, n, DSL_FLOAT32, DSL_SUM) == 0, "allreduce: %s",
                  dsl_comm_last_error(c));
            for (size_t i = 0; i < n && !bad; i++) {
                float want = 0;
                for (int r = 0; r < world; r++)
                    want += val(r, i, iter);
                if (out[i] != want) {
                    fprintf(stderr, "rank %d: allreduce n=%zu inplace=%d [%zu] = %g, want %g\n",
                            rank, n, inplace, i, out[i], want);
                    bad = 1;
                }
            }
            /* allreduce max int32 */
            for (size_t i = 0; i < n; i++)
                ia[i] = (int32_t)((i * 31 + (size_t)rank * 101) % 1009), ib[i] = -1;
            int32_t *iout = inplace ? ia : ib;
            CHECK(dsl_comm_allreduce(c, ia, iout, n, DSL_INT32, DSL_MAX) == 0, "max: %s",
                  dsl_comm_last_error(c));
            for (size_t i = 0; i < n && !bad; i++) {
                int32_t want = 0;
                for (int r = 0; r < world; r++) {
                    int32_t v = (int32_t)((i * 31 + (size_t)r * 101) % 1009);
                    want = v > want ? v : want;
                }
                if (iout[i] != want) {
                    fprintf(stderr, "rank %d: max n=%zu [%zu] = %d, want %d\n", rank, n, i,
                            iout[i], want);
                    bad = 1;
                }
            }
            /* reduce_scatter */
            size_t off, len;
            dsl_shard_of(n, rank, world, &off, &len);
            for (size_t i = 0; i < n; i++)
                a[i] = val(rank, i, iter + 1), b[i] = -99;
            float *rs = inplace ? a + off : b;
            CHECK(dsl_comm_reduce_scatter(c, a, rs, n, DSL_FLOAT32, DSL_SUM) == 0,
                  "reduce_scatter: %s", dsl_comm_last_error(c));
            for (size_t i = 0; i < len && !bad; i++) {
                float want = 0;
                for (int r = 0; r < world; r++)
                    want += val(r, off + i, iter + 1);
                if (rs[i] != want) {
                    fprintf(stderr, "rank %d: reduce_scatter n=%zu [%zu] = %g, want %g\n", rank,
                            n, off + i, rs[i], want);
                    bad = 1;
                }
            }
            /* allgather */
            for (size_t i = 0; i < n; i++)
                b[i] = -99;
            for (size_t i = 0; i < len; i++)
                (inplace ? b + off : a)[i] = val(rank, off + i, iter + 2);
            CHECK(dsl_comm_allgather(c, inplace ? b + off : a, b, n, DSL_FLOAT32) == 0,
                  "allgather: %s", dsl_comm_last_error(c));
            for (size_t i = 0; i < n && !bad; i++) {
                int owner = (int)(i / dsl_shard_size(n, world));
                if (b[i] != val(owner, i, iter + 2)) {
                    fprintf(stderr, "rank %d: allgather n=%zu [%zu] = %g\n", rank, n, i, b[i]);
                    bad = 1;
                }
            }
            /* broadcast */
            int root = (int)(n % (size_t)world);
            for (size_t i = 0; i < n; i++)
                a[i] = rank == root ? val(root, i, iter + 3) : -99;
            CHECK(dsl_comm_broadcast(c, a, n, DSL_FLOAT32, root) == 0, "broadcast: %s",
                  dsl_comm_last_error(c));
            for (size_t i = 0; i < n && !bad; i++)
                if (a[i] != val(root, i, iter + 3)) {
                    fprintf(stderr, "rank %d: broadcast n=%zu [%zu] = %g\n", rank, n, i, a[i]);
                    bad = 1;
                }
            CHECK(dsl_comm_barrier(c) == 0, "barrier: %s", dsl_comm_last_error(c));
        }
        tfree(c, a);
        tfree(c, b);
        tfree(c, ia);
        tfree(c, ib);
    }
    if (world > 1)
        CHECK(dsl_comm_bytes_sent(c) > 0, "no bytes counted");
    return agree(c, bad);
}


/* shared: every buffer from dsl_comm_alloc (zero-copy); mixed: all but rank 0's, so
 * every rank must agree to take the copying path */
static const char *const paths[] = {"cma", "ring", "mesh", "shared", "mixed"};

/* fn at every world from w0 to w1 over each of the first np paths; det: in
 * deterministic mode, and then not over the mesh (it is what deterministic mode uses
 * over sockets anyway) */
static void run_paths(int np, rank_fn fn, int det, int w0, int w1)
{
    for (int p = 0; p < np; p++) {
        if (det && p == 2)
            continue;
        use_path(paths[p]);
        for (int w = w0; w <= w1; w++)
            ASSERT_EQ(run_world(w, fn, det, "60", 0), 0);
    }
}

TEST(collectives_should_be_exact_at_world_1_to_4)
{
    run_paths(5, check_all_collectives, 0, 1, 4);
}

TEST(deterministic_collectives_should_be_exact_at_world_3_and_4)
{
    run_paths(4, check_all_collectives, 1, 3, 4);
}

/* ---- deterministic mode: bitwise repeatable and equal to the tree order ---- */

static float rnd(int rank, size_t i)
{
    uint64_t x = (uint64_t)rank * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull + 1;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (float)((double)(x >> 11) / (double)(1ull << 53) * 2.0 - 1.0) * 1e3f;
}

/* The balanced pairwise tree over ranks lo..hi-1, written independently of the library:
 * split at the largest power of two below the count (same tree as level-wise pairing). */
static float tree(size_t i, int lo, int hi)
{
    if (hi - lo == 1)
        return rnd(lo, i);
    int half = 1;
    while (half * 2 < hi - lo)
        half *= 2;
    return tree(i, lo, lo + half) + tree(i, lo + half, hi);
}

static int check_deterministic(struct dsl_comm *c, int rank, int world)
{
    const size_t n = (1u << 19) + 11; /* big enough for the mesh path */
    float *a = tbuf(c, n * sizeof(float)), *b = tbuf(c, n * sizeof(float));
    CHECK(a && b, "out of memory");
    int bad = 0;
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < n; i++)
            a[i] = rnd(rank, i);
        CHECK(dsl_comm_allreduce(c, a, a, n, DSL_FLOAT32, DSL_SUM) == 0, "%s",
              dsl_comm_last_error(c));
        if (round == 0)
            memcpy(b, a, n * sizeof(float));
        else if (memcmp(a, b, n * sizeof(float)))
            bad = 1, fprintf(stderr, "rank %d: round %d differs bitwise\n", rank, round);
    }
    for (size_t i = 0; i < n && !bad; i++) {
        float want = tree(i, 0, world);
        if (memcmp(&want, &b[i], sizeof(float))) {
            fprintf(stderr, "rank %d: [%zu] = %.9g, tree order gives %.9g\n", rank, i, b[i],
                    want);
            bad = 1;
        }
    }
    /* small messages (direct) follow the same tree */
    for (size_t i = 0; i < 100; i++)
        a[i] = rnd(rank, i);
    CHECK(dsl_comm_allreduce(c, a, b, 100, DSL_FLOAT32, DSL_SUM) == 0, "%s",
          dsl_comm_last_error(c));
    for (size_t i = 0; i < 100 && !bad; i++) {
        float want = tree(i, 0, world);
        if (memcmp(&want, &b[i], sizeof(float)))
            bad = 1, fprintf(stderr, "rank %d: small [%zu] not in tree order\n", rank, i);
    }
    tfree(c, a);
    tfree(c, b);
    return agree(c, bad);
}

TEST(deterministic_mode_should_repeat_bitwise_in_tree_order)
{
    run_paths(4, check_deterministic, 1, 2, 4);
}

/* ---- large counts ---- */

static int check_large(struct dsl_comm *c, int rank, int world)
{
    const size_t n = (1u << 24) + 3;
    float *a = tbuf(c, n * sizeof(float));
    int bad = 0;
    CHECK(a, "out of memory");
    for (size_t i = 0; i < n; i++)
        a[i] = val(rank, i, 0);
    CHECK(dsl_comm_allreduce(c, a, a, n, DSL_FLOAT32, DSL_SUM) == 0, "%s",
          dsl_comm_last_error(c));
    for (size_t i = 0; i < n && !bad; i++) {
        float want = 0;
        for (int r = 0; r < world; r++)
            want += val(r, i, 0);
        if (a[i] != want)
            bad = 1, fprintf(stderr, "rank %d: large [%zu] = %g, want %g\n", rank, i, a[i], want);
    }
    tfree(c, a);
    return agree(c, bad);
}

TEST(allreduce_should_handle_2_pow_24_plus_3_floats)
{
    use_path("ring");
    ASSERT_EQ(run_world(3, check_large, 0, "120", 0), 0);
    use_path("cma");
    ASSERT_EQ(run_world(2, check_large, 0, "120", 0), 0);
    use_path("shared");
    ASSERT_EQ(run_world(3, check_large, 0, "120", 0), 0);
}

/* ---- fp16 and bf16 ---- */

struct half_type {
    enum dsl_dtype t;
    const char *name;
    float (*to)(uint16_t);
    uint16_t (*from)(float);
    double u; /* unit roundoff: half an ulp of 1 */
};

static const struct half_type halves[] = {
    {DSL_FLOAT16, "fp16", dsl_fp16_to_float, dsl_fp16_from_float, 0x1p-11},
    {DSL_BFLOAT16, "bf16", dsl_bf16_to_float, dsl_bf16_from_float, 0x1p-8},
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    return x ^ (x >> 32);
}

/* Rank's element i of call iter: a random sign and fraction at a magnitude in
 * [2^-6, 2^7), rounded to the type; for fp16 one in 16 is a subnormal (or zero)
 * instead. Far from overflow at world 4; most sums round. (Built from bits: the
 * checks call this w times per element and call.) */
static uint16_t rnd16(const struct half_type *h, int rank, size_t i, int iter)
{
    uint64_t x = mix((uint64_t)rank * 0x9E3779B97F4A7C15ull + i * 0xD1B54A32D192ED03ull +
                     (uint64_t)iter * 0x8CB92BA72F3D8DD7ull + 1);
    uint32_t sign = (uint32_t)(x >> 63);
    if (h->t == DSL_FLOAT16 && (x >> 40) % 16 == 0)
        return (uint16_t)(sign << 15 | (uint32_t)((x >> 44) % 1024));
    uint32_t e = (uint32_t)((x >> 24) % 13) + 127 - 6;
    uint32_t u = sign << 31 | e << 23 | (uint32_t)(x & 0x7fffff);
    float f;
    memcpy(&f, &u, sizeof(f));
    return h->from(f);
}

/* The balanced pairwise tree over ranks lo..hi-1 (as tree() above), each addition
 * widened to float and rounded back to 16 bits: what deterministic mode must give. */
static uint16_t tree16(const struct half_type *h, size_t i, int iter, int lo, int hi)
{
    if (hi - lo == 1)
        return rnd16(h, lo, i, iter);
    int half = 1;
    while (half * 2 < hi - lo)
        half *= 2;
    return h->from(h->to(tree16(h, i, iter, lo, lo + half)) +
                   h->to(tree16(h, i, iter, lo + half, hi)));
}

/*
 * Is got the sum of element i over the ranks? Deterministic mode: exactly the tree's
 * bits. Otherwise the ring sums in another order (per segment), so the check is a
 * bound: every order combines the w inputs with w-1 additions, and each is the float
 * sum of two 16-bit values rounded to 16 bits, which is the correctly rounded 16-bit
 * sum (float's 24 bits are at least 2p+1 for p = 11 or 8, where double rounding of an
 * addition is innocuous: Figueroa, "When is double rounding innocuous?", 1995), with
 * relative error at most u (a result among fp16's subnormals is exact, both operands
 * lying on that grid; nothing overflows here). Each input then takes part in at most
 * w-1 roundings, so |got - sum| <= gamma(w-1) * sum |x_r|, gamma(k) = k u / (1 - k u)
 * (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., sec. 4.2).
 */
static int check_half_sum(const struct half_type *h, uint16_t got, size_t i, int iter, int world,
                          const char *what)
{
    if (g_det) {
        uint16_t want = tree16(h, i, iter, 0, world);
        if (got == want)
            return 0;
        fprintf(stderr, "rank %d: %s %s [%zu] = %#x (%.9g), tree order gives %#x (%.9g)\n",
                g_rank, h->name, what, i, (unsigned)got, (double)h->to(got), (unsigned)want,
                (double)h->to(want));
        return 1;
    }
    double sum = 0, abs = 0, k = world - 1;
    for (int r = 0; r < world; r++) {
        double x = (double)h->to(rnd16(h, r, i, iter));
        sum += x; /* exact in double: 16-bit values within 2^40 of each other */
        abs += fabs(x);
    }
    double bound = k * h->u / (1 - k * h->u) * abs, err = fabs((double)h->to(got) - sum);
    if (err <= bound)
        return 0;
    fprintf(stderr, "rank %d: %s %s [%zu] = %.9g, exact sum %.9g, error %.3g > bound %.3g\n",
            g_rank, h->name, what, i, (double)h->to(got), sum, err, bound);
    return 1;
}

/* Every rank must hold the same bits (in every mode): agree on a hash of buf. */
static int ranks_agree(struct dsl_comm *c, const void *buf, size_t bytes, int world)
{
    uint64_t x = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; i++)
        x = (x ^ ((const unsigned char *)buf)[i]) * 0x100000001b3ull;
    int32_t mine = (int32_t)(x & 0x7fffffff), all[16];
    if (dsl_comm_allgather(c, &mine, all, (size_t)world, DSL_INT32) < 0)
        return 1;
    for (int r = 0; r < world; r++)
        if (all[r] != mine)
            return fprintf(stderr, "rank %d: %zu bytes differ from rank %d's\n", g_rank, bytes,
                           r), 1;
    return 0;
}

/* Every collective in fp16 and bf16, blocking and asynchronous, in place and not, at
 * the counts of check_all_collectives (0, 1, odd, not a multiple of world or of any
 * vector width, up to 2^20 + 5). */
static int check_half_collectives(struct dsl_comm *c, int rank, int world)
{
    int bad = 0;
    for (size_t ti = 0; ti < 2; ti++) {
        const struct half_type *h = &halves[ti];
        for (size_t ci = 0; ci < NCOUNTS && !bad; ci++) {
            size_t n = counts[ci], sz = (n + 1) * sizeof(uint16_t), off, len;
            uint16_t *a = tbuf(c, sz), *b = tbuf(c, sz), *g = tbuf(c, sz), *s = tbuf(c, sz);
            CHECK(a && b && g && s, "out of memory");
            dsl_shard_of(n, rank, world, &off, &len);
            for (int inplace = 0; inplace < 2 && !bad; inplace++) {
                int iter = 100 * (int)ti + 10 * (int)ci + 5 * inplace;
                /* allreduce sum */
                for (size_t i = 0; i < n; i++)
                    a[i] = rnd16(h, rank, i, iter), b[i] = 0xffff;
                uint16_t *out = inplace ? a : b;
                CHECK(dsl_comm_allreduce(c, a, out, n, h->t, DSL_SUM) == 0, "%s allreduce: %s",
                      h->name, dsl_comm_last_error(c));
                for (size_t i = 0; i < n && !bad; i++)
                    bad = check_half_sum(h, out[i], i, iter, world, "allreduce");
                bad |= ranks_agree(c, out, n * sizeof(uint16_t), world);
                /* allreduce max: one of the inputs, in every order */
                for (size_t i = 0; i < n; i++)
                    a[i] = rnd16(h, rank, i, iter + 1), b[i] = 0xffff;
                CHECK(dsl_comm_allreduce(c, a, out, n, h->t, DSL_MAX) == 0, "%s max: %s",
                      h->name, dsl_comm_last_error(c));
                for (size_t i = 0; i < n && !bad; i++) {
                    float want = h->to(rnd16(h, 0, i, iter + 1));
                    for (int r = 1; r < world; r++)
                        want = fmaxf(want, h->to(rnd16(h, r, i, iter + 1)));
                    if (h->to(out[i]) != want)
                        bad = 1, fprintf(stderr, "rank %d: %s max n=%zu [%zu] = %g, want %g\n",
                                         rank, h->name, n, i, (double)h->to(out[i]),
                                         (double)want);
                }
                /* reduce_scatter sum */
                for (size_t i = 0; i < n; i++)
                    a[i] = rnd16(h, rank, i, iter + 2), b[i] = 0xffff;
                uint16_t *rs = inplace ? a + off : b;
                CHECK(dsl_comm_reduce_scatter(c, a, rs, n, h->t, DSL_SUM) == 0,
                      "%s reduce_scatter: %s", h->name, dsl_comm_last_error(c));
                for (size_t i = 0; i < len && !bad; i++)
                    bad = check_half_sum(h, rs[i], off + i, iter + 2, world, "reduce_scatter");
                /* allgather */
                for (size_t i = 0; i < n; i++)
                    b[i] = 0xffff;
                for (size_t i = 0; i < len; i++)
                    (inplace ? b + off : a)[i] = rnd16(h, rank, off + i, iter + 3);
                CHECK(dsl_comm_allgather(c, inplace ? b + off : a, b, n, h->t) == 0,
                      "%s allgather: %s", h->name, dsl_comm_last_error(c));
                for (size_t i = 0; i < n && !bad; i++) {
                    int owner = (int)(i / dsl_shard_size(n, world));
                    if (b[i] != rnd16(h, owner, i, iter + 3))
                        bad = 1, fprintf(stderr, "rank %d: %s allgather n=%zu [%zu] = %#x\n",
                                         rank, h->name, n, i, (unsigned)b[i]);
                }
                /* broadcast */
                int root = (int)((n + (size_t)inplace) % (size_t)world);
                for (size_t i = 0; i < n; i++)
                    a[i] = rank == root ? rnd16(h, root, i, iter + 4) : 0xffff;
                CHECK(dsl_comm_broadcast(c, a, n, h->t, root) == 0, "%s broadcast: %s", h->name,
                      dsl_comm_last_error(c));
                for (size_t i = 0; i < n && !bad; i++)
                    if (a[i] != rnd16(h, root, i, iter + 4))
                        bad = 1, fprintf(stderr, "rank %d: %s broadcast n=%zu [%zu] = %#x\n",
                                         rank, h->name, n, i, (unsigned)a[i]);
                /* the asynchronous forms, queued together */
                int req[3];
                for (size_t i = 0; i < n; i++) {
                    a[i] = rnd16(h, rank, i, iter + 5);
                    s[i] = rnd16(h, rank, i, iter + 6);
                    b[i] = g[i] = 0xffff;
                }
                for (size_t i = 0; i < len; i++)
                    g[off + i] = rnd16(h, rank, off + i, iter + 7);
                CHECK(dsl_comm_iallreduce(c, a, b, n, h->t, DSL_SUM, &req[0]) == 0, "%s",
                      dsl_comm_last_error(c));
                CHECK(dsl_comm_ireduce_scatter(c, s, s + off, n, h->t, DSL_SUM, &req[1]) == 0,
                      "%s", dsl_comm_last_error(c));
                CHECK(dsl_comm_iallgather(c, g + off, g, n, h->t, &req[2]) == 0, "%s",
                      dsl_comm_last_error(c));
                CHECK(dsl_comm_wait(c, req[2]) == 0, "%s async: %s", h->name,
                      dsl_comm_last_error(c));
                for (size_t i = 0; i < n && !bad; i++)
                    bad = check_half_sum(h, b[i], i, iter + 5, world, "iallreduce");
                for (size_t i = 0; i < len && !bad; i++)
                    bad = check_half_sum(h, s[off + i], off + i, iter + 6, world,
                                         "ireduce_scatter");
                for (size_t i = 0; i < n && !bad; i++)
                    if (g[i] != rnd16(h, (int)(i / dsl_shard_size(n, world)), i, iter + 7))
                        bad = 1, fprintf(stderr, "rank %d: %s iallgather n=%zu [%zu] = %#x\n",
                                         rank, h->name, n, i, (unsigned)g[i]);
            }
            tfree(c, a);
            tfree(c, b);
            tfree(c, g);
            tfree(c, s);
        }
    }
    return agree(c, bad);
}

TEST(half_collectives_should_round_each_pairwise_sum_at_world_1_to_4)
{
    run_paths(5, check_half_collectives, 0, 1, 4);
}

TEST(deterministic_half_collectives_should_equal_the_rounded_tree_bitwise)
{
    run_paths(5, check_half_collectives, 1, 2, 4);
}

/* A window of one page (DSL_COMM_RECV_WIN): every recv of a reduce-scatter stops at the
 * window's end and starts again at its beginning, and the mesh holds back peers that are
 * a window ahead of its sum all the time. */
TEST(socket_reductions_should_be_exact_with_a_window_of_one_page)
{
    setenv("DSL_COMM_RECV_WIN", "4K", 1);
    use_path("ring");
    ASSERT_EQ(run_world(3, check_all_collectives, 0, "60", 0), 0);
    ASSERT_EQ(run_world(4, check_deterministic, 1, "60", 0), 0); /* the mesh */
    use_path("mesh");
    ASSERT_EQ(run_world(4, check_half_collectives, 1, "60", 0), 0);
    unsetenv("DSL_COMM_RECV_WIN");
}

/* 2^24 + 3 16-bit elements (32 MiB): beyond the streaming threshold of the zero-copy
 * path and many chunks of every other */
static int check_large_half(struct dsl_comm *c, int rank, int world)
{
    const size_t n = (1u << 24) + 3;
    uint16_t *a = tbuf(c, n * sizeof(uint16_t));
    int bad = 0;
    CHECK(a, "out of memory");
    for (size_t ti = 0; ti < 2 && !bad; ti++) {
        const struct half_type *h = &halves[ti];
        for (size_t i = 0; i < n; i++)
            a[i] = rnd16(h, rank, i, 1000);
        CHECK(dsl_comm_allreduce(c, a, a, n, h->t, DSL_SUM) == 0, "%s",
              dsl_comm_last_error(c));
        for (size_t i = 0; i < n && !bad; i++)
            bad = check_half_sum(h, a[i], i, 1000, world, "large allreduce");
        bad |= ranks_agree(c, a, n * sizeof(uint16_t), world);
    }
    tfree(c, a);
    return agree(c, bad);
}

TEST(half_allreduce_should_handle_2_pow_24_plus_3_elements)
{
    use_path("ring");
    ASSERT_EQ(run_world(3, check_large_half, 0, "120", 0), 0);
    ASSERT_EQ(run_world(3, check_large_half, 1, "120", 0), 0); /* mesh */
    use_path("cma");
    ASSERT_EQ(run_world(2, check_large_half, 1, "120", 0), 0);
    use_path("shared");
    ASSERT_EQ(run_world(3, check_large_half, 1, "120", 0), 0);
}

/* ---- asynchronous calls complete in issue order ---- */

static int check_async(struct dsl_comm *c, int rank, int world)
{
    enum { K = 6, N = 50000 };
    static float buf[K][N], gat[N];
    int req[K + 1], bad = 0;
    for (int k = 0; k < K; k++) {
        for (size_t i = 0; i < N; i++)
            buf[k][i] = val(rank, i, k);
        CHECK(dsl_comm_iallreduce(c, buf[k], buf[k], k == 2 ? 3 : N, DSL_FLOAT32, DSL_SUM,
                                  &req[k]) == 0,
              "%s", dsl_comm_last_error(c));
    }
    size_t off, len;
    dsl_shard_of(N, rank, world, &off, &len);
    for (size_t i = 0; i < len; i++)
        gat[off + i] = (float)(off + i);
    CHECK(dsl_comm_iallgather(c, gat + off, gat, N, DSL_FLOAT32, &req[K]) == 0, "%s",
          dsl_comm_last_error(c));
    for (int k = 0; k < K; k++)
        CHECK(req[k] < req[k + 1], "request ids not increasing");
    /* waiting for the last one completes every earlier one */
    CHECK(dsl_comm_wait(c, req[K]) == 0, "%s", dsl_comm_last_error(c));
    for (int k = 0; k < K && !bad; k++)
        for (size_t i = 0; i < (k == 2 ? 3 : N) && !bad; i++) {
            float want = 0;
            for (int r = 0; r < world; r++)
                want += val(r, i, k);
            if (buf[k][i] != want)
                bad = 1, fprintf(stderr, "rank %d: async %d [%zu] = %g\n", rank, k, i, buf[k][i]);
        }
    for (size_t i = 0; i < N && !bad; i++)
        if (gat[i] != (float)i)
            bad = 1;
    CHECK(dsl_comm_wait(c, req[0]) == 0, "wait on a finished request");
    /* a blocking call after async ones runs after them */
    int r2;
    CHECK(dsl_comm_iallreduce(c, buf[0], buf[0], N, DSL_FLOAT32, DSL_MAX, &r2) == 0, "issue");
    CHECK(dsl_comm_barrier(c) == 0, "%s", dsl_comm_last_error(c));
    CHECK(dsl_comm_wait(c, r2) == 0, "%s", dsl_comm_last_error(c));
    return agree(c, bad);
}

TEST(async_calls_should_complete_in_issue_order)
{
    for (int w = 2; w <= 3; w++)
        ASSERT_EQ(run_world(w, check_async, 0, "60", 0), 0);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    return RUN_TESTS(argc, argv);
}
