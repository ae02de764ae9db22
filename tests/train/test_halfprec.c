/*
 * The host reference of mixed precision (halfprec.h): fp16 and bf16 rounding against
 * their definition (round to nearest, ties to even, checked by looking at the two
 * neighbouring 16-bit values), exhaustive round trips of every 16-bit pattern, the
 * special values, and the ZeRO model-state formula for fp32 and mixed precision. Also
 * the branch-free forms (halfvec.h) that the collectives' 16-bit reductions use: the
 * same bits as the reference for every 16-bit value and a dense sweep of floats (every
 * float with DSL_TEST_EXHAUSTIVE=1: 2^32 floats, about 30 s at -O2).
 * No GPU needed: these are the oracles the GPU test and the trainer's report use.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/halfprec.h"
#include "train/halfvec.h"
#include "test.h"
#include "common/banned.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* h is the correctly rounded 16-bit value of finite f: no neighbour is nearer, and on
 * a tie h is even. Neighbours of a finite h are h +- 1 in magnitude (same sign). */
static void check_nearest(float f, uint16_t h, float (*to)(uint16_t), uint16_t maxfin,
                          const char *what)
{
    double x = (double)f, v = (double)to(h), d = fabs(x - v);
    uint16_t mag = h & 0x7fffu, sign = h & 0x8000u;
    if (mag > maxfin) { /* rounded to inf: only right at or beyond the halfway point */
        double top = (double)to(maxfin), next = 2.0 * top - (double)to((uint16_t)(maxfin - 1));
        if (!(fabs(x) >= (top + next) / 2))
            DSL_FAIL_("%s: %a rounded to inf", what, x);
        return;
    }
    for (int k = -1; k <= 1; k += 2) {
        if ((k < 0 && mag == 0) || (k > 0 && mag == maxfin))
            continue;
        double w = (double)to((uint16_t)(sign | (uint16_t)(mag + k)));
        double dw = fabs(x - w);
        if (dw < d || (dw == d && (mag & 1u)))
            DSL_FAIL_("%s: %a rounded to %a (bits %#x), but %a is %s", what, x, v,
                      (unsigned)h, w, dw < d ? "nearer" : "as near and even");
    }
}

TEST(halfprec_should_round_every_16_bit_value_back_to_itself)
{
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float b = dsl_bf16_to_float(h), f = dsl_fp16_to_float(h);
        if (isnan(b))
            ASSERT(isnan(dsl_bf16_to_float(dsl_bf16_from_float(b))));
        else
            ASSERT_EQ(dsl_bf16_from_float(b), h);
        if (isnan(f))
            ASSERT(isnan(dsl_fp16_to_float(dsl_fp16_from_float(f))));
        else
            ASSERT_EQ(dsl_fp16_from_float(f), h);
    }
}

TEST(halfprec_should_round_to_nearest_even)
{
    uint64_t s = 7;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)rng(&s);
        if (i % 3 == 0) /* values near the fp16 range, subnormals included */
            u = (u & 0x80000000u) | (0x33000000u + (u % (0x47800000u - 0x33000000u)));
        if (i % 7 == 0) /* ties: the bits below the 16-bit grid set to exactly half */
            u = (u & ~0xffffu) | 0x8000u;
        float f = from_bits(u);
        if (!isfinite(f))
            continue;
        check_nearest(f, dsl_bf16_from_float(f), dsl_bf16_to_float, 0x7f7f, "bf16");
        check_nearest(f, dsl_fp16_from_float(f), dsl_fp16_to_float, 0x7bff, "fp16");
    }
    /* the named cases */
    ASSERT_EQ(dsl_fp16_from_float(1.0f), 0x3c00);
    ASSERT_EQ(dsl_fp16_from_float(65504.0f), 0x7bff);
    ASSERT_EQ(dsl_fp16_from_float(65519.99f), 0x7bff);
    ASSERT_EQ(dsl_fp16_from_float(65520.0f), 0x7c00); /* the tie goes to "even" inf */
    ASSERT_EQ(dsl_fp16_from_float(-1e10f), 0xfc00);
    ASSERT_EQ(dsl_fp16_from_float(ldexpf(1.0f, -24)), 0x0001);
    ASSERT_EQ(dsl_fp16_from_float(ldexpf(1.0f, -25)), 0x0000); /* tie to even zero */
    ASSERT_EQ(dsl_fp16_from_float(ldexpf(1.5f, -25)), 0x0001);
    ASSERT_EQ(dsl_fp16_from_float(ldexpf(3.0f, -25)), 0x0002); /* 1.5 units: tie, even */
    ASSERT_EQ(dsl_fp16_from_float(-0.0f), 0x8000);
    ASSERT_EQ(dsl_bf16_from_float(1.0f), 0x3f80);
    ASSERT_EQ(dsl_bf16_from_float(from_bits(0x3f808000u)), 0x3f80); /* tie, even */
    ASSERT_EQ(dsl_bf16_from_float(from_bits(0x3f818000u)), 0x3f82); /* tie, even */
    ASSERT_EQ(dsl_bf16_from_float(from_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX -> inf */
    ASSERT(isinf(dsl_bf16_to_float(dsl_bf16_from_float(INFINITY))));
    ASSERT(isnan(dsl_bf16_to_float(dsl_bf16_from_float(NAN))));
    ASSERT(isnan(dsl_fp16_to_float(dsl_fp16_from_float(NAN))));
    ASSERT(isinf(dsl_fp16_to_float(dsl_fp16_from_float(-INFINITY))));
    ASSERT(bits(dsl_fp16_to_float(0x0001)) == bits(ldexpf(1.0f, -24)));
    fprintf(stderr, "# fp16/bf16: 2M random floats rounded to nearest even\n");
}

/* halfvec.h's conversions against the reference, bit for bit; returns the mismatches */
static unsigned long vec_mismatches(uint32_t u)
{
    float f = from_bits(u);
    unsigned long bad = 0;
    if (dsl_hv_fp16_from_float(f) != dsl_fp16_from_float(f))
        bad++, fprintf(stderr, "fp16 of %#x: vec %#x, ref %#x\n", (unsigned)u,
                       (unsigned)dsl_hv_fp16_from_float(f), (unsigned)dsl_fp16_from_float(f));
    if (dsl_hv_bf16_from_float(f) != dsl_bf16_from_float(f))
        bad++, fprintf(stderr, "bf16 of %#x: vec %#x, ref %#x\n", (unsigned)u,
                       (unsigned)dsl_hv_bf16_from_float(f), (unsigned)dsl_bf16_from_float(f));
    return bad;
}

TEST(halfvec_should_widen_every_16_bit_value_like_the_reference)
{
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        ASSERT_EQ(bits(dsl_hv_fp16_to_float(h)), bits(dsl_fp16_to_float(h)));
        ASSERT_EQ(bits(dsl_hv_bf16_to_float(h)), bits(dsl_bf16_to_float(h)));
    }
}

TEST(halfvec_should_round_like_the_reference)
{
    /* Every top half of a float with low halves around each rounding position (the
     * bit k, one below it, one above it): the ties and their neighbours of every fp16
     * rounding point (bit 12 for normals, bits 13-23 for subnormals, whose tie bits
     * above 15 the top half enumerates) and of bf16's (bit 15). */
    uint32_t lows[3 * 16 + 2];
    int nl = 0;
    lows[nl++] = 0;
    lows[nl++] = 0xffffu;
    for (int k = 0; k < 16; k++) {
        lows[nl++] = 1u << k;
        lows[nl++] = (1u << k) - 1u + (k == 0 ? 2u : 0u);
        lows[nl++] = ((1u << k) + 1u) & 0xffffu;
    }
    unsigned long bad = 0, n = 0;
    for (uint32_t hi = 0; hi < 65536 && bad < 10; hi++)
        for (int j = 0; j < nl; j++, n++)
            bad += vec_mismatches(hi << 16 | lows[j]);
    ASSERT_EQ(bad, 0);
    if (getenv("DSL_TEST_EXHAUSTIVE")) {
        for (uint64_t u = 0; u < (1ull << 32) && bad < 10; u++)
            bad += vec_mismatches((uint32_t)u);
        ASSERT_EQ(bad, 0);
        n += 1ul << 32;
    }
    fprintf(stderr, "# halfvec: %lu floats rounded to the reference's fp16 and bf16 bits\n", n);
}

TEST(zero_state_formula_should_give_deepspeeds_bytes_per_parameter)
{
    /* Adam (2 state vectors), P = 1000, N = 4 */
    ASSERT(dsl_zero_state_formula(0, 1000, 4, 2, 4) == 16000.0);
    ASSERT(dsl_zero_state_formula(1, 1000, 4, 2, 4) == 8000.0 + 8000.0 / 4);
    ASSERT(dsl_zero_state_formula(2, 1000, 4, 2, 4) == 4000.0 + 12000.0 / 4);
    ASSERT(dsl_zero_state_formula(0, 1000, 4, 2, 2) == 16000.0);
    ASSERT(dsl_zero_state_formula(1, 1000, 4, 2, 2) == 4000.0 + 12000.0 / 4);
    ASSERT(dsl_zero_state_formula(2, 1000, 4, 2, 2) == 2000.0 + 14000.0 / 4);
    /* SGD with momentum (1 vector): master 4 + momentum 4 per parameter */
    ASSERT(dsl_zero_state_formula(2, 1000, 2, 1, 2) == 2000.0 + 10000.0 / 2);
    ASSERT(dsl_zero_state_formula(0, 1000, 2, 0, 4) == 8000.0);
}

int main(int argc, char **argv)
{
    return RUN_TESTS(argc, argv);
}
