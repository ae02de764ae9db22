/*
 * The CPU device's helper threads (cpupool.h): every element of a loop is run exactly
 * once, in chunk-aligned pieces, over many lengths and chunk sizes and many jobs back
 * to back (the generation handover); and the optimizer split over threads gives the
 * bits of the one-thread loop, which is what lets dstrain use more threads without
 * changing a result.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/device/cpupool.h"
#include "dslaunch/device/device.h"
#include "dslaunch/device/optimizer.h"
#include "test.h"
#include "dslaunch/common/banned.h"

#define THREADS 3

struct cover {
    atomic_uchar *hits;
    size_t chunk;
    atomic_int bad; /* pieces that were not chunk-aligned or too long */
};

static void mark(void *arg, size_t lo, size_t hi)
{
    struct cover *c = arg;
    if (lo % c->chunk != 0 || hi <= lo || hi - lo > c->chunk)
        atomic_fetch_add(&c->bad, 1);
    for (size_t i = lo; i < hi; i++)
        atomic_fetch_add(&c->hits[i], 1);
}

static void check_cover(size_t n, size_t chunk)
{
    struct cover c = {.hits = calloc(n ? n : 1, sizeof(atomic_uchar)), .chunk = chunk};
    ASSERT(c.hits);
    dsl_cpupool_for(n, chunk, mark, &c);
    for (size_t i = 0; i < n; i++)
        if (atomic_load(&c.hits[i]) != 1)
            DSL_FAIL_("n %zu chunk %zu: element %zu ran %d times", n, chunk, i,
                      (int)atomic_load(&c.hits[i]));
    /* a loop of one chunk or less runs whole on the caller, which is one piece of
     * length n: only longer loops are cut */
    if (n > chunk)
        ASSERT_EQ(atomic_load(&c.bad), 0);
    free(c.hits);
}

TEST(cpupool_should_run_every_element_once)
{
    ASSERT_EQ(dsl_cpupool_threads(), THREADS);
    size_t ns[] = {0, 1, 2, 15, 16, 17, 63, 64, 65, 1000, 4096, 65537, 300001};
    size_t chunks[] = {1, 3, 16, 64, 1000, 1 << 16};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        for (size_t j = 0; j < sizeof(chunks) / sizeof(chunks[0]); j++)
            check_cover(ns[i], chunks[j]);
}

struct sum {
    atomic_ullong total;
    atomic_int calls;
};

static void add_range(void *arg, size_t lo, size_t hi)
{
    struct sum *s = arg;
    unsigned long long t = 0;
    for (size_t i = lo; i < hi; i++)
        t += i;
    atomic_fetch_add(&s->total, t);
    atomic_fetch_add(&s->calls, 1);
}

/* many short jobs in a row: a helper that is slow to notice one job must never run a
 * chunk of the next with the old one's fields, nor miss or repeat one */
TEST(cpupool_should_hand_over_jobs_back_to_back)
{
    for (int job = 0; job < 20000; job++) {
        size_t n = 1 + (size_t)(job * 7919) % 5000, chunk = 1 + (size_t)job % 97;
        struct sum s = {0};
        dsl_cpupool_for(n, chunk, add_range, &s);
        unsigned long long want = (unsigned long long)n * (n - 1) / 2;
        if (atomic_load(&s.total) != want)
            DSL_FAIL_("job %d: n %zu chunk %zu: sum %llu, want %llu", job, n, chunk,
                      (unsigned long long)atomic_load(&s.total), want);
        ASSERT_EQ(atomic_load(&s.calls), n <= chunk ? 1 : (int)((n + chunk - 1) / chunk));
    }
}

static float uniform(uint64_t *s)
{
    return (float)(dsl_test_rng(s) >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* the CPU device's optimizer (split over the pool) against dsl_optim_step on one
 * thread: bit for bit, for Adam, AdamW and SGD with momentum, at a length that is no
 * multiple of the chunk or of a vector */
TEST(cpupool_optimizer_should_match_one_thread_bitwise)
{
    const size_t n = 3 * (1 << 16) + 12345;
    struct dsl_optim_hparams hs[3] = {
        {.type = DSL_OPTIM_ADAM, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
         .weight_decay = 0.01f, .adam_w_mode = 1},
        {.type = DSL_OPTIM_ADAM, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f,
         .weight_decay = 0.1f, .adam_w_mode = 0},
        {.type = DSL_OPTIM_SGD, .weight_decay = 0.001f, .momentum = 0.9f},
    };
    struct dsl_device *d = dsl_device_cpu();
    for (int k = 0; k < 3; k++) {
        float *buf[8];
        for (int b = 0; b < 8; b++)
            ASSERT((buf[b] = malloc(n * sizeof(float))) != NULL);
        float *p1 = buf[0], *m1 = buf[1], *v1 = buf[2], *p2 = buf[3], *m2 = buf[4],
              *v2 = buf[5], *g = buf[6];
        uint64_t s = 42 + (uint64_t)k;
        for (size_t i = 0; i < n; i++) {
            p1[i] = p2[i] = uniform(&s);
            m1[i] = m2[i] = 0.0f;
            v1[i] = v2[i] = 0.0f;
        }
        for (uint64_t step = 1; step <= 4; step++) {
            for (size_t i = 0; i < n; i++)
                g[i] = uniform(&s) * 3.0f;
            dsl_optim_step(&hs[k], 1e-3f, step, 0.25f, p1, g, m1, v1, n);
            ASSERT_EQ(d->ops->optim_step(d, &hs[k], 1e-3f, step, 0.25f, p2, g, m2, v2, n), 0);
        }
        ASSERT(memcmp(p1, p2, n * sizeof(float)) == 0);
        ASSERT(memcmp(m1, m2, n * sizeof(float)) == 0);
        if (hs[k].type == DSL_OPTIM_ADAM)
            ASSERT(memcmp(v1, v2, n * sizeof(float)) == 0);
        for (int b = 0; b < 8; b++)
            free(buf[b]);
    }
}

int main(int argc, char **argv)
{
    /* before the first job: the helpers start with it */
    ASSERT_EQ(dsl_cpupool_set_threads(THREADS), THREADS);
    return RUN_TESTS(argc, argv);
}
