/*
 * Checked GEMM dimensions: BLAS and cuBLAS take int sizes and leading dimensions, the
 * models count in size_t. A value past INT_MAX must be an error with a name, never a
 * silent truncation into a wrong (or negative) size.
 */
#ifndef DSL_GEMM_DIMS_H
#define DSL_GEMM_DIMS_H

#include <stddef.h>

#include "dslaunch/common/error.h"

/** *out = (int)v when v <= INT_MAX and returns 0; else returns DSL_ECONFIG with err
 *  "GEMM dimension 'what' is V, more than the 32-bit limit 2147483647" (err may be
 *  NULL; *out is then untouched). */
int dsl_gemm_dim(size_t v, const char *what, int *out, char *err);

#endif
