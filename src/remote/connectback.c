/*
 * Connect-back: agents reach the launcher over TCP instead of stdin/stdout.
 *
 * Theory of operation (launcher side). One listening socket and an epoll set holding
 * it and every accepted socket whose first line has not arrived yet ("pending"). The
 * fan-out loop polls the epoll fd (dsl_cb_listener_pollfd) among its others; whenever
 * it is readable, service() accepts what is waiting and reads first lines without
 * blocking. A complete line "DSLCB1 <token>" whose token is expected moves the socket
 * into that token's slot and makes the token's eventfd ("ready fd", given out by
 * expect()) readable, where the owning connection picks it up with take(). Whoever
 * called service(), every owner whose socket it set aside is woken through its own
 * ready fd: the listener's epoll fd is drained by the one service() and cannot wake
 * the others. Any
 * other first line, a line longer than CB_LINE_MAX, EOF, or silence for
 * CB_PENDING_TIMEOUT seconds closes the socket, so a port scanner or a stray client
 * can neither stall the loop nor hold resources. Tokens are compared in constant time
 * and used once.
 *
 * The listener is shared by every connect-back connection of the process
 * (dsl_cb_shared_get), and the pieces both such transports need (spawning pdsh or
 * mpirun, keeping the tail of its output, their ssh options, the socket's read/write)
 * live here once.
 *
 * Agent side: every address of the --connect list is connected non-blocking at once;
 * the first that completes wins (an unroutable address of a multi-homed launcher fails
 * at once or loses the race instead of costing a timeout each).
 */
#define _GNU_SOURCE /* accept4, pipe2 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/remote/connectback.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define CB_MAGIC "DSLCB1 "
#define CB_LINE_MAX 128
#define CB_PENDING_TIMEOUT 10.0
#define CB_MAX_ADDRS 32

/* ---- agent side ---- */

struct cb_try {
    int fd;
    char text[300];
    int err; /* errno of a failed attempt, 0 while in flight or unused */
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
        struct addrinfo hints, *ai = NULL;
        memset(&hints, 0, sizeof(hints));
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_NUMERICSERV;
        if (getaddrinfo(host, colon + 1, &hints, &ai) != 0 || !ai) {
            c->err = EADDRNOTAVAIL;
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

int dsl_agent_connect_back_timeout(const char *hostports, const char *token,
                                   double timeout_s, int *fd_out, char *err)
{
    *fd_out = -1;
    struct cb_try t[CB_MAX_ADDRS];
    int n = start_tries(hostports, t, CB_MAX_ADDRS, err);
    if (n < 0)
        return n;
    double deadline = dsl_now() + timeout_s;
    int winner = -1;
    struct pollfd pf[CB_MAX_ADDRS];
    while (winner < 0) {
        int live = 0;
        for (int i = 0; i < n; i++) {
            pf[i].fd = t[i].fd;
            pf[i].events = POLLOUT;
            pf[i].revents = 0;
            live += t[i].fd >= 0;
        }
        double left = deadline - dsl_now();
        if (!live || left <= 0)
            break;
        int r = poll(pf, (nfds_t)n, (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n && r > 0; i++) {
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
    struct dsl_dynbuf why;
    dsl_dynbuf_init(&why, DSL_ERR_LEN);
    for (int i = 0; i < n; i++) {
        if (i == winner)
            continue;
        if (winner < 0)
            dsl_dynbuf_addf(&why, "%s%s: %s", why.len ? "; " : "", t[i].text,
                            t[i].err ? strerror(t[i].err) : "timed out");
        if (t[i].fd >= 0)
            close(t[i].fd);
    }
    int r;
    if (winner < 0) {
        r = dsl_seterr(err, DSL_ECONNECT, "cannot connect back to the launcher (%s)",
                       dsl_dynbuf_str(&why));
        goto out;
    }
    int fd = t[winner].fd;
    dsl_net_set_nonblock(fd, 0);
    dsl_net_set_nodelay(fd);
    char line[CB_LINE_MAX];
    int len = snprintf(line, sizeof(line), CB_MAGIC "%s\n", token);
    if (len <= 0 || (size_t)len >= sizeof(line)) {
        close(fd);
        r = dsl_seterr(err, DSL_EUSAGE, "connect-back token too long");
        goto out;
    }
    if ((r = dsl_net_write_all(fd, line, (size_t)len, deadline)) < 0) {
        close(fd);
        dsl_seterr(err, DSL_ECONNECT, "cannot send the token to %s: %s", t[winner].text,
                   dsl_strerror(r));
        r = DSL_ECONNECT;
        goto out;
    }
    *fd_out = fd;
    r = 0;
out:
    dsl_dynbuf_release(&why);
    return r;
}

int dsl_agent_connect_back(const char *hostport, const char *token, int *fd_out, char *err)
{
    return dsl_agent_connect_back_timeout(hostport, token, 30.0, fd_out, err);
}

/* ---- launcher side ---- */

struct cb_pending {
    int fd;
    double t_accept;
    size_t len;
    char line[CB_LINE_MAX];
};

struct cb_expect {
    char *token;
    int fd;    /* -1 until its agent arrived */
    int ready; /* eventfd, readable once fd arrived; -1 if none could be made */
};

struct dsl_cb_listener {
    int lfd, epfd;
    char *connect_arg;
    struct cb_pending *pending;
    int npending, apending;
    struct cb_expect *expect;
    int nexpect, aexpect;
};

int dsl_cb_token_new(char out[DSL_CB_TOKEN_LEN + 1])
{
    unsigned char raw[DSL_CB_TOKEN_LEN / 2];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t n = read(fd, raw + got, sizeof(raw) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            close(fd);
            return n < 0 ? -errno : -EIO;
        }
        got += (size_t)n;
    }
    close(fd);
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof(raw); i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[DSL_CB_TOKEN_LEN] = '\0';
    return 0;
}

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
    *out = NULL;
    struct dsl_cb_listener *l = dsl_xcalloc(1, sizeof(*l));
    l->epfd = -1;
    int r;
    l->lfd = dsl_net_listen(bind_addr, 0, 512, err);
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
    int port = dsl_net_local_port(l->lfd);
    if (bind_addr && bind_addr[0])
        l->connect_arg = strchr(bind_addr, ':') ? dsl_xasprintf("[%s]:%d", bind_addr, port)
                                                : dsl_xasprintf("%s:%d", bind_addr, port);
    else
        l->connect_arg = all_addrs(port);
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
        free(l->expect[i].token);
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

int dsl_cb_listener_expect(struct dsl_cb_listener *l, const char *token)
{
    DSL_ALLOC_GROW(l->expect, l->nexpect, l->aexpect);
    struct cb_expect *e = &l->expect[l->nexpect++];
    e->token = dsl_xstrdup(token);
    e->fd = -1;
    e->ready = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    return e->ready >= 0 ? e->ready : -errno;
}

static int find_expect(struct dsl_cb_listener *l, const char *token, size_t len)
{
    for (int i = 0; i < l->nexpect; i++) {
        const char *t = l->expect[i].token;
        size_t tl = strlen(t);
        unsigned char diff = (unsigned char)(tl != len);
        for (size_t k = 0; k < tl && k < len; k++)
            diff |= (unsigned char)(t[k] ^ token[k]);
        if (!diff)
            return i;
    }
    return -1;
}

static void drop_expect(struct dsl_cb_listener *l, int i)
{
    if (l->expect[i].ready >= 0)
        close(l->expect[i].ready);
    free(l->expect[i].token);
    l->expect[i] = l->expect[--l->nexpect];
}

void dsl_cb_listener_cancel(struct dsl_cb_listener *l, const char *token)
{
    int i = find_expect(l, token, strlen(token));
    if (i < 0)
        return;
    if (l->expect[i].fd >= 0)
        close(l->expect[i].fd);
    drop_expect(l, i);
}

static void drop_pending(struct dsl_cb_listener *l, int i, int close_it)
{
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, l->pending[i].fd, NULL);
    if (close_it)
        close(l->pending[i].fd);
    l->pending[i] = l->pending[--l->npending];
}

/*
 * Look at what a pending socket has sent. The agent speaks right after its token line,
 * so the line is peeked and then exactly its bytes consumed: whatever follows stays
 * in the socket for the control channel. 1: done with it (handed over or closed).
 */
static int read_first_line(struct dsl_cb_listener *l, int i)
{
    struct cb_pending *p = &l->pending[i];
    ssize_t r = recv(p->fd, p->line, sizeof(p->line), MSG_PEEK);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (r <= 0) {
        drop_pending(l, i, 1);
        return 1;
    }
    p->len = (size_t)r;
    char *nl = memchr(p->line, '\n', p->len);
    if (!nl) {
        if (p->len < sizeof(p->line))
            return 0;
        drop_pending(l, i, 1);
        return 1;
    }
    size_t mlen = strlen(CB_MAGIC);
    size_t linelen = (size_t)(nl - p->line);
    int e = -1;
    if (linelen > mlen && !memcmp(p->line, CB_MAGIC, mlen))
        e = find_expect(l, p->line + mlen, linelen - mlen);
    if (e < 0 || l->expect[e].fd >= 0 ||
        recv(p->fd, p->line, linelen + 1, 0) != (ssize_t)(linelen + 1)) {
        drop_pending(l, i, 1);
        return 1;
    }
    l->expect[e].fd = p->fd;
    if (l->expect[e].ready >= 0)
        (void)eventfd_write(l->expect[e].ready, 1);
    drop_pending(l, i, 0);
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
        if (read_first_line(l, i))
            continue;
        if (now - l->pending[i].t_accept > CB_PENDING_TIMEOUT)
            drop_pending(l, i, 1);
    }
}

int dsl_cb_listener_take(struct dsl_cb_listener *l, const char *token)
{
    int i = find_expect(l, token, strlen(token));
    if (i < 0 || l->expect[i].fd < 0)
        return -EAGAIN;
    int fd = l->expect[i].fd;
    drop_expect(l, i);
    dsl_net_set_nodelay(fd);
    return fd;
}

/* ---- the listener shared by the connect-back transports of this process ---- */

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

/* ---- helpers of the connect-back transports ---- */

char *dsl_cb_ssh_options(const struct dsl_transport_opts *o, const char *prog, char *err)
{
    const char *paths[] = {o->ssh_config, o->ssh_identity, o->known_hosts, o->ssh_user};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (paths[i] && strpbrk(paths[i], " \t\n'\"\\")) {
            dsl_seterr(err, DSL_EUSAGE,
                       "%s cannot pass '%s' to ssh (it contains a space or a quote)", prog,
                       paths[i]);
            return NULL;
        }
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 8192);
    dsl_dynbuf_addstr(&b, "-o BatchMode=yes");
    if (o->ssh_config)
        dsl_dynbuf_addf(&b, " -F %s", o->ssh_config);
    if (o->ssh_port > 0)
        dsl_dynbuf_addf(&b, " -p %d", o->ssh_port);
    if (o->ssh_identity)
        dsl_dynbuf_addf(&b, " -i %s -o IdentitiesOnly=yes", o->ssh_identity);
    if (o->ssh_user)
        dsl_dynbuf_addf(&b, " -l %s", o->ssh_user);
    if (o->known_hosts)
        dsl_dynbuf_addf(&b, " -o UserKnownHostsFile=%s", o->known_hosts);
    dsl_dynbuf_addf(&b, " -o StrictHostKeyChecking=%s", o->accept_new ? "accept-new" : "yes");
    if (o->connect_timeout > 0)
        dsl_dynbuf_addf(&b, " -o ConnectTimeout=%d", (int)o->connect_timeout + 1);
    if (o->keepalive > 0)
        dsl_dynbuf_addf(&b, " -o ServerAliveInterval=%d -o ServerAliveCountMax=2",
                        (int)(o->keepalive / 2) > 0 ? (int)(o->keepalive / 2) : 1);
    char *s = dsl_xstrdup(dsl_dynbuf_str(&b));
    dsl_dynbuf_release(&b);
    return s;
}

/* pdsh and mpirun start with the default SIGPIPE that this process ignores. */
static const int cb_sigdfl[] = {SIGPIPE, 0};

int dsl_cb_spawn(char *const *argv, char *const *env, pid_t *pid, int *outfd, int *pidfd,
                 char *err)
{
    *pid = 0;
    *outfd = *pidfd = -1;
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return dsl_seterr(err, -errno, "cannot create a pipe: %s", strerror(errno));
    struct dsl_child_opts co = {
        .argv = argv, /* path NULL: looked up in PATH */
        .env = env,
        .fd_in = DSL_SPAWN_DEVNULL,
        .fd_out = pipefd[1],
        .fd_err = pipefd[1],
        .new_pgroup = 1,
        .pdeathsig = SIGTERM,
        .sigdfl = cb_sigdfl,
        .setup_exit = 126,
    };
    pid_t child;
    int r = dsl_spawn_child(&co, &child, err);
    close(pipefd[1]);
    if (r < 0) {
        close(pipefd[0]);
        return r;
    }
    fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
    *pid = child;
    *outfd = pipefd[0];
    *pidfd = (int)syscall(SYS_pidfd_open, child, 0);
    return 0;
}

void dsl_cb_drain_tail(int *fd, struct dsl_dynbuf *out, size_t max)
{
    char buf[2048];
    while (*fd >= 0) {
        ssize_t n = read(*fd, buf, sizeof(buf));
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            close(*fd); /* also leaves every epoll set it was in */
            *fd = -1;
            return;
        }
        size_t keep = max > (size_t)n ? max - (size_t)n : 0;
        if (out->len > keep)
            dsl_dynbuf_consume(out, out->len - keep);
        if (dsl_dynbuf_add(out, buf, (size_t)n) < 0)
            dsl_dynbuf_reset(out);
    }
}

ssize_t dsl_cb_sock_read(int fd, void *buf, size_t n)
{
    if (fd < 0)
        return -EIO;
    ssize_t r = read(fd, buf, n);
    if (r < 0)
        return (errno == EAGAIN || errno == EINTR) ? -EAGAIN : -errno;
    return r;
}

ssize_t dsl_cb_sock_write(int fd, const void *buf, size_t n)
{
    if (fd < 0)
        return -EPIPE;
    ssize_t r = send(fd, buf, n, MSG_NOSIGNAL);
    if (r < 0)
        return (errno == EAGAIN || errno == EINTR) ? -EAGAIN : -errno;
    return r;
}

int dsl_cb_reap(pid_t *pid, int *status, int outfd, int *pidfd)
{
    if (*pid > 0 && waitpid(*pid, status, WNOHANG) == *pid)
        *pid = 0;
    if (*pid > 0 && outfd < 0 && *pidfd < 0) {
        /* no pidfd to wake us: it closed its output, so it is exiting; bounded wait */
        for (int i = 0; i < 200 && *pid > 0; i++) {
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
            if (waitpid(*pid, status, WNOHANG) == *pid)
                *pid = 0;
        }
    }
    if (*pid == 0 && *pidfd >= 0) {
        close(*pidfd);
        *pidfd = -1;
    }
    return *pid == 0;
}

int dsl_cb_conn_fail(struct dsl_conn *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    c->state = DSL_CONN_FAILED;
    c->err_code = code;
    return code;
}
