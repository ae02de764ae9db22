/*
 * Unit tests for the multi-node pieces that need no cluster: the shell quoting of the
 * one remote command line (checked against a real /bin/sh), the network facts, and the
 * ssh transport's failure paths against loopback listeners (refused, silent server).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dslaunch/remote/connectback.h"
#include "dslaunch/common/net.h"
#include "dslaunch/remote/netinfo.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
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

/* Run cmd through /bin/sh -c and capture stdout. */
static char *sh_output(const char *cmd, size_t *len)
{
    int p[2];
    ASSERT_OK(pipe(p));
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    size_t alloc = 4096, n = 0;
    char *buf = dsl_xmalloc(alloc);
    for (;;) {
        if (n == alloc)
            buf = dsl_xrealloc(buf, alloc *= 2);
        ssize_t r = read(p[0], buf + n, alloc - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    *len = n;
    return buf;
}

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
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        ASSERT(off < len);
        ASSERT_STR_EQ(out + off, nasty[i]);
        off += strlen(nasty[i]) + 1;
    }
    ASSERT_EQ(off, len);
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

TEST(cb_tokens_should_be_32_hex_characters_and_differ)
{
    char a[DSL_CB_TOKEN_LEN + 1], b[DSL_CB_TOKEN_LEN + 1];
    ASSERT_OK(dsl_cb_token_new(a));
    ASSERT_OK(dsl_cb_token_new(b));
    ASSERT_EQ(strlen(a), DSL_CB_TOKEN_LEN);
    ASSERT_EQ(strspn(a, "0123456789abcdef"), DSL_CB_TOKEN_LEN);
    ASSERT(strcmp(a, b) != 0);
}

/* Child: connect back with token through hostports, send msg right after, exit. */
static pid_t cb_child(const char *hostports, const char *token, const char *msg)
{
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid)
        return pid;
    int fd;
    char err[DSL_ERR_LEN];
    if (dsl_agent_connect_back_timeout(hostports, token, 5, &fd, err) < 0)
        _exit(3);
    signal(SIGPIPE, SIG_IGN);
    if (dsl_net_write_all(fd, msg, strlen(msg), -1) < 0)
        _exit(0); /* already closed by the launcher (the parent checks what arrived) */
    char c;
    ssize_t r = read(fd, &c, 1); /* wait until the launcher closes */
    _exit(r <= 0 ? 0 : 5); /* EOF or reset: the launcher closed it */
}

/* Service the listener until token arrives or timeout; returns fd or -EAGAIN. */
static int cb_wait(struct dsl_cb_listener *l, const char *token, double secs)
{
    double deadline = dsl_now() + secs;
    int fd = -EAGAIN;
    while (fd == -EAGAIN && dsl_now() < deadline) {
        struct pollfd p = {.fd = dsl_cb_listener_pollfd(l), .events = POLLIN};
        poll(&p, 1, 50);
        dsl_cb_listener_service(l);
        fd = dsl_cb_listener_take(l, token);
    }
    return fd;
}

TEST(cb_listener_should_hand_over_the_socket_with_the_bytes_after_the_token)
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
    char tok[DSL_CB_TOKEN_LEN + 1];
    ASSERT_OK(dsl_cb_token_new(tok));
    dsl_cb_listener_expect(l, tok);
    pid_t pid = cb_child(list, tok, "{\"t\":\"hello\"}\n");
    int fd = cb_wait(l, tok, 10);
    ASSERT_OK(fd);
    ASSERT_OK(dsl_net_set_nonblock(fd, 0));
    char buf[32] = "";
    ASSERT_OK(dsl_net_read_all(fd, buf, 14, dsl_now() + 5));
    ASSERT_STR_EQ(buf, "{\"t\":\"hello\"}\n");
    close(fd);
    int st;
    waitpid(pid, &st, 0);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* a token is good once */
    ASSERT_EQ(dsl_cb_listener_take(l, tok), -EAGAIN);
    free(list);
    dsl_cb_listener_free(l);
}

TEST(cb_listener_should_close_a_connection_with_a_wrong_token)
{
    struct dsl_cb_listener *l;
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_cb_listener_open(&l, "127.0.0.1", err));
    char tok[DSL_CB_TOKEN_LEN + 1], bad[DSL_CB_TOKEN_LEN + 1];
    ASSERT_OK(dsl_cb_token_new(tok));
    ASSERT_OK(dsl_cb_token_new(bad));
    dsl_cb_listener_expect(l, tok);
    pid_t pid = cb_child(dsl_cb_listener_connect_arg(l), bad, "x");
    int st = 0;
    /* the child exits 0 only once its socket was closed by the listener */
    double deadline = dsl_now() + 10;
    pid_t w = 0;
    while (w == 0 && dsl_now() < deadline) {
        ASSERT_EQ(cb_wait(l, tok, 0.1), -EAGAIN);
        w = waitpid(pid, &st, WNOHANG);
    }
    ASSERT_EQ(w, pid);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    dsl_cb_listener_free(l);
}

TEST(cb_listener_should_make_every_owner_ready_when_their_sockets_arrive_in_one_burst)
{
    enum { N = 4 };
    struct dsl_cb_listener *l;
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_cb_listener_open(&l, "127.0.0.1", err));
    char tok[N][DSL_CB_TOKEN_LEN + 1];
    int ready[N], fds[N];
    for (int i = 0; i < N; i++) {
        ASSERT_OK(dsl_cb_token_new(tok[i]));
        ready[i] = dsl_cb_listener_expect(l, tok[i]);
        ASSERT_OK(ready[i]);
    }
    /* every agent connects and sends its token line before the listener looks */
    for (int i = 0; i < N; i++)
        ASSERT_OK(dsl_agent_connect_back_timeout(dsl_cb_listener_connect_arg(l), tok[i], 5,
                                                 &fds[i], err));
    struct pollfd lp = {.fd = dsl_cb_listener_pollfd(l), .events = POLLIN};
    for (int i = 0; i < N; i++) {
        struct pollfd rp = {.fd = ready[i], .events = POLLIN};
        ASSERT_EQ(poll(&rp, 1, 0), 0); /* not ready before service() */
    }
    /* the connections are queued and their lines in the sockets (connect-back returns
       after sending it): one service(), as by the first owner woken, sets every socket
       aside, and each owner is then ready on its own ready fd */
    ASSERT_EQ(poll(&lp, 1, -1), 1);
    dsl_cb_listener_service(l);
    struct pollfd rp[N];
    for (int i = 0; i < N; i++)
        rp[i] = (struct pollfd){.fd = ready[i], .events = POLLIN};
    ASSERT_EQ(poll(rp, N, 0), N);
    ASSERT_EQ(poll(&lp, 1, 0), 0); /* the listener itself has nothing left to wake anyone */
    for (int i = N - 1; i >= 0; i--) {
        int fd = dsl_cb_listener_take(l, tok[i]);
        ASSERT(fd >= 0);
        ASSERT_OK(dsl_net_write_all(fds[i], "x", 1, -1));
        ASSERT_OK(dsl_net_set_nonblock(fd, 0));
        char c = 0;
        ASSERT_OK(dsl_net_read_all(fd, &c, 1, dsl_now() + 5));
        ASSERT_EQ(c, 'x');
        close(fd);
        close(fds[i]);
    }
    dsl_cb_listener_free(l);
}

TEST(cb_connect_back_should_name_every_address_that_failed)
{
    int a = dsl_net_listen("127.0.0.1", 0, 1, NULL), b = dsl_net_listen("127.0.0.1", 0, 1, NULL);
    char *list = dsl_xasprintf("127.0.0.1:%d,127.0.0.1:%d", dsl_net_local_port(a),
                               dsl_net_local_port(b));
    close(a);
    close(b);
    int fd;
    char err[DSL_ERR_LEN] = "";
    ASSERT_EQ(dsl_agent_connect_back_timeout(list, "t", 5, &fd, err), DSL_ECONNECT);
    ASSERT_EQ(fd, -1);
    ASSERT_CONTAINS(err, "cannot connect back to the launcher");
    ASSERT_CONTAINS(err, "Connection refused; 127.0.0.1:");
    ASSERT_EQ(dsl_agent_connect_back_timeout("nocolon", "t", 1, &fd, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "bad --connect address 'nocolon'");
    free(list);
}

/*
 * Two pdsh connections share the listener. A stand-in for pdsh runs the remote command
 * locally; the stand-in agent is a bash script that presents its token over
 * /dev/tcp. Host b's agent connects first; a's agent waits until b's token line is
 * sent, so when a's progress() services the listener it takes b's socket too. b must be
 * woken by that (its pollfd readable) rather than wait out --connect-timeout.
 */
static const char fake_pdsh[] = "#!/bin/sh\nshift 5\nexec /bin/sh -c \"$1\"\n";
static const char fake_agent[] =
    "#!/bin/bash\n"
    "mode=$1 dir=$2; shift 2\n"
    "while [ $# -gt 1 ]; do case $1 in --connect) c=$2;; --token) t=$2;; esac; shift; done\n"
    "if [ \"$mode\" = wait ]; then while [ ! -e \"$dir/sent\" ]; do sleep 0.01; done; fi\n"
    "hp=${c%%,*}\n"
    "exec 3<>\"/dev/tcp/${hp%:*}/${hp##*:}\" || exit 3\n"
    "printf 'DSLCB1 %s\\n' \"$t\" >&3\n"
    "if [ \"$mode\" = go ]; then : >\"$dir/sent\"; fi\n"
    "exec cat <&3 >/dev/null\n";

static void write_script(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    ASSERT(fputs(text, f) >= 0);
    ASSERT_OK(fclose(f));
    ASSERT_OK(chmod(path, 0755));
}

TEST(pdsh_should_wake_a_connection_whose_socket_another_connection_took)
{
    char dir[] = "/tmp/dsl-cbwake-XXXXXX";
    ASSERT(mkdtemp(dir) != NULL);
    char *pdsh = dsl_xasprintf("%s/pdsh", dir), *agent = dsl_xasprintf("%s/agent", dir);
    write_script(pdsh, fake_pdsh);
    write_script(agent, fake_agent);
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
    char *argv_a[] = {agent, (char *)"wait", dir, NULL};
    char *argv_b[] = {agent, (char *)"go", dir, NULL};
    ASSERT_OK(a.ops->open(&a, &o, argv_a));
    ASSERT_OK(b.ops->open(&b, &o, argv_b));
    /* only a is driven until it is OPEN: its servicing also reads b's token line */
    while (a.state == DSL_CONN_CONNECTING) {
        short ev;
        struct pollfd pf = {.fd = a.ops->pollfd(&a, &ev), .events = POLLIN};
        ASSERT(poll(&pf, 1, -1) == 1);
        ASSERT(a.ops->progress(&a) >= 0);
    }
    ASSERT_EQ(a.state, DSL_CONN_OPEN);
    ASSERT_EQ(b.state, DSL_CONN_CONNECTING);
    /* b's socket arrived before a's, so b's pollfd must be readable now, and progress()
       must open it */
    short ev;
    struct pollfd pf = {.fd = b.ops->pollfd(&b, &ev), .events = POLLIN};
    ASSERT_EQ(poll(&pf, 1, 0), 1);
    ASSERT(b.ops->progress(&b) >= 0);
    ASSERT_EQ(b.state, DSL_CONN_OPEN);
    a.ops->close(&a);
    b.ops->close(&b);
    free(a.host);
    free(b.host);
    char *sent = dsl_xasprintf("%s/sent", dir);
    unlink(sent);
    unlink(pdsh);
    unlink(agent);
    rmdir(dir);
    free(sent);
    free(pdsh);
    free(agent);
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
    return RUN_TESTS(argc, argv);
}
