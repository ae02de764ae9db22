/*
 * The rendezvous store's server: a key-value server thread in rank 0 (clients: store.c).
 *
 * Theory of operation. The server is one thread running a poll() loop over a wake-up
 * pipe, the listening socket and every client socket; it never blocks on one client.
 * What a client's bytes mean is store_state.c's (hello, requests, parked GET and WAIT);
 * this file moves the bytes, closes the clients that state marks for closing, and
 * answers the parked ones after every round that changed a key. The client side bounds
 * a parked wait with its own deadline and, when it runs out, drops the connection (the
 * client is unusable afterwards, as a communicator is after a timeout).
 *
 * Strangers. Whoever reaches the port may connect, so nothing a connection does before
 * its hello may cost the job more than a bounded share: each connection has until
 * t_open + hello_timeout (5 s) for a complete hello, and an authenticated client
 * hello_timeout x 6 for a frame it has begun (t_partial); poll() sleeps until the next
 * such deadline and server_expire() drops whoever missed it. Connections owing their
 * hello do not count towards DSL_STORE_MAX_CLIENTS (which counts authenticated ones, refused with
 * "full" at their hello); at most max_unauth of them are held (MAX_UNAUTH, and at most a
 * quarter of RLIMIT_NOFILE, so a flood cannot take the rank's fds), the oldest dropped
 * for each new one. When accept() fails for lack of fds, the oldest unauthenticated
 * connection is dropped and accept retried; with none, the reserve fd (/dev/null, held
 * for this) is closed to accept the waiting connection and close it at once, so the
 * backlog drains instead of keeping the listener readable; failing that the listener
 * is left out of the poll set for a rest (50 ms doubling to 1 s). The counters
 * (struct dsl_store_stats) record every wake-up with nothing done, which is how the
 * tests tell a busy loop from a rest.
 *
 * The listening socket is one the hosting rank inherited (DSLAUNCH_STORE_FD: its agent
 * reserved the master port before any rank started), or bound on MASTER_ADDR when that
 * is an address of this machine, else on every address.
 *
 * Stopping: dsl_store_server_free() writes to the wake-up pipe and joins the thread;
 * dsl_store_server_wait_idle() lets the hosting rank wait for the others to leave first.
 */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "store.h"
#include "dslaunch/common/xalloc.h"
#include "store_proto.h" /* dsl_store_server_wait_idle */
#include "store_state.h"
#include "dslaunch/common/banned.h"

#define MAX_UNAUTH 1024       /* connections still owing their hello (and <= RLIMIT_NOFILE/4) */
#define HELLO_TIMEOUT 5.0     /* seconds from accept to a complete hello */
#define FRAME_FACTOR 6.0      /* an authenticated client's frame: HELLO_TIMEOUT x this */
#define ACCEPT_BATCH 64       /* connections accepted per wake-up */
#define BACKOFF_MIN 0.05      /* seconds the listener rests when no fd is left */
#define BACKOFF_MAX 1.0

struct dsl_store_server {
    struct store_state st;
    int lfd, port;
    int reserve_fd;         /* /dev/null, given up to accept-and-close when no fd is left */
    int wake[2];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int nauth;              /* authenticated clients connected now (under mu) */
    struct dsl_store_stats stats; /* under mu */
    struct store_client *cl;
    size_t ncl, acl;
    size_t nunauth, max_unauth;
    double hello_timeout, frame_timeout;
    double listen_resume;   /* the listener rests (is not polled) until then */
    double backoff;         /* the next rest, doubling while accept keeps failing */
    int debug;
};

#define STAT_INC(sv, field)                                                                \
    do {                                                                                   \
        pthread_mutex_lock(&(sv)->mu);                                                     \
        (sv)->stats.field++;                                                               \
        pthread_mutex_unlock(&(sv)->mu);                                                   \
    } while (0)

static void server_drop(struct dsl_store_server *sv, size_t i)
{
    struct store_client *cl = &sv->cl[i];
    if (cl->out.len) /* best effort: let it read why it was refused */
        (void)!send(cl->fd, cl->out.buf, cl->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (cl->hello) {
        pthread_mutex_lock(&sv->mu);
        sv->nauth--;
        pthread_cond_broadcast(&sv->cv);
        pthread_mutex_unlock(&sv->mu);
    } else {
        sv->nunauth--;
    }
    dsl_store_client_release(cl);
    sv->cl[i] = sv->cl[--sv->ncl];
}

/* Drop the unauthenticated connection that has had longest for its hello. 1 if one went. */
static int server_drop_oldest_unauth(struct dsl_store_server *sv)
{
    size_t best = sv->ncl;
    for (size_t i = 0; i < sv->ncl; i++)
        if (!sv->cl[i].hello && (best == sv->ncl || sv->cl[i].t_open < sv->cl[best].t_open))
            best = i;
    if (best == sv->ncl)
        return 0;
    STAT_INC(sv, dropped_unauth); /* before the peer can see the hang-up */
    server_drop(sv, best);
    return 1;
}

/* After its input was parsed: start, restart or stop the clock of an incomplete frame. */
static void client_mark_partial(struct store_client *cl, int frames, double now)
{
    if (cl->in.len == 0 || cl->pending)
        cl->t_partial = 0;
    else if (frames > 0 || cl->t_partial == 0)
        cl->t_partial = now;
}

/* Parse cl's input; count it as authenticated when its hello was just accepted. */
static int server_process(struct dsl_store_server *sv, struct store_client *cl, double now)
{
    int was_hello = cl->hello;
    pthread_mutex_lock(&sv->mu);
    sv->st.full = sv->nauth >= DSL_STORE_MAX_CLIENTS;
    pthread_mutex_unlock(&sv->mu);
    int frames = dsl_store_client_process(&sv->st, cl);
    if (!was_hello && cl->hello) {
        sv->nunauth--;
        pthread_mutex_lock(&sv->mu);
        sv->nauth++;
        pthread_mutex_unlock(&sv->mu);
    }
    client_mark_partial(cl, frames, now);
    return frames;
}

static void server_answer_parked(struct dsl_store_server *sv, double now)
{
    for (int again = 1; again;) {
        again = 0;
        for (size_t i = 0; i < sv->ncl; i++) {
            struct store_client *cl = &sv->cl[i];
            if (cl->pending && dsl_store_client_answer(&sv->st, cl)) {
                /* it may have more buffered requests */
                if (server_process(sv, cl, now) > 0)
                    again = 1;
            }
        }
    }
}

/* When the client's clock runs out: its hello, or the frame it started. 0: no clock. */
static double client_deadline(const struct dsl_store_server *sv, const struct store_client *cl)
{
    double d = 0;
    if (!cl->hello)
        d = cl->t_open + sv->hello_timeout;
    if (cl->t_partial > 0) {
        double f = cl->t_partial + (cl->hello ? sv->frame_timeout : sv->hello_timeout);
        if (d == 0 || f < d)
            d = f;
    }
    return d;
}

/* Drop every client past its deadline; returns the next deadline (0: none). */
static double server_expire(struct dsl_store_server *sv, double now)
{
    double next = 0;
    for (size_t i = sv->ncl; i-- > 0;) {
        double d = client_deadline(sv, &sv->cl[i]);
        if (d == 0)
            continue;
        if (d <= now) {
            STAT_INC(sv, timed_out);
            server_drop(sv, i);
        } else if (next == 0 || d < next) {
            next = d;
        }
    }
    return next;
}

static void server_rest_listener(struct dsl_store_server *sv, double now)
{
    sv->listen_resume = now + sv->backoff;
    sv->backoff = sv->backoff * 2 > BACKOFF_MAX ? BACKOFF_MAX : sv->backoff * 2;
    STAT_INC(sv, backoffs);
}

/*
 * Accept what is waiting, up to a batch. Out of fds (EMFILE/ENFILE): first the oldest
 * unauthenticated connection makes room; failing that the reserve fd is given up to
 * accept one connection and close it at once (so the backlog drains instead of keeping
 * the listener readable for ever); failing that the listener rests, a little longer
 * each time. Returns 1 if anything changed.
 */
static int server_accept(struct dsl_store_server *sv, double now)
{
    int did = 0;
    if (sv->reserve_fd < 0)
        sv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (int k = 0; k < ACCEPT_BATCH; k++) {
        int fd = accept4(sv->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            int e = errno;
            if (e == EINTR || e == ECONNABORTED)
                continue;
            if (e == EAGAIN || e == EWOULDBLOCK)
                break;
            STAT_INC(sv, accept_failures);
            if ((e == EMFILE || e == ENFILE) && server_drop_oldest_unauth(sv)) {
                did = 1;
                continue;
            }
            if ((e == EMFILE || e == ENFILE) && sv->reserve_fd >= 0) {
                close(sv->reserve_fd);
                fd = accept4(sv->lfd, NULL, NULL, SOCK_CLOEXEC);
                if (fd >= 0) {
                    STAT_INC(sv, shed);
                    close(fd);
                }
                sv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (fd >= 0) {
                    did = 1;
                    continue;
                }
            }
            server_rest_listener(sv, now);
            break;
        }
        did = 1;
        sv->backoff = BACKOFF_MIN;
        dsl_net_set_nodelay(fd);
        if (sv->nunauth >= sv->max_unauth)
            server_drop_oldest_unauth(sv);
        DSL_ALLOC_GROW(sv->cl, sv->ncl, sv->acl);
        struct store_client *cl = &sv->cl[sv->ncl++];
        dsl_store_client_init(cl, fd);
        cl->t_open = now;
        sv->nunauth++;
        STAT_INC(sv, accepted);
    }
    return did;
}

static void *server_main(void *arg)
{
    struct dsl_store_server *sv = arg;
    struct pollfd *pf = NULL;
    size_t apf = 0;
    char buf[65536];

    for (;;) {
        double now = dsl_now();
        double next = server_expire(sv, now);
        int listening = now >= sv->listen_resume;
        if (!listening && (next == 0 || sv->listen_resume < next))
            next = sv->listen_resume;
        int timeout = -1;
        if (next > 0) {
            double ms = (next - now) * 1000.0 + 1.0;
            timeout = ms > 60000.0 ? 60000 : ms < 1.0 ? 1 : (int)ms;
        }
        size_t npf = 2 + sv->ncl;
        if (npf > apf) {
            apf = npf * 2;
            pf = dsl_xreallocarray(pf, apf, sizeof(*pf));
        }
        pf[0] = (struct pollfd){.fd = sv->wake[0], .events = POLLIN};
        pf[1] = (struct pollfd){.fd = listening ? sv->lfd : -1, .events = POLLIN};
        for (size_t i = 0; i < sv->ncl; i++) {
            struct store_client *cl = &sv->cl[i];
            short ev = 0;
            if (cl->in.len < cl->in.max)
                ev |= POLLIN;
            if (cl->out.len)
                ev |= POLLOUT;
            pf[2 + i] = (struct pollfd){.fd = cl->fd, .events = ev};
        }
        int np = poll(pf, (nfds_t)npf, timeout);
        if (np < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[0].revents)
            break;
        if (np == 0)
            continue; /* a deadline: server_expire() acts on it */
        STAT_INC(sv, wakeups);
        now = dsl_now();
        int did = 0;
        /* clients (back to front, so dropping one does not skip another) */
        int changed = 0;
        for (size_t i = sv->ncl; i-- > 0;) {
            struct store_client *cl = &sv->cl[i];
            short rev = pf[2 + i].revents;
            int drop = 0;
            if (rev & POLLOUT) {
                ssize_t w = send(cl->fd, cl->out.buf, cl->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w > 0) {
                    dsl_dynbuf_consume(&cl->out, (size_t)w);
                    did = 1;
                } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                    drop = 1;
                }
            }
            if (!drop && (rev & (POLLIN | POLLHUP | POLLERR))) {
                size_t room = cl->in.max - cl->in.len;
                ssize_t got = recv(cl->fd, buf, room < sizeof(buf) ? room : sizeof(buf),
                                   MSG_DONTWAIT);
                if (got > 0) {
                    did = 1;
                    dsl_dynbuf_add(&cl->in, buf, (size_t)got);
                    if (server_process(sv, cl, now) > 0)
                        changed = 1;
                } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
                    drop = 1;
                }
            }
            if (drop || cl->closing) {
                server_drop(sv, i);
                did = 1;
            }
        }
        if (changed)
            server_answer_parked(sv, now);
        if (listening && (pf[1].revents & POLLIN) && server_accept(sv, now))
            did = 1;
        if (!did)
            STAT_INC(sv, idle_wakeups);
    }
    free(pf);
    return NULL;
}

/* Is fd a listening TCP socket on port? */
static int check_inherited(int fd, int port, char *err)
{
    int acc = 0, type = 0;
    socklen_t len = sizeof(acc);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) < 0)
        return dsl_seterr(err, -errno, "the store's inherited socket (fd %d) is unusable: %s", fd,
                          strerror(errno));
    len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM || !acc)
        return dsl_seterr(err, -EINVAL, "the store's inherited socket (fd %d) is not a listening "
                          "TCP socket", fd);
    int have = dsl_net_local_port(fd);
    if (have != port)
        return dsl_seterr(err, -EINVAL, "the store's inherited socket (fd %d) is on port %d, "
                          "MASTER_PORT is %d", fd, have, port);
    return 0;
}

/*
 * Listen on the master address when it is one of this machine's (so the store is not
 * reachable on every interface), else on all of them: MASTER_ADDR may be a name that
 * resolves elsewhere (a NAT address, a load balancer). NULL/"" addr: all addresses.
 */
static int listen_master(const char *addr, int port, char *err)
{
    if (addr && *addr) {
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        if (getaddrinfo(addr, NULL, &hints, &res) == 0) {
            for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                char num[INET_ADDRSTRLEN];
                const struct sockaddr_in *sin = (const struct sockaddr_in *)ai->ai_addr;
                if (!inet_ntop(AF_INET, &sin->sin_addr, num, sizeof(num)))
                    continue;
                int fd = dsl_net_listen(num, port, 1024, err);
                if (fd >= 0 || fd != -EADDRNOTAVAIL) {
                    freeaddrinfo(res);
                    return fd;
                }
            }
            freeaddrinfo(res);
        }
    }
    return dsl_net_listen(NULL, port, 1024, err);
}

/* Free sv and all it holds, its thread stopped or never started; -1 fds are unset. */
static void server_destroy(struct dsl_store_server *sv)
{
    for (size_t i = 0; i < sv->ncl; i++)
        dsl_store_client_release(&sv->cl[i]);
    free(sv->cl);
    if (sv->lfd >= 0)
        close(sv->lfd);
    if (sv->reserve_fd >= 0)
        close(sv->reserve_fd);
    if (sv->wake[0] >= 0) {
        close(sv->wake[0]);
        close(sv->wake[1]);
    }
    dsl_store_state_release(&sv->st);
    pthread_cond_destroy(&sv->cv);
    pthread_mutex_destroy(&sv->mu);
    free(sv);
}

int dsl_store_server_start(struct dsl_store_server **out, const struct dsl_store_opts *o,
                           char *err)
{
    int r;
    *out = NULL;
    char where[32];
    snprintf(where, sizeof(where), "port %d", o->port);
    if ((r = dsl_store_check_token(o, "start", where, err)) < 0)
        return r;
    struct dsl_store_server *sv = dsl_xcalloc(1, sizeof(*sv));
    sv->wake[0] = sv->wake[1] = -1;
    sv->lfd = sv->reserve_fd = -1;
    sv->st.run_id = dsl_xstrdup(o->run_id ? o->run_id : "");
    sv->st.token = dsl_xstrdup(o->token ? o->token : "");
    sv->hello_timeout = o->hello_timeout_s > 0 ? o->hello_timeout_s : HELLO_TIMEOUT;
    sv->frame_timeout = sv->hello_timeout * FRAME_FACTOR;
    sv->backoff = BACKOFF_MIN;
    sv->debug = o->debug;
    struct rlimit rl;
    sv->max_unauth = MAX_UNAUTH;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur / 4 < sv->max_unauth)
        sv->max_unauth = rl.rlim_cur / 4 < 8 ? 8 : (size_t)(rl.rlim_cur / 4);
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->cv, NULL);
    if (o->inherited_fd > 2) {
        if ((r = check_inherited(o->inherited_fd, o->port, err)) < 0)
            goto out;
        sv->lfd = o->inherited_fd;
        fcntl(sv->lfd, F_SETFD, FD_CLOEXEC);
    } else {
        sv->lfd = listen_master(o->addr, o->port, err);
        if (sv->lfd < 0) {
            r = sv->lfd;
            sv->lfd = -1;
            dsl_seterr(err, r, "cannot start the store on port %d: %s", o->port, dsl_strerror(r));
            goto out;
        }
    }
    sv->port = dsl_net_local_port(sv->lfd);
    dsl_net_set_nonblock(sv->lfd, 1);
    sv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (pipe(sv->wake)) {
        r = dsl_seterr(err, -errno, "store: pipe: %s", strerror(errno));
        goto out;
    }
    fcntl(sv->wake[0], F_SETFD, FD_CLOEXEC);
    fcntl(sv->wake[1], F_SETFD, FD_CLOEXEC);
    if (pthread_create(&sv->thread, NULL, server_main, sv)) {
        r = dsl_seterr(err, -EAGAIN, "store: cannot start the server thread");
        goto out;
    }
    *out = sv;
    return 0;
out:
    server_destroy(sv);
    return r;
}

void dsl_store_server_wait_idle(struct dsl_store_server *sv, double deadline)
{
    pthread_mutex_lock(&sv->mu);
    while (sv->nauth > 0 && dsl_now() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&sv->cv, &sv->mu, &ts);
    }
    pthread_mutex_unlock(&sv->mu);
}

int dsl_store_server_port(const struct dsl_store_server *s)
{
    return s->port;
}

void dsl_store_server_stats(struct dsl_store_server *sv, struct dsl_store_stats *out)
{
    pthread_mutex_lock(&sv->mu);
    *out = sv->stats;
    pthread_mutex_unlock(&sv->mu);
}

void dsl_store_server_free(struct dsl_store_server *sv)
{
    if (!sv)
        return;
    (void)!write(sv->wake[1], "x", 1);
    pthread_join(sv->thread, NULL);
    if (sv->debug) {
        const struct dsl_store_stats *t = &sv->stats;
        fprintf(stderr,
                "store: stats: accepted %lu, wakeups %lu (idle %lu), accept failures %lu, "
                "shed %lu, backoffs %lu, unauthenticated dropped %lu, timed out %lu\n",
                t->accepted, t->wakeups, t->idle_wakeups, t->accept_failures, t->shed,
                t->backoffs, t->dropped_unauth, t->timed_out);
    }
    server_destroy(sv);
}
