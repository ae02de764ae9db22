/*
 * The pdsh transport against the namespace cluster: pdsh -R ssh starts this very
 * binary on every node as the "agent" (`--agent --connect A:P --launcher-key L`, it
 * shares the file system), which connects back and echoes what it is sent like cat, so
 * the test checks the whole path: pdsh, ssh, the remote shell and its quoting, the key
 * line through pdsh's output, connect-back and the sealed channel's handshake, bytes
 * both ways, EOF. Then each per-host failure and its error class.
 *
 * Needs DSL_CLUSTER_DIR and DSL_CLUSTER_SH (tests/e2e/cluster/with_cluster.sh).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster_conn.h"
#include "dslaunch/remote/connectback.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "test.h"
#include "dslaunch/common/banned.h"

static char self[PATH_MAX];

/* The helper "agent": connect back, then echo everything until EOF (sealed). */
static int helper_agent(int argc, char **argv)
{
    const char *connect = NULL, *key = NULL;
    long index = 0;
    for (int i = 2; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--connect"))
            connect = argv[i + 1];
        if (!strcmp(argv[i], "--launcher-key"))
            key = argv[i + 1];
        if (!strcmp(argv[i], "--connect-index"))
            index = strtol(argv[i + 1], NULL, 10);
    }
    if (!connect || !key) {
        fprintf(stderr, "helper: missing --connect or --launcher-key\n");
        return 2;
    }
    int fd;
    char err[DSL_ERR_LEN];
    struct dsl_seal seal;
    if (dsl_agent_cb_dial(connect, key, (int)index, 30, 1, &fd, &seal, err) < 0 ||
        dsl_agent_cb_handshake(fd, &seal, dsl_now() + 30, err) < 0) {
        fprintf(stderr, "helper: %s\n", err);
        return 3;
    }
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        if (dsl_seal_feed(&seal, buf, (size_t)n) < 0)
            return 5;
        size_t k;
        while ((k = dsl_seal_read(&seal, buf, sizeof(buf))) > 0)
            if (dsl_seal_write(&seal, buf, k) < 0)
                return 6;
        if (dsl_net_write_all(fd, seal.out.buf, seal.out.len, -1) < 0)
            return 4;
        dsl_dynbuf_reset(&seal.out);
    }
    dsl_seal_release(&seal);
    close(fd);
    return 0;
}

static void base_opts(struct dsl_transport_opts *o, const char *cfg)
{
    memset(o, 0, sizeof(*o));
    o->ssh_config = cfg;
    o->connect_timeout = 30;
    o->keepalive = 15;
}

static const struct dsl_transport_ops *ops = &dsl_transport_pdsh;

/* Every node's agent echoes: bytes both ways at once, then EOF. */
static void round_trip_all(void)
{
    char *cfg = cluster_path("ssh_config");
    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    char *argv[] = {self, (char *)"--agent", NULL};
    struct dsl_conn *c = dsl_xcalloc((size_t)cluster_nodes, sizeof(*c));
    for (int i = 0; i < cluster_nodes; i++) {
        char host[32];
        snprintf(host, sizeof(host), "node%d", i + 1);
        conn_open(&c[i], ops, host, &o, argv);
    }
    conns_drive(c, cluster_nodes);
    for (int i = 0; i < cluster_nodes; i++)
        if (c[i].state != DSL_CONN_OPEN)
            DSL_FAIL_("%s: %s", c[i].host, c[i].err);
    conns_round_trip(c, cluster_nodes, 200000, 30000);
    for (int i = 0; i < cluster_nodes; i++)
        conn_free(&c[i]);
    free(c);
    free(cfg);
}

TEST(pdsh_should_round_trip_bytes_through_a_connected_back_agent_on_every_node)
{
    ops = &dsl_transport_pdsh;
    round_trip_all();
}

TEST(openmpi_should_round_trip_bytes_through_agents_started_by_one_mpirun)
{
    ops = &dsl_transport_openmpi;
    round_trip_all();
    ops = &dsl_transport_pdsh;
}

TEST(openmpi_should_fail_every_host_of_a_batch_whose_program_is_missing)
{
    ops = &dsl_transport_openmpi;
    char *cfg = cluster_path("ssh_config");
    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    char *argv[] = {(char *)"/nonexistent/dslaunch", (char *)"--agent", NULL};
    struct dsl_conn c[2];
    conn_open(&c[0], ops, "node1", &o, argv);
    conn_open(&c[1], ops, "node2", &o, argv);
    conns_drive(c, 2);
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(c[i].state, DSL_CONN_FAILED);
        /* the agent itself missing: -ENOENT (exit 202 in the job) and what to do */
        ASSERT_CONTAINS(c[i].err, "dslaunch is not at '/nonexistent/dslaunch' on 'node");
        ASSERT_CONTAINS(c[i].err, "not found");
        ASSERT_CONTAINS(c[i].err, "or give --remote-dslaunch PATH");
        ASSERT_EQ(c[i].err_code, -ENOENT);
        conn_free(&c[i]);
    }
    free(cfg);
    ops = &dsl_transport_pdsh;
}

/* Open one connection expected to fail; check its class and message. */
static void expect_failure(const char *host, struct dsl_transport_opts *o, char *const *argv,
                           int code, const char *needle)
{
    struct dsl_conn c;
    conn_open(&c, ops, host, o, argv);
    conns_drive(&c, 1);
    if (c.state != DSL_CONN_FAILED)
        DSL_FAIL_("%s should have failed", host);
    if (c.err_code != code)
        DSL_FAIL_("%s: code %d, want %d: %s", host, c.err_code, code, c.err);
    ASSERT_CONTAINS(c.err, needle);
    conn_free(&c);
}

TEST(pdsh_should_classify_an_unknown_host_key_as_eauth)
{
    char *cfg = cluster_path("ssh_config");
    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    o.known_hosts = "/dev/null";
    char *argv[] = {self, (char *)"--agent", NULL};
    expect_failure("node1", &o, argv, DSL_EAUTH, "Host key verification failed");
    free(cfg);
}

TEST(pdsh_should_classify_a_wrong_identity_as_eauth)
{
    /*
     * ssh adds -i to the config's IdentityFile entries instead of replacing them, so
     * the wrong key is tried with a copy of the config that names no identity.
     */
    char *cfg = cluster_path("ssh_config"), *noid = cluster_path("ssh_config_noid"),
         *wrong = cluster_path("wrong_ed25519");
    FILE *in = fopen(cfg, "r"), *out = fopen(noid, "w");
    ASSERT(in && out);
    char line[1024];
    while (fgets(line, sizeof(line), in))
        if (!strstr(line, "IdentityFile"))
            fputs(line, out);
    fclose(in);
    fclose(out);
    struct dsl_transport_opts o;
    base_opts(&o, noid);
    o.ssh_identity = wrong;
    char *argv[] = {self, (char *)"--agent", NULL};
    expect_failure("node2", &o, argv, DSL_EAUTH, "Permission denied");
    unlink(noid);
    free(wrong);
    free(noid);
    free(cfg);
}

TEST(pdsh_should_report_a_missing_remote_program)
{
    char *cfg = cluster_path("ssh_config");
    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    char *argv[] = {(char *)"/nonexistent/dslaunch", (char *)"--agent", NULL};
    expect_failure("node2", &o, argv, -ENOENT,
                   "dslaunch is not at '/nonexistent/dslaunch' on 'node2' (");
    expect_failure("node2", &o, argv, -ENOENT, "No such file or directory");
    free(cfg);
}

TEST(pdsh_to_a_node_whose_sshd_is_stopped_should_fail_with_econnect)
{
    const char *sh = getenv("DSL_CLUSTER_SH");
    ASSERT(sh);
    char *stop = dsl_xasprintf("'%s' sshd-stop '%s' node3", sh, cluster_dir);
    char *start = dsl_xasprintf("'%s' sshd-start '%s' node3", sh, cluster_dir);
    char *cfg = cluster_path("ssh_config");
    struct dsl_transport_opts o;
    base_opts(&o, cfg);
    char *argv[] = {self, (char *)"--agent", NULL};
    ASSERT_EQ(system(stop), 0);
    struct dsl_conn c;
    conn_open(&c, ops, "node3", &o, argv);
    conns_drive(&c, 1);
    ASSERT_EQ(system(start), 0);
    ASSERT_EQ(c.state, DSL_CONN_FAILED);
    ASSERT_EQ(c.err_code, DSL_ECONNECT);
    ASSERT_CONTAINS(c.err, "Connection refused");
    conn_free(&c);
    free(cfg);
    free(start);
    free(stop);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--agent"))
        return helper_agent(argc, argv);
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return 2;
    self[n] = '\0';
    int r = cluster_init(3);
    if (r)
        return r;
    return RUN_TESTS(argc, argv);
}
