/*
 * Element types shared by the collectives and the models, and 16-bit floating point on
 * the host: the reference conversions of the GPU's mixed precision (a CPU reference
 * beside every CUDA kernel, as its test oracle). The CUDA kernels convert with cuda_fp16.h/cuda_bf16.h's
 * __float2half_rn / __float2bfloat16_rn, which round to nearest even; these functions
 * give the same bits, so tests can check a GPU's half buffers against the host, and the
 * trainer's model-state formula can be computed and unit-tested without a GPU.
 */
#ifndef DSLAUNCH_COMMON_DTYPE_H
#define DSLAUNCH_COMMON_DTYPE_H

#include <stddef.h>
#include <stdint.h>

enum dsl_dtype {
    DSL_FLOAT32 = 0,
    DSL_FLOAT16 = 1,  /* IEEE binary16 */
    DSL_BFLOAT16 = 2, /* bfloat16: the top half of a float */
    DSL_INT32 = 3,
};

/** Bytes per element of t (0 for an unknown value). */
size_t dsl_dtype_size(enum dsl_dtype t);

/** IEEE binary16, round to nearest even; overflow to inf, NaN stays NaN (quiet). */
uint16_t dsl_fp16_from_float(float f);
float dsl_fp16_to_float(uint16_t h);
/** bfloat16 (the top half of a float), round to nearest even; NaN stays NaN (quiet). */
uint16_t dsl_bf16_from_float(float f);
float dsl_bf16_to_float(uint16_t h);

#endif
