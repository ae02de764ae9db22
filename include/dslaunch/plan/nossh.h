/*
 * No-ssh mode's settings (docs/no-ssh.md): every node runs dslaunch itself, node 0's as
 * the coordinator, the others' as agents that dial in to it. Each value comes from an
 * option, else from the environment a scheduler sets (Kubeflow's PET_NNODES,
 * PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT; an indexed Job's
 * JOB_COMPLETION_INDEX), else a default, and `from_*` says which, for --dry-run.
 *
 * The mode is on with --no_ssh (DeepSpeed's), --node_rank or --nnodes (torchrun's), or
 * with PET_NNODES in the environment when no --hostfile or --launcher was given.
 */
#ifndef DSLAUNCH_PLAN_NOSSH_H
#define DSLAUNCH_PLAN_NOSSH_H

#include <stddef.h>

#include "dslaunch/plan/options.h"

#define DSL_ENV_JOB_SECRET "DSLAUNCH_JOB_SECRET"
#define DSL_NOSSH_SECRET_MIN 16 /* bytes */

struct dsl_nossh {
    int on;
    int nnodes, node_rank;
    char *master_addr;        /* owned; NULL: node 0 chooses (only node 0 may lack it) */
    int master_port, control_port;
    int slots;                /* this node's ranks (set by dsl_nossh_resolve_slots) */
    unsigned char *secret;    /* owned, wiped on release; NULL when nnodes == 1 */
    size_t secret_len;
    /* where each value came from: "--nnodes", "PET_NNODES", "default", ... */
    char from_nnodes[32], from_node_rank[32], from_master_addr[32], from_master_port[32],
        from_control_port[32], from_slots[64], from_secret[300];
};

void dsl_nossh_init(struct dsl_nossh *ns);
void dsl_nossh_release(struct dsl_nossh *ns);
/**
 * Resolve the mode and its values from o and env (a NULL-terminated "K=V" array, the
 * process's environ in use): options first, then the variables above, then defaults.
 * The secret is read here (--job_secret_file FILE, else DSLAUNCH_JOB_SECRET). ns->on = 0
 * and 0 when the mode is off. Negative with err naming the option or variable when a
 * value is missing, malformed or contradicts another.
 */
int dsl_nossh_resolve(struct dsl_nossh *ns, const struct dsl_launch_opts *o, char *const *env,
                      char *err);
/**
 * This node's slot count: --nproc_per_node, else --num_gpus, else the devices found
 * (dsl_local_slots). Into ns->slots and from_slots.
 */
int dsl_nossh_resolve_slots(struct dsl_nossh *ns, const struct dsl_launch_opts *o, char *err);

#endif
