/*
 * Unit tests for the multi-node pieces that need no cluster: the shell quoting of the
 * one remote command line (checked against a real /bin/sh), the network facts, and the
 * ssh transport's failure paths against loopback listeners (refused, silent server).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/remote/connectback.h"
#include "dslaunch/common/net.h"
#include "dslaunch/remote/netinfo.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "sh_output.h"
#include "test.h"
#include "dslaunch/common/banned.h"

static const char *const nasty[] = {
    "plain",
    "",
    "I am 6' tall",
    "''",
    "'",
    "$(touch /tmp/dsl-pwned)",
    "`id`",
    "a b\tc",
    "line1\nline2",
    "back\\slash",
    "\"double\"",
    "semi;colon && amp | pipe > redirect",
    "glob * ? [a]",
    "$HOME ${PATH} $1",
    "!bang ~tilde #hash",
    "utf8 \xc3\xa9\xe2\x82\xac",
};

TEST(shell_command_should_deliver_every_nasty_argument_byte_for_byte_through_sh)
{
    size_t n = sizeof(nasty) / sizeof(nasty[0]);
    char **argv = dsl_xcalloc(n + 3, sizeof(*argv));
    argv[0] = (char *)"printf";
    argv[1] = (char *)"%s\\0";
    for (size_t i = 0; i < n; i++)
        argv[i + 2] = (char *)nasty[i];
    unlink("/tmp/dsl-pwned");
    char *cmd = dsl_shell_command(argv);
    ASSERT(strncmp(cmd, "exec 'printf' ", 14) == 0);
    size_t len;
    char *out = sh_output(cmd, &len);
    assert_nul_words(out, len, nasty, n);
    struct stat st;
    ASSERT(stat("/tmp/dsl-pwned", &st) < 0);
    free(out);
    free(cmd);
    free(argv);
}

TEST(netinfo_route_to_loopback_should_name_lo)
{
    char ifname[64], src[64], err[DSL_ERR_LEN];
    ASSERT_OK(dsl_netinfo_route("127.0.0.1", ifname, sizeof(ifname), src, sizeof(src), err));
    ASSERT_STR_EQ(ifname, "lo");
    ASSERT_STR_EQ(src, "127.0.0.1");
}

TEST(netinfo_route_should_reject_a_host_name)
{
    char ifname[64], src[64], err[DSL_ERR_LEN] = "";
    ASSERT_EQ(dsl_netinfo_route("not-an-ip", ifname, sizeof(ifname), src, sizeof(src), err),
              -EINVAL);
    ASSERT_CONTAINS(err, "bad address 'not-an-ip'");
    ASSERT_STR_EQ(ifname, "");
}

TEST(netinfo_collect_should_list_loopback_first_with_its_ipv4_address)
{
    struct dsl_netinfo ni;
    dsl_netinfo_init(&ni);
    ASSERT_OK(dsl_netinfo_collect(&ni, NULL));
    ASSERT(ni.cpus >= 1);
    ASSERT(ni.gpus >= 0);
    ASSERT(ni.hostname[0] != '\0');
    int found = 0;
    for (int i = 0; i < ni.nifaces; i++) {
        if (strcmp(ni.ifaces[i].name, "lo") != 0)
            continue;
        found = 1;
        ASSERT(ni.ifaces[i].loopback);
        ASSERT(ni.ifaces[i].naddrs >= 1);
        ASSERT_STR_EQ(ni.ifaces[i].addrs[0], "127.0.0.1");
    }
    ASSERT(found);
    dsl_netinfo_release(&ni);
    ASSERT_EQ(ni.nifaces, 0);
}

TEST(netinfo_gpus_should_count_one_entry_per_device_directory)
{
    char dir[] = "/tmp/dsl-gpus-XXXXXX";
    ASSERT(mkdtemp(dir));
    ASSERT_EQ(dsl_netinfo_gpus(dir), 0);
    const char *ids[] = {"0000:01:00.0", "0000:41:00.0", "0000:81:00.0"};
    char path[128];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, ids[i]);
        ASSERT_OK(mkdir(path, 0700));
    }
    ASSERT_EQ(dsl_netinfo_gpus(dir), 3);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, ids[i]);
        rmdir(path);
    }
    rmdir(dir);
    ASSERT_EQ(dsl_netinfo_gpus("/nonexistent/dsl"), 0);
}

/* A launcher key pair; its public half in hex. */
static void launcher_key(unsigned char priv[32], char hex[65])
{
    unsigned char pub[32];
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_seal_keypair(priv, pub, err));
    dsl_seal_key_hex(pub, hex);
}

/* A connect-back listener on loopback and a launcher key pair for its agents: the
 * private half into lpriv, the public one in hex into lhex. */
static struct dsl_cb_listener *keyed_listener(unsigned char lpriv[32], char lhex[65])
{
    struct dsl_cb_listener *l;
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_cb_listener_open(&l, "127.0.0.1", err));
    launcher_key(lpriv, lhex);
    return l;
}

/* The agent keys that key lines on fd announce for indexes 0..n-1 (the pipe agents
   wrote) into key[0..n-1]; fd is left open (a dup is drained). */
static void read_keys(int fd0, int n, unsigned char (*key)[32])
{
    struct dsl_cb_keys k;
    struct dsl_dynbuf out;
    dsl_cb_keys_init(&k, n);
    int index = n - 1;
    dsl_dynbuf_init(&out, 1 << 16);
    int fd = dup(fd0);
    ASSERT_OK(dsl_net_set_nonblock(fd, 1));
    double deadline = dsl_now() + 10;
    int all = 0;
    while (!all && fd >= 0 && dsl_now() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 50);
        dsl_cb_drain_tail(&fd, &out, 4096, &k);
        all = 1;
        for (int i = 0; i < n; i++)
            all &= k.have[i];
    }
    if (fd >= 0)
        close(fd);
    if (!k.have[index])
        fprintf(stderr, "no key line for %d in '%s'\n", index, dsl_dynbuf_str(&out));
    ASSERT(all);
    ASSERT_EQ(out.len, 0); /* key lines are not kept as output */
    memcpy(key, k.key, (size_t)n * 32);
    dsl_dynbuf_release(&out);
    dsl_cb_keys_release(&k);
}

static void read_key(int fd, unsigned char key[32])
{
    read_keys(fd, 1, (unsigned char (*)[32])key);
}

/* Child agent of a fresh launcher key (lpriv): dial (its key line into the pipe whose read
 * end is *key_rd), handshake, send msg sealed, wait for EOF. */
static pid_t cb_child(const char *hostports, unsigned char lpriv[32], int *key_rd,
                      const char *msg)
{
    char lhex[65];
    int kp[2];
    launcher_key(lpriv, lhex);
    ASSERT_OK(pipe(kp));
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid) {
        close(kp[1]);
        *key_rd = kp[0];
        return pid;
    }
    int fd, key_fd = kp[1];
    close(kp[0]);
    char err[DSL_ERR_LEN];
    struct dsl_seal seal;
    signal(SIGPIPE, SIG_IGN);
    if (dsl_agent_cb_dial(hostports, lhex, 0, 5, key_fd, &fd, &seal, err) < 0) {
        fprintf(stderr, "agent: %s\n", err);
        _exit(3);
    }
    if (dsl_agent_cb_handshake(fd, &seal, dsl_now() + 10, err) < 0)
        _exit(strstr(err, "did not prove") || strstr(err, "did not answer") ? 6 : 4);
    if (dsl_seal_write(&seal, msg, strlen(msg)) < 0 ||
        dsl_net_write_all(fd, seal.out.buf, seal.out.len, -1) < 0)
        _exit(0);
    char c;
    ssize_t r = read(fd, &c, 1); /* wait until the launcher closes */
    _exit(r <= 0 ? 0 : 5);
}

/* Service the listener until key's socket arrives or timeout; returns fd or -EAGAIN. */
static int cb_wait(struct dsl_cb_listener *l, const unsigned char *key, double secs)
{
    double deadline = dsl_now() + secs;
    int fd = -EAGAIN;
    while (fd == -EAGAIN && dsl_now() < deadline) {
        struct pollfd p = {.fd = dsl_cb_listener_pollfd(l), .events = POLLIN};
        poll(&p, 1, 50);
        dsl_cb_listener_service(l);
        fd = dsl_cb_listener_take(l, key);
    }
    return fd;
}

/* Run the launcher's side of the handshake on st to its end: 1 or negative. */
static int handshake(struct dsl_cb_stream *st, char *err)
{
    double deadline = dsl_now() + 10;
    int h = 0;
    while (h == 0 && dsl_now() < deadline) {
        struct pollfd p = {.fd = st->fd, .events = POLLIN};
        poll(&p, 1, 50);
        h = dsl_cb_stream_handshake(st, "h", err);
    }
    return h;
}

TEST(cb_listener_should_hand_over_the_socket_of_the_agent_whose_key_line_it_read)
{
    struct dsl_cb_listener *l;
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_cb_listener_open(&l, "127.0.0.1", err));
    const char *arg = dsl_cb_listener_connect_arg(l);
    ASSERT(strncmp(arg, "127.0.0.1:", 10) == 0);
    /* a refused address first: the list is tried at once and the live one wins */
    int dead = dsl_net_listen("127.0.0.1", 0, 1, NULL);
    char *list = dsl_xasprintf("127.0.0.1:%d,%s", dsl_net_local_port(dead), arg);
    close(dead);
    unsigned char lpriv[32], akey[32];
    int kfd;
    pid_t pid = cb_child(list, lpriv, &kfd, "{\"t\":\"hello\"}\n");
    read_key(kfd, akey);
    close(kfd);
    dsl_cb_listener_expect(l, akey);
    int fd = cb_wait(l, akey, 10);
    ASSERT_OK(fd);
    struct dsl_cb_stream st;
    ASSERT_OK(dsl_cb_stream_init(&st, fd, lpriv, akey));
    ASSERT_EQ(handshake(&st, err), 1);
    char buf[32] = "";
    size_t got = 0;
    double deadline = dsl_now() + 5;
    while (got < 14 && dsl_now() < deadline) {
        ssize_t r = dsl_cb_stream_read(&st, buf + got, sizeof(buf) - 1 - got);
        if (r == -EAGAIN) {
            struct pollfd p = {.fd = st.fd, .events = POLLIN};
            poll(&p, 1, 50);
            continue;
        }
        ASSERT(r > 0);
        got += (size_t)r;
    }
    ASSERT_STR_EQ(buf, "{\"t\":\"hello\"}\n");
    dsl_cb_stream_close(&st);
    int stat;
    waitpid(pid, &stat, 0);
    ASSERT(WIFEXITED(stat) && WEXITSTATUS(stat) == 0);
    /* a key is good once */
    ASSERT_EQ(dsl_cb_listener_take(l, akey), -EAGAIN);
    free(list);
    dsl_cb_listener_free(l);
}

/* Connect to arg (ADDR:PORT), send data, return the socket. */
static int raw_connect(const char *arg, const void *data, size_t n)
{
    char *hp = dsl_xstrdup(arg), *colon = strrchr(hp, ':');
    *colon = '\0';
    int port = (int)strtol(colon + 1, NULL, 10);
    char err[DSL_ERR_LEN];
    int fd = dsl_net_connect(hp, port, 5, err);
    ASSERT_OK(fd);
    ASSERT_OK(dsl_net_write_all(fd, data, n, -1));
    free(hp);
    return fd;
}

/* 1 once the listener closed fd (EOF or reset), within 12 s of servicing. */
static int closed_by(struct dsl_cb_listener *l, int fd)
{
    double deadline = dsl_now() + 12;
    while (dsl_now() < deadline) {
        dsl_cb_listener_service(l);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) == 1) {
            char c;
            return read(fd, &c, 1) <= 0;
        }
    }
    return 0;
}

TEST(cb_listener_should_close_a_connection_that_is_not_a_hello)
{
    struct dsl_cb_listener *l;
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_cb_listener_open(&l, "127.0.0.1", err));
    /* the old clear-text token line, and a port scanner's probe */
    int a = raw_connect(dsl_cb_listener_connect_arg(l), "DSLCB1 0123456789abcdef\n", 24);
    int b = raw_connect(dsl_cb_listener_connect_arg(l), "GET / HTTP/1.0\r\n\r\n", 18);
    ASSERT(closed_by(l, a));
    ASSERT(closed_by(l, b));
    close(a);
    close(b);
    dsl_cb_listener_free(l);
}

TEST(cb_listener_should_not_hand_over_an_agent_whose_key_line_it_never_read)
{
    /* an intruder who read L from `ps` dials with a key pair of its own: its hello is
       complete but names a key nobody expects; it is held, then closed */
    char err[DSL_ERR_LEN], lhex[65];
    unsigned char lpriv[32], expected[32], pub[32], priv[32];
    struct dsl_cb_listener *l = keyed_listener(lpriv, lhex);
    ASSERT_OK(dsl_seal_keypair(priv, expected, err));
    ASSERT(dsl_cb_listener_expect(l, expected) >= 0);
    ASSERT_OK(dsl_seal_keypair(priv, pub, err));
    struct dsl_seal intruder;
    unsigned char lpub[32];
    ASSERT_OK(dsl_seal_key_parse(lhex, 64, lpub));
    ASSERT_OK(dsl_seal_init_agent(&intruder, priv, lpub, NULL));
    int fd = raw_connect(dsl_cb_listener_connect_arg(l), intruder.out.buf, intruder.out.len);
    ASSERT(closed_by(l, fd)); /* after CB_PENDING_TIMEOUT */
    ASSERT_EQ(dsl_cb_listener_take(l, expected), -EAGAIN);
    close(fd);
    dsl_seal_release(&intruder);
    dsl_cb_listener_free(l);
}

TEST(cb_stream_should_refuse_an_agent_that_replays_a_real_hello)
{
    /* an on-path attacker copies the real agent's hello; without the agent's private
       key it cannot answer the reply's challenge */
    char err[DSL_ERR_LEN], lhex[65];
    unsigned char lpriv[32], lpub[32], apriv[32], apub[32];
    struct dsl_cb_listener *l = keyed_listener(lpriv, lhex);
    ASSERT_OK(dsl_seal_key_parse(lhex, 64, lpub));
    ASSERT_OK(dsl_seal_keypair(apriv, apub, err));
    struct dsl_seal real;
    ASSERT_OK(dsl_seal_init_agent(&real, apriv, lpub, NULL));
    ASSERT(dsl_cb_listener_expect(l, apub) >= 0);
    int fd = raw_connect(dsl_cb_listener_connect_arg(l), real.out.buf, real.out.len);
    int sock = cb_wait(l, apub, 10);
    ASSERT_OK(sock);
    struct dsl_cb_stream st;
    ASSERT_OK(dsl_cb_stream_init(&st, sock, lpriv, apub));
    ASSERT_EQ(dsl_cb_stream_handshake(&st, "h", err), 0); /* reply sent, confirm awaited */
    unsigned char reply[64], guess[32];
    ASSERT_OK(dsl_net_read_all(fd, reply, sizeof(reply), dsl_now() + 5));
    memcpy(guess, reply + 32, 32); /* the launcher's own MAC, reflected */
    ASSERT_OK(dsl_net_write_all(fd, guess, sizeof(guess), -1));
    ASSERT_EQ(handshake(&st, err), DSL_EAUTH);
    ASSERT_CONTAINS(err, "the agent did not prove its key");
    dsl_cb_stream_close(&st);
    close(fd);
    dsl_seal_release(&real);
    dsl_cb_listener_free(l);
}

TEST(cb_agent_should_refuse_a_launcher_that_does_not_hold_its_key)
{
    /* someone answers on the launcher's address (or in its place on the path) */
    int lfd = dsl_net_listen("127.0.0.1", 0, 4, NULL);
    ASSERT_OK(lfd);
    char *arg = dsl_xasprintf("127.0.0.1:%d", dsl_net_local_port(lfd));
    unsigned char lpriv[32];
    int kfd;
    pid_t pid = cb_child(arg, lpriv, &kfd, "{\"plan\":\"secret\"}\n");
    int fd = accept(lfd, NULL, NULL);
    ASSERT_OK(fd);
    unsigned char hello[DSL_SEAL_HELLO_LEN], fake[64];
    ASSERT_OK(dsl_net_read_all(fd, hello, sizeof(hello), dsl_now() + 5));
    memset(fake, 0x5a, sizeof(fake));
    ASSERT_OK(dsl_net_write_all(fd, fake, sizeof(fake), -1));
    int stat;
    waitpid(pid, &stat, 0);
    ASSERT(WIFEXITED(stat));
    ASSERT_EQ(WEXITSTATUS(stat), 6); /* the handshake refused it; nothing was sent */
    char c;
    ASSERT_EQ(read(fd, &c, 1), 0);
    close(fd);
    close(kfd);
    close(lfd);
    free(arg);
}

TEST(cb_listener_should_hold_a_hello_that_came_before_its_key_line)
{
    char err[DSL_ERR_LEN], lhex[65];
    unsigned char lpriv[32], akey[32];
    struct dsl_cb_listener *l = keyed_listener(lpriv, lhex);
    int kp[2];
    ASSERT_OK(pipe(kp));
    int fd;
    struct dsl_seal seal;
    ASSERT_OK(dsl_agent_cb_dial(dsl_cb_listener_connect_arg(l), lhex, 0, 5, kp[1], &fd, &seal,
                                err));
    /* the hello is serviced (and parked) before anyone expects its key */
    struct pollfd lp = {.fd = dsl_cb_listener_pollfd(l), .events = POLLIN};
    ASSERT_EQ(poll(&lp, 1, 5000), 1);
    for (int i = 0; i < 5; i++) {
        dsl_cb_listener_service(l);
        ASSERT_EQ(poll(&lp, 1, 20), 0); /* parked: it does not keep the loop awake */
    }
    read_key(kp[0], akey);
    int ready = dsl_cb_listener_expect(l, akey);
    ASSERT_OK(ready);
    struct pollfd rp = {.fd = ready, .events = POLLIN};
    ASSERT_EQ(poll(&rp, 1, 0), 1);
    int sock = dsl_cb_listener_take(l, akey);
    ASSERT_OK(sock);
    close(sock);
    close(fd);
    close(kp[0]);
    close(kp[1]);
    dsl_seal_release(&seal);
    dsl_cb_listener_free(l);
}

TEST(cb_listener_should_make_every_owner_ready_when_their_sockets_arrive_in_one_burst)
{
    enum { N = 4 };
    char err[DSL_ERR_LEN], lhex[65];
    unsigned char lpriv[32], akey[N][32];
    struct dsl_cb_listener *l = keyed_listener(lpriv, lhex);
    int ready[N], fds[N], kp[2];
    struct dsl_seal seal[N];
    ASSERT_OK(pipe(kp));
    /* every agent prints its key line and sends its hello before the listener looks */
    for (int i = 0; i < N; i++) {
        ASSERT_OK(dsl_agent_cb_dial(dsl_cb_listener_connect_arg(l), lhex, i, 5, kp[1],
                                    &fds[i], &seal[i], err));
    }
    read_keys(kp[0], N, akey);
    for (int i = 0; i < N; i++) {
        ready[i] = dsl_cb_listener_expect(l, akey[i]);
        ASSERT_OK(ready[i]);
        struct pollfd rp = {.fd = ready[i], .events = POLLIN};
        ASSERT_EQ(poll(&rp, 1, 0), 0); /* not ready before service() */
    }
    /* one service(), as by the first owner woken, sets every socket aside, and each
       owner is then ready on its own ready fd */
    struct pollfd lp = {.fd = dsl_cb_listener_pollfd(l), .events = POLLIN};
    ASSERT_EQ(poll(&lp, 1, -1), 1);
    dsl_cb_listener_service(l);
    struct pollfd rp[N];
    for (int i = 0; i < N; i++)
        rp[i] = (struct pollfd){.fd = ready[i], .events = POLLIN};
    ASSERT_EQ(poll(rp, N, 0), N);
    ASSERT_EQ(poll(&lp, 1, 0), 0); /* the listener itself has nothing left to wake anyone */
    for (int i = N - 1; i >= 0; i--) {
        int fd = dsl_cb_listener_take(l, akey[i]);
        ASSERT(fd >= 0);
        unsigned char hello[DSL_SEAL_HELLO_LEN], pub[32];
        ASSERT_OK(dsl_net_set_nonblock(fd, 0));
        ASSERT_OK(dsl_net_read_all(fd, hello, sizeof(hello), dsl_now() + 5));
        ASSERT_EQ(dsl_seal_hello_key(hello, sizeof(hello), pub), 1);
        ASSERT(!memcmp(pub, akey[i], 32)); /* each owner got its own agent */
        close(fd);
        close(fds[i]);
        dsl_seal_release(&seal[i]);
    }
    close(kp[0]);
    close(kp[1]);
    dsl_cb_listener_free(l);
}

TEST(cb_connect_back_should_name_every_address_that_failed)
{
    int a = dsl_net_listen("127.0.0.1", 0, 1, NULL), b = dsl_net_listen("127.0.0.1", 0, 1, NULL);
    char *list = dsl_xasprintf("127.0.0.1:%d,127.0.0.1:%d", dsl_net_local_port(a),
                               dsl_net_local_port(b));
    close(a);
    close(b);
    unsigned char lpriv[32];
    char lhex[65];
    launcher_key(lpriv, lhex);
    int fd, null = open("/dev/null", O_WRONLY);
    struct dsl_seal seal;
    char err[DSL_ERR_LEN] = "";
    ASSERT_EQ(dsl_agent_cb_dial(list, lhex, 0, 5, null, &fd, &seal, err), DSL_ECONNECT);
    dsl_seal_release(&seal);
    ASSERT_EQ(fd, -1);
    ASSERT_CONTAINS(err, "no address answered");
    ASSERT_CONTAINS(err, "Connection refused; 127.0.0.1:");
    /* a name that does not resolve is named as such, not as a local address problem
     * ("Cannot assign requested address"); a space and '!' fail in the resolver itself,
     * without a query leaving the machine */
    ASSERT_EQ(dsl_agent_cb_dial("bad host!:1", lhex, 0, 1, null, &fd, &seal, err), DSL_ECONNECT);
    dsl_seal_release(&seal);
    ASSERT_CONTAINS(err, "bad host!:1: cannot resolve 'bad host!': ");
    ASSERT(!strstr(err, "assign"));
    ASSERT_EQ(dsl_agent_cb_dial("nocolon", lhex, 0, 1, null, &fd, &seal, err), DSL_EUSAGE);
    dsl_seal_release(&seal);
    ASSERT_CONTAINS(err, "bad --connect address 'nocolon'");
    ASSERT_EQ(dsl_agent_cb_dial(list, "0123", 0, 1, null, &fd, &seal, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "bad --launcher-key");
    close(null);
    free(list);
}

TEST(cb_key_lines_should_be_taken_out_of_the_output_and_the_first_wins)
{
    int p[2];
    ASSERT_OK(pipe(p));
    unsigned char k1[32], k2[32], priv[32];
    char h1[65], h2[65], err[DSL_ERR_LEN];
    ASSERT_OK(dsl_seal_keypair(priv, k1, err));
    ASSERT_OK(dsl_seal_keypair(priv, k2, err));
    dsl_seal_key_hex(k1, h1);
    dsl_seal_key_hex(k2, h2);
    char *text = dsl_xasprintf("node1: warning: something\nnode1: DSLCB2-KEY 1 %s\n"
                               "DSLCB2-KEY 1 %s\nDSLCB2-KEY 7 %s\nDSLCB2-KEY 0 nothex\ntail",
                               h1, h2, h2);
    ASSERT_EQ(write(p[1], text, strlen(text)), (ssize_t)strlen(text));
    close(p[1]);
    struct dsl_cb_keys k;
    struct dsl_dynbuf out;
    dsl_cb_keys_init(&k, 2);
    dsl_dynbuf_init(&out, 1 << 16);
    int fd = p[0];
    dsl_net_set_nonblock(fd, 1);
    while (fd >= 0)
        dsl_cb_drain_tail(&fd, &out, 4096, &k);
    ASSERT(!k.have[0]);
    ASSERT(k.have[1]);
    ASSERT(!memcmp(k.key[1], k1, 32));
    ASSERT_STR_EQ(dsl_dynbuf_str(&out), "node1: warning: something\nDSLCB2-KEY 0 nothex\ntail");
    dsl_dynbuf_release(&out);
    dsl_cb_keys_release(&k);
    free(text);
}

/*
 * Two pdsh connections share the listener. A stand-in for pdsh runs the remote command
 * locally; the stand-in agent is this binary (--fake-agent). Host b's agent connects
 * first; a's agent waits until b's hello is sent, so when a's progress() services the
 * listener it sees (and parks) b's socket too. b must be woken by its own key line and
 * find its socket rather than wait out --connect-timeout.
 */
static const char fake_pdsh[] = "#!/bin/sh\nshift 5\nexec /bin/sh -c \"$1\"\n";
static char self[4096];

static int fake_agent(int argc, char **argv)
{
    const char *mode = argv[2], *dir = argv[3], *c = NULL, *key = NULL;
    for (int i = 4; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--connect"))
            c = argv[i + 1];
        if (!strcmp(argv[i], "--launcher-key"))
            key = argv[i + 1];
    }
    char *sent = dsl_xasprintf("%s/sent", dir);
    if (!strcmp(mode, "wait"))
        while (access(sent, F_OK) != 0)
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    int fd;
    char err[DSL_ERR_LEN];
    struct dsl_seal seal;
    if (!c || !key || dsl_agent_cb_dial(c, key, 0, 10, 1, &fd, &seal, err) < 0)
        return 3;
    if (!strcmp(mode, "go"))
        close(open(sent, O_WRONLY | O_CREAT, 0600));
    if (dsl_agent_cb_handshake(fd, &seal, dsl_now() + 30, err) < 0)
        return 4;
    char buf[4096];
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    dsl_seal_release(&seal);
    free(sent);
    return 0;
}

static void write_script(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    ASSERT(fputs(text, f) >= 0);
    ASSERT_OK(fclose(f));
    ASSERT_OK(chmod(path, 0755));
}

/* Drive c until it is OPEN; the first poll must be ready without waiting. */
static void drive_open(struct dsl_conn *c, int first_wait_ms)
{
    double deadline = dsl_now() + 20;
    int first = 1;
    while (c->state == DSL_CONN_CONNECTING && dsl_now() < deadline) {
        short ev;
        struct pollfd pf = {.fd = c->ops->pollfd(c, &ev), .events = POLLIN};
        int r = poll(&pf, 1, first ? first_wait_ms : 1000);
        if (first)
            ASSERT_EQ(r, 1);
        first = 0;
        if (c->ops->progress(c) < 0)
            DSL_FAIL_("progress of '%s' failed: %s", c->host, c->err);
    }
    ASSERT_EQ(c->state, DSL_CONN_OPEN);
}

TEST(pdsh_should_wake_a_connection_whose_socket_another_connection_saw)
{
    char dir[] = "/tmp/dsl-cbwake-XXXXXX";
    ASSERT(mkdtemp(dir) != NULL);
    char *pdsh = dsl_xasprintf("%s/pdsh", dir);
    write_script(pdsh, fake_pdsh);
    ASSERT_OK(setenv("DSLAUNCH_PDSH", pdsh, 1));
    struct dsl_transport_opts o;
    memset(&o, 0, sizeof(o));
    o.connect_timeout = 60;
    o.connect_back_addr = "127.0.0.1";
    struct dsl_conn a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    a.ops = b.ops = &dsl_transport_pdsh;
    a.host = dsl_xstrdup("a");
    b.host = dsl_xstrdup("b");
    char *argv_a[] = {self, (char *)"--fake-agent", (char *)"wait", dir, NULL};
    char *argv_b[] = {self, (char *)"--fake-agent", (char *)"go", dir, NULL};
    ASSERT_OK(a.ops->open(&a, &o, argv_a));
    ASSERT_OK(b.ops->open(&b, &o, argv_b));
    /* only a is driven until it is OPEN: its servicing also sees b's hello */
    drive_open(&a, -1);
    ASSERT_EQ(b.state, DSL_CONN_CONNECTING);
    /* b's key line and socket arrived long ago: b's pollfd is readable now */
    drive_open(&b, 0);
    a.ops->close(&a);
    b.ops->close(&b);
    free(a.host);
    free(b.host);
    char *sent = dsl_xasprintf("%s/sent", dir);
    unlink(sent);
    unlink(pdsh);
    rmdir(dir);
    free(sent);
    free(pdsh);
    unsetenv("DSLAUNCH_PDSH");
}

#ifdef DSL_HAVE_SSH
/* Drive one ssh connection until it is OPEN or FAILED, or deadline passes. */
static void drive(struct dsl_conn *c, double deadline)
{
    while (c->state != DSL_CONN_OPEN && c->state != DSL_CONN_FAILED && dsl_now() < deadline) {
        short ev = 0;
        int fd = c->ops->pollfd(c, &ev);
        struct pollfd p = {.fd = fd, .events = ev};
        poll(&p, fd >= 0 ? 1 : 0, 50);
        c->ops->progress(c);
    }
}

static void ssh_try(const char *host, int port, double timeout, struct dsl_conn *c)
{
    struct dsl_transport_opts o = {
        .ssh_config = "/dev/null",
        .ssh_port = port,
        .known_hosts = "/dev/null",
        .connect_timeout = timeout,
        .keepalive = 15,
    };
    char *argv[] = {(char *)"/bin/true", NULL};
    memset(c, 0, sizeof(*c));
    c->ops = &dsl_transport_ssh;
    c->host = dsl_xstrdup(host);
    c->ops->open(c, &o, argv);
    drive(c, dsl_now() + timeout + 10);
}

TEST(ssh_to_a_closed_port_should_fail_with_econnect)
{
    /* a port that was just free: bind, read it, close */
    int lfd = dsl_net_listen("127.0.0.1", 0, 1, NULL);
    ASSERT_OK(lfd);
    int port = dsl_net_local_port(lfd);
    close(lfd);
    struct dsl_conn c;
    ssh_try("127.0.0.1", port, 5, &c);
    ASSERT_EQ(c.state, DSL_CONN_FAILED);
    ASSERT_EQ(c.err_code, DSL_ECONNECT);
    ASSERT_CONTAINS(c.err, "cannot connect to");
    c.ops->close(&c);
    free(c.host);
}

TEST(ssh_to_a_silent_server_should_time_out_with_etimedout)
{
    /* a listener that never accepts: TCP completes, no SSH banner ever comes */
    int lfd = dsl_net_listen("127.0.0.1", 0, 4, NULL);
    ASSERT_OK(lfd);
    struct dsl_conn c;
    ssh_try("127.0.0.1", dsl_net_local_port(lfd), 0.5, &c);
    ASSERT_EQ(c.state, DSL_CONN_FAILED);
    ASSERT_EQ(c.err_code, DSL_ETIMEDOUT);
    ASSERT_CONTAINS(c.err, "timed out");
    c.ops->close(&c);
    free(c.host);
    close(lfd);
}
#endif

int main(int argc, char **argv)
{
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    ASSERT(n > 0);
    self[n] = '\0';
    if (argc > 3 && !strcmp(argv[1], "--fake-agent"))
        return fake_agent(argc, argv);
    return RUN_TESTS(argc, argv);
}
