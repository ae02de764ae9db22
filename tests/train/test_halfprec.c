/*
 * The host reference of mixed precision (halfprec.h): fp16 and bf16 rounding against
 * their definition (round to nearest, ties to even, checked by looking at the two
 * neighbouring 16-bit values), exhaustive round trips of every 16-bit pattern, the
 * special values, and the ZeRO model-state formula for fp32 and mixed precision. Also
 * the branch-free forms (halfvec.h) that the collectives' 16-bit reductions use: the
 * same bits as the reference for every 16-bit value and a dense sweep of floats (every
 * float with DSL_TEST_EXHAUSTIVE=1: 2^32 floats, about 30 s at -O2).
 * No GPU needed: these are the oracles the GPU test and the trainer's report use.
 * Last, the CPU device's half_* ops (device.h, dstrain.cpu_half) against their
 * definitions written out one element at a time with the reference conversions.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/device/cpupool.h"
#include "dslaunch/device/device.h"
#include "dslaunch/common/dtype.h"
#include "dslaunch/train/trainer.h"
#include "dslaunch/device/optimizer.h"
#include "dslaunch/common/halfvec.h"
#include "test.h"
#include "dslaunch/common/banned.h"


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
        uint32_t u = (uint32_t)dsl_test_rng(&s);
        if (i % 3 == 0) /* values near the fp16 range, subnormals included */
            u = (u & 0x80000000u) | (0x33000000u + (u % (0x47800000u - 0x33000000u)));
        if (i % 7 == 0) /* ties: the bits below the 16-bit grid set to exactly half */
            u = (u & ~0xffffu) | 0x8000u;
        float f = dsl_hv_float(u);
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
    ASSERT_EQ(dsl_bf16_from_float(dsl_hv_float(0x3f808000u)), 0x3f80); /* tie, even */
    ASSERT_EQ(dsl_bf16_from_float(dsl_hv_float(0x3f818000u)), 0x3f82); /* tie, even */
    ASSERT_EQ(dsl_bf16_from_float(dsl_hv_float(0x7f7fffffu)), 0x7f80); /* FLT_MAX -> inf */
    ASSERT(isinf(dsl_bf16_to_float(dsl_bf16_from_float(INFINITY))));
    ASSERT(isnan(dsl_bf16_to_float(dsl_bf16_from_float(NAN))));
    ASSERT(isnan(dsl_fp16_to_float(dsl_fp16_from_float(NAN))));
    ASSERT(isinf(dsl_fp16_to_float(dsl_fp16_from_float(-INFINITY))));
    ASSERT(dsl_hv_bits(dsl_fp16_to_float(0x0001)) == dsl_hv_bits(ldexpf(1.0f, -24)));
    fprintf(stderr, "# fp16/bf16: 2M random floats rounded to nearest even\n");
}

/* halfvec.h's conversions against the reference, bit for bit; returns the mismatches */
static unsigned long vec_mismatches(uint32_t u)
{
    float f = dsl_hv_float(u);
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
        ASSERT_EQ(dsl_hv_bits(dsl_hv_fp16_to_float(h)), dsl_hv_bits(dsl_fp16_to_float(h)));
        ASSERT_EQ(dsl_hv_bits(dsl_hv_bf16_to_float(h)), dsl_hv_bits(dsl_bf16_to_float(h)));
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

/* ---- the CPU device's 16-bit ops against element-at-a-time definitions */

static uint16_t ref_from(enum dsl_dtype ht, float f)
{
    return ht == DSL_BFLOAT16 ? dsl_bf16_from_float(f) : dsl_fp16_from_float(f);
}

static float ref_to(enum dsl_dtype ht, uint16_t h)
{
    return ht == DSL_BFLOAT16 ? dsl_bf16_to_float(h) : dsl_fp16_to_float(h);
}

/* values of both signs over many binades, some past fp16's range, a few zeros */
static float test_value(uint64_t *s)
{
    uint64_t r = dsl_test_rng(s);
    float mant = (float)(r & 0xffffff) / (float)0x1000000 + 0.5f;
    int e = (int)((r >> 24) % 40) - 28;
    float f = ldexpf(mant, e);
    if ((r >> 40) % 97 == 0)
        f = 0.0f;
    return (r >> 48) & 1 ? -f : f;
}

/* The optimizer on the device against dsl_optim_step, bit for bit: the fp32 master p
 * from f2 with the gradient (float(a) * ga) * gscale, then c = half(p). */
static void check_half_optim(struct dsl_device *d, enum dsl_dtype ht, const float *f2,
                             const uint16_t *a, uint16_t *c, size_t n)
{
    const struct dsl_device_ops *o = d->ops;
    struct dsl_optim_hparams hs[3] = {
        {.type = DSL_OPTIM_ADAM, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
         .weight_decay = 0.01f, .adam_w_mode = 1},
        {.type = DSL_OPTIM_ADAM, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
         .weight_decay = 0.01f, .adam_w_mode = 0},
        {.type = DSL_OPTIM_SGD, .weight_decay = 0.01f, .momentum = 0.9f},
    };
    for (int hi = 0; hi < 3; hi++) {
        size_t bytes = n * sizeof(float);
        float *p = malloc(bytes), *m = calloc(n, 4), *v = calloc(n, 4);
        float *rp = malloc(bytes), *rm = calloc(n, 4), *rv = calloc(n, 4);
        ASSERT(p && m && v && rp && rm && rv);
        memcpy(p, f2, bytes);
        memcpy(rp, f2, bytes);
        for (uint64_t t = 1; t <= 3; t++) {
            float ga = 1.0f / 3.0f, gs = 0.7f, lr = 0.01f;
            ASSERT_OK(o->half_optim_step(d, &hs[hi], lr, t, ht, ga, gs, p, c, a, m, v, n));
            for (size_t i = 0; i < n; i++) {
                float gi = ref_to(ht, a[i]) * ga;
                dsl_optim_step(&hs[hi], lr, t, gs, &rp[i], &gi, &rm[i], &rv[i], 1);
            }
            for (size_t i = 0; i < n; i++) {
                ASSERT_EQ(dsl_hv_bits(p[i]), dsl_hv_bits(rp[i]));
                ASSERT_EQ(dsl_hv_bits(m[i]), dsl_hv_bits(rm[i]));
                ASSERT_EQ(dsl_hv_bits(v[i]), dsl_hv_bits(rv[i]));
                ASSERT_EQ(c[i], ref_from(ht, rp[i]));
            }
        }
        free(p);
        free(m);
        free(v);
        free(rp);
        free(rm);
        free(rv);
    }
}

TEST(cpu_half_ops_should_match_their_scalar_definitions)
{
    struct dsl_device *d = dsl_device_cpu();
    const struct dsl_device_ops *o = d->ops;
    ASSERT(o->to_half && o->half_add && o->half_scale && o->half_absmax_bits &&
           o->half_sumsq_fixed && o->half_optim_step && o->widen && o->widen_add &&
           o->half_add_f32);
    enum dsl_dtype types[2] = {DSL_BFLOAT16, DSL_FLOAT16};
    size_t n = 70001; /* several stack blocks, two pool pieces, a ragged end */
    float *f = malloc(n * sizeof(float)), *f2 = malloc(n * sizeof(float));
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2), *c = malloc(n * 2);
    ASSERT(f && f2 && a && b && c);
    dsl_cpupool_set_threads(2);
    for (int ti = 0; ti < 2; ti++) {
        enum dsl_dtype ht = types[ti];
        uint64_t seed = 12345 + (uint64_t)ti;
        for (size_t i = 0; i < n; i++) {
            f[i] = test_value(&seed);
            f2[i] = test_value(&seed);
        }
        /* to_half */
        ASSERT_OK(o->to_half(d, ht, a, f, n));
        ASSERT_OK(o->to_half(d, ht, b, f2, n));
        for (size_t i = 0; i < n; i++) {
            ASSERT_EQ(a[i], ref_from(ht, f[i]));
            ASSERT_EQ(b[i], ref_from(ht, f2[i]));
        }
        /* half_add: dst = half(float(dst) + float(src)) */
        memcpy(c, a, n * 2);
        ASSERT_OK(o->half_add(d, ht, c, b, n));
        for (size_t i = 0; i < n; i++)
            ASSERT_EQ(c[i], ref_from(ht, ref_to(ht, a[i]) + ref_to(ht, b[i])));
        /* fp32 accumulation: widen, widen_add, half_add_f32 */
        float *acc = malloc(n * sizeof(float));
        ASSERT(acc);
        ASSERT_OK(o->widen(d, ht, acc, a, n));
        for (size_t i = 0; i < n; i++)
            ASSERT(dsl_hv_bits(acc[i]) == dsl_hv_bits(ref_to(ht, a[i])));
        ASSERT_OK(o->widen_add(d, ht, acc, b, n));
        for (size_t i = 0; i < n; i++)
            ASSERT(dsl_hv_bits(acc[i]) == dsl_hv_bits(ref_to(ht, a[i]) + ref_to(ht, b[i])));
        memcpy(c, b, n * 2);
        ASSERT_OK(o->half_add_f32(d, ht, c, f, n));
        for (size_t i = 0; i < n; i++)
            ASSERT_EQ(c[i], ref_from(ht, ref_to(ht, b[i]) + f[i]));
        /* three micro steps in fp32 keep what 16-bit accumulation rounds away */
        size_t lost = 0;
        for (size_t i = 0; i < n; i++) {
            float s16 = ref_to(ht, ref_from(ht, ref_to(ht, ref_from(ht, ref_to(ht, a[i]) +
                                                                        ref_to(ht, b[i]))) +
                                                    ref_to(ht, a[i])));
            float s32 = (ref_to(ht, a[i]) + ref_to(ht, b[i])) + ref_to(ht, a[i]);
            lost += dsl_hv_bits(s16) != dsl_hv_bits(s32);
        }
        ASSERT_OK(o->widen_add(d, ht, acc, a, n));
        for (size_t i = 0; i < n; i++)
            ASSERT(dsl_hv_bits(acc[i]) == dsl_hv_bits((ref_to(ht, a[i]) + ref_to(ht, b[i])) +
                                        ref_to(ht, a[i])));
        ASSERT(lost > n / 4); /* the difference is real, not a rounding curiosity */
        free(acc);
        /* half_scale */
        memcpy(c, a, n * 2);
        ASSERT_OK(o->half_scale(d, ht, c, n, 0.3f));
        for (size_t i = 0; i < n; i++)
            ASSERT_EQ(c[i], ref_from(ht, ref_to(ht, a[i]) * 0.3f));
        /* absmax_bits and sumsq_fixed of the widened values */
        uint32_t mb = 0, got32;
        uint64_t sum = 0, got64;
        double k = 1048576.0;
        for (size_t i = 0; i < n; i++) {
            float x = ref_to(ht, a[i]);
            uint32_t u = dsl_hv_bits(x) & 0x7fffffffu;
            mb = u > mb ? u : mb;
            sum += (uint64_t)(int64_t)((double)x * (double)x * k + 0.5);
        }
        ASSERT_OK(o->half_absmax_bits(d, ht, a, n, &got32));
        ASSERT_EQ(got32, mb);
        ASSERT_OK(o->half_sumsq_fixed(d, ht, a, n, k, &got64));
        ASSERT_EQ(got64, sum);
        /* inf and NaN in the 16-bit buffer show as they are */
        c[0] = a[0];
        c[1] = ht == DSL_BFLOAT16 ? 0x7f80u : 0x7c00u;
        ASSERT_OK(o->half_absmax_bits(d, ht, c, 2, &got32));
        ASSERT_EQ(got32, 0x7f800000u);
        c[1] = ht == DSL_BFLOAT16 ? 0xffc1u : 0xfe01u;
        ASSERT_OK(o->half_absmax_bits(d, ht, c, 2, &got32));
        ASSERT(got32 > 0x7f800000u);
        /* the optimizer: fp32 master with (float(g) * ga) * gscale, then half(p) */
        check_half_optim(d, ht, f2, a, c, n);
    }
    dsl_cpupool_set_threads(1);
    free(f);
    free(f2);
    free(a);
    free(b);
    free(c);
}

TEST_MAIN()
