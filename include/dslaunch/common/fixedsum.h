/*
 * Exact sums of uint64 values over ranks with an int32 reduction: the fixed-point
 * gradient norm (src/train/trainer.c) adds each rank's 64-bit sum of squares over the
 * comm, whose integer type is int32. Each value is cut into DSL_FIXEDSUM_LIMBS limbs of
 * DSL_FIXEDSUM_BITS bits; the ranks' limbs are summed as int32 and joined again with
 * wrapping uint64 arithmetic, which gives the wrapping sum of the values exactly.
 *
 * Why it cannot overflow: a limb is at most 2^11 - 1, so the sum of W limbs is at most
 * W (2^11 - 1), below 2^31 for every W <= DSL_FIXEDSUM_MAX_RANKS = 2^20, the largest
 * world size the comm accepts (WORLD_SIZE is checked against the same 2^20). The old
 * split (22-bit limbs) overflowed past 512 ranks. dsl_fixedsum_fits() is the check.
 */
#ifndef DSLAUNCH_FIXEDSUM_H
#define DSLAUNCH_FIXEDSUM_H

#include <stdint.h>

#define DSL_FIXEDSUM_BITS 11
#define DSL_FIXEDSUM_LIMBS 6 /* 6 x 11 = 66 >= 64 bits */
#define DSL_FIXEDSUM_MAX_RANKS (1 << 20)

/** 1 when summing the limbs of world values in int32 cannot overflow */
static inline int dsl_fixedsum_fits(int world)
{
    return world >= 1 && world <= DSL_FIXEDSUM_MAX_RANKS &&
           (int64_t)world * ((1 << DSL_FIXEDSUM_BITS) - 1) <= INT32_MAX;
}

static inline void dsl_fixedsum_split(uint64_t v, int32_t limb[DSL_FIXEDSUM_LIMBS])
{
    for (int i = 0; i < DSL_FIXEDSUM_LIMBS; i++)
        limb[i] = (int32_t)((v >> (i * DSL_FIXEDSUM_BITS)) &
                            (((uint64_t)1 << DSL_FIXEDSUM_BITS) - 1));
}

/** the wrapping uint64 sum of the values whose limbs were summed into limb[] */
static inline uint64_t dsl_fixedsum_join(const int32_t limb[DSL_FIXEDSUM_LIMBS])
{
    uint64_t v = 0;
    for (int i = 0; i < DSL_FIXEDSUM_LIMBS; i++)
        v += (uint64_t)(uint32_t)limb[i] << (i * DSL_FIXEDSUM_BITS);
    return v;
}

#endif
