/*
 * No-ssh mode's two roles (docs/no-ssh.md; the settings are plan/nossh.h, the
 * coordinator's listener remote/join.h):
 *
 *   node 0   dsl_nossh_coordinate() waits for the other nodes to dial in, learns each
 *            one's name and slots from its hello, and adds them to the plan in node-rank
 *            order; the job then runs as with SSH, its connections to those nodes being
 *            the channels they dialled (dsl_transport_joined).
 *   node K   dsl_nossh_join() (agent/agent.h) dials node 0 and runs this node's agent
 *            on that channel.
 */
#ifndef DSLAUNCH_JOB_NOSSH_NODE_H
#define DSLAUNCH_JOB_NOSSH_NODE_H

#include <stddef.h>

#include "dslaunch/proto/exitcode.h"
#include "dslaunch/proto/proto.h"
#include "dslaunch/plan/plan.h"

/**
 * Node 0: listen on the control port and wait (--join_timeout) until node ranks
 * 1..N-1 have dialled in and said hello, then add every node to p (this one first).
 * 0, or the launcher's exit code with the reason printed: 203 when some never came
 * (named, with any connection refused for a wrong key), 202 for a node that
 * contradicts this one (dsl_nossh_hello_check: another --nnodes, program, arguments or
 * dslaunch version; the nodes already in are told why and exit 202 too), 128 + signal
 * when stopped. The listener stays
 * open for restarts until dsl_nossh_end().
 */
int dsl_nossh_coordinate(struct dsl_plan *p);
/** Close what dsl_nossh_coordinate() opened (nothing if it did not run). */
void dsl_nossh_end(void);

/**
 * Node 0: does node rank k's hello h fit this job (nnodes nodes, node 0 started with
 * argv[0..argc))? The same control protocol and dslaunch version, the same node count
 * and rank, and the same PROGRAM and arguments, or none. 0, or DSL_EPROTO with *why a
 * message naming the node rank and what differs (both command lines, made safe to show;
 * malloc'ed, the caller's: it does not fit DSL_ERR_LEN).
 */
int dsl_nossh_hello_check(const struct dsl_msg *h, int k, int nnodes, char *const *argv,
                          size_t argc, char **why);

#endif
