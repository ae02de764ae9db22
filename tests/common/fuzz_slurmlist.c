/* libFuzzer target: arbitrary bytes as the two Slurm lists a rank reads, a host list
 * (SLURM_STEP_NODELIST) and a tasks-per-node list (SLURM_STEP_TASKS_PER_NODE). The
 * input is split at its first newline: host list before, tasks-per-node list after.
 * Each either fails with a message naming the list (or its one range) and appends nothing, or yields
 * non-empty names / a node count whose every node has a task count. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/hostrange.h"
#include "dslaunch/common/rankenv.h"
#include "dslaunch/common/strvec.h"
#include "fuzz_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_text(data, size), err[DSL_ERR_LEN];
    char *nl = strchr(s, '\n');
    const char *tpn = "";
    if (nl) {
        *nl = '\0';
        tpn = nl + 1;
    }
    struct dsl_strvec v;
    dsl_strvec_init(&v);
    if (dsl_hostlist_expand(s, &v, err) < 0) {
        if (v.nr != 0 || strncmp(err, "bad host ", 9) != 0)
            abort();
    } else {
        if (v.nr == 0 || v.nr > DSL_HOSTRANGE_MAX_HOSTS)
            abort();
        for (size_t i = 0; i < v.nr; i++)
            if (!v.v[i][0] && !strchr(s, '[')) /* only "[...]"-only items may be empty */
                abort();
    }
    dsl_strvec_release(&v);
    int nodes = -1, t = -1;
    if (dsl_rankenv_tasks_nodes(tpn, &nodes, err) < 0) {
        if (!strstr(err, "tasks-per-node list"))
            abort();
    } else {
        if (nodes < 1)
            abort();
        if (dsl_rankenv_tasks_on_node(tpn, nodes - 1, &t, err) < 0 || t < 0 ||
            dsl_rankenv_tasks_on_node(tpn, nodes, &t, err) == 0)
            abort();
    }
    free(s);
    return 0;
}
