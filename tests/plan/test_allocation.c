/* A Slurm allocation as the job's hosts (plan/allocation.h). */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "plan/allocation.h"
#include "dslaunch/plan/hostfile.h"
#include "test.h"

static void alloc_env(const char *job, const char *list, const char *tpn)
{
    unsetenv("SLURM_GPUS_PER_NODE");
    const char *names[] = {"SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE"};
    const char *values[] = {job, list, tpn};
    for (int i = 0; i < 3; i++) {
        if (values[i])
            setenv(names[i], values[i], 1);
        else
            unsetenv(names[i]);
    }
}

TEST(allocation_should_give_every_node_its_task_count_in_list_order)
{
    struct dsl_hostfile hf;
    char desc[160] = "", err[DSL_ERR_LEN];
    dsl_hostfile_init(&hf);
    alloc_env("12", "gpu[07-09],cpu1", "2(x2),1,4");
    ASSERT_EQ(dsl_allocation_load(&hf, desc, sizeof(desc), err), 1);
    ASSERT_EQ(hf.nr, 4);
    static const char *const names[] = {"gpu07", "gpu08", "gpu09", "cpu1"};
    static const int slots[] = {2, 2, 1, 4};
    for (size_t i = 0; i < hf.nr; i++) {
        ASSERT_STR_EQ(hf.hosts[i].name, names[i]);
        ASSERT_EQ(hf.hosts[i].slots, slots[i]);
    }
    ASSERT_STR_EQ(desc, "Slurm job 12: gpu[07-09],cpu1, 9 slots");
    dsl_hostfile_release(&hf);
}

TEST(allocation_should_make_every_gpu_a_slot_with_gpus_per_node)
{
    struct dsl_hostfile hf;
    char desc[160] = "", err[DSL_ERR_LEN];
    dsl_hostfile_init(&hf);
    alloc_env("13", "g[1-3]", "1(x3)");
    setenv("SLURM_GPUS_PER_NODE", "a100:8", 1);
    ASSERT_EQ(dsl_allocation_load(&hf, desc, sizeof(desc), err), 1);
    ASSERT_EQ(hf.nr, 3);
    for (size_t i = 0; i < hf.nr; i++)
        ASSERT_EQ(hf.hosts[i].slots, 8);
    ASSERT_STR_EQ(desc, "Slurm job 13: g[1-3], 24 slots (SLURM_GPUS_PER_NODE)");
    dsl_hostfile_release(&hf);
    static const char *const bad[] = {"a100:", "0", "x", "8:a100", "5000"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        dsl_hostfile_init(&hf);
        setenv("SLURM_GPUS_PER_NODE", bad[i], 1);
        ASSERT_EQ(dsl_allocation_load(&hf, desc, sizeof(desc), err), DSL_EHOSTFILE);
        ASSERT_CONTAINS(err, "bad SLURM_GPUS_PER_NODE");
        ASSERT_EQ(hf.nr, 0);
        dsl_hostfile_release(&hf);
    }
    unsetenv("SLURM_GPUS_PER_NODE");
}

TEST(allocation_should_do_nothing_outside_an_allocation)
{
    struct dsl_hostfile hf;
    char desc[160] = "", err[DSL_ERR_LEN];
    dsl_hostfile_init(&hf);
    alloc_env(NULL, NULL, NULL);
    ASSERT_EQ(dsl_allocation_load(&hf, desc, sizeof(desc), err), 0);
    alloc_env(NULL, "n[1-2]", "1(x2)"); /* no job id: not an allocation */
    ASSERT_EQ(dsl_allocation_load(&hf, desc, sizeof(desc), err), 0);
    ASSERT_EQ(hf.nr, 0);
    dsl_hostfile_release(&hf);
}

TEST(allocation_should_name_the_variable_that_is_wrong)
{
    static const struct {
        const char *list, *tpn, *msg;
    } cases[] = {
        {"n[1-2]", NULL, "SLURM_TASKS_PER_NODE is not set (give --hostfile)"},
        {"n[1-2]", "2", "SLURM_TASKS_PER_NODE '2' has 1 node but SLURM_JOB_NODELIST 'n[1-2]' has 2"},
        {"n[1-2]", "2(x3)", "has 3 nodes but SLURM_JOB_NODELIST 'n[1-2]' has 2"},
        {"n[2-1]", "1", "SLURM_JOB_NODELIST: bad host range 'n[2-1]': reversed range"},
        {"n1,-x", "1,1", "SLURM_JOB_NODELIST 'n1,-x': bad host name '-x'"},
        {"n1,n1", "1,1", "names 'n1' twice"},
        {"n[1-2]", "1,0", "gives node 'n2' 0 tasks (expected 1..4096)"},
        {"n[1-2]", "1,5000", "gives node 'n2' 5000 tasks"},
        {"n[1-2]", "1;1", "SLURM_TASKS_PER_NODE: bad tasks-per-node list '1;1'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dsl_hostfile hf;
        char desc[160] = "", err[DSL_ERR_LEN] = "";
        dsl_hostfile_init(&hf);
        alloc_env("7", cases[i].list, cases[i].tpn);
        ASSERT_EQ(dsl_allocation_load(&hf, desc, sizeof(desc), err), DSL_EHOSTFILE);
        ASSERT_CONTAINS(err, "Slurm allocation");
        ASSERT_CONTAINS(err, cases[i].msg);
        ASSERT_EQ(hf.nr, 0);
        dsl_hostfile_release(&hf);
    }
}

int main(int argc, char **argv)
{
    return RUN_TESTS(argc, argv);
}
