/* libFuzzer target: arbitrary bytes as an encoder.json and a vocab.bpe (the input cut
 * at its first "\n%%\n"; without one, all of it is encoder.json and vocab.bpe is
 * empty). Loading never crashes or leaks, a failure explains itself, and a vocabulary
 * that loads encodes the input itself and decodes it back, whatever its merges. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "train/bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    size_t el = size, mo = size;
    for (size_t i = 0; i + 4 <= size; i++)
        if (memcmp(s + i, "\n%%\n", 4) == 0) {
            el = i;
            mo = i + 4;
            break;
        }
    struct dsl_bpe b;
    char err[DSL_ERR_LEN] = "";
    if (dsl_bpe_parse(&b, s, el, "encoder.json", s + mo, size - mo, "vocab.bpe", err) < 0) {
        if (!err[0])
            __builtin_trap(); /* every failure explains itself */
        return 0;
    }
    size_t k, at = 0;
    uint16_t *ids = dsl_bpe_encode(&b, data, size, &k);
    for (size_t i = 0; i < k; i++) {
        size_t l;
        const uint8_t *p = dsl_bpe_token(&b, ids[i], &l);
        if (!p || at + l > size || memcmp(p, data + at, l) != 0)
            __builtin_trap();
        at += l;
    }
    if (at != size)
        __builtin_trap();
    free(ids);
    dsl_bpe_release(&b);
    return 0;
}
