/*
 * The rank environment of other launchers, turned into dslaunch's env contract
 * (envnames.h), so that dstrain and dsbench run as ranks of `srun` or `mpirun` without
 * dslaunch. docs/env.md, "Ranks started by srun or mpirun", says which variable comes
 * from where.
 */
#ifndef DSLAUNCH_COMMON_RANKENV_H
#define DSLAUNCH_COMMON_RANKENV_H

#include <stddef.h>

struct dsl_strvec;

/*
 * The rank contract as one struct (envnames.h has its names, docs/env.md their
 * meaning): the launcher fills one per node and writes it with dsl_rankenv_export(),
 * its agent adds the node's facts (devices, the store's socket, thread shares), and a
 * worker loads it once with dsl_rankenv_load() and passes it down. rankenv.c holds the
 * one table of its members (names, aliases, ranges, defaults); no other code reads
 * these names from the environment.
 */
struct dsl_rankenv {
    int rank, world_size;             /* RANK (0), WORLD_SIZE (1) */
    int local_rank, local_world_size; /* LOCAL_RANK (0), LOCAL_WORLD_SIZE = LOCAL_SIZE (1) */
    int node_rank, nnodes;            /* NODE_RANK = GROUP_RANK = CROSS_RANK (0),
                                         NNODES = CROSS_SIZE (1) */
    const char *master_addr;          /* MASTER_ADDR (NULL: unset) */
    int master_port;                  /* MASTER_PORT (0: unset or not a port) */
    const char *cuda_visible_devices; /* CUDA_VISIBLE_DEVICES (NULL: unset) */
    const char *run_id, *run_token;   /* DSLAUNCH_RUN_ID, DSLAUNCH_RUN_TOKEN (NULL: unset) */
    int restart_count;                /* DSLAUNCH_RESTART_COUNT, else
                                         TORCHELASTIC_RESTART_COUNT (0) */
    int max_restarts;                 /* TORCHELASTIC_MAX_RESTARTS (0) */
    int omp_threads;                  /* OMP_NUM_THREADS (0: unset or not a count) */
    int store_fd;                     /* DSLAUNCH_STORE_FD (0: none) */
    /* the texts as found, for the errors their users report (NULL: unset) */
    const char *master_port_text, *store_fd_text;
};

/**
 * Load the contract from the environment (after dsl_rankenv_adopt). An unset string is
 * NULL (an empty one is ""); an unset or empty number reads its default, and so does
 * one out of its range or not a number, except
 * WORLD_SIZE and RANK (1..2^20, 0..WORLD_SIZE-1): those are DSL_EUSAGE with err naming
 * the variable. The strings point into the environment: valid until it changes.
 */
int dsl_rankenv_load(struct dsl_rankenv *e, char *err);

/* What dsl_rankenv_export writes: the node's members, or a rank's own. */
enum { DSL_RANKENV_NODE = 1, DSL_RANKENV_RANK = 2 };

/**
 * Append the contract's "K=V" entries of `parts` to env, every alias beside its name:
 * for the node, MASTER_ADDR .. TORCHELASTIC_MAX_RESTARTS (a NULL string is left out);
 * for a rank, RANK and LOCAL_RANK. OMP_NUM_THREADS and DSLAUNCH_STORE_FD are node facts
 * the agent and launcher set themselves (dsl_rankenv_omp_share).
 */
void dsl_rankenv_export(const struct dsl_rankenv *e, unsigned parts, struct dsl_strvec *env);

/** OMP_NUM_THREADS when the user set none: cpus shared among local_ranks, at least 1. */
int dsl_rankenv_omp_share(long cpus, int local_ranks);

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
