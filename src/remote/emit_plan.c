/*
 * --dry-run --emit sbatch|jobset: the plan written as a Slurm batch script (emit.c) or a
 * Kubernetes JobSet (emit_jobset.c), on stdout or into a new file. The file is created
 * with O_EXCL and removed again when anything fails, so half a script is never left to
 * be submitted; the notes that follow say what the script could not know here.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/plan/options.h"
#include "dslaunch/plan/plan.h"
#include "dslaunch/proto/exitcode.h"
#include "dslaunch/remote/emit.h"
#include "dslaunch/common/banned.h"

/* the options the pods' dslaunch does not take from this command line: the emit, the
 * choice of hosts, and the no-ssh settings the manifest writes itself */
static const char *const not_in_jobset[] = {
    "dry_run", "emit", "image", "hostfile", "include", "exclude", "num_nodes", "num_gpus",
    "nproc_per_node", "launcher", "launcher_args", "master_addr", "master_port",
    "force_multi", "no_ssh", "nnodes", "node_rank", "job_secret_file", "remote_dslaunch",
    "remote_cwd", "sync", "num_processes", "num_machines", "machine_rank", "main_process_ip",
    "main_process_port", NULL};

/* --emit jobset: nodes pods (--num_nodes, 1 below 1) of gpus ranks each (--num_gpus or
 * --nproc_per_node; none: each pod counts its own), asking for GPUs only for a GPU job */
static int jobset_manifest(const struct dsl_plan *plan, int argc, char **argv, int nodes,
                           int gpus, struct dsl_dynbuf *out, char *err)
{
    const struct dsl_launch_opts *o = plan->opts;
    char name[DSL_JOBSET_NAME_MAX + 8];
    struct dsl_strvec words, env;
    dsl_strvec_init(&words);
    dsl_strvec_init(&env);
    dsl_jobset_name(o->argv.v[0], name, sizeof(name));
    dsl_launch_opts_forward(argc, argv, not_in_jobset, &words);
    dsl_strvec_push(&words, "--");
    for (size_t k = 0; k < o->argv.nr; k++)
        dsl_strvec_push(&words, o->argv.v[k]);
    for (size_t k = 0; k < plan->exported.nr; k++) /* never the secret's value */
        if (strncmp(plan->exported.v[k], DSL_ENV_JOB_SECRET "=",
                    strlen(DSL_ENV_JOB_SECRET) + 1) != 0)
            dsl_strvec_push(&env, plan->exported.v[k]);
    const char *gpu_note;
    int asks_gpus = dsl_jobset_asks_gpus(gpus, o->nproc_per_node, plan->no_devices, &gpu_note);
    struct dsl_jobset_req rq = {
        .name = name,
        .image = o->image,
        .nodes = nodes > 0 ? nodes : 1,
        .slots = gpus > 0 ? gpus : 0,
        .gpus = asks_gpus,
        .gpu_note = gpu_note,
        .master_port = o->master_port,
        .control_port = o->control_port,
        .env = (const char *const *)env.v,
        .argv = (const char *const *)words.v,
    };
    int r = dsl_emit_jobset(&rq, out, err);
    dsl_strvec_release(&words);
    dsl_strvec_release(&env);
    return r;
}

/* --dry-run --emit sbatch[=FILE]: the plan as a batch script, on stdout or in a new
 * file (O_EXCL: an existing file, or a link planted at the name, is an error) */
int dsl_emit_plan(const struct dsl_plan *plan, int argc, char **argv, int nodes, int gpus)
{
    char err[DSL_ERR_LEN] = "";
    struct dsl_emit_req rq;
    struct dsl_emit_store st;
    struct dsl_dynbuf out;
    int code = DSL_EXIT_USAGE, fd = 1;
    dsl_dynbuf_init(&out, (size_t)1 << 26);
    dsl_emit_req_from_plan(plan, argc, argv, nodes, gpus, &rq, &st);
    int jobset = plan->opts->emit == DSL_EMIT_JOBSET;
    if (jobset ? jobset_manifest(plan, argc, argv, nodes, gpus, &out, err) < 0
               : dsl_emit_sbatch(&rq, &out, err) < 0)
        goto out;
    const char *file = plan->opts->emit_file;
    if (file && (fd = dsl_file_create(AT_FDCWD, file, file, 0755, DSL_FILE_FAIL, err)) < 0)
        goto out;
    const char *s = dsl_dynbuf_str(&out);
    size_t left = strlen(s);
    while (left) {
        ssize_t w = write(fd, s, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            snprintf(err, DSL_ERR_LEN, "cannot write the %s to '%s': %s",
                     jobset ? "JobSet" : "batch script", file ? file : "stdout",
                     strerror(errno));
            goto out;
        }
        s += w;
        left -= (size_t)w;
    }
    if (file && close(fd) < 0) {
        fd = -1;
        snprintf(err, DSL_ERR_LEN, "cannot write the %s to '%s': %s",
                 jobset ? "JobSet" : "batch script", file, strerror(errno));
        goto out;
    }
    fd = -1;
    code = 0;
    if (file && plan->opts->verbose >= 1 && jobset)
        dsl_info("wrote the JobSet '%s' (make its Secret, then: kubectl apply -f %s)", file,
                 file);
    else if (file && plan->opts->verbose >= 1)
        dsl_info("wrote the batch script '%s' (submit it with: sbatch %s)", file, file);
    if (!jobset && rq.requeue && !rq.resumes && plan->opts->verbose >= 1)
        dsl_info("the ranks save on Slurm's warning but do not resume: the script requeues "
                 "the job on exit 138, but its next start begins afresh (dstrain: add "
                 "--resume auto)");
    if (!jobset && rq.gpus_unknown && plan->opts->verbose >= 1)
        dsl_info("the batch script asks for GPUs (--num_gpus), but whether the cluster has "
                 "any could not be told (its comments say why): for a CPU cluster, use "
                 "--nproc_per_node instead");
    if (!jobset && rq.signal_unknown && plan->opts->verbose >= 1)
        dsl_info("the batch script asks Slurm for no warning signal: whether the ranks save "
                 "a checkpoint on SIGUSR1 could not be known here (its comments say why)");
out:
    if (file && fd > 1) {
        close(fd);
        unlink(file); /* half a script must not be submitted */
    }
    if (code)
        dsl_error("%s", err);
    dsl_emit_req_release(&st);
    dsl_dynbuf_release(&out);
    return code;
}
