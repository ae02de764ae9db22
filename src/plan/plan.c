/*
 * The plan (plan.h): options -> hostfile -> placement -> export set -> program ->
 * rendezvous, each step consuming the previous step's struct. Nothing here starts a
 * process or opens a connection, so a typo found at any step leaves nothing behind.
 * Single-threaded; no state outside the struct.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/schema.h"
#include "dslaunch/common/xalloc.h"
#include "allocation.h"
#include "dslaunch/plan/launcherargs.h"
#include "dslaunch/plan/srun.h"
#include "dslaunch/plan/envexport.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/plan/plan.h"
#include "dslaunch/common/banned.h"

extern char **environ;

#define DEFAULT_HOSTFILE "/job/hostfile"

void dsl_plan_init(struct dsl_plan *p, const struct dsl_launch_opts *o)
{
    memset(p, 0, sizeof(*p));
    p->opts = o;
    dsl_nossh_init(&p->nossh);
    dsl_hostfile_init(&p->hf);
    dsl_placement_init(&p->pl);
    dsl_strvec_init(&p->exported);
    dsl_strvec_init(&p->argv);
}

void dsl_plan_release(struct dsl_plan *p)
{
    dsl_strvec_release(&p->exported);
    dsl_strvec_release(&p->argv);
    free(p->self_exe);
    free(p->cwd);
    free(p->script);
    free(p->master_addr);
    free(p->no_devices);
    dsl_nossh_release(&p->nossh);
    dsl_placement_release(&p->pl);
    dsl_hostfile_release(&p->hf);
    memset(p, 0, sizeof(*p));
}

static char *self_exe(void)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0)
        return dsl_xstrdup("dslaunch");
    buf[n] = '\0';
    return dsl_xstrdup(buf);
}

char *dsl_plan_program_name(const char *prog, const char *self_dir)
{
    const char *bundled = NULL;
    if (!strcmp(prog, "train") || !strcmp(prog, "dstrain"))
        bundled = "dstrain";
    else if (!strcmp(prog, "dsbench"))
        bundled = "dsbench";
    if (bundled && self_dir) {
        char *path = dsl_xasprintf("%s/%s", self_dir, bundled);
        if (access(path, X_OK) == 0)
            return path;
        free(path);
        if (!strcmp(prog, "train"))
            return dsl_xstrdup("dstrain"); /* fall back to PATH */
    }
    return dsl_xstrdup(prog);
}

/*
 * Random bytes as hex, from getrandom() (the kernel's CSPRNG, blocking only until it is
 * seeded at boot). There is no fallback: the token is the store's only credential.
 */
static int random_hex(char *out, size_t nbytes, char *err)
{
    unsigned char raw[64];
    size_t got = 0;
    if (nbytes > sizeof(raw))
        nbytes = sizeof(raw);
    while (got < nbytes) {
        ssize_t n = getrandom(raw + got, nbytes - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return dsl_seterr(err, n < 0 ? -errno : -EIO,
                              "cannot make the job's secret token: getrandom: %s",
                              n < 0 ? strerror(errno) : "no bytes");
        got += (size_t)n;
    }
    for (size_t i = 0; i < nbytes; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

int dsl_plan_new_ids(struct dsl_plan *p, char *err)
{
    int r;
    if ((r = random_hex(p->run_id, 6, err)) < 0 || (r = random_hex(p->token, 16, err)) < 0)
        return r;
    return 0;
}

int dsl_plan_rank0_takes_port(const struct dsl_plan *p)
{
    if (p->pl.world_size < 2 || !p->argv.nr)
        return 0;
    const char *slash = strrchr(p->argv.v[0], '/');
    const char *base = slash ? slash + 1 : p->argv.v[0];
    return !strcmp(base, "dstrain") || !strcmp(base, "dsbench");
}

/*
 * The hosts, first match wins: --hostfile, the Slurm allocation this runs in (the
 * resources of this very job, so before a machine-wide /job/hostfile), /job/hostfile,
 * this machine. p->hosts_from says which.
 */
static int load_hostfile(struct dsl_plan *p, int *synth, int cpus_only, char *err)
{
    const struct dsl_launch_opts *o = p->opts;
    struct dsl_hostfile *hf = &p->hf;
    int r;
    *synth = 0;
    if (p->nossh.on) { /* node 0 first, then the nodes that dialled in */
        if (hf->nr == 0) {
            char me[256];
            if (gethostname(me, sizeof(me)) < 0 || !me[0])
                snprintf(me, sizeof(me), "localhost");
            me[sizeof(me) - 1] = '\0';
            dsl_plan_add_node(p, me, p->nossh.slots);
        }
        snprintf(p->hosts_from, sizeof(p->hosts_from), "no-ssh mode: node rank %d of %d%s",
                 p->nossh.node_rank, p->nossh.nnodes,
                 hf->nr == (size_t)p->nossh.nnodes ? ", every node dialled in" : "");
        return 0;
    }
    if (o->hostfile) {
        snprintf(p->hosts_from, sizeof(p->hosts_from), "hostfile '%.140s'", o->hostfile);
        return dsl_hostfile_load(hf, o->hostfile, err);
    }
    if ((r = dsl_allocation_load(hf, o->num_gpus, p->hosts_from, sizeof(p->hosts_from),
                                 err)) != 0) {
        if (r > 0)
            dsl_info("no --hostfile: the hosts are those of %s", p->hosts_from);
        p->from_allocation = r > 0;
        return r < 0 ? r : 0;
    }
    if (access(DEFAULT_HOSTFILE, F_OK) == 0) {
        snprintf(p->hosts_from, sizeof(p->hosts_from), "hostfile '%s'", DEFAULT_HOSTFILE);
        return dsl_hostfile_load(hf, DEFAULT_HOSTFILE, err);
    }
    /* the oversubscription rule (dsl_local_slots_for): more ranks than this machine's
     * CPUs only with --oversubscribe, never more than its GPUs */
    int slots;
    char flag[64];
    dsl_launch_opts_count_flag(o, o->num_gpus, flag, sizeof(flag));
    if ((r = dsl_local_slots_for(o->num_gpus, flag, o->oversubscribe, cpus_only, &slots,
                                 err)) < 0)
        return r;
    dsl_hostfile_add(hf, "localhost", slots);
    snprintf(p->hosts_from, sizeof(p->hosts_from), "this machine");
    *synth = 1;
    return 0;
}

const char *dsl_plan_launcher_name(const struct dsl_plan *p)
{
    switch (p->opts->launcher) {
    case DSL_LAUNCHER_LOCAL: return "local";
    case DSL_LAUNCHER_SSH: return "ssh";
    case DSL_LAUNCHER_PDSH: return "pdsh";
    case DSL_LAUNCHER_OPENMPI: return "openmpi";
    case DSL_LAUNCHER_SLURM: return "slurm";
    case DSL_LAUNCHER_AUTO: break;
    }
    if (p->nossh.on)
        return "no-ssh";
    return p->all_local ? "local" : p->from_allocation ? "slurm" : "ssh";
}

/* --launcher slurm: the srun line a run would execute (its last two values are made
 * at the start: the listener's addresses and a fresh key) */
static void add_srun(cJSON *o, const struct dsl_plan *p)
{
    struct dsl_strvec hosts, argv;
    char err[DSL_ERR_LEN];
    dsl_strvec_init(&hosts);
    dsl_strvec_init(&argv);
    for (int i = 0; i < p->pl.nr; i++)
        dsl_strvec_push(&hosts, p->pl.nodes[i].host);
    const char *agent[] = {p->opts->remote_dslaunch ? p->opts->remote_dslaunch : p->self_exe,
                           "--agent", NULL};
    if (dsl_srun_argv(&argv, p->opts->tr.launcher_args, hosts.v, hosts.nr, (char **)agent,
                      "<ADDR:PORT>", "<KEY>", err) == 0) {
        cJSON *a = cJSON_AddArrayToObject(o, "srun");
        for (size_t i = 0; i < argv.nr; i++)
            cJSON_AddItemToArray(a, cJSON_CreateString(argv.v[i]));
    } else {
        cJSON_AddStringToObject(o, "srun_error", err);
    }
    dsl_strvec_release(&argv);
    dsl_strvec_release(&hosts);
}

/* no-ssh mode: each value and where it came from (the secret itself never) */
static void nossh_role(const void *obj, cJSON *o)
{
    const struct dsl_nossh *ns = obj;
    cJSON_AddStringToObject(o, "role", ns->node_rank == 0 ? "coordinator" : "agent");
}

static void nossh_note(const void *obj, cJSON *o)
{
    const struct dsl_nossh *ns = obj;
    if (ns->nnodes > 1)
        cJSON_AddStringToObject(o, "note", ns->node_rank == 0
                                ? "the other nodes are placed once they dial in; world_info "
                                  "and ranks show this node only"
                                : "this node's ranks are numbered by the coordinator");
}

static const struct dsl_schema_custom role_member = {nossh_role, NULL};
static const struct dsl_schema_custom note_member = {nossh_note, NULL};

#define F(n, k, o) .name = (n), .kind = DSL_SK_##k, .off = (o)
#define NS(f) offsetof(struct dsl_nossh, f)
#define NROWS(rows) (int)(sizeof(rows) / sizeof((rows)[0]))
#define TEXT_ROW(n, f) {F(n, TEXT, NS(f)), .size = sizeof(((struct dsl_nossh *)0)->f)}
static const struct dsl_schema_row nossh_from_rows[] = {
    TEXT_ROW("nnodes", from_nnodes),
    TEXT_ROW("node_rank", from_node_rank),
    TEXT_ROW("master_addr", from_master_addr),
    TEXT_ROW("master_port", from_master_port),
    TEXT_ROW("control_port", from_control_port),
    TEXT_ROW("slots", from_slots),
    TEXT_ROW("secret", from_secret),
};
static const struct dsl_schema nossh_from = {"from", nossh_from_rows, NROWS(nossh_from_rows),
                                             NULL};
static const struct dsl_schema_row nossh_rows[] = {
    {F("role", CUSTOM, 0), .custom = &role_member},
    {F("nnodes", INT, NS(nnodes))},
    {F("node_rank", INT, NS(node_rank))},
    {F("master_addr", STR, NS(master_addr)), .flags = DSL_SF_NULLABLE},
    {F("master_port", INT, NS(master_port))},
    {F("control_port", INT, NS(control_port))},
    {F("slots", INT, NS(slots))},
    {F("from", OBJECT, 0), .sub = &nossh_from}, /* the same struct's from_* members */
    {F("note", CUSTOM, 0), .custom = &note_member},
};
static const struct dsl_schema nossh_schema = {"no_ssh", nossh_rows, NROWS(nossh_rows), NULL};

/* world_info: one entry a node */
#define ND(f) offsetof(struct dsl_node, f)
static const struct dsl_schema_row node_rows[] = {
    {F("host", STR, ND(host))},
    {F("user", STR, ND(user)), .flags = DSL_SF_OPT},
    {F("slots", FLAGS, ND(slots)), .aux = ND(nslots)}, /* device ids: integers */
};
static const struct dsl_schema node_schema = {"node", node_rows, NROWS(node_rows), NULL};
static const struct dsl_schema_row world_rows[] = {
    {F("world_info", ARRAY, offsetof(struct dsl_placement, nodes)),
     .aux = offsetof(struct dsl_placement, nr), .size = sizeof(struct dsl_node),
     .sub = &node_schema},
    {F("world_size", INT, offsetof(struct dsl_placement, world_size))},
};
static const struct dsl_schema world_schema = {"placement", world_rows, NROWS(world_rows),
                                               NULL};

void dsl_plan_print_json(const struct dsl_plan *p, FILE *out)
{
    const struct dsl_placement *pl = &p->pl;
    cJSON *o = cJSON_CreateObject();
    dsl_schema_encode(&world_schema, pl, o); /* world_info, world_size */
    cJSON_AddStringToObject(o, "master_addr", p->master_addr);
    cJSON_AddNumberToObject(o, "master_port", p->master_port);
    cJSON_AddStringToObject(o, "launcher", dsl_plan_launcher_name(p));
    cJSON_AddStringToObject(o, "hosts_from", p->hosts_from);
    if (!strcmp(dsl_plan_launcher_name(p), "slurm"))
        add_srun(o, p);
    if (p->opts->tr.launcher_args) {
        /* the words the launcher command gets, as a run splits them */
        struct dsl_strvec words;
        dsl_strvec_init(&words);
        dsl_launcher_args_split(&words, p->opts->tr.launcher_args);
        cJSON *la = cJSON_AddArrayToObject(o, "launcher_args");
        for (size_t i = 0; i < words.nr; i++)
            cJSON_AddItemToArray(la, cJSON_CreateString(words.v[i]));
        dsl_strvec_release(&words);
    }
    if (p->nossh.on)
        dsl_schema_encode(&nossh_schema, &p->nossh, cJSON_AddObjectToObject(o, "no_ssh"));
    cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
    for (int i = 0; i < pl->nr; i++)
        for (int s = 0; s < pl->nodes[i].nslots; s++) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddNumberToObject(r, "rank", pl->nodes[i].first_rank + s);
            cJSON_AddStringToObject(r, "host", pl->nodes[i].host);
            cJSON_AddNumberToObject(r, "node_rank", pl->nodes[i].node_rank);
            cJSON_AddNumberToObject(r, "local_rank", s);
            cJSON_AddNumberToObject(r, "device", pl->nodes[i].slots[s]);
            cJSON_AddItemToArray(ranks, r);
        }
    char *b64 = dsl_placement_world_info_b64(pl);
    cJSON_AddStringToObject(o, "world_info_b64", b64);
    free(b64);
    cJSON *env = cJSON_AddObjectToObject(o, "env");
    for (size_t i = 0; i < p->exported.nr; i++) {
        const char *kv = p->exported.v[i];
        const char *eq = strchr(kv, '=');
        if (!eq)
            continue;
        char *key = dsl_xstrndup(kv, (size_t)(eq - kv));
        cJSON_AddStringToObject(env, key, eq + 1);
        free(key);
    }
    cJSON *argv = cJSON_AddArrayToObject(o, "argv");
    for (size_t i = 0; i < p->argv.nr; i++) {
        if (p->local_rank_at && (size_t)p->local_rank_at == i)
            cJSON_AddItemToArray(argv, cJSON_CreateString("--local_rank=<LOCAL_RANK>"));
        cJSON_AddItemToArray(argv, cJSON_CreateString(p->argv.v[i]));
    }
    if (p->local_rank_at && (size_t)p->local_rank_at == p->argv.nr)
        cJSON_AddItemToArray(argv, cJSON_CreateString("--local_rank=<LOCAL_RANK>"));
    char *s = cJSON_Print(o);
    fputs(s, out);
    fputc('\n', out);
    cJSON_free(s);
    cJSON_Delete(o);
}

static void set_all_local(struct dsl_plan *p)
{
    if (p->nossh.on) { /* names say nothing: the nodes are those that dialled in */
        p->all_local = p->pl.nr == 1;
        return;
    }
    p->all_local = 1;
    for (int i = 0; i < p->pl.nr; i++)
        if (p->opts->launcher != DSL_LAUNCHER_LOCAL && !dsl_node_is_local(&p->pl.nodes[i]))
            p->all_local = 0;
}

/* The rendezvous before any probe: multi-node jobs get theirs from the probe. */
static void first_rendezvous(struct dsl_plan *p)
{
    const struct dsl_launch_opts *o = p->opts;
    free(p->master_addr);
    p->master_port = p->nossh.on ? p->nossh.master_port : o->master_port;
    if (p->nossh.on && p->nossh.master_addr && !p->all_local)
        p->master_addr = dsl_xstrdup(p->nossh.master_addr);
    else if (o->master_addr)
        p->master_addr = dsl_xstrdup(o->master_addr);
    else if (p->all_local)
        p->master_addr = dsl_xstrdup("127.0.0.1");
    else
        p->master_addr = dsl_xstrdup(p->pl.nodes[0].host);
}

/* The hostfile (or this machine, or the allocation) filtered into the placement. */
static int plan_placement(struct dsl_plan *p, char *err)
{
    const struct dsl_launch_opts *o = p->opts;
    char *include_cvd = NULL;
    int r, synth = 0;

    /* hostfile -> placement */
    struct dsl_placement_opts po = {
        .include = o->include,
        .exclude = o->exclude,
        .num_nodes = o->num_nodes,
        .num_gpus = o->num_gpus,
    };
    /* DeepSpeed: with no hostfile, CUDA_VISIBLE_DEVICES selects the local devices; "-1"
     * hides them all: CPU slots, and ranks that see no device */
    const char *cvd = getenv(DSL_ENV_CUDA_VISIBLE_DEVICES);
    int cvd_rule = dsl_placement_cuda_visible(cvd, &po, &include_cvd, err);
    if ((r = load_hostfile(p, &synth, cvd_rule == 3, err)) < 0) {
        free(include_cvd);
        return r;
    }
    /* --launcher slurm with neither a hostfile nor an allocation: the plan's one host
     * would be "localhost", which srun cannot place an agent on (it failed there with
     * "Invalid node name specified" as an unreachable host, 200). --emit sbatch writes a
     * script for an allocation to come, where this machine only stands for its shape. */
    if (synth && o->launcher == DSL_LAUNCHER_SLURM && !o->emit) {
        free(include_cvd);
        return dsl_seterr(err, DSL_EUSAGE, "--launcher slurm outside a Slurm allocation "
                          "(no SLURM_JOB_ID and SLURM_JOB_NODELIST here) needs --hostfile with Slurm's node names: "
                          "srun then asks for those nodes (partition, time and the like with "
                          "--launcher_args); or run dslaunch inside salloc or sbatch, where "
                          "the allocation gives the hosts");
    }
    if (!synth) {
        free(include_cvd);
        include_cvd = NULL;
    } else {
        r = cvd_rule;
        if (r < 0)
            return r;
        if (r == 3) {
            free(p->no_devices);
            p->no_devices = dsl_xstrdup(cvd);
        }
        else if (r == 1)
            po.include = include_cvd;
        else if (r == 2)
            dsl_info("CUDA_VISIBLE_DEVICES is ignored: the devices are chosen by --include, "
                     "--exclude, --num_nodes or --num_gpus");
    }
    /* the user typed CUDA_VISIBLE_DEVICES, not the --include it is read as */
    char *cvd_as = include_cvd && po.include == include_cvd
                       ? dsl_xasprintf("CUDA_VISIBLE_DEVICES='%s' selects the local devices", cvd)
                       : NULL;
    po.include_as = cvd_as;
    if (p->nossh.on)
        po.num_gpus = -1; /* each node's count is its own (dsl_nossh_resolve_slots) */
    r = dsl_placement_build(&p->pl, &p->hf, &po, err);
    free(cvd_as);
    free(include_cvd);
    return r < 0 ? r : 0;
}

/* The program's argv as every rank runs it: a Python script through python3 -u, else
 * the program by name (dstrain's for "train"). */
static void plan_program(struct dsl_plan *p)
{
    const struct dsl_launch_opts *o = p->opts;
    if (!o->argv.nr)
        return;
    char *dir = dsl_xstrdup(p->self_exe);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    const char *first = o->argv.v[0];
    size_t flen = strlen(first);
    int python = !o->no_python &&
                 (o->module || (flen > 3 && !strcmp(first + flen - 3, ".py")));
    if (python) {
        /* as DeepSpeed runs a script: python3 -u SCRIPT --local_rank=N ARGS */
        dsl_strvec_push(&p->argv, "python3");
        dsl_strvec_push(&p->argv, "-u");
        if (o->module)
            dsl_strvec_push(&p->argv, "-m");
        else
            p->script = dsl_xstrdup(first);
        dsl_strvec_push(&p->argv, first);
    } else {
        dsl_strvec_push_nodup(&p->argv, dsl_plan_program_name(first, slash ? dir : NULL));
        /* "train" is dstrain: a program of the user's own by that name would be
         * replaced without a word (issue 33); say which runs, and how to run the other */
        int code;
        char rerr[DSL_ERR_LEN];
        char *mine = !strcmp(first, "train")
                         ? dsl_spawn_resolve("train", environ, NULL, &code, rerr)
                         : NULL;
        if (mine && o->verbose >= 1)
            dsl_info("'train' runs dslaunch's trainer '%s', not '%s' of your PATH; to "
                     "run that one, give its path: dslaunch [options] %s ...",
                     p->argv.v[p->argv.nr - 1], mine, mine);
        free(mine);
    }
    free(dir);
    if (python && !o->no_local_rank)
        p->local_rank_at = (int)p->argv.nr;
    for (size_t i = 1; i < o->argv.nr; i++)
        dsl_strvec_push(&p->argv, o->argv.v[i]);
    if (!p->local_rank_at && o->local_rank_arg)
        p->local_rank_at = (int)p->argv.nr;
}

/* What the transport needs of this machine and of the placement, before any host is
 * contacted. */
static int plan_check_transport(const struct dsl_plan *p, char *err)
{
    const struct dsl_launch_opts *o = p->opts;
    const struct dsl_placement *pl = &p->pl;
    if (pl->nr < o->min_nodes)
        return dsl_seterr(err, DSL_EUSAGE, "--min-nodes %d but the job has only %d node%s",
                          o->min_nodes, pl->nr, pl->nr == 1 ? "" : "s");
    /* a transport that runs a program of this machine: it must be here, before any
     * host is contacted (a missing pdsh looked like a failed agent, 204). It runs the
     * program its variable names when that is set (docs/multinode.md): check that one,
     * not the PATH's (a site's srun outside PATH was refused, and a misspelt variable
     * failed late, every host at once, as 204) */
    static const struct {
        enum dsl_launcher_kind kind;
        const char *prog, *pkg, *var;
    } tools[] = {{DSL_LAUNCHER_PDSH, "pdsh", "pdsh", "DSLAUNCH_PDSH"},
                 {DSL_LAUNCHER_OPENMPI, "mpirun", "openmpi-bin", "DSLAUNCH_MPIRUN"},
                 {DSL_LAUNCHER_SLURM, "srun", "slurm-client", "DSLAUNCH_SRUN"}};
    for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++) {
        if (o->launcher != tools[i].kind)
            continue;
        int code;
        char rerr[DSL_ERR_LEN];
        const char *named = getenv(tools[i].var);
        if (named && !*named)
            named = NULL;
        char *path = dsl_spawn_resolve(named ? named : tools[i].prog, environ, NULL, &code,
                                       rerr);
        if (!path && named)
            return dsl_seterr(err, DSL_EUSAGE, "--launcher %s runs %s='%.200s' instead of "
                              "'%s', but %s", dsl_plan_launcher_name(p), tools[i].var, named,
                              tools[i].prog, rerr);
        if (!path)
            return dsl_seterr(err, DSL_EUSAGE,
                              "--launcher %s needs '%s', which is not in PATH (Debian: apt "
                              "install %s), or use --launcher ssh, which needs nothing",
                              dsl_plan_launcher_name(p), tools[i].prog, tools[i].pkg);
        free(path);
    }
    const char *tname = dsl_plan_launcher_name(p);
    if (o->tr.launcher_args && (!strcmp(tname, "local") || !strcmp(tname, "ssh")))
        return dsl_seterr(err, DSL_EUSAGE, "--launcher_args passes options to a launcher "
                          "command (pdsh, mpirun, srun), but this job uses the %s transport, "
                          "which runs none%s: add --launcher pdsh, openmpi or slurm", tname,
                          !strcmp(tname, "ssh") ? " (the hosts are not a Slurm allocation's)"
                                                : "");
    /* srun starts every agent as the Slurm job's user: a login user cannot be honoured */
    if (!strcmp(dsl_plan_launcher_name(p), "slurm"))
        for (int i = 0; i < pl->nr; i++)
            if (pl->nodes[i].user)
                return dsl_seterr(err, DSL_EUSAGE, "the slurm transport starts the agents as "
                                  "the Slurm job's user, so the login user of '%s@%s' (%s) "
                                  "cannot be honoured: remove '%s@' from the hostfile, or use "
                                  "--launcher ssh", pl->nodes[i].user, pl->nodes[i].host,
                                  p->hosts_from, pl->nodes[i].user);
    return 0;
}

int dsl_plan_build(struct dsl_plan *p, char *err)
{
    const struct dsl_launch_opts *o = p->opts;
    int r;

    if ((r = dsl_plan_nossh(p, err)) < 0 || (r = plan_placement(p, err)) < 0)
        return r;

    /* export set */
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd)))
        return dsl_seterr(err, -errno, "cannot read the current directory: %s", strerror(errno));
    if ((r = dsl_envexport_build(&p->exported, environ, getenv("HOME"), cwd, o->exports.v,
                                 o->exports.nr, err)) < 0)
        return r;

    /* program */
    p->self_exe = self_exe();
    p->cwd = dsl_xstrdup(o->remote_cwd ? o->remote_cwd : cwd);
    set_all_local(p);
    plan_program(p);
    if ((r = plan_check_transport(p, err)) < 0)
        return r;
    first_rendezvous(p);
    return 0;
}

int dsl_plan_nossh(struct dsl_plan *p, char *err)
{
    if (p->nossh_done)
        return 0;
    int r = dsl_nossh_resolve(&p->nossh, p->opts, environ, err);
    if (r == 0 && p->nossh.on)
        r = dsl_nossh_resolve_slots(&p->nossh, p->opts, err);
    if (r == 0)
        p->nossh_done = 1;
    return r;
}

const char *dsl_plan_add_node(struct dsl_plan *p, const char *host, int slots)
{
    size_t k = p->hf.nr;
    char *name = dsl_xstrdup(host);
    for (size_t i = 0; i < p->hf.nr; i++)
        if (!strcmp(p->hf.hosts[i].name, name)) {
            free(name);
            name = dsl_xasprintf("%s#%zu", host, k);
            break;
        }
    dsl_hostfile_add(&p->hf, name, slots);
    free(name);
    return p->hf.hosts[k].name;
}

void dsl_plan_restart(struct dsl_plan *p, const unsigned char *drop)
{
    dsl_placement_drop(&p->pl, drop);
    set_all_local(p);
    first_rendezvous(p);
}

int dsl_plan_check_local_port(struct dsl_plan *p, int quiet, char *err)
{
    /* an all-local job's store listens on its master address (loopback unless
     * --master_addr says otherwise; store_server.c): probe there, so that not even the
     * probe binds every interface; a name or another host's address: all of them */
    const char *host = p->all_local ? p->master_addr : NULL;
    int fr = dsl_net_port_free(host, p->master_port);
    if (fr == -EINVAL || fr == -EADDRNOTAVAIL) {
        host = NULL;
        fr = dsl_net_port_free(host, p->master_port);
    }
    if (fr != 0)
        return 0;
    if (p->opts->master_port_given)
        return dsl_seterr(err, -EADDRINUSE, "master port %d is busy on this machine; choose "
                          "another with --master_port", p->master_port);
    int port = dsl_net_pick_port(host);
    if (port <= 0)
        return dsl_seterr(err, -EADDRINUSE, "master port %d is busy and no free port was found",
                          p->master_port);
    if (!quiet)
        dsl_info("master port %d is busy; using %d", p->master_port, port);
    p->master_port = port;
    return 0;
}
