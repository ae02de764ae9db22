/*
 * Branch-free fp16/bf16 conversions for loops the compiler should vectorize: the host
 * collectives' 16-bit reductions (dsl_comm_combine in comm_reduce.c). Each gives the same bits
 * as the reference in halfprec.h (halfconv.c) for every input, NaN payloads included;
 * test_halfprec checks every 16-bit value and every float of a dense sweep against the
 * reference (and all 2^32 floats with DSL_TEST_EXHAUSTIVE=1). They use only integer
 * shifts, adds, compares, float adds/multiplies and selects, which SSE2 has for four
 * lanes at a time; the reference's data-dependent shift (fp16 subnormals) and early
 * returns keep GCC from vectorizing it.
 *
 * They rely on the default floating-point environment (round to nearest even, no
 * flush-to-zero), like every float operation in the library. Internal to dsltrain
 * (the host collectives, the CPU device's 16-bit ops, the CPU model's 16-bit storage)
 * and its tests: static inline, no state.
 */
#ifndef DSL_HALFVEC_H
#define DSL_HALFVEC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t dsl_hv_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float dsl_hv_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* cond ? a : b on masks, so that the compiler keeps the loop free of branches (GCC
 * would otherwise sink the float arithmetic of one side into a branch, which it then
 * cannot if-convert back, float operations being able to trap) */
static inline uint32_t dsl_hv_sel(int cond, uint32_t a, uint32_t b)
{
    uint32_t m = 0u - (uint32_t)cond;
    return (a & m) | (b & ~m);
}

static inline float dsl_hv_bf16_to_float(uint16_t h)
{
    return dsl_hv_float((uint32_t)h << 16);
}

/* Add half an ulp of bf16 minus one, plus the kept lowest bit (ties to even), and cut;
 * a NaN keeps its top bits, made quiet. */
static inline uint16_t dsl_hv_bf16_from_float(float f)
{
    uint32_t u = dsl_hv_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)dsl_hv_sel((u & 0x7fffffffu) > 0x7f800000u, nan, rounded);
}

/*
 * fp16 -> float. Normal values: the exponent and fraction shifted into place with the
 * exponent biased by 224, then multiplied by 2^-112 (exact), which rebiases it to the
 * float's. Subnormals (exponent field 0): the fraction m placed under the exponent of
 * 0.5 gives 0.5 + m * 2^-24, and subtracting 0.5 leaves m * 2^-24 exactly. Inf and NaN:
 * the shifted bits with the exponent forced to all ones (taken as bits, so a signalling
 * NaN stays as the reference leaves it).
 */
static inline float dsl_hv_fp16_to_float(uint16_t h)
{
    uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
    uint32_t normal = dsl_hv_bits(dsl_hv_float((two_w >> 4) + 0x70000000u) * 0x1.0p-112f);
    uint32_t subnormal = dsl_hv_bits(dsl_hv_float((two_w >> 17) | 0x3f000000u) - 0.5f);
    uint32_t special = (two_w >> 4) + 0x70000000u;
    uint32_t mag = dsl_hv_sel(two_w >= 0xf8000000u, special,
                              dsl_hv_sel(two_w < 0x08000000u, subnormal, normal));
    return dsl_hv_float(sign | mag);
}

/*
 * float -> fp16, round to nearest even (the method of Maratyszcza's FP16 library, also
 * PyTorch's fp16_ieee_from_fp32_value). |f| * 2^112 * 2^-110 is 4|f|, or inf when |f|
 * is beyond fp16's range, so those end as inf. Adding 2^(e + 15), e being f's exponent
 * but at least -14 (fp16's smallest normal exponent), makes the float addition round
 * 4|f| at four times f's fp16 ulp (2^-24 for subnormals), with the hardware's ties to
 * even; the fp16 exponent and fraction are read off the sum's bits (a carry out of the
 * fraction goes into the exponent, as rounding up should). NaN: quiet, with the top 10
 * fraction bits kept, as the reference does.
 */
static inline uint16_t dsl_hv_fp16_from_float(float f)
{
    uint32_t w = dsl_hv_bits(f), shl1_w = w + w, sign = w & 0x80000000u;
    float base = (dsl_hv_float(w & 0x7fffffffu) * 0x1.0p+112f) * 0x1.0p-110f;
    uint32_t bias = shl1_w & 0xff000000u;
    bias = dsl_hv_sel(bias < 0x71000000u, 0x71000000u, bias);
    base = dsl_hv_float((bias >> 1) + 0x07800000u) + base;
    uint32_t b = dsl_hv_bits(base);
    uint32_t nonsign = ((b >> 13) & 0x7c00u) + (b & 0x0fffu);
    uint32_t nan = 0x7e00u | ((w >> 13) & 0x3ffu);
    return (uint16_t)((sign >> 16) | dsl_hv_sel(shl1_w > 0xff000000u, nan, nonsign));
}

/* dst[i] = float(src[i]) for n bf16 (bf16 != 0) or fp16 elements */
static inline void dsl_hv_widen(int bf16, float *dst, const uint16_t *src, size_t n)
{
    if (bf16)
        for (size_t i = 0; i < n; i++)
            dst[i] = dsl_hv_bf16_to_float(src[i]);
    else
        for (size_t i = 0; i < n; i++)
            dst[i] = dsl_hv_fp16_to_float(src[i]);
}

/* dst[i] = the bf16 (bf16 != 0) or fp16 rounding of src[i], for n elements */
static inline void dsl_hv_narrow(int bf16, uint16_t *dst, const float *src, size_t n)
{
    if (bf16)
        for (size_t i = 0; i < n; i++)
            dst[i] = dsl_hv_bf16_from_float(src[i]);
    else
        for (size_t i = 0; i < n; i++)
            dst[i] = dsl_hv_fp16_from_float(src[i]);
}

#endif
