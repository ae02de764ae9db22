/*
 * dslaunch's command line: defaults, then the environment, then argv,
 * then verification, into one struct. A declarative table drives both parsing and
 * --help. Every multi-word flag has both spellings (--num_gpus and --num-gpus), and
 * --opt=value and --opt value both work. The first argument that is not an option is
 * the program; it and everything after it go to the workers untouched.
 */
#ifndef DSLAUNCH_OPTIONS_H
#define DSLAUNCH_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

#include "dslaunch/common/strvec.h"

/* How the transports (remote/transport.h) reach the hosts. */
struct dsl_transport_opts {
    const char *ssh_config;     /* --ssh-config FILE (NULL: ~/.ssh/config) */
    int ssh_port;               /* --ssh_port (0: from config or 22) */
    const char *ssh_identity;   /* --ssh-identity FILE (NULL: agent + defaults) */
    const char *ssh_user;       /* NULL: from config or the current user */
    int accept_new;             /* --ssh-accept-new: trust unknown host keys on first use */
    double connect_timeout;     /* --connect-timeout seconds */
    double keepalive;           /* --keepalive seconds */
    const char *known_hosts;    /* NULL: ~/.ssh/known_hosts */
    const char *connect_back_addr; /* pdsh/openmpi: the launcher address agents connect
                                      back to (NULL: every IPv4 address of this host) */
    const char *launcher_args;  /* --launcher_args: extra options of the launcher command
                                   (pdsh, mpirun, srun), split on whitespace, never by a
                                   shell (plan/launcherargs.h) */
};

enum dsl_launcher_kind {
    DSL_LAUNCHER_AUTO = 0, /* local for this machine's names, ssh for the others */
    DSL_LAUNCHER_LOCAL,    /* every host's agent runs here (tests, fake host names) */
    DSL_LAUNCHER_SSH,
    DSL_LAUNCHER_PDSH,
    DSL_LAUNCHER_OPENMPI,
    DSL_LAUNCHER_SLURM,    /* one srun step starts every agent (transport_slurm.c) */
};

enum dsl_mode {
    DSL_MODE_RUN = 0,
    DSL_MODE_DRY_RUN, /* --dry-run */
    DSL_MODE_CHECK,   /* --check */
    DSL_MODE_AGENT,   /* --agent (internal) */
    DSL_MODE_HELP,
    DSL_MODE_VERSION,
};

struct dsl_launch_opts {
    enum dsl_mode mode;
    char *hostfile;            /* --hostfile, -H (NULL: /job/hostfile if present) */
    int hostfile_given;
    char *include;             /* --include, -i */
    char *exclude;             /* --exclude, -e */
    int num_nodes;             /* --num_nodes (-1) */
    int num_gpus;              /* --num_gpus (-1) */
    int master_port;           /* --master_port (29500) */
    int master_port_given;
    char *master_addr;         /* --master_addr (NULL: chosen by the handshake) */
    enum dsl_launcher_kind launcher; /* --launcher */
    struct dsl_strvec exports; /* --export VAR[=VALUE], repeatable */
    int no_prefix;             /* --no-prefix */
    char *log_dir;             /* --log-dir */
    int log_dir_overwrite;     /* --log-dir-overwrite: replace an earlier run's logs there */
    size_t output_buffer;      /* --output-buffer bytes (64M): console output not yet read */
    double term_timeout;       /* --term-timeout (10 s) */
    size_t rank_memory_limit;  /* --rank-memory-limit bytes per rank's cgroup (0: none) */
    double hang_timeout;       /* --hang-timeout (-1: auto, 0: off) */
    double job_timeout;        /* --job-timeout (0: none) */
    int local_rank_arg;        /* --local_rank_arg: append --local_rank=N to any program */
    int no_local_rank;         /* --no_local_rank: not even to a Python script */
    int no_python;             /* --no_python: run a .py PROGRAM itself, not with python3 */
    int module;                /* --module, -m: PROGRAM is a module: python3 -u -m PROGRAM */
    int force_multi;           /* --force_multi: the ssh transport even for this machine */
    int save_pid;              /* --save_pid: write /tmp/<pid>.ds while running */
    int bind_cores;            /* --bind_cores_to_rank: split each node's cores between its
                                  ranks (common/cpubind.h) */
    char *bind_core_list;      /* --bind_core_list: only these cores (implies binding) */
    int max_restarts;          /* --max-restarts: run again after a failure, N times (0) */
    int exclude_failed_nodes;  /* --exclude-failed-nodes: restarts leave failed nodes out */
    int min_nodes;             /* --min-nodes: no restart on fewer nodes (1) */
    int fanout;                /* --fanout (256) */
    char *remote_dslaunch;     /* --remote-dslaunch */
    char *remote_cwd;          /* --remote-cwd */
    struct dsl_strvec sync_paths; /* --sync PATH, repeatable: dslaunch sync before the job */
    struct dsl_transport_opts tr; /* --ssh-config, --ssh_port, --ssh-identity,
                                     --ssh-accept-new, --connect-timeout, --keepalive */
    int verbose;               /* -v / -q */
    char *agent_connect;       /* --agent --connect ADDR:PORT[,...]: dial the launcher */
    char *agent_key;           /* --agent --launcher-key L: the launcher's public key (hex) */
    char *agent_slurm_nodes;   /* --agent --slurm-nodes H0,H1,..: started by srun; the
                                  agent's index is its SLURMD_NODENAME's place here */
    int agent_index;           /* --agent --connect-index I: the agent's index in its batch */
    /* no-ssh mode (plan/nossh.h, docs/no-ssh.md): every node runs dslaunch itself */
    int no_ssh;                /* --no_ssh (DeepSpeed's) */
    int nnodes;                /* --nnodes N (torchrun's; -1: PET_NNODES) */
    int node_rank;             /* --node_rank K (-1: PET_NODE_RANK, JOB_COMPLETION_INDEX) */
    int nproc_per_node;        /* --nproc_per_node N (torchrun's; -1: devices found) */
    int num_processes;         /* --num_processes T (accelerate's: T ranks in all, T /
                                  --num_machines per node; -1: not given) */
    int oversubscribe;         /* --oversubscribe: more ranks on a node without a hostfile
                                  line than it has GPUs, or CPUs (docs/placement.md) */
    int control_port;          /* --control_port (0: the master port + 1) */
    char *job_secret_file;     /* --job_secret_file FILE (NULL: DSLAUNCH_JOB_SECRET) */
    double join_timeout;       /* --join_timeout: nodes dial in within this (300 s) */
    int emit;                  /* --emit sbatch[=FILE] with --dry-run: the batch script
                                  (DSL_EMIT_*) instead of the plan's JSON */
    char *emit_file;           /* --emit KIND=FILE: write it there (new file); NULL: stdout */
    char *image;               /* --image: --emit jobset's container image (required) */
    struct dsl_strvec argv;    /* program and its arguments */
};

enum { DSL_EMIT_NONE = 0, DSL_EMIT_SBATCH = 1, DSL_EMIT_JOBSET = 2 };

void dsl_launch_opts_init(struct dsl_launch_opts *o);
/**
 * The option a per-node rank count n came from, as the user wrote it, for messages:
 * "--num_processes 8", "--nproc_per_node 4" or "--num_gpus 4".
 */
void dsl_launch_opts_count_flag(const struct dsl_launch_opts *o, int n, char *buf,
                                size_t cap);
/**
 * Whether o may be a no-ssh node other than node 0 (--node_rank K > 0, or without it
 * PET_NODE_RANK or JOB_COMPLETION_INDEX set and not 0), which may be started without a
 * PROGRAM: the launcher requires one once the mode is resolved (dsl_plan_nossh) and it
 * is not such a node after all.
 */
int dsl_launch_opts_may_join(const struct dsl_launch_opts *o);
/** Parse argv (argv[0] is skipped). Errors are usage errors described in err. */
int dsl_launch_opts_parse(struct dsl_launch_opts *o, int argc, char **argv, char *err);
void dsl_launch_opts_release(struct dsl_launch_opts *o);
void dsl_launch_opts_help(FILE *f);

/**
 * The options of a dslaunch command line that parsed (argv[0] skipped, up to the
 * program), each with its value word, appended to out in their order, except those
 * whose long name (with '_', e.g. "num_nodes") is in drop (NULL-terminated): what
 * `--emit sbatch` passes on to the dslaunch of the batch script.
 */
void dsl_launch_opts_forward(int argc, char **argv, const char *const *drop,
                             struct dsl_strvec *out);

#endif
