/*
 * Shared by the transport tests that run against the namespace cluster
 * (test_ssh_transport, test_pdsh_transport): the cluster's directory and size, and
 * driving a set of connections from one poll loop as the launcher does.
 */
#ifndef DSL_TEST_CLUSTER_CONN_H
#define DSL_TEST_CLUSTER_CONN_H

#include <stddef.h>

#include "dslaunch/remote/transport.h"

extern const char *cluster_dir; /* $DSL_CLUSTER_DIR */
extern int cluster_nodes;       /* NODES of its cluster.env */

/**
 * Read $DSL_CLUSTER_DIR and its cluster.env; 0, or 2 with a message on stderr when
 * there is no cluster or it has fewer than min_nodes nodes.
 */
int cluster_init(int min_nodes);
/** "<cluster_dir>/<name>", owned by the caller. */
char *cluster_path(const char *name);

/** open() a connection of ops to host (c is overwritten; host copied). */
void conn_open(struct dsl_conn *c, const struct dsl_transport_ops *ops, const char *host,
               const struct dsl_transport_opts *o, char *const *argv);
/** close() it and free its host. */
void conn_free(struct dsl_conn *c);
/** One poll loop over all n connections until each is OPEN or FAILED (60 s bound). */
void conns_drive(struct dsl_conn *c, int n);
/**
 * Every connection of c[0..n) is OPEN to a remote echo (cat): write payload bytes of a
 * per-connection pattern in chunks to each, interleaved in one poll loop, close the
 * write side, and check that exactly the same bytes come back before EOF.
 */
void conns_round_trip(struct dsl_conn *c, int n, size_t payload, size_t chunk);

#endif
