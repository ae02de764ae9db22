/*
 * The tcp backend's same-host path (comm_cma.c): collectives that read and write the
 * peers' buffers directly when every rank runs on this host. It sits on the engine
 * (comm_tcp.h) and the shared buffers (comm_shmbuf.h); comm_tcp_backend.c calls it.
 */
#ifndef DSL_COMM_CMA_H
#define DSL_COMM_CMA_H

#include "comm_impl.h"
#include "comm_tcp.h"

/* At open: can every rank read every other? Sets t->cma (all ranks alike), and sets up
 * the rounds' shared segment and the shared buffers when they can be. */
int dsl_cma_probe(struct dsl_comm *c, struct tcp *t);
/* One collective through the peers' memory (t->cma must be on). */
int dsl_cma_run(struct dsl_comm *c, struct tcp *t, const struct dsl_comm_call *k);
/* Small collectives (at most DSL_CMA_SLOT bytes per rank) in the shared segment. */
#define DSL_CMA_SLOT ((size_t)64 << 10)
int dsl_cma_small_run(struct dsl_comm *c, struct tcp *t, const struct dsl_comm_call *k);
/* Tell the peers waiting in a shared-memory round that this rank has failed. */
void dsl_cma_mark_failed(struct dsl_comm *c, struct tcp *t);

#endif
