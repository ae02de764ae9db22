/*
 * No-ssh mode (docs/no-ssh.md): every node runs `dslaunch --node_rank K --nnodes N
 * --master_addr A ...` itself (a Kubernetes JobSet, Kubeflow's PyTorchJob, any
 * scheduler that starts one process per node). Node 0's launcher is the coordinator;
 * the others run a node agent that dials in to it on the sealed connect-back channel
 * (connectback.h, seal.h). Nobody hands out keys: the launcher's key pair and each
 * node rank's agent key pair are derived from the job's shared secret
 * (dsl_seal_key_derive, labels "launcher" and "agent K"), so the coordinator knows every
 * agent key it will accept before any node arrives, a hello naming any other key (a
 * different secret, a stranger) is refused at once, and an agent accepts only a
 * coordinator that proves the launcher key.
 *
 * This is the coordinator's side: one listener on the control port and a slot per node
 * rank 1..N-1. A dialling agent's socket lands in its rank's slot, the handshake runs
 * there, and the plaintext it sends first (the agent's hello) can be peeked at before
 * the job takes the channel over through dsl_transport_joined, which replays it. A slot
 * whose channel is closed takes the rank's next dial (an agent dials again for a
 * restart). All state is this process's (one job per launcher); single-threaded.
 */
#ifndef DSLAUNCH_REMOTE_JOIN_H
#define DSLAUNCH_REMOTE_JOIN_H

#include <stddef.h>

#include "dslaunch/remote/seal.h"
#include "dslaunch/remote/transport.h"

/** The label of node rank k's agent key ("agent K") into buf. */
void dsl_join_agent_label(int k, char *buf, size_t len);

/**
 * Listen on port (every address) for the agents of node ranks 1..nnodes-1, whose keys
 * are derived from secret. 0, or negative with err (the port is busy, ...).
 */
int dsl_join_open(int port, const void *secret, size_t len, int nnodes, char *err);
/** Close the listener and every channel not taken by a connection. */
void dsl_join_close(void);
/** The port listened on (tests open port 0), or -1. */
int dsl_join_port(void);
/** The listener's fd to poll for POLLIN, -1 when closed. */
int dsl_join_pollfd(void);
/** Accept, match, advance handshakes; never blocks. */
void dsl_join_service(void);
/**
 * Node rank k's channel: 1 when its handshake is done, 0 while it has not come (or is
 * in its handshake). A handshake that failed is counted (dsl_join_failed) and the slot
 * waits again.
 */
int dsl_join_ready(int k);
/**
 * What node rank k's agent has sent so far (read without blocking; at most 1 MiB is
 * kept), still to be read by the job. NULL when its channel failed or closed (the slot
 * waits again).
 */
const char *dsl_join_peek(int k, size_t *len);
/**
 * Send buf to node rank k's agent on its open channel (not taken by a connection) and
 * close the channel's sending side: the last word before the coordinator gives up,
 * flushed for at most 2 s. 0, or negative (-ENOTCONN when the channel is not open).
 */
int dsl_join_send(int k, const void *buf, size_t len);
/** Name node rank k as host for the job's connections (the plan's node name). */
void dsl_join_set_host(int k, const char *host);
/** The node rank named host, or -1 (node 0, this machine, has no slot). */
int dsl_join_rank_of(const char *host);
/**
 * Connections refused (a hello with a key of no node rank: a different secret) and
 * handshakes that failed; *why: the last one in words (owned here).
 */
int dsl_join_refused(const char **why);

/** Node rank k's channel, as a dsl_conn for the job (the host names the rank). */
extern const struct dsl_transport_ops dsl_transport_joined;

#endif
