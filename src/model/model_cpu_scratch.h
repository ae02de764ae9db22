/*
 * What both CPU models (MLP, GPT) keep beside their activations for 16-bit parameters
 * and bf16 products: one struct with one set-up and one release, so the two models
 * cannot drift apart in how they own it.
 */
#ifndef DSL_MODEL_CPU_SCRATCH_H
#define DSL_MODEL_CPU_SCRATCH_H

#include "dslaunch/device/cpugemm.h"
#include "dslaunch/model/model.h"

struct dsl_cpu_scratch {
    float *w32;                  /* 16-bit: the fp32 parameters forward widened (P floats) */
    float *g32;                  /* 16-bit: one gradient segment in fp32 */
    struct dsl_gemm_bf16 *b16;   /* spec.gemm_bf16: bf16 copies of a product's inputs */
    struct dsl_gemm_carry carry; /* a weight gradient's tile row between two segments */
};

/**
 * Sets up s (zeroed by the caller) for the model m, whose segments are known, and its
 * spec: b16 with spec.gemm_bf16 (NULL where bf16 products are unsupported), w32 and g32
 * for a 16-bit spec.dtype. Returns 0, or -ENOMEM with what was allocated left in s for
 * dsl_cpu_scratch_release().
 */
int dsl_cpu_scratch_init(struct dsl_cpu_scratch *s, const struct dsl_model *m,
                         const struct dsl_model_spec *spec);

/** Frees what s owns; s is then empty (as zeroed). */
void dsl_cpu_scratch_release(struct dsl_cpu_scratch *s);

#endif
