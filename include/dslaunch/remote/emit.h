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
    const char *gpu_note;   /* why the script asks for GPUs or for tasks only, where the
                               count alone does not say: comment lines as signal_note
                               (NULL: none) */
    int gpus_unknown;       /* GPUs asked for, but whether the cluster has any could not
                               be told (no sinfo, or it failed) */
    int requeue;            /* the ranks save on SIGUSR1 (dstrain --save-on-signal):
                               --signal=B:USR1@signal_secs, --requeue, and a requeue when
                               dslaunch exits 138 */
    int signal_secs;
    int resumes;            /* the program resumes (dstrain's --resume, or
                               dstrain.resume in its --config): a requeued start takes up
                               the checkpoint */
    const char *signal_note; /* why the script does or does not ask for the warning
                               signal, or what could not be known: comment lines, each
                               ending in '\n' and holding no other control character
                               (NULL: none) */
    int signal_unknown;      /* no warning signal asked for, but whether the ranks save on
                               it could not be known (a program other than dstrain, a
                               --config not readable here) */
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
 * below 1); slots are GPUs where the allocation has them (SLURM_GPUS_PER_NODE,
 * SLURM_GPUS_ON_NODE), or --num_gpus was given (not --nproc_per_node or --num_processes,
 * which count processes) and neither CUDA_VISIBLE_DEVICES=-1 nor Slurm (sinfo: a
 * cluster whose nodes have no GPU) says there are none, gpu_note saying which; requeue when the ranks save on SIGUSR1: the program's arguments
 * hold --save-on-signal, or the program is dstrain and its --config files, read now
 * (relative to the plan's working directory, a bare name also among the configs shipped
 * beside dstrain, the last file that sets the key winning), set dstrain.save_on_signal
 * (signal_note says which, or what could not be read; a program other than dstrain
 * cannot be asked, and the note says so);
 * argv is dslaunch's own path, --launcher slurm, the options that still apply inside
 * the allocation and the program with its arguments as given. Fills *rq and the
 * storage it points into (slots, argv, name: release with dsl_emit_req_release).
 */
struct dsl_emit_store {
    int *slots;
    struct dsl_strvec argv;
    char name[64];
    char *note;
    char *gpu_note;
};
void dsl_emit_req_from_plan(const struct dsl_plan *p, int argc, char **argv, int nodes,
                            int gpus, struct dsl_emit_req *rq, struct dsl_emit_store *st);
void dsl_emit_req_release(struct dsl_emit_store *st);

/* --dry-run --emit: the plan as the batch script or JobSet opts->emit asks for, on
 * stdout or into opts->emit_file (created anew; removed again on any failure), with the
 * notes on what it could not know; argc/argv: the launch's command line, nodes/gpus as
 * for dsl_emit_req_from_plan. Returns the exit code (0, or DSL_EXIT_USAGE after saying
 * why). */
int dsl_emit_plan(const struct dsl_plan *plan, int argc, char **argv, int nodes, int gpus);

/*
 * `--emit jobset`: a Kubernetes JobSet (jobset.x-k8s.io/v1alpha2) that runs the job in
 * no-ssh mode (docs/no-ssh.md), one indexed replicated job "node" of nodes pods.
 */
#define DSL_JOBSET_NAME_MAX 40 /* <name>-node-0-0 stays a DNS label (63) */
struct dsl_jobset_req {
    const char *name;        /* the JobSet, its subdomain, "<name>-secret"
                                (dsl_jobset_name: [a-z0-9-], a letter first) */
    const char *image;       /* every pod's container image (required) */
    int nodes;               /* pods = node count */
    int slots;               /* --nproc_per_node for every pod; 0: each pod counts its own */
    int gpus;                /* the slots are GPUs: ask for nvidia.com/gpu: slots
                                (dsl_jobset_asks_gpus) */
    const char *gpu_note;    /* why no GPU is asked for although a count was given, or
                                NULL; a comment line of the manifest's header */
    int master_port;         /* the rendezvous port; node 0's pod is the master */
    int control_port;        /* 0: master_port + 1 */
    const char *const *env;  /* "K=V" entries for the pods' env; NULL-terminated; never
                                the job secret */
    const char *const *argv; /* dslaunch's other options, then "--", the program and its
                                arguments; NULL-terminated */
};
/**
 * Append the JobSet of rq to out, as YAML whose every string value is written by
 * dsl_yaml_quote (Kubernetes' $(VAR) expansion escaped in argv and env). 0, or
 * DSL_EUSAGE with err: no image, a node count below 1, a word that is not UTF-8, an
 * env name Kubernetes refuses.
 */
int dsl_emit_jobset(const struct dsl_jobset_req *rq, struct dsl_dynbuf *out, char *err);
/**
 * Whether the pods ask for GPUs, by the rule of `--emit sbatch` less the cluster lookup
 * (nothing is looked up for a manifest): only --num_gpus (num_gpus > 0) counts GPUs,
 * --nproc_per_node counts processes, and CUDA_VISIBLE_DEVICES that hides every GPU
 * (no_devices, the plan's) means CPU ranks. 1 or 0; *note (static text, or NULL) says
 * why not where a count was given.
 */
int dsl_jobset_asks_gpus(int num_gpus, int nproc_per_node, const char *no_devices,
                         const char **note);
/** A JobSet name from a program path ("/opt/Train_v2.py" -> "train-v2-py"). 0. */
int dsl_jobset_name(const char *program, char *name, size_t cap);
/**
 * Append s[0..n) to out as a YAML double-quoted scalar that holds only printable ASCII:
 * '"' and '\' escaped, \n, \t, other characters outside ' '..'~' as \xNN, \uNNNN or
 * \UNNNNNNNN (YAML 1.1 and 1.2 read them alike); with dollars, every '$' doubled
 * (Kubernetes reads "$$" as "$" in a command or env value). 0, or -(1 + the offset) of
 * the first byte that is not UTF-8, out then unchanged.
 */
int dsl_yaml_quote(struct dsl_dynbuf *out, const char *s, size_t n, int dollars);

/*
 * Whether the Slurm cluster of this login node has GPUs at all (slurmgpus.c), for
 * `--emit sbatch`: a script that asks a CPU cluster for --gpus-per-node is rejected by
 * sbatch ("Invalid generic resource (gres) specification").
 */
/**
 * Ask `sinfo -h -o %G` (DSLAUNCH_SINFO names another sinfo) for the generic resources of
 * the cluster's nodes: 1 when a node has GPUs (a "gpu" gres), 0 when none has, -1 when
 * it cannot be told (no sinfo, sinfo failed or said nothing within 10 s), with why
 * saying so in words for a comment. The one program --emit runs; it reads nothing else.
 */
int dsl_slurm_cluster_has_gpus(char *why, size_t cap);

/**
 * Whether sinfo's gres text (one line per group of nodes: "gpu:4", "gpu:a100:8(S:0-1)",
 * "shard:2,gpu:1", "(null)") names a GPU: a "gpu" item at the start of a line or after a
 * comma. Reads up to the text's NUL.
 */
int dsl_slurm_gres_has_gpu(const char *text);

#endif
