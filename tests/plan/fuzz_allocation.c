/*
 * libFuzzer target: a Slurm allocation's environment as dslaunch reads it without a
 * --hostfile (dsl_allocation_load). The first byte is --num_gpus (-1 = not given, 1..7);
 * the rest is split at newlines into SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE,
 * SLURM_GPUS_PER_NODE, SLURM_GPUS, SLURM_GPUS_ON_NODE and SLURM_STEP_ID, in that order
 * (a missing or empty line leaves the variable unset); SLURM_JOB_ID is always set.
 * A load that fails names the allocation and leaves the hostfile empty; one that
 * succeeds yields one host per node of the list, valid unique names, 1..max slots each
 * and a description; one without a node list does nothing. Lists of 65536 nodes must
 * load within libFuzzer's timeout (they once took minutes under ASan: quadratic).
 * glibc keeps every string setenv() ever made (a pointer to an old one may still be
 * in use), so the process grows by a few kilobytes per run: CI's 20 s stay far below
 * the rss limit, a run of many minutes may not.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/plan/hostfile.h"
#include "plan/allocation.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const vars[] = {"SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE",
                                   "SLURM_GPUS_PER_NODE", "SLURM_GPUS", "SLURM_GPUS_ON_NODE",
                                   "SLURM_STEP_ID"};
#define NVARS (sizeof(vars) / sizeof(vars[0]))

/* name with ASCII letters lowered, as the hostfile compares names (malloc'd) */
static char *lowered(const char *name)
{
    char *s = dsl_xstrdup(name);
    for (char *p = s; *p; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
    return s;
}

static int by_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int num_gpus = data[0] % 8 ? data[0] % 8 : -1;
    char *s = dsl_xstrndup((const char *)data + 1, size - 1), *line = s;
    setenv("SLURM_JOB_ID", "7", 1);
    for (size_t i = 0; i < NVARS; i++) {
        char *nl = line ? strchr(line, '\n') : NULL;
        if (nl)
            *nl = '\0';
        if (line && line[0])
            setenv(vars[i], line, 1);
        else
            unsetenv(vars[i]);
        line = nl ? nl + 1 : NULL;
    }
    struct dsl_hostfile hf;
    char desc[256] = "", err[DSL_ERR_LEN] = "";
    dsl_hostfile_init(&hf);
    int r = dsl_allocation_load(&hf, num_gpus, desc, sizeof(desc), err);
    if (r < 0) {
        if (hf.nr != 0 || strncmp(err, "Slurm allocation", 16) != 0)
            abort();
    } else if (r == 0) {
        if (hf.nr != 0 || getenv("SLURM_JOB_NODELIST"))
            abort();
    } else {
        if (r != 1 || hf.nr == 0 || !desc[0])
            abort();
        char **names = dsl_xmalloc(hf.nr * sizeof(char *));
        for (size_t i = 0; i < hf.nr; i++) {
            const struct dsl_host *h = &hf.hosts[i];
            if (!dsl_host_name_valid(h->name) || h->slots < 1 || h->slots > DSL_HOSTFILE_MAX_SLOTS)
                abort();
            names[i] = lowered(h->name);
        }
        qsort(names, hf.nr, sizeof(char *), by_str); /* unique: no two neighbours equal */
        for (size_t i = 1; i < hf.nr; i++)
            if (!strcmp(names[i], names[i - 1]))
                abort();
        for (size_t i = 0; i < hf.nr; i++)
            free(names[i]);
        free(names);
    }
    dsl_hostfile_release(&hf);
    free(s);
    return 0;
}
