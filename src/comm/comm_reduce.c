/*
 * The helpers every backend shares: element-wise reductions for every data type, the
 * pairwise tree over ranks, shard arithmetic and the names of collectives.
 *
 * Theory of operation. comm_tcp.c (as bytes arrive over sockets), comm_cma.c (chunks
 * read from same-host peers) and comm_nccl.c (shard bounds, messages) all need the same
 * arithmetic, and it must be one copy: the deterministic mode promises the same bits
 * whichever path a call takes, so every path sums through dsl_comm_tree_reduce and
 * dsl_comm_combine here. This file calls nothing else in src/comm (only the 16-bit
 * conversions of halfvec.h and xalloc), so the backends sit on it and comm.c sits on
 * them without any call going back up. The loops are compiled at -O3 with the rest of
 * dslcomm (src/comm/CMakeLists.txt says why).
 */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/common/halfvec.h"
#include "dslaunch/common/xalloc.h"
#include "comm_reduce.h"
#include "dslaunch/common/banned.h"

size_t dsl_shard_size(size_t n, int world)
{
    size_t w = world > 0 ? (size_t)world : 1;
    return (n + w - 1) / w;
}

void dsl_shard_of(size_t n, int rank, int world, size_t *offset, size_t *len)
{
    size_t s = dsl_shard_size(n, world);
    size_t lo = s * (size_t)rank, hi = lo + s;
    if (lo > n)
        lo = n;
    if (hi > n)
        hi = n;
    *offset = lo;
    *len = hi - lo;
}

const char *dsl_comm_kind_name(enum dsl_comm_kind k)
{
    switch (k) {
    case DSL_COLL_ALLREDUCE: return "allreduce";
    case DSL_COLL_REDUCE_SCATTER: return "reduce_scatter";
    case DSL_COLL_ALLGATHER: return "allgather";
    case DSL_COLL_BROADCAST: return "broadcast";
    case DSL_COLL_BARRIER: return "barrier";
    }
    return "collective";
}

/*
 * fp16/bf16: each pair widened to float, added, and the sum rounded back to 16 bits to
 * nearest even, once per pairwise addition (what NCCL does for 16-bit sums); a maximum
 * is one of the two inputs, chosen as the fp32 loop would, so nothing is rounded. One
 * plain loop per type and operation, like the fp32 ones, so that -O3 vectorizes them
 * with halfvec.h's branch-free conversions (same bits as halfprec.h's reference).
 */
/*
 * The loops are also built for AVX2 (function multiversioning, picked once at load by
 * the CPU): no result bit changes, each element is still one addition or comparison
 * (the avx2 target enables no FMA, and there is no product to contract anyway).
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DSL_REDUCE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DSL_REDUCE_CLONES
#endif

DSL_REDUCE_CLONES
static void combine_half(uint16_t *d, const uint16_t *x, const uint16_t *y, size_t n,
                         enum dsl_dtype t, enum dsl_redop op)
{
    if (t == DSL_BFLOAT16 && op == DSL_SUM) {
        for (size_t i = 0; i < n; i++)
            d[i] = dsl_hv_bf16_from_float(dsl_hv_bf16_to_float(x[i]) +
                                          dsl_hv_bf16_to_float(y[i]));
    } else if (op == DSL_SUM) {
        for (size_t i = 0; i < n; i++)
            d[i] = dsl_hv_fp16_from_float(dsl_hv_fp16_to_float(x[i]) +
                                          dsl_hv_fp16_to_float(y[i]));
    } else if (t == DSL_BFLOAT16) {
        for (size_t i = 0; i < n; i++) {
            float u = dsl_hv_bf16_to_float(x[i]), v = dsl_hv_bf16_to_float(y[i]);
            d[i] = u > v || v != v ? x[i] : y[i];
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float u = dsl_hv_fp16_to_float(x[i]), v = dsl_hv_fp16_to_float(y[i]);
            d[i] = u > v || v != v ? x[i] : y[i];
        }
    }
}

DSL_REDUCE_CLONES
void dsl_comm_combine(void *dst, const void *a, const void *b, size_t n, enum dsl_dtype t,
                      enum dsl_redop op)
{
    if (t == DSL_FLOAT16 || t == DSL_BFLOAT16) {
        combine_half(dst, a, b, n, t, op);
        return;
    }
    if (t == DSL_INT32) {
        int32_t *d = dst;
        const int32_t *x = a, *y = b;
        if (op == DSL_SUM) {
            for (size_t i = 0; i < n; i++)
                d[i] = (int32_t)((uint32_t)x[i] + (uint32_t)y[i]);
        } else {
            for (size_t i = 0; i < n; i++)
                d[i] = x[i] > y[i] ? x[i] : y[i];
        }
        return;
    }
    float *d = dst;
    const float *x = a, *y = b;
    if (op == DSL_SUM) {
        for (size_t i = 0; i < n; i++)
            d[i] = x[i] + y[i];
    } else {
        for (size_t i = 0; i < n; i++)
            d[i] = x[i] > y[i] || y[i] != y[i] ? x[i] : y[i];
    }
}

void dsl_comm_tree_reduce(void *dst, const void *const *src, int nsrc, size_t n,
                          enum dsl_dtype t, enum dsl_redop op, void *tmp)
{
    size_t esz = dsl_dtype_size(t);
    if (nsrc == 1) {
        if (dst != src[0])
            memmove(dst, src[0], n * esz);
        return;
    }
    /* level pointers live in a small fixed array; big worlds fall back to tmp's tail */
    const char *lvl_small[64];
    const char **lvl = lvl_small;
    if (nsrc > 64)
        lvl = dsl_xcalloc((size_t)nsrc, sizeof(*lvl));
    for (size_t i0 = 0; i0 < n; i0 += DSL_TREE_CHUNK) {
        size_t m = n - i0 < DSL_TREE_CHUNK ? n - i0 : DSL_TREE_CHUNK;
        int cnt = nsrc;
        for (int j = 0; j < cnt; j++)
            lvl[j] = (const char *)src[j] + i0 * esz;
        while (cnt > 1) {
            int pairs = cnt / 2, next = (cnt + 1) / 2;
            for (int k = 0; k < pairs; k++) {
                char *out = next == 1 ? (char *)dst + i0 * esz
                                      : (char *)tmp + (size_t)k * DSL_TREE_CHUNK * esz;
                dsl_comm_combine(out, lvl[2 * k], lvl[2 * k + 1], m, t, op);
                lvl[k] = out;
            }
            if (cnt & 1)
                lvl[pairs] = lvl[cnt - 1]; /* odd last element carried up unchanged */
            cnt = next;
        }
    }
    if (lvl != lvl_small)
        free(lvl);
}
