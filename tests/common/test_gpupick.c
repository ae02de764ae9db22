/* Unit tests of the device rule (gpupick.c): srun's, torchrun's and dslaunch's ways of
 * handing GPUs to ranks, and the cases with too few, as every rank of a node sees them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "common/gpupick.h"
#include "dslaunch/common/rankenv.h"
#include "test.h"

/* the device rank lr of lw picks, or -1 with the text in err */
static int pick(int visible, int lr, int lw, const char *cvd, char *err)
{
    int dev = -7;
    err[0] = '\0';
    int r = dsl_gpu_pick(visible, lr, lw, cvd, &dev, err);
    if (r < 0) {
        if (r != DSL_ENOGPU || dev != -7 || !err[0])
            return -100; /* a wrong code, a filled out-parameter or no text */
        return -1;
    }
    return dev;
}

TEST(cvd_entries_should_count_ids_uuids_and_skip_empty_ones)
{
    ASSERT_EQ(dsl_gpu_cvd_entries(NULL), 0);
    ASSERT_EQ(dsl_gpu_cvd_entries(""), 0);
    ASSERT_EQ(dsl_gpu_cvd_entries("3"), 1);
    ASSERT_EQ(dsl_gpu_cvd_entries("0,1,2,3"), 4);
    ASSERT_EQ(dsl_gpu_cvd_entries("GPU-8a1e2f3c-aaaa-bbbb-cccc-0123456789ab"), 1);
    ASSERT_EQ(dsl_gpu_cvd_entries("MIG-GPU-1/1/0"), 1);
    ASSERT_EQ(dsl_gpu_cvd_entries("1,"), 1);
    ASSERT_EQ(dsl_gpu_cvd_entries(",2"), 1);
    ASSERT_EQ(dsl_gpu_cvd_entries("0, 1"), 2);
}

/* srun --gpus-per-task=1: each task sees its own GPU as device 0, whatever its local
 * rank (the issue: local rank 1 took device 1, which does not exist there) */
TEST(srun_one_gpu_per_task_should_take_device_0_on_every_local_rank)
{
    char err[DSL_ERR_LEN];
    static const char *const cvd[] = {"0", "1", "2", "3"};
    for (int lr = 0; lr < 4; lr++)
        ASSERT_EQ(pick(1, lr, 4, cvd[lr], err), 0);
    /* a UUID, as some sites' prologs set it */
    ASSERT_EQ(pick(1, 1, 2, "GPU-8a1e2f3c-aaaa-bbbb-cccc-0123456789ab", err), 0);
    /* one rank, one GPU, no CUDA_VISIBLE_DEVICES */
    ASSERT_EQ(pick(1, 0, 1, NULL, err), 0);
}

/* torchrun, dslaunch, a plain node: every rank sees the node's GPUs */
TEST(torchrun_style_ranks_should_take_device_local_rank)
{
    char err[DSL_ERR_LEN];
    for (int lr = 0; lr < 8; lr++) {
        ASSERT_EQ(pick(8, lr, 8, NULL, err), lr);
        ASSERT_EQ(pick(8, lr, 8, "0,1,2,3,4,5,6,7", err), lr);
    }
    /* dslaunch's placement: CUDA_VISIBLE_DEVICES is the node's slots */
    ASSERT_EQ(pick(2, 0, 2, "4,5", err), 0);
    ASSERT_EQ(pick(2, 1, 2, "4,5", err), 1);
    /* more GPUs than ranks: the first ones */
    ASSERT_EQ(pick(8, 1, 2, NULL, err), 1);
    /* LOCAL_WORLD_SIZE unknown (1) and LOCAL_RANK within the devices */
    ASSERT_EQ(pick(4, 3, 1, NULL, err), 3);
}

TEST(more_local_ranks_than_gpus_should_fail_on_every_local_rank_with_the_numbers)
{
    char err[DSL_ERR_LEN];
    /* not only the ranks past the devices: the node gives one answer */
    for (int lr = 0; lr < 4; lr++) {
        ASSERT_EQ(pick(2, lr, 4, NULL, err), -1);
        ASSERT_CONTAINS(err, "4 local ranks (LOCAL_WORLD_SIZE) and 2 GPUs visible");
    }
    ASSERT_EQ(pick(2, 0, 3, "0,1", err), -1);
    ASSERT_CONTAINS(err, "3 local ranks (LOCAL_WORLD_SIZE) and 2 GPUs visible with "
                         "CUDA_VISIBLE_DEVICES='0,1'");
    /* one GPU and two ranks with no CUDA_VISIBLE_DEVICES: both see that one GPU */
    ASSERT_EQ(pick(1, 0, 2, NULL, err), -1);
    ASSERT_CONTAINS(err, "2 local ranks (LOCAL_WORLD_SIZE) and 1 GPU visible:");
    ASSERT_EQ(pick(1, 1, 2, "", err), -1);
}

TEST(no_visible_gpu_should_fail_and_name_cuda_visible_devices)
{
    char err[DSL_ERR_LEN];
    ASSERT_EQ(pick(0, 0, 1, NULL, err), -1);
    ASSERT_STR_EQ(err, "no GPU is visible");
    ASSERT_EQ(pick(0, 0, 1, "", err), -1);
    ASSERT_STR_EQ(err, "no GPU is visible with CUDA_VISIBLE_DEVICES=''");
    /* one id that the driver does not have: CUDA shows no device */
    ASSERT_EQ(pick(0, 1, 2, "7", err), -1);
    ASSERT_STR_EQ(err, "no GPU is visible with CUDA_VISIBLE_DEVICES='7'");
    ASSERT_EQ(pick(-1, 0, 1, NULL, err), -1);
}

TEST(local_rank_past_the_devices_should_fail_and_say_so)
{
    char err[DSL_ERR_LEN];
    ASSERT_EQ(pick(2, 2, 2, NULL, err), -1);
    ASSERT_CONTAINS(err, "local rank 2 (LOCAL_RANK) and 2 GPUs visible");
    ASSERT_EQ(pick(4, 5, 1, NULL, err), -1);
    /* out-of-range inputs count as the defaults */
    ASSERT_EQ(pick(2, -3, 0, NULL, err), 0);
}

/* the rule on the contract as dsl_rankenv_load() reads it from the environment */
static int pick_env(int visible, int *dev, char *err)
{
    struct dsl_rankenv env;
    int r = dsl_rankenv_load(&env, err);
    return r < 0 ? r : dsl_gpu_pick_env(visible, &env, dev, err);
}

TEST(pick_env_should_read_local_rank_world_and_cuda_visible_devices)
{
    char err[DSL_ERR_LEN];
    int dev = -1;
    setenv("LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("CUDA_VISIBLE_DEVICES", "1", 1);
    ASSERT_OK(pick_env(1, &dev, err));
    ASSERT_EQ(dev, 0);
    unsetenv("CUDA_VISIBLE_DEVICES");
    ASSERT_OK(pick_env(2, &dev, err));
    ASSERT_EQ(dev, 1);
    ASSERT_EQ(pick_env(1, &dev, err), DSL_ENOGPU);
    /* not numbers: the defaults (rank 0 of 1) */
    setenv("LOCAL_RANK", "x", 1);
    setenv("LOCAL_WORLD_SIZE", "", 1);
    ASSERT_OK(pick_env(1, &dev, err));
    ASSERT_EQ(dev, 0);
    unsetenv("LOCAL_RANK");
    unsetenv("LOCAL_WORLD_SIZE");
}

TEST_MAIN()
