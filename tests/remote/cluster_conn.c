/* Helpers of the cluster transport tests; see cluster_conn.h. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_conn.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "test.h"
#include "dslaunch/common/banned.h"

const char *cluster_dir;
int cluster_nodes;

char *cluster_path(const char *name)
{
    return dsl_xasprintf("%s/%s", cluster_dir, name);
}

int cluster_init(int min_nodes)
{
    cluster_dir = getenv("DSL_CLUSTER_DIR");
    if (!cluster_dir) {
        fprintf(stderr, "DSL_CLUSTER_DIR is not set: run through tests/e2e/cluster/with_cluster.sh\n");
        return 2;
    }
    char *envf = cluster_path("cluster.env");
    FILE *f = fopen(envf, "r");
    free(envf);
    if (!f) {
        fprintf(stderr, "no cluster in '%s'\n", cluster_dir);
        return 2;
    }
    char line[256];
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "NODES=", 6))
            cluster_nodes = (int)strtol(line + 6, NULL, 10);
    fclose(f);
    if (cluster_nodes < min_nodes) {
        fprintf(stderr, "the cluster needs at least %d nodes\n", min_nodes);
        return 2;
    }
    return 0;
}

void conn_open(struct dsl_conn *c, const struct dsl_transport_ops *ops, const char *host,
               const struct dsl_transport_opts *o, char *const *argv)
{
    memset(c, 0, sizeof(*c));
    c->ops = ops;
    c->host = dsl_xstrdup(host);
    c->ops->open(c, o, argv);
}

void conn_free(struct dsl_conn *c)
{
    c->ops->close(c);
    free(c->host);
}

void conns_drive(struct dsl_conn *c, int n)
{
    double deadline = dsl_now() + 60;
    struct pollfd *pf = dsl_xcalloc((size_t)n, sizeof(*pf));
    for (;;) {
        int busy = 0;
        for (int i = 0; i < n; i++) {
            pf[i].fd = -1;
            if (c[i].state == DSL_CONN_OPEN || c[i].state == DSL_CONN_FAILED)
                continue;
            busy++;
            pf[i].fd = c[i].ops->pollfd(&c[i], &pf[i].events);
        }
        if (!busy)
            break;
        ASSERT(dsl_now() < deadline);
        poll(pf, (nfds_t)n, 100);
        for (int i = 0; i < n; i++)
            if (c[i].state != DSL_CONN_OPEN && c[i].state != DSL_CONN_FAILED)
                c[i].ops->progress(&c[i]);
    }
    free(pf);
}

static unsigned char pattern(int node, size_t i)
{
    uint32_t x = (uint32_t)(node * 2654435761u) ^ (uint32_t)(i * 40503u);
    return (unsigned char)(x >> 9);
}

void conns_round_trip(struct dsl_conn *c, int n, size_t payload, size_t chunk_max)
{
    unsigned char *out = dsl_xmalloc(chunk_max), *in = dsl_xmalloc((size_t)n * payload);
    size_t *sent = dsl_xcalloc((size_t)n, sizeof(size_t));
    size_t *got = dsl_xcalloc((size_t)n, sizeof(size_t));
    int *eof = dsl_xcalloc((size_t)n, sizeof(int));
    struct pollfd *pf = dsl_xcalloc((size_t)n, sizeof(*pf));
    double deadline = dsl_now() + 60;
    for (int done = 0; done < n;) {
        ASSERT(dsl_now() < deadline);
        for (int i = 0; i < n; i++) {
            pf[i].fd = eof[i] ? -1 : c[i].ops->pollfd(&c[i], &pf[i].events);
            if (sent[i] < payload)
                pf[i].events |= POLLOUT;
        }
        poll(pf, (nfds_t)n, 50);
        for (int i = 0; i < n; i++) {
            if (eof[i])
                continue;
            while (sent[i] < payload) {
                size_t chunk = payload - sent[i] > chunk_max ? chunk_max : payload - sent[i];
                for (size_t k = 0; k < chunk; k++)
                    out[k] = pattern(i, sent[i] + k);
                ssize_t w = c[i].ops->write(&c[i], out, chunk);
                if (w == -EAGAIN)
                    break;
                ASSERT(w > 0);
                sent[i] += (size_t)w;
                if (sent[i] == payload)
                    c[i].ops->close_write(&c[i]);
            }
            for (;;) {
                ssize_t r = c[i].ops->read(&c[i], in + (size_t)i * payload + got[i],
                                           payload - got[i] ? payload - got[i] : 1);
                if (r == -EAGAIN)
                    break;
                if (r == 0) {
                    eof[i] = 1;
                    done++;
                    break;
                }
                if (r < 0)
                    DSL_FAIL_("%s: read %zd: %s", c[i].host, r, c[i].err);
                got[i] += (size_t)r;
                ASSERT(got[i] <= payload);
            }
        }
    }
    for (int i = 0; i < n; i++) {
        ASSERT_EQ(got[i], payload);
        for (size_t k = 0; k < payload; k++)
            if (in[(size_t)i * payload + k] != pattern(i, k))
                DSL_FAIL_("%s: byte %zu differs", c[i].host, k);
    }
    free(pf);
    free(eof);
    free(got);
    free(sent);
    free(in);
    free(out);
}
