/*
 * A Slurm allocation as the hosts of a job: inside `salloc`, `sbatch` or `srun --pty`,
 * dslaunch with no --hostfile takes the allocation's nodes and task counts
 * (docs/hostfile.md, "Inside a Slurm allocation").
 */
#ifndef DSLAUNCH_PLAN_ALLOCATION_H
#define DSLAUNCH_PLAN_ALLOCATION_H

#include <stddef.h>

struct dsl_hostfile;

/**
 * When SLURM_JOB_ID and SLURM_JOB_NODELIST are set, append the allocation's nodes to hf
 * (freshly initialised), in SLURM_JOB_NODELIST order, each with its entry of
 * SLURM_TASKS_PER_NODE as slots ("2(x3),1": 2 2 2 1), or with N slots on every node
 * for N GPUs a node: SLURM_GPUS_PER_NODE "[TYPE:]N" (--gpus-per-node), SLURM_GPUS on
 * one node (--gpus), SLURM_GPUS_ON_NODE (--gres=gpu:N), else num_gpus when above 0
 * (--num_gpus; -1: not given), and write a one-line description
 * ("Slurm job 12: n[1-4], 7 slots") into desc. Returns 1 when it did, 0 outside an
 * allocation (hf untouched), or DSL_EHOSTFILE with err naming the variable: a list that
 * does not parse, a node name a hostfile would refuse, a task list of another length,
 * a node with 0 tasks or more than DSL_HOSTFILE_MAX_SLOTS; hf is then left empty.
 */
int dsl_allocation_load(struct dsl_hostfile *hf, int num_gpus, char *desc, size_t desclen,
                        char *err);

#endif
