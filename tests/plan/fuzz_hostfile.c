/* libFuzzer target: arbitrary bytes as a hostfile. A parse either fails with a
 * "hostfile '" message and an empty result, or yields valid, unique hosts. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/plan/hostfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dsl_hostfile hf;
    char err[DSL_ERR_LEN];
    dsl_hostfile_init(&hf);
    if (dsl_hostfile_parse(&hf, "fuzz", (const char *)data, size, err) < 0) {
        if (hf.nr != 0 || strncmp(err, "hostfile 'fuzz'", 15) != 0)
            abort();
        return 0;
    }
    if (hf.nr == 0)
        abort();
    for (size_t i = 0; i < hf.nr; i++) {
        const struct dsl_host *h = &hf.hosts[i];
        if (!dsl_host_name_valid(h->name) || h->slots < 1 ||
            h->slots > DSL_HOSTFILE_MAX_SLOTS || h->line < 1 ||
            (h->max_slots != -1 && h->max_slots < h->slots))
            abort();
        if (i < 64) /* uniqueness, bounded so big range expansions stay fast */
            for (size_t k = i + 1; k < hf.nr; k++)
                if (strcmp(h->name, hf.hosts[k].name) == 0)
                    abort();
    }
    dsl_hostfile_release(&hf);
    return 0;
}
