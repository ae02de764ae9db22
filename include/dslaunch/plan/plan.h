/*
 * The plan: everything the launcher decides before it starts anything. Built from the
 * parsed options by dsl_plan_build() in the order of the data flow (docs/design.md):
 *
 *   options -> hostfile (given, /job/hostfile, or localhost with its local slots)
 *     -> placement (--include/--exclude/--num_nodes/--num_gpus, CUDA_VISIBLE_DEVICES)
 *     -> export set (prefixes, env files, --export) -> program (resolved name)
 *     -> a first MASTER_ADDR and MASTER_PORT
 *
 * The job (job.h) executes a plan and may refine its rendezvous (the probe picks the
 * master address every node can route to). `--dry-run` prints it (dsl_plan_print_json).
 */
#ifndef DSLAUNCH_PLAN_PLAN_H
#define DSLAUNCH_PLAN_PLAN_H

#include <stdio.h>

#include "dslaunch/common/strvec.h"
#include "dslaunch/plan/hostfile.h"
#include "dslaunch/plan/nossh.h"
#include "dslaunch/plan/options.h"
#include "dslaunch/plan/placement.h"

struct dsl_plan {
    const struct dsl_launch_opts *opts; /* not owned */
    struct dsl_hostfile hf;
    struct dsl_placement pl;
    struct dsl_strvec exported;   /* the export set: "K=V" entries */
    struct dsl_strvec argv;       /* resolved program + args (python3 -u [-m] for Python) */
    int local_rank_at;            /* each rank gets "--local_rank=N" inserted before
                                     argv[local_rank_at] (== argv.nr: appended); 0: none */
    char *self_exe;               /* this dslaunch */
    char *cwd;                    /* working directory for ranks */
    char *script;                 /* the .py SCRIPT python3 runs (not with --module), as
                                     given; NULL otherwise. The preflight checks that every
                                     node can read it in cwd */
    char *master_addr;
    int master_port;
    char run_id[32], token[80];   /* hex; filled by dsl_plan_new_ids() */
    int all_local;                /* every node is this machine */
    int from_allocation;          /* the hosts are those of the Slurm allocation */
    char hosts_from[160];         /* where the hosts came from: "hostfile 'PATH'",
                                     "Slurm job 12: n[1-4], 7 slots", "this machine" */
    struct dsl_nossh nossh;       /* no-ssh mode's settings (nossh.on: the mode is on) */
    int nossh_done;               /* dsl_plan_nossh() ran */
    char *no_devices;             /* CUDA_VISIBLE_DEVICES that hid every device ("-1") with
                                     no hostfile: the ranks get it instead of device ids;
                                     owned, NULL otherwise */
};

/** Set up an empty plan for the options o, which must outlive it. */
void dsl_plan_init(struct dsl_plan *p, const struct dsl_launch_opts *o);
/** Free everything the plan owns (all of its fields but opts). */
void dsl_plan_release(struct dsl_plan *p);

/**
 * Turn p->opts into a plan: the hostfile (--hostfile, the Slurm allocation dslaunch runs
 * in, /job/hostfile, or localhost with its local slots and DeepSpeed's
 * CUDA_VISIBLE_DEVICES rule), the placement, the export
 * set (from environ), this dslaunch's path, the ranks' working directory, the resolved
 * program (p->argv) and a first MASTER_ADDR and MASTER_PORT. Used by the launch itself
 * and by `dslaunch doctor`. On error err says why and the plan is left for release.
 */
int dsl_plan_build(struct dsl_plan *p, char *err);

/**
 * Resolve no-ssh mode (nossh.h) and this node's slots into p->nossh; runs once (build
 * calls it too). The coordinator calls it first, waits for the other nodes and adds
 * them with dsl_plan_add_node() before dsl_plan_build().
 */
int dsl_plan_nossh(struct dsl_plan *p, char *err);
/**
 * No-ssh mode: append a node (in node-rank order, node 0 first) with its slot count to
 * the hosts dsl_plan_build() will place. A name already taken gets "#K" appended (K its
 * position); the name used is returned (owned by the plan).
 */
const char *dsl_plan_add_node(struct dsl_plan *p, const char *host, int slots);

/**
 * If MASTER_PORT is taken on this machine: an error when the user chose it
 * (master_port_given), else pick a free one (and say so unless quiet). All-local jobs
 * only; multi-node jobs ask every node in the probe.
 */
int dsl_plan_check_local_port(struct dsl_plan *p, int quiet, char *err);

/**
 * Make p the plan of another attempt of its job (a restart): the nodes i with drop[i]
 * set (drop has p->pl.nr entries; NULL drops none) are left out and the rest numbered
 * again (dsl_placement_drop()), and MASTER_ADDR and MASTER_PORT go back to their first
 * choice, so that the attempt's preflight (or dsl_plan_check_local_port()) chooses them
 * again. At least one node must be kept. Ids stay: call dsl_plan_new_ids() for fresh ones.
 */
void dsl_plan_restart(struct dsl_plan *p, const unsigned char *drop);

/**
 * A fresh run id (12 hex digits) and job token (32 hex digits), from getrandom(); fails
 * (err set) rather than make a guessable token.
 */
int dsl_plan_new_ids(struct dsl_plan *p, char *err);

/**
 * 1 when rank 0 takes over the listening socket its agent reserved on the master port
 * (DSLAUNCH_STORE_FD): the program is dstrain or dsbench and there is more than one
 * rank. Any other program binds MASTER_PORT itself, so the port is released before it
 * starts.
 */
int dsl_plan_rank0_takes_port(const struct dsl_plan *p);

/** The transport the plan uses: local, ssh, pdsh or openmpi. */
const char *dsl_plan_launcher_name(const struct dsl_plan *p);

/** The plan as the JSON object `--dry-run` prints. */
void dsl_plan_print_json(const struct dsl_plan *p, FILE *out);

/**
 * Resolve the program name a user gave: "train" means the dstrain beside this dslaunch,
 * and the bundled names dstrain/dsbench are found beside it when not in PATH. Any other
 * name is returned as given. self_dir is the directory of this dslaunch. malloc'd.
 */
char *dsl_plan_program_name(const char *prog, const char *self_dir);

#endif
