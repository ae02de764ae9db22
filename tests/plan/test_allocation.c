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
    unsetenv("SLURM_GPUS");
    unsetenv("SLURM_GPUS_ON_NODE");
    unsetenv("SLURM_STEP_ID");
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
    ASSERT_EQ(dsl_allocation_load(&hf, -1, desc, sizeof(desc), err), 1);
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
    ASSERT_EQ(dsl_allocation_load(&hf, -1, desc, sizeof(desc), err), 1);
    ASSERT_EQ(hf.nr, 3);
    for (size_t i = 0; i < hf.nr; i++)
        ASSERT_EQ(hf.hosts[i].slots, 8);
    ASSERT_STR_EQ(desc, "Slurm job 13: g[1-3], 24 slots (SLURM_GPUS_PER_NODE)");
    dsl_hostfile_release(&hf);
    static const char *const bad[] = {"a100:", "0", "x", "8:a100", "5000"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        dsl_hostfile_init(&hf);
        setenv("SLURM_GPUS_PER_NODE", bad[i], 1);
        ASSERT_EQ(dsl_allocation_load(&hf, -1, desc, sizeof(desc), err), DSL_EHOSTFILE);
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
    ASSERT_EQ(dsl_allocation_load(&hf, -1, desc, sizeof(desc), err), 0);
    alloc_env(NULL, "n[1-2]", "1(x2)"); /* no job id: not an allocation */
    ASSERT_EQ(dsl_allocation_load(&hf, -1, desc, sizeof(desc), err), 0);
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
        ASSERT_EQ(dsl_allocation_load(&hf, -1, desc, sizeof(desc), err), DSL_EHOSTFILE);
        ASSERT_CONTAINS(err, "Slurm allocation");
        ASSERT_CONTAINS(err, cases[i].msg);
        ASSERT_EQ(hf.nr, 0);
        dsl_hostfile_release(&hf);
    }
}

/* In a job step (srun -N1 -n1 dslaunch, srun --nodes=1 --pty bash) srun sets
 * SLURM_TASKS_PER_NODE to the step's tasks, while SLURM_JOB_NODELIST stays the job's:
 * the message says so and how to go on, and --num_gpus gives every node its slots */
TEST(allocation_should_explain_a_job_step_narrower_than_the_job)
{
    struct dsl_hostfile hf;
    char desc[160] = "", err[DSL_ERR_LEN] = "";
    dsl_hostfile_init(&hf);
    alloc_env("7", "n[1-2]", "1");
    setenv("SLURM_STEP_ID", "0", 1);
    ASSERT_EQ(dsl_allocation_load(&hf, -1, desc, sizeof(desc), err), DSL_EHOSTFILE);
    ASSERT_CONTAINS(err, "SLURM_TASKS_PER_NODE '1' has 1 node but SLURM_JOB_NODELIST 'n[1-2]' "
                         "has 2: dslaunch runs in step 0 of job 7, and srun sets "
                         "SLURM_TASKS_PER_NODE to that step's tasks");
    ASSERT_CONTAINS(err, "--num_gpus N");
    ASSERT_EQ(hf.nr, 0);
    ASSERT_EQ(dsl_allocation_load(&hf, 2, desc, sizeof(desc), err), 1);
    ASSERT_EQ(hf.nr, 2);
    ASSERT_EQ(hf.hosts[1].slots, 2);
    dsl_hostfile_release(&hf);
    unsetenv("SLURM_STEP_ID");
}

/* load the allocation n[1-2] (one task a node) and return node 0's slots, or the error */
static int gpu_alloc(int num_gpus, char *desc, char *err)
{
    struct dsl_hostfile hf;
    dsl_hostfile_init(&hf);
    int r = dsl_allocation_load(&hf, num_gpus, desc, 160, err);
    if (r == 1) {
        ASSERT_EQ(hf.nr, 2);
        ASSERT_EQ(hf.hosts[1].slots, hf.hosts[0].slots);
        r = hf.hosts[0].slots;
    }
    dsl_hostfile_release(&hf);
    return r;
}

TEST(allocation_should_count_gpus_from_what_slurm_sets_for_each_way_to_ask)
{
    char desc[160], err[DSL_ERR_LEN];
    alloc_env("20", "n[1-2]", "1(x2)");
    ASSERT_EQ(gpu_alloc(-1, desc, err), 1); /* no GPU variable: the tasks */
    setenv("SLURM_GPUS_ON_NODE", "2", 1);   /* sbatch --gres=gpu:2 */
    ASSERT_EQ(gpu_alloc(-1, desc, err), 2);
    ASSERT_STR_EQ(desc, "Slurm job 20: n[1-2], 4 slots (SLURM_GPUS_ON_NODE)");
    ASSERT_EQ(gpu_alloc(1, desc, err), 2); /* --num_gpus then filters (placement) */
    setenv("SLURM_GPUS_PER_NODE", "a100:2,v100:1", 1); /* wins: the per-node request */
    ASSERT_EQ(gpu_alloc(-1, desc, err), 3);
    unsetenv("SLURM_GPUS_PER_NODE");
    unsetenv("SLURM_GPUS_ON_NODE");
    ASSERT_EQ(gpu_alloc(4, desc, err), 4); /* salloc --gres=gpu:4 sets nothing */
    ASSERT_STR_EQ(desc, "Slurm job 20: n[1-2], 8 slots (--num_gpus)");
}

TEST(allocation_should_refuse_a_gpu_total_it_cannot_split_between_nodes)
{
    char desc[160], err[DSL_ERR_LEN];
    alloc_env("21", "n[1-2]", "1(x2)");
    setenv("SLURM_GPUS", "3", 1);
    setenv("SLURM_GPUS_ON_NODE", "2", 1); /* the batch node's share, not the other's */
    ASSERT_EQ(gpu_alloc(-1, desc, err), DSL_EHOSTFILE);
    ASSERT_STR_EQ(err, "Slurm allocation: --gpus=3 (SLURM_GPUS) does not say how many GPUs "
                       "each of the 2 nodes got; ask Slurm with --gpus-per-node, or give "
                       "--num_gpus");
    ASSERT_EQ(gpu_alloc(1, desc, err), 1);
    struct dsl_hostfile hf;
    dsl_hostfile_init(&hf);
    alloc_env("22", "n1", "1");
    setenv("SLURM_GPUS", "3", 1);
    ASSERT_EQ(dsl_allocation_load(&hf, -1, desc, sizeof(desc), err), 1);
    ASSERT_EQ(hf.hosts[0].slots, 3); /* one node has them all */
    dsl_hostfile_release(&hf);
    static const char *const bad[] = {"", ",", "a100:2,", "x:0", ":", "2,,1"};
    for (size_t i = 1; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("SLURM_GPUS", bad[i], 1);
        ASSERT_EQ(gpu_alloc(-1, desc, err), DSL_EHOSTFILE);
        ASSERT_CONTAINS(err, "bad SLURM_GPUS '");
    }
    unsetenv("SLURM_GPUS");
}

TEST(allocation_should_read_the_largest_lists_in_one_pass_each)
{
    /* found by fuzz_allocation as a timeout: each node's task count walked the whole
       tasks-per-node list, and each name was compared with every earlier one, so
       65536 nodes took about 12 s (32768 with "1,1,...,1": 19 s), and over a minute
       under ASan */
    struct dsl_hostfile hf;
    char desc[160] = "", err[DSL_ERR_LEN];
    size_t n = 32768;
    char *tpn = malloc(2 * n);
    ASSERT(tpn != NULL);
    for (size_t i = 0; i < n; i++) {
        tpn[2 * i] = i == n - 1 ? '3' : i % 2 ? '2' : '1';
        tpn[2 * i + 1] = i == n - 1 ? '\0' : ',';
    }
    dsl_hostfile_init(&hf);
    alloc_env("14", "n[00000-32767]", tpn);
    ASSERT_EQ(dsl_allocation_load(&hf, -1, desc, sizeof(desc), err), 1);
    ASSERT_EQ(hf.nr, n);
    ASSERT_STR_EQ(hf.hosts[0].name, "n00000");
    ASSERT_STR_EQ(hf.hosts[n - 1].name, "n32767");
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(hf.hosts[i].slots, i == n - 1 ? 3 : i % 2 ? 2 : 1);
    ASSERT_STR_EQ(desc, "Slurm job 14: n[00000-32767], 49153 slots");
    dsl_hostfile_release(&hf);
    free(tpn);
    /* the first name that repeats an earlier one is named, also in a list of 65536 and
       in another case ('N00002' is 'n00002') */
    dsl_hostfile_init(&hf);
    alloc_env("15", "n[00000-65533],N00002,n00001", "1(x65536)");
    ASSERT_EQ(dsl_allocation_load(&hf, -1, desc, sizeof(desc), err), DSL_EHOSTFILE);
    ASSERT_CONTAINS(err, "names 'N00002' twice");
    ASSERT_EQ(hf.nr, 0);
    dsl_hostfile_release(&hf);
}

TEST_MAIN()
