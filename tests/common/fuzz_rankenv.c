/*
 * libFuzzer target: the environment srun, mpirun or a PMIx launcher gives a rank, as
 * dstrain and dsbench adopt it (dsl_rankenv_adopt) and then load it (dsl_rankenv_load).
 * The input's lines are "NAME=VALUE"
 * for the launcher variables below (others are ignored); the contract's variables the
 * adoption sets are cleared before each run. An adoption either fails with a message
 * and sets nothing, or sets a rank inside its world, a local rank inside its node and a
 * node rank below the node count where it sets those, a rendezvous address and port.
 * glibc keeps every string setenv() ever made (a pointer to an old one may still be
 * in use), so the process grows by a few kilobytes per run: CI's 20 s stay far below
 * the rss limit, a run of many minutes may not.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/rankenv.h"
#include "dslaunch/common/xalloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const inputs[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_RANK", "PMIX_NAMESPACE", "SLURM_PROCID",
    "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_STEP_NUM_NODES", "SLURM_NNODES",
    "SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
    "SLURM_NODELIST", "SLURM_DISTRIBUTION", "SLURM_JOB_ID", "SLURM_STEP_ID",
    DSL_ENV_WORLD_SIZE, DSL_ENV_MASTER_ADDR, DSL_ENV_MASTER_PORT, DSL_ENV_RUN_ID,
};
static const char *const outputs[] = {
    DSL_ENV_RANK, DSL_ENV_WORLD_SIZE, DSL_ENV_LOCAL_RANK, DSL_ENV_LOCAL_WORLD_SIZE,
    DSL_ENV_LOCAL_SIZE, DSL_ENV_NODE_RANK, DSL_ENV_GROUP_RANK, DSL_ENV_CROSS_RANK,
    DSL_ENV_NNODES, DSL_ENV_CROSS_SIZE, DSL_ENV_MASTER_ADDR, DSL_ENV_MASTER_PORT,
    DSL_ENV_RUN_ID,
};
#define N(a) (sizeof(a) / sizeof((a)[0]))

static long num(const char *name)
{
    long v;
    const char *s = getenv(name);
    if (!s || dsl_parse_long(s, 0, 1L << 30, &v) < 0)
        abort(); /* what the adoption set is a number */
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < N(outputs); i++)
        unsetenv(outputs[i]);
    for (size_t i = 0; i < N(inputs); i++)
        unsetenv(inputs[i]);
    char *s = dsl_xstrndup((const char *)data, size);
    for (char *l = s, *next; l; l = next) {
        next = strchr(l, '\n');
        if (next)
            *next++ = '\0';
        char *eq = strchr(l, '=');
        if (!eq)
            continue;
        *eq = '\0';
        for (size_t i = 0; i < N(inputs); i++)
            if (!strcmp(l, inputs[i]))
                setenv(l, eq + 1, 1);
    }
    free(s);
    int user_port = getenv(DSL_ENV_MASTER_PORT) != NULL;
    const char *source = (const char *)1;
    char err[DSL_ERR_LEN] = "";
    int r = dsl_rankenv_adopt(&source, err);
    if (r < 0) {
        if (source || !err[0] || getenv(DSL_ENV_RANK))
            abort();
    } else if (source) {
        long rank = num(DSL_ENV_RANK), world = num(DSL_ENV_WORLD_SIZE);
        if (world < 1 || rank >= world || !getenv(DSL_ENV_MASTER_ADDR) ||
            !getenv(DSL_ENV_MASTER_PORT))
            abort();
        if (!user_port && num(DSL_ENV_MASTER_PORT) > 65535)
            abort(); /* the one it chose (a user's is the user's) */
        if (getenv(DSL_ENV_LOCAL_RANK) && getenv(DSL_ENV_LOCAL_WORLD_SIZE) &&
            num(DSL_ENV_LOCAL_RANK) >= num(DSL_ENV_LOCAL_WORLD_SIZE))
            abort();
        if (getenv(DSL_ENV_NNODES) && getenv(DSL_ENV_NODE_RANK) &&
            num(DSL_ENV_NODE_RANK) >= num(DSL_ENV_NNODES))
            abort();
        /* what it set, a worker loads: the same rank and world, every alias agreeing */
        struct dsl_rankenv e;
        if (dsl_rankenv_load(&e, err) < 0 || e.rank != rank || e.world_size != world ||
            (getenv(DSL_ENV_LOCAL_SIZE) && e.local_world_size != num(DSL_ENV_LOCAL_SIZE)) ||
            (getenv(DSL_ENV_CROSS_RANK) && e.node_rank != num(DSL_ENV_CROSS_RANK)))
            abort();
    } else if (getenv(DSL_ENV_RANK)) {
        abort();
    }
    return 0;
}
