/*
 * libFuzzer target: dsl_yaml_quote() (remote/emit.h), the quoting of every string of
 * `--emit jobset`. The first byte picks Kubernetes' '$' escaping; for the rest of the
 * input the quoted scalar must hold only printable ASCII between its quotes, and read
 * back (yaml_unquote.h) to the input byte for byte; input that is not UTF-8 must be
 * refused at its first bad byte, leaving the output untouched.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/remote/emit.h"
#include "yaml_unquote.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int dollars = data[0] & 1;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 24);
    dsl_dynbuf_addstr(&b, "x");
    int r = dsl_yaml_quote(&b, s, n, dollars);
    if (r < 0) {
        if ((size_t)-r > n || b.len != 1)
            __builtin_trap();
        /* everything before the bad byte quotes */
        dsl_dynbuf_reset(&b);
        if (dsl_yaml_quote(&b, s, (size_t)(-r - 1), dollars) != 0)
            __builtin_trap();
    } else {
        char *out = malloc(b.len + 1);
        size_t len = 0;
        if (!out)
            abort();
        if (yaml_unquote(b.buf + 1, b.len - 1, dollars, out, &len) != 0 || len != n ||
            memcmp(out, s, n) != 0)
            __builtin_trap();
        free(out);
    }
    dsl_dynbuf_release(&b);
    return 0;
}
