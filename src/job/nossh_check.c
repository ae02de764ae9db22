/*
 * No-ssh mode: is a node that dialled in running the same job as node 0 (nossh_node.h)?
 *
 * Every node of a no-ssh job is started by its scheduler with its own command line, but
 * only node 0's PROGRAM and arguments run (on every node). A node started with another
 * program, other arguments or another dslaunch (a stale image on one pod) would
 * otherwise run node 0's job silently; its agent's hello therefore carries the dslaunch
 * and protocol versions and the SHA-256 of its PROGRAM and arguments (with the words,
 * when short, to show), and the coordinator refuses the job before anything starts
 * when one differs. A node started with no PROGRAM at all (a worker pod that only says
 * `dslaunch --node_rank 1 ...`) sends the empty digest and is accepted: it runs node
 * 0's program, as it asked to.
 *
 * The digest itself is the hello's (proto/argv_digest.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/quote.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/job/nossh_node.h"
#include "dslaunch/proto/proto.h"
#include "dslaunch/common/banned.h"

#define SHOW_MAX 1400 /* bytes of each command line in a message (the log line is 4 KiB) */

/* argv as 'w1' 'w2' ..., each word made safe to show, cut at SHOW_MAX */
static void show_argv(struct dsl_dynbuf *b, char *const *argv, size_t n)
{
    size_t start = b->len;
    char q[SHOW_MAX + 8];
    for (size_t i = 0; i < n; i++) {
        if (b->len - start > SHOW_MAX) {
            dsl_dynbuf_addf(b, " ... (%zu words)", n);
            return;
        }
        dsl_quote_for_humans(q, sizeof(q), argv[i], strlen(argv[i]));
        dsl_dynbuf_addf(b, "%s'%s'", i ? " " : "", q);
    }
}

int dsl_nossh_hello_check(const struct dsl_msg *h, int k, int nnodes, char *const *argv,
                          size_t argc, char **why)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 16);
    char host[256];
    dsl_quote_for_humans(host, sizeof(host), h->host ? h->host : "?",
                         strlen(h->host ? h->host : "?"));
    if (h->proto != DSL_PROTO_VERSION) {
        dsl_dynbuf_addf(&b, "node rank %d ('%s') speaks control protocol %d, node 0 %d: "
                        "install the same dslaunch on every node", k, host, h->proto,
                        DSL_PROTO_VERSION);
    } else if (!h->version || strcmp(h->version, DSL_VERSION) != 0) {
        char v[128];
        dsl_quote_for_humans(v, sizeof(v), h->version ? h->version : "?",
                             strlen(h->version ? h->version : "?"));
        dsl_dynbuf_addf(&b, "node rank %d ('%s') runs dslaunch %s, node 0 runs %s: every node "
                        "needs the same dslaunch (a stale image?)", k, host, v, DSL_VERSION);
    } else if (h->nnodes != nnodes || h->node_rank != k) {
        dsl_dynbuf_addf(&b, "node rank %d ('%s') was started with --nnodes %d (node rank %d), "
                        "node 0 with --nnodes %d: every node needs the same count", k, host,
                        h->nnodes, h->node_rank, nnodes);
    } else if (!h->argv_sha256) {
        dsl_dynbuf_addf(&b, "node rank %d ('%s') did not say which program it was started "
                        "with", k, host);
    } else if (h->argv_sha256[0]) { /* "": started with no PROGRAM, runs node 0's */
        char mine[65];
        dsl_nossh_argv_digest(argv, argc, mine);
        if (strcmp(mine, h->argv_sha256) != 0) {
            dsl_dynbuf_addf(&b, "node rank %d ('%s') was started with another program or "
                            "arguments than node 0; node rank %d: ", k, host, k);
            if (h->has_argv)
                show_argv(&b, h->argv.v, h->argv.nr);
            else
                dsl_dynbuf_addf(&b, "(too long to show)");
            dsl_dynbuf_addf(&b, "; node 0: ");
            show_argv(&b, argv, argc);
            dsl_dynbuf_addf(&b, " (start every node with the same PROGRAM and arguments, "
                            "or the other nodes with none)");
        }
    }
    if (!b.len) {
        dsl_dynbuf_release(&b);
        return 0;
    }
    *why = dsl_xstrdup(dsl_dynbuf_str(&b));
    dsl_dynbuf_release(&b);
    return DSL_EPROTO;
}
