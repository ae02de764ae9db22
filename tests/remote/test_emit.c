/*
 * The batch script of `--emit sbatch` (remote/emit.h), run by /bin/sh here: the words
 * and exported values arrive byte for byte, and the requeue section passes SIGUSR1 on,
 * waits for the real exit, and requeues (a fake scontrol records the call) only on 138.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/remote/emit.h"
#include "sh_output.h"
#include "test.h"
#include "test_fs.h"

static char dir[] = "/tmp/dsl-emit-test.XXXXXX";

/* write script to DIR/job.sh, run it with sh from DIR with PATH=DIR:$PATH and
 * SLURM_JOB_ID=77; return its exit code */
static int run_script(const char *script)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/job.sh", dir);
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    fputs(script, f);
    ASSERT_OK(fclose(f));
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        char p[4096];
        snprintf(p, sizeof(p), "%s:%s", dir, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
        setenv("PATH", p, 1);
        setenv("SLURM_JOB_ID", "77", 1);
        if (chdir(dir) < 0)
            _exit(126);
        execl("/bin/sh", "sh", path, (char *)NULL);
        _exit(127);
    }
    int st;
    ASSERT(waitpid(pid, &st, 0) == pid);
    ASSERT(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static char *slurp(const char *name, size_t *len)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 20);
    if (dsl_dynbuf_load_file(&b, path) < 0) {
        dsl_dynbuf_release(&b);
        return NULL;
    }
    return dynbuf_take(&b, len);
}

static const char *const nasty[] = {
    "", " two  words ", "it's", "'''", "\"double\"", "$HOME ${PATH} $(id) `id` $1 $@",
    "line1\nline2\n", "tab\there", "; exit 3 #", "*", "back\\slash \\'", "--help",
    "\xc3\xa9 \xe2\x9c\x93", "-n"};
#define NNASTY (sizeof(nasty) / sizeof(nasty[0]))

TEST(emitted_script_should_pass_every_word_and_value_byte_for_byte)
{
    static const int slots[] = {2, 2};
    const char *argv[4 + NNASTY + 1];
    size_t n = 0;
    argv[n++] = "/bin/sh";
    argv[n++] = "-c";
    argv[n++] = "printf '%s\\0' \"$@\" >args; printf '%s' \"$DSL_EMIT_V\" >env";
    argv[n++] = "sh";
    for (size_t i = 0; i < NNASTY; i++)
        argv[n++] = nasty[i];
    argv[n] = NULL;
    const char *env[] = {"DSL_EMIT_V=a'b\n$c `d` \"e\"", NULL};
    struct dsl_emit_req rq = {.nodes = 2, .slots = slots, .job_name = "printargs",
                              .hosts_from = "hostfile 'h'", .cwd = dir, .env = env,
                              .argv = argv};
    struct dsl_dynbuf out;
    char err[DSL_ERR_LEN];
    dsl_dynbuf_init(&out, 1 << 20);
    ASSERT_OK(dsl_emit_sbatch(&rq, &out, err));
    const char *s = dsl_dynbuf_str(&out);
    ASSERT(strncmp(s, "#!/bin/sh\n", 10) == 0);
    ASSERT_CONTAINS(s, "\n#SBATCH --job-name=printargs\n#SBATCH --nodes=2\n"
                       "#SBATCH --ntasks-per-node=2\n");
    ASSERT(strstr(s, "--gpus") == NULL && strstr(s, "--signal") == NULL);
    ASSERT_CONTAINS(s, "\nexec '/bin/sh' '-c' ");
    ASSERT_EQ(run_script(s), 0);
    size_t len, want_len = 0;
    char *got = slurp("args", &len);
    ASSERT(got != NULL);
    char want[1024];
    for (size_t i = 0; i < NNASTY; i++) {
        memcpy(want + want_len, nasty[i], strlen(nasty[i]) + 1);
        want_len += strlen(nasty[i]) + 1;
    }
    ASSERT_EQ(len, want_len);
    ASSERT(memcmp(got, want, len) == 0);
    free(got);
    got = slurp("env", &len);
    ASSERT(got != NULL);
    ASSERT_STR_EQ(got, "a'b\n$c `d` \"e\"");
    free(got);
    dsl_dynbuf_release(&out);
}

/* the requeue script around PROGRAM (a sh -c text); returns its exit code and whether
 * the fake scontrol was called with "requeue 77" */
static int run_requeue(const char *program, int *requeued)
{
    static const int slots[] = {1};
    const char *argv[] = {"/bin/sh", "-c", program, NULL};
    struct dsl_emit_req rq = {.nodes = 1, .slots = slots, .requeue = 1, .signal_secs = 90,
                              .cwd = dir, .argv = argv};
    struct dsl_dynbuf out;
    char err[DSL_ERR_LEN], path[256];
    dsl_dynbuf_init(&out, 1 << 20);
    ASSERT_OK(dsl_emit_sbatch(&rq, &out, err));
    const char *s = dsl_dynbuf_str(&out);
    ASSERT_CONTAINS(s, "\n#SBATCH --signal=B:USR1@90\n#SBATCH --requeue\n");
    ASSERT_CONTAINS(s, "# the program has no --resume: a requeued start begins afresh");
    snprintf(path, sizeof(path), "%s/scontrol.called", dir);
    unlink(path);
    int rc = run_script(s);
    size_t len;
    char *called = slurp("scontrol.called", &len);
    *requeued = called && !strcmp(called, "requeue 77\n");
    ASSERT(!called || *requeued);
    free(called);
    dsl_dynbuf_release(&out);
    return rc;
}

TEST(emitted_script_should_requeue_only_when_dslaunch_exits_138)
{
    int requeued;
    ASSERT_EQ(run_requeue("exit 138", &requeued), 0);
    ASSERT(requeued);
    ASSERT_EQ(run_requeue("exit 7", &requeued), 7);
    ASSERT(!requeued);
    ASSERT_EQ(run_requeue("exit 0", &requeued), 0);
    ASSERT(!requeued);
}

TEST(emitted_script_should_pass_the_warning_on_and_wait_for_the_real_exit)
{
    int requeued;
    /* the "dslaunch" signals the batch shell as Slurm would, then gets the USR1 the
     * trap passes on, and exits 5 (not 138) a moment later: the shell's wait, cut
     * short by its trap with 138 itself, must not be taken for the exit. (The loops
     * end after 20 s, so a broken script cannot leave them behind.) */
    ASSERT_EQ(run_requeue("trap 'sleep 0.2; exit 5' USR1; kill -USR1 $PPID; "
                          "i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done", &requeued), 5);
    ASSERT(!requeued);
    ASSERT_EQ(run_requeue("trap 'exit 138' USR1; kill -USR1 $PPID; "
                          "i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done", &requeued), 0);
    ASSERT(requeued);
}

TEST(emitted_script_should_survive_a_warning_that_comes_before_dslaunch_starts)
{
    /* USR1 to the shell right after its trap is set, before its "dslaunch" runs: the
     * shell lives on (an untrapped USR1 would end it: run_script asserts a normal
     * exit), passes the warning on once dslaunch has a pid and reports the real exit:
     * 138 from the signal, so a requeue and 0, or, where the signal landed between
     * the fork and the exec (a window no script can close), dslaunch's own 7 */
    static const int slots[] = {1};
    const char *argv[] = {"/bin/sh", "-c", "sleep 0.2; exit 7", NULL};
    struct dsl_emit_req rq = {.nodes = 1, .slots = slots, .requeue = 1, .signal_secs = 90,
                              .cwd = dir, .argv = argv};
    struct dsl_dynbuf out, s2;
    char err[DSL_ERR_LEN], path[256];
    dsl_dynbuf_init(&out, 1 << 20);
    dsl_dynbuf_init(&s2, 1 << 20);
    ASSERT_OK(dsl_emit_sbatch(&rq, &out, err));
    const char *s = dsl_dynbuf_str(&out);
    const char *trap = strstr(s, "\ntrap '");
    ASSERT(trap != NULL);
    const char *eol = strchr(trap + 1, '\n');
    ASSERT(eol != NULL);
    ASSERT_OK(dsl_dynbuf_add(&s2, s, (size_t)(eol + 1 - s)));
    ASSERT_OK(dsl_dynbuf_addstr(&s2, "kill -USR1 $$\n"));
    ASSERT_OK(dsl_dynbuf_addstr(&s2, eol + 1));
    snprintf(path, sizeof(path), "%s/scontrol.called", dir);
    unlink(path);
    int rc = run_script(dsl_dynbuf_str(&s2));
    int requeued = access(path, F_OK) == 0;
    ASSERT((rc == 0 && requeued) || (rc == 7 && !requeued));
    dsl_dynbuf_release(&out);
    dsl_dynbuf_release(&s2);
}

TEST(emitted_script_should_ask_for_the_total_when_nodes_are_uneven_but_not_for_gpus)
{
    static const int slots[] = {2, 1, 2};
    const char *argv[] = {"prog", NULL};
    struct dsl_emit_req rq = {.nodes = 3, .slots = slots, .argv = argv};
    struct dsl_dynbuf out;
    char err[DSL_ERR_LEN];
    dsl_dynbuf_init(&out, 1 << 20);
    ASSERT_OK(dsl_emit_sbatch(&rq, &out, err));
    const char *s = dsl_dynbuf_str(&out);
    ASSERT_CONTAINS(s, "# the plan's nodes have unequal slots (2,1,2)");
    ASSERT_CONTAINS(s, "\n#SBATCH --nodes=3\n# the plan's nodes have unequal slots (2,1,2): Slurm "
                       "spreads the ranks itself\n#SBATCH --ntasks=5\ncd ");
    dsl_dynbuf_release(&out);
    /* unequal GPUs: Slurm has no way to ask for them */
    rq.gpus = 1;
    dsl_dynbuf_init(&out, 1 << 20);
    ASSERT_EQ(dsl_emit_sbatch(&rq, &out, err), DSL_EUSAGE);
    ASSERT_STR_EQ(err, "--emit sbatch: the plan's nodes have unequal GPU counts (2,1,2), which "
                       "Slurm cannot be asked for per node (--gpus=N spreads N as Slurm likes); "
                       "give every node the same with --num_gpus");
    dsl_dynbuf_release(&out);
    dsl_dynbuf_init(&out, 1 << 20);
    static const int even[] = {4, 4};
    rq.nodes = 2;
    rq.slots = even;
    ASSERT_OK(dsl_emit_sbatch(&rq, &out, err));
    ASSERT_CONTAINS(dsl_dynbuf_str(&out), "\n#SBATCH --ntasks-per-node=4\n#SBATCH --gpus-per-node=4\n");
    dsl_dynbuf_release(&out);
}

TEST(emitted_script_should_say_why_it_asks_for_tasks_and_not_gpus)
{
    static const int slots[] = {2, 2};
    const char *argv[] = {"prog", NULL};
    struct dsl_emit_req rq = {.nodes = 2, .slots = slots, .argv = argv,
                              .gpu_note = "# sinfo lists no GPU on any node of the cluster\n"};
    struct dsl_dynbuf out;
    char err[DSL_ERR_LEN];
    dsl_dynbuf_init(&out, 1 << 20);
    ASSERT_OK(dsl_emit_sbatch(&rq, &out, err));
    const char *s = dsl_dynbuf_str(&out);
    ASSERT_CONTAINS(s, "\n# sinfo lists no GPU on any node of the cluster\n#SBATCH --nodes=2\n"
                       "#SBATCH --ntasks-per-node=2\ncd ");
    ASSERT(!strstr(s, "--gpus"));
    dsl_dynbuf_release(&out);
}

TEST(emitted_script_should_refuse_a_variable_sh_cannot_export)
{
    static const int slots[] = {1};
    const char *argv[] = {"prog", NULL};
    const char *env[] = {"OK=1", "PYTHON.X=2", NULL};
    struct dsl_emit_req rq = {.nodes = 1, .slots = slots, .env = env, .argv = argv};
    struct dsl_dynbuf out;
    char err[DSL_ERR_LEN];
    dsl_dynbuf_init(&out, 1 << 20);
    ASSERT_EQ(dsl_emit_sbatch(&rq, &out, err), DSL_EUSAGE);
    ASSERT_STR_EQ(err, "--emit sbatch: the exported variable 'PYTHON.X' has a name sh cannot "
                       "export");
    dsl_dynbuf_release(&out);
}

int main(int argc, char **argv)
{
    ASSERT(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/scontrol", dir);
    test_write_file(path, "#!/bin/sh\necho \"$@\" >scontrol.called\n", 0755);
    int rc = RUN_TESTS(argc, argv);
    static const char *const files[] = {"scontrol", "scontrol.called", "job.sh", "args", "env"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
    return rc;
}
