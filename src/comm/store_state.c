/*
 * The rendezvous store's state: the keys and values, and one client's byte stream parsed
 * into replies, with no sockets (the server thread, store_server.c, owns those; the fuzz
 * target feeds a stream here directly).
 *
 * Theory of operation. Each client has a bounded input buffer (one maximal frame) and a
 * bounded output buffer. Input is parsed frame by frame by dsl_store_client_process().
 * A client must first say HELLO with the protocol version, the job's run id and its
 * token; anything else, a wrong version, job or token, an oversized length or a
 * malformed payload queues one ERR reply and marks the client for closing. GET and WAIT
 * on missing keys park the client (its further input is not parsed) until a SET or ADD
 * makes the keys exist and the server calls dsl_store_client_answer(). A client that
 * does not read its replies is dropped once its output buffer is full.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "store.h"
#include "store_proto.h"
#include "store_state.h"
#include "dslaunch/common/banned.h"

#define MAX_KEYS 1000000

static struct store_kv *kv_find(struct store_state *s, const char *key)
{
    for (size_t i = 0; i < s->nkv; i++)
        if (!strcmp(s->kv[i].key, key))
            return &s->kv[i];
    return NULL;
}

static int kv_set(struct store_state *s, const char *key, const void *val, size_t len)
{
    struct store_kv *e = kv_find(s, key);
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

static void kv_del(struct store_state *s, const char *key)
{
    struct store_kv *e = kv_find(s, key);
    if (!e)
        return;
    free(e->key);
    free(e->val);
    *e = s->kv[--s->nkv];
}

void dsl_store_state_release(struct store_state *s)
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

void dsl_store_client_init(struct store_client *cl, int fd)
{
    memset(cl, 0, sizeof(*cl));
    cl->fd = fd;
    cl->rank = -1;
    dsl_dynbuf_init(&cl->in, DSL_STORE_MAX_FRAME + 4);
    /* a parked client can receive at most one value reply at a time */
    dsl_dynbuf_init(&cl->out, 4 * (size_t)DSL_STORE_MAX_FRAME);
}

static void client_clear_pending(struct store_client *cl)
{
    for (size_t i = 0; i < cl->nkeys; i++)
        free(cl->keys[i]);
    free(cl->keys);
    cl->keys = NULL;
    cl->nkeys = 0;
    cl->pending = 0;
}

void dsl_store_client_release(struct store_client *cl)
{
    client_clear_pending(cl);
    dsl_dynbuf_release(&cl->in);
    dsl_dynbuf_release(&cl->out);
    if (cl->fd >= 0)
        close(cl->fd);
    cl->fd = -1;
}

static void reply(struct store_client *cl, int op, const void *val, size_t len)
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
static int reject(struct store_client *cl, int reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int reject(struct store_client *cl, int reason, const char *fmt, ...)
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

int dsl_store_client_answer(struct store_state *s, struct store_client *cl)
{
    for (size_t i = 0; i < cl->nkeys; i++)
        if (!kv_find(s, cl->keys[i]))
            return 0;
    if (cl->pending == DSL_STORE_GET) {
        struct store_kv *e = kv_find(s, cl->keys[0]);
        reply(cl, DSL_STORE_VALUE, e->val, e->len);
    } else {
        reply(cl, DSL_STORE_OK, NULL, 0);
    }
    client_clear_pending(cl);
    return 1;
}

static int handle_hello(struct store_state *s, struct store_client *cl, struct rd *r)
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
    /* constant time in the bytes of the token (its length, 32 hex digits, is no secret) */
    size_t want = strlen(s->token);
    int same = tokn == want;
    if (CRYPTO_memcmp(tok, s->token, same ? want : 0) != 0)
        same = 0;
    if (!same)
        return reject(cl, DSL_STORE_R_TOKEN, "wrong job token");
    if (s->full)
        return reject(cl, DSL_STORE_R_FULL, "the store has its maximum of %d clients",
                      DSL_STORE_MAX_CLIENTS);
    cl->hello = 1;
    cl->rank = (int)(rank & 0x7fffffff);
    reply(cl, DSL_STORE_OK, NULL, 0);
    return 0;
}

/* One complete frame (op + payload). Returns 0, or -1 when the client must go. */
static int handle_frame(struct store_state *s, struct store_client *cl, int op, struct rd *r)
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
        dsl_store_client_answer(s, cl);
        break;
    case DSL_STORE_ADD: {
        kp = rd_str(r, &kn);
        const unsigned char *d = rd_take(r, 8);
        if (r->bad || r->left || !(key = key_dup(kp, kn)))
            return reject(cl, DSL_STORE_R_PROTO, "malformed add");
        uint64_t delta = (uint64_t)get32(d) << 32 | get32(d + 4);
        int64_t cur = 0;
        struct store_kv *e = kv_find(s, key);
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
        dsl_store_client_answer(s, cl);
        break;
    }
    default:
        return reject(cl, DSL_STORE_R_PROTO, "unknown request %d", op);
    }
    free(key);
    return ret;
}

int dsl_store_client_process(struct store_state *s, struct store_client *cl)
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
    struct store_state s = {.run_id = dsl_xstrdup("run"), .token = dsl_xstrdup("tok")};
    struct store_client cl;
    int frames = 0;
    dsl_store_client_init(&cl, -1);
    /* feed in uneven pieces, as a socket would deliver them */
    size_t piece = 1;
    while (n && !cl.closing) {
        size_t k = n < piece ? n : piece;
        if (dsl_dynbuf_add(&cl.in, data, k) < 0)
            break;
        data += k;
        n -= k;
        piece = piece * 3 + 1;
        int r = dsl_store_client_process(&s, &cl);
        if (r < 0)
            break;
        frames += r;
        if (cl.pending)
            client_clear_pending(&cl); /* nobody else will ever set the key */
        dsl_dynbuf_reset(&cl.out);
    }
    dsl_store_client_release(&cl);
    dsl_store_state_release(&s);
    return frames;
}

int dsl_store_check_token(const struct dsl_store_opts *o, const char *verb, const char *where,
                          char *err)
{
    if ((o->token && *o->token) || o->world_size <= 1 || o->insecure)
        return 0;
    return dsl_seterr(err, DSL_EUSAGE,
                      "refusing to %s an open store: " DSL_ENV_RUN_TOKEN " is not set, so "
                      "anyone who can reach %s could join the job; set it to a secret all "
                      "ranks share (dslaunch does), or " DSL_ENV_STORE_INSECURE
                      "=1 to run without one", verb, where);
}
