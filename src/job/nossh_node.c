/*
 * No-ssh mode's coordinator wait (nossh_node.h); a joining node's loop is the agent's
 * (agent/agent_dial.c).
 *
 * Theory of operation, node 0. Before the plan is built: the join listener
 * (remote/join.c) is opened on the control port with every node rank's key derived from
 * the secret; a poll loop of 100 ms turns services it, reads what each open channel has
 * sent and decodes its first line, the agent's hello (proto.h: slots, node_rank,
 * nnodes, the digest of its command line). A hello that contradicts this node
 * (nossh_check.c: another --nnodes, node rank, dslaunch or protocol version, PROGRAM or
 * arguments) ends the wait with 202, after a stop naming the reason has gone to every
 * node already in (they print it and exit 202); a channel that fails or closes makes
 * its slot wait again. When every node is in, the nodes go into the plan in node-rank order, so
 * ranks are numbered by node rank, and each slot is named after its node for the job's
 * connections, which replay the hello. SIGINT/SIGTERM/SIGHUP end the wait (128 +
 * signal). At --join_timeout the missing node ranks are named, with the connections the
 * listener refused (a different secret), and the launcher exits 203: nothing was started.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/job/job.h"
#include "dslaunch/job/nossh_node.h"
#include "dslaunch/proto/proto.h"
#include "dslaunch/remote/connectback.h"
#include "dslaunch/remote/join.h"
#include "dslaunch/common/banned.h"

static volatile sig_atomic_t wait_sig;
static int join_opened;

static void on_wait_signal(int sig)
{
    wait_sig = sig;
}

/* The agent's hello from what node rank k sent: 1 decoded, 0 not complete, <0 bad. */
static int take_hello(int k, struct dsl_msg *m, char *err)
{
    size_t len = 0;
    const char *buf = dsl_join_peek(k, &len);
    if (!buf)
        return 0;
    const char *nl = memchr(buf, '\n', len);
    if (!nl)
        return len >= (1u << 20) ? dsl_seterr(err, DSL_EPROTO, "no hello in its first MiB") : 0;
    int r = dsl_msg_decode(m, buf, (size_t)(nl - buf), err);
    if (r < 0)
        return r;
    if (m->type != DSL_MSG_HELLO)
        return dsl_seterr(err, DSL_EPROTO, "its first message is not a hello");
    return 1;
}

static char *missing_list(const int *have, int n)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 16);
    int shown = 0, more = 0;
    for (int k = 1; k < n; k++) {
        if (have[k])
            continue;
        if (shown < 20)
            dsl_dynbuf_addf(&b, "%s%d", shown ? ", " : "", k);
        else
            more++;
        shown++;
    }
    if (more)
        dsl_dynbuf_addf(&b, " and %d more", more);
    char *s = dsl_xstrdup(dsl_dynbuf_str(&b));
    dsl_dynbuf_release(&b);
    return s;
}

/* Tell every node whose channel is open that the job is refused, and why: each prints
 * it and exits DSL_NOSSH_EXIT_REFUSED instead of finding the coordinator gone. */
static void refuse_all(int n, const char *why)
{
    struct dsl_msg m;
    struct dsl_dynbuf line;
    dsl_msg_init(&m, DSL_MSG_STOP);
    m.sig = SIGTERM;
    m.refused = dsl_xstrdup(why);
    dsl_dynbuf_init(&line, 1 << 20);
    if (dsl_msg_encode(&m, &line) == 0)
        for (int k = 1; k < n; k++)
            if (dsl_join_ready(k))
                dsl_join_send(k, line.buf, line.len);
    dsl_dynbuf_release(&line);
    dsl_msg_release(&m);
}

int dsl_nossh_coordinate(struct dsl_plan *p)
{
    const struct dsl_nossh *ns = &p->nossh;
    const struct dsl_launch_opts *o = p->opts;
    int n = ns->nnodes, code = 0;
    char err[DSL_ERR_LEN] = "";
    if (n < 2)
        return 0;
    if (dsl_join_open(ns->control_port, ns->secret, ns->secret_len, n, err) < 0) {
        dsl_error("%s", err);
        return DSL_EXIT_USAGE;
    }
    join_opened = 1;
    struct dsl_msg *hello = dsl_xcalloc((size_t)n, sizeof(*hello));
    int *have = dsl_xcalloc((size_t)n, sizeof(*have));
    for (int k = 0; k < n; k++)
        dsl_msg_init(&hello[k], 0);
    int in = 1;
    if (o->verbose >= 1)
        dsl_info("no-ssh coordinator: waiting up to %.0f s for %d node%s to dial in on port %d",
                 o->join_timeout, n - 1, n == 2 ? "" : "s", ns->control_port);
    wait_sig = 0;
    dsl_signals_set(on_wait_signal, 0, DSL_STOP_SIGNALS);
    double t0 = dsl_now(), deadline = t0 + o->join_timeout;
    int refused_seen = 0;
    while (in < n) {
        const char *seen_why = NULL;
        int nref = dsl_join_refused(&seen_why);
        if (nref > refused_seen) { /* say it now: the wait may be long */
            dsl_warn("no-ssh coordinator: refused %s", seen_why);
            refused_seen = nref;
        }
        if (wait_sig) {
            code = 128 + wait_sig;
            dsl_error("stopped while waiting for the nodes to dial in (%d of %d here)", in, n);
            goto out;
        }
        dsl_join_service();
        for (int k = 1; k < n; k++) {
            if (have[k] || !dsl_join_ready(k))
                continue;
            int r = take_hello(k, &hello[k], err);
            if (r < 0) {
                dsl_error("node rank %d dialled in but its hello is bad: %s", k, err);
                code = DSL_EXIT_PREFLIGHT;
                goto out;
            }
            if (r == 0)
                continue;
            const struct dsl_msg *h = &hello[k];
            if (h->slots < 1) {
                dsl_error("node rank %d ('%s') dialled in without saying its slots: its "
                          "dslaunch (%s) does not know no-ssh mode", k, h->host, h->version);
                code = DSL_EXIT_PREFLIGHT;
                goto out;
            }
            char *why = NULL;
            if (dsl_nossh_hello_check(h, k, n, o->argv.v, o->argv.nr, &why) < 0) {
                dsl_error("no-ssh: %s; nothing was started", why);
                refuse_all(n, why);
                free(why);
                code = DSL_EXIT_PREFLIGHT;
                goto out;
            }
            have[k] = 1;
            in++;
            if (o->verbose >= 2)
                dsl_info("node rank %d ('%s', %d slot%s) dialled in after %.1f s", k, h->host,
                         h->slots, h->slots == 1 ? "" : "s", dsl_now() - t0);
        }
        if (in == n)
            break;
        if (dsl_now() > deadline) {
            char *miss = missing_list(have, n);
            const char *why = NULL;
            int refused = dsl_join_refused(&why);
            dsl_error("no-ssh: %d of %d nodes dialled in within %.0f s; node rank%s %s never "
                      "came (each runs dslaunch --node_rank K --nnodes %d with node 0's address "
                      "and the same job secret, and must reach port %d here)%s%s%s", in, n,
                      o->join_timeout, n - in == 1 ? "" : "s", miss, n, ns->control_port,
                      refused ? "; refused: " : "", refused ? why : "",
                      refused ? "" : "; nothing was started");
            if (refused)
                dsl_error("nothing was started");
            free(miss);
            code = DSL_EXIT_TIMEOUT;
            goto out;
        }
        struct pollfd pf = {.fd = dsl_join_pollfd(), .events = POLLIN};
        poll(&pf, 1, 100);
    }
    /* every node is in: the plan's nodes in node-rank order, this one first */
    char me[256];
    if (gethostname(me, sizeof(me)) < 0 || !me[0])
        snprintf(me, sizeof(me), "localhost");
    me[sizeof(me) - 1] = '\0';
    dsl_plan_add_node(p, me, ns->slots);
    for (int k = 1; k < n; k++)
        dsl_join_set_host(k, dsl_plan_add_node(p, hello[k].host, hello[k].slots));
    if (o->verbose >= 1)
        dsl_info("no-ssh coordinator: all %d nodes are in after %.1f s", n, dsl_now() - t0);
out:
    dsl_signals_set(SIG_DFL, 0, DSL_STOP_SIGNALS);
    for (int k = 0; k < n; k++)
        dsl_msg_release(&hello[k]);
    free(hello);
    free(have);
    return code;
}

void dsl_nossh_end(void)
{
    if (join_opened)
        dsl_join_close();
    join_opened = 0;
}
