/*
 * libFuzzer target: the device rule (gpupick.h) on any numbers and any
 * CUDA_VISIBLE_DEVICES. The input's first three bytes are the visible device count
 * (0..255), LOCAL_RANK (as a signed byte) and LOCAL_WORLD_SIZE (0..255); the fourth,
 * when present, is 0 for an unset CUDA_VISIBLE_DEVICES, anything else for the rest of
 * the input as its value. Checked: a pick is a visible device (device 0 when the value
 * names one device); a refusal is DSL_ENOGPU with a text and leaves the device alone;
 * every local rank of the node gets the same verdict, and, unless the value names one
 * device (each task its own), no two local ranks the same device.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/gpupick.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    int visible = data[0], lr = (int8_t)data[1], lw = data[2];
    char *cvd = size > 3 && data[3] ? dsl_xstrndup((const char *)data + 4, size - 4) : NULL;
    char err[DSL_ERR_LEN];
    int dev = -1;
    int r = dsl_gpu_pick(visible, lr, lw, cvd, &dev, err);
    int one = dsl_gpu_cvd_entries(cvd) == 1;
    if (r == 0) {
        if (dev < 0 || dev >= visible || (one && dev != 0))
            abort();
    } else if (r != DSL_ENOGPU || dev != -1 || !err[0]) {
        abort();
    }
    /* the node: local ranks 0..lw-1 agree, and do not share a device */
    int n = lw < 1 ? 1 : lw, ok = -1;
    unsigned char *used = dsl_xcalloc(256, 1);
    for (int k = 0; k < n; k++) {
        int d = -1, rk = dsl_gpu_pick(visible, k, lw, cvd, &d, err) == 0;
        if (ok >= 0 && rk != ok)
            abort();
        ok = rk;
        if (rk && !one && used[d]++)
            abort();
    }
    free(used);
    free(cvd);
    return 0;
}
