/*
 * The helpers every backend shares (comm_reduce.c): element-wise reductions, the
 * pairwise tree over ranks, shard arithmetic (comm.h) and the names of collectives.
 * They call nothing else in src/comm, so any backend may use them without a loop back.
 */
#ifndef DSL_COMM_REDUCE_H
#define DSL_COMM_REDUCE_H

#include <stddef.h>

#include "dslaunch/comm/comm.h"
#include "comm_impl.h"

const char *dsl_comm_kind_name(enum dsl_comm_kind k);
/* Element-wise dst[i] = a[i] op b[i] (dst may alias a or b); fp16/bf16 sums are widened
 * to float and rounded back to nearest even once per element. */
void dsl_comm_combine(void *dst, const void *a, const void *b, size_t n, enum dsl_dtype t,
                      enum dsl_redop op);
/*
 * dst = the balanced pairwise tree over src[0..nsrc-1] (comm.h), element-wise; tmp holds
 * at least (nsrc / 2 + 1) * DSL_TREE_CHUNK elements. dst may alias one of the sources.
 */
#define DSL_TREE_CHUNK 2048
void dsl_comm_tree_reduce(void *dst, const void *const *src, int nsrc, size_t n,
                          enum dsl_dtype t, enum dsl_redop op, void *tmp);

#endif
