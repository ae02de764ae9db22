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
#include "allocation.h"
#include "dslaunch/plan/hostfile.h"
#include "dslaunch/common/banned.h"

static const char *env(const char *name)
{
    const char *s = getenv(name);
    return s && *s ? s : NULL;
}

int dsl_allocation_load(struct dsl_hostfile *hf, char *desc, size_t desclen, char *err)
{
    const char *job = env("SLURM_JOB_ID"), *list = env("SLURM_JOB_NODELIST");
    const char *tpn = env("SLURM_TASKS_PER_NODE");
    struct dsl_strvec hosts;
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
    /* --gpus-per-node: a GPU is a slot, on every node alike (the usual one task per node
     * with a launcher that starts the ranks) */
    const char *gpn = env("SLURM_GPUS_PER_NODE");
    char gtpn[48];
    if (gpn) {
        const char *colon = strrchr(gpn, ':');
        int gpus;
        if (dsl_parse_int(colon ? colon + 1 : gpn, 1, DSL_HOSTFILE_MAX_SLOTS, &gpus) < 0) {
            r = dsl_seterr(err, DSL_EHOSTFILE, "Slurm allocation: bad SLURM_GPUS_PER_NODE "
                           "'%.40s' (expected [TYPE:]N, N 1..%d)", gpn, DSL_HOSTFILE_MAX_SLOTS);
            goto out;
        }
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
        r = dsl_seterr(err, DSL_EHOSTFILE, "Slurm allocation: SLURM_TASKS_PER_NODE '%.60s' has "
                       "%d node%s but SLURM_JOB_NODELIST '%.60s' has %zu", tpn, nodes,
                       nodes == 1 ? "" : "s", list, hosts.nr);
        goto out;
    }
    for (size_t i = 0; i < hosts.nr; i++) {
        int slots = 0;
        if (!dsl_host_name_valid(hosts.v[i])) {
            r = dsl_seterr(err, DSL_EHOSTFILE, "Slurm allocation: SLURM_JOB_NODELIST '%.60s': "
                           "bad host name '%.60s'", list, hosts.v[i]);
            goto out;
        }
        if (dsl_hostfile_find(hf, hosts.v[i])) {
            r = dsl_seterr(err, DSL_EHOSTFILE, "Slurm allocation: SLURM_JOB_NODELIST '%.60s' "
                           "names '%.60s' twice", list, hosts.v[i]);
            goto out;
        }
        if (dsl_rankenv_tasks_on_node(tpn, (int)i, &slots, e) < 0)
            DSL_BUG("tasks-per-node list changed between two reads");
        if (slots < 1 || slots > DSL_HOSTFILE_MAX_SLOTS) {
            r = dsl_seterr(err, DSL_EHOSTFILE, "Slurm allocation: SLURM_TASKS_PER_NODE '%.60s' "
                           "gives node '%.60s' %d tasks (expected 1..%d)", tpn, hosts.v[i],
                           slots, DSL_HOSTFILE_MAX_SLOTS);
            goto out;
        }
        dsl_hostfile_add(hf, hosts.v[i], slots);
        total += slots;
    }
    snprintf(desc, desclen, "Slurm job %.20s: %.80s%s, %ld slot%s%s", job, list,
             strlen(list) > 80 ? "..." : "", total, total == 1 ? "" : "s",
             gpn ? " (SLURM_GPUS_PER_NODE)" : "");
    r = 1;
out:
    if (r < 0) {
        dsl_hostfile_release(hf);
        dsl_hostfile_init(hf);
    }
    dsl_strvec_release(&hosts);
    return r;
}
