/*
 * The rendezvous store: operations, blocking semantics, and refusal of bad clients
 * (wrong token, version or job, garbage, bad lengths) while the server keeps serving.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "comm/store.h"
#include "comm/store_proto.h"
#include "test.h"

static struct dsl_store_server *start_server(void)
{
    struct dsl_store_opts o = {.run_id = "job1", .token = "tok", .timeout_s = 5, .world_size = 3};
    struct dsl_store_server *s = NULL;
    char err[DSL_ERR_LEN] = "";
    if (dsl_store_server_start(&s, &o, err) < 0) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
    return s;
}

static int connect_as(struct dsl_store_server *s, const char *run, const char *tok, int rank,
                      double timeout, struct dsl_store **out, char *err)
{
    struct dsl_store_opts o = {.addr = "127.0.0.1", .port = dsl_store_server_port(s),
                               .run_id = run, .token = tok, .timeout_s = timeout,
                               .rank = rank, .world_size = 3};
    return dsl_store_connect(out, &o, err);
}

static struct dsl_store *client(struct dsl_store_server *s, int rank)
{
    struct dsl_store *st = NULL;
    char err[DSL_ERR_LEN] = "";
    if (connect_as(s, "job1", "tok", rank, 5, &st, err) < 0) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
    return st;
}

/* The server still answers a proper client. */
static void assert_serving(struct dsl_store_server *s)
{
    struct dsl_store *st = client(s, 0);
    void *v = NULL;
    size_t n = 0;
    ASSERT_OK(dsl_store_set(st, "alive", "yes", 3));
    ASSERT_OK(dsl_store_get(st, "alive", &v, &n));
    ASSERT_EQ(n, 3);
    free(v);
    dsl_store_free(st);
}

TEST(store_should_set_get_add_and_delete)
{
    struct dsl_store_server *s = start_server();
    struct dsl_store *st = client(s, 0);
    void *v = NULL;
    size_t n = 0;
    int64_t x = 0;
    ASSERT_OK(dsl_store_set(st, "k", "hello", 5));
    ASSERT_OK(dsl_store_get(st, "k", &v, &n));
    ASSERT_EQ(n, 5);
    ASSERT(memcmp(v, "hello", 5) == 0);
    free(v);
    ASSERT_OK(dsl_store_set(st, "empty", "", 0));
    ASSERT_OK(dsl_store_get(st, "empty", &v, &n));
    ASSERT_EQ(n, 0);
    free(v);
    ASSERT_OK(dsl_store_add(st, "ctr", 5, &x));
    ASSERT_EQ(x, 5);
    ASSERT_OK(dsl_store_add(st, "ctr", -7, &x));
    ASSERT_EQ(x, -2);
    ASSERT_OK(dsl_store_get(st, "ctr", &v, &n));
    ASSERT_STR_EQ((char *)v, "-2");
    free(v);
    ASSERT_ERR(dsl_store_add(st, "k", 1, &x)); /* not a number: refused, client closed */
    dsl_store_free(st);
    st = client(s, 0);
    ASSERT_OK(dsl_store_delete(st, "k"));
    ASSERT_OK(dsl_store_delete(st, "never-there"));
    const char *keys[] = {"ctr", "empty"};
    ASSERT_OK(dsl_store_wait(st, keys, 2));
    ASSERT_ERR(dsl_store_set(st, "", "x", 1));
    dsl_store_free(st);
    dsl_store_server_free(s);
}

struct setter {
    struct dsl_store_server *s;
    const char *key;
};

static void *set_later(void *arg)
{
    struct setter *a = arg;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    struct dsl_store *st = client(a->s, 1);
    dsl_store_set(st, a->key, "v", 1);
    dsl_store_free(st);
    return NULL;
}

TEST(store_get_should_block_until_another_client_sets_the_key)
{
    struct dsl_store_server *s = start_server();
    struct dsl_store *st = client(s, 0);
    struct setter a = {s, "late"};
    pthread_t th;
    void *v = NULL;
    size_t n;
    pthread_create(&th, NULL, set_later, &a);
    ASSERT_OK(dsl_store_get(st, "late", &v, &n));
    ASSERT_EQ(n, 1);
    free(v);
    pthread_join(th, NULL);
    struct setter b = {s, "w2"};
    pthread_create(&th, NULL, set_later, &b);
    const char *keys[] = {"late", "w2"};
    ASSERT_OK(dsl_store_wait(st, keys, 2));
    pthread_join(th, NULL);
    dsl_store_free(st);
    dsl_store_server_free(s);
}

TEST(store_get_should_time_out_on_a_missing_key)
{
    struct dsl_store_server *s = start_server();
    struct dsl_store *st = NULL;
    char err[DSL_ERR_LEN];
    void *v;
    size_t n;
    ASSERT_OK(connect_as(s, "job1", "tok", 0, 0.3, &st, err));
    ASSERT_EQ(dsl_store_get(st, "nope", &v, &n), DSL_ETIMEDOUT);
    ASSERT_CONTAINS(dsl_store_last_error(st), "timed out");
    dsl_store_free(st);
    assert_serving(s);
    dsl_store_server_free(s);
}

static void *barrier_rank(void *arg)
{
    struct dsl_store *st = arg;
    return (void *)(intptr_t)(dsl_store_barrier(st, "b1") | dsl_store_barrier(st, "b2"));
}

TEST(store_barrier_should_release_all_ranks_together)
{
    struct dsl_store_server *s = start_server();
    struct dsl_store *st[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        st[i] = client(s, i);
        pthread_create(&th[i], NULL, barrier_rank, st[i]);
    }
    for (int i = 0; i < 3; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        ASSERT_EQ((intptr_t)ret, 0);
        dsl_store_free(st[i]);
    }
    dsl_store_server_free(s);
}

TEST(store_should_refuse_a_wrong_token_job_or_version)
{
    struct dsl_store_server *s = start_server();
    struct dsl_store *st = NULL;
    char err[DSL_ERR_LEN] = "";
    ASSERT_EQ(connect_as(s, "job1", "bad", 0, 2, &st, err), DSL_ETOKEN);
    ASSERT_CONTAINS(err, "wrong job token");
    ASSERT(st == NULL);
    ASSERT_EQ(connect_as(s, "job2", "tok", 0, 2, &st, err), DSL_EAUTH);
    ASSERT_CONTAINS(err, "job 'job2'");
    ASSERT_EQ(connect_as(s, "job1", "", 0, 2, &st, err), DSL_ETOKEN);

    /* a hello of version 2, by hand */
    int fd = dsl_net_connect("127.0.0.1", dsl_store_server_port(s), 2, NULL);
    ASSERT(fd >= 0);
    unsigned char f[] = {0, 0, 0, 18, DSL_STORE_HELLO, 'D', 'S', 'L', 'S', 0, 2,
                         0, 4, 'j', 'o', 'b', '1', 0, 0, 0, 0, 0};
    f[3] = (unsigned char)(sizeof(f) - 4);
    ASSERT_OK(dsl_net_write_all(fd, f, sizeof(f), dsl_now() + 2));
    unsigned char h[4], body[256];
    ASSERT_OK(dsl_net_read_all(fd, h, 4, dsl_now() + 2));
    uint32_t len = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
    ASSERT(len < sizeof(body));
    ASSERT_OK(dsl_net_read_all(fd, body, len, dsl_now() + 2));
    ASSERT_EQ(body[0], DSL_STORE_ERR);
    ASSERT_EQ(body[1], DSL_STORE_R_VERSION);
    /* then the server hangs up */
    ASSERT(dsl_net_read_all(fd, h, 1, dsl_now() + 2) < 0);
    close(fd);
    assert_serving(s);
    dsl_store_server_free(s);
}

/* Send raw bytes; the server must answer with ERR and/or close, never hang or crash. */
static void expect_refused(struct dsl_store_server *s, const void *bytes, size_t n)
{
    int fd = dsl_net_connect("127.0.0.1", dsl_store_server_port(s), 2, NULL);
    ASSERT(fd >= 0);
    ASSERT_OK(dsl_net_write_all(fd, bytes, n, dsl_now() + 2));
    unsigned char buf[512];
    int closed = 0;
    double deadline = dsl_now() + 3;
    while (dsl_now() < deadline) {
        if (dsl_net_wait(fd, 1 /* POLLIN */, deadline) < 0)
            break;
        ssize_t got = read(fd, buf, sizeof(buf));
        if (got <= 0) {
            closed = 1;
            break;
        }
    }
    ASSERT(closed);
    close(fd);
}

TEST(store_should_drop_garbage_and_bad_lengths_and_keep_serving)
{
    struct dsl_store_server *s = start_server();
    static const unsigned char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    static const unsigned char huge[] = {0xff, 0xff, 0xff, 0xff, 1};
    static const unsigned char zero[] = {0, 0, 0, 0, 1, 2, 3};
    static const unsigned char before_hello[] = {0, 0, 0, 4, DSL_STORE_GET, 0, 1, 'k'};
    static const unsigned char short_hello[] = {0, 0, 0, 3, DSL_STORE_HELLO, 'D', 'S'};
    static const unsigned char big_hello[] = {0, 0, 0x20, 0, DSL_STORE_HELLO};
    struct {
        const unsigned char *b;
        size_t n;
    } cases[] = {{garbage, sizeof(garbage) - 1}, {huge, sizeof(huge)}, {zero, sizeof(zero)},
                 {before_hello, sizeof(before_hello)}, {short_hello, sizeof(short_hello)},
                 {big_hello, sizeof(big_hello)}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        expect_refused(s, cases[i].b, cases[i].n);
        assert_serving(s);
    }
    /* a client that stalls half-way through a frame does not block the others */
    int fd = dsl_net_connect("127.0.0.1", dsl_store_server_port(s), 2, NULL);
    ASSERT(fd >= 0);
    ASSERT_OK(dsl_net_write_all(fd, "\0\0\0\x20\x01", 5, dsl_now() + 2));
    assert_serving(s);
    close(fd);
    dsl_store_server_free(s);
}

TEST(store_parser_should_survive_arbitrary_streams)
{
    unsigned char buf[4096];
    uint32_t x = 12345;
    for (int round = 0; round < 200; round++) {
        size_t n = (size_t)(round * 19 % (int)sizeof(buf));
        for (size_t i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            buf[i] = (unsigned char)(x >> 16);
        }
        if (round % 2) { /* a valid hello in front of the noise */
            static const unsigned char hello[] = {0, 0, 0, 21, DSL_STORE_HELLO, 'D', 'S', 'L', 'S', 0,
                                                  1, 0, 3, 'r', 'u', 'n', 0, 3, 't', 'o', 'k',
                                                  0, 0, 0, 0};
            if (n >= sizeof(hello))
                memcpy(buf, hello, sizeof(hello));
        }
        ASSERT(dsl_store_proto_feed(buf, n) >= 0);
    }
}

int main(int argc, char **argv) { return RUN_TESTS(argc, argv); }
