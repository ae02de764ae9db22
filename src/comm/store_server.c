/*
 * The rendezvous store's server: a key-value server thread in rank 0 (clients: store.c).
 *
 * Theory of operation. The server is one thread running a poll() loop over a wake-up
 * pipe, the listening socket and every client socket; it never blocks on one client.
 * Each client has a bounded input buffer (one maximal frame) and a bounded output
 * buffer. Input is parsed frame by frame by store_client_process(), which needs no
 * socket (the fuzz target calls it directly). A client must first say HELLO with the
 * protocol version, the job's run id and its token; anything else, a wrong version,
 * job or token, an oversized length or a malformed payload queues one ERR reply and
 * closes that client. GET and WAIT on missing keys park the client (its further input
 * is not parsed) until a SET or ADD makes the keys exist; the client side bounds the
 * wait with its own deadline and, when it runs out, drops the connection (the client
 * is unusable afterwards, as a communicator is after a timeout).
 *
 * Stopping: dsl_store_server_free() writes to the wake-up pipe and joins the thread;
 * dsl_store_server_wait_idle() lets the hosting rank wait for the others to leave first.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "store.h"
#include "dslaunch/common/xalloc.h"
#include "store_proto.h"
#include "dslaunch/common/banned.h"

#define MAX_CLIENTS 4096
#define MAX_KEYS 1000000

/* ---- server state (no sockets) ---- */

struct kv {
    char *key;
    unsigned char *val;
    size_t len;
};

struct client {
    int fd;                /* -1 in the fuzz harness */
    struct dsl_dynbuf in;  /* unparsed input, at most one frame */
    struct dsl_dynbuf out; /* replies not yet written */
    int hello, closing;
    int rank;
    int pending;           /* GET or WAIT parked, or 0 */
    char **keys;           /* parked keys, owned */
    size_t nkeys;
};

struct state {
    char *run_id, *token;
    struct kv *kv;
    size_t nkv, akv;
};

static struct kv *kv_find(struct state *s, const char *key)
{
    for (size_t i = 0; i < s->nkv; i++)
        if (!strcmp(s->kv[i].key, key))
            return &s->kv[i];
    return NULL;
}

static int kv_set(struct state *s, const char *key, const void *val, size_t len)
{
    struct kv *e = kv_find(s, key);
    if (!e) {
        if (s->nkv >= MAX_KEYS)
            return -ENOSPC;
        DSL_ALLOC_GROW(s->kv, s->nkv, s->akv);
        e = &s->kv[s->nkv++];
        e->key = dsl_xstrdup(key);
        e->val = NULL;
    }
    free(e->val);
    e->val = dsl_xmalloc(len ? len : 1);
    memcpy(e->val, val, len);
    e->len = len;
    return 0;
}

static void kv_del(struct state *s, const char *key)
{
    struct kv *e = kv_find(s, key);
    if (!e)
        return;
    free(e->key);
    free(e->val);
    *e = s->kv[--s->nkv];
}

static void state_release(struct state *s)
{
    for (size_t i = 0; i < s->nkv; i++) {
        free(s->kv[i].key);
        free(s->kv[i].val);
    }
    free(s->kv);
    free(s->run_id);
    free(s->token);
    memset(s, 0, sizeof(*s));
}

static void client_init(struct client *cl, int fd)
{
    memset(cl, 0, sizeof(*cl));
    cl->fd = fd;
    cl->rank = -1;
    dsl_dynbuf_init(&cl->in, DSL_STORE_MAX_FRAME + 4);
    /* a parked client can receive at most one value reply at a time */
    dsl_dynbuf_init(&cl->out, 4 * (size_t)DSL_STORE_MAX_FRAME);
}

static void client_clear_pending(struct client *cl)
{
    for (size_t i = 0; i < cl->nkeys; i++)
        free(cl->keys[i]);
    free(cl->keys);
    cl->keys = NULL;
    cl->nkeys = 0;
    cl->pending = 0;
}

static void client_release(struct client *cl)
{
    client_clear_pending(cl);
    dsl_dynbuf_release(&cl->in);
    dsl_dynbuf_release(&cl->out);
    if (cl->fd >= 0)
        close(cl->fd);
    cl->fd = -1;
}

static void reply(struct client *cl, int op, const void *val, size_t len)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, DSL_STORE_MAX_FRAME + 16);
    fr_begin(&b, op);
    if (op == DSL_STORE_VALUE)
        fr_val(&b, val, len);
    fr_end(&b);
    if (dsl_dynbuf_add(&cl->out, b.buf, b.len) < 0)
        cl->closing = 1; /* not reading its replies: drop it */
    dsl_dynbuf_release(&b);
}

/* Queue an ERR and mark the client for closing. Returns -1. */
static int reject(struct client *cl, int reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int reject(struct client *cl, int reason, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1024);
    fr_begin(&b, DSL_STORE_ERR);
    unsigned char rs = (unsigned char)reason;
    dsl_dynbuf_add(&b, &rs, 1);
    fr_str(&b, msg, strlen(msg));
    fr_end(&b);
    dsl_dynbuf_add(&cl->out, b.buf, b.len);
    dsl_dynbuf_release(&b);
    cl->closing = 1;
    return -1;
}

/* Copy a wire string into a C key; NULL if it is empty, too long or holds a NUL. */
static char *key_dup(const unsigned char *p, size_t n)
{
    if (!p || n == 0 || n > DSL_STORE_MAX_KEY || memchr(p, 0, n))
        return NULL;
    return dsl_xstrndup((const char *)p, n);
}

/* A parked GET/WAIT whose keys all exist now gets its reply. Returns 1 if answered. */
static int try_answer(struct state *s, struct client *cl)
{
    for (size_t i = 0; i < cl->nkeys; i++)
        if (!kv_find(s, cl->keys[i]))
            return 0;
    if (cl->pending == DSL_STORE_GET) {
        struct kv *e = kv_find(s, cl->keys[0]);
        reply(cl, DSL_STORE_VALUE, e->val, e->len);
    } else {
        reply(cl, DSL_STORE_OK, NULL, 0);
    }
    client_clear_pending(cl);
    return 1;
}

static int handle_hello(struct state *s, struct client *cl, struct rd *r)
{
    size_t idn, tokn;
    uint32_t magic = rd_u32(r);
    uint32_t ver = rd_u16(r);
    if (r->bad || magic != DSL_STORE_MAGIC)
        return reject(cl, DSL_STORE_R_PROTO, "not a dslaunch store client (bad hello)");
    if (ver != DSL_STORE_VERSION)
        return reject(cl, DSL_STORE_R_VERSION,
                      "store protocol version %u is not supported (this store speaks %d)", ver,
                      DSL_STORE_VERSION);
    const unsigned char *id = rd_str(r, &idn);
    const unsigned char *tok = rd_str(r, &tokn);
    uint32_t rank = rd_u32(r);
    if (r->bad || r->left)
        return reject(cl, DSL_STORE_R_PROTO, "malformed hello");
    if (idn != strlen(s->run_id) || memcmp(id, s->run_id, idn))
        return reject(cl, DSL_STORE_R_JOB, "client of job '%.*s', this store serves job '%s'",
                      (int)(idn > 64 ? 64 : idn), (const char *)id, s->run_id);
    if (tokn != strlen(s->token) || memcmp(tok, s->token, tokn))
        return reject(cl, DSL_STORE_R_TOKEN, "wrong job token");
    cl->hello = 1;
    cl->rank = (int)(rank & 0x7fffffff);
    reply(cl, DSL_STORE_OK, NULL, 0);
    return 0;
}

/* One complete frame (op + payload). Returns 0, or -1 when the client must go. */
static int handle_frame(struct state *s, struct client *cl, int op, struct rd *r)
{
    size_t kn;
    const unsigned char *kp;
    char *key = NULL;
    int ret = 0;

    if (!cl->hello) {
        if (op != DSL_STORE_HELLO)
            return reject(cl, DSL_STORE_R_PROTO, "expected a hello first");
        return handle_hello(s, cl, r);
    }
    switch (op) {
    case DSL_STORE_SET: {
        kp = rd_str(r, &kn);
        uint32_t vn = rd_u32(r);
        const unsigned char *vp = rd_take(r, vn);
        if (r->bad || r->left || !(key = key_dup(kp, kn)))
            return reject(cl, DSL_STORE_R_PROTO, "malformed set");
        if (kv_set(s, key, vp, vn) < 0)
            ret = reject(cl, DSL_STORE_R_FULL, "store is full");
        else
            reply(cl, DSL_STORE_OK, NULL, 0);
        break;
    }
    case DSL_STORE_GET:
    case DSL_STORE_DEL:
        kp = rd_str(r, &kn);
        if (r->bad || r->left || !(key = key_dup(kp, kn)))
            return reject(cl, DSL_STORE_R_PROTO, "malformed %s", op == DSL_STORE_GET ? "get" : "delete");
        if (op == DSL_STORE_DEL) {
            kv_del(s, key);
            reply(cl, DSL_STORE_OK, NULL, 0);
            break;
        }
        cl->pending = DSL_STORE_GET;
        cl->keys = dsl_xcalloc(1, sizeof(char *));
        cl->keys[0] = key;
        cl->nkeys = 1;
        key = NULL;
        try_answer(s, cl);
        break;
    case DSL_STORE_ADD: {
        kp = rd_str(r, &kn);
        const unsigned char *d = rd_take(r, 8);
        if (r->bad || r->left || !(key = key_dup(kp, kn)))
            return reject(cl, DSL_STORE_R_PROTO, "malformed add");
        uint64_t delta = (uint64_t)get32(d) << 32 | get32(d + 4);
        int64_t cur = 0;
        struct kv *e = kv_find(s, key);
        if (e) {
            char tmp[32];
            long v;
            if (e->len && e->len < sizeof(tmp))
                memcpy(tmp, e->val, e->len);
            tmp[e->len < sizeof(tmp) ? e->len : 0] = '\0';
            if (dsl_parse_long(tmp, INT64_MIN, INT64_MAX, &v) < 0) {
                ret = reject(cl, DSL_STORE_R_PROTO, "add: key '%s' does not hold a number", key);
                break;
            }
            cur = v;
        }
        cur = (int64_t)((uint64_t)cur + delta);
        char num[32];
        int nn = snprintf(num, sizeof(num), "%" PRId64, cur);
        if (kv_set(s, key, num, (size_t)nn) < 0) {
            ret = reject(cl, DSL_STORE_R_FULL, "store is full");
            break;
        }
        reply(cl, DSL_STORE_VALUE, num, (size_t)nn);
        break;
    }
    case DSL_STORE_WAIT: {
        uint32_t n = rd_u16(r);
        if (r->bad || n == 0)
            return reject(cl, DSL_STORE_R_PROTO, "malformed wait");
        cl->keys = dsl_xcalloc(n, sizeof(char *));
        cl->pending = DSL_STORE_WAIT;
        for (uint32_t i = 0; i < n; i++) {
            kp = rd_str(r, &kn);
            char *k = key_dup(kp, kn);
            if (!k || r->bad) {
                client_clear_pending(cl);
                return reject(cl, DSL_STORE_R_PROTO, "malformed wait");
            }
            cl->keys[cl->nkeys++] = k;
        }
        if (r->left) {
            client_clear_pending(cl);
            return reject(cl, DSL_STORE_R_PROTO, "malformed wait");
        }
        try_answer(s, cl);
        break;
    }
    default:
        return reject(cl, DSL_STORE_R_PROTO, "unknown request %d", op);
    }
    free(key);
    return ret;
}

/* Parse every complete frame in cl->in (stopping while the client is parked). Returns
 * the number of frames handled, or -1 when the client must be closed. */
static int store_client_process(struct state *s, struct client *cl)
{
    int frames = 0;
    size_t off = 0;
    while (!cl->pending && !cl->closing) {
        size_t have = cl->in.len - off;
        if (have < 4)
            break;
        const unsigned char *p = (const unsigned char *)cl->in.buf + off;
        uint32_t len = get32(p);
        uint32_t max = cl->hello ? DSL_STORE_MAX_FRAME : DSL_STORE_MAX_HELLO;
        if (len == 0 || len > max) {
            reject(cl, DSL_STORE_R_PROTO, "bad frame length %" PRIu32 " (limit %" PRIu32 ")",
                   len, max);
            break;
        }
        if (have - 4 < len)
            break;
        struct rd r = {p + 5, len - 1, 0};
        off += 4 + (size_t)len;
        if (handle_frame(s, cl, p[4], &r) < 0)
            break;
        frames++;
    }
    dsl_dynbuf_consume(&cl->in, off);
    return cl->closing ? -1 : frames;
}

int dsl_store_proto_feed(const uint8_t *data, size_t n)
{
    struct state s = {.run_id = dsl_xstrdup("run"), .token = dsl_xstrdup("tok")};
    struct client cl;
    int frames = 0;
    client_init(&cl, -1);
    /* feed in uneven pieces, as a socket would deliver them */
    size_t piece = 1;
    while (n && !cl.closing) {
        size_t k = n < piece ? n : piece;
        if (dsl_dynbuf_add(&cl.in, data, k) < 0)
            break;
        data += k;
        n -= k;
        piece = piece * 3 + 1;
        int r = store_client_process(&s, &cl);
        if (r < 0)
            break;
        frames += r;
        if (cl.pending)
            client_clear_pending(&cl); /* nobody else will ever set the key */
        dsl_dynbuf_reset(&cl.out);
    }
    client_release(&cl);
    state_release(&s);
    return frames;
}

/* ---- server thread ---- */

struct dsl_store_server {
    struct state st;
    int lfd, port;
    int wake[2];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int nauth;       /* authenticated clients connected now (under mu) */
    struct client *cl;
    size_t ncl, acl;
};

static void server_drop(struct dsl_store_server *sv, size_t i)
{
    struct client *cl = &sv->cl[i];
    if (cl->out.len) /* best effort: let it read why it was refused */
        (void)!send(cl->fd, cl->out.buf, cl->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (cl->hello) {
        pthread_mutex_lock(&sv->mu);
        sv->nauth--;
        pthread_cond_broadcast(&sv->cv);
        pthread_mutex_unlock(&sv->mu);
    }
    client_release(cl);
    sv->cl[i] = sv->cl[--sv->ncl];
}

static void server_answer_parked(struct dsl_store_server *sv)
{
    for (int again = 1; again;) {
        again = 0;
        for (size_t i = 0; i < sv->ncl; i++) {
            struct client *cl = &sv->cl[i];
            if (cl->pending && try_answer(&sv->st, cl)) {
                /* it may have more buffered requests */
                if (store_client_process(&sv->st, cl) > 0)
                    again = 1;
            }
        }
    }
}

static void *server_main(void *arg)
{
    struct dsl_store_server *sv = arg;
    struct pollfd *pf = NULL;
    size_t apf = 0;
    char buf[65536];

    for (;;) {
        size_t npf = 2 + sv->ncl;
        if (npf > apf) {
            apf = npf * 2;
            pf = dsl_xreallocarray(pf, apf, sizeof(*pf));
        }
        pf[0] = (struct pollfd){.fd = sv->wake[0], .events = POLLIN};
        pf[1] = (struct pollfd){.fd = sv->lfd, .events = POLLIN};
        for (size_t i = 0; i < sv->ncl; i++) {
            struct client *cl = &sv->cl[i];
            short ev = 0;
            if (cl->in.len < cl->in.max)
                ev |= POLLIN;
            if (cl->out.len)
                ev |= POLLOUT;
            pf[2 + i] = (struct pollfd){.fd = cl->fd, .events = ev};
        }
        if (poll(pf, (nfds_t)npf, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[0].revents)
            break;
        /* clients (back to front, so dropping one does not skip another) */
        int changed = 0;
        for (size_t i = sv->ncl; i-- > 0;) {
            struct client *cl = &sv->cl[i];
            short rev = pf[2 + i].revents;
            int drop = 0;
            if (rev & POLLOUT) {
                ssize_t w = send(cl->fd, cl->out.buf, cl->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w > 0)
                    dsl_dynbuf_consume(&cl->out, (size_t)w);
                else if (w < 0 && errno != EAGAIN && errno != EINTR)
                    drop = 1;
            }
            if (!drop && (rev & (POLLIN | POLLHUP | POLLERR))) {
                size_t room = cl->in.max - cl->in.len;
                ssize_t got = recv(cl->fd, buf, room < sizeof(buf) ? room : sizeof(buf),
                                   MSG_DONTWAIT);
                if (got > 0) {
                    int was_hello = cl->hello;
                    dsl_dynbuf_add(&cl->in, buf, (size_t)got);
                    if (store_client_process(&sv->st, cl) > 0)
                        changed = 1;
                    if (!was_hello && cl->hello) {
                        pthread_mutex_lock(&sv->mu);
                        sv->nauth++;
                        pthread_mutex_unlock(&sv->mu);
                    }
                } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
                    drop = 1;
                }
            }
            if (drop || cl->closing)
                server_drop(sv, i);
        }
        if (changed)
            server_answer_parked(sv);
        if (pf[1].revents & POLLIN) {
            int fd = accept(sv->lfd, NULL, NULL);
            if (fd >= 0) {
                if (sv->ncl >= MAX_CLIENTS) {
                    close(fd);
                } else {
                    fcntl(fd, F_SETFD, FD_CLOEXEC);
                    dsl_net_set_nonblock(fd, 1);
                    dsl_net_set_nodelay(fd);
                    DSL_ALLOC_GROW(sv->cl, sv->ncl, sv->acl);
                    client_init(&sv->cl[sv->ncl++], fd);
                }
            }
        }
    }
    free(pf);
    return NULL;
}

int dsl_store_server_start(struct dsl_store_server **out, const struct dsl_store_opts *o,
                           char *err)
{
    struct dsl_store_server *sv = dsl_xcalloc(1, sizeof(*sv));
    int r;
    *out = NULL;
    sv->wake[0] = sv->wake[1] = -1;
    sv->st.run_id = dsl_xstrdup(o->run_id ? o->run_id : "");
    sv->st.token = dsl_xstrdup(o->token ? o->token : "");
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->cv, NULL);
    sv->lfd = dsl_net_listen(NULL, o->port, 1024, err);
    if (sv->lfd < 0) {
        r = sv->lfd;
        dsl_seterr(err, r, "cannot start the store on port %d: %s", o->port, dsl_strerror(r));
        goto out;
    }
    sv->port = dsl_net_local_port(sv->lfd);
    dsl_net_set_nonblock(sv->lfd, 1);
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
    if (sv->lfd >= 0)
        close(sv->lfd);
    if (sv->wake[0] >= 0) {
        close(sv->wake[0]);
        close(sv->wake[1]);
    }
    state_release(&sv->st);
    pthread_cond_destroy(&sv->cv);
    pthread_mutex_destroy(&sv->mu);
    free(sv);
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

void dsl_store_server_free(struct dsl_store_server *sv)
{
    if (!sv)
        return;
    (void)!write(sv->wake[1], "x", 1);
    pthread_join(sv->thread, NULL);
    for (size_t i = 0; i < sv->ncl; i++)
        client_release(&sv->cl[i]);
    free(sv->cl);
    close(sv->lfd);
    close(sv->wake[0]);
    close(sv->wake[1]);
    state_release(&sv->st);
    pthread_cond_destroy(&sv->cv);
    pthread_mutex_destroy(&sv->mu);
    free(sv);
}

