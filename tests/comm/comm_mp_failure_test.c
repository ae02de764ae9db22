/*
 * Multi-process tests of the tcp collectives when something is wrong (comm_mp.h forks
 * the ranks): a tuning knob out of its range fails the open naming the range, a rank
 * killed inside an allreduce and a rank that stalls are named by the others, and the
 * communicator stays failed.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm_mp.h"
#include "dslaunch/comm/comm.h"
#include "dslaunch/common/error.h"
#include "test.h"

/* Rank 0 of a world of 2 opens with NAME=VALUE: the open must fail, naming the knob and
 * its range (want), and not crash. The knobs are read before any peer is needed (rank 0
 * hosts the store and waits for nobody), so rank 1 is not started: it would only retry
 * the store rank 0 closed, for DSLAUNCH_STORE_TIMEOUT. */
static int open_refused(const char *name, const char *value, const char *want)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", free_port());
    pid_t pid = fork();
    if (pid == 0) {
        char err[DSL_ERR_LEN] = "";
        rank_env("0", "2", port);
        setenv(name, value, 1);
        alarm(60);
        struct dsl_comm *c = open_rank(0, err);
        if (c) {
            fprintf(stderr, "%s=%s was accepted\n", name, value);
            dsl_comm_close(c);
            _exit(1);
        }
        if (!strstr(err, want)) {
            fprintf(stderr, "'%s' lacks '%s'\n", err, want);
            _exit(1);
        }
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "rank 0 failed (status 0x%x)\n", st);
        return 1;
    }
    return 0;
}

TEST(a_tuning_knob_out_of_its_range_should_fail_the_open_with_the_range_not_crash)
{
    ASSERT_EQ(open_refused("DSL_COMM_CMA_CHUNK", "1K", "bad DSL_COMM_CMA_CHUNK: allowed "
                           "4K..64M, got '1K'"), 0);
    ASSERT_EQ(open_refused("DSL_COMM_SOCKBUF", "2G", "bad DSL_COMM_SOCKBUF: allowed 0..1G, "
                           "got '2G'"), 0);
    ASSERT_EQ(open_refused("DSL_COMM_SPIN_US", "2000000", "bad DSL_COMM_SPIN_US: allowed "
                           "0..1000000, got '2000000'"), 0);
    ASSERT_EQ(open_refused("DSL_COMM_ALGO", "tree", "bad DSL_COMM_ALGO 'tree'"), 0);
}

static int killed_in_allreduce(struct dsl_comm *c, int rank, int world)
{
    (void)world;
    const size_t n = (size_t)16 << 20;
    float *a = tbuf(c, n * sizeof(float));
    CHECK(a, "out of memory");
    memset(a, 0, n * sizeof(float));
    CHECK(dsl_comm_barrier(c) == 0, "%s", dsl_comm_last_error(c));
    if (rank == 1) {
        int req;
        dsl_comm_iallreduce(c, a, a, n, DSL_FLOAT32, DSL_SUM, &req);
        /* die once the transfer is under way */
        while (dsl_comm_bytes_sent(c) < ((size_t)1 << 20))
            ;
        raise(SIGKILL);
    }
    int r = dsl_comm_allreduce(c, a, a, n, DSL_FLOAT32, DSL_SUM);
    /* on a loaded machine rank 1's progress thread can finish the whole transfer
     * before its SIGKILL lands; the death must then fail the next call */
    if (r == 0)
        r = dsl_comm_barrier(c);
    const char *e = dsl_comm_last_error(c);
    fprintf(stderr, "rank %d got (as expected): %s\n", rank, e);
    CHECK(r == DSL_EPEER || r == DSL_ETIMEDOUT, "allreduce returned %d", r);
    CHECK(strstr(e, "rank 1 (127.0.0.1:") != NULL, "error does not name rank 1: %s", e);
    CHECK(dsl_comm_barrier(c) == r, "the communicator should stay failed");
    tfree(c, a);
    return 0;
}

TEST(a_rank_killed_in_an_allreduce_should_fail_the_others_naming_it)
{
    /* over sockets alone a third rank may hear first from a rank that gave up because
     * of rank 1 and closed; with the same-host path the dead process is identified */
    use_path("ring");
    ASSERT_EQ(run_world(2, killed_in_allreduce, 0, "10", 1), 0);
    use_path("cma");
    ASSERT_EQ(run_world(2, killed_in_allreduce, 0, "10", 1), 0);
    ASSERT_EQ(run_world(3, killed_in_allreduce, 0, "10", 1), 0);
    ASSERT_EQ(run_world(4, killed_in_allreduce, 0, "10", 1), 0);
    use_path("shared");
    ASSERT_EQ(run_world(2, killed_in_allreduce, 0, "10", 1), 0);
    ASSERT_EQ(run_world(4, killed_in_allreduce, 0, "10", 1), 0);
}

static int stalled_rank(struct dsl_comm *c, int rank, int world)
{
    (void)world;
    float x[100] = {0};
    CHECK(dsl_comm_barrier(c) == 0, "%s", dsl_comm_last_error(c));
    if (rank == 1) { /* never joins: sleep past the others' timeout, then leave */
        struct timespec ts = {3, 0};
        nanosleep(&ts, NULL);
        return 0;
    }
    int r = dsl_comm_allreduce(c, x, x, 100, DSL_FLOAT32, DSL_SUM);
    const char *e = dsl_comm_last_error(c);
    CHECK(r == DSL_ETIMEDOUT, "allreduce returned %d: %s", r, e);
    CHECK(strstr(e, "rank 1 (127.0.0.1:") != NULL, "error does not name rank 1: %s", e);
    CHECK(strstr(e, "timed out") != NULL, "%s", e);
    /* stay a little, so that the other waiting rank times out rather than sees us go */
    struct timespec ts = {1, 500 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return 0;
}

TEST(a_stalled_rank_should_time_out_the_others_naming_it)
{
    use_path("cma");
    ASSERT_EQ(run_world(3, stalled_rank, 0, "1", 0), 0);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    return RUN_TESTS(argc, argv);
}
