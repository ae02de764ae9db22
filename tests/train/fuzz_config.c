/* libFuzzer target: arbitrary bytes as ds_config.json text. Parsing must never crash
 * or leak, an error must come with a message, and a config that parses must resolve
 * (or fail cleanly) at a world size taken from the input. */
#include <stddef.h>
#include <stdint.h>

#include "dslaunch/common/error.h"
#include "dslaunch/train/train_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN] = "";
    int world = size ? 1 + data[size - 1] % 8 : 1;
    dsl_train_config_init(&cfg);
    int r = dsl_train_config_parse(&cfg, "fuzz.json", (const char *)data, size, 0, err);
    if (r < 0 && !err[0])
        __builtin_trap(); /* every failure explains itself */
    if (r == 0) {
        err[0] = '\0';
        r = dsl_train_config_finish(&cfg, world, err);
        if (r < 0 && !err[0])
            __builtin_trap();
        if (r == 0 && cfg.train_batch_size != cfg.train_micro_batch_size_per_gpu *
                                                    cfg.gradient_accumulation_steps * world)
            __builtin_trap(); /* the invariant holds whenever finish succeeds */
    }
    dsl_train_config_release(&cfg);
    return 0;
}
