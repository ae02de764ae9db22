/*
 * The gradient norm's exact cross-rank sums (common/fixedsum.h): split and join are
 * inverse, the joined int32 limb sums equal the wrapping uint64 sum of the values, and
 * the limb sums stay below 2^31 at the largest world size with every limb at its
 * maximum (the old 22-bit limbs overflowed past 512 ranks).
 */
#include <stdint.h>

#include "dslaunch/common/fixedsum.h"
#include "test.h"

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

TEST(fixedsum_split_and_join_should_be_inverse)
{
    uint64_t s = 88172645463325252ull;
    uint64_t edge[] = {0, 1, 2047, 2048, UINT64_MAX, (uint64_t)1 << 63, 0x0123456789abcdefull};
    int32_t limb[DSL_FIXEDSUM_LIMBS];
    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++) {
        dsl_fixedsum_split(edge[i], limb);
        ASSERT(dsl_fixedsum_join(limb) == edge[i]);
    }
    for (int i = 0; i < 10000; i++) {
        uint64_t v = next(&s);
        dsl_fixedsum_split(v, limb);
        for (int k = 0; k < DSL_FIXEDSUM_LIMBS; k++)
            ASSERT(limb[k] >= 0 && limb[k] < (1 << DSL_FIXEDSUM_BITS));
        ASSERT(dsl_fixedsum_join(limb) == v);
    }
}

/* the sum over W ranks, limb by limb in int32 as the comm adds them */
static uint64_t limb_sum(const uint64_t *v, size_t w)
{
    int32_t acc[DSL_FIXEDSUM_LIMBS] = {0}, limb[DSL_FIXEDSUM_LIMBS];
    for (size_t r = 0; r < w; r++) {
        dsl_fixedsum_split(v[r], limb);
        for (int k = 0; k < DSL_FIXEDSUM_LIMBS; k++) {
            ASSERT((int64_t)acc[k] + limb[k] <= INT32_MAX);
            acc[k] += limb[k];
        }
    }
    return dsl_fixedsum_join(acc);
}

TEST(fixedsum_limb_sums_should_give_the_wrapping_sum_of_the_values)
{
    uint64_t s = 0x9e3779b97f4a7c15ull, v[4096];
    size_t ws[] = {1, 2, 3, 513, 1000, 4096};
    for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++) {
        uint64_t want = 0;
        for (size_t r = 0; r < ws[i]; r++) {
            v[r] = next(&s) >> (r % 3 ? 0 : 20);
            want += v[r];
        }
        ASSERT(limb_sum(v, ws[i]) == want);
    }
}

TEST(fixedsum_should_not_overflow_at_the_largest_world_with_full_limbs)
{
    int32_t limb[DSL_FIXEDSUM_LIMBS];
    int64_t acc[DSL_FIXEDSUM_LIMBS] = {0};
    dsl_fixedsum_split(UINT64_MAX, limb);
    for (int k = 0; k < DSL_FIXEDSUM_LIMBS; k++) {
        acc[k] = (int64_t)limb[k] * DSL_FIXEDSUM_MAX_RANKS;
        ASSERT(acc[k] <= INT32_MAX);
    }
    /* 2^20 copies of UINT64_MAX wrap to -2^20 mod 2^64 */
    int32_t acc32[DSL_FIXEDSUM_LIMBS];
    for (int k = 0; k < DSL_FIXEDSUM_LIMBS; k++)
        acc32[k] = (int32_t)acc[k];
    ASSERT(dsl_fixedsum_join(acc32) == (uint64_t)0 - ((uint64_t)1 << 20));
    ASSERT(dsl_fixedsum_fits(1));
    ASSERT(dsl_fixedsum_fits(DSL_FIXEDSUM_MAX_RANKS));
    ASSERT(!dsl_fixedsum_fits(DSL_FIXEDSUM_MAX_RANKS + 1));
    ASSERT(!dsl_fixedsum_fits(0));
}

int main(int argc, char **argv) { return RUN_TESTS(argc, argv); }
