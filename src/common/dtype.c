/*
 * Element types: their sizes, and the host reference of the 16-bit conversions (round
 * to nearest even, the bits of CUDA's __float2half_rn / __float2bfloat16_rn). Pure
 * arithmetic on bit patterns: no state, nothing concurrent. In common because the host
 * collectives reduce fp16/bf16 and the models store them; the collectives' own loops
 * use the branch-free forms of halfvec.h, which test_halfprec checks against these.
 */

#include "dslaunch/common/dtype.h"
#include "dslaunch/common/halfvec.h"
#include "dslaunch/common/banned.h"


uint16_t dsl_bf16_from_float(float f)
{
    uint32_t u = dsl_hv_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* NaN: keep it one, quiet */
    u += 0x7fffu + ((u >> 16) & 1u);           /* to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

float dsl_bf16_to_float(uint16_t h)
{
    return dsl_hv_float((uint32_t)h << 16);
}

uint16_t dsl_fp16_from_float(float f)
{
    uint32_t u = dsl_hv_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* 65520 and up round to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        /* below 2^-14: a subnormal half, units of 2^-24. The float's significand with
         * its implicit bit, shifted right by (126 - exp) - 24 + 23 + 1, rounded to
         * nearest even on the bits shifted out */
        if (a < 0x33000000u) /* below 2^-25: rounds to zero (2^-25 itself is a tie) */
            return (uint16_t)sign;
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14 .. 24 for e in 102 .. 112 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q); /* q == 0x400 is the smallest normal: right */
    }
    /* normal: rebias the exponent, round 23 fraction bits to 10 (a carry into the
     * exponent is right, up to inf for the largest) */
    uint32_t r = a - 0x38000000u; /* exponent 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

float dsl_fp16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f)
        return dsl_hv_float(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f; /* m x 2^-24, exact */
        return sign ? -v : v;
    }
    return dsl_hv_float(sign | ((e + 112u) << 23) | (m << 13));
}

size_t dsl_dtype_size(enum dsl_dtype t)
{
    switch (t) {
    case DSL_FLOAT32: return 4;
    case DSL_FLOAT16: return 2;
    case DSL_BFLOAT16: return 2;
    case DSL_INT32: return 4;
    }
    return 0;
}
