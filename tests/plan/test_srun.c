/* The srun command line of the slurm transport (plan/srun.h). */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/plan/srun.h"
#include "test.h"

static char *joined(const struct dsl_strvec *v)
{
    static char buf[4096];
    buf[0] = '\0';
    for (size_t i = 0; i < v->nr; i++) {
        if (i)
            strcat(buf, "|");
        strcat(buf, v->v[i]);
    }
    return buf;
}

TEST(srun_argv_should_start_one_agent_per_host_in_the_plans_order)
{
    struct dsl_strvec v;
    char err[DSL_ERR_LEN];
    const char *hosts[] = {"gpu9", "gpu1", "cpu3", NULL};
    const char *agent[] = {"/opt/my dslaunch", "--agent", NULL};
    dsl_strvec_init(&v);
    unsetenv("DSLAUNCH_SRUN");
    unsetenv("SLURM_STEP_ID");
    ASSERT_OK(dsl_srun_argv(&v, NULL, (char **)hosts, 3, (char **)agent, "10.0.0.1:4000", "abcd", err));
    ASSERT_STR_EQ(joined(&v), "srun|--nodes=3|--ntasks=3|--ntasks-per-node=1|--kill-on-bad-exit=1|"
                              "--nodelist=gpu9,gpu1,cpu3|--job-name=dslaunch|/opt/my dslaunch|"
                              "--agent|--slurm-nodes|gpu9,gpu1,cpu3|--connect|10.0.0.1:4000|"
                              "--launcher-key|abcd");
    dsl_strvec_release(&v);
}

TEST(srun_argv_should_split_launcher_args_on_whitespace_only)
{
    struct dsl_strvec v;
    char err[DSL_ERR_LEN];
    const char *hosts[] = {"n1", NULL};
    const char *agent[] = {"dslaunch", "--agent", NULL};
    dsl_strvec_init(&v);
    setenv("DSLAUNCH_SRUN", "/usr/local/bin/srun", 1);
    ASSERT_OK(dsl_srun_argv(&v, "  -p gpu\t--comment='a b'\n--x=$(id)*  ", (char **)hosts, 1,
                            (char **)agent, "c",
                            "k", err));
    unsetenv("DSLAUNCH_SRUN");
    ASSERT_STR_EQ(joined(&v), "/usr/local/bin/srun|--nodes=1|--ntasks=1|--ntasks-per-node=1|"
                              "--kill-on-bad-exit=1|--nodelist=n1|--job-name=dslaunch|-p|gpu|"
                              "--comment='a|b'|--x=$(id)*|dslaunch|--agent|--slurm-nodes|n1|"
                              "--connect|c|--launcher-key|k");
    dsl_strvec_release(&v);
}

TEST(srun_argv_should_overlap_the_step_it_runs_in)
{
    struct dsl_strvec v;
    char err[DSL_ERR_LEN];
    const char *hosts[] = {"n1", NULL};
    const char *agent[] = {"dslaunch", NULL};
    static const struct {
        const char *step;
        int overlap;
    } cases[] = {{"0", 1}, {"17", 1}, {"4294967294", 0}, {"batch", 0}, {NULL, 0}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (cases[i].step)
            setenv("SLURM_STEP_ID", cases[i].step, 1);
        else
            unsetenv("SLURM_STEP_ID");
        dsl_strvec_init(&v);
        ASSERT_OK(dsl_srun_argv(&v, NULL, (char **)hosts, 1, (char **)agent, "c", "k", err));
        ASSERT_EQ(strstr(joined(&v), "|--job-name=dslaunch|--overlap|dslaunch|") != NULL,
                  cases[i].overlap);
        dsl_strvec_release(&v);
    }
    unsetenv("SLURM_STEP_ID");
}

TEST(srun_argv_should_refuse_a_host_that_nodelist_would_read_as_a_range_or_option)
{
    char err[DSL_ERR_LEN];
    const char *agent[] = {"dslaunch", NULL};
    const char *bad[] = {"n[1-3]", "a,b", "-w", "", "a b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct dsl_strvec v;
        dsl_strvec_init(&v);
        const char *hosts[] = {"ok", (char *)bad[i], NULL};
        ASSERT_EQ(dsl_srun_argv(&v, NULL, (char **)hosts, 2, (char **)agent, "c", "k", err), DSL_EUSAGE);
        ASSERT_CONTAINS(err, "cannot be passed to srun --nodelist");
        ASSERT_EQ(v.nr, 0);
        dsl_strvec_release(&v);
    }
}

TEST_MAIN()
