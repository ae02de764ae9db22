/* libFuzzer target: arbitrary bytes as a safetensors file, read from memory. The
 * reader must reject or accept without crashing, and what it accepts must satisfy the
 * invariants the checkpoint loader relies on: every tensor's bytes inside the data
 * region, sizes that match the shapes, and tensors that tile the data exactly. */
#include <stddef.h>
#include <stdint.h>

#include "dslaunch/common/error.h"
#include "train/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dsl_st_file f;
    char err[DSL_ERR_LEN] = "";
    int r = dsl_st_parse(&f, "fuzz.safetensors", data, size, err);
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
    dsl_st_release(&f);
    return 0;
}
