/*
 * `dslaunch --dry-run --emit sbatch[=FILE]`: the plan dslaunch would run, as a batch
 * script that runs it inside an allocation of the same shape (docs/slurm.md, "A batch
 * script from a plan"): #SBATCH lines for the nodes, tasks and GPUs, Slurm's warning
 * signal and --requeue when the ranks save on it, the export set, and the user's
 * dslaunch options and program, every word single-quoted for sh.
 */
#ifndef DSLAUNCH_REMOTE_EMIT_H
#define DSLAUNCH_REMOTE_EMIT_H

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/strvec.h"

struct dsl_plan;

/* What the script asks Slurm for and runs; pure data, for dsl_emit_sbatch(). */
struct dsl_emit_req {
    int nodes;              /* #SBATCH --nodes */
    const int *slots;       /* the ranks of each node, nodes entries */
    int gpus;               /* the slots are GPUs: also --gpus-per-node (or --gpus) */
    int requeue;            /* the ranks save on SIGUSR1 (dstrain --save-on-signal):
                               --signal=B:USR1@signal_secs, --requeue, and a requeue when
                               dslaunch exits 138 */
    int signal_secs;
    int resumes;            /* the program's arguments hold --resume (dstrain's): a
                               requeued start takes up the checkpoint */
    const char *job_name;   /* --job-name (letters, digits, '.', '_', '-' only; NULL: none) */
    const char *hosts_from; /* for the header comment: where the plan's hosts came from */
    const char *cwd;        /* cd there first */
    const char *const *env;  /* "K=V" entries to export; NULL-terminated */
    const char *const *argv; /* the dslaunch command line to run; NULL-terminated */
};

/**
 * Append the batch script of rq to out. Returns 0, or DSL_EUSAGE with err set for what
 * a script cannot carry: an environment name that is no shell variable name, a node
 * count or slot count below 1, GPU slots that differ between nodes.
 */
int dsl_emit_sbatch(const struct dsl_emit_req *rq, struct dsl_dynbuf *out, char *err);

/**
 * The request for plan p, run from the dslaunch command line argc/argv (which parsed
 * into p->opts): the plan's nodes and slots, or, when its hosts are this machine (a
 * login node), nodes (1 when below 1) of gpus slots each (the plan's slot count when
 * below 1); slots are GPUs where --num_gpus was given or the allocation has
 * SLURM_GPUS_PER_NODE; requeue when the program's arguments hold --save-on-signal;
 * argv is dslaunch's own path, --launcher slurm, the options that still apply inside
 * the allocation and the program with its arguments as given. Fills *rq and the
 * storage it points into (slots, argv, name: release with dsl_emit_req_release).
 */
struct dsl_emit_store {
    int *slots;
    struct dsl_strvec argv;
    char name[64];
};
void dsl_emit_req_from_plan(const struct dsl_plan *p, int argc, char **argv, int nodes,
                            int gpus, struct dsl_emit_req *rq, struct dsl_emit_store *st);
void dsl_emit_req_release(struct dsl_emit_store *st);

#endif
