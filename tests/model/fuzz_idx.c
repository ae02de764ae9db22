/* libFuzzer target: arbitrary bytes as an idx file, read by dsl_idx_read(). The first
 * byte picks plain (even) or gzip-compressed (odd) for the rest. A read either fails
 * with a message naming the file and leaves nothing allocated, or returns exactly the
 * product of its 1 to 4 dimensions, never more than the file held; in no case may a
 * header make the reader allocate more than the file could contain (the rss limit of
 * the fuzz run catches that). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "dslaunch/common/error.h"
#include "dslaunch/model/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

static void remove_file(void)
{
    unlink(path);
}

static void write_input(const uint8_t *d, size_t n, int gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f || (n && gzwrite(f, d, (unsigned)n) != (int)n) || gzclose(f) != Z_OK)
            abort();
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(d, 1, n, f) != n) || fclose(f) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        snprintf(path, sizeof(path), "/tmp/dsl_fuzz_idx.%ld", (long)getpid());
        atexit(remove_file);
    }
    if (size < 1)
        return 0;
    write_input(data + 1, size - 1, data[0] & 1);
    uint8_t *out = (uint8_t *)1;
    size_t count = 0, dims[4] = {0}, nd = 0;
    char err[DSL_ERR_LEN] = "";
    int r = dsl_idx_read(path, &out, &count, dims, &nd, err);
    if (r < 0) {
        if (out != NULL || !strstr(err, path))
            abort();
        return 0;
    }
    size_t n = 1;
    if (nd < 1 || nd > 4 || !out)
        abort();
    for (size_t i = 0; i < nd; i++)
        n *= dims[i];
    /* the file held the rest of the input (gzip: once decompressed): a plain read
       used all of it, a gzip read may leave bytes after the data unread */
    size_t used = 4 + 4 * nd + count;
    if (n != count || used > size - 1 || (!(data[0] & 1) && used != size - 1))
        abort();
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < count; i++)
        sink ^= out[i];
    (void)sink;
    free(out);
    return 0;
}
