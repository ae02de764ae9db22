/* Unit tests of dslaunch's option parsing. */
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/plan/plan.h"
#include "dslaunch/plan/options.h"
#include "test.h"

static int parse(struct dsl_launch_opts *o, const char *const *args, char *err)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)"dslaunch";
    for (int i = 0; args[i]; i++)
        argv[argc++] = (char *)args[i];
    argv[argc] = NULL;
    dsl_launch_opts_init(o);
    return dsl_launch_opts_parse(o, argc, argv, err);
}

/* args are refused as DSL_EUSAGE; the message in err */
static void refuse(const char *const *args, char *err)
{
    struct dsl_launch_opts o;
    ASSERT_EQ(parse(&o, args, err), DSL_EUSAGE);
    dsl_launch_opts_release(&o);
}

/* a command line (NULL-terminated) and a part of the message that refuses it */
struct refusal {
    const char *args[8];
    const char *msg;
};

static void refuse_each(const struct refusal *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char err[DSL_ERR_LEN] = "";
        refuse(cases[i].args, err);
        ASSERT_CONTAINS(err, cases[i].msg);
    }
}

TEST(options_should_accept_both_spellings_and_both_value_forms)
{
    struct dsl_launch_opts o;
    char err[DSL_ERR_LEN];
    const char *a1[] = {"--num-gpus=2", "--num_nodes", "3", "--master-port", "1234",
                        "--term_timeout=2.5", "-i", "h:0", "prog", NULL};
    ASSERT_OK(parse(&o, a1, err));
    ASSERT_EQ(o.num_gpus, 2);
    ASSERT_EQ(o.num_nodes, 3);
    ASSERT_EQ(o.master_port, 1234);
    ASSERT(o.master_port_given);
    ASSERT(o.term_timeout == 2.5);
    ASSERT_STR_EQ(o.include, "h:0");
    ASSERT_EQ(o.argv.nr, 1);
    dsl_launch_opts_release(&o);

    const char *a2[] = {"-H", "hosts.txt", "--exclude=w1", "--ssh-accept-new", "--launcher",
                        "local", "-iw2", "x", NULL};
    ASSERT_OK(parse(&o, a2, err));
    ASSERT_STR_EQ(o.hostfile, "hosts.txt");
    ASSERT(o.hostfile_given);
    ASSERT_STR_EQ(o.exclude, "w1");
    ASSERT_STR_EQ(o.include, "w2");
    ASSERT(o.tr.accept_new);
    ASSERT_EQ(o.launcher, DSL_LAUNCHER_LOCAL);
    dsl_launch_opts_release(&o);
}

TEST(options_should_take_deepspeeds_num_accelerators_and_explain_torchrun_rendezvous_flags)
{
    struct dsl_launch_opts o;
    char err[DSL_ERR_LEN];
    const char *a[] = {"--num_accelerators", "2", "prog", NULL};
    ASSERT_OK(parse(&o, a, err));
    ASSERT_EQ(o.num_gpus, 2);
    dsl_launch_opts_release(&o);
    const char *b[] = {"--num-accelerators=0", "prog", NULL};
    refuse(b, err);
    ASSERT_CONTAINS(err, "option '--num_accelerators' is out of range");
    static const struct refusal cases[] = {
        {{"--standalone", "--nproc_per_node", "2", "p", NULL},
         "option '--standalone' is torchrun's; dslaunch does not need it: a job on this machine"},
        {{"--rdzv_backend", "c10d", "p", NULL}, "--master_addr and --master_port"},
        {{"--rdzv-endpoint=10.0.0.1:29400", "p", NULL},
         "option '--rdzv_endpoint' is torchrun's; dslaunch does not need it: the nodes meet"},
        {{"--rdzv_id", "42", "p", NULL}, "DSLAUNCH_RUN_ID"},
        {{"--tee", "3", "p", NULL}, "--log-dir DIR"},
        {{"--venv_script", "/v/bin/activate", "p", NULL},
         "option '--venv_script' is DeepSpeed's; dslaunch has no such feature: ranks run the "
         "python3 of their PATH: activate the venv here, and every node runs the venv's "
         "python3 if it is at the same path there"},
        {{"--comment", "x", "p", NULL}, "--launcher-args '--comment=TEXT'"},
    };
    refuse_each(cases, sizeof(cases) / sizeof(cases[0]));
}

TEST(options_should_take_accelerates_launch_flags_for_their_meaning)
{
    struct dsl_launch_opts o;
    char err[DSL_ERR_LEN];
    /* one machine: --num_processes is the ranks of this node */
    const char *a[] = {"--num_processes", "4", "prog", NULL};
    ASSERT_OK(parse(&o, a, err));
    ASSERT_EQ(o.nproc_per_node, 4);
    ASSERT_EQ(o.num_gpus, 4); /* as --nproc_per_node outside no-ssh mode */
    dsl_launch_opts_release(&o);
    /* one accelerate launch per machine: no-ssh mode, the total split over the machines */
    const char *b[] = {"--num_processes=8", "--num_machines", "2", "--machine-rank", "1",
                       "--main_process_ip", "10.0.0.1", "--main_process_port", "29600",
                       "prog", NULL};
    ASSERT_OK(parse(&o, b, err));
    ASSERT_EQ(o.nnodes, 2);
    ASSERT_EQ(o.node_rank, 1);
    ASSERT_EQ(o.nproc_per_node, 4);
    ASSERT_STR_EQ(o.master_addr, "10.0.0.1");
    ASSERT_EQ(o.master_port, 29600);
    ASSERT(o.master_port_given);
    dsl_launch_opts_release(&o);
    static const struct refusal cases[] = {
        {{"--num_processes", "5", "--num_machines", "2", "p", NULL},
         "--num_processes 5 (ranks in all) does not divide among --num_machines 2"},
        {{"--num_processes", "4", "--nproc_per_node", "3", "p", NULL},
         "--num_processes 4 over 1 node is 4 per node, but --nproc_per_node is 3"},
        {{"--main_process_port", "0", "p", NULL}, "option '--main_process_port' is out of "
                                                  "range: allowed 1..65535"},
        /* a mistyped option is answered with the nearest one of the table */
        {{"--num_gpu", "2", "p", NULL}, "unknown option '--num_gpu': did you mean "
                                        "'--num_gpus'?"},
        {{"--host-file", "h", "p", NULL}, "did you mean '--hostfile'?"},
        {{"--log-dri", "d", "p", NULL}, "did you mean '--log-dir'?"},
    };
    refuse_each(cases, sizeof(cases) / sizeof(cases[0]));
}

TEST(options_should_take_the_restart_options_with_torchrun_spellings)
{
    struct dsl_launch_opts o;
    char err[DSL_ERR_LEN];
    const char *a0[] = {"prog", NULL};
    ASSERT_OK(parse(&o, a0, err));
    ASSERT_EQ(o.max_restarts, 0);
    ASSERT_EQ(o.exclude_failed_nodes, 0);
    ASSERT_EQ(o.min_nodes, 1);
    dsl_launch_opts_release(&o);
    const char *a1[] = {"--max_restarts=3", "--exclude-failed-nodes", "--min-nodes", "2",
                        "prog", NULL};
    ASSERT_OK(parse(&o, a1, err));
    ASSERT_EQ(o.max_restarts, 3);
    ASSERT(o.exclude_failed_nodes);
    ASSERT_EQ(o.min_nodes, 2);
    dsl_launch_opts_release(&o);
    const char *a2[] = {"--max-restarts", "-1", "prog", NULL};
    refuse(a2, err);
    ASSERT_CONTAINS(err, "--max_restarts");
    const char *a3[] = {"--min-nodes=0", "prog", NULL};
    refuse(a3, err);
    ASSERT_CONTAINS(err, "--min_nodes");
}

TEST(options_should_pass_everything_after_the_program_untouched)
{
    struct dsl_launch_opts o;
    char err[DSL_ERR_LEN];
    const char *a[] = {"--num_gpus", "1", "prog", "--num_gpus", "7", "--", "-x", "", NULL};
    ASSERT_OK(parse(&o, a, err));
    ASSERT_EQ(o.num_gpus, 1);
    ASSERT_EQ(o.argv.nr, 6);
    ASSERT_STR_EQ(o.argv.v[0], "prog");
    ASSERT_STR_EQ(o.argv.v[1], "--num_gpus");
    ASSERT_STR_EQ(o.argv.v[3], "--");
    ASSERT_STR_EQ(o.argv.v[5], "");
    dsl_launch_opts_release(&o);

    const char *b[] = {"--", "--weird-program", "-v", NULL};
    ASSERT_OK(parse(&o, b, err));
    ASSERT_STR_EQ(o.argv.v[0], "--weird-program");
    ASSERT_STR_EQ(o.argv.v[1], "-v");
    dsl_launch_opts_release(&o);
}

TEST(options_should_reject_bad_values_with_the_option_named)
{
    static const struct refusal cases[] = {
        {{"--num_gpus", "x", "p", NULL}, "--num_gpus"},
        /* the rank contract is dslaunch's: an exported value would be replaced */
        {{"--export", "RANK=5", "p", NULL},
         "'--export RANK=5': dslaunch sets RANK for every rank, and an exported value would "
         "be replaced; the placement decides it"},
        {{"--export=MASTER_ADDR=127.0.0.2", "p", NULL},
         "dslaunch sets MASTER_ADDR for every rank, and an exported value would be replaced; "
         "use --master_addr"},
        {{"--export", "MASTER_PORT", "p", NULL}, "use --master_port"},
        {{"--export", "TORCHELASTIC_MAX_RESTARTS=3", "p", NULL}, "use --max-restarts"},
        {{"--num_gpus=0", "p", NULL}, "--num_gpus"},
        {{"--master_port", "70000", "p", NULL}, "--master_port"},
        {{"--master_port=", "p", NULL}, "--master_port"},
        {{"--term-timeout", "soon", "p", NULL}, "--term_timeout"},
        {{"--term-timeout", "3601", "p", NULL},
         "option '--term_timeout' is out of range: allowed 0..3600 seconds, got '3601'"},
        {{"--keepalive", "0.2", "p", NULL},
         "option '--keepalive' is out of range: allowed 2..3600 seconds, got '0.2'"},
        {{"--keepalive", "1e308", "p", NULL},
         "option '--keepalive' is out of range: allowed 2..3600 seconds, got '1e308'"},
        {{"--connect-timeout", "0", "p", NULL},
         "option '--connect_timeout' is out of range: allowed 1..3600 seconds, got '0'"},
        {{"--hang-timeout", "8d", "p", NULL}, "option '--hang_timeout' needs a duration"},
        {{"--hang-timeout", "170h", "p", NULL},
         "option '--hang_timeout' is out of range: allowed 0..604800 seconds, got '170h'"},
        {{"--hang-timeout", "0.5", "p", NULL},
         "option '--hang-timeout' is under a second: allowed 0 (off) or 1..604800 seconds"},
        {{"--job-timeout", "-1", "p", NULL}, "option '--job_timeout' is out of range"},
        {{"--output-buffer", "1K", "p", NULL},
         "option '--output_buffer' is out of range: allowed 64K..64G bytes, got '1K'"},
        {{"--rank-memory-limit", "1M", "p", NULL},
         "option '--rank_memory_limit' is out of range: allowed 16M..1P bytes, got '1M'"},
        {{"--fanout", "9223372036854775808", "p", NULL},
         "option '--fanout' is out of range: allowed 1..16777216, got '9223372036854775808'"},
        {{"--master-port", "99999999999999999999", "p", NULL},
         "option '--master_port' is out of range: allowed 1..65535, got '99999999999999999999'"},
        {{"--launcher", "slurmish", "p", NULL}, "slurmish"},
        {{"--launcher", "ssh", "--launcher_args", "-p x", "p", NULL},
         "--launcher_args passes options to a launcher command (pdsh, mpirun, srun), which "
         "--launcher ssh does not run: use --launcher pdsh, openmpi or slurm"},
        {{"--launcher", "local", "--launcher_args", "-f 1", "p", NULL},
         "which --launcher local does not run"},
        {{"--force_multi", "--launcher_args", "-f 1", "p", NULL},
         "which --launcher ssh does not run"},
        {{"--slurm-nodes", "n1", "p", NULL}, "are for --agent only"},
        {{"--bogus", "p", NULL}, "--bogus"},
        {{"--dry-run=yes", "p", NULL}, "takes no value"},
        {{"--hostfile", NULL}, "needs a value"},
        {{"-i", "a:0", "-i", "b", "p", NULL},
         "option '--include' given twice ('a:0' and 'b'): one --include names every host, "
         "joined with '@'"},
        {{"--exclude=a", "-e", "b", "p", NULL}, "option '--exclude' given twice"},
        {{"--export", "1BAD", "p", NULL}, "1BAD"},
        {{"--export", "A-B=1", "p", NULL}, "A-B"},
        {{NULL}, "no program"},
    };
    refuse_each(cases, sizeof(cases) / sizeof(cases[0]));
}

TEST(options_should_take_the_slurm_launcher_and_its_srun_options)
{
    struct dsl_launch_opts o;
    char err[DSL_ERR_LEN];
    const char *a[] = {"--launcher", "slurm", "--launcher_args", "-p gpu --time=10", "p", NULL};
    ASSERT_OK(parse(&o, a, err));
    ASSERT_EQ(o.launcher, DSL_LAUNCHER_SLURM);
    ASSERT_STR_EQ(o.tr.launcher_args, "-p gpu --time=10");
    dsl_launch_opts_release(&o);
    const char *b[] = {"--launcher-args=-N2", "p", NULL}; /* auto: slurm in an allocation */
    ASSERT_OK(parse(&o, b, err));
    ASSERT_STR_EQ(o.tr.launcher_args, "-N2");
    dsl_launch_opts_release(&o);
    /* pdsh and mpirun take them too */
    const char *c[] = {"--launcher", "pdsh", "--launcher_args", "-f 1", "p", NULL};
    ASSERT_OK(parse(&o, c, err));
    ASSERT_STR_EQ(o.tr.launcher_args, "-f 1");
    dsl_launch_opts_release(&o);
    const char *d[] = {"--launcher", "openmpi", "--launcher_args", "--mca x 1", "p", NULL};
    ASSERT_OK(parse(&o, d, err));
    ASSERT_STR_EQ(o.tr.launcher_args, "--mca x 1");
    dsl_launch_opts_release(&o);
}

TEST(options_should_allow_check_without_a_program)
{
    struct dsl_launch_opts o;
    char err[DSL_ERR_LEN];
    const char *a[] = {"--check", "--hostfile", "h", NULL};
    ASSERT_OK(parse(&o, a, err));
    ASSERT_EQ(o.mode, DSL_MODE_CHECK);
    dsl_launch_opts_release(&o);
}

TEST(train_should_resolve_to_the_dstrain_beside_dslaunch)
{
    char *p = dsl_plan_program_name("train", "/nonexistent-dir");
    ASSERT_STR_EQ(p, "dstrain");
    free(p);
    p = dsl_plan_program_name("python3", "/usr/bin");
    ASSERT_STR_EQ(p, "python3");
    free(p);
    p = dsl_plan_program_name("train", NULL);
    ASSERT_STR_EQ(p, "train");
    free(p);
}

TEST(options_forward_should_keep_other_options_with_their_values_up_to_the_program)
{
    static const char *const args[] = {
        "dslaunch", "--dry-run", "-H", "hosts", "--term-timeout", "5", "--emit=sbatch=j.sh",
        "-v", "--export", "A=1", "--num-nodes=2", "--launcher_args", "-p gpu", "-i", "n1",
        "prog", "--term-timeout", "9"};
    char *argv[sizeof(args) / sizeof(args[0])];
    int argc = (int)(sizeof(args) / sizeof(args[0]));
    for (int i = 0; i < argc; i++)
        argv[i] = (char *)args[i];
    static const char *const drop[] = {"dry_run", "emit", "hostfile", "include",
                                       "num_nodes", NULL};
    struct dsl_strvec out;
    dsl_strvec_init(&out);
    dsl_launch_opts_forward(argc, argv, drop, &out);
    static const char *const want[] = {"--term-timeout", "5", "-v", "--export", "A=1",
                                       "--launcher_args", "-p gpu"};
    ASSERT_EQ(out.nr, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < out.nr; i++)
        ASSERT_STR_EQ(out.v[i], want[i]);
    dsl_strvec_release(&out);
}

TEST(options_should_take_emit_only_with_dry_run_and_a_known_kind)
{
    struct dsl_launch_opts o;
    char err[DSL_ERR_LEN];
    const char *ok[] = {"--dry-run", "--emit", "sbatch=x.sh", "prog", NULL};
    ASSERT_OK(parse(&o, ok, err));
    ASSERT_EQ(o.emit, DSL_EMIT_SBATCH);
    ASSERT_STR_EQ(o.emit_file, "x.sh");
    dsl_launch_opts_release(&o);
    const char *no_dry[] = {"--emit", "sbatch", "prog", NULL};
    refuse(no_dry, err);
    ASSERT_STR_EQ(err, "--emit writes a batch script instead of running: it needs --dry-run");
    const char *kind[] = {"--dry-run", "--emit", "pbs", "prog", NULL};
    refuse(kind, err);
    ASSERT_CONTAINS(err, "not 'pbs'");
    const char *empty[] = {"--dry-run", "--emit", "sbatch=", "prog", NULL};
    refuse(empty, err);
}

TEST(emit_jobset_should_need_an_image_in_any_order_and_no_no_ssh_options)
{
    struct dsl_launch_opts o;
    char err[DSL_ERR_LEN];
    const char *before[] = {"--image", "reg/i:1", "--dry-run", "--emit", "jobset=j.yaml",
                            "p", NULL};
    ASSERT_EQ(parse(&o, before, err), 0);
    ASSERT_EQ(o.emit, DSL_EMIT_JOBSET);
    ASSERT_STR_EQ(o.image, "reg/i:1");
    ASSERT_STR_EQ(o.emit_file, "j.yaml");
    dsl_launch_opts_release(&o);
    const char *noimage[] = {"--dry-run", "--emit", "jobset", "p", NULL};
    refuse(noimage, err);
    ASSERT_CONTAINS(err, "--emit jobset needs --image IMAGE");
    const char *stray[] = {"--dry-run", "--emit", "sbatch", "--image", "i", "p", NULL};
    refuse(stray, err);
    ASSERT_CONTAINS(err, "--image is the container image of --emit jobset");
    const char *nn[] = {"--dry-run", "--emit", "jobset", "--image", "i", "--nnodes", "2", "p",
                        NULL};
    refuse(nn, err);
    ASSERT_CONTAINS(err, "give the node count with --num_nodes");
    const char *bad[] = {"--dry-run", "--emit", "jobsets", "p", NULL};
    refuse(bad, err);
    ASSERT_CONTAINS(err, "'sbatch' (a batch script) or 'jobset'");
    const char *nofile[] = {"--dry-run", "--emit", "jobset=", "p", NULL};
    refuse(nofile, err);
    ASSERT_CONTAINS(err, "'--emit jobset=FILE' needs a file name");
}

TEST_MAIN()
