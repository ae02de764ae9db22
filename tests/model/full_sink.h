/*
 * The model tests' gradient sink over one whole buffer (test_model.c, test_gpt.c):
 * dest() hands out grads + the segment's offset, done() checks that the segments come
 * down the flat buffer in order without a gap (the trainer's buckets), need() that
 * forward asks for the buffer in order, all of it. And the check of a loss scale's
 * gradients.
 */
#ifndef DSL_TESTS_MODEL_FULL_SINK_H
#define DSL_TESTS_MODEL_FULL_SINK_H

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

/* a power-of-two loss scale scales every gradient exactly: gs[i] == scale * g1[i] */
static inline void check_scaled(const float *g1, const float *gs, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        if (gs[i] != scale * g1[i])
            DSL_FAIL_("gradient %zu: %a at scale %g, %a at scale 1", i, (double)gs[i],
                      (double)scale, (double)g1[i]);
}

#endif
