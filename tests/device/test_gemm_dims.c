/*
 * The checked GEMM dimensions (gemm_dims.h): every size up to INT_MAX converts, a
 * larger one is an error that names it and leaves the output untouched.
 */
#include <limits.h>

#include "dslaunch/common/error.h"
#include "dslaunch/device/gemm_dims.h"
#include "test.h"
#include "dslaunch/common/banned.h"

TEST(gemm_dims_should_convert_up_to_int_max_and_name_a_larger_one)
{
    char err[DSL_ERR_LEN] = "";
    int v = -1;
    ASSERT_OK(dsl_gemm_dim(0, "m", &v, err));
    ASSERT_EQ(v, 0);
    ASSERT_OK(dsl_gemm_dim((size_t)INT_MAX, "m", &v, err));
    ASSERT_EQ(v, INT_MAX);
    v = 7;
    ASSERT_EQ(dsl_gemm_dim((size_t)INT_MAX + 1, "lda", &v, err), DSL_ECONFIG);
    ASSERT_EQ(v, 7); /* untouched: no truncated value escapes */
    ASSERT_CONTAINS(err, "'lda' is 2147483648");
    /* a value that truncation would have turned into a small positive int */
    ASSERT_EQ(dsl_gemm_dim(((size_t)1 << 32) + 5, "n", &v, NULL), DSL_ECONFIG);
    ASSERT_EQ(v, 7);
}

TEST_MAIN()
