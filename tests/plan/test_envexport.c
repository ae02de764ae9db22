/*
 * Unit tests for the exported environment: the name prefixes, the env-file format
 * (good and bad lines, with "env file 'PATH':LINE:" errors), --export, the layer order
 * and the rule that nothing else leaks.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/plan/envexport.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/strvec.h"
#include "test.h"

/* The env as "K=V|K=V|..." in order. */
static char *join(const struct dsl_strvec *env)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 20);
    for (size_t i = 0; i < env->nr; i++)
        dsl_dynbuf_addf(&b, "%s%s", i ? "|" : "", env->v[i]);
    char *s = strdup(dsl_dynbuf_str(&b));
    dsl_dynbuf_release(&b);
    return s;
}

TEST(env_name_exported_should_match_the_documented_prefixes)
{
    static const char *const yes[] = {"NCCL_DEBUG", "NCCL_", "PYTHONPATH", "PYTHON",
                                      "PYTHONUNBUFFERED", "UCX_TLS", "OMP_NUM_THREADS",
                                      "MV2_ENABLE_AFFINITY", "GLOO_SOCKET_IFNAME", "CUDA_HOME",
                                      "CUDA_LAUNCH_BLOCKING", "CUDA_VISIBLE_DEVICES_X"};
    static const char *const no[] = {"CUDA_VISIBLE_DEVICES", "HOME", "PATH", "nccl_debug",
                                     "MY_NCCL_X", "SECRET_TOKEN", "LD_PRELOAD", "CUDA", "OMP",
                                     "UCX", "PYTHO", ""};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        ASSERT(dsl_env_name_exported(yes[i]));
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        ASSERT(!dsl_env_name_exported(no[i]));
}

static const struct {
    const char *text, *want;
} good[] = {
    {"A=1\nB=2\n", "A=1|B=2"},
    {"# comment\n\n   \n\t# indented comment\nA=1", "A=1"},
    {"A=value with spaces\n", "A=value with spaces"},
    {"A=trailing blanks \t \r\n", "A=trailing blanks"},
    {"  A=leading blanks of the line are dropped\n", "A=leading blanks of the line are dropped"},
    {"A=\"double quoted\"\nB='single quoted'\n", "A=double quoted|B=single quoted"},
    {"A=\"it's\"\nB='say \"hi\"'\n", "A=it's|B=say \"hi\""},
    {"A=\"\"\nB=''\nC=\n", "A=|B=|C="},
    {"A=\"$HOME `x` $(y) \\n\"\n", "A=$HOME `x` $(y) \\n"},
    {"A=x=y=z\n", "A=x=y=z"},
    {"A=v # not a comment\n", "A=v # not a comment"},
    {"export A=1\nexport\tB=2\n", "A=1|B=2"},
    {"_A1=x\na_b=y\n", "_A1=x|a_b=y"},
    {"A=1\nB=2\nA=3\n", "A=3|B=2"},
    {"A=1\r\nB=2\r\n", "A=1|B=2"},
    {"A=\xc3\xbcnic\xc3\xb6" "de\n", "A=\xc3\xbcnic\xc3\xb6" "de"},
    {"A=a\"b\n", "A=a\"b"},
    {"", ""},
};

/* Table case i: text parsed as the env file e onto an environment that holds KEEP=1
 * where keep is set; the parser's result is printed, and *env afterwards is want. */
static int parse_case(size_t i, const char *text, int keep, const char *want, char *err)
{
    struct dsl_strvec env;
    dsl_strvec_init(&env);
    if (keep)
        dsl_env_set(&env, "KEEP", "1");
    int r = dsl_envfile_parse(&env, "e", text, strlen(text), err);
    fprintf(stderr, "case %zu: %s\n", i, r < 0 ? err : "parsed");
    char *s = join(&env);
    ASSERT_STR_EQ(s, want);
    free(s);
    dsl_strvec_release(&env);
    return r;
}

TEST(envfile_should_accept_every_documented_form)
{
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char err[DSL_ERR_LEN] = "";
        ASSERT_OK(parse_case(i, good[i].text, 0, good[i].want, err));
    }
}

static const struct {
    const char *text, *msg;
} bad[] = {
    {"not a valid line\n", "env file 'e':1: expected KEY=VALUE, not 'not a valid line'"},
    {"A=1\nB\n", "env file 'e':2: expected KEY=VALUE, not 'B'"},
    {"A =1\n", "env file 'e':1: expected KEY=VALUE, not 'A =1'"},
    {"=1\n", "env file 'e':1: expected KEY=VALUE, not '=1'"},
    {"1A=1\n", "env file 'e':1: expected KEY=VALUE, not '1A=1'"},
    {"A-B=1\n", "env file 'e':1: expected KEY=VALUE, not 'A-B=1'"},
    {"export\n", "env file 'e':1: expected KEY=VALUE, not 'export'"},
    {"export A\n", "env file 'e':1: expected KEY=VALUE, not 'export A'"},
    {"A=\"open\n", "env file 'e':1: unterminated quote in 'A=\"open'"},
    {"A='open\"\n", "env file 'e':1: unterminated quote in 'A='open\"'"},
    {"A=\"\n", "env file 'e':1: unterminated quote in 'A=\"'"},
    {"A=\"a b\" # c\n", "env file 'e':1: unterminated quote in 'A=\"a b\" # c'"},
    {"\n\n\nA\tB\n", "env file 'e':4: expected KEY=VALUE, not 'A\\tB'"},
};

TEST(envfile_should_reject_malformed_lines_with_path_and_line)
{
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[DSL_ERR_LEN] = "";
        /* env is unchanged by a failed parse, even by the lines before the bad one */
        ASSERT_EQ(parse_case(i, bad[i].text, 1, "KEEP=1", err), DSL_ECONFIG);
        ASSERT_STR_EQ(err, bad[i].msg);
    }
    static const char nul[] = "A=1\nB=x\0y\n";
    struct dsl_strvec env;
    char err[DSL_ERR_LEN];
    dsl_strvec_init(&env);
    ASSERT_EQ(dsl_envfile_parse(&env, NULL, nul, sizeof(nul) - 1, err), DSL_ECONFIG);
    ASSERT_STR_EQ(err, "env file '-':2: NUL byte in 'B=x\\x00y'");
    ASSERT_EQ(env.nr, 0);
}

/* A scratch directory with files; removed by cleanup(). */
static char scratch[64];

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void make_dirs(void)
{
    snprintf(scratch, sizeof(scratch), "/tmp/dsl-envexport-XXXXXX");
    ASSERT(mkdtemp(scratch) != NULL);
    char p[128];
    snprintf(p, sizeof(p), "%s/home", scratch);
    ASSERT_OK(mkdir(p, 0700));
    snprintf(p, sizeof(p), "%s/cwd", scratch);
    ASSERT_OK(mkdir(p, 0700));
}

static void cleanup(void)
{
    static const char *const files[] = {"home/.deepspeed_env", "home/.dslaunch_env",
                                        "cwd/.deepspeed_env", "cwd/.dslaunch_env", "home",
                                        "cwd", ""};
    char p[128];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", scratch, files[i]);
        remove(p);
    }
}

TEST(envfile_load_should_skip_a_missing_file_and_name_a_bad_one)
{
    struct dsl_strvec env;
    char err[DSL_ERR_LEN], p[128], want[256];
    dsl_strvec_init(&env);
    make_dirs();
    snprintf(p, sizeof(p), "%s/home/.dslaunch_env", scratch);
    ASSERT_EQ(dsl_envfile_load(&env, p, err), 0);
    ASSERT_EQ(env.nr, 0);
    write_file(scratch, "home/.dslaunch_env", "GOOD=1\nnot a valid line\n");
    ASSERT_EQ(dsl_envfile_load(&env, p, err), DSL_ECONFIG);
    snprintf(want, sizeof(want), "env file '%s':2: expected KEY=VALUE, not 'not a valid line'",
             p);
    ASSERT_STR_EQ(err, want);
    snprintf(p, sizeof(p), "%s/home", scratch);
    ASSERT_EQ(dsl_envfile_load(&env, p, err), -EISDIR);
    ASSERT_CONTAINS(err, "env file '");
    cleanup();
    dsl_strvec_release(&env);
}

TEST(envexport_should_layer_prefixes_files_and_exports_and_leak_nothing_else)
{
    char *environ_[] = {(char *)"NCCL_DEBUG=INFO",
                        (char *)"CUDA_VISIBLE_DEVICES=0,1",
                        (char *)"CUDA_HOME=/usr/local/cuda",
                        (char *)"SECRET=hunter2",
                        (char *)"PYTHONPATH=/env",
                        (char *)"FLOW_EXPORTED=yes",
                        (char *)"OMP_NUM_THREADS=4",
                        (char *)"NOEQUALS",
                        NULL};
    char home[128], cwd[128], err[DSL_ERR_LEN];
    make_dirs();
    snprintf(home, sizeof(home), "%s/home", scratch);
    snprintf(cwd, sizeof(cwd), "%s/cwd", scratch);
    write_file(home, ".deepspeed_env", "FROM=home-ds\nPYTHONPATH=/home-ds\nA=home-ds\n");
    write_file(home, ".dslaunch_env", "A=home-dsl\nB=home-dsl\n");
    write_file(cwd, ".deepspeed_env", "B=cwd-ds\nC=cwd-ds\n");
    write_file(cwd, ".dslaunch_env", "C=\"cwd dsl\"\nOMP_NUM_THREADS=2\n");

    struct dsl_strvec out;
    dsl_strvec_init(&out);
    char *exports[] = {(char *)"FLOW_EXPORTED", (char *)"EXTRA=1", (char *)"C=from-export",
                       (char *)"EMPTY="};
    ASSERT_OK(dsl_envexport_build(&out, environ_, home, cwd, exports, 4, err));
    ASSERT_STR_EQ(dsl_env_get(&out, "NCCL_DEBUG"), "INFO");
    ASSERT_STR_EQ(dsl_env_get(&out, "CUDA_HOME"), "/usr/local/cuda");
    ASSERT_STR_EQ(dsl_env_get(&out, "PYTHONPATH"), "/home-ds");
    ASSERT_STR_EQ(dsl_env_get(&out, "FROM"), "home-ds");
    ASSERT_STR_EQ(dsl_env_get(&out, "A"), "home-dsl");
    ASSERT_STR_EQ(dsl_env_get(&out, "B"), "cwd-ds");
    ASSERT_STR_EQ(dsl_env_get(&out, "C"), "from-export");
    ASSERT_STR_EQ(dsl_env_get(&out, "OMP_NUM_THREADS"), "2");
    ASSERT_STR_EQ(dsl_env_get(&out, "FLOW_EXPORTED"), "yes");
    ASSERT_STR_EQ(dsl_env_get(&out, "EXTRA"), "1");
    ASSERT_STR_EQ(dsl_env_get(&out, "EMPTY"), "");
    ASSERT(dsl_env_get(&out, "SECRET") == NULL);
    ASSERT(dsl_env_get(&out, "CUDA_VISIBLE_DEVICES") == NULL);
    ASSERT(dsl_env_get(&out, "NOEQUALS") == NULL);
    ASSERT_EQ(out.nr, 11);
    dsl_strvec_release(&out);

    /* NULL dirs skip the files; nothing at all gives an empty set */
    dsl_strvec_init(&out);
    ASSERT_OK(dsl_envexport_build(&out, NULL, NULL, NULL, NULL, 0, err));
    ASSERT_EQ(out.nr, 0);
    ASSERT_OK(dsl_envexport_build(&out, environ_, NULL, "", NULL, 0, err));
    ASSERT_EQ(out.nr, 4);
    dsl_strvec_release(&out);

    /* errors leave out unchanged */
    dsl_strvec_init(&out);
    dsl_env_set(&out, "KEEP", "1");
    char *unset[] = {(char *)"NOT_SET_ANYWHERE"};
    ASSERT_EQ(dsl_envexport_build(&out, environ_, home, cwd, unset, 1, err), DSL_EUSAGE);
    ASSERT_STR_EQ(err, "--export 'NOT_SET_ANYWHERE': not set in the environment");
    static const char *const badnames[] = {"1X=2", "A B=1", "", "=x", "A-B"};
    for (size_t i = 0; i < sizeof(badnames) / sizeof(badnames[0]); i++) {
        char *one[] = {(char *)badnames[i]};
        ASSERT_EQ(dsl_envexport_build(&out, environ_, home, cwd, one, 1, err), DSL_EUSAGE);
        ASSERT_CONTAINS(err, "expected VAR or VAR=VALUE");
    }
    write_file(cwd, ".deepspeed_env", "B=ok\nbroken line\n");
    ASSERT_EQ(dsl_envexport_build(&out, environ_, home, cwd, NULL, 0, err), DSL_ECONFIG);
    ASSERT_CONTAINS(err, "/cwd/.deepspeed_env':2: expected KEY=VALUE, not 'broken line'");
    ASSERT_EQ(out.nr, 1);
    ASSERT_STR_EQ(out.v[0], "KEEP=1");
    dsl_strvec_release(&out);
    cleanup();
}

TEST_MAIN()
