/* The rank environment of srun, mpirun and PMIx into dslaunch's contract, and the
 * host lists and tasks-per-node lists it reads (common/rankenv.h, common/hostrange.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/hostrange.h"
#include "dslaunch/common/rankenv.h"
#include "dslaunch/common/strvec.h"
#include "test.h"
#include "test_env.h"

static const char *const all_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_SIZE", "NODE_RANK",
    "GROUP_RANK", "CROSS_RANK", "NNODES", "CROSS_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "DSLAUNCH_RUN_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS",
    "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_DISTRIBUTION", "SLURM_STEP_TASKS_PER_NODE", "SLURM_JOB_ID", "SLURM_STEP_ID",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_RANK", "PMIX_NAMESPACE", NULL};

static void clear_env(void)
{
    for (size_t i = 0; all_vars[i]; i++)
        unsetenv(all_vars[i]);
}

static const char *get(const char *name)
{
    const char *s = getenv(name);
    return s ? s : "(unset)";
}

/* rank 2 of srun -N2 -n3 on n[1-2]: tasks 2,1, so it is alone on node 1 */
static void slurm_step(void)
{
    clear_env();
    test_setenvs(TEST_ENV("SLURM_PROCID=2", "SLURM_LOCALID=0", "SLURM_NODEID=1", "SLURM_NTASKS=3",
                          "SLURM_STEP_NUM_TASKS=3", "SLURM_STEP_NUM_NODES=2",
                          "SLURM_STEP_NODELIST=n[1-2]", "SLURM_JOB_NODELIST=x[1-9]",
                          "SLURM_STEP_TASKS_PER_NODE=2,1", "SLURM_JOB_ID=41", "SLURM_STEP_ID=3"));
}

TEST(rankenv_should_turn_an_srun_step_into_the_contract)
{
    char err[DSL_ERR_LEN] = "";
    const char *src = "x";
    slurm_step();
    ASSERT_OK(dsl_rankenv_adopt(&src, err));
    ASSERT_STR_EQ(src, "srun");
    test_expect_env(TEST_ENV("RANK=2", "WORLD_SIZE=3", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1",
                             "LOCAL_SIZE=1", "NODE_RANK=1", "GROUP_RANK=1", "NNODES=2"));
    /* the first host of the step, not of the job */
    ASSERT_STR_EQ(get("MASTER_ADDR"), "n1");
    /* 29500 + (8 * 41 + 3) mod 3200 */
    ASSERT_STR_EQ(get("MASTER_PORT"), "29831");
    ASSERT_STR_EQ(get("DSLAUNCH_RUN_ID"), "slurm-41.3");
}

TEST(rankenv_should_keep_what_the_user_and_dslaunch_set)
{
    char err[DSL_ERR_LEN] = "";
    const char *src = "x";
    /* RANK present: dslaunch's contract wins, nothing is touched */
    slurm_step();
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "7", 1);
    ASSERT_OK(dsl_rankenv_adopt(&src, err));
    ASSERT(src == NULL);
    ASSERT_STR_EQ(get("WORLD_SIZE"), "7");
    ASSERT_STR_EQ(get("MASTER_ADDR"), "(unset)");
    /* the user's MASTER_ADDR, MASTER_PORT and run id are kept */
    slurm_step();
    test_setenvs(TEST_ENV("MASTER_ADDR=10.1.2.3", "MASTER_PORT=23456", "DSLAUNCH_RUN_ID=mine"));
    ASSERT_OK(dsl_rankenv_adopt(&src, err));
    ASSERT_STR_EQ(src, "srun");
    test_expect_env(TEST_ENV("RANK=2", "MASTER_ADDR=10.1.2.3", "MASTER_PORT=23456",
                             "DSLAUNCH_RUN_ID=mine"));
    /* the step's first node, from the lists there are and as the tasks are laid out */
    static const struct {
        const char *unset[3], *set[3], *master;
    } steps[] = {
        /* no step list: the job's, then the old name */
        {{"SLURM_STEP_NODELIST", NULL}, {NULL}, "x1"},
        {{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", NULL}, {"SLURM_NODELIST=old[3-4]", NULL},
         "old3"},
        /* cyclic still starts on the first node */
        {{NULL}, {"SLURM_DISTRIBUTION=cyclic", NULL}, "n1"},
    };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        slurm_step();
        for (const char *const *u = steps[i].unset; *u; u++)
            unsetenv(*u);
        test_setenvs(steps[i].set);
        ASSERT_OK(dsl_rankenv_adopt(&src, err));
        ASSERT_STR_EQ(get("MASTER_ADDR"), steps[i].master);
    }
    /* arbitrary needs MASTER_ADDR */
    slurm_step();
    setenv("SLURM_DISTRIBUTION", "arbitrary", 1);
    ASSERT_EQ(dsl_rankenv_adopt(&src, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "set MASTER_ADDR to task 0's node");
    setenv("MASTER_ADDR", "n2", 1);
    ASSERT_OK(dsl_rankenv_adopt(&src, err));
    ASSERT_STR_EQ(get("MASTER_ADDR"), "n2");
    /* a WORLD_SIZE that disagrees with the launcher is refused, and nothing is set */
    slurm_step();
    setenv("WORLD_SIZE", "4", 1);
    ASSERT_EQ(dsl_rankenv_adopt(&src, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "WORLD_SIZE is 4 but srun started 3 ranks");
    ASSERT_STR_EQ(get("RANK"), "(unset)");
}

TEST(rankenv_should_leave_a_batch_script_and_a_plain_start_alone)
{
    char err[DSL_ERR_LEN] = "";
    const char *src = "x";
    /* sbatch's script has SLURM_PROCID=0 and SLURM_NTASKS, but is no step */
    clear_env();
    test_setenvs(TEST_ENV("SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_LOCALID=0",
                          "SLURM_JOB_NODELIST=n[1-2]"));
    ASSERT_OK(dsl_rankenv_adopt(&src, err));
    ASSERT(src == NULL);
    ASSERT_STR_EQ(get("RANK"), "(unset)");
    ASSERT_STR_EQ(get("WORLD_SIZE"), "(unset)");
    clear_env();
    ASSERT_OK(dsl_rankenv_adopt(&src, err));
    ASSERT(src == NULL);
}

TEST(rankenv_should_take_mpirun_ranks_and_derive_the_address_only_on_one_node)
{
    char err[DSL_ERR_LEN] = "";
    const char *src = NULL;
    clear_env();
    test_setenvs(TEST_ENV("OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4",
                          "OMPI_COMM_WORLD_LOCAL_RANK=3", "OMPI_COMM_WORLD_LOCAL_SIZE=4",
                          "PMIX_RANK=3", "PMIX_NAMESPACE=prterun-host-1234@1"));
    /* a batch script's variables beside it do not matter: mpirun's are the rank's */
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_STEP_NUM_TASKS", "1", 1);
    ASSERT_OK(dsl_rankenv_adopt(&src, err));
    ASSERT_STR_EQ(src, "mpirun");
    test_expect_env(TEST_ENV("RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=3", "LOCAL_WORLD_SIZE=4",
                             "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500",
                             "DSLAUNCH_RUN_ID=mpi-prterun-host-1234@1", "NODE_RANK=(unset)"));
    /* on two nodes there is no safe guess: MASTER_ADDR must be given */
    clear_env();
    test_setenvs(TEST_ENV("OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=4",
                          "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=2"));
    ASSERT_EQ(dsl_rankenv_adopt(&src, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "without MASTER_ADDR");
    ASSERT_CONTAINS(err, "mpirun -x MASTER_ADDR=");
    ASSERT_STR_EQ(get("RANK"), "(unset)");
    setenv("MASTER_ADDR", "node7", 1);
    ASSERT_OK(dsl_rankenv_adopt(&src, err));
    ASSERT_STR_EQ(get("RANK"), "0");
    ASSERT_STR_EQ(get("MASTER_ADDR"), "node7");
}

TEST(rankenv_should_take_bare_pmix_ranks_only_with_a_world_size)
{
    char err[DSL_ERR_LEN] = "";
    const char *src = NULL;
    clear_env();
    setenv("PMIX_RANK", "1", 1);
    ASSERT_EQ(dsl_rankenv_adopt(&src, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "set WORLD_SIZE");
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "h0", 1);
    ASSERT_OK(dsl_rankenv_adopt(&src, err));
    ASSERT_STR_EQ(src, "pmix");
    ASSERT_STR_EQ(get("RANK"), "1");
    ASSERT_STR_EQ(get("WORLD_SIZE"), "2");
}

TEST(rankenv_should_name_the_bad_variable)
{
    static const struct {
        const char *var, *value, *msg;
    } cases[] = {
        {"SLURM_PROCID", "3", "bad SLURM_PROCID '3' (expected 0..2)"},
        {"SLURM_PROCID", "x", "bad SLURM_PROCID 'x'"},
        {"SLURM_LOCALID", "1", "SLURM_LOCALID 1 is not below the 1 task(s)"},
        {"SLURM_NODEID", "2", "bad SLURM_NODEID '2' (expected 0..1)"},
        {"SLURM_STEP_TASKS_PER_NODE", "2,", "SLURM_STEP_TASKS_PER_NODE: bad tasks-per-node list"},
        {"SLURM_STEP_TASKS_PER_NODE", "2", "has 1 nodes, not node 1"},
        {"SLURM_STEP_NODELIST", "n[2-1]", "SLURM_STEP_NODELIST: bad host range 'n[2-1]'"},
        {"SLURM_STEP_NODELIST", "n1,n[2-1]", "SLURM_STEP_NODELIST: bad host list 'n1,n[2-1]': "
                                             "bad host range 'n[2-1]': reversed range '2-1'"},
        {"SLURM_JOB_ID", "-4", "bad SLURM_JOB_ID '-4'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[DSL_ERR_LEN] = "";
        const char *src = NULL;
        slurm_step();
        setenv(cases[i].var, cases[i].value, 1);
        ASSERT_EQ(dsl_rankenv_adopt(&src, err), DSL_EUSAGE);
        ASSERT_CONTAINS(err, cases[i].msg);
        ASSERT_STR_EQ(get("RANK"), "(unset)");
    }

}

TEST(contract_should_load_defaults_aliases_and_refuse_a_rank_outside_the_world)
{
    clear_env();
    unsetenv("DSLAUNCH_RESTART_COUNT");
    unsetenv("TORCHELASTIC_RESTART_COUNT");
    unsetenv("OMP_NUM_THREADS");
    unsetenv("DSLAUNCH_STORE_FD");
    struct dsl_rankenv e;
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_rankenv_load(&e, err));
    ASSERT(e.rank == 0 && e.world_size == 1 && e.local_rank == 0 && e.local_world_size == 1);
    ASSERT(e.nnodes == 1 && e.master_addr == NULL && e.master_port == 0 && e.store_fd == 0);
    setenv("WORLD_SIZE", "4", 1);
    setenv("RANK", "3", 1);
    setenv("LOCAL_WORLD_SIZE", "x", 1); /* not a count: the default */
    setenv("MASTER_PORT", "70000", 1);   /* not a port: 0, and the text for the store */
    setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
    setenv("OMP_NUM_THREADS", "6", 1);
    ASSERT_OK(dsl_rankenv_load(&e, err));
    ASSERT(e.rank == 3 && e.world_size == 4 && e.local_world_size == 1);
    ASSERT(e.master_port == 0 && !strcmp(e.master_port_text, "70000"));
    ASSERT(e.restart_count == 2 && e.omp_threads == 6);
    setenv("DSLAUNCH_RESTART_COUNT", "1", 1); /* dslaunch's name first */
    ASSERT_OK(dsl_rankenv_load(&e, err));
    ASSERT_EQ(e.restart_count, 1);
    setenv("RANK", "4", 1);
    ASSERT_EQ(dsl_rankenv_load(&e, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "bad RANK: allowed 0..3, got '4'");
    unsetenv("DSLAUNCH_RESTART_COUNT");
    unsetenv("TORCHELASTIC_RESTART_COUNT");
    unsetenv("OMP_NUM_THREADS");
    clear_env();
}

TEST(contract_should_export_every_alias_beside_its_name_and_a_rank_apart)
{
    struct dsl_rankenv e = {.world_size = 8, .local_world_size = 4, .node_rank = 1,
                            .nnodes = 2, .master_addr = "10.0.0.1", .master_port = 29500,
                            .cuda_visible_devices = "0,1,2,3", .run_id = "r1",
                            .run_token = "t", .restart_count = 2, .max_restarts = 3,
                            .omp_threads = 5, .store_fd = 7, .rank = 6, .local_rank = 2};
    struct dsl_strvec env;
    dsl_strvec_init(&env);
    dsl_rankenv_export(&e, DSL_RANKENV_NODE, &env);
    static const char *const node[] = {
        "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", "WORLD_SIZE=8", "LOCAL_WORLD_SIZE=4",
        "LOCAL_SIZE=4", "NODE_RANK=1", "GROUP_RANK=1", "CROSS_RANK=1", "NNODES=2",
        "CROSS_SIZE=2", "CUDA_VISIBLE_DEVICES=0,1,2,3", "DSLAUNCH_RUN_ID=r1",
        "DSLAUNCH_RUN_TOKEN=t", "DSLAUNCH_RESTART_COUNT=2", "TORCHELASTIC_RESTART_COUNT=2",
        "TORCHELASTIC_MAX_RESTARTS=3", NULL}; /* the launcher's order; no node facts */
    for (size_t i = 0; node[i]; i++)
        ASSERT_STR_EQ(env.v[i], node[i]);
    ASSERT_EQ(env.nr, 16);
    dsl_strvec_clear(&env);
    dsl_rankenv_export(&e, DSL_RANKENV_RANK, &env);
    ASSERT_EQ(env.nr, 2);
    ASSERT_STR_EQ(env.v[0], "RANK=6");
    ASSERT_STR_EQ(env.v[1], "LOCAL_RANK=2");
    dsl_strvec_release(&env);
    ASSERT_EQ(dsl_rankenv_omp_share(16, 3), 5);
    ASSERT_EQ(dsl_rankenv_omp_share(2, 8), 1);
    ASSERT_EQ(dsl_rankenv_omp_share(-1, 1), 1); /* sysconf failed */
}

TEST(tasks_per_node_should_expand_repeats_and_refuse_malformed_lists)
{
    char err[DSL_ERR_LEN];
    int t = -1, n = -1;
    ASSERT_OK(dsl_rankenv_tasks_nodes("2(x3),1", &n, err));
    ASSERT_EQ(n, 4);
    for (int node = 0; node < 3; node++) {
        ASSERT_OK(dsl_rankenv_tasks_on_node("2(x3),1", node, &t, err));
        ASSERT_EQ(t, 2);
    }
    ASSERT_OK(dsl_rankenv_tasks_on_node("2(x3),1", 3, &t, err));
    ASSERT_EQ(t, 1);
    ASSERT_EQ(dsl_rankenv_tasks_on_node("2(x3),1", 4, &t, err), -EINVAL);
    ASSERT_CONTAINS(err, "has 4 nodes, not node 4");
    static const char *const bad[] = {"", ",", "2,", "x", "2(x)", "2(x0)", "2(3)", "2(x3",
                                      "2(x3)x", "(x3)", "2(x-1)", "99999999999999999",
                                      "2(x2000000)"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ASSERT_EQ(dsl_rankenv_tasks_nodes(bad[i], &n, err), -EINVAL);
        ASSERT_CONTAINS(err, "tasks-per-node list");
    }
    /* every node's count in one pass, for exactly the list's node count */
    int all[5] = {-1, -1, -1, -1, -1};
    ASSERT_OK(dsl_rankenv_tasks_all("2(x3),1", all, 4, err));
    ASSERT(all[0] == 2 && all[1] == 2 && all[2] == 2 && all[3] == 1 && all[4] == -1);
    ASSERT_EQ(dsl_rankenv_tasks_all("2(x3),1", all, 3, err), -EINVAL);
    ASSERT_CONTAINS(err, "has 4 nodes, not 3");
    ASSERT_EQ(all[4], -1); /* never past the n it was given */
    ASSERT_EQ(dsl_rankenv_tasks_all("2(x", all, 4, err), -EINVAL);
}

TEST(hostlist_should_split_at_commas_outside_brackets)
{
    char err[DSL_ERR_LEN];
    struct dsl_strvec v;
    dsl_strvec_init(&v);
    ASSERT_OK(dsl_hostlist_expand("n[1-3,5],gpu7,r[1-2]n[08-09]", &v, err));
    static const char *const want[] = {"n1",     "n2",     "n3",     "n5",    "gpu7",
                                       "r1n08",  "r1n09",  "r2n08",  "r2n09"};
    ASSERT_EQ(v.nr, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < v.nr; i++)
        ASSERT_STR_EQ(v.v[i], want[i]);
    dsl_strvec_release(&v);
    static const struct {
        const char *list, *msg;
    } bad[] = {
        {"", "empty"},
        {"n1,,n2", "empty item at offset 3"},
        {"n1,", "empty item at offset 3"},
        {"n[1-2", "bad host range 'n[1-2': unclosed '['"},
        {"a,n[1-2", "bad host list 'a,n[1-2': bad host range 'n[1-2': unclosed '['"},
        {"n1]", "unmatched ']'"},
        {"a[0-60000],b[0-9999]", "more than 65536 hosts"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        dsl_strvec_init(&v);
        ASSERT_EQ(dsl_hostlist_expand(bad[i].list, &v, err), -EINVAL);
        ASSERT_CONTAINS(err, bad[i].msg);
        ASSERT_EQ(v.nr, 0);
        dsl_strvec_release(&v);
    }

}

TEST_MAIN()
