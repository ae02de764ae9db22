/*
 * The rank environment of other launchers, turned into dslaunch's env contract
 * (envnames.h), so that dstrain and dsbench run as ranks of `srun` or `mpirun` without
 * dslaunch. docs/env.md, "Ranks started by srun or mpirun", says which variable comes
 * from where.
 */
#ifndef DSLAUNCH_COMMON_RANKENV_H
#define DSLAUNCH_COMMON_RANKENV_H

/** MASTER_PORT when neither the user nor dslaunch set one (torchrun's default). */
#define DSL_RANKENV_DEFAULT_PORT 29500
/** Under srun the port is DEFAULT_PORT + (8 * SLURM_JOB_ID + SLURM_STEP_ID) mod this. */
#define DSL_RANKENV_SLURM_PORTS 3200

/**
 * Where this process's rank environment comes from. When RANK is set (dslaunch,
 * torchrun, or by hand) nothing is changed: dslaunch's contract always wins. Otherwise,
 * in this order: Open MPI (OMPI_COMM_WORLD_RANK), an srun step (SLURM_PROCID with
 * SLURM_STEP_NUM_TASKS: a batch script's own SLURM_PROCID is no step and is ignored),
 * PMIx (PMIX_RANK, with the size from WORLD_SIZE). The contract's variables are then
 * set (setenv) from the launcher's: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 * LOCAL_SIZE, and under srun NODE_RANK/GROUP_RANK/CROSS_RANK and NNODES/CROSS_SIZE;
 * MASTER_ADDR, MASTER_PORT and DSLAUNCH_RUN_ID only where the user has not set them.
 * Call at the start of main(), before any thread exists and before anything reads the
 * contract.
 *
 * Returns 0 with *source set to "srun", "mpirun" or "pmix" (a static string) when it
 * adopted one, or NULL when there was nothing to do; or a negative code with err saying
 * which variable is wrong or missing (a rank of a multi-node mpirun without
 * MASTER_ADDR, a malformed SLURM_STEP_NODELIST, a WORLD_SIZE that disagrees).
 */
int dsl_rankenv_adopt(const char **source, char *err);

/**
 * The task count of node `node` (0-based) in a Slurm tasks-per-node list such as
 * SLURM_TASKS_PER_NODE or SLURM_STEP_TASKS_PER_NODE: "2(x3),1" is 2 2 2 1. Returns 0
 * with *tasks set, or -EINVAL with err naming the list (malformed, or fewer nodes).
 */
int dsl_rankenv_tasks_on_node(const char *list, int node, int *tasks, char *err);
/**
 * Every node's task count of such a list in one pass (dsl_rankenv_tasks_on_node walks
 * the whole list for one node): tasks[0..n) for a list of exactly n nodes. Returns 0,
 * or -EINVAL with err naming the list (malformed, or another node count).
 */
int dsl_rankenv_tasks_all(const char *list, int *tasks, int n, char *err);

/**
 * The number of nodes such a list describes ("2(x3),1": 4), in *nodes; 0 or -EINVAL.
 */
int dsl_rankenv_tasks_nodes(const char *list, int *nodes, char *err);

#endif
