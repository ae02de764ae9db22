/* The communicator at world size 1: no env, no store, no sockets; collectives copy. */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/common/error.h"
#include "test.h"

static struct dsl_comm *open_alone(void)
{
    char err[DSL_ERR_LEN] = "";
    struct dsl_comm_opts o = {.backend = "tcp"};
    struct dsl_comm *c = NULL;
    unsetenv("WORLD_SIZE");
    unsetenv("RANK");
    if (dsl_comm_open_env(&c, &o, err) < 0) {
        fprintf(stderr, "open: %s\n", err);
        abort();
    }
    return c;
}

TEST(comm_should_open_alone_without_env)
{
    struct dsl_comm *c = open_alone();
    ASSERT_EQ(dsl_comm_rank(c), 0);
    ASSERT_EQ(dsl_comm_size(c), 1);
    ASSERT_STR_EQ(dsl_comm_backend(c), "tcp");
    ASSERT(dsl_comm_store(c) == NULL);
    dsl_comm_close(c);
}

TEST(comm_alone_should_copy_every_collective)
{
    struct dsl_comm *c = open_alone();
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0};
    ASSERT_OK(dsl_comm_allreduce(c, a, b, 5, DSL_FLOAT32, DSL_SUM));
    ASSERT(memcmp(a, b, sizeof(a)) == 0);
    memset(b, 0, sizeof(b));
    ASSERT_OK(dsl_comm_reduce_scatter(c, a, b, 5, DSL_FLOAT32, DSL_MAX));
    ASSERT(memcmp(a, b, sizeof(a)) == 0);
    memset(b, 0, sizeof(b));
    ASSERT_OK(dsl_comm_allgather(c, a, b, 5, DSL_FLOAT32));
    ASSERT(memcmp(a, b, sizeof(a)) == 0);
    ASSERT_OK(dsl_comm_allreduce(c, a, a, 5, DSL_FLOAT32, DSL_SUM));
    ASSERT_OK(dsl_comm_broadcast(c, a, 5, DSL_FLOAT32, 0));
    ASSERT_ERR(dsl_comm_broadcast(c, a, 5, DSL_FLOAT32, 1));
    ASSERT_OK(dsl_comm_barrier(c));
    int req = 0;
    memset(b, 0, sizeof(b));
    ASSERT_OK(dsl_comm_iallreduce(c, a, b, 5, DSL_FLOAT32, DSL_SUM, &req));
    ASSERT_OK(dsl_comm_wait(c, req));
    ASSERT(memcmp(a, b, sizeof(a)) == 0);
    ASSERT_EQ(dsl_comm_bytes_sent(c), 0);
    dsl_comm_close(c);
}

TEST(shard_should_follow_the_ceil_convention)
{
    static const struct {
        size_t n;
        int world, rank;
        size_t off, len;
    } cases[] = {
        {10, 4, 0, 0, 3}, {10, 4, 3, 9, 1}, {2, 4, 3, 2, 0}, {0, 3, 1, 0, 0}, {8, 2, 1, 4, 4},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t off, len;
        dsl_shard_of(cases[i].n, cases[i].rank, cases[i].world, &off, &len);
        ASSERT_EQ(off, cases[i].off);
        ASSERT_EQ(len, cases[i].len);
    }
    ASSERT_EQ(dsl_shard_size(10, 4), 3);
}

int main(int argc, char **argv) { return RUN_TESTS(argc, argv); }
