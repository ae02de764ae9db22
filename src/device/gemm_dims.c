/*
 * Checked conversion of GEMM dimensions from size_t to the int of the BLAS interfaces
 * (gemm_dims.h). The CUDA MLP calls it for every cuBLAS call and checks the model's
 * shapes once when it is built, so a model too large for 32-bit GEMMs is refused at
 * start with the offending size in the message.
 */
#include <limits.h>

#include "dslaunch/device/gemm_dims.h"
#include "dslaunch/common/banned.h"

int dsl_gemm_dim(size_t v, const char *what, int *out, char *err)
{
    if (v > (size_t)INT_MAX) {
        if (err)
            dsl_seterr(err, DSL_ECONFIG,
                       "GEMM dimension '%s' is %zu, more than the 32-bit limit %d", what, v,
                       INT_MAX);
        return DSL_ECONFIG;
    }
    *out = (int)v;
    return 0;
}
