/*
 * dslaunch's options: one table (for the common parser, opt.h) drives parsing and
 * --help, then the cross-option checks. Parsing stops at the first non-option word
 * (the program) or at "--"; nothing after it is looked at.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/common/cpubind.h"
#include "dslaunch/plan/options.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define OFF(f) offsetof(struct dsl_launch_opts, f)
/* one line per kind of entry (struct dsl_opt's fields in order) */
#define STR(n, sh, f, arg, help, def)                                                          \
    {n, sh, DSL_OPT_STRING, OFF(f), arg, help, def, 0, 0, NULL, 0, NULL}
#define INT(n, f, arg, help, def, lo, hi)                                                      \
    {n, 0, DSL_OPT_INT, OFF(f), arg, help, def, lo, hi, NULL, 0, NULL}
#define SECS(n, f, arg, help, def, lo, hi)                                                     \
    {n, 0, DSL_OPT_SECONDS, OFF(f), arg, help, def, lo, hi, NULL, 0, NULL}
#define SIZE(n, f, arg, help, def, lo, hi)                                                     \
    {n, 0, DSL_OPT_SIZE, OFF(f), arg, help, def, lo, hi, NULL, 0, NULL}
/* the ranges of the durations and sizes (docs/reliability.md says why) */
#define HOUR 3600L
#define DAY (24 * HOUR)
#define KIB 1024L
#define MIB (1024 * KIB)
#define GIB (1024 * MIB)
#define LIST(n, f, arg, help) {n, 0, DSL_OPT_LIST, OFF(f), arg, help, NULL, 0, 0, NULL, 0, NULL}
#define FLAG(n, f, help) {n, 0, DSL_OPT_FLAG, OFF(f), NULL, help, NULL, 0, 0, NULL, 0, NULL}
#define CALL(n, sh, arg, help, def, fn)                                                        \
    {n, sh, DSL_OPT_CALL, 0, arg, help, def, 0, 0, fn, 0, NULL}
#define SET(n, sh, f, help, tag)                                                               \
    {n, sh, DSL_OPT_SET, OFF(f), NULL, help, NULL, 0, 0, NULL, tag, NULL}

static int set_launcher(void *target, const struct dsl_opt *d, const char *val, char *err)
{
    static const char *const names[] = {"auto", "local", "ssh", "pdsh", "openmpi", "slurm"};
    struct dsl_launch_opts *o = target;
    (void)d;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(val, names[i])) {
            o->launcher = (enum dsl_launcher_kind)i;
            return 0;
        }
    return dsl_seterr(err, DSL_EUSAGE,
                      "unknown launcher '%s' (use auto, local, ssh, pdsh, openmpi or slurm)", val);
}

static int set_emit(void *target, const struct dsl_opt *d, const char *val, char *err)
{
    struct dsl_launch_opts *o = target;
    (void)d;
    static const struct {
        const char *name;
        int kind;
    } kinds[] = {{"sbatch", DSL_EMIT_SBATCH}, {"jobset", DSL_EMIT_JOBSET}};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        size_t n = strlen(kinds[i].name);
        if (strncmp(val, kinds[i].name, n) || (val[n] && val[n] != '='))
            continue;
        if (val[n] == '=' && !val[n + 1])
            return dsl_seterr(err, DSL_EUSAGE, "option '--emit %s=FILE' needs a file name",
                              kinds[i].name);
        o->emit = kinds[i].kind;
        free(o->emit_file);
        o->emit_file = val[n] ? dsl_xstrdup(val + n + 1) : NULL;
        return 0;
    }
    return dsl_seterr(err, DSL_EUSAGE, "option '--emit' writes 'sbatch' (a batch script) or "
                      "'jobset' (a Kubernetes JobSet), to stdout, or KIND=FILE, not '%s'", val);
}

static int set_master_port(void *target, const struct dsl_opt *d, const char *val, char *err)
{
    struct dsl_launch_opts *o = target;
    int r = dsl_parse_int(val, 1, 65535, &o->master_port);
    if (r == -ERANGE)
        return dsl_seterr(err, DSL_EUSAGE, "option '--%s' is out of range: allowed 1..65535, "
                          "got '%s'", d->name, val);
    if (r < 0)
        return dsl_seterr(err, DSL_EUSAGE,
                          "option '--%s' needs an integer from 1 to 65535, not '%s'", d->name,
                          val);
    o->master_port_given = 1;
    return 0;
}

/* --include/--exclude: one filter each; a second one would silently replace the first
 * (DeepSpeed's argparse keeps the last), so it is refused with the way to join them */
static int set_filter(void *target, const struct dsl_opt *d, const char *val, char *err)
{
    struct dsl_launch_opts *o = target;
    char **f = !strcmp(d->name, "include") ? &o->include : &o->exclude;
    if (*f)
        return dsl_seterr(err, DSL_EUSAGE, "option '--%s' given twice ('%s' and '%s'): one "
                          "--%s names every host, joined with '@' (e.g. "
                          "'worker-0:0,2@worker-1')", d->name, *f, val, d->name);
    *f = dsl_xstrdup(val);
    return 0;
}

/* DeepSpeed launcher flags dslaunch has no feature for: say what to use instead */
static int not_here(void *target, const struct dsl_opt *d, const char *val, char *err)
{
    (void)target;
    (void)val;
    return dsl_seterr(err, DSL_EUSAGE, "option '--%s' is DeepSpeed's; dslaunch has no such "
                      "feature: %s", d->name, d->data);
}

#define NOT_HERE(n, arg, what) {n, 0, DSL_OPT_CALL, 0, arg, NULL, NULL, 0, 0, not_here, 0, what}

/* torchrun flags that mean nothing here: say what dslaunch does instead */
static int not_torchrun(void *target, const struct dsl_opt *d, const char *val, char *err)
{
    (void)target;
    (void)val;
    return dsl_seterr(err, DSL_EUSAGE, "option '--%s' is torchrun's; dslaunch does not need "
                      "it: %s", d->name, d->data);
}

#define NOT_TORCHRUN(n, arg, what)                                                             \
    {n, 0, DSL_OPT_CALL, 0, arg, NULL, NULL, 0, 0, not_torchrun, 0, what}
/* what torchrun's rendezvous options become */
#define RDZV_INSTEAD                                                                           \
    "the nodes meet at node 0's --master_addr and --master_port; with a hostfile dslaunch "   \
    "starts every node itself, and one dslaunch per node is --nnodes N --node_rank K "         \
    "(docs/no-ssh.md)"

static const struct dsl_opt opts[] = {
    STR("hostfile", 'H', hostfile, "FILE", "DeepSpeed hostfile ('host slots=N' lines)",
        "the Slurm allocation, else /job/hostfile if present, else localhost"),
    CALL("include", 'i', "SPEC", "use only these hosts/slots, e.g. 'worker-0:0,2@worker-1'",
         NULL, set_filter),
    CALL("exclude", 'e', "SPEC", "use all but these hosts/slots", NULL, set_filter),
    INT("num_nodes", num_nodes, "N", "use the first N hosts", "all", 1, 1 << 24),
    INT("num_gpus", num_gpus, "N", "use the first N slots of every host", "all", 1, 1 << 24),
    INT("num_accelerators", num_gpus, "N", "DeepSpeed's other name for --num-gpus", NULL, 1,
        1 << 24),
    STR("master_addr", 0, master_addr, "ADDR", "rendezvous address (an IP of the first node)",
        "chosen by the handshake"),
    CALL("master_port", 0, "PORT",
         "rendezvous port, 1..65535; a busy default is replaced, a busy given one is an "
         "error", "29500",
         set_master_port),
    CALL("launcher", 0, "KIND", "auto, local, ssh, pdsh, openmpi or slurm (auto: slurm "
         "for the hosts of a Slurm allocation)", "auto", set_launcher),
    STR("launcher_args", 0, tr.launcher_args, "ARGS",
        "extra options for the launcher command of --launcher pdsh, openmpi or slurm "
        "(pdsh, mpirun, srun), split on whitespace (no shell)", NULL),
    LIST("export", exports, "VAR[=VALUE]", "also export VAR to every worker (repeatable)"),
    STR("log_dir", 0, log_dir, "DIR",
        "also write each rank's output to DIR/rank<N>.log, a restart's to "
        "rank<N>.restart<J>.log (DIR must be yours, not group- or world-writable; an "
        "earlier run's logs there are refused)",
        NULL),
    FLAG("log_dir_overwrite", log_dir_overwrite,
         "replace the logs of an earlier run in --log-dir instead of refusing them"),
    FLAG("no_prefix", no_prefix, "do not prefix output lines with the rank"),
    SIZE("output_buffer", output_buffer, "SIZE",
         "memory for output stdout/stderr have not taken yet; past it whole lines are "
         "dropped and counted, the job never waits", "64M", 64 * KIB, 64 * GIB),
    SECS("term_timeout", term_timeout, "SECONDS",
         "grace between SIGTERM and SIGKILL when a job stops", "10", 0, HOUR),
    SIZE("rank_memory_limit", rank_memory_limit, "BYTES",
         "memory each rank (with everything it starts) may use, e.g. 8G; needs a memory "
         "cgroup on every node (--check shows it); over it, the OOM killer ends the rank",
         "no limit", 16 * MIB, 1024 * 1024 * GIB),
    SECS("hang_timeout", hang_timeout, "SECONDS",
         "no progress this long, with a rank to blame, is a hang: stacks, a report, stop; "
         "0 = off",
         "300 for ranks that report progress (dstrain), else off", 0, 7 * DAY),
    SECS("job_timeout", job_timeout, "SECONDS",
         "stop the job after this long, with stacks and a report; 0 = none", "none", 0,
         366 * DAY),
    FLAG("local_rank_arg", local_rank_arg,
         "append --local_rank=N to any program's arguments (Python scripts get it anyway)"),
    FLAG("no_local_rank", no_local_rank,
         "do not pass --local_rank=N to a Python script (LOCAL_RANK is in the env either way)"),
    FLAG("no_python", no_python,
         "run PROGRAM itself even when it ends in .py (by default python3 -u runs it)"),
    {"module", 'm', DSL_OPT_FLAG, OFF(module), NULL,
     "PROGRAM is a Python module: python3 -u -m PROGRAM", NULL, 0, 0, NULL, 0, NULL},
    FLAG("force_multi", force_multi,
         "the ssh transport even when every host is this machine (DeepSpeed's name)"),
    FLAG("save_pid", save_pid, "write dslaunch's pid to /tmp/<pid>.ds while it runs (DeepSpeed's name)"),
    STR("enable_each_rank_log", 0, log_dir, "DIR", "DeepSpeed's name for --log-dir", NULL),
    FLAG("bind_cores_to_rank", bind_cores,
         "bind each rank to an equal share of its node's cores, NUMA node by NUMA node; "
         "OMP_NUM_THREADS becomes the share"),
    STR("bind_core_list", 0, bind_core_list, "CORES",
        "with binding, share only these cores, e.g. 0-15,32-47", "every core the node allows"),
    INT("max_restarts", max_restarts, "N",
        "after a rank fails or a node is lost, tear down and start again, N times at most",
        "0", 0, 1000),
    FLAG("exclude_failed_nodes", exclude_failed_nodes,
         "restart without the nodes whose rank failed or that were lost"),
    INT("min_nodes", min_nodes, "N", "do not restart on fewer than N nodes", "1", 1, 1 << 24),
    SET("dry_run", 0, mode, "resolve everything, print the plan as JSON, start nothing",
        DSL_MODE_DRY_RUN),
    CALL("emit", 0, "sbatch|jobset[=FILE]",
         "with --dry-run: write an sbatch script that runs this plan (docs/slurm.md) or a "
         "Kubernetes JobSet in no-ssh mode (docs/no-ssh.md) to stdout, or to FILE (a new "
         "file)", NULL, set_emit),
    STR("image", 0, image, "IMAGE", "--emit jobset: the container image every pod runs "
        "(it must hold dslaunch and the program)", "none: required"),
    SET("check", 0, mode, "run only the preflight handshake on every host", DSL_MODE_CHECK),
    INT("fanout", fanout, "N", "hosts connecting at once", "256", 1, 1 << 24),
    SECS("connect_timeout", tr.connect_timeout, "SECONDS",
         "give up on a host that does not answer", "30", 1, HOUR),
    SECS("keepalive", tr.keepalive, "SECONDS",
         "declare a silent host lost after this long (heartbeats every third of it)", "15",
         2, HOUR),
    STR("ssh_config", 0, tr.ssh_config, "FILE", "ssh client configuration", "~/.ssh/config"),
    INT("ssh_port", tr.ssh_port, "PORT", "ssh port", "from ssh config, or 22", 1, 65535),
    STR("ssh_identity", 0, tr.ssh_identity, "FILE", "ssh private key",
        "ssh-agent and default keys"),
    FLAG("ssh_accept_new", tr.accept_new,
         "trust unknown host keys on first use (changed keys are always refused)"),
    STR("remote_dslaunch", 0, remote_dslaunch, "PATH", "dslaunch on the other hosts",
        "this dslaunch's absolute path"),
    LIST("sync", sync_paths, "PATH",
         "copy PATH to every host first (as dslaunch sync); start only if all succeeded"),
    STR("remote_cwd", 0, remote_cwd, "DIR", "working directory on the other hosts",
        "the current directory"),
    /* no-ssh mode (plan/nossh.h): every node runs dslaunch; node 0 coordinates */
    FLAG("no_ssh", no_ssh, "no-ssh mode: every node runs dslaunch itself, node 0 "
         "coordinates and the others dial in to it (docs/no-ssh.md)"),
    INT("nnodes", nnodes, "N", "no-ssh mode: the number of nodes", "PET_NNODES", 1, 1 << 20),
    INT("node_rank", node_rank, "K", "no-ssh mode: this node's rank, 0 = the coordinator",
        "PET_NODE_RANK, else JOB_COMPLETION_INDEX", 0, (1 << 20) - 1),
    INT("nproc_per_node", nproc_per_node, "N", "ranks on this node (torchrun's name; "
        "elsewhere the same as --num_gpus)", "the devices found", 1, 1 << 24),
    FLAG("oversubscribe", oversubscribe, "more ranks on a node than it has GPUs, or CPUs "
         "where it has none, when no hostfile line gives its slots (docs/placement.md)"),
    /* accelerate launch's names (one accelerate launch per machine is no-ssh mode) */
    INT("num_processes", num_processes, "T", "accelerate's name: T ranks in all, T / "
        "--num_machines on each node (--nproc_per_node)", NULL, 1, 1 << 24),
    INT("num_machines", nnodes, "N", "accelerate's name for --nnodes", NULL, 1, 1 << 20),
    INT("machine_rank", node_rank, "K", "accelerate's name for --node_rank", NULL, 0,
        (1 << 20) - 1),
    STR("main_process_ip", 0, master_addr, "ADDR", "accelerate's name for --master_addr",
        NULL),
    CALL("main_process_port", 0, "PORT", "accelerate's name for --master_port", NULL,
         set_master_port),
    INT("control_port", control_port, "PORT", "no-ssh mode: the coordinator's port for "
        "the agents, the same on every node", "the master port + 1", 1, 65535),
    STR("job_secret_file", 0, job_secret_file, "FILE", "no-ssh mode: the job's shared "
        "secret, the same on every node (at least 16 bytes; a file only you can read, "
        "mode 600)", "$DSLAUNCH_JOB_SECRET"),
    SECS("join_timeout", join_timeout, "SECONDS", "no-ssh mode: how long node 0 waits for "
         "the others and they try to reach it", "300", 1, DAY),
    SET("verbose", 'v', verbose, "say more", 2),
    SET("quiet", 'q', verbose, "say only errors", 0),
    SET("agent", 0, mode, NULL, DSL_MODE_AGENT), /* internal: node agent */
    STR("connect", 0, agent_connect, "ADDR:PORT", NULL, NULL),    /* internal */
    STR("launcher_key", 0, agent_key, "KEY", NULL, NULL),         /* internal */
    STR("slurm_nodes", 0, agent_slurm_nodes, "H0,H1,..", NULL, NULL), /* internal */
    INT("connect_index", agent_index, "I", NULL, NULL, 0, 99999), /* internal */
    NOT_HERE("autotuning", "MODE", "tune the batch size and ZeRO settings with DeepSpeed's "
             "autotuner, then launch the result here"),
    NOT_HERE("elastic_training", NULL, "for a job that survives lost nodes use --max-restarts N "
             "with --exclude-failed-nodes and --min-nodes (docs/reliability.md, Restarts)"),
    NOT_HERE("min_elastic_nodes", "N", "use --min-nodes with --max-restarts and "
             "--exclude-failed-nodes (docs/reliability.md, Restarts)"),
    NOT_HERE("max_elastic_nodes", "N", "the job runs on the hosts of the hostfile; restarts "
             "(--max-restarts) can only leave nodes out"),
    NOT_HERE("no_ssh_check", NULL, "the preflight always checks every host; leave the flag out"),
    NOT_HERE("venv_script", "FILE", "ranks run the python3 of their PATH: activate the venv "
             "here, and every node runs the venv's python3 if it is at the same path there "
             "(the preflight checks it and exports PATH and VIRTUAL_ENV; docs/env.md)"),
    NOT_HERE("comment", "TEXT", "with --launcher slurm, pass it to srun: --launcher-args "
             "'--comment=TEXT'"),
    NOT_TORCHRUN("standalone", NULL, "a job on this machine alone needs no rendezvous; leave "
                 "the flag out (dslaunch --nproc_per_node N PROGRAM)"),
    NOT_TORCHRUN("rdzv_backend", "NAME", RDZV_INSTEAD),
    NOT_TORCHRUN("rdzv_endpoint", "HOST:PORT", RDZV_INSTEAD),
    NOT_TORCHRUN("rdzv_id", "ID", "every job gets its own DSLAUNCH_RUN_ID; leave the flag out"),
    NOT_TORCHRUN("rdzv_conf", "CONF", RDZV_INSTEAD),
    NOT_TORCHRUN("tee", "STREAMS", "every rank's output is on this terminal, whole lines with "
                 "the rank in front; --log-dir DIR also writes one file per rank"),
    NOT_TORCHRUN("redirects", "STREAMS", "every rank's output is on this terminal, whole lines "
                 "with the rank in front; --log-dir DIR also writes one file per rank"),
    SET("help", 'h', mode, "show this help", DSL_MODE_HELP),
    SET("version", 'V', mode, "show the version", DSL_MODE_VERSION),
};

static const struct dsl_opt_parser parser = {
    .prog = "dslaunch",
    .opts = opts,
    .nopts = sizeof(opts) / sizeof(opts[0]),
    .flags = DSL_OPT_STOP_AT_ARG,
};

void dsl_launch_opts_init(struct dsl_launch_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->num_nodes = -1;
    o->num_gpus = -1;
    o->master_port = 29500;
    o->term_timeout = 10.0;
    o->hang_timeout = -1.0; /* auto: docs/reliability.md */
    o->output_buffer = (size_t)64 << 20;
    o->fanout = 256;
    o->min_nodes = 1;
    o->tr.connect_timeout = 30.0;
    o->tr.keepalive = 15.0;
    o->verbose = 1;
    o->nnodes = -1;
    o->node_rank = -1;
    o->nproc_per_node = -1;
    o->num_processes = -1;
    o->join_timeout = 300.0;
    dsl_strvec_init(&o->exports);
    dsl_strvec_init(&o->sync_paths);
    dsl_strvec_init(&o->argv);
}

void dsl_launch_opts_count_flag(const struct dsl_launch_opts *o, int n, char *buf,
                                size_t cap)
{
    if (o->num_processes > 0)
        snprintf(buf, cap, "--num_processes %d", o->num_processes);
    else if (o->nproc_per_node > 0)
        snprintf(buf, cap, "--nproc_per_node %d", o->nproc_per_node);
    else
        snprintf(buf, cap, "--num_gpus %d", n);
}

void dsl_launch_opts_release(struct dsl_launch_opts *o)
{
    free(o->hostfile);
    free(o->include);
    free(o->exclude);
    free(o->master_addr);
    free(o->log_dir);
    free(o->remote_dslaunch);
    free(o->remote_cwd);
    free(o->bind_core_list);
    free(o->agent_connect);
    free(o->agent_key);
    free(o->agent_slurm_nodes);
    free(o->job_secret_file);
    free(o->emit_file);
    free(o->image);
    free((char *)o->tr.launcher_args);
    free((char *)o->tr.ssh_config);
    free((char *)o->tr.ssh_identity);
    dsl_strvec_release(&o->exports);
    dsl_strvec_release(&o->sync_paths);
    dsl_strvec_release(&o->argv);
    dsl_launch_opts_init(o);
}

int dsl_launch_opts_may_join(const struct dsl_launch_opts *o)
{
    if (o->mode != DSL_MODE_RUN || o->emit)
        return 0;
    if (o->node_rank >= 0)
        return o->node_rank > 0;
    const char *k = getenv("PET_NODE_RANK");
    if (!k || !k[0])
        k = getenv("JOB_COMPLETION_INDEX");
    return k && k[0] && strcmp(k, "0") != 0;
}

/* The rank contract's variables (docs/env.md): dslaunch sets them per rank or per job,
 * so an --export of one would be silently replaced; what to use instead, or NULL */
static const char *contract_var(const char *name, size_t len)
{
    static const struct {
        const char *name, *instead;
    } vars[] = {
        {DSL_ENV_RANK, "the placement decides it (--include, --hostfile)"},
        {DSL_ENV_WORLD_SIZE, "the placement decides it (--num_gpus, --include, --hostfile)"},
        {DSL_ENV_LOCAL_RANK, "the placement decides it (--include, --hostfile)"},
        {DSL_ENV_LOCAL_WORLD_SIZE, "the placement decides it (--num_gpus, --include)"},
        {DSL_ENV_LOCAL_SIZE, "the placement decides it (--num_gpus, --include)"},
        {DSL_ENV_NODE_RANK, "the hostfile's order decides it"},
        {DSL_ENV_GROUP_RANK, "the hostfile's order decides it"},
        {DSL_ENV_CROSS_RANK, "the hostfile's order decides it"},
        {DSL_ENV_NNODES, "use --num_nodes or --include"},
        {DSL_ENV_CROSS_SIZE, "use --num_nodes or --include"},
        {DSL_ENV_MASTER_ADDR, "use --master_addr"},
        {DSL_ENV_MASTER_PORT, "use --master_port"},
        {DSL_ENV_RUN_ID, "each job gets its own"},
        {DSL_ENV_RUN_TOKEN, "each job gets its own secret"},
        {DSL_ENV_RESTART_COUNT, "it counts the job's restarts"},
        {DSL_ENV_TE_RESTART_COUNT, "it counts the job's restarts"},
        {DSL_ENV_TE_MAX_RESTARTS, "use --max-restarts"},
        {DSL_ENV_PROGRESS_FILE, "it is the rank's own progress record"},
    };
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        if (strlen(vars[i].name) == len && !memcmp(vars[i].name, name, len))
            return vars[i].instead;
    return NULL;
}

int dsl_launch_opts_parse(struct dsl_launch_opts *o, int argc, char **argv, char *err)
{
    int r = dsl_opt_parse(&parser, o, argc, argv, &o->argv, err);
    if (r < 0)
        return r;
    o->hostfile_given = o->hostfile != NULL;

    /* verify */
    if (o->mode == DSL_MODE_AGENT && !o->agent_connect != !o->agent_key)
        return dsl_seterr(err, DSL_EUSAGE,
                          "--agent needs both --connect and --launcher-key, or neither");
    if (o->mode == DSL_MODE_HELP || o->mode == DSL_MODE_VERSION || o->mode == DSL_MODE_AGENT)
        return 0;
    /* libssh skips a config it cannot open without a word, and every host name then
     * goes to the resolver: a file the user named must be there */
    if (o->tr.ssh_config && (r = dsl_file_check_readable("--ssh-config", o->tr.ssh_config,
                                                         err)) < 0)
        return r;
    if (o->tr.ssh_identity && (r = dsl_file_check_readable("--ssh-identity",
                                                           o->tr.ssh_identity, err)) < 0)
        return r;
    if (o->agent_connect || o->agent_key || o->agent_index || o->agent_slurm_nodes)
        return dsl_seterr(err, DSL_EUSAGE, "--connect, --launcher-key, --connect-index and "
                          "--slurm-nodes are for --agent only");
    if (o->num_processes > 0) { /* accelerate's: ranks in all, over --num_machines */
        int machines = o->nnodes > 0 ? o->nnodes : 1;
        if (o->num_processes % machines)
            return dsl_seterr(err, DSL_EUSAGE, "--num_processes %d (ranks in all) does not "
                              "divide among --num_machines %d: give a multiple of it, or "
                              "--nproc_per_node (ranks per node)", o->num_processes,
                              machines);
        int per = o->num_processes / machines;
        if (o->nproc_per_node > 0 && o->nproc_per_node != per)
            return dsl_seterr(err, DSL_EUSAGE, "--num_processes %d over %d node%s is %d per "
                              "node, but --nproc_per_node is %d: give one of them",
                              o->num_processes, machines, machines == 1 ? "" : "s", per,
                              o->nproc_per_node);
        o->nproc_per_node = per;
    }
    if (o->nproc_per_node > 0 && o->num_gpus > 0 && o->nproc_per_node != o->num_gpus)
        return dsl_seterr(err, DSL_EUSAGE, "--nproc_per_node %d and --num_gpus %d disagree: "
                          "give one of them", o->nproc_per_node, o->num_gpus);
    if (o->nproc_per_node > 0 && !o->no_ssh && o->node_rank < 0 && o->nnodes < 0)
        o->num_gpus = o->nproc_per_node; /* torchrun's name outside no-ssh mode */
    if (o->force_multi && o->launcher == DSL_LAUNCHER_AUTO)
        o->launcher = DSL_LAUNCHER_SSH;
    if (o->tr.launcher_args &&
        (o->launcher == DSL_LAUNCHER_LOCAL || o->launcher == DSL_LAUNCHER_SSH))
        return dsl_seterr(err, DSL_EUSAGE, "--launcher_args passes options to a launcher "
                          "command (pdsh, mpirun, srun), which --launcher %s does not run: "
                          "use --launcher pdsh, openmpi or slurm",
                          o->launcher == DSL_LAUNCHER_SSH ? "ssh" : "local");
    if (o->bind_core_list) {
        int cores[DSL_CPUBIND_MAX];
        if (dsl_cpubind_parse(o->bind_core_list, cores, DSL_CPUBIND_MAX, err) < 0)
            return dsl_seterr(err, DSL_EUSAGE, "option '--bind_core_list': %s", err);
        o->bind_cores = 1;
    }
    if (o->module && o->no_python)
        return dsl_seterr(err, DSL_EUSAGE, "--module runs PROGRAM with python3, --no_python "
                          "without: give one of them");
    if (o->image && o->emit != DSL_EMIT_JOBSET)
        return dsl_seterr(err, DSL_EUSAGE, "--image is the container image of --emit jobset");
    if (o->emit == DSL_EMIT_JOBSET && (o->no_ssh || o->nnodes > 0 || o->node_rank >= 0))
        return dsl_seterr(err, DSL_EUSAGE, "--emit jobset writes the no-ssh options "
                          "(--node_rank, --nnodes, --master_addr) into the manifest: give the "
                          "node count with --num_nodes");
    if (o->emit == DSL_EMIT_JOBSET && !o->image)
        return dsl_seterr(err, DSL_EUSAGE, "--emit jobset needs --image IMAGE: the container "
                          "image every pod runs, holding dslaunch and the program");
    if (o->emit && o->mode != DSL_MODE_DRY_RUN)
        return dsl_seterr(err, DSL_EUSAGE, "--emit writes a batch script instead of running: "
                          "it needs --dry-run");
    /* a no-ssh node other than node 0 may come without a program: it runs node 0's
     * (docs/no-ssh.md); the launcher checks once the mode is resolved */
    if (o->mode != DSL_MODE_CHECK && o->argv.nr == 0 && !dsl_launch_opts_may_join(o))
        return dsl_seterr(err, DSL_EUSAGE, "no program given (usage: dslaunch [options] PROGRAM [ARGS...])");
    if (o->log_dir_overwrite && !o->log_dir)
        return dsl_seterr(err, DSL_EUSAGE, "--log-dir-overwrite replaces the logs of an "
                          "earlier run in --log-dir, which is not given");
    if (o->hang_timeout > 0 && o->hang_timeout < 1)
        return dsl_seterr(err, DSL_EUSAGE,
                          "option '--hang-timeout' is under a second: allowed 0 (off) or "
                          "1..%ld seconds", 7 * DAY);
    for (size_t k = 0; k < o->exports.nr; k++) {
        const char *e = o->exports.v[k];
        const char *eq = strchr(e, '=');
        size_t len = eq ? (size_t)(eq - e) : strlen(e);
        int ok = len > 0 && !(e[0] >= '0' && e[0] <= '9');
        for (size_t j = 0; ok && j < len; j++)
            ok = (e[j] == '_' || (e[j] >= 'A' && e[j] <= 'Z') || (e[j] >= 'a' && e[j] <= 'z') ||
                  (e[j] >= '0' && e[j] <= '9'));
        if (!ok)
            return dsl_seterr(err, DSL_EUSAGE, "bad variable name in '--export %s'", e);
        const char *why = contract_var(e, len);
        if (why)
            return dsl_seterr(err, DSL_EUSAGE, "'--export %s': dslaunch sets %.*s for every "
                              "rank, and an exported value would be replaced; %s", e,
                              (int)len, e, why);
    }
    return 0;
}

void dsl_launch_opts_forward(int argc, char **argv, const char *const *drop,
                             struct dsl_strvec *out)
{
    for (int i = 1, words; i < argc; i += words) {
        const struct dsl_opt *d = dsl_opt_at(&parser, argc, argv, i, &words);
        if (!d)
            return; /* the program, or "--" before it */
        int keep = 1;
        for (size_t k = 0; keep && drop && drop[k]; k++)
            keep = strcmp(d->name, drop[k]) != 0;
        for (int w = 0; keep && w < words; w++)
            dsl_strvec_push(out, argv[i + w]);
    }
}

void dsl_launch_opts_help(FILE *f)
{
    fprintf(f, "usage: dslaunch [options] PROGRAM [ARGS...]\n"
               "       dslaunch [options] train --config ds_config.json\n"
               "       dslaunch --check --hostfile FILE\n"
               "       dslaunch doctor --hostfile FILE              # check every node, say how to fix\n"
               "       dslaunch sync PATH... --hostfile FILE        # copy files to every node\n"
               "       dslaunch ssh-setup --hostfile FILE [--mesh]  # passwordless SSH set-up\n\n"
               "Starts PROGRAM once per slot on every host of a DeepSpeed hostfile and\n"
               "supervises the job. 'train' runs the bundled trainer dstrain (a program of\n"
               "your own named train: give its path, e.g. ./train or $(command -v train)).\n"
               "Multi-word options accept '-' or '_' (--num-gpus = --num_gpus).\n\n"
               "options:\n");
    dsl_opt_help(&parser, f);
    fprintf(f, "\nexit codes: 0 all ranks succeeded; the first failing rank's code, or 128+signal;\n"
               "  2 usage or input error; 126 program not executable; 127 program not found;\n"
               "  200 host unreachable; 201 authentication or host key failure; 202 preflight\n"
               "  mismatch; 203 launcher timeout; 204 node agent failed; 205 hang detected;\n"
               "  206 --job-timeout reached. With --max-restarts, the last attempt's code.\n"
               "  See docs/exit-codes.md.\n");
}
