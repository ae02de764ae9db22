/*
 * A Slurm allocation as a hostfile (allocation.h). Pure: reads the environment, no
 * process and no name lookup, so `--dry-run` shows exactly what a run would use. The
 * host list and the tasks-per-node list are parsed by common/ (the ranks under srun
 * read the same lists); this file checks that they agree and that every name would
 * pass as a hostfile entry.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/hostrange.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/rankenv.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "allocation.h"
#include "dslaunch/plan/hostfile.h"
#include "dslaunch/common/banned.h"

static const char *env(const char *name)
{
    const char *s = getenv(name);
    return s && *s ? s : NULL;
}

/* "[TYPE:]N[,[TYPE:]N...]" (--gpus-per-node, --gpus): the sum of the counts; 0, or -1
 * for a list that does not parse */
static int gpu_count(const char *s)
{
    long total = 0;
    while (*s) {
        size_t n = strcspn(s, ",");
        char item[64];
        if (n == 0 || n >= sizeof(item))
            return -1;
        memcpy(item, s, n);
        item[n] = '\0';
        const char *colon = strrchr(item, ':');
        int g;
        if (dsl_parse_int(colon ? colon + 1 : item, 1, DSL_HOSTFILE_MAX_SLOTS, &g) < 0)
            return -1;
        total += g;
        if (total > DSL_HOSTFILE_MAX_SLOTS)
            return -1;
        s += n + (s[n] == ',');
        if (s[-1] == ',' && !*s)
            return -1;
    }
    return (int)total;
}

/*
 * The GPUs of every node, first match wins (Slurm 22.05 sets these; docs/slurm.md):
 *   SLURM_GPUS_PER_NODE  --gpus-per-node=[TYPE:]N (salloc, sbatch and the steps)
 *   SLURM_GPUS           --gpus=N, the job's total: one node has them all; on more
 *                        nodes Slurm spreads them as it likes (3 on 2 nodes: 2 and 1),
 *                        which no variable tells the launcher: an error unless
 *                        --num_gpus says how many every node has
 *   SLURM_GPUS_ON_NODE   --gres=gpu:N (per node, so the same on every node): set in the
 *                        batch script and in steps, not in salloc's shell
 *   --num_gpus N         the user's word for it (salloc --gres=gpu:N sets nothing)
 * *gpus 0: no GPU information, the slots are the tasks.
 */
static int gpu_slots(size_t nodes, int num_gpus, int *gpus, const char **src, char *err)
{
    static const char *const vars[] = {"SLURM_GPUS_PER_NODE", "SLURM_GPUS",
                                       "SLURM_GPUS_ON_NODE"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = env(vars[i]);
        if (!v)
            continue;
        int g = gpu_count(v);
        if (g < 1)
            return dsl_seterr(err, DSL_EHOSTFILE, "Slurm allocation: bad %s '%.40s' "
                              "(expected [TYPE:]N, N 1..%d)", vars[i], v,
                              DSL_HOSTFILE_MAX_SLOTS);
        if (i == 1 && nodes > 1) {
            if (num_gpus > 0)
                break;
            return dsl_seterr(err, DSL_EHOSTFILE, "Slurm allocation: --gpus=%.40s "
                              "(SLURM_GPUS) does not say how many GPUs each of the %zu nodes "
                              "got; ask Slurm with --gpus-per-node, or give --num_gpus", v,
                              nodes);
        }
        *gpus = g;
        *src = vars[i];
        return 0;
    }
    if (num_gpus > 0) {
        *gpus = num_gpus;
        *src = "--num_gpus";
    }
    return 0;
}

int dsl_allocation_load(struct dsl_hostfile *hf, int num_gpus, char *desc, size_t desclen,
                        char *err)
{
    const char *job = env("SLURM_JOB_ID"), *list = env("SLURM_JOB_NODELIST");
    const char *tpn = env("SLURM_TASKS_PER_NODE");
    struct dsl_strvec hosts;
    int *tasks = NULL;
    char e[DSL_ERR_LEN];
    int r = 0, nodes = 0;
    long total = 0;

    if (!job || !list)
        return 0;
    dsl_strvec_init(&hosts);
    if (dsl_hostlist_expand(list, &hosts, e) < 0) {
        r = dsl_seterr(err, DSL_EHOSTFILE, "Slurm allocation: SLURM_JOB_NODELIST: %s", e);
        goto out;
    }
    /* GPUs: a GPU is a slot, on every node alike (the usual one task per node with a
     * launcher that starts the ranks); see gpu_slots() for where the count comes from */
    char gtpn[48];
    const char *gsrc = NULL;
    int gpus = 0;
    if ((r = gpu_slots(hosts.nr, num_gpus, &gpus, &gsrc, err)) < 0)
        goto out;
    r = 0;
    if (gpus > 0) {
        snprintf(gtpn, sizeof(gtpn), "%d(x%zu)", gpus, hosts.nr);
        tpn = gtpn;
    }
    if (!tpn) {
        r = dsl_seterr(err, DSL_EHOSTFILE, "Slurm allocation of job %.20s: SLURM_TASKS_PER_NODE "
                       "is not set (give --hostfile)", job);
        goto out;
    }
    if (dsl_rankenv_tasks_nodes(tpn, &nodes, e) < 0) {
        r = dsl_seterr(err, DSL_EHOSTFILE, "Slurm allocation: SLURM_TASKS_PER_NODE: %s", e);
        goto out;
    }
    if ((size_t)nodes != hosts.nr) {
        /* in a job step srun sets SLURM_TASKS_PER_NODE to the step's own tasks (srun -N1
         * -n1 dslaunch, srun --nodes=1 --pty bash) and leaves the job's node list: say
         * so, and how to go on, rather than leave the two lists to be puzzled over */
        const char *step = env("SLURM_STEP_ID");
        char why[400] = "";
        if (step)
            snprintf(why, sizeof(why), ": dslaunch runs in step %.12s of job %.20s, and srun "
                     "sets SLURM_TASKS_PER_NODE to that step's tasks; start it from the "
                     "allocation's own shell (salloc, sbatch) or a step over all its nodes, "
                     "or give every node N slots with --num_gpus N", step, job);
        r = dsl_seterr(err, DSL_EHOSTFILE, "Slurm allocation: SLURM_TASKS_PER_NODE '%.60s' has "
                       "%d node%s but SLURM_JOB_NODELIST '%.60s' has %zu%s", tpn, nodes,
                       nodes == 1 ? "" : "s", list, hosts.nr, why);
        goto out;
    }
    /* one pass over each list: per node, both would be quadratic */
    tasks = dsl_xmalloc(hosts.nr * sizeof(*tasks));
    if (dsl_rankenv_tasks_all(tpn, tasks, nodes, e) < 0)
        DSL_BUG("tasks-per-node list changed between two reads");
    size_t twice = dsl_host_names_first_repeat(hosts.v, hosts.nr);
    for (size_t i = 0; i < hosts.nr; i++) {
        int slots = tasks[i];
        if (!dsl_host_name_valid(hosts.v[i])) {
            r = dsl_seterr(err, DSL_EHOSTFILE, "Slurm allocation: SLURM_JOB_NODELIST '%.60s': "
                           "bad host name '%.60s'", list, hosts.v[i]);
            goto out;
        }
        if (i == twice) {
            r = dsl_seterr(err, DSL_EHOSTFILE, "Slurm allocation: SLURM_JOB_NODELIST '%.60s' "
                           "names '%.60s' twice", list, hosts.v[i]);
            goto out;
        }
        if (slots < 1 || slots > DSL_HOSTFILE_MAX_SLOTS) {
            r = dsl_seterr(err, DSL_EHOSTFILE, "Slurm allocation: SLURM_TASKS_PER_NODE '%.60s' "
                           "gives node '%.60s' %d tasks (expected 1..%d)", tpn, hosts.v[i],
                           slots, DSL_HOSTFILE_MAX_SLOTS);
            goto out;
        }
        dsl_hostfile_add(hf, hosts.v[i], slots);
        total += slots;
    }
    snprintf(desc, desclen, "Slurm job %.20s: %.80s%s, %ld slot%s%s%s%s", job, list,
             strlen(list) > 80 ? "..." : "", total, total == 1 ? "" : "s",
             gsrc ? " (" : "", gsrc ? gsrc : "", gsrc ? ")" : "");
    r = 1;
out:
    if (r < 0) {
        dsl_hostfile_release(hf);
        dsl_hostfile_init(hf);
    }
    free(tasks);
    dsl_strvec_release(&hosts);
    return r;
}
