/*
 * dslaunch's main(): a table of commands, the way git dispatches its builtins. The
 * first argument picks a command (doctor, sync, ssh-setup); anything else is a launch,
 * whose option parser also knows the agent mode (`dslaunch --agent`, agent/agent.h),
 * --help and --version. Each command is a library call; the launch reads top to bottom
 * as the data flow of docs/design.md:
 *
 *   options -> plan (plan/plan.c: hostfile, placement, export set, program, rendezvous)
 *     -> local checks (program, master port) -> --dry-run JSON | --emit (emit_plan.c)
 *     | --sync | the job (job.c), run again after a failure as --max-restarts says
 *     (job_restart.c)
 *
 * Nothing is started before every input has been validated, so a typo never leaves
 * half a job running.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/rankenv.h"
#include "dslaunch/agent/agent.h"
#include "dslaunch/job/job.h"
#include "dslaunch/job/nossh_node.h"
#include "dslaunch/job/restart.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/plan/options.h"
#include "dslaunch/plan/plan.h"
#include "dslaunch/remote/emit.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/tools/doctor.h"
#include "dslaunch/tools/sshsetup.h"
#include "dslaunch/tools/sync.h"
#include "dslaunch/common/banned.h"

extern char **environ;

/* --sync PATH: copy to every other host; the job starts only when all succeeded. */
static int sync_first(const struct dsl_launch_opts *opts, const struct dsl_placement *pl)
{
#ifdef DSL_HAVE_SSH_TRANSPORT
    struct dsl_strvec hosts;
    dsl_strvec_init(&hosts);
    for (int i = 0; i < pl->nr; i++)
        if (opts->launcher != DSL_LAUNCHER_LOCAL && !dsl_node_is_local(&pl->nodes[i])) {
            if (pl->nodes[i].user) /* sync logs in as the hostfile's user */
                dsl_strvec_pushf(&hosts, "%s@%s", pl->nodes[i].user, pl->nodes[i].host);
            else
                dsl_strvec_push(&hosts, pl->nodes[i].host);
        }
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

/* Checks that only this machine can make before an all-local job starts. */
static int check_local(struct dsl_plan *plan, char *err)
{
    const struct dsl_launch_opts *opts = plan->opts;
    if (plan->argv.nr && opts->mode != DSL_MODE_DRY_RUN) {
        int rc;
        char *path = dsl_spawn_resolve(plan->argv.v[0], environ, plan->cwd, &rc, err);
        if (!path)
            return rc == -EACCES ? DSL_EXIT_NOEXEC : DSL_EXIT_NOTFOUND;
        free(path);
        if (plan->script && (rc = dsl_spawn_check_script(plan->script, plan->cwd, err)) < 0)
            return rc == -EACCES ? DSL_EXIT_NOEXEC : DSL_EXIT_NOTFOUND;
    }
    if (dsl_plan_check_local_port(plan, opts->mode == DSL_MODE_DRY_RUN, err) < 0)
        return DSL_EXIT_USAGE;
    return 0;
}

/* --save_pid (DeepSpeed's): "/tmp/<pid>.ds" holds this launcher's pid while it runs.
 * Written to a temporary file (O_EXCL, no link followed) and renamed into place, so a
 * reader that sees the name sees the whole pid, never an empty file. */
static int save_pid(char **path, char *err)
{
    char *p = dsl_xasprintf("/tmp/%ld.ds", (long)getpid()), *tmp = NULL;
    int fd = dsl_file_create_temp(p, 0644, &tmp, err);
    if (fd < 0) {
        free(p);
        return fd;
    }
    errno = 0;
    int ok = dprintf(fd, "%ld\n", (long)getpid()) > 0;
    ok = !close(fd) && ok;
    if (!ok || rename(tmp, p)) {
        int e = errno ? errno : EIO;
        unlink(tmp);
        free(tmp);
        dsl_seterr(err, -e, "--save_pid: cannot write '%s': %s", p, strerror(e));
        free(p);
        return -e;
    }
    free(tmp);
    *path = p;
    return 0;
}

static int cmd_run(int argc, char **argv)
{
    struct dsl_launch_opts opts;
    struct dsl_plan plan;
    char err[DSL_ERR_LEN] = "";
    int code = DSL_EXIT_USAGE;

    dsl_launch_opts_init(&opts);
    dsl_plan_init(&plan, &opts);

    if (dsl_launch_opts_parse(&opts, argc, argv, err) < 0) {
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
        code = dsl_agent_run(&opts);
        goto out;
    default:
        break;
    }

    /* no-ssh mode: node K > 0 joins node 0; node 0 waits for the others, then plans */
    if (dsl_plan_nossh(&plan, err) < 0) {
        dsl_error("%s", err);
        goto out;
    }
    if (!opts.argv.nr && opts.mode != DSL_MODE_CHECK &&
        !(plan.nossh.on && plan.nossh.node_rank > 0)) {
        dsl_error("no program given (usage: dslaunch [options] PROGRAM [ARGS...]; only a "
                  "no-ssh node other than node 0 may leave it out)");
        goto out;
    }
    if (plan.nossh.on && opts.mode != DSL_MODE_DRY_RUN) {
        if (plan.nossh.node_rank > 0) {
            code = dsl_nossh_join(&plan);
            goto out;
        }
        if ((code = dsl_nossh_coordinate(&plan)) != 0)
            goto out;
        code = DSL_EXIT_USAGE;
    }
    if (plan.nossh.on && opts.emit) {
        dsl_error("--emit writes a batch script for a plan dslaunch starts itself; no-ssh "
                  "mode (--node_rank, --nnodes, PET_*) has every node start its own dslaunch");
        code = DSL_EXIT_USAGE;
        goto out;
    }
    /* --emit from a login node (no hostfile, no allocation): --num_nodes and --num_gpus
     * are what the script asks Slurm for, not a filter on this machine's slots */
    int emit_nodes = -1, emit_gpus = opts.num_gpus;
    if (opts.emit == DSL_EMIT_JOBSET ||
        (opts.emit && !opts.hostfile_given && !getenv("SLURM_JOB_ID"))) {
        emit_nodes = opts.num_nodes;
        opts.num_nodes = opts.num_gpus = -1;
    }
    if (dsl_plan_build(&plan, err) < 0) {
        dsl_error("%s", err);
        goto out;
    }
    if (plan.all_local && (code = check_local(&plan, err)) != 0) {
        dsl_error("%s", err);
        goto out;
    }
    if (dsl_plan_new_ids(&plan, err) < 0) {
        dsl_error("%s", err);
        code = DSL_EXIT_USAGE;
        goto out;
    }

    if (opts.emit) {
        code = dsl_emit_plan(&plan, argc, argv, emit_nodes, emit_gpus);
        goto out;
    }
    if (opts.mode == DSL_MODE_DRY_RUN) {
        dsl_plan_print_json(&plan, stdout);
        code = 0;
        goto out;
    }
    /* --check starts no rank: nothing to say about their threads */
    if (plan.all_local && opts.mode != DSL_MODE_CHECK &&
        !dsl_env_get(&plan.exported, DSL_ENV_OMP_NUM_THREADS) && !opts.bind_cores &&
        opts.verbose >= 1) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        int per = plan.pl.nodes[0].nslots;
        dsl_info("setting OMP_NUM_THREADS=%d for each rank (%ld CPU%s, %d local rank%s); "
                 "export it to choose another value", dsl_rankenv_omp_share(cpus, per), cpus,
                 cpus == 1 ? "" : "s", per, per == 1 ? "" : "s");
    }
    if (opts.sync_paths.nr && (code = sync_first(&opts, &plan.pl)) != 0)
        goto out;
    char *pidfile = NULL;
    if (opts.save_pid && save_pid(&pidfile, err) < 0) {
        dsl_error("%s", err);
        code = DSL_EXIT_USAGE;
        goto out;
    }
    code = dsl_restart_run(&plan);
    if (pidfile) {
        unlink(pidfile);
        free(pidfile);
    }

out:
    dsl_nossh_end();
    dsl_plan_release(&plan);
    dsl_launch_opts_release(&opts);
    return code;
}

#ifndef DSL_HAVE_SSH_TRANSPORT
static int no_ssh(int argc, char **argv)
{
    (void)argc;
    dsl_error("%s needs libssh (this dslaunch was built with DSL_WITH_SSH=OFF)", argv[0]);
    return DSL_EXIT_USAGE;
}
#define dsl_sync_main no_ssh
#define dsl_sshsetup_main no_ssh
#endif

/* The commands: argv[1] picks one; each gets argv from its own name on. */
static const struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
} commands[] = {
    {"doctor", dsl_doctor_main},
    {"sync", dsl_sync_main},
    {"ssh-setup", dsl_sshsetup_main},
};

int main(int argc, char **argv)
{
    dsl_log_mark("main"); /* since the exec: loading and dynamic linking */
    dsl_job_set_agent(dsl_agent_main); /* the local nodes' agent, for run and doctor */
    if (argc > 1)
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
            if (!strcmp(argv[1], commands[i].name))
                return commands[i].fn(argc - 1, argv + 1);
    int code = cmd_run(argc, argv);
    dsl_log_mark("exit");
    return code;
}
