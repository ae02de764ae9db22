/*
 * The agent's entry points on a connection its dialler made (agent_dial.c), private to
 * src/agent.
 */
#ifndef DSLAUNCH_AGENT_IMPL_H
#define DSLAUNCH_AGENT_IMPL_H

#include <stddef.h>

struct dsl_seal;

/**
 * The agent on a connect-back socket fd whose handshake is done (seal OPEN, the
 * caller's): every byte in and out goes through the seal's frames. A frame that fails
 * authentication is treated as EOF from the launcher (the ranks are stopped).
 */
int dsl_agent_main_sealed(int fd, struct dsl_seal *seal);

/* No-ssh mode (remote/join.h): what the agent's hello says about its node. */
struct dsl_agent_join {
    int node_rank, nnodes, slots;
    char *const *argv;         /* the PROGRAM and arguments this node was started with */
    size_t argc;               /* (0: none), whose digest the hello carries */
    int signalled;             /* out: the signal to this process that stopped it, or 0 */
    int refused;               /* out: 1 when the coordinator refused the job */
};
#define DSL_AGENT_EXIT_LOST 200 /* the coordinator went away (DSL_EXIT_UNREACHABLE) */
/**
 * The same for the agent of a no-ssh node, which is its node's launcher: the hello
 * carries join's slots and node rank, and the return value is the node's exit code:
 * 0 when every rank exited 0 and nothing stopped the job; else the first failing rank's
 * code (or 128 + signal), 128 + signal for a signal to this process, 1 when the
 * coordinator stopped the job, 200 when the coordinator went away, 202 when it refused
 * the job before it started (a node differs; a line on stderr says which).
 */
int dsl_agent_main_joined(int fd, struct dsl_seal *seal, struct dsl_agent_join *join);

/**
 * An agent started by srun (the slurm transport): list is its step's
 * CUDA_VISIBLE_DEVICES, the GPUs Slurm gave this job on this node ("2,3"). The plan's
 * device ids for the node are then places in that list, and each rank gets the
 * list's items (docs/slurm.md, "GPUs"). NULL or "": the ids are used as they are.
 * Call before dsl_agent_main*; the copy lives as long as the process.
 */
void dsl_agent_set_node_devices(const char *list);

#endif
