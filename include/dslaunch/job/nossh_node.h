/*
 * No-ssh mode's two roles (docs/no-ssh.md; the settings are plan/nossh.h, the
 * coordinator's listener remote/join.h):
 *
 *   node 0   dsl_nossh_coordinate() waits for the other nodes to dial in, learns each
 *            one's name and slots from its hello, and adds them to the plan in node-rank
 *            order; the job then runs as with SSH, its connections to those nodes being
 *            the channels they dialled (dsl_transport_joined).
 *   node K   dsl_nossh_join() dials node 0 and runs this node's agent on that channel;
 *            after a failed attempt it dials again while the coordinator listens and
 *            --max-restarts allows, so a restarted job gets its node back.
 */
#ifndef DSLAUNCH_JOB_NOSSH_NODE_H
#define DSLAUNCH_JOB_NOSSH_NODE_H

#include "dslaunch/plan/plan.h"

/**
 * Node 0: listen on the control port and wait (--join_timeout) until node ranks
 * 1..N-1 have dialled in and said hello, then add every node to p (this one first).
 * 0, or the launcher's exit code with the reason printed: 203 when some never came
 * (named, with any connection refused for a wrong key), 202 for a node that
 * contradicts this one (another --nnodes), 128 + signal when stopped. The listener stays
 * open for restarts until dsl_nossh_end().
 */
int dsl_nossh_coordinate(struct dsl_plan *p);
/** Close what dsl_nossh_coordinate() opened (nothing if it did not run). */
void dsl_nossh_end(void);
/**
 * Node K > 0: dial the coordinator (retrying until --join_timeout), prove the job
 * secret, run the node agent; returns this node's exit code (dsl_agent_main_joined;
 * 200 when the coordinator was never reached, 201 when it refused this node).
 */
int dsl_nossh_join(struct dsl_plan *p);

#endif
