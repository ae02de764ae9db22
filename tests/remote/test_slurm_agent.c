/* The agent's side of the slurm transport (dsl_slurm_agent_prepare, remote/transport.h). */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/remote/transport.h"
#include "test.h"
#include "test_env.h"

static void step_env(const char *node)
{
    if (node)
        setenv("SLURMD_NODENAME", node, 1);
    else
        unsetenv("SLURMD_NODENAME");
    test_setenvs(TEST_ENV("SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_STEP_ID=5",
                          "SLURM_STEP_NODELIST=n[1-3]", "SLURM_TASKS_PER_NODE=1(x3)",
                          "SLURM_CPU_BIND_TYPE=none", "SLURM_JOB_ID=77",
                          "SLURM_JOB_NODELIST=n[1-3]"));
}

TEST(slurm_agent_should_take_its_index_from_its_node_name_and_drop_the_step_variables)
{
    char err[DSL_ERR_LEN];
    int index = -1;
    step_env("n12");
    ASSERT_OK(dsl_slurm_agent_prepare("n1,n12,n123", &index, err));
    ASSERT_EQ(index, 1);
    const char *gone[] = {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_ID", "SLURM_STEP_NODELIST",
                          "SLURM_TASKS_PER_NODE", "SLURM_CPU_BIND_TYPE"};
    for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++)
        ASSERT_EQ(getenv(gone[i]) == NULL, 1);
    ASSERT_STR_EQ(getenv("SLURM_JOB_ID"), "77"); /* the job's own stay */
    ASSERT_STR_EQ(getenv("SLURM_JOB_NODELIST"), "n[1-3]");
    ASSERT_STR_EQ(getenv("SLURMD_NODENAME"), "n12");
    step_env("n123");
    ASSERT_OK(dsl_slurm_agent_prepare("n1,n12,n123", &index, err));
    ASSERT_EQ(index, 2);
}

TEST(slurm_agent_should_refuse_a_node_the_plan_does_not_name)
{
    char err[DSL_ERR_LEN];
    int index = -1;
    step_env("n1");
    ASSERT_EQ(dsl_slurm_agent_prepare("n12,n2", &index, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "srun started this agent on node 'n1', which is not one of the plan's "
                         "nodes 'n12,n2'");
    ASSERT_EQ(index, -1);
    step_env(NULL);
    ASSERT_EQ(dsl_slurm_agent_prepare("n1", &index, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "SLURMD_NODENAME is not set");
}

TEST_MAIN()
