/*
 * libFuzzer target: dstrain's command line, parse only. The input is split at NUL
 * bytes into argv[1..] after "dstrain" and goes through dsl_train_settings_parse()
 * (each flag's word goes to its config key as typed, checked like the same key in a
 * file; a path such as --metrics must arrive byte for byte, whatever it holds) and, when
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
#include "fuzz_argv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The last --metrics word, if any, is the setting byte for byte. A word that spells a
 * known option is never taken as a value (the parser refuses it), so every
 * "--metrics" word here is the option itself. */
static int metrics_as_typed(const struct dsl_train_settings *s, int argc, char **argv)
{
    const char *last = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--metrics") && i + 1 < argc)
            last = argv[++i];
        else if (!strncmp(argv[i], "--metrics=", 10))
            last = argv[i] + 10;
    }
    return !last || (s->cfg.dstrain.metrics && !strcmp(s->cfg.dstrain.metrics, last));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_words w;
    if (!fuzz_words(data, size, &w))
        return 0;
    int argc = (int)w.n + 1;
    char **argv = w.v;
    argv[0] = (char *)"dstrain";
    struct dsl_train_settings s;
    char err[DSL_ERR_LEN] = "";
    fuzz_enter_empty_dir("settings");
    int r = fuzz_left(dsl_train_settings_parse(&s, argc, argv, err), err);
    if (r == 0 && !metrics_as_typed(&s, argc, argv))
        abort();
    if (r == 0) {
        int world = 1 + (int)(size % 8);
        err[0] = '\0';
        r = fuzz_explained(dsl_train_settings_verify(&s, 1, world, err), err);
        if (r == 0 && s.cfg.train_batch_size != s.cfg.train_micro_batch_size_per_gpu *
                                                    s.cfg.gradient_accumulation_steps * world)
            abort();
    }
    dsl_train_settings_release(&s);
    fuzz_words_free(&w);
    return 0;
}
