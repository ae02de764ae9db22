/*
 * libFuzzer target: sinfo's gres text as `--emit sbatch` reads it to know whether the
 * cluster has GPUs (dsl_slurm_gres_has_gpu). The input, up to a NUL, is the text; the
 * answer is 0 or 1 and equals a plain reference: the text split into lines and each
 * line into comma-separated items, one of which starts with "gpu".
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/remote/emit.h"
#include "fuzz_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int reference(const char *t)
{
    for (const char *item = t;;) {
        if (!strncmp(item, "gpu", 3))
            return 1;
        const char *next = strpbrk(item, "\n,");
        if (!next)
            return 0;
        item = next + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    int got = dsl_slurm_gres_has_gpu(text);
    if ((got != 0 && got != 1) || got != reference(text))
        abort();
    free(text);
    return 0;
}
