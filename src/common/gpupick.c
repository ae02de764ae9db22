/*
 * Which CUDA device a rank takes (gpupick.h has the rule). Pure: the numbers come in,
 * a device index or an error text goes out; dsl_gpu_pick_env() reads the environment
 * the way the trainer does (getenv and the checked parser) and asks the pure function.
 * No CUDA here: the caller counts the devices (the driver, through cudalibs.h).
 */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/envnames.h"
#include "gpupick.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/banned.h"

int dsl_gpu_cvd_entries(const char *cvd)
{
    int n = 0, in = 0;
    for (const char *p = cvd; p && *p; p++) {
        if (*p == ',') {
            in = 0;
        } else if (*p != ' ' && !in) {
            in = 1;
            n++;
        }
    }
    return n;
}

int dsl_gpu_pick(int visible, int local_rank, int local_world, const char *cvd, int *device,
                 char *err)
{
    /* " with CUDA_VISIBLE_DEVICES='...'" when set, for every message */
    const char *w = cvd ? " with CUDA_VISIBLE_DEVICES='" : "", *v = cvd ? cvd : "",
               *q = cvd ? "'" : "";
    if (local_rank < 0)
        local_rank = 0;
    if (local_world < 1)
        local_world = 1;
    if (visible <= 0)
        return dsl_seterr(err, DSL_ENOGPU, "no GPU is visible%s%s%s", w, v, q);
    /* 1: the scheduler gave this task one device of its own */
    if (dsl_gpu_cvd_entries(cvd) == 1) {
        *device = 0;
        return 0;
    }
    /* 2: the node's devices, one per local rank */
    if (local_world <= visible && local_rank < visible) {
        *device = local_rank;
        return 0;
    }
    /* 3: not one each; the same answer on every local rank */
    if (local_world > visible)
        return dsl_seterr(err, DSL_ENOGPU,
                          "%d local ranks (LOCAL_WORLD_SIZE) and %d GPU%s visible%s%s%s: not "
                          "one GPU per rank (NCCL refuses two ranks on one GPU; give each "
                          "task its own, e.g. srun --gpus-per-task=1, or start fewer ranks "
                          "per node)",
                          local_world, visible, visible == 1 ? "" : "s", w, v, q);
    return dsl_seterr(err, DSL_ENOGPU,
                      "local rank %d (LOCAL_RANK) and %d GPU%s visible%s%s%s: LOCAL_RANK is "
                      "not below LOCAL_WORLD_SIZE %d",
                      local_rank, visible, visible == 1 ? "" : "s", w, v, q, local_world);
}

/* an environment variable as a count in [lo, hi], or def when unset or not one */
static int env_int(const char *name, int lo, int hi, int def)
{
    const char *e = getenv(name);
    int n;
    return e && dsl_parse_int(e, lo, hi, &n) == 0 ? n : def;
}

int dsl_gpu_pick_env(int visible, int *device, char *err)
{
    return dsl_gpu_pick(visible, env_int(DSL_ENV_LOCAL_RANK, 0, 1 << 20, 0),
                        env_int(DSL_ENV_LOCAL_WORLD_SIZE, 1, 1 << 20, 1),
                        getenv(DSL_ENV_CUDA_VISIBLE_DEVICES), device, err);
}
