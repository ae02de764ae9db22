/* libFuzzer target: arbitrary bytes as a safetensors file, read from memory. The
 * reader must reject or accept without crashing, and what it accepts must satisfy the
 * invariants the checkpoint loader relies on: every tensor's bytes inside the data
 * region, sizes that match the shapes, and tensors that tile the data exactly. Read a
 * second time with DSL_ST_HEADER_SUM_LATER (the checkpoint loader's way), the verdict
 * must be the same, except that a header failing its checksum is then accepted and
 * flagged; a file read as verified by SHA-256 must carry both checksums. With
 * DSL_ST_NEED_SUM it loads exactly when it loads without and carries a checksum. The seeds
 * are files of both formats (dsl.sha256, and the older dsl.crc32). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "train/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dsl_st_file f;
    char err[DSL_ERR_LEN] = "";
    int r = dsl_st_parse(&f, "fuzz.safetensors", data, size, 0, err);
    if (r < 0 && !err[0])
        __builtin_trap();
    if (r == 0) {
        const unsigned char *lo = f.buf, *hi = f.buf + f.len;
        uint64_t total = 0;
        for (size_t i = 0; i < f.n; i++) {
            const unsigned char *p = f.t[i].data;
            uint64_t nb = dsl_st_dtype_size(f.t[i].dtype);
            for (int d = 0; d < f.t[i].ndim; d++)
                nb *= f.t[i].shape[d];
            if (nb != f.t[i].nbytes || p < lo || p > hi || (uint64_t)(hi - p) < nb)
                __builtin_trap();
            if (i > 0 && (const unsigned char *)f.t[i - 1].data + f.t[i - 1].nbytes != p)
                __builtin_trap();
            if (dsl_st_find(&f, f.t[i].name) == NULL)
                __builtin_trap();
            total += nb;
        }
        if (f.n && (const unsigned char *)f.t[f.n - 1].data + f.t[f.n - 1].nbytes != hi)
            __builtin_trap();
        (void)total;
    }
    enum dsl_st_sum sum = r == 0 ? f.sum : DSL_ST_SUM_NONE;
    int keys = r == 0 && (dsl_env_get(&f.meta, "dsl.sha256") ||
                          dsl_env_get(&f.meta, "dsl.data_sha256") ||
                          dsl_env_get(&f.meta, "dsl.crc32"));
    if (r == 0 && sum == DSL_ST_SUM_SHA256 &&
        (!dsl_env_get(&f.meta, "dsl.sha256") || !dsl_env_get(&f.meta, "dsl.data_sha256")))
        __builtin_trap();
    dsl_st_release(&f);

    char err2[DSL_ERR_LEN] = "";
    int r2 = dsl_st_parse(&f, "fuzz.safetensors", data, size, DSL_ST_HEADER_SUM_LATER, err2);
    if (r2 < 0 && !err2[0])
        __builtin_trap();
    if (r2 == 0 && f.header_bad) {
        /* strict: refused for exactly that */
        if (r == 0 || !strstr(err, "the header does not match its checksum"))
            __builtin_trap();
    } else if (r2 != r || (r == 0 && f.sum != sum)) {
        __builtin_trap();
    }
    dsl_st_release(&f);

    /* DSL_ST_NEED_SUM: what loads is what loads without it and carries a checksum; a
       file refused for having none is refused for that alone */
    char err3[DSL_ERR_LEN] = "";
    int r3 = dsl_st_parse(&f, "fuzz.safetensors", data, size, DSL_ST_NEED_SUM, err3);
    if (r3 < 0 && !err3[0])
        __builtin_trap();
    if (r == 0 ? (r3 == 0) != keys || (r3 < 0 && !f.no_sums) : r3 == 0)
        __builtin_trap();
    dsl_st_release(&f);
    return 0;
}
