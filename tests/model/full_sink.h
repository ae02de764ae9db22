/*
 * The model tests' gradient sink over one whole buffer (test_model.c, test_gpt.c, and
 * against the CUDA MLP tests/train/test_gpu_trainer.c, scripts/cuda-emu/drv_mlp.c):
 * dest() hands out grads + the segment's offset, done() checks that the segments come
 * down the flat buffer in order without a gap (the trainer's buckets), need() that
 * forward asks for the buffer in order, all of it, or (need_rec) records
 * what it asked for. And the checks of two models' need() calls and gradients, and of a
 * loss scale's gradients.
 */
#ifndef DSL_TESTS_MODEL_FULL_SINK_H
#define DSL_TESTS_MODEL_FULL_SINK_H

#include <math.h>

#include "dslaunch/model/model.h"
#include "test.h"

struct full_sink {
    float *grads;
    const struct dsl_model *m;
    size_t ndone;
    size_t last_off; /* segments must come in descending offset order */
    size_t needed;   /* need() so far: the buffer's start up to here */
};

static inline float *fs_dest(void *ctx, size_t seg)
{
    struct full_sink *s = ctx;
    return s->grads + s->m->segs[seg].off;
}

static inline void fs_done(void *ctx, size_t seg)
{
    struct full_sink *s = ctx;
    ASSERT(s->m->segs[seg].off + s->m->segs[seg].len == s->last_off);
    ASSERT_EQ(seg, s->ndone);
    s->last_off = s->m->segs[seg].off;
    s->ndone++;
}

static inline void fs_need(void *ctx, size_t off, size_t len)
{
    struct full_sink *s = ctx;
    ASSERT_EQ(off, s->needed);
    s->needed = off + len;
}

/* a full_sink whose need() records forward's calls, in order, instead of checking them
   (fs first, so that fs_dest and fs_done take it) */
struct need_rec {
    struct full_sink fs;
    size_t need_off[64], need_len[64], nneed;
};

static inline void nr_need(void *ctx, size_t off, size_t len)
{
    struct need_rec *s = ctx;
    ASSERT(s->nneed < 64);
    s->need_off[s->nneed] = off;
    s->need_len[s->nneed++] = len;
}

/* got's need() calls are want's, the same in the same order */
static inline void nr_expect_same(const struct need_rec *want, const struct need_rec *got)
{
    ASSERT_EQ(got->nneed, want->nneed);
    for (size_t i = 0; i < want->nneed; i++) {
        ASSERT_EQ(got->need_off[i], want->need_off[i]);
        ASSERT_EQ(got->need_len[i], want->need_len[i]);
    }
}

/* the largest |got[i] - want[i]| of n gradients (inf where one is NaN), and in *wmax the
   largest |want[i]|, which the difference is judged against */
static inline double grad_maxdiff(const float *want, const float *got, size_t n, double *wmax)
{
    double diff = 0.0;
    *wmax = 0.0;
    for (size_t i = 0; i < n; i++) {
        *wmax = fmax(*wmax, fabs((double)want[i]));
        double d = fabs((double)got[i] - (double)want[i]);
        diff = isnan(d) ? INFINITY : fmax(diff, d);
    }
    return diff;
}

/* a power-of-two loss scale scales every gradient exactly: gs[i] == scale * g1[i] */
static inline void check_scaled(const float *g1, const float *gs, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        if (gs[i] != scale * g1[i])
            DSL_FAIL_("gradient %zu: %a at scale %g, %a at scale 1", i, (double)gs[i],
                      (double)scale, (double)g1[i]);
}

#endif
