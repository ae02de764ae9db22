/* The plan's device ids as places in the GPUs Slurm gave a step (job/devmap.h). */
#include <stdlib.h>

#include "dslaunch/common/error.h"
#include "agent/devmap.h"
#include "test.h"

static void expect(const char *ids, const char *node, const char *want)
{
    char *out = NULL, err[DSL_ERR_LEN] = "";
    ASSERT_OK(dsl_devmap_apply(ids, node, &out, err));
    ASSERT_STR_EQ(out, want);
    free(out);
}

TEST(devmap_should_give_each_rank_the_gpus_slurm_allocated_not_the_plan_numbers)
{
    expect("0,1", "2,3", "2,3");   /* another job holds 0 and 1 */
    expect("1", "2,3", "3");
    expect("0,1", "0,1", "0,1");
    expect("2,0", "4,5,6", "6,4");
    expect("0", "GPU-6f3c1a2b,GPU-99aa", "GPU-6f3c1a2b"); /* UUIDs stay names */
    expect("1", "MIG-a/1/2,MIG-b/3/4", "MIG-b/3/4");
    expect("-1", "2,3", "-1"); /* the plan hides every device: kept */
    expect("", "2,3", "");
}

TEST(devmap_should_refuse_a_slot_beyond_the_step_gpus_or_a_non_number)
{
    char *out = NULL, err[DSL_ERR_LEN] = "";
    ASSERT_EQ(dsl_devmap_apply("0,2", "4,5", &out, err), DSL_EPLACEMENT);
    ASSERT_STR_EQ(err, "device 2 is not among the GPUs Slurm gave this node's step "
                       "(CUDA_VISIBLE_DEVICES='4,5'): the plan has more slots on this node "
                       "than the job has GPUs here");
    ASSERT(out == NULL);
    static const char *const bad[] = {"x", "0,", ",0", "0,,1", "1e3", "99999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ASSERT_EQ(dsl_devmap_apply(bad[i], "0,1", &out, err), DSL_EPLACEMENT);
        ASSERT(out == NULL);
    }
}

TEST_MAIN()
