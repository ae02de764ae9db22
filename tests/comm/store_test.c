/*
 * The rendezvous store: operations, blocking semantics, and refusal of bad clients
 * (wrong token, version or job, garbage, bad lengths) while the server keeps serving.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "comm/store.h"
#include "comm/store_proto.h"
#include "test.h"

/* A server of job "job1" (token "tok") whose strangers have hello_timeout seconds for
 * their hello (0: the default). */
static struct dsl_store_server *start_server_with(double hello_timeout)
{
    struct dsl_store_opts o = {.run_id = "job1", .token = "tok", .timeout_s = 5, .world_size = 3,
                               .hello_timeout_s = hello_timeout};
    struct dsl_store_server *s = NULL;
    char err[DSL_ERR_LEN] = "";
    if (dsl_store_server_start(&s, &o, err) < 0) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
    return s;
}

static struct dsl_store_server *start_server(void)
{
    return start_server_with(0);
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

/* A plain TCP connection to the server, no hello said. */
static int raw_client(struct dsl_store_server *s)
{
    int fd = dsl_net_connect("127.0.0.1", dsl_store_server_port(s), 2, NULL);
    ASSERT(fd >= 0);
    return fd;
}

/* The server dropped exactly n clients for their deadlines and still serves; free it. */
static void free_after_timeouts(struct dsl_store_server *s, unsigned long n)
{
    struct dsl_store_stats st;
    dsl_store_server_stats(s, &st);
    ASSERT_EQ(st.timed_out, n);
    assert_serving(s);
    dsl_store_server_free(s);
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
    int fd = raw_client(s);
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
    int fd = raw_client(s);
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
    int fd = raw_client(s);
    ASSERT_OK(dsl_net_write_all(fd, "\0\0\0\x20\x01", 5, dsl_now() + 2));
    assert_serving(s);
    close(fd);
    dsl_store_server_free(s);
}

/* Wait (at most 10 s) until the server hangs up on fd; 1 if it did. */
static int hung_up(int fd)
{
    unsigned char buf[512];
    double deadline = dsl_now() + 10;
    while (dsl_now() < deadline) {
        if (dsl_net_wait(fd, POLLIN, deadline) < 0)
            return 0;
        ssize_t got = read(fd, buf, sizeof(buf));
        if (got <= 0)
            return 1;
    }
    return 0;
}

/* The bytes of a hello for job1/tok as rank 0. */
static size_t hello_bytes(unsigned char *f)
{
    static const unsigned char h[] = {0, 0, 0, 0, DSL_STORE_HELLO, 'D', 'S', 'L', 'S', 0, 1,
                                      0, 4, 'j', 'o', 'b', '1', 0, 3, 't', 'o', 'k', 0, 0, 0, 0};
    memcpy(f, h, sizeof(h));
    f[3] = (unsigned char)(sizeof(h) - 4);
    return sizeof(h);
}

TEST(store_should_hang_up_on_a_connection_that_never_says_hello)
{
    struct dsl_store_server *s = start_server_with(0.3);
    int fd = raw_client(s);
    ASSERT(hung_up(fd));
    close(fd);
    /* nor on one that sends half a hello and stops */
    fd = raw_client(s);
    unsigned char f[64];
    size_t n = hello_bytes(f);
    ASSERT_OK(dsl_net_write_all(fd, f, n - 3, dsl_now() + 2));
    ASSERT(hung_up(fd));
    close(fd);
    free_after_timeouts(s, 2);
}

TEST(store_should_hang_up_on_an_authenticated_client_that_holds_a_partial_frame)
{
    struct dsl_store_server *s = start_server_with(0.2); /* a frame gets 6 x 0.2 s */
    int fd = raw_client(s);
    unsigned char f[64], h[4], body[16];
    size_t n = hello_bytes(f);
    ASSERT_OK(dsl_net_write_all(fd, f, n, dsl_now() + 2));
    ASSERT_OK(dsl_net_read_all(fd, h, 4, dsl_now() + 2));
    ASSERT_EQ(h[3], 1);
    ASSERT_OK(dsl_net_read_all(fd, body, 1, dsl_now() + 2));
    ASSERT_EQ(body[0], DSL_STORE_OK);
    /* a set of 32 bytes, of which 6 arrive */
    static const unsigned char part[] = {0, 0, 0, 32, DSL_STORE_SET, 0, 1, 'k', 0, 0};
    ASSERT_OK(dsl_net_write_all(fd, part, sizeof(part), dsl_now() + 2));
    ASSERT(hung_up(fd));
    close(fd);
    free_after_timeouts(s, 1);
}

/* How many connections owing a hello the server keeps (as it computes it). */
static size_t max_unauth(void)
{
    struct rlimit rl;
    size_t m = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 4 < m)
        m = rl.rlim_cur / 4 < 8 ? 8 : (size_t)(rl.rlim_cur / 4);
    return m;
}

TEST(store_should_let_ranks_in_past_a_flood_of_idle_connections)
{
    struct rlimit rl, low;
    ASSERT_OK(getrlimit(RLIMIT_NOFILE, &rl));
    low = rl;
    if (low.rlim_cur == RLIM_INFINITY || low.rlim_cur > 1024)
        low.rlim_cur = 1024; /* both ends of every connection are in this process */
    ASSERT_OK(setrlimit(RLIMIT_NOFILE, &low));
    struct dsl_store_server *s = start_server(); /* a 5 s hello deadline: none expires */
    size_t n = max_unauth() + 40;
    int *fds = calloc(n, sizeof(int));
    for (size_t i = 0; i < n; i++) {
        fds[i] = dsl_net_connect("127.0.0.1", dsl_store_server_port(s), 2, NULL);
        ASSERT(fds[i] >= 0);
    }
    /* ranks still get in, and the flood did not count against them */
    struct dsl_store *a = client(s, 1), *b = client(s, 2);
    int64_t v = 0;
    ASSERT_OK(dsl_store_add(a, "n", 1, &v));
    ASSERT_OK(dsl_store_add(b, "n", 1, &v));
    ASSERT_EQ(v, 2);
    struct dsl_store_stats st;
    dsl_store_server_stats(s, &st);
    ASSERT(st.dropped_unauth >= 40);
    ASSERT_EQ(st.timed_out, 0);
    dsl_store_free(a);
    dsl_store_free(b);
    for (size_t i = 0; i < n; i++)
        close(fds[i]);
    free(fds);
    dsl_store_server_free(s);
    ASSERT_OK(setrlimit(RLIMIT_NOFILE, &rl));
}

TEST(store_should_keep_serving_without_spinning_when_out_of_fds)
{
    struct rlimit rl, low;
    ASSERT_OK(getrlimit(RLIMIT_NOFILE, &rl));
    low = rl;
    low.rlim_cur = 128;
    ASSERT_OK(setrlimit(RLIMIT_NOFILE, &low));
    struct dsl_store_server *s = start_server();
    struct dsl_store *st = client(s, 1);
    int go[2];
    ASSERT_OK(pipe(go));
    /* this process (the server's too) runs out of fds */
    int fill[128], nfill = 0;
    for (int fd; nfill < 128 && (fd = dup(0)) >= 0;)
        fill[nfill++] = fd;
    ASSERT(nfill > 0);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) { /* a stranger with 100 idle connections */
        for (int i = 0; i < nfill; i++)
            close(fill[i]);
        close(go[1]); /* a parent that fails lets it go */
        int c[100];
        for (int i = 0; i < 100; i++)
            c[i] = dsl_net_connect("127.0.0.1", dsl_store_server_port(s), 2, NULL);
        char x;
        (void)!read(go[0], &x, 1);
        for (int i = 0; i < 100; i++)
            if (c[i] >= 0)
                close(c[i]);
        _exit(0);
    }
    struct dsl_store_stats t;
    double deadline = dsl_now() + 20;
    do {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        dsl_store_server_stats(s, &t);
    } while (t.shed + t.backoffs < 100 && dsl_now() < deadline);
    ASSERT(t.accept_failures > 0);
    /* no busy loop: each wake-up with nothing done started a rest of the listener */
    if (t.idle_wakeups > t.backoffs + 8)
        fprintf(stderr, "idle wake-ups %lu, backoffs %lu, accept failures %lu\n",
                t.idle_wakeups, t.backoffs, t.accept_failures);
    ASSERT(t.idle_wakeups <= t.backoffs + 8);
    /* every connection was accepted and closed, none left readable on the listener */
    ASSERT(t.shed + t.backoffs >= 100 || t.backoffs > 0);
    /* the authenticated client is still served, with no fd to spare */
    void *v = NULL;
    size_t n = 0;
    ASSERT_OK(dsl_store_set(st, "k", "v", 1));
    ASSERT_OK(dsl_store_get(st, "k", &v, &n));
    free(v);
    /* no busy loop: each wake-up with nothing done started a rest of the listener */
    dsl_store_server_stats(s, &t);
    ASSERT(t.idle_wakeups <= t.backoffs + 8);
    (void)!write(go[1], "x", 1);
    waitpid(pid, NULL, 0);
    close(go[0]);
    close(go[1]);
    for (int i = 0; i < nfill; i++)
        close(fill[i]);
    /* fds are back: new clients get in */
    assert_serving(s);
    dsl_store_free(st);
    dsl_store_server_free(s);
    ASSERT_OK(setrlimit(RLIMIT_NOFILE, &rl));
}

TEST(store_should_refuse_to_run_open_without_a_token_unless_asked)
{
    struct dsl_store_opts o = {.run_id = "job1", .token = "", .timeout_s = 5, .world_size = 2};
    struct dsl_store_server *s = NULL;
    struct dsl_store *st = NULL;
    char err[DSL_ERR_LEN] = "";
    ASSERT_EQ(dsl_store_server_start(&s, &o, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, DSL_ENV_RUN_TOKEN " is not set");
    ASSERT_CONTAINS(err, DSL_ENV_STORE_INSECURE "=1");
    o.addr = "127.0.0.1";
    o.rank = 1;
    ASSERT_EQ(dsl_store_open(&st, &o, err), DSL_EUSAGE);
    /* one rank alone has nobody to let in */
    o.world_size = 1;
    o.rank = 0;
    ASSERT_OK(dsl_store_server_start(&s, &o, err));
    dsl_store_server_free(s);
    o.world_size = 2;
    o.insecure = 1;
    ASSERT_OK(dsl_store_server_start(&s, &o, err));
    dsl_store_server_free(s);
    /* the environment: only "1" asks for it */
    setenv(DSL_ENV_MASTER_PORT, "29999", 1);
    setenv(DSL_ENV_STORE_INSECURE, "yes", 1);
    ASSERT_EQ(dsl_store_opts_from_env(&o, err), DSL_EUSAGE);
    setenv(DSL_ENV_STORE_INSECURE, "1", 1);
    ASSERT_OK(dsl_store_opts_from_env(&o, err));
    ASSERT_EQ(o.insecure, 1);
    unsetenv(DSL_ENV_STORE_INSECURE);
    unsetenv(DSL_ENV_MASTER_PORT);
}

struct late_client {
    int port;
    int rc;
    char err[DSL_ERR_LEN];
};

static void *connect_late(void *arg)
{
    struct late_client *lc = arg;
    struct dsl_store *st = NULL;
    struct dsl_store_opts o = {.addr = "127.0.0.1", .port = lc->port, .run_id = "job1",
                               .token = "tok", .timeout_s = 20, .rank = 1, .world_size = 3};
    lc->rc = dsl_store_connect(&st, &o, lc->err);
    if (st) {
        lc->rc = dsl_store_set(st, "late", "1", 1);
        dsl_store_free(st);
    }
    return NULL;
}

TEST(store_client_should_retry_a_hello_that_was_cut_off_and_a_server_should_take_a_reserved_socket)
{
    /* the socket a launcher's agent reserves for rank 0 */
    int lfd = dsl_net_listen("127.0.0.1", 0, 16, NULL);
    ASSERT(lfd >= 0);
    struct late_client lc = {.port = dsl_net_local_port(lfd)};
    pthread_t th;
    ASSERT_OK(pthread_create(&th, NULL, connect_late, &lc));
    /* the first hello is cut off (as a store shedding a flood would) */
    int c = dsl_net_accept(lfd, dsl_now() + 10, NULL);
    ASSERT(c >= 0);
    close(c);
    /* then rank 0's store serves on the reserved socket */
    struct dsl_store_opts o = {.addr = "127.0.0.1", .port = lc.port, .run_id = "job1",
                               .token = "tok", .timeout_s = 5, .world_size = 3,
                               .inherited_fd = lfd};
    struct dsl_store_server *s = NULL;
    char err[DSL_ERR_LEN] = "";
    ASSERT_OK(dsl_store_server_start(&s, &o, err));
    ASSERT_EQ(dsl_store_server_port(s), lc.port);
    pthread_join(th, NULL);
    if (lc.rc < 0)
        fprintf(stderr, "%s\n", lc.err);
    ASSERT_OK(lc.rc);
    struct dsl_store *st = client(s, 0);
    void *v = NULL;
    size_t n = 0;
    ASSERT_OK(dsl_store_get(st, "late", &v, &n));
    free(v);
    dsl_store_free(st);
    dsl_store_server_free(s);
}

TEST(store_should_refuse_an_inherited_fd_that_is_not_its_listener)
{
    int lfd = dsl_net_listen("127.0.0.1", 0, 16, NULL);
    ASSERT(lfd >= 0);
    int port = dsl_net_local_port(lfd);
    struct dsl_store_opts o = {.port = port + 1 == 65536 ? 1 : port + 1, .run_id = "job1",
                               .token = "tok", .timeout_s = 5, .world_size = 3,
                               .inherited_fd = lfd};
    struct dsl_store_server *s = NULL;
    char err[DSL_ERR_LEN] = "";
    ASSERT(dsl_store_server_start(&s, &o, err) < 0);
    ASSERT_CONTAINS(err, "MASTER_PORT is");
    int devnull = dup(0);
    o.inherited_fd = devnull;
    ASSERT(dsl_store_server_start(&s, &o, err) < 0);
    ASSERT_CONTAINS(err, "inherited socket");
    close(devnull);
    close(lfd);
}

TEST(store_should_listen_on_the_master_address_only)
{
    struct dsl_store_opts o = {.addr = "127.0.0.1", .run_id = "job1", .token = "tok",
                               .timeout_s = 5, .world_size = 3};
    struct dsl_store_server *s = NULL;
    char err[DSL_ERR_LEN] = "";
    ASSERT_OK(dsl_store_server_start(&s, &o, err));
    /* another loopback address of this machine does not reach it */
    int fd = dsl_net_connect("127.0.0.2", dsl_store_server_port(s), 0.2, NULL);
    ASSERT(fd < 0);
    fd = raw_client(s);
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
