/*
 * A node's devices as Slurm gave them to the agent's job step: under the slurm
 * transport, the plan's device ids of a node (0..N-1 for an allocation's N GPUs) are
 * places in the step's CUDA_VISIBLE_DEVICES, which names the GPUs Slurm allocated to
 * this job on this node ("2,3" when another job holds 0 and 1; UUIDs on some sites).
 * A rank is given those names, never the plan's bare numbers, which would be another
 * job's GPUs.
 */
#ifndef DSLAUNCH_AGENT_DEVMAP_H
#define DSLAUNCH_AGENT_DEVMAP_H

/**
 * Map ids (the plan's CUDA_VISIBLE_DEVICES for a node: "0,1", "" for none, or a list
 * whose first item is negative, "-1", which hides every device and is kept) through
 * node (the step's list) into *out (malloc'd): the node's items at those places.
 * Returns 0, or DSL_EPLACEMENT with err when an id is not a place in node, or ids is
 * not a list of numbers.
 */
int dsl_devmap_apply(const char *ids, const char *node, char **out, char *err);

#endif
