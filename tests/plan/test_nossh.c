/* No-ssh mode's settings: options, then PET_* and JOB_COMPLETION_INDEX, then defaults
 * (plan/nossh.h). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/plan/nossh.h"
#include "dslaunch/plan/options.h"
#include "test.h"

#define SECRET "DSLAUNCH_JOB_SECRET=0123456789abcdef"

/* Parse args (a NULL-terminated list after "dslaunch") and resolve with env. */
static int resolve(struct dsl_nossh *ns, const char *const *args, char *const *env, char *err)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"dslaunch";
    for (; *args; args++)
        argv[argc++] = (char *)*args;
    argv[argc++] = (char *)"prog";
    argv[argc] = NULL;
    struct dsl_launch_opts o;
    dsl_launch_opts_init(&o);
    int r = dsl_launch_opts_parse(&o, argc, argv, err);
    if (r == 0)
        r = dsl_nossh_resolve(ns, &o, env, err);
    dsl_launch_opts_release(&o);
    return r;
}

/* Node 1 of 2 (node 0 at n0) with its secret from file, and env. */
static int resolve_secret_file(struct dsl_nossh *ns, const char *file, char *const *env,
                               char *err)
{
    const char *args[] = {"--nnodes", "2", "--node_rank", "1", "--master_addr", "n0",
                          "--job_secret_file", file, NULL};
    return resolve(ns, args, env, err);
}

/* ns is on, for a job of nnodes with this node at rank, its master at addr:port. */
static void expect_on(const struct dsl_nossh *ns, int nnodes, int rank, const char *addr,
                      int port)
{
    ASSERT_EQ(ns->on, 1);
    ASSERT_EQ(ns->nnodes, nnodes);
    ASSERT_EQ(ns->node_rank, rank);
    ASSERT_STR_EQ(ns->master_addr, addr);
    ASSERT_EQ(ns->master_port, port);
}

/* ns says where it took the node count, the rank, the master's address and port from. */
static void expect_from(const struct dsl_nossh *ns, const char *nnodes, const char *rank,
                        const char *addr, const char *port)
{
    ASSERT_STR_EQ(ns->from_nnodes, nnodes);
    ASSERT_STR_EQ(ns->from_node_rank, rank);
    ASSERT_STR_EQ(ns->from_master_addr, addr);
    ASSERT_STR_EQ(ns->from_master_port, port);
}

TEST(nossh_should_be_off_without_its_options_or_pet_nnodes)
{
    struct dsl_nossh ns;
    dsl_nossh_init(&ns);
    char err[DSL_ERR_LEN];
    const char *args[] = {NULL};
    char *env[] = {(char *)"PET_NODE_RANK=1", (char *)"JOB_COMPLETION_INDEX=3", NULL};
    ASSERT_EQ(resolve(&ns, args, env, err), 0);
    ASSERT_EQ(ns.on, 0);
    /* PET_NNODES with a hostfile: the hostfile wins, the mode stays off */
    const char *hf[] = {"--hostfile", "h", NULL};
    char *pet[] = {(char *)"PET_NNODES=2", NULL};
    ASSERT_EQ(resolve(&ns, hf, pet, err), 0);
    ASSERT_EQ(ns.on, 0);
    dsl_nossh_release(&ns);
}

TEST(nossh_should_take_options_first_and_say_so)
{
    struct dsl_nossh ns;
    dsl_nossh_init(&ns);
    char err[DSL_ERR_LEN];
    const char *args[] = {"--node_rank", "1", "--nnodes", "3", "--master_addr", "10.0.0.1",
                          "--master_port", "4000", NULL};
    char *env[] = {(char *)"PET_NNODES=5", (char *)"PET_NODE_RANK=4",
                   (char *)"PET_MASTER_ADDR=other", (char *)"PET_MASTER_PORT=5000",
                   (char *)SECRET, NULL};
    ASSERT_EQ(resolve(&ns, args, env, err), 0);
    expect_on(&ns, 3, 1, "10.0.0.1", 4000);
    ASSERT_EQ(ns.control_port, 4001);
    expect_from(&ns, "--nnodes", "--node_rank", "--master_addr", "--master_port");
    ASSERT_STR_EQ(ns.from_control_port, "master port + 1");
    ASSERT_STR_EQ(ns.from_secret, "DSLAUNCH_JOB_SECRET");
    ASSERT_EQ(ns.secret_len, 16);
    dsl_nossh_release(&ns);
}

TEST(nossh_should_take_kubeflow_variables_alone)
{
    struct dsl_nossh ns;
    dsl_nossh_init(&ns);
    char err[DSL_ERR_LEN];
    const char *args[] = {NULL};
    char *env[] = {(char *)"PET_NNODES=4", (char *)"PET_NODE_RANK=2",
                   (char *)"PET_MASTER_ADDR=job-master-0", (char *)"PET_MASTER_PORT=23456",
                   (char *)SECRET, NULL};
    ASSERT_EQ(resolve(&ns, args, env, err), 0);
    expect_on(&ns, 4, 2, "job-master-0", 23456);
    expect_from(&ns, "PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT");
    dsl_nossh_release(&ns);
}

TEST(nossh_should_read_the_rank_of_an_indexed_job_and_fixed_torchrun_ranges)
{
    struct dsl_nossh ns;
    dsl_nossh_init(&ns);
    char err[DSL_ERR_LEN];
    const char *args[] = {"--no_ssh", "--master_addr", "h0", NULL};
    char *env[] = {(char *)"PET_NNODES=2:2", (char *)"JOB_COMPLETION_INDEX=1", (char *)SECRET,
                   NULL};
    ASSERT_EQ(resolve(&ns, args, env, err), 0);
    ASSERT_EQ(ns.nnodes, 2);
    ASSERT_EQ(ns.node_rank, 1);
    ASSERT_STR_EQ(ns.from_node_rank, "JOB_COMPLETION_INDEX");
    ASSERT_STR_EQ(ns.from_master_port, "default");
    ASSERT_EQ(ns.master_port, 29500);
    char *elastic[] = {(char *)"PET_NNODES=1:4", (char *)"PET_NODE_RANK=0", (char *)SECRET,
                       NULL};
    ASSERT_EQ(resolve(&ns, args, elastic, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "PET_NNODES='1:4' is an elastic range");
    dsl_nossh_release(&ns);
}

TEST(nossh_should_name_what_is_missing_or_wrong)
{
    struct dsl_nossh ns;
    dsl_nossh_init(&ns);
    char err[DSL_ERR_LEN];
    static const struct {
        const char *args[8], *env[4];
        const char *msg;
    } cases[] = {
        {{"--node_rank", "0", NULL}, {SECRET, NULL},
         "needs the number of nodes: --nnodes N (or PET_NNODES)"},
        {{"--nnodes", "2", NULL}, {SECRET, NULL},
         "--node_rank K (or PET_NODE_RANK, or JOB_COMPLETION_INDEX"},
        {{"--nnodes", "2", "--node_rank", "2", NULL}, {SECRET, NULL},
         "node rank 2 (from --node_rank) is not below the node count 2"},
        {{"--nnodes", "2", "--node_rank", "1", NULL}, {SECRET, NULL},
         "node rank 1 needs node 0's address: --master_addr"},
        {{"--nnodes", "2", "--node_rank", "0", "--hostfile", "h", NULL}, {SECRET, NULL},
         "leave out --hostfile"},
        {{"--nnodes", "2", "--node_rank", "0", "--control_port", "29500", NULL},
         {SECRET, NULL}, "--control_port 29500 is the master port"},
        {{NULL}, {"PET_NNODES=2", "PET_NODE_RANK=one", SECRET, NULL},
         "PET_NODE_RANK='one' is not an integer"},
        /* the same range as --node_rank's */
        {{NULL}, {"PET_NNODES=2", "PET_NODE_RANK=1048576", SECRET, NULL},
         "PET_NODE_RANK='1048576' is not an integer from 0 to 1048575"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ASSERT_EQ(resolve(&ns, cases[i].args, (char **)cases[i].env, err), DSL_EUSAGE);
        ASSERT_CONTAINS(err, cases[i].msg);
    }
    dsl_nossh_release(&ns);
}

/* node 0's address is dialled by every node and, on node 0, the ranks' MASTER_ADDR: a
 * word that cannot be one is named at once, not after --join_timeout of dialling; the
 * coordinator listens on IPv4 only, so an IPv6 address could never be reached */
TEST(nossh_should_refuse_a_master_addr_that_cannot_be_dialled)
{
    struct dsl_nossh ns;
    dsl_nossh_init(&ns);
    char err[DSL_ERR_LEN];
    char *env[] = {(char *)SECRET, NULL};
    const char *empty[] = {"--nnodes", "2", "--node_rank", "1", "--master_addr", "", NULL};
    ASSERT_EQ(resolve(&ns, empty, env, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "--master_addr '' is not a host name or IPv4 address");
    const char *bad[] = {"--nnodes", "2", "--node_rank", "1", "--master_addr", "bad host!", NULL};
    ASSERT_EQ(resolve(&ns, bad, env, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "--master_addr 'bad host!' is not a host name or IPv4 address");
    const char *v6[] = {"--nnodes", "2", "--node_rank", "0", "--master_addr", "[fd00::1]", NULL};
    ASSERT_EQ(resolve(&ns, v6, env, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "--master_addr '[fd00::1]': no-ssh mode reaches node 0 over IPv4 only");
    char *pet[] = {(char *)"PET_NNODES=2", (char *)"PET_NODE_RANK=1",
                   (char *)"PET_MASTER_ADDR=fd00::2", (char *)SECRET, NULL};
    const char *none[] = {NULL};
    ASSERT_EQ(resolve(&ns, none, pet, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "PET_MASTER_ADDR 'fd00::2': no-ssh mode reaches node 0 over IPv4 only");
    const char *ok[] = {"--nnodes", "2", "--node_rank", "1", "--master_addr",
                        "train-node-0-0.train", NULL};
    ASSERT_EQ(resolve(&ns, ok, env, err), 0);
    ASSERT_STR_EQ(ns.master_addr, "train-node-0-0.train");
    dsl_nossh_release(&ns);
}

TEST(nossh_should_take_the_only_node_of_a_one_node_job_as_node_0)
{
    /* torchrun's single-node command line: `--nnodes 1 --nproc_per_node 2 train.py` */
    struct dsl_nossh ns;
    dsl_nossh_init(&ns);
    char err[DSL_ERR_LEN];
    char *env[] = {NULL};
    const char *args[] = {"--nnodes", "1", "--nproc_per_node", "2", NULL};
    ASSERT_EQ(resolve(&ns, args, env, err), 0);
    ASSERT_EQ(ns.on, 1);
    ASSERT_EQ(ns.nnodes, 1);
    ASSERT_EQ(ns.node_rank, 0);
    ASSERT_STR_EQ(ns.from_node_rank, "the only node");
    /* a rank given anywhere still wins, and is checked against the count */
    char *pet[] = {(char *)"PET_NODE_RANK=1", NULL};
    ASSERT_EQ(resolve(&ns, args, pet, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "node rank 1 (from PET_NODE_RANK) is not below the node count 1");
    dsl_nossh_release(&ns);
}

TEST(nossh_should_refuse_to_run_several_nodes_without_a_long_enough_secret)
{
    struct dsl_nossh ns;
    dsl_nossh_init(&ns);
    char err[DSL_ERR_LEN];
    const char *args[] = {"--nnodes", "2", "--node_rank", "0", NULL};
    char *none[] = {NULL};
    ASSERT_EQ(resolve(&ns, args, none, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "needs the job's shared secret");
    char *shortone[] = {(char *)"DSLAUNCH_JOB_SECRET=abc", NULL};
    ASSERT_EQ(resolve(&ns, args, shortone, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "is 3 bytes; it needs at least 16");
    /* one node needs none */
    const char *one[] = {"--nnodes", "1", "--node_rank", "0", NULL};
    ASSERT_EQ(resolve(&ns, one, none, err), 0);
    ASSERT(ns.secret == NULL);
    dsl_nossh_release(&ns);
}

TEST(nossh_should_read_the_secret_file_without_its_final_newline_before_the_env)
{
    char path[] = "/tmp/dsl-test-secret.XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    ASSERT_EQ(write(fd, "file-secret-0123456789\n", 23), 23);
    close(fd);
    struct dsl_nossh ns;
    dsl_nossh_init(&ns);
    char err[DSL_ERR_LEN];
    const char *args[] = {"--nnodes", "2", "--node_rank", "0", "--job_secret_file", path, NULL};
    char *env[] = {(char *)SECRET, NULL};
    ASSERT_EQ(resolve(&ns, args, env, err), 0);
    ASSERT_EQ(ns.secret_len, 22);
    ASSERT_EQ(memcmp(ns.secret, "file-secret-0123456789", 22), 0);
    ASSERT_CONTAINS(ns.from_secret, "--job_secret_file");
    unlink(path);
    ASSERT_EQ(resolve(&ns, args, env, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "--job_secret_file '/tmp/dsl-test-secret.");
    dsl_nossh_release(&ns);
}

/* A secret file with the mode given, holding a valid secret; path is filled in. */
static void secret_file(char *path, mode_t mode)
{
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    ASSERT_EQ(write(fd, "file-secret-0123456789\n", 23), 23);
    ASSERT_EQ(fchmod(fd, mode), 0);
    close(fd);
}

/* whoever reads the secret can join the job and run commands as this user: ssh's rule
 * for a private key (a file of ours has no bit of 077), refused before anything starts
 * and never replaced by DSLAUNCH_JOB_SECRET behind the user's back */
TEST(nossh_should_refuse_a_secret_file_others_can_read_or_write_as_ssh_refuses_a_key)
{
    static const struct {
        mode_t mode;
        const char *says; /* NULL: accepted */
    } cases[] = {
        {0644, "is readable by its group and others (mode 0644)"},
        {0640, "is readable by its group (mode 0640)"},
        {0604, "is readable by others (mode 0604)"},
        {0602, "is writable by others (mode 0602)"},
        {0660, "is readable and writable by its group (mode 0660)"},
        {0666, "is readable and writable by its group and others (mode 0666)"},
        {0610, "is accessible by its group (mode 0610)"},
        {0600, NULL},
        {0400, NULL},
        {0700, NULL},
    };
    struct dsl_nossh ns;
    char err[DSL_ERR_LEN];
    char *env[] = {(char *)SECRET, NULL};
    dsl_nossh_init(&ns);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char path[] = "/tmp/dsl-test-secret.XXXXXX";
        secret_file(path, cases[i].mode);
        int r = resolve_secret_file(&ns, path, env, err);
        if (!cases[i].says) {
            if (r < 0)
                fprintf(stderr, "mode %04o: %s\n", (unsigned)cases[i].mode, err);
            ASSERT_EQ(r, 0);
            ASSERT_EQ(ns.secret_len, 22);
            ASSERT_EQ(memcmp(ns.secret, "file-secret-0123456789", 22), 0);
        } else {
            ASSERT_EQ(r, DSL_EUSAGE);
            char *want = dsl_xasprintf("--job_secret_file '%s' %s: anyone who can read it can "
                                       "join the job and run commands as you; run chmod 600 "
                                       "'%s' (ssh refuses a private key with such a mode too)",
                                       path, cases[i].says, path);
            ASSERT_STR_EQ(err, want);
            free(want);
        }
        unlink(path);
    }
    dsl_nossh_release(&ns);
}

TEST(nossh_should_point_a_kubernetes_secret_volume_at_default_mode)
{
    char dir[] = "/tmp/dsl-test-kube.XXXXXX", data[64], file[80], link[80];
    ASSERT(mkdtemp(dir) != NULL);
    snprintf(data, sizeof(data), "%s/..data", dir);
    snprintf(file, sizeof(file), "%s/secret", data);
    snprintf(link, sizeof(link), "%s/secret", dir);
    ASSERT_EQ(mkdir(data, 0755), 0);
    int fd = open(file, O_WRONLY | O_CREAT | O_EXCL, 0644);
    ASSERT(fd >= 0);
    ASSERT_EQ(write(fd, "kube-secret-0123456789", 22), 22);
    ASSERT_EQ(fchmod(fd, 0644), 0); /* the kubelet's default defaultMode */
    close(fd);
    ASSERT_EQ(symlink("..data/secret", link), 0);
    struct dsl_nossh ns;
    char err[DSL_ERR_LEN];
    char *env[] = {NULL};
    dsl_nossh_init(&ns);
    ASSERT_EQ(resolve_secret_file(&ns, link, env, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "(mode 0644)");
    ASSERT_CONTAINS(err, "set defaultMode: 0400 on the Secret volume");
    ASSERT_EQ(chmod(file, 0400), 0); /* what defaultMode: 0400 gives: followed and accepted */
    ASSERT_EQ(resolve_secret_file(&ns, link, env, err), 0);
    ASSERT_EQ(ns.secret_len, 22);
    dsl_nossh_release(&ns);
    unlink(link);
    unlink(file);
    rmdir(data);
    rmdir(dir);
}

TEST(nossh_should_refuse_a_secret_file_of_another_user_or_open_to_everyone)
{
    struct dsl_nossh ns;
    char err[DSL_ERR_LEN];
    char *env[] = {(char *)SECRET, NULL};
    dsl_nossh_init(&ns);
    /* a root-owned file every user can read: refused whoever runs this (root: it is our
       own file; anyone else: it is open to every user) */
    struct stat st;
    ASSERT_EQ(stat("/etc/passwd", &st), 0);
    ASSERT((st.st_mode & S_IROTH) && st.st_uid == 0);
    ASSERT_EQ(resolve_secret_file(&ns, "/etc/passwd", env, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "--job_secret_file '/etc/passwd' is readable by ");
    char mode[32];
    snprintf(mode, sizeof(mode), "(mode %04o", (unsigned)(st.st_mode & 07777));
    ASSERT_CONTAINS(err, mode);
    /* a directory is named as one, not judged by its mode */
    ASSERT_EQ(resolve_secret_file(&ns, "/", env, err), DSL_EUSAGE);
    ASSERT_STR_EQ(err, "--job_secret_file '/': Is a directory");
    if (geteuid() == 0) {
        /* a file of another ordinary user, however private: its owner can replace it */
        char path[] = "/tmp/dsl-test-secret.XXXXXX";
        secret_file(path, 0600);
        ASSERT_EQ(chown(path, 4242, 4242), 0);
        ASSERT_EQ(resolve_secret_file(&ns, path, env, err), DSL_EUSAGE);
        ASSERT_CONTAINS(err, "' belongs to another user (");
        ASSERT_CONTAINS(err, "uid 4242): its owner can read or replace the job secret; use a "
                             "file of your own (copy it, then chmod 600 the copy)");
        unlink(path);
    }
    dsl_nossh_release(&ns);
}

/* `--job_secret_file <(vault read ...)`: a pipe of our own, mode 0600, is read */
TEST(nossh_should_read_the_secret_from_a_pipe_as_process_substitution_gives_it)
{
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    ASSERT_EQ(write(p[1], "pipe-secret-0123456789\n", 23), 23);
    close(p[1]);
    char path[32];
    snprintf(path, sizeof(path), "/dev/fd/%d", p[0]);
    struct dsl_nossh ns;
    char err[DSL_ERR_LEN];
    char *env[] = {NULL};
    dsl_nossh_init(&ns);
    int r = resolve_secret_file(&ns, path, env, err);
    if (r < 0)
        fprintf(stderr, "%s\n", err);
    ASSERT_EQ(r, 0);
    ASSERT_EQ(ns.secret_len, 22);
    ASSERT_EQ(memcmp(ns.secret, "pipe-secret-0123456789", 22), 0);
    close(p[0]);
    dsl_nossh_release(&ns);
}

TEST(nossh_should_count_slots_from_nproc_per_node_then_num_gpus)
{
    struct dsl_launch_opts o;
    struct dsl_nossh ns;
    dsl_nossh_init(&ns);
    char err[DSL_ERR_LEN];
    char *argv[] = {(char *)"dslaunch", (char *)"--nproc_per_node", (char *)"3", (char *)"p",
                    NULL};
    setenv("DSLAUNCH_LOCAL_SLOTS", "8", 1); /* the counts below fit this node */
    dsl_launch_opts_init(&o);
    ASSERT_EQ(dsl_launch_opts_parse(&o, 4, argv, err), 0);
    dsl_nossh_init(&ns);
    ASSERT_EQ(dsl_nossh_resolve_slots(&ns, &o, err), 0);
    ASSERT_EQ(ns.slots, 3);
    ASSERT_STR_EQ(ns.from_slots, "--nproc_per_node");
    dsl_launch_opts_release(&o);
    char *argv2[] = {(char *)"dslaunch", (char *)"--num_gpus", (char *)"5", (char *)"p", NULL};
    ASSERT_EQ(dsl_launch_opts_parse(&o, 4, argv2, err), 0);
    ASSERT_EQ(dsl_nossh_resolve_slots(&ns, &o, err), 0);
    ASSERT_EQ(ns.slots, 5);
    dsl_launch_opts_release(&o);
    /* the two disagreeing is an error; outside no-ssh mode nproc_per_node is num_gpus */
    char *argv3[] = {(char *)"dslaunch", (char *)"--nproc_per_node", (char *)"2",
                     (char *)"--num_gpus", (char *)"4", (char *)"p", NULL};
    ASSERT_EQ(dsl_launch_opts_parse(&o, 6, argv3, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "--nproc_per_node 2 and --num_gpus 4 disagree");
    dsl_launch_opts_release(&o);
    ASSERT_EQ(dsl_launch_opts_parse(&o, 4, argv, err), 0);
    ASSERT_EQ(o.num_gpus, 3);
    dsl_launch_opts_release(&o);
    unsetenv("DSLAUNCH_LOCAL_SLOTS");
    dsl_nossh_release(&ns);
}

TEST(nossh_should_refuse_more_ranks_than_the_node_has_without_oversubscribe)
{
    struct dsl_launch_opts o;
    struct dsl_nossh ns;
    char err[DSL_ERR_LEN];
    setenv("DSLAUNCH_LOCAL_SLOTS", "2", 1);
    char *argv[] = {(char *)"dslaunch", (char *)"--nnodes", (char *)"1", (char *)"--nproc_per_node",
                    (char *)"4", (char *)"p", NULL};
    dsl_launch_opts_init(&o);
    ASSERT_EQ(dsl_launch_opts_parse(&o, 6, argv, err), 0);
    dsl_nossh_init(&ns);
    ASSERT_EQ(dsl_nossh_resolve_slots(&ns, &o, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "--nproc_per_node 4 asks for 4 ranks on this node, but it has 2 slots "
                         "(DSLAUNCH_LOCAL_SLOTS): add --oversubscribe");
    dsl_launch_opts_release(&o);
    char *argv2[] = {(char *)"dslaunch", (char *)"--nnodes", (char *)"1", (char *)"--nproc_per_node",
                     (char *)"4", (char *)"--oversubscribe", (char *)"p", NULL};
    ASSERT_EQ(dsl_launch_opts_parse(&o, 7, argv2, err), 0);
    ASSERT_EQ(dsl_nossh_resolve_slots(&ns, &o, err), 0);
    ASSERT_EQ(ns.slots, 4);
    dsl_launch_opts_release(&o);
    unsetenv("DSLAUNCH_LOCAL_SLOTS");
    dsl_nossh_release(&ns);
}

TEST(options_should_let_only_a_node_other_than_node_0_come_without_a_program)
{
    struct dsl_launch_opts o;
    char err[DSL_ERR_LEN];
    char *k1[] = {(char *)"dslaunch", (char *)"--node_rank", (char *)"1", (char *)"--nnodes",
                  (char *)"2", NULL};
    dsl_launch_opts_init(&o);
    ASSERT_EQ(dsl_launch_opts_parse(&o, 5, k1, err), 0);
    ASSERT_EQ((int)o.argv.nr, 0);
    dsl_launch_opts_release(&o);
    char *k0[] = {(char *)"dslaunch", (char *)"--node_rank", (char *)"0", (char *)"--nnodes",
                  (char *)"2", NULL};
    ASSERT_EQ(dsl_launch_opts_parse(&o, 5, k0, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "no program given");
    dsl_launch_opts_release(&o);
    char *dry[] = {(char *)"dslaunch", (char *)"--dry-run", (char *)"--node_rank", (char *)"1",
                   NULL};
    ASSERT_EQ(dsl_launch_opts_parse(&o, 4, dry, err), DSL_EUSAGE);
    dsl_launch_opts_release(&o);
    /* an indexed Job's pod: the rank from JOB_COMPLETION_INDEX */
    char *none[] = {(char *)"dslaunch", (char *)"--nnodes", (char *)"2", NULL};
    unsetenv("PET_NODE_RANK");
    setenv("JOB_COMPLETION_INDEX", "1", 1);
    ASSERT_EQ(dsl_launch_opts_parse(&o, 3, none, err), 0);
    dsl_launch_opts_release(&o);
    setenv("JOB_COMPLETION_INDEX", "0", 1);
    ASSERT_EQ(dsl_launch_opts_parse(&o, 3, none, err), DSL_EUSAGE);
    dsl_launch_opts_release(&o);
    unsetenv("JOB_COMPLETION_INDEX");
}

TEST_MAIN()
