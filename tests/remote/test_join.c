/*
 * No-ssh mode's keys and coordinator listener (seal.h dsl_seal_key_derive, join.h), on
 * loopback: agents are forked children that dial with keys derived from a secret.
 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/remote/connectback.h"
#include "dslaunch/remote/join.h"
#include "dslaunch/remote/seal.h"
#include "test.h"

#define SECRET "join-test-secret-0123456789"

TEST(derived_keys_should_be_the_same_for_a_secret_and_label_and_differ_otherwise)
{
    unsigned char p1[32], q1[32], p2[32], q2[32], p3[32], q3[32], p4[32], q4[32];
    char err[DSL_ERR_LEN];
    ASSERT_EQ(dsl_seal_key_derive(SECRET, strlen(SECRET), "agent 1", p1, q1, err), 0);
    ASSERT_EQ(dsl_seal_key_derive(SECRET, strlen(SECRET), "agent 1", p2, q2, err), 0);
    ASSERT(!memcmp(p1, p2, 32) && !memcmp(q1, q2, 32));
    ASSERT_EQ(dsl_seal_key_derive(SECRET, strlen(SECRET), "agent 2", p3, q3, err), 0);
    ASSERT(memcmp(q1, q3, 32) != 0);
    ASSERT_EQ(dsl_seal_key_derive("another-secret-0123456", 22, "agent 1", p4, q4, err), 0);
    ASSERT(memcmp(q1, q4, 32) != 0);
    ASSERT_EQ(dsl_seal_key_derive("short", 5, "agent 1", p4, q4, err), DSL_EAUTH);
    ASSERT_CONTAINS(err, "shorter than 16 bytes");
}

/* A child: dial the coordinator as node rank k with secret; send one line once open.
 * Exits 0 when the handshake succeeded, 3 when it was refused. */
static pid_t agent(int port, const char *secret, int k)
{
    pid_t pid = fork();
    if (pid)
        return pid;
    unsigned char lpriv[32], lpub[32], apriv[32], apub[32];
    char err[DSL_ERR_LEN], label[32], hp[64];
    dsl_join_agent_label(k, label, sizeof(label));
    dsl_seal_key_derive(secret, strlen(secret), "launcher", lpriv, lpub, err);
    dsl_seal_key_derive(secret, strlen(secret), label, apriv, apub, err);
    snprintf(hp, sizeof(hp), "127.0.0.1:%d", port);
    int fd;
    struct dsl_seal seal;
    if (dsl_agent_cb_dial_keyed(hp, apriv, lpub, dsl_now() + 10, 1, &fd, &seal, err) < 0)
        _exit(2);
    if (dsl_agent_cb_handshake(fd, &seal, dsl_now() + 10, err) < 0)
        _exit(3);
    char line[64];
    int n = snprintf(line, sizeof(line), "hello from %d\n", k);
    dsl_seal_write(&seal, line, (size_t)n);
    dsl_net_write_all(fd, seal.out.buf, seal.out.len, dsl_now() + 5);
    char c;
    while (read(fd, &c, 1) > 0) /* until the coordinator closes */
        ;
    _exit(0);
}

static int exit_code(pid_t pid)
{
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST(join_should_accept_each_node_rank_with_the_secret_and_refuse_another_secret)
{
    char err[DSL_ERR_LEN];
    ASSERT_EQ(dsl_join_open(0, SECRET, strlen(SECRET), 3, err), 0);
    int port = dsl_join_port();
    ASSERT(port > 0);
    pid_t a2 = agent(port, SECRET, 2), a1 = agent(port, SECRET, 1);
    pid_t bad = agent(port, "not-the-same-secret-0000", 1);
    int bad_status = -1;
    size_t len[3] = {0, 0, 0};
    const char *got[3] = {NULL, NULL, NULL};
    double deadline = dsl_now() + 20;
    while (dsl_now() < deadline && (!got[1] || !got[2] || !memchr(got[1], '\n', len[1]) ||
                                    !memchr(got[2], '\n', len[2]) || bad_status < 0)) {
        if (bad_status < 0 && waitpid(bad, &bad_status, WNOHANG) == 0)
            bad_status = -1;
        dsl_join_service();
        for (int k = 1; k < 3; k++)
            if (dsl_join_ready(k))
                got[k] = dsl_join_peek(k, &len[k]);
        poll(NULL, 0, 10);
    }
    ASSERT(got[1] && got[2]);
    ASSERT(WIFEXITED(bad_status) && WEXITSTATUS(bad_status) == 3);
    ASSERT_EQ(strncmp(got[1], "hello from 1\n", len[1]), 0);
    ASSERT_EQ(strncmp(got[2], "hello from 2\n", len[2]), 0);
    const char *why = NULL;
    ASSERT_EQ(dsl_join_refused(&why), 1);
    ASSERT_CONTAINS(why, "key belongs to no node rank of this job");
    ASSERT_CONTAINS(why, "127.0.0.1");
    dsl_join_set_host(1, "n1");
    ASSERT_EQ(dsl_join_rank_of("n1"), 1);
    ASSERT_EQ(dsl_join_rank_of("n0"), -1);
    dsl_join_close();
    ASSERT_EQ(exit_code(a1), 0);
    ASSERT_EQ(exit_code(a2), 0);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    return RUN_TESTS(argc, argv);
}
