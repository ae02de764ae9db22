/*
 * Which CUDA device a rank trains on: one rule for dstrain and dsbench, a pure function
 * of what the rank can see, so that srun's, torchrun's and dslaunch's ways of handing
 * out GPUs are unit-tested without a GPU (docs/trainer.md, "Which GPU a rank takes").
 *
 *   1. CUDA_VISIBLE_DEVICES names exactly one device (srun --gpus-per-task=1,
 *      --gpu-bind=single:1, a Slurm step with ConstrainDevices): that one, device 0,
 *      whatever LOCAL_RANK is. Each task was given a GPU of its own.
 *   2. Otherwise every local rank sees the same devices (torchrun, dslaunch, a plain
 *      node): local rank r takes device r, when there are at least LOCAL_WORLD_SIZE of
 *      them (and more than r). One GPU visible to a node of one rank is rule 2 too.
 *   3. Otherwise (more local ranks than visible devices, or none visible) there is no
 *      GPU of its own for every rank: an error with the numbers, the same on every
 *      local rank. NCCL refuses two ranks on one GPU, so no rank shares one.
 */
#ifndef DSLAUNCH_GPUPICK_H
#define DSLAUNCH_GPUPICK_H

#include "dslaunch/common/error.h"

/**
 * The device for local rank local_rank of local_world ranks on a node, given the number
 * of devices the rank sees (visible, from the driver: 0 when it has none or no
 * driver) and its CUDA_VISIBLE_DEVICES (cvd; NULL when unset). Fills *device (an index
 * for cudaSetDevice) and returns 0, or returns DSL_ENOGPU with the reason in err
 * ("5 local ranks and 4 GPUs visible (CUDA_VISIBLE_DEVICES='0,1,2,3'): ..."). A
 * local_rank below 0 counts as 0, a local_world below 1 as 1. No side effects.
 */
int dsl_gpu_pick(int visible, int local_rank, int local_world, const char *cvd, int *device,
                 char *err);

struct dsl_rankenv;

/**
 * dsl_gpu_pick() on this rank's contract, as dsl_rankenv_load() read it: LOCAL_RANK (0
 * when unset or not a number), LOCAL_WORLD_SIZE (1 likewise) and CUDA_VISIBLE_DEVICES,
 * with visible from the caller.
 */
int dsl_gpu_pick_env(int visible, const struct dsl_rankenv *env, int *device, char *err);

/** Entries of a CUDA_VISIBLE_DEVICES value: comma-separated, empty ones not counted. */
int dsl_gpu_cvd_entries(const char *cvd);

#endif
