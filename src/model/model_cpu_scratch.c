/*
 * The CPU models' shared scratch (model_cpu_scratch.h): the 16-bit models' fp32 copy of
 * the parameters and their one-segment gradient buffer, the bf16 products' copies and
 * the carry of a weight gradient's tile row. No concurrency: one model, one thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model_cpu_scratch.h"
#include "dslaunch/common/banned.h"

int dsl_cpu_scratch_init(struct dsl_cpu_scratch *s, const struct dsl_model *m,
                         const struct dsl_model_spec *spec)
{
    s->b16 = spec->gemm_bf16 ? dsl_gemm_bf16_new() : NULL;
    if (spec->dtype == DSL_FLOAT32)
        return 0; /* the fp32 model computes on the caller's pointers */
    size_t gmax = 0;
    for (size_t i = 0; i < m->nsegs; i++)
        gmax = m->segs[i].len > gmax ? m->segs[i].len : gmax;
    /* never malloc(0): a NULL from it would read as out of memory */
    s->w32 = malloc(m->nparams ? m->nparams * sizeof(float) : 1);
    s->g32 = malloc(gmax ? gmax * sizeof(float) : 1);
    return s->w32 && s->g32 ? 0 : -ENOMEM;
}

void dsl_cpu_scratch_release(struct dsl_cpu_scratch *s)
{
    free(s->w32);
    free(s->g32);
    dsl_gemm_bf16_free(s->b16);
    dsl_gemm_carry_release(&s->carry);
    memset(s, 0, sizeof(*s));
}
