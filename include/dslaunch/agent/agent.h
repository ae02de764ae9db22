/*
 * The node agent: `dslaunch --agent`. One runs on every host of a job. It speaks the
 * control protocol (proto/proto.h) on a byte stream with the launcher (fds in_fd/out_fd:
 * stdin/stdout, or a connected socket), starts the node's ranks when told, streams
 * their output line by line, reports their exits, and stops them on request.
 *
 * The agent never outlives its launcher's interest: EOF on in_fd, a silent launcher
 * (no message for the keepalive period) or a SIGTERM/SIGHUP/SIGINT to the agent all
 * mean "tear down": every rank's process group gets SIGTERM, then SIGKILL after the
 * grace period, and the agent exits. Nothing is left behind.
 *
 * The job does not link the agent: launcher/dslaunch.c hands dsl_agent_main to it
 * (dsl_job_set_agent) for the nodes on this machine.
 */
#ifndef DSLAUNCH_AGENT_H
#define DSLAUNCH_AGENT_H

#include "dslaunch/plan/options.h"
#include "dslaunch/plan/plan.h"

/** Run the agent until the job on this node is over. Returns the process exit code. */
int dsl_agent_main(int in_fd, int out_fd);

/**
 * `dslaunch --agent [--connect H:P --launcher-key L [--connect-index I]]`: the agent on
 * its control channel, stdin/stdout or a sealed connection back to the launcher
 * (remote/connectback.h), dialled here; under srun (--slurm-nodes) the step's GPUs and
 * node index are taken first. Returns the process exit code.
 */
int dsl_agent_run(const struct dsl_launch_opts *opts);

/**
 * No-ssh mode, node K > 0 (job/nossh_node.h has node 0): dial the coordinator
 * (retrying until --join_timeout), prove the job secret, run the node agent; after a
 * failed attempt dial again while the coordinator listens and --max-restarts allows,
 * so a restarted job gets its node back. Returns this node's exit code (0 when every
 * rank exited 0; the first failing rank's code or 128 + signal; 200 when the
 * coordinator was never reached or went away, 201 when it refused this node's key,
 * 202 when it refused the job because a node differs).
 */
int dsl_nossh_join(struct dsl_plan *p);

#endif
