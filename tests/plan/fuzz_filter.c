/* libFuzzer target: --include/--exclude strings and --num_nodes/--num_gpus values
 * against a fixed hostfile. The first byte picks the mode; the rest is the filter.
 * Every successful placement must be consistent: hostfile order, ascending unique
 * slots that the host has, contiguous ranks, a world-info JSON and base64. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/plan/hostfile.h"
#include "dslaunch/plan/placement.h"
#include "dslaunch/common/xalloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char hosts[] = "worker-0 slots=4\nworker-1 slots=4\nworker-2 slots=2\n"
                            "node[01-03] slots=8\nlocalhost slots=1\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct dsl_hostfile hf;
    static int loaded;
    char err[DSL_ERR_LEN];
    if (!loaded) {
        dsl_hostfile_init(&hf);
        if (dsl_hostfile_parse(&hf, "fixed", hosts, sizeof(hosts) - 1, err) < 0)
            abort();
        loaded = 1;
    }
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    char *spec = dsl_xstrndup((const char *)data + 1, size - 1);
    struct dsl_placement_opts o = {NULL, NULL, -1, -1, NULL};
    switch (mode & 3) {
    case 0: o.include = spec; break;
    case 1: o.exclude = spec; break;
    case 2: o.include = spec; o.exclude = spec; break;
    case 3: break;
    }
    /* bits 2-4: num_nodes (-1..6), bits 5-7: num_gpus (-1..6); 0 tests the <1 error */
    o.num_nodes = ((mode >> 2) & 7) - 1;
    o.num_gpus = ((mode >> 5) & 7) - 1;
    struct dsl_placement pl;
    int r = dsl_placement_build(&pl, &hf, &o, err);
    if (r < 0) {
        if (pl.nr != 0 || pl.nodes != NULL || err[0] == '\0')
            abort();
        free(spec);
        return 0;
    }
    int rank = 0;
    size_t prev = 0;
    for (int n = 0; n < pl.nr; n++) {
        const struct dsl_node *node = &pl.nodes[n];
        const struct dsl_host *h = dsl_hostfile_find(&hf, node->host);
        if (!h || node->node_rank != n || node->first_rank != rank || node->nslots < 1)
            abort();
        size_t at = (size_t)(h - hf.hosts);
        if (n > 0 && at <= prev)
            abort();
        prev = at;
        for (int s = 0; s < node->nslots; s++)
            if (node->slots[s] < 0 || node->slots[s] >= h->slots ||
                (s > 0 && node->slots[s] <= node->slots[s - 1]))
                abort();
        rank += node->nslots;
    }
    if (pl.world_size != rank || rank < 1)
        abort();
    char *json = dsl_placement_world_info_json(&pl);
    char *b64 = dsl_placement_world_info_b64(&pl);
    if (json[0] != '{' || strlen(b64) != (strlen(json) + 2) / 3 * 4)
        abort();
    free(json);
    free(b64);
    dsl_placement_release(&pl);
    free(spec);
    return 0;
}
