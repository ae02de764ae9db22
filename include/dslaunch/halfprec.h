/*
 * 16-bit floating point on the host: the reference conversions of the GPU's mixed
 * precision (house style 21). The CUDA kernels convert with cuda_fp16.h/cuda_bf16.h's
 * __float2half_rn / __float2bfloat16_rn, which round to nearest even; these functions
 * give the same bits, so tests can check a GPU's half buffers against the host, and the
 * trainer's model-state formula can be computed and unit-tested without a GPU.
 */
#ifndef DSLAUNCH_HALFPREC_H
#define DSLAUNCH_HALFPREC_H

#include <stddef.h>
#include <stdint.h>

/** IEEE binary16, round to nearest even; overflow to inf, NaN stays NaN (quiet). */
uint16_t dsl_fp16_from_float(float f);
float dsl_fp16_to_float(uint16_t h);
/** bfloat16 (the top half of a float), round to nearest even; NaN stays NaN (quiet). */
uint16_t dsl_bf16_from_float(float f);
float dsl_bf16_to_float(uint16_t h);

/**
 * The model-state bytes the ZeRO formulas give for P parameters on N ranks with spp
 * optimizer state vectors per parameter (Adam 2), at half-parameter size hsz (2 for
 * mixed precision, whose fp32 master weights count as optimizer state as in the ZeRO
 * paper's K = 12; 4 for fp32, which keeps no master copy). Without buckets,
 * accumulation or padding:
 *   fp32:  16P / 8P + 8P/N / 4P + 12P/N          (Adam)
 *   mixed: 16P / 4P + 12P/N / 2P + 14P/N         (Adam)
 * Defined with the trainer's mixed-precision code (trainer_mixed.c, library dsltrain);
 * the conversions above are halfconv.c's (library dslcomm).
 */
double dsl_zero_state_formula(int stage, size_t P, int N, size_t spp, size_t hsz);

#endif
