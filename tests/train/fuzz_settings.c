/*
 * libFuzzer target: dstrain's command line, parse only. The input is split at NUL
 * bytes into argv[1..] after "dstrain" and goes through dsl_train_settings_parse()
 * (the flags become config overrides, checked like the same keys in a file) and, when
 * it accepts them, dsl_train_settings_verify() at a world size from the input's length
 * (as rank 1, which reports nothing). Inputs with a '/' are skipped and the parsing runs
 * in an empty directory of its own (entered and left around it), so --config never
 * names a file that exists: ds_config.json itself is fuzz_config's. Every failure
 * explains itself, a success resolves the batch invariant, nothing leaks.
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/train/trainer_settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];
static int here = -1, there = -1;

static void remove_dir(void)
{
    rmdir(dir);
}

static void enter_empty_dir(void)
{
    if (there < 0) {
        snprintf(dir, sizeof(dir), "/tmp/dsl_fuzz_settings.XXXXXX");
        if (!mkdtemp(dir) || (there = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
            (here = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
            abort();
        atexit(remove_dir);
    }
    if (fchdir(there) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (memchr(data, '/', size))
        return 0;
    char *buf = dsl_xmalloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = '\0';
    size_t nwords = 1;
    for (size_t i = 0; i < size; i++)
        nwords += data[i] == '\0';
    char **argv = dsl_xcalloc(nwords + 2, sizeof(char *));
    int argc = 0;
    argv[argc++] = (char *)"dstrain";
    for (char *w = buf; w <= buf + size; w += strlen(w) + 1)
        argv[argc++] = w;
    struct dsl_train_settings s;
    char err[DSL_ERR_LEN] = "";
    enter_empty_dir();
    int r = dsl_train_settings_parse(&s, argc, argv, err);
    if (fchdir(here) != 0)
        abort();
    if (r < 0 && !err[0])
        abort();
    if (r == 0) {
        int world = 1 + (int)(size % 8);
        err[0] = '\0';
        r = dsl_train_settings_verify(&s, 1, world, err);
        if (r < 0 && !err[0])
            abort();
        if (r == 0 && s.cfg.train_batch_size != s.cfg.train_micro_batch_size_per_gpu *
                                                    s.cfg.gradient_accumulation_steps * world)
            abort();
    }
    dsl_train_settings_release(&s);
    free(argv);
    free(buf);
    return 0;
}
