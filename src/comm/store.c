/*
 * The rendezvous store's client side (the server is store_server.c).
 *
 * Theory of operation. Clients are blocking: one request, one reply, every read and
 * write bounded by the store timeout. Connecting retries refused connections with
 * backoff until the timeout, so ranks may start before rank 0's server is up, and so
 * does a hello that was reset, closed or not answered within 10 s (a server shedding a
 * flood, or a listener still waiting for rank 0 to take it over); a refusal is final.
 * A multi-rank store without a token is refused on every rank unless the user asked
 * for one (DSLAUNCH_STORE_INSECURE=1). GET and
 * WAIT block on the server until the keys exist; the client bounds them with its own
 * deadline and, when it runs out, drops the connection (a client is unusable after any
 * failure on its connection, as a communicator is after a timeout). dsl_store_open()
 * on rank 0 also starts the server, and dsl_store_free() there first waits (bounded by
 * the timeout, or by a shorter linger the owner set) until every other client has
 * disconnected, so rank 0 leaving early does not pull the store from under ranks that
 * still need it. The comm sets the linger to 0 once no rank can need the store any
 * more, or after a failure: a peer that is stuck keeps its connection open, and must
 * not keep rank 0 from exiting.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/rankenv.h"
#include "store.h"
#include "dslaunch/common/xalloc.h"
#include "store_proto.h"
#include "store_state.h"
#include "dslaunch/common/banned.h"

/* ---- client ---- */

struct dsl_store {
    int fd;
    char *addr;
    int port;
    int rank, world;
    double timeout_s;
    double linger_s;              /* dsl_store_free waits at most this for the others */
    struct dsl_store_server *srv; /* owned when this rank hosts the store */
    struct dsl_dynbuf req;
    char err[DSL_ERR_LEN];
};

int dsl_store_opts_from_env(struct dsl_store_opts *o, char *err)
{
    struct dsl_rankenv env;
    int r = dsl_rankenv_load(&env, err);
    return r < 0 ? r : dsl_store_opts_from_rankenv(o, &env, err);
}

int dsl_store_opts_from_rankenv(struct dsl_store_opts *o, const struct dsl_rankenv *env,
                                char *err)
{
    const char *s;
    memset(o, 0, sizeof(*o));
    o->addr = env->master_addr;
    if (!o->addr || !*o->addr)
        o->addr = "127.0.0.1";
    o->run_id = env->run_id ? env->run_id : "";
    o->token = env->run_token ? env->run_token : "";
    o->timeout_s = 300;
    o->world_size = env->world_size;
    o->rank = env->rank;
    if (!(o->port = env->master_port))
        return dsl_seterr(err, DSL_EUSAGE, "bad or missing MASTER_PORT '%s'",
                          env->master_port_text ? env->master_port_text : "");
    if ((s = getenv(DSL_ENV_STORE_TIMEOUT)) && *s &&
        (dsl_parse_seconds(s, &o->timeout_s) < 0 || o->timeout_s <= 0))
        return dsl_seterr(err, DSL_EUSAGE, "bad DSLAUNCH_STORE_TIMEOUT '%s'", s);
    if ((s = getenv(DSL_ENV_STORE_INSECURE)) && *s) {
        if (strcmp(s, "0") && strcmp(s, "1"))
            return dsl_seterr(err, DSL_EUSAGE, "bad " DSL_ENV_STORE_INSECURE " '%s' (0 or 1)", s);
        o->insecure = !strcmp(s, "1");
    }
    if ((s = getenv(DSL_ENV_STORE_DEBUG)) && *s)
        o->debug = strcmp(s, "0") != 0;
    /* only the rank that hosts the store serves on the socket its agent reserved */
    if ((s = env->store_fd_text) && *s && o->rank == 0 && !(o->inherited_fd = env->store_fd))
        return dsl_seterr(err, DSL_EUSAGE, "bad " DSL_ENV_STORE_FD " '%s'", s);
    return 0;
}

static int client_fail(struct dsl_store *st, int code, const char *what)
{
    dsl_seterr(st->err, code, "store at '%s:%d': %s", st->addr, st->port, what);
    if (st->fd >= 0) { /* the stream is out of step now: the client is unusable */
        close(st->fd);
        st->fd = -1;
    }
    return code;
}

/* Send the frame in st->req; read one reply by deadline. *val (malloc'd) gets a VALUE
 * payload. */
static int roundtrip_until(struct dsl_store *st, const char *what, void **val, size_t *vlen,
                           double deadline)
{
    unsigned char h[4];
    double t0 = dsl_now();
    int r;
    char msg[DSL_ERR_LEN];

    if (st->fd < 0)
        return dsl_seterr(st->err, DSL_EPEER, "store at '%s:%d': connection lost earlier",
                          st->addr, st->port);
    fr_end(&st->req);
    if ((r = dsl_net_write_all(st->fd, st->req.buf, st->req.len, deadline)) < 0 ||
        (r = dsl_net_read_all(st->fd, h, 4, deadline)) < 0) {
        if (r == DSL_ETIMEDOUT)
            snprintf(msg, sizeof(msg), "%s timed out after %.1f s", what, deadline - t0);
        else
            snprintf(msg, sizeof(msg), "%s failed: %s (the store is gone)", what,
                     dsl_strerror(r));
        return client_fail(st, r == DSL_ETIMEDOUT ? DSL_ETIMEDOUT : DSL_EPEER, msg);
    }
    uint32_t len = get32(h);
    if (len == 0 || len > DSL_STORE_MAX_FRAME + 16)
        return client_fail(st, DSL_EPROTO, "bad reply length");
    unsigned char *body = malloc(len);
    if (!body)
        return client_fail(st, -ENOMEM, "out of memory");
    if ((r = dsl_net_read_all(st->fd, body, len, deadline)) < 0) {
        free(body);
        snprintf(msg, sizeof(msg), "%s: reply cut short: %s", what, dsl_strerror(r));
        return client_fail(st, r == DSL_ETIMEDOUT ? DSL_ETIMEDOUT : DSL_EPEER, msg);
    }
    struct rd rr = {body + 1, len - 1, 0};
    r = 0;
    if (body[0] == DSL_STORE_ERR) {
        const unsigned char *why = rd_take(&rr, 1);
        size_t mn = 0;
        const unsigned char *m = rd_str(&rr, &mn);
        int reason = why ? why[0] : 0;
        snprintf(msg, sizeof(msg), "refused %s: %.*s", what, m ? (int)mn : 0,
                 m ? (const char *)m : "");
        r = reason == DSL_STORE_R_TOKEN     ? DSL_ETOKEN
            : reason == DSL_STORE_R_VERSION ? DSL_EVERSION
            : reason == DSL_STORE_R_JOB     ? DSL_EAUTH
                                            : DSL_EPROTO;
        free(body);
        return client_fail(st, r, msg);
    }
    if (body[0] == DSL_STORE_VALUE && val) {
        uint32_t n = rd_u32(&rr);
        const unsigned char *p = rd_take(&rr, n);
        if (rr.bad || rr.left) {
            free(body);
            return client_fail(st, DSL_EPROTO, "malformed value reply");
        }
        *val = dsl_xmalloc(n + 1);
        memcpy(*val, p, n);
        ((char *)*val)[n] = '\0';
        *vlen = n;
    } else if (body[0] != DSL_STORE_OK || val) {
        free(body);
        return client_fail(st, DSL_EPROTO, "unexpected reply");
    }
    free(body);
    return 0;
}

static int roundtrip(struct dsl_store *st, const char *what, void **val, size_t *vlen)
{
    return roundtrip_until(st, what, val, vlen, dsl_now() + st->timeout_s);
}

#define HELLO_ATTEMPT 10.0 /* seconds one hello may wait for its answer before a retry */

int dsl_store_connect(struct dsl_store **out, const struct dsl_store_opts *o, char *err)
{
    struct dsl_store *st = dsl_xcalloc(1, sizeof(*st));
    int r;
    *out = NULL;
    st->fd = -1;
    st->addr = dsl_xstrdup(o->addr);
    st->port = o->port;
    st->rank = o->rank;
    st->world = o->world_size > 0 ? o->world_size : 1;
    st->timeout_s = o->timeout_s > 0 ? o->timeout_s : 300;
    st->linger_s = st->timeout_s;
    dsl_dynbuf_init(&st->req, DSL_STORE_MAX_FRAME + 16);
    const char *id = o->run_id ? o->run_id : "", *tok = o->token ? o->token : "";
    if (strlen(id) > 1024 || strlen(tok) > 1024) {
        r = dsl_seterr(err, -EINVAL, "run id or token longer than 1024 bytes");
        goto out;
    }
    /*
     * A hello that is reset or closed (a store shedding connections under a flood or
     * out of fds, a listener handed over to rank 0) or not answered in HELLO_ATTEMPT is
     * tried again until the store timeout; a refusal is final.
     */
    double deadline = dsl_now() + st->timeout_s, backoff = 0.05;
    for (int attempt = 1;; attempt++) {
        double left = deadline - dsl_now();
        st->fd = dsl_net_connect(o->addr, o->port, left > 0 ? left : 0.001, err);
        if (st->fd < 0) {
            r = st->fd;
            st->fd = -1;
            goto out;
        }
        unsigned char h[6];
        put32(h, DSL_STORE_MAGIC);
        put16(h + 4, DSL_STORE_VERSION);
        fr_begin(&st->req, DSL_STORE_HELLO);
        dsl_dynbuf_add(&st->req, h, 6);
        fr_str(&st->req, id, strlen(id));
        fr_str(&st->req, tok, strlen(tok));
        put32(h, (uint32_t)o->rank);
        dsl_dynbuf_add(&st->req, h, 4);
        double now = dsl_now();
        double until = now + HELLO_ATTEMPT < deadline ? now + HELLO_ATTEMPT : deadline;
        r = roundtrip_until(st, "hello", NULL, NULL, until);
        if (r == 0)
            break;
        if ((r != DSL_EPEER && r != DSL_ETIMEDOUT) || dsl_now() + backoff >= deadline) {
            if (attempt > 1)
                dsl_seterr(err, r, "%s (after %d attempts)", st->err, attempt);
            else
                dsl_seterr(err, r, "%s", st->err);
            goto out;
        }
        struct timespec ts = {(time_t)backoff, (long)((backoff - (double)(time_t)backoff) * 1e9)};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 1.0 ? 1.0 : backoff * 2;
    }
    *out = st;
    return 0;
out:
    if (st->fd >= 0)
        close(st->fd);
    dsl_dynbuf_release(&st->req);
    free(st->addr);
    free(st);
    return r;
}

int dsl_store_open(struct dsl_store **out, const struct dsl_store_opts *o, char *err)
{
    struct dsl_store_server *sv = NULL;
    int r;
    *out = NULL;
    char where[300];
    snprintf(where, sizeof(where), "%.200s:%d", o->addr ? o->addr : "", o->port);
    if ((r = dsl_store_check_token(o, "use", where, err)) < 0)
        return r;
    if (o->rank == 0 && (r = dsl_store_server_start(&sv, o, err)) < 0)
        return r;
    struct dsl_store_opts co = *o;
    if (sv)
        co.port = dsl_store_server_port(sv);
    if ((r = dsl_store_connect(out, &co, err)) < 0) {
        dsl_store_server_free(sv);
        return r;
    }
    (*out)->srv = sv;
    return 0;
}

void dsl_store_free(struct dsl_store *st)
{
    if (!st)
        return;
    if (st->fd >= 0)
        close(st->fd);
    if (st->srv) {
        if (st->linger_s > 0)
            dsl_store_server_wait_idle(st->srv, dsl_now() + st->linger_s);
        dsl_store_server_free(st->srv);
    }
    dsl_dynbuf_release(&st->req);
    free(st->addr);
    free(st);
}

void dsl_store_set_linger(struct dsl_store *st, double seconds)
{
    st->linger_s = seconds < 0 ? 0 : seconds < st->timeout_s ? seconds : st->timeout_s;
}

static int check_key(struct dsl_store *st, const char *key)
{
    size_t n = key ? strlen(key) : 0;
    if (n == 0 || n > DSL_STORE_MAX_KEY)
        return dsl_seterr(st->err, -EINVAL, "store: bad key (empty or longer than %u bytes)",
                          DSL_STORE_MAX_KEY);
    return 0;
}

int dsl_store_set(struct dsl_store *st, const char *key, const void *val, size_t len)
{
    int r;
    if ((r = check_key(st, key)) < 0)
        return r;
    if (len > DSL_STORE_MAX_FRAME - DSL_STORE_MAX_KEY - 16)
        return dsl_seterr(st->err, -EMSGSIZE, "store: value for '%s' too large (%zu bytes)",
                          key, len);
    fr_begin(&st->req, DSL_STORE_SET);
    fr_str(&st->req, key, strlen(key));
    fr_val(&st->req, val, len);
    return roundtrip(st, "set", NULL, NULL);
}

int dsl_store_get(struct dsl_store *st, const char *key, void **val, size_t *len)
{
    int r;
    char what[64];
    *val = NULL;
    *len = 0;
    if ((r = check_key(st, key)) < 0)
        return r;
    fr_begin(&st->req, DSL_STORE_GET);
    fr_str(&st->req, key, strlen(key));
    snprintf(what, sizeof(what), "get '%.40s'", key);
    return roundtrip(st, what, val, len);
}

int dsl_store_add(struct dsl_store *st, const char *key, int64_t delta, int64_t *result)
{
    unsigned char d[8];
    void *val = NULL;
    size_t n;
    long v;
    int r;
    if ((r = check_key(st, key)) < 0)
        return r;
    put32(d, (uint32_t)((uint64_t)delta >> 32));
    put32(d + 4, (uint32_t)delta);
    fr_begin(&st->req, DSL_STORE_ADD);
    fr_str(&st->req, key, strlen(key));
    dsl_dynbuf_add(&st->req, d, 8);
    if ((r = roundtrip(st, "add", &val, &n)) < 0)
        return r;
    r = dsl_parse_long(val, INT64_MIN, INT64_MAX, &v);
    free(val);
    if (r < 0)
        return dsl_seterr(st->err, DSL_EPROTO, "store: add returned a non-number");
    if (result)
        *result = v;
    return 0;
}

int dsl_store_wait(struct dsl_store *st, const char *const *keys, size_t nkeys)
{
    unsigned char h[2];
    int r;
    if (nkeys == 0)
        return 0;
    if (nkeys > 65535)
        return dsl_seterr(st->err, -EINVAL, "store: too many keys to wait for");
    fr_begin(&st->req, DSL_STORE_WAIT);
    put16(h, (uint32_t)nkeys);
    dsl_dynbuf_add(&st->req, h, 2);
    for (size_t i = 0; i < nkeys; i++) {
        if ((r = check_key(st, keys[i])) < 0)
            return r;
        fr_str(&st->req, keys[i], strlen(keys[i]));
    }
    if (st->req.len > DSL_STORE_MAX_FRAME)
        return dsl_seterr(st->err, -EMSGSIZE, "store: wait request too large");
    return roundtrip(st, "wait", NULL, NULL);
}

int dsl_store_delete(struct dsl_store *st, const char *key)
{
    int r;
    if ((r = check_key(st, key)) < 0)
        return r;
    fr_begin(&st->req, DSL_STORE_DEL);
    fr_str(&st->req, key, strlen(key));
    return roundtrip(st, "delete", NULL, NULL);
}

int dsl_store_barrier(struct dsl_store *st, const char *name)
{
    char key[DSL_STORE_MAX_KEY], done[DSL_STORE_MAX_KEY];
    int64_t n;
    int r;
    snprintf(key, sizeof(key), "barrier/%.900s", name);
    snprintf(done, sizeof(done), "barrier/%.900s/done", name);
    if ((r = dsl_store_add(st, key, 1, &n)) < 0)
        return r;
    if (n == st->world && (r = dsl_store_set(st, done, "1", 1)) < 0)
        return r;
    const char *keys[1] = {done};
    return dsl_store_wait(st, keys, 1);
}

const char *dsl_store_last_error(const struct dsl_store *st)
{
    return st->err;
}
