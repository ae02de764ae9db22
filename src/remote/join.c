/*
 * No-ssh mode's coordinator side (join.h): the agents of node ranks 1..N-1 dial in.
 *
 * Theory of operation. One strict connect-back listener (connectback.c) on the control
 * port expects the N-1 agent keys derived from the job secret from the start, so a
 * hello naming any other key is closed at once and counted: that is what a node with a
 * different secret sees, and the coordinator names it when nodes are missing. Each node
 * rank has a slot. service() takes a socket that arrived for a slot without a channel,
 * expects the rank's key again at once (so the rank's next dial, for the next attempt
 * of a restarted job, waits in the listener instead of being refused), and advances the
 * slot's handshake (cbstream.c); a handshake that fails (a replayed hello whose sender
 * cannot prove the key) or takes over HANDSHAKE_TIMEOUT is counted and the slot waits
 * again. peek() reads what an open channel has sent into the slot's buffer: the
 * coordinator decodes the agent's hello from it to learn the node's name and slots,
 * and the job's connection replays it before reading the socket. A connection
 * (dsl_transport_joined) holds a slot from open() to close(); close() returns it to
 * waiting. The state is this process's: there is one job per launcher.
 */
#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/remote/connectback.h"
#include "dslaunch/remote/join.h"
#include "dslaunch/common/banned.h"

#define HANDSHAKE_TIMEOUT 10.0
#define PEEK_MAX (1u << 20)

struct join_slot {
    char *host;                   /* the plan's name of the node (owned), or NULL */
    unsigned char apub[DSL_SEAL_KEY_LEN];
    struct dsl_cb_stream st;      /* fd -1 while waiting */
    int open;                     /* handshake done */
    int held;                     /* a connection has it */
    int epfd;                     /* the listener and the rank's ready fd: readable when
                                     service() has work for this slot */
    double t_arrived;
    struct dsl_dynbuf unread;     /* plaintext read ahead, replayed to the connection */
};

static struct {
    struct dsl_cb_listener *l;
    unsigned char lpriv[DSL_SEAL_KEY_LEN];
    int n;
    struct join_slot *slot;       /* [n]; slot 0 (this node) unused */
    int nfailed;
    char why[DSL_ERR_LEN];
} J;

void dsl_join_agent_label(int k, char *buf, size_t len)
{
    snprintf(buf, len, "agent %d", k);
}

static void epoll_add(int epfd, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (fd >= 0)
        epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

int dsl_join_open(int port, const void *secret, size_t len, int nnodes, char *err)
{
    unsigned char lpub[DSL_SEAL_KEY_LEN], apriv[DSL_SEAL_KEY_LEN];
    int r = dsl_seal_key_derive(secret, len, "launcher", J.lpriv, lpub, err);
    if (r < 0)
        return r;
    if ((r = dsl_cb_listener_open_at(&J.l, NULL, port, err)) < 0)
        return dsl_seterr(err, r, "no-ssh coordinator: cannot listen on control port %d: %s "
                          "(choose another with --control_port, the same on every node)",
                          port, err);
    dsl_cb_listener_strict(J.l);
    J.n = nnodes;
    J.slot = dsl_xcalloc((size_t)nnodes, sizeof(*J.slot));
    for (int k = 0; k < nnodes; k++) {
        struct join_slot *s = &J.slot[k];
        s->st.fd = -1;
        s->epfd = -1;
        dsl_dynbuf_init(&s->unread, PEEK_MAX);
        if (k == 0)
            continue;
        s->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (s->epfd < 0) {
            r = dsl_seterr(err, -errno, "cannot create an epoll set: %s", strerror(errno));
            dsl_join_close();
            return r;
        }
        epoll_add(s->epfd, dsl_cb_listener_pollfd(J.l));
        char label[32];
        dsl_join_agent_label(k, label, sizeof(label));
        if ((r = dsl_seal_key_derive(secret, len, label, apriv, s->apub, err)) < 0) {
            dsl_join_close();
            return r;
        }
        epoll_add(s->epfd, dsl_cb_listener_expect(J.l, s->apub));
    }
    memset(apriv, 0, sizeof(apriv));
    return 0;
}

void dsl_join_close(void)
{
    for (int k = 0; k < J.n; k++) {
        dsl_cb_stream_close(&J.slot[k].st);
        dsl_dynbuf_release(&J.slot[k].unread);
        if (J.slot[k].epfd >= 0)
            close(J.slot[k].epfd);
        free(J.slot[k].host);
    }
    free(J.slot);
    dsl_cb_listener_free(J.l);
    memset(&J, 0, sizeof(J));
}

int dsl_join_port(void)
{
    const char *arg = J.l ? dsl_cb_listener_connect_arg(J.l) : NULL;
    const char *colon = arg ? strchr(arg, ':') : NULL; /* IPv4 "a:P,b:P": the first */
    if (!colon)
        return -1;
    char digits[8];
    size_t n = strcspn(colon + 1, ",");
    int port;
    snprintf(digits, sizeof(digits), "%.*s", (int)(n < 7 ? n : 7), colon + 1);
    return dsl_parse_int(digits, 1, 65535, &port) == 0 ? port : -1;
}

int dsl_join_pollfd(void)
{
    return J.l ? dsl_cb_listener_pollfd(J.l) : -1;
}

static void slot_reset(struct join_slot *s)
{
    dsl_cb_stream_close(&s->st);
    s->st.fd = -1;
    s->open = 0;
    dsl_dynbuf_reset(&s->unread);
}

static void slot_failed(int k, const char *why)
{
    J.nfailed++;
    snprintf(J.why, sizeof(J.why), "node rank %d: %.400s", k, why);
    slot_reset(&J.slot[k]);
}

void dsl_join_service(void)
{
    if (!J.l)
        return;
    dsl_cb_listener_service(J.l);
    for (int k = 1; k < J.n; k++) {
        struct join_slot *s = &J.slot[k];
        if (s->st.fd < 0 && !s->held) {
            int fd = dsl_cb_listener_take(J.l, s->apub);
            if (fd < 0)
                continue;
            /* the rank's next dial waits there */
            epoll_add(s->epfd, dsl_cb_listener_expect(J.l, s->apub));
            dsl_cb_stream_init(&s->st, fd, J.lpriv, s->apub);
            s->t_arrived = dsl_now();
        }
        if (s->st.fd >= 0 && !s->open) {
            char err[DSL_ERR_LEN], who[32];
            snprintf(who, sizeof(who), "node rank %d", k);
            int h = dsl_cb_stream_handshake(&s->st, who, err);
            if (h < 0)
                slot_failed(k, err);
            else if (h == 1)
                s->open = 1;
            else if (dsl_now() - s->t_arrived > HANDSHAKE_TIMEOUT)
                slot_failed(k, "the handshake did not finish within 10 s");
        }
    }
}

int dsl_join_ready(int k)
{
    return k > 0 && k < J.n && J.slot[k].open;
}

const char *dsl_join_peek(int k, size_t *len)
{
    if (!dsl_join_ready(k))
        return NULL;
    struct join_slot *s = &J.slot[k];
    char buf[16384];
    for (;;) {
        size_t room = PEEK_MAX - s->unread.len;
        if (!room)
            break;
        ssize_t r = dsl_cb_stream_read(&s->st, buf, room < sizeof(buf) ? room : sizeof(buf));
        if (r == -EAGAIN)
            break;
        if (r <= 0) {
            slot_failed(k, r == 0 ? "the agent closed its channel" : "its channel failed");
            return NULL;
        }
        dsl_dynbuf_add(&s->unread, buf, (size_t)r);
    }
    *len = s->unread.len;
    return s->unread.len ? s->unread.buf : "";
}

void dsl_join_set_host(int k, const char *host)
{
    if (k <= 0 || k >= J.n)
        return;
    free(J.slot[k].host);
    J.slot[k].host = dsl_xstrdup(host);
}

int dsl_join_send(int k, const void *buf, size_t len)
{
    if (!dsl_join_ready(k) || J.slot[k].held)
        return -ENOTCONN;
    struct dsl_cb_stream *st = &J.slot[k].st;
    const char *p = buf;
    double deadline = dsl_now() + 2.0;
    while (len) {
        ssize_t w = dsl_cb_stream_write(st, p, len);
        if (w == -EAGAIN) {
            if (dsl_net_wait(st->fd, POLLOUT, deadline) < 0)
                return -ETIMEDOUT;
            continue;
        }
        if (w < 0)
            return (int)w;
        p += w;
        len -= (size_t)w;
    }
    dsl_cb_stream_shutdown(st); /* flushes what the seal still holds (2 s at most) */
    return 0;
}

int dsl_join_rank_of(const char *host)
{
    for (int k = 1; k < J.n; k++)
        if (J.slot[k].host && !strcmp(J.slot[k].host, host))
            return k;
    return -1;
}

int dsl_join_refused(const char **why)
{
    const char *from = NULL;
    int n = J.l ? dsl_cb_listener_refused(J.l, &from) : 0;
    if (why) {
        if (n && from)
            snprintf(J.why, sizeof(J.why), "%d connection%s whose key belongs to no node rank "
                     "of this job (a different job secret or --nnodes?), the last from %s",
                     n, n == 1 ? "" : "s", from);
        *why = J.why;
    }
    return n + J.nfailed;
}

/* ---- the job's connection to node rank k ---- */

struct joined_priv {
    int k;
    double timeout;
};

static int joined_progress(struct dsl_conn *c);

static int joined_open(struct dsl_conn *c, const struct dsl_transport_opts *o,
                       char *const *agent_argv)
{
    (void)agent_argv;
    dsl_cb_conn_begin(c);
    int k = dsl_join_rank_of(c->host);
    if (k < 0 || J.slot[k].held)
        return dsl_cb_conn_fail(c, DSL_EUSAGE, "'%s' is no node of this no-ssh job", c->host);
    struct joined_priv *p = dsl_xcalloc(1, sizeof(*p));
    p->k = k;
    p->timeout = o->connect_timeout;
    c->priv = p;
    J.slot[k].held = 1;
    return joined_progress(c); /* the agent is usually there already */
}

static int joined_progress(struct dsl_conn *c)
{
    struct joined_priv *p = c->priv;
    if (c->state == DSL_CONN_FAILED)
        return c->err_code;
    if (!p || c->state != DSL_CONN_CONNECTING)
        return 0;
    struct join_slot *s = &J.slot[p->k];
    /* held: service() leaves a held slot without a channel alone; take here */
    if (s->st.fd < 0) {
        s->held = 0;
        dsl_join_service();
        s->held = 1;
    } else {
        dsl_join_service();
    }
    if (s->open) {
        c->state = DSL_CONN_OPEN;
        c->t_open = dsl_now();
        return 0;
    }
    if (p->timeout > 0 && dsl_now() - c->t_start > p->timeout)
        return dsl_cb_conn_fail(c, DSL_ETIMEDOUT, "node rank %d ('%s') did not dial in again "
                                "within %.1f s", p->k, c->host, p->timeout);
    return 0;
}

static int joined_pollfd(struct dsl_conn *c, short *events)
{
    struct joined_priv *p = c->priv;
    if (!p)
        return -1;
    struct join_slot *s = &J.slot[p->k];
    if (c->state != DSL_CONN_OPEN && s->st.fd >= 0) {
        *events = POLLIN;
        if (dsl_cb_stream_want_write(&s->st))
            *events |= POLLOUT;
        return s->st.fd;
    }
    return dsl_cb_conn_pollfd(c, &s->st, s->epfd, events);
}

static ssize_t joined_read(struct dsl_conn *c, void *buf, size_t n)
{
    struct joined_priv *p = c->priv;
    if (!p)
        return -EBADF;
    struct join_slot *s = &J.slot[p->k];
    if (s->unread.len) {
        size_t m = n < s->unread.len ? n : s->unread.len;
        memcpy(buf, s->unread.buf, m);
        dsl_dynbuf_consume(&s->unread, m);
        return (ssize_t)m;
    }
    return dsl_cb_conn_read(c, &s->st, buf, n);
}

static ssize_t joined_write(struct dsl_conn *c, const void *buf, size_t n)
{
    struct joined_priv *p = c->priv;
    return dsl_cb_conn_write(p ? &J.slot[p->k].st : NULL, buf, n);
}

static void joined_close_write(struct dsl_conn *c)
{
    struct joined_priv *p = c->priv;
    dsl_cb_conn_close_write(p ? &J.slot[p->k].st : NULL);
}

static void joined_close(struct dsl_conn *c)
{
    struct joined_priv *p = c->priv;
    if (!p)
        return;
    if (J.slot) {
        slot_reset(&J.slot[p->k]);
        J.slot[p->k].held = 0;
    }
    free(p);
    c->priv = NULL;
}

const struct dsl_transport_ops dsl_transport_joined = DSL_TRANSPORT_OPS("no-ssh", joined);
