/*
 * dslaunch's top level: turn the command line into a plan, then print it (--dry-run) or
 * run it (job.c). Each step consumes the previous step's struct:
 *
 *   options -> hostfile (given, /job/hostfile, or localhost with its local slots)
 *     -> placement (--include/--exclude/--num_nodes/--num_gpus, CUDA_VISIBLE_DEVICES)
 *     -> export set (prefixes, env files, --export) -> program (resolved, checked)
 *     -> master port, run id and token -> dry-run JSON | dsl_job_run()
 *
 * Nothing is started before every input has been validated, so a typo never leaves
 * half a job running.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dslaunch/agent.h"
#include "dslaunch/connectback.h"
#include "dslaunch/doctor.h"
#include "dslaunch/envexport.h"
#include "dslaunch/hostfile.h"
#include "dslaunch/job.h"
#include "dslaunch/launch.h"
#include "dslaunch/log.h"
#include "dslaunch/net.h"
#include "dslaunch/options.h"
#include "dslaunch/parse.h"
#include "dslaunch/placement.h"
#include "dslaunch/spawn.h"
#include "dslaunch/sshsetup.h"
#include "dslaunch/sync.h"
#include "dslaunch/xalloc.h"
#include "common/banned.h"

extern char **environ;

/* --sync PATH: copy to every other host; the job starts only when all succeeded. */
static int sync_first(const struct dsl_launch_opts *opts, const struct dsl_placement *pl)
{
#ifdef DSL_HAVE_SSH_TRANSPORT
    struct dsl_strvec hosts;
    dsl_strvec_init(&hosts);
    for (int i = 0; i < pl->nr; i++)
        if (opts->launcher != DSL_LAUNCHER_LOCAL && !dsl_host_is_local(pl->nodes[i].host))
            dsl_strvec_push(&hosts, pl->nodes[i].host);
    struct dsl_sync_opts so = {
        .paths = opts->sync_paths.v,
        .npaths = opts->sync_paths.nr,
        .fanout = opts->fanout,
        .verbose = opts->verbose >= 1 ? 0 : -1, /* the per-host summary unless -q */
        .tr = opts->tr,
    };
    int rc = hosts.nr ? dsl_sync_run(&so, hosts.v, hosts.nr) : 0;
    dsl_strvec_release(&hosts);
    if (rc < 0)
        dsl_error("--sync failed; the job was not started");
    return dsl_sync_exit_code(rc);
#else
    (void)pl;
    (void)opts;
    dsl_error("--sync needs a build with libssh (DSL_WITH_SSH)");
    return DSL_EXIT_USAGE;
#endif
}

#define DEFAULT_HOSTFILE "/job/hostfile"

static char *self_exe(void)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0)
        return dsl_xstrdup("dslaunch");
    buf[n] = '\0';
    return dsl_xstrdup(buf);
}

char *dsl_launch_program_name(const char *prog, const char *self_dir)
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

static void random_hex(char *out, size_t nbytes)
{
    unsigned char raw[64];
    if (nbytes > sizeof(raw))
        nbytes = sizeof(raw);
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, raw, nbytes) : -1;
    if (fd >= 0)
        close(fd);
    if (got != (ssize_t)nbytes) {
        /* no urandom: still unique enough to scope a job, not secret */
        unsigned long x = (unsigned long)getpid() * 2654435761u ^ (unsigned long)dsl_now();
        for (size_t i = 0; i < nbytes; i++) {
            x = x * 6364136223846793005ul + 1442695040888963407ul;
            raw[i] = (unsigned char)(x >> 33);
        }
    }
    for (size_t i = 0; i < nbytes; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

static int load_hostfile(const struct dsl_launch_opts *o, struct dsl_hostfile *hf, int *synth,
                         char *err)
{
    *synth = 0;
    if (o->hostfile)
        return dsl_hostfile_load(hf, o->hostfile, err);
    if (access(DEFAULT_HOSTFILE, F_OK) == 0)
        return dsl_hostfile_load(hf, DEFAULT_HOSTFILE, err);
    int slots;
    int r = dsl_local_slots(&slots, err);
    if (r < 0)
        return r;
    dsl_hostfile_add(hf, "localhost", slots);
    *synth = 1;
    return 0;
}

static const char *launcher_name(const struct dsl_job *job)
{
    switch (job->opts->launcher) {
    case DSL_LAUNCHER_LOCAL: return "local";
    case DSL_LAUNCHER_SSH: return "ssh";
    case DSL_LAUNCHER_PDSH: return "pdsh";
    case DSL_LAUNCHER_OPENMPI: return "openmpi";
    case DSL_LAUNCHER_AUTO: break;
    }
    return job->all_local ? "local" : "ssh";
}

static void print_dry_run(const struct dsl_job *job)
{
    const struct dsl_placement *pl = job->pl;
    cJSON *o = cJSON_CreateObject();
    cJSON *wi = cJSON_AddArrayToObject(o, "world_info");
    for (int i = 0; i < pl->nr; i++) {
        cJSON *h = cJSON_CreateObject();
        cJSON_AddStringToObject(h, "host", pl->nodes[i].host);
        cJSON_AddItemToObject(h, "slots", cJSON_CreateIntArray(pl->nodes[i].slots,
                                                               pl->nodes[i].nslots));
        cJSON_AddItemToArray(wi, h);
    }
    cJSON_AddNumberToObject(o, "world_size", pl->world_size);
    cJSON_AddStringToObject(o, "master_addr", job->master_addr);
    cJSON_AddNumberToObject(o, "master_port", job->master_port);
    cJSON_AddStringToObject(o, "launcher", launcher_name(job));
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
    for (size_t i = 0; i < job->exported.nr; i++) {
        const char *kv = job->exported.v[i];
        const char *eq = strchr(kv, '=');
        if (!eq)
            continue;
        char *key = dsl_xstrndup(kv, (size_t)(eq - kv));
        cJSON_AddStringToObject(env, key, eq + 1);
        free(key);
    }
    cJSON *argv = cJSON_AddArrayToObject(o, "argv");
    for (size_t i = 0; i < job->argv.nr; i++)
        cJSON_AddItemToArray(argv, cJSON_CreateString(job->argv.v[i]));
    char *s = cJSON_Print(o);
    fputs(s, stdout);
    fputc('\n', stdout);
    cJSON_free(s);
    cJSON_Delete(o);
}

int dsl_launch_plan(struct dsl_job *job, struct dsl_hostfile *hf, struct dsl_placement *pl,
                    char *err)
{
    const struct dsl_launch_opts *o = job->opts;
    char *include_cvd = NULL;
    int r, synth = 0;

    /* hostfile -> placement */
    if ((r = load_hostfile(o, hf, &synth, err)) < 0)
        return r;
    struct dsl_placement_opts po = {
        .include = o->include,
        .exclude = o->exclude,
        .num_nodes = o->num_nodes,
        .num_gpus = o->num_gpus,
    };
    if (synth) {
        /* DeepSpeed: with no hostfile, CUDA_VISIBLE_DEVICES selects the local devices */
        r = dsl_placement_cuda_visible(getenv("CUDA_VISIBLE_DEVICES"), &po, &include_cvd, err);
        if (r < 0)
            return r;
        if (r == 1)
            po.include = include_cvd;
        else if (r == 2)
            dsl_info("CUDA_VISIBLE_DEVICES is ignored: the devices are chosen by --include, "
                     "--exclude, --num_nodes or --num_gpus");
    }
    r = dsl_placement_build(pl, hf, &po, err);
    free(include_cvd);
    if (r < 0)
        return r;

    /* export set */
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd)))
        return dsl_seterr(err, -errno, "cannot read the current directory: %s", strerror(errno));
    if ((r = dsl_envexport_build(&job->exported, environ, getenv("HOME"), cwd, o->exports.v,
                                 o->exports.nr, err)) < 0)
        return r;

    /* program */
    job->self_exe = self_exe();
    job->cwd = dsl_xstrdup(o->remote_cwd ? o->remote_cwd : cwd);
    job->all_local = 1;
    for (int i = 0; i < pl->nr; i++)
        if (o->launcher != DSL_LAUNCHER_LOCAL && !dsl_host_is_local(pl->nodes[i].host))
            job->all_local = 0;
    if (o->argv.nr) {
        char *dir = dsl_xstrdup(job->self_exe);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        char *prog = dsl_launch_program_name(o->argv.v[0], slash ? dir : NULL);
        free(dir);
        dsl_strvec_push_nodup(&job->argv, prog);
        for (size_t i = 1; i < o->argv.nr; i++)
            dsl_strvec_push(&job->argv, o->argv.v[i]);
    }

    /* rendezvous: a first choice; multi-node jobs get theirs from the probe */
    job->master_port = o->master_port;
    if (o->master_addr)
        job->master_addr = dsl_xstrdup(o->master_addr);
    else if (job->all_local)
        job->master_addr = dsl_xstrdup("127.0.0.1");
    else
        job->master_addr = dsl_xstrdup(pl->nodes[0].host);
    return 0;
}

int dsl_launch_main(int argc, char **argv)
{
    struct dsl_launch_opts opts;
    struct dsl_hostfile hf;
    struct dsl_placement pl;
    struct dsl_job job;
    char err[DSL_ERR_LEN] = "";
    int code = DSL_EXIT_USAGE, r;

#ifdef DSL_HAVE_SSH_TRANSPORT
    if (argc > 1 && !strcmp(argv[1], "sync"))
        return dsl_sync_main(argc - 1, argv + 1);
#endif
    if (argc > 1 && !strcmp(argv[1], "doctor"))
        return dsl_doctor_main(argc - 1, argv + 1);
#ifdef DSL_HAVE_SSH_TRANSPORT
    if (argc > 1 && !strcmp(argv[1], "ssh-setup"))
        return dsl_sshsetup_main(argc - 1, argv + 1);
#else
    if (argc > 1 && !strcmp(argv[1], "ssh-setup")) {
        dsl_error("ssh-setup needs libssh (this dslaunch was built with DSL_WITH_SSH=OFF)");
        return DSL_EXIT_USAGE;
    }
#endif
    dsl_launch_opts_init(&opts);
    dsl_hostfile_init(&hf);
    dsl_placement_init(&pl);
    dsl_job_init(&job, &opts, &pl);

    if ((r = dsl_launch_opts_parse(&opts, argc, argv, err)) < 0) {
        dsl_error("%s", err);
        goto out;
    }
    dsl_log_set_level(opts.verbose);
    switch (opts.mode) {
    case DSL_MODE_HELP:
        dsl_launch_opts_help(stdout);
        code = 0;
        goto out;
    case DSL_MODE_VERSION:
        printf("dslaunch %s (control protocol %d)\n", DSL_VERSION, DSL_PROTO_VERSION);
        code = 0;
        goto out;
    case DSL_MODE_AGENT:
        if (opts.agent_connect) {
            int fd;
            if ((r = dsl_agent_connect_back(opts.agent_connect, opts.agent_token, &fd, err)) < 0) {
                dsl_error("%s", err);
                code = DSL_EXIT_UNREACHABLE;
                goto out;
            }
            code = dsl_agent_main(fd, fd);
            close(fd);
        } else {
            code = dsl_agent_main(0, 1);
        }
        goto out;
    default:
        break;
    }

    if ((r = dsl_launch_plan(&job, &hf, &pl, err)) < 0) {
        dsl_error("%s", err);
        goto out;
    }
    if (job.all_local && job.argv.nr && opts.mode != DSL_MODE_DRY_RUN) {
        int rc;
        char *path = dsl_spawn_resolve(job.argv.v[0], environ, job.cwd, &rc, err);
        if (!path) {
            dsl_error("%s", err);
            code = rc == -EACCES ? DSL_EXIT_NOEXEC : DSL_EXIT_NOTFOUND;
            goto out;
        }
        free(path);
    }

    if (job.all_local) {
        int fr = dsl_net_port_free(NULL, job.master_port);
        if (fr == 0 && opts.master_port_given) {
            dsl_error("master port %d is busy on this machine; choose another with "
                      "--master_port", job.master_port);
            goto out;
        }
        if (fr == 0) {
            int fd = dsl_net_listen(NULL, 0, 1, NULL);
            int port = fd >= 0 ? dsl_net_local_port(fd) : -1;
            if (fd >= 0)
                close(fd);
            if (port <= 0) {
                dsl_error("master port %d is busy and no free port was found", job.master_port);
                goto out;
            }
            if (opts.mode != DSL_MODE_DRY_RUN)
                dsl_info("master port %d is busy; using %d", job.master_port, port);
            job.master_port = port;
        }
    }
    random_hex(job.run_id, 6);
    random_hex(job.token, 16);

    if (opts.mode == DSL_MODE_DRY_RUN) {
        print_dry_run(&job);
        code = 0;
        goto out;
    }
    if (job.all_local && !dsl_env_get(&job.exported, "OMP_NUM_THREADS") && opts.verbose >= 1) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        int per = pl.nodes[0].nslots;
        long t = cpus / (per ? per : 1);
        dsl_info("setting OMP_NUM_THREADS=%ld for each rank (%ld CPUs, %d local ranks); "
                 "export it to choose another value", t < 1 ? 1 : t, cpus, per);
    }
    if (opts.sync_paths.nr && (code = sync_first(&opts, &pl)) != 0)
        goto out;
    code = dsl_job_run(&job);

out:
    dsl_job_release(&job);
    dsl_placement_release(&pl);
    dsl_hostfile_release(&hf);
    dsl_launch_opts_release(&opts);
    return code;
}
