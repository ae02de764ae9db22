/*
 * Which CUDA device a rank takes (gpupick.h has the rule). Pure: the numbers come in,
 * a device index or an error text goes out; dsl_gpu_pick_env() takes the inputs from
 * the rank contract the worker loaded once (rankenv.h) and asks the pure function.
 * No CUDA here: the caller counts the devices (the driver, through cudalibs.h).
 */
#include <string.h>

#include "gpupick.h"
#include "dslaunch/common/rankenv.h"
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

int dsl_gpu_pick_env(int visible, const struct dsl_rankenv *env, int *device, char *err)
{
    return dsl_gpu_pick(visible, env->local_rank, env->local_world_size,
                        env->cuda_visible_devices, device, err);
}
