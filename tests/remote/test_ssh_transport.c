/*
 * The ssh transport against the namespace cluster (tests/e2e/cluster/cluster.sh): every
 * node at once from one poll loop, bytes round-tripping through `exec '/bin/cat'`, the
 * fixed command line surviving a real remote shell, and each failure the launcher must
 * report per host: unknown host key, changed host key, wrong identity, sshd stopped,
 * and a remote program that cannot start.
 *
 * Needs DSL_CLUSTER_DIR (a cluster that is up) and DSL_CLUSTER_SH (the script, to stop
 * and start one sshd); tests/e2e/cluster/with_cluster.sh provides both.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster_conn.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "sh_output.h"
#include "test.h"
#include "dslaunch/common/banned.h"

static void base_opts(struct dsl_transport_opts *o, const char *ssh_config)
{
    memset(o, 0, sizeof(*o));
    o->ssh_config = ssh_config;
    o->connect_timeout = 20;
    o->keepalive = 15;
}

/* Open one connection and return its final state (OPEN or FAILED). */
static void open_one(struct dsl_conn *c, const char *host, const struct dsl_transport_opts *o,
                     char *const *argv)
{
    conn_open(c, &dsl_transport_ssh, host, o, argv);
    conns_drive(c, 1);
}

/* o's connection to host, running /bin/true there, fails with code; c holds it for the
 * caller's checks of c->err and conn_free(). */
static void open_fails(struct dsl_conn *c, const char *host, const struct dsl_transport_opts *o,
                       int code)
{
    char *argv[] = {(char *)"/bin/true", NULL};
    open_one(c, host, o, argv);
    ASSERT_EQ(c->state, DSL_CONN_FAILED);
    ASSERT_EQ(c->err_code, code);
}

/* o's connection to host, running /bin/true there, opens. */
static void opens(const char *host, const struct dsl_transport_opts *o)
{
    char *argv[] = {(char *)"/bin/true", NULL};
    struct dsl_conn c;
    open_one(&c, host, o, argv);
    if (c.state != DSL_CONN_OPEN)
        DSL_FAIL_("%s", c.err);
    conn_free(&c);
}

/* Read everything until EOF (bounded by a deadline); returns a malloc'd buffer. */
static char *read_to_eof(struct dsl_conn *c, size_t *len)
{
    size_t alloc = 1 << 16, n = 0;
    char *buf = dsl_xmalloc(alloc);
    double deadline = dsl_now() + 30;
    for (;;) {
        ASSERT(dsl_now() < deadline);
        if (n == alloc)
            buf = dsl_xrealloc(buf, alloc *= 2);
        ssize_t r = c->ops->read(c, buf + n, alloc - n);
        if (r > 0) {
            n += (size_t)r;
            continue;
        }
        if (r == 0)
            break;
        ASSERT_EQ(r, -EAGAIN);
        short ev;
        struct pollfd p = {.fd = c->ops->pollfd(c, &ev)};
        p.events = ev;
        poll(&p, 1, 50);
    }
    *len = n;
    return buf;
}

TEST(ssh_should_round_trip_bytes_through_cat_on_every_node_at_once)
{
    char *cfg = cluster_path("ssh_config");
    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    char *argv[] = {(char *)"/bin/cat", NULL};
    struct dsl_conn *c = dsl_xcalloc((size_t)cluster_nodes, sizeof(*c));
    for (int i = 0; i < cluster_nodes; i++) {
        char host[32];
        snprintf(host, sizeof(host), "node%d", i + 1);
        conn_open(&c[i], &dsl_transport_ssh, host, &o, argv);
    }
    conns_drive(c, cluster_nodes);
    for (int i = 0; i < cluster_nodes; i++) {
        if (c[i].state != DSL_CONN_OPEN)
            DSL_FAIL_("%s: %s", c[i].host, c[i].err);
        ASSERT(c[i].t_open >= c[i].t_start);
    }
    conns_round_trip(c, cluster_nodes, 300000, 20000); /* several channel windows */
    for (int i = 0; i < cluster_nodes; i++)
        conn_free(&c[i]);
    free(c);
    free(cfg);
}

TEST(ssh_fixed_command_should_survive_the_remote_shell_byte_for_byte)
{
    static const char *const args[] = {
        "I am 6' tall", "$(touch /tmp/dsl-pwned-remote)", "", "a\nb", "`id` ; ls", "$HOME",
    };
    enum { N = sizeof(args) / sizeof(args[0]) };
    char *argv[N + 3];
    argv[0] = (char *)"/usr/bin/printf";
    argv[1] = (char *)"%s\\0";
    for (int i = 0; i < N; i++)
        argv[i + 2] = (char *)args[i];
    argv[N + 2] = NULL;
    char *cfg = cluster_path("ssh_config");
    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    unlink("/tmp/dsl-pwned-remote");
    struct dsl_conn c;
    open_one(&c, "node1", &o, argv);
    if (c.state != DSL_CONN_OPEN)
        DSL_FAIL_("%s", c.err);
    size_t len;
    char *out = read_to_eof(&c, &len);
    assert_nul_words(out, len, args, N);
    ASSERT(access("/tmp/dsl-pwned-remote", F_OK) < 0);
    free(out);
    conn_free(&c);
    free(cfg);
}

TEST(ssh_should_report_a_missing_remote_program_with_its_stderr)
{
    char *cfg = cluster_path("ssh_config");
    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    char *argv[] = {(char *)"/nonexistent/dslaunch", (char *)"--agent", NULL};
    struct dsl_conn c;
    open_one(&c, "node2", &o, argv);
    ASSERT_EQ(c.state, DSL_CONN_OPEN); /* the channel opens; the exec fails there */
    size_t len;
    char *out = read_to_eof(&c, &len);
    ASSERT_EQ(len, 0);
    ASSERT_CONTAINS(c.err, "dslaunch is not at '/nonexistent/dslaunch' on 'node2'");
    ASSERT_CONTAINS(c.err, "No such file or directory");
    ASSERT_CONTAINS(c.err, "or give --remote-dslaunch PATH");
    ASSERT_EQ(c.err_code, -ENOENT);
    free(out);
    conn_free(&c);
    free(cfg);
}

TEST(ssh_should_refuse_an_unknown_host_key_and_say_how_to_accept_it)
{
    char *cfg = cluster_path("ssh_config");
    char kh[] = "/tmp/dsl-kh-XXXXXX";
    int fd = mkstemp(kh);
    ASSERT_OK(fd);
    close(fd);
    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    o.known_hosts = kh;
    struct dsl_conn c;
    open_fails(&c, "node1", &o, DSL_EAUTH);
    ASSERT_CONTAINS(c.err, "host key for 'node1' is not known");
    ASSERT_CONTAINS(c.err, "--ssh-accept-new");
    ASSERT_CONTAINS(c.err, "ssh node1");
    ASSERT_CONTAINS(c.err, "SHA256:");
    conn_free(&c);

    /* trust on first use records the key; the next connection needs no flag */
    o.accept_new = 1;
    opens("node1", &o);
    o.accept_new = 0;
    opens("node1", &o);
    unlink(kh);
    free(cfg);
}

TEST(ssh_accept_new_should_create_a_missing_known_hosts_file)
{
    char *cfg = cluster_path("ssh_config");
    char dir[] = "/tmp/dsl-khdir-XXXXXX";
    ASSERT(mkdtemp(dir));
    char *kh = dsl_xasprintf("%s/sub/known_hosts", dir);
    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    o.known_hosts = kh;
    o.accept_new = 1;
    opens("node3", &o);
    ASSERT(access(kh, R_OK) == 0);
    char *sub = dsl_xasprintf("%s/sub", dir);
    unlink(kh);
    rmdir(sub);
    rmdir(dir);
    free(sub);
    free(kh);
    free(cfg);
}

TEST(ssh_port_option_should_override_the_config_port)
{
    char *cfg = cluster_path("ssh_config");
    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    o.ssh_port = 2; /* nothing listens there: refused proves the override was used */
    struct dsl_conn c;
    open_fails(&c, "node1", &o, DSL_ECONNECT);
    ASSERT_CONTAINS(c.err, ":2)");
    conn_free(&c);
    free(cfg);
}

TEST(ssh_should_refuse_a_changed_host_key_even_with_accept_new)
{
    /* known_hosts that gives node1's address node2's key */
    char *cfg = cluster_path("ssh_config"), *k2 = cluster_path("node2/ssh_host_ed25519_key.pub");
    char *envf = cluster_path("cluster.env");
    FILE *f = fopen(envf, "r");
    ASSERT(f);
    char line[256], addr[256] = "", port[256] = "22";
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strncmp(line, "ADDR_1=", 7))
            snprintf(addr, sizeof(addr), "%s", line + 7);
        if (!strncmp(line, "PORT_1=", 7))
            snprintf(port, sizeof(port), "%s", line + 7);
    }
    fclose(f);
    f = fopen(k2, "r");
    ASSERT(f);
    char key[512];
    ASSERT(fgets(key, sizeof(key), f));
    fclose(f);
    char kh[] = "/tmp/dsl-kh-XXXXXX";
    int fd = mkstemp(kh);
    ASSERT_OK(fd);
    f = fdopen(fd, "w");
    if (!strcmp(port, "22"))
        fprintf(f, "%s %s", addr, key);
    else
        fprintf(f, "[%s]:%s %s", addr, port, key);
    fclose(f);

    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    o.known_hosts = kh;
    for (int accept = 0; accept <= 1; accept++) {
        o.accept_new = accept;
        struct dsl_conn c;
        open_fails(&c, "node1", &o, DSL_EAUTH);
        ASSERT_CONTAINS(c.err, "host key for 'node1' has CHANGED");
        conn_free(&c);
    }
    unlink(kh);
    free(envf);
    free(k2);
    free(cfg);
}

TEST(ssh_with_a_wrong_identity_should_fail_with_eauth)
{
    char *cfg = cluster_path("ssh_config"), *wrong = cluster_path("wrong_ed25519");
    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    o.ssh_identity = wrong;
    struct dsl_conn c;
    open_fails(&c, "node2", &o, DSL_EAUTH);
    ASSERT_CONTAINS(c.err, "permission denied");
    ASSERT_CONTAINS(c.err, "wrong_ed25519");
    conn_free(&c);

    /* and the right one, given explicitly, works */
    char *right = cluster_path("id_ed25519");
    o.ssh_identity = right;
    opens("node2", &o);
    free(right);
    free(wrong);
    free(cfg);
}

static void cluster_sh(const char *verb, const char *node)
{
    const char *sh = getenv("DSL_CLUSTER_SH");
    ASSERT(sh);
    char *cmd = dsl_xasprintf("'%s' %s '%s' %s", sh, verb, cluster_dir, node);
    ASSERT_EQ(system(cmd), 0);
    free(cmd);
}

TEST(ssh_to_a_node_whose_sshd_is_stopped_should_fail_with_econnect)
{
    char *cfg = cluster_path("ssh_config");
    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    char *argv[] = {(char *)"/bin/true", NULL};
    cluster_sh("sshd-stop", "node2");
    struct dsl_conn c;
    open_one(&c, "node2", &o, argv);
    cluster_sh("sshd-start", "node2");
    ASSERT_EQ(c.state, DSL_CONN_FAILED);
    ASSERT_EQ(c.err_code, DSL_ECONNECT);
    ASSERT_CONTAINS(c.err, "cannot connect to root@node2 (");
    conn_free(&c);
    free(cfg);
}

TEST(ssh_should_notice_a_node_whose_network_went_down_within_the_keepalive_bound)
{
    /* needs a private network to cut: namespace mode only */
    char *envf = cluster_path("cluster.env");
    FILE *f = fopen(envf, "r");
    ASSERT(f);
    char line[256], ifname[64] = "";
    int netns = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strcmp(line, "MODE=netns"))
            netns = 1;
        if (!strncmp(line, "IFNAME_3=", 9))
            snprintf(ifname, sizeof(ifname), "%.60s", line + 9);
    }
    fclose(f);
    free(envf);
    if (!netns) {
        fprintf(stderr, "# loopback cluster: no private link to cut, not checked\n");
        return;
    }
    char *cfg = cluster_path("ssh_config");
    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    o.keepalive = 3;
    char *argv[] = {(char *)"/bin/cat", NULL};
    struct dsl_conn c;
    open_one(&c, "node3", &o, argv);
    if (c.state != DSL_CONN_OPEN)
        DSL_FAIL_("%s", c.err);
    const char *sh = getenv("DSL_CLUSTER_SH");
    ASSERT(sh);
    char *down = dsl_xasprintf("'%s' exec '%s' node3 ip link set '%s' down", sh, cluster_dir,
                               ifname);
    char *up = dsl_xasprintf("'%s' exec '%s' node3 ip link set '%s' up", sh, cluster_dir,
                             ifname);
    ASSERT_EQ(system(down), 0);
    /* nothing is sent: only keepalive probes can find out; bounded so a hang fails */
    double t0 = dsl_now(), deadline = t0 + 60;
    ssize_t r = -EAGAIN;
    char buf[256];
    while (r == -EAGAIN && dsl_now() < deadline) {
        short ev;
        struct pollfd p = {.fd = c.ops->pollfd(&c, &ev)};
        p.events = ev;
        poll(&p, 1, 200);
        r = c.ops->read(&c, buf, sizeof(buf));
    }
    double took = dsl_now() - t0;
    ASSERT_EQ(system(up), 0);
    if (r >= 0 && r != 0)
        DSL_FAIL_("read %zd bytes from a dead node", r);
    ASSERT(r < 0 && r != -EAGAIN);
    ASSERT_EQ(c.err_code, DSL_ECONNECT);
    ASSERT_CONTAINS(c.err, "connection to 'node3' lost");
    fprintf(stderr, "# noticed after %.1f s (keepalive 3 s): %s\n", took, c.err);
    conn_free(&c);
    free(up);
    free(down);
    free(cfg);
}

int main(int argc, char **argv)
{
    int r = cluster_init(2);
    if (r)
        return r;
    return RUN_TESTS(argc, argv);
}
