/*
 * dsl_spawn_child's keep_fd: the one fd a child keeps across its exec (the master port's
 * listening socket an agent hands to rank 0), CLOEXEC or not, with or without close_fds,
 * while the other fds are closed as before.
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/spawn.h"
#include "test.h"
#include "test_fs.h"

TEST(check_script_should_find_a_script_in_cwd_and_name_a_missing_one_with_where)
{
    char err[DSL_ERR_LEN];
    char dir[] = "/tmp/dsl-test-script-XXXXXX";
    ASSERT(mkdtemp(dir) != NULL);
    char path[64];
    snprintf(path, sizeof(path), "%s/train.py", dir);
    test_write_file(path, "print(1)\n", 0644);
    ASSERT_OK(dsl_spawn_check_script("train.py", dir, err));
    ASSERT_OK(dsl_spawn_check_script(path, NULL, err));
    ASSERT_EQ(dsl_spawn_check_script("trian.py", dir, err), -ENOENT);
    ASSERT_CONTAINS(err, "cannot run 'trian.py': No such file or directory in '");
    ASSERT_CONTAINS(err, dir);
    ASSERT_EQ(dsl_spawn_check_script("/nonexistent/x.py", dir, err), -ENOENT);
    ASSERT_STR_EQ(err, "cannot run '/nonexistent/x.py': No such file or directory");
    ASSERT_OK(dsl_spawn_check_script(".", dir, err)); /* a directory: python3 runs __main__ */
    ASSERT(unlink(path) == 0);
    ASSERT(rmdir(dir) == 0);
}

/* Run sh -c "check" with keep_fd = keep; its exit status. */
static int run_sh(const char *check, int keep, int close_fds)
{
    char *argv[] = {(char *)"sh", (char *)"-c", (char *)check, NULL};
    struct dsl_child_opts o = {
        .argv = argv,
        .fd_in = DSL_SPAWN_DEVNULL,
        .fd_out = DSL_SPAWN_KEEP,
        .fd_err = DSL_SPAWN_KEEP,
        .keep_fd = keep,
        .close_fds = close_fds,
        .report_errors = 1,
    };
    pid_t pid;
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_spawn_child(&o, &pid, err));
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT(WIFEXITED(st));
    return WEXITSTATUS(st);
}

TEST(spawn_should_keep_only_the_kept_fd_across_exec)
{
    int a[2], b[2];
    ASSERT_OK(pipe2(a, O_CLOEXEC));
    ASSERT_OK(pipe(b)); /* not CLOEXEC: close_fds must close it */
    char check[256];
    snprintf(check, sizeof(check), "[ -e /proc/$$/fd/%d ] && ! [ -e /proc/$$/fd/%d ]", a[0],
             a[1]);
    /* a CLOEXEC fd survives when kept; its CLOEXEC sibling does not */
    ASSERT_EQ(run_sh(check, a[0], 0), 0);
    ASSERT_EQ(run_sh(check, 0, 0), 1);
    /* close_fds closes everything else, the kept fd excepted, on either side of it */
    snprintf(check, sizeof(check),
             "[ -e /proc/$$/fd/%d ] && ! [ -e /proc/$$/fd/%d ] && ! [ -e /proc/$$/fd/%d ]", a[0],
             b[0], b[1]);
    ASSERT_EQ(run_sh(check, a[0], 1), 0);
    snprintf(check, sizeof(check), "[ -e /proc/$$/fd/%d ] && ! [ -e /proc/$$/fd/%d ]", b[1],
             a[0]);
    ASSERT_EQ(run_sh(check, b[1], 1), 0);
    /* the parent's copy keeps its CLOEXEC flag */
    ASSERT((fcntl(a[0], F_GETFD) & FD_CLOEXEC) != 0);
    close(a[0]);
    close(a[1]);
    close(b[0]);
    close(b[1]);
}

TEST(a_cgroup_the_child_cannot_join_should_be_the_node_s_failure_not_the_program_s)
{
    /* an errno such as ENOENT here is the cgroup's, not the program's: the agent must
     * not report it as 127, "program not found" */
    char *argv[] = {(char *)"true", NULL};
    const char *const procs[] = {"/nonexistent-dsl-cgroup/cgroup.procs", NULL};
    struct dsl_child_opts o = {
        .argv = argv,
        .fd_in = DSL_SPAWN_DEVNULL,
        .fd_out = DSL_SPAWN_DEVNULL,
        .fd_err = DSL_SPAWN_DEVNULL,
        .cgroup_procs = procs,
        .report_errors = 1,
    };
    pid_t pid;
    char err[DSL_ERR_LEN];
    ASSERT_EQ(dsl_spawn_child(&o, &pid, err), DSL_ESPAWN);
    ASSERT_CONTAINS(err, "cannot put 'true' into its cgroup: No such file or directory");
}

/* Read everything from a (non-blocking) pipe until EOF into buf. */
static void read_all(int fd, char *buf, size_t n)
{
    size_t got = 0;
    for (;;) {
        ssize_t k = read(fd, buf + got, n - 1 - got);
        if (k > 0) {
            got += (size_t)k;
            continue;
        }
        if (k == 0 || got + 1 >= n)
            break;
        usleep(1000); /* EAGAIN: not written yet */
    }
    buf[got] = '\0';
}

TEST(spawn_begin_should_fork_several_workers_whose_execs_end_awaits)
{
    char *env[] = {(char *)"PATH=/usr/bin:/bin", NULL};
    char *ok[] = {(char *)"sh", (char *)"-c", (char *)"echo started", NULL};
    char bad_path[] = "/tmp/dsl-test-noexec-XXXXXX";
    int fd = mkstemp(bad_path);
    ASSERT(fd >= 0);
    ASSERT(write(fd, "garbage\n", 8) == 8); /* no #!: execve refuses it (ENOEXEC) */
    close(fd);
    ASSERT_OK(chmod(bad_path, 0755));
    char *bad[] = {bad_path, NULL};
    struct dsl_spawn_opts o_ok = {.argv = ok, .env = env, .stdin_null = 1, .new_pgroup = 1};
    struct dsl_spawn_opts o_bad = {.argv = bad, .env = env, .stdin_null = 1, .new_pgroup = 1};
    struct dsl_proc p[3];
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_spawn_begin(&p[0], &o_ok, err));
    ASSERT_OK(dsl_spawn_begin(&p[1], &o_bad, err)); /* forked: the exec is not known yet */
    ASSERT_OK(dsl_spawn_begin(&p[2], &o_ok, err));
    ASSERT_OK(dsl_spawn_end(&p[0], ok[0], err));
    ASSERT_EQ(dsl_spawn_end(&p[1], bad[0], err), -ENOEXEC);
    ASSERT_CONTAINS(err, "cannot start '");
    ASSERT_CONTAINS(err, "Exec format error");
    ASSERT_EQ(p[1].pid, -1); /* reaped, its pipes closed */
    ASSERT_EQ(p[1].out_fd, -1);
    ASSERT_OK(dsl_spawn_end(&p[2], ok[0], err));
    for (int i = 0; i < 3; i += 2) {
        char out[64];
        read_all(p[i].out_fd, out, sizeof(out));
        ASSERT_STR_EQ(out, "started\n");
        int st;
        ASSERT_EQ(waitpid(p[i].pid, &st, 0), p[i].pid);
        ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        close(p[i].out_fd);
        close(p[i].err_fd);
    }
    ASSERT_OK(unlink(bad_path));
}

int main(int argc, char **argv) { return RUN_TESTS(argc, argv); }
