/*
 * Connect-back: agents reach the launcher over TCP instead of stdin/stdout; the bytes
 * on that socket are sealed (seal.h, cbstream.c).
 *
 * Theory of operation (launcher side). One listening socket and an epoll set holding
 * it and every accepted socket whose hello has not been matched yet ("pending"). The
 * fan-out loop polls the epoll fd (dsl_cb_listener_pollfd) among its others; whenever
 * it is readable, service() accepts what is waiting and peeks at hellos without
 * blocking or consuming them (the connection's seal reads the hello itself). A
 * complete hello whose agent key is expected moves the socket into that key's slot and
 * makes the key's eventfd ("ready fd", given out by expect()) readable, where the owning
 * connection picks it up with take(). Whoever called service(), every owner whose
 * socket it set aside is woken through its own ready fd: the listener's epoll fd is
 * drained by the one service() and cannot wake the others. A complete hello whose key
 * is not expected yet (the TCP connection can overtake the key line, which comes the
 * long way through ssh or mpirun) is parked: out of the epoll set, so it cannot spin
 * the loop, and matched again by the next expect() or service(). Anything that is not
 * a hello, EOF, or no match within CB_PENDING_TIMEOUT seconds closes the socket, so a
 * port scanner or a stray client can neither stall the loop nor hold resources, and
 * knows no key that gets it further than the hello. Keys are compared in constant time
 * and used once.
 *
 * The listener is shared by every connect-back connection of the process
 * (dsl_cb_shared_get); the pieces the transports need to run pdsh, mpirun or srun are
 * in cbspawn.c.
 *
 * Agent side: every address of the --connect list is connected non-blocking at once;
 * the first that completes wins (an unroutable address of a multi-homed launcher fails
 * at once or loses the race instead of costing a timeout each).
 */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/remote/connectback.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define CB_PENDING_TIMEOUT 10.0
#define CB_MAX_ADDRS 32

/* ---- agent side ---- */

struct cb_try {
    int fd;
    char text[300];
    int err; /* errno of a failed attempt, 0 while in flight or unused */
    char why[200]; /* a failure errno cannot name (a name that did not resolve), or "" */
};

/* Split "a:1,[v6]:2" into entries and start a non-blocking connect for each. */
static int start_tries(const char *hostports, struct cb_try *t, int max, char *err)
{
    int n = 0;
    char *copy = dsl_xstrdup(hostports), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && n < max;
         tok = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(tok, ':');
        if (!colon || colon == tok || !colon[1]) {
            int r = dsl_seterr(err, DSL_EUSAGE, "bad --connect address '%s' (want ADDR:PORT)",
                               tok);
            free(copy);
            return r;
        }
        *colon = '\0';
        char *host = tok;
        if (host[0] == '[' && colon[-1] == ']') {
            host++;
            colon[-1] = '\0';
        }
        struct cb_try *c = &t[n++];
        snprintf(c->text, sizeof(c->text), "%s:%s", tok, colon + 1);
        c->fd = -1;
        c->err = 0;
        c->why[0] = '\0';
        struct addrinfo hints, *ai = NULL;
        memset(&hints, 0, sizeof(hints));
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_NUMERICSERV;
        int gr = getaddrinfo(host, colon + 1, &hints, &ai);
        if (gr != 0 || !ai) { /* not EADDRNOTAVAIL: "Cannot assign requested address"
                               * sent people looking at this machine's addresses */
            snprintf(c->why, sizeof(c->why), "cannot resolve '%.100s': %s", host,
                     gr == EAI_SYSTEM ? strerror(errno) : gr ? gai_strerror(gr) : "no address");
            c->err = EHOSTUNREACH;
            if (ai)
                freeaddrinfo(ai);
            continue;
        }
        c->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (c->fd < 0) {
            c->err = errno;
        } else if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
            c->err = errno;
            close(c->fd);
            c->fd = -1;
        }
        freeaddrinfo(ai);
    }
    free(copy);
    if (!n)
        return dsl_seterr(err, DSL_EUSAGE, "empty --connect address list");
    return n;
}

/*
 * Connect to the first address of hostports that answers, within deadline; with retry,
 * refused or unreachable addresses are tried again every 0.2 s (no-ssh agents
 * may come up before their coordinator). Then send seal's hello. 0 with *fd_out set.
 */
static int dial(const char *hostports, double deadline, int retry, int *fd_out,
                struct dsl_seal *seal, char *err)
{
    struct cb_try t[CB_MAX_ADDRS];
    struct pollfd pf[CB_MAX_ADDRS];
    int n, winner = -1, r;
    struct dsl_dynbuf why;
    dsl_dynbuf_init(&why, DSL_ERR_LEN);
again:
    n = start_tries(hostports, t, CB_MAX_ADDRS, err);
    if (n < 0) {
        dsl_dynbuf_release(&why);
        return n;
    }
    double round_end = retry ? dsl_now() + 2.0 : deadline;
    if (round_end > deadline)
        round_end = deadline;
    while (winner < 0) {
        int live = 0;
        for (int i = 0; i < n; i++) {
            pf[i].fd = t[i].fd;
            pf[i].events = POLLOUT;
            pf[i].revents = 0;
            live += t[i].fd >= 0;
        }
        double left = round_end - dsl_now();
        if (!live || left <= 0)
            break;
        int pr = poll(pf, (nfds_t)n, (int)(left * 1000) + 1);
        if (pr < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n && pr > 0; i++) {
            if (!pf[i].revents || t[i].fd < 0)
                continue;
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            getsockopt(t[i].fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
            if (soerr == 0 && winner < 0) {
                winner = i;
                continue;
            }
            t[i].err = soerr ? soerr : ECONNREFUSED;
            close(t[i].fd);
            t[i].fd = -1;
        }
    }
    /* report every address and why it failed */
    dsl_dynbuf_reset(&why);
    for (int i = 0; i < n; i++) {
        if (i == winner)
            continue;
        if (winner < 0)
            dsl_dynbuf_addf(&why, "%s%s: %s", why.len ? "; " : "", t[i].text,
                            t[i].why[0] ? t[i].why
                            : t[i].err  ? strerror(t[i].err)
                                        : "timed out");
        if (t[i].fd >= 0)
            close(t[i].fd);
    }
    if (winner < 0 && retry && dsl_now() + 0.2 < deadline) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        goto again;
    }
    if (winner < 0) {
        r = dsl_seterr(err, DSL_ECONNECT, "no address answered (%s)",
                       dsl_dynbuf_str(&why));
        goto out;
    }
    int fd = t[winner].fd;
    dsl_net_set_nonblock(fd, 0);
    dsl_net_set_nodelay(fd);
    if ((r = dsl_net_write_all(fd, seal->out.buf, seal->out.len, deadline)) < 0) {
        close(fd);
        dsl_seterr(err, DSL_ECONNECT, "cannot send the hello to %s: %s", t[winner].text,
                   dsl_strerror(r));
        r = DSL_ECONNECT;
        goto out;
    }
    dsl_dynbuf_reset(&seal->out);
    *fd_out = fd;
    r = 0;
out:
    dsl_dynbuf_release(&why);
    return r;
}

int dsl_agent_cb_dial(const char *hostports, const char *launcher_key, int index,
                      double timeout_s, int key_fd, int *fd_out, struct dsl_seal *seal,
                      char *err)
{
    *fd_out = -1;
    memset(seal, 0, sizeof(*seal));
    seal->state = DSL_SEAL_FAILED;
    unsigned char lpub[DSL_SEAL_KEY_LEN], apriv[DSL_SEAL_KEY_LEN], apub[DSL_SEAL_KEY_LEN];
    if (!launcher_key || dsl_seal_key_parse(launcher_key, strlen(launcher_key), lpub) < 0)
        return dsl_seterr(err, DSL_EUSAGE, "bad --launcher-key (want %d hex digits)",
                          2 * DSL_SEAL_KEY_LEN);
    if (index < 0 || index > 99999)
        return dsl_seterr(err, DSL_EUSAGE, "bad --connect-index %d", index);
    int r = dsl_seal_keypair(apriv, apub, err);
    if (r < 0)
        return r;
    r = dsl_seal_init_agent(seal, apriv, lpub, NULL);
    memset(apriv, 0, sizeof(apriv));
    if (r < 0)
        return dsl_seterr(err, r, "%s", seal->err);
    /* the key line goes the authentic way (ssh, mpirun) before the socket is dialled */
    char hex[2 * DSL_SEAL_KEY_LEN + 1], line[64 + 2 * DSL_SEAL_KEY_LEN];
    dsl_seal_key_hex(apub, hex);
    int len = snprintf(line, sizeof(line), DSL_CB_KEY_LINE "%d %s\n", index, hex);
    for (int off = 0; off < len;) { /* a pipe or a pty: write(), not send() */
        ssize_t w = write(key_fd, line + off, (size_t)(len - off));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return dsl_seterr(err, DSL_ECONNECT, "cannot write the agent's key line to stdout: "
                              "%s", w < 0 ? strerror(errno) : "short write");
        off += (int)w;
    }
    return dial(hostports, dsl_now() + timeout_s, 0, fd_out, seal, err);
}

int dsl_agent_cb_dial_keyed(const char *hostports, const unsigned char apriv[DSL_SEAL_KEY_LEN],
                            const unsigned char lpub[DSL_SEAL_KEY_LEN], double deadline,
                            int retry, int *fd_out, struct dsl_seal *seal, char *err)
{
    *fd_out = -1;
    memset(seal, 0, sizeof(*seal));
    seal->state = DSL_SEAL_FAILED;
    int r = dsl_seal_init_agent(seal, apriv, lpub, NULL);
    if (r < 0)
        return dsl_seterr(err, r, "%s", seal->err);
    return dial(hostports, deadline, retry, fd_out, seal, err);
}

/* ---- launcher side ---- */

struct cb_pending {
    int fd;
    double t_accept;
    int parked; /* a complete hello with a key nobody expects yet; out of the epoll set */
    unsigned char key[DSL_SEAL_KEY_LEN]; /* once parked */
};

struct cb_expect {
    unsigned char key[DSL_SEAL_KEY_LEN];
    int fd;    /* -1 until its agent arrived */
    int ready; /* eventfd, readable once fd arrived; -1 if none could be made */
};

struct dsl_cb_listener {
    int lfd, epfd;
    int strict;        /* a hello with no expected key is refused at once */
    int nrefused;      /* strict: hellos refused */
    char refused_from[64]; /* strict: the address of the last one */
    char *connect_arg;
    struct cb_pending *pending;
    int npending, apending;
    struct cb_expect *expect;
    int nexpect, aexpect;
};

/* "a:P,b:P,...,127.0.0.1:P": addresses that are up, loopback last. */
static char *all_addrs(int port)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 8192);
    struct ifaddrs *ifa0 = NULL;
    if (getifaddrs(&ifa0) == 0) {
        for (int pass = 0; pass < 2; pass++)
            for (struct ifaddrs *ifa = ifa0; ifa; ifa = ifa->ifa_next) {
                if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_INET ||
                    !(ifa->ifa_flags & IFF_UP))
                    continue;
                if (((ifa->ifa_flags & IFF_LOOPBACK) != 0) != (pass == 1))
                    continue;
                char text[INET_ADDRSTRLEN];
                const struct sockaddr_in *sin = (const void *)ifa->ifa_addr;
                inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
                dsl_dynbuf_addf(&b, "%s%s:%d", b.len ? "," : "", text, port);
            }
        freeifaddrs(ifa0);
    }
    if (!b.len)
        dsl_dynbuf_addf(&b, "127.0.0.1:%d", port);
    char *s = dsl_xstrdup(dsl_dynbuf_str(&b));
    dsl_dynbuf_release(&b);
    return s;
}

int dsl_cb_listener_open(struct dsl_cb_listener **out, const char *bind_addr, char *err)
{
    return dsl_cb_listener_open_at(out, bind_addr, 0, err);
}

void dsl_cb_listener_strict(struct dsl_cb_listener *l)
{
    l->strict = 1;
}

int dsl_cb_listener_refused(const struct dsl_cb_listener *l, const char **from)
{
    if (from)
        *from = l->refused_from;
    return l->nrefused;
}

int dsl_cb_listener_open_at(struct dsl_cb_listener **out, const char *bind_addr, int port,
                            char *err)
{
    *out = NULL;
    struct dsl_cb_listener *l = dsl_xcalloc(1, sizeof(*l));
    l->epfd = -1;
    int r;
    l->lfd = dsl_net_listen(bind_addr, port, 512, err);
    if (l->lfd < 0) {
        r = l->lfd;
        goto fail;
    }
    if ((r = dsl_net_set_nonblock(l->lfd, 1)) < 0) {
        dsl_seterr(err, r, "cannot make the connect-back listener non-blocking");
        goto fail;
    }
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = l->lfd};
    if (l->epfd < 0 || epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->lfd, &ev) < 0) {
        r = dsl_seterr(err, -errno, "cannot create an epoll set: %s", strerror(errno));
        goto fail;
    }
    int bound = dsl_net_local_port(l->lfd);
    if (bind_addr && bind_addr[0])
        l->connect_arg = strchr(bind_addr, ':') ? dsl_xasprintf("[%s]:%d", bind_addr, bound)
                                                : dsl_xasprintf("%s:%d", bind_addr, bound);
    else
        l->connect_arg = all_addrs(bound);
    *out = l;
    return 0;
fail:
    dsl_cb_listener_free(l);
    return r;
}

void dsl_cb_listener_free(struct dsl_cb_listener *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->npending; i++)
        close(l->pending[i].fd);
    for (int i = 0; i < l->nexpect; i++) {
        if (l->expect[i].fd >= 0)
            close(l->expect[i].fd);
        if (l->expect[i].ready >= 0)
            close(l->expect[i].ready);
    }
    if (l->lfd >= 0)
        close(l->lfd);
    if (l->epfd >= 0)
        close(l->epfd);
    free(l->pending);
    free(l->expect);
    free(l->connect_arg);
    free(l);
}

const char *dsl_cb_listener_connect_arg(const struct dsl_cb_listener *l)
{
    return l->connect_arg;
}

int dsl_cb_listener_pollfd(const struct dsl_cb_listener *l)
{
    return l->epfd;
}

static int find_expect(struct dsl_cb_listener *l, const unsigned char *key)
{
    for (int i = 0; i < l->nexpect; i++)
        if (!CRYPTO_memcmp(l->expect[i].key, key, DSL_SEAL_KEY_LEN))
            return i;
    return -1;
}

static void drop_expect(struct dsl_cb_listener *l, int i)
{
    if (l->expect[i].ready >= 0)
        close(l->expect[i].ready);
    l->expect[i] = l->expect[--l->nexpect];
}

static void drop_pending(struct dsl_cb_listener *l, int i, int close_it)
{
    if (!l->pending[i].parked)
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, l->pending[i].fd, NULL);
    if (close_it)
        close(l->pending[i].fd);
    l->pending[i] = l->pending[--l->npending];
}

/* Hand pending socket i to the owner of key, if one waits for it; 1 if handed over. */
static int hand_over(struct dsl_cb_listener *l, int i, const unsigned char *key)
{
    int e = find_expect(l, key);
    if (e < 0 || l->expect[e].fd >= 0)
        return 0;
    l->expect[e].fd = l->pending[i].fd;
    if (l->expect[e].ready >= 0)
        (void)eventfd_write(l->expect[e].ready, 1);
    drop_pending(l, i, 0);
    return 1;
}

int dsl_cb_listener_expect(struct dsl_cb_listener *l, const unsigned char key[DSL_SEAL_KEY_LEN])
{
    DSL_ALLOC_GROW(l->expect, l->nexpect, l->aexpect);
    struct cb_expect *e = &l->expect[l->nexpect++];
    memcpy(e->key, key, DSL_SEAL_KEY_LEN);
    e->fd = -1;
    e->ready = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int ready = e->ready >= 0 ? e->ready : -errno;
    for (int i = l->npending - 1; i >= 0; i--) /* its hello may be here already */
        if (l->pending[i].parked &&
            !CRYPTO_memcmp(l->pending[i].key, key, DSL_SEAL_KEY_LEN) &&
            hand_over(l, i, l->pending[i].key))
            break;
    return ready;
}

void dsl_cb_listener_cancel(struct dsl_cb_listener *l, const unsigned char key[DSL_SEAL_KEY_LEN])
{
    int i = find_expect(l, key);
    if (i < 0)
        return;
    if (l->expect[i].fd >= 0)
        close(l->expect[i].fd);
    drop_expect(l, i);
}

/*
 * Look at what a pending socket has sent, without consuming it: the connection's seal
 * reads the hello itself. 1: done with it (handed over, parked or closed).
 */
static int read_hello(struct dsl_cb_listener *l, int i)
{
    struct cb_pending *p = &l->pending[i];
    unsigned char buf[DSL_SEAL_HELLO_LEN];
    ssize_t r = recv(p->fd, buf, sizeof(buf), MSG_PEEK);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (r <= 0) {
        drop_pending(l, i, 1);
        return 1;
    }
    int h = dsl_seal_hello_key(buf, (size_t)r, p->key);
    if (h < 0) {
        drop_pending(l, i, 1);
        return 1;
    }
    if (h == 0)
        return 0;
    if (hand_over(l, i, p->key))
        return 1;
    if (l->strict) { /* every key is known up front: a stranger, or a wrong secret */
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        l->nrefused++;
        if (getpeername(p->fd, (struct sockaddr *)&ss, &sl) == 0 &&
            getnameinfo((struct sockaddr *)&ss, sl, l->refused_from, sizeof(l->refused_from),
                        NULL, 0, NI_NUMERICHOST) != 0)
            snprintf(l->refused_from, sizeof(l->refused_from), "an unknown address");
        drop_pending(l, i, 1);
        return 1;
    }
    /* not expected (yet): park it, its unread hello would keep epoll readable */
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, p->fd, NULL);
    p->parked = 1;
    return 1;
}

void dsl_cb_listener_service(struct dsl_cb_listener *l)
{
    for (;;) {
        int fd = accept4(l->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            break;
        DSL_ALLOC_GROW(l->pending, l->npending, l->apending);
        struct cb_pending *p = &l->pending[l->npending];
        memset(p, 0, sizeof(*p));
        p->fd = fd;
        p->t_accept = dsl_now();
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            continue;
        }
        l->npending++;
    }
    double now = dsl_now();
    for (int i = l->npending - 1; i >= 0; i--) {
        if (l->pending[i].parked) {
            if (hand_over(l, i, l->pending[i].key))
                continue;
        } else if (read_hello(l, i)) {
            continue;
        }
        if (now - l->pending[i].t_accept > CB_PENDING_TIMEOUT)
            drop_pending(l, i, 1);
    }
}

int dsl_cb_listener_take(struct dsl_cb_listener *l, const unsigned char key[DSL_SEAL_KEY_LEN])
{
    int i = find_expect(l, key);
    if (i < 0 || l->expect[i].fd < 0)
        return -EAGAIN;
    int fd = l->expect[i].fd;
    drop_expect(l, i);
    dsl_net_set_nodelay(fd);
    return fd;
}

/* ---- the listener shared by the connect-back transports of this process ---- */

int dsl_cb_conn_accept(struct dsl_conn *c, struct dsl_cb_listener *l, int *expecting,
                       struct dsl_cb_stream *st, const unsigned char lpriv[DSL_SEAL_KEY_LEN],
                       const unsigned char key[DSL_SEAL_KEY_LEN], int epfd)
{
    if (*expecting && st->fd < 0) {
        int fd = dsl_cb_listener_take(l, key);
        if (fd >= 0) {
            *expecting = 0;
            dsl_cb_stream_init(st, fd, lpriv, key);
            struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
            epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
        }
    }
    if (st->fd < 0)
        return 0;
    char err[DSL_ERR_LEN];
    int h = dsl_cb_stream_handshake(st, c->host, err);
    if (h < 0)
        return dsl_cb_conn_fail(c, h, "%s", err);
    return h;
}

static struct dsl_cb_listener *shared_l;
static int shared_refs;

struct dsl_cb_listener *dsl_cb_shared_get(const char *bind_addr, char *err)
{
    if (!shared_l && dsl_cb_listener_open(&shared_l, bind_addr, err) < 0)
        return NULL;
    shared_refs++;
    return shared_l;
}

void dsl_cb_shared_put(void)
{
    if (shared_refs > 0 && --shared_refs == 0) {
        dsl_cb_listener_free(shared_l);
        shared_l = NULL;
    }
}
