/* libFuzzer target: the plan's device list and the step's CUDA_VISIBLE_DEVICES (split at
 * the first newline) through dsl_devmap_apply; a success has as many items as ids and
 * each one is an item of the step's list. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "agent/devmap.h"
#include "fuzz_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t items(const char *s)
{
    size_t n = *s ? 1 : 0;
    for (; *s; s++)
        n += *s == ',';
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = fuzz_text(data, size);
    size_t len = strlen(buf); /* up to an embedded NUL, as an environment value */
    char *nl = memchr(buf, '\n', len);
    const char *node = "";
    if (nl) {
        *nl = '\0';
        node = nl + 1;
    }
    char *out = NULL, err[DSL_ERR_LEN];
    if (dsl_devmap_apply(buf, node, &out, err) == 0) {
        if (buf[0] && buf[0] != '-' && items(out) != items(buf))
            abort();
        if ((!buf[0] || buf[0] == '-') && strcmp(out, buf) != 0)
            abort();
        free(out);
    }
    free(buf);
    return 0;
}
