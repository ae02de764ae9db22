/* libFuzzer target: arbitrary bytes as text for GPT-2's BPE with the real vocabulary
 * (tests/data/gpt2). Encoding never crashes, gives at most one id per byte, every id
 * is a token, and the pre-tokeniser's pieces and the ids both give back the input. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "train/bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct dsl_bpe gpt2;
static int loaded;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!loaded) {
        char err[DSL_ERR_LEN] = "";
        if (dsl_bpe_load(&gpt2, DSL_GPT2_DIR "/encoder.json.gz", DSL_GPT2_DIR "/vocab.bpe.gz",
                         err) < 0) {
            fprintf(stderr, "fuzz_bpe_encode: %s\n", err);
            abort();
        }
        loaded = 1; /* kept for the process's life, as libFuzzer runs many inputs */
    }
    for (size_t i = 0; i < size;) {
        size_t j = dsl_bpe_pretok_next(data, size, i);
        if (j <= i || j > size)
            __builtin_trap();
        i = j;
    }
    size_t k, at = 0;
    uint16_t *ids = dsl_bpe_encode(&gpt2, data, size, &k);
    if (k > size)
        __builtin_trap();
    for (size_t i = 0; i < k; i++) {
        size_t l;
        const uint8_t *p = dsl_bpe_token(&gpt2, ids[i], &l);
        if (!p || l == 0 || at + l > size || memcmp(p, data + at, l) != 0)
            __builtin_trap(); /* decode(encode(x)) == x */
        at += l;
    }
    if (at != size)
        __builtin_trap();
    free(ids);
    return 0;
}
