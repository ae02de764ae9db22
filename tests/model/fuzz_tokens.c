/* libFuzzer target: arbitrary bytes as an llm.c token shard, read by dsl_tokens_read().
 * A read either fails with a message naming the file and leaves nothing allocated, or
 * returns exactly the token count the header claims, which the file then holds to the
 * byte; a header may never make the reader allocate more than the file could hold (the
 * rss limit of the fuzz run catches that). The header check is run on the same bytes
 * directly too, with the real size and with a claimed larger one. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/model/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

static void remove_file(void)
{
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        snprintf(path, sizeof(path), "/tmp/dsl_fuzz_tokens.%ld", (long)getpid());
        atexit(remove_file);
    }
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        abort();
    char err[DSL_ERR_LEN] = "";
    uint16_t *t = (uint16_t *)1;
    size_t n = 0;
    int r = dsl_tokens_read(path, &t, &n, err);
    if (r < 0) {
        if (t != NULL || !strstr(err, path))
            abort();
    } else {
        if (size != DSL_TOKENS_HEADER + 2 * n)
            abort();
        for (size_t i = 0; i < n; i++)
            if (t[i] != (uint16_t)(data[1024 + 2 * i] | data[1025 + 2 * i] << 8))
                abort();
        free(t);
    }
    uint64_t k;
    size_t have = size < DSL_TOKENS_HEADER ? size : DSL_TOKENS_HEADER;
    if ((dsl_tokens_check_header(data, have, size, "x", &k, err) == 0) != (r == 0))
        abort();
    (void)dsl_tokens_check_header(data, have, (uint64_t)size * 3, "x", &k, err);
    return 0;
}
