/*
 * The sealed socket of a connect-back connection, both ends (connectback.h, seal.h).
 *
 * Theory of operation. Launcher: a connection of the pdsh or openmpi transport learns
 * its agent's public key from the key line in pdsh's or mpirun's output (drain_tail
 * takes those lines out of the output it keeps for messages), registers the key with
 * the listener, and gets the socket whose hello named it. dsl_cb_stream_handshake() then
 * runs the launcher's side of the handshake without blocking (the transport calls it
 * from progress() until it says 1 or fails). Once open, read() returns opened plaintext
 * first and reads the socket only when none is waiting, so the seal's buffers stay
 * bounded by one socket read; write() seals at most one frame per call and keeps what
 * the socket did not take, which read() and write() push out on later calls while
 * pollfd asks for POLLOUT (want_write). Agent: the handshake is blocking (the agent has
 * nothing else to do until it is connected) and bounded by the connect deadline.
 */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dslaunch/remote/connectback.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

/* ---- key lines ---- */

void dsl_cb_keys_init(struct dsl_cb_keys *k, int n)
{
    memset(k, 0, sizeof(*k));
    k->n = n;
    k->key = dsl_xcalloc(n > 0 ? (size_t)n : 1, sizeof(*k->key));
    k->have = dsl_xcalloc(n > 0 ? (size_t)n : 1, 1);
}

void dsl_cb_keys_release(struct dsl_cb_keys *k)
{
    free(k->key);
    free(k->have);
    k->key = NULL;
    k->have = NULL;
    k->n = 0;
}

/* A complete line (without its newline): a key line? Then record it; 1 if it was one. */
static int key_line(struct dsl_cb_keys *k, const char *line, size_t len)
{
    const char *m = memmem(line, len, DSL_CB_KEY_LINE, strlen(DSL_CB_KEY_LINE));
    if (!m)
        return 0;
    const char *p = m + strlen(DSL_CB_KEY_LINE), *end = line + len;
    while (end > p && (end[-1] == '\r' || end[-1] == ' '))
        end--;
    long idx = 0;
    int digits = 0;
    while (p < end && *p >= '0' && *p <= '9' && digits < 6) {
        idx = idx * 10 + (*p++ - '0');
        digits++;
    }
    unsigned char key[DSL_SEAL_KEY_LEN];
    if (!digits || p >= end || *p++ != ' ' ||
        dsl_seal_key_parse(p, (size_t)(end - p), key) < 0)
        return 0;
    if (idx < k->n && !k->have[idx]) {
        memcpy(k->key[idx], key, DSL_SEAL_KEY_LEN);
        k->have[idx] = 1;
    }
    return 1;
}

static void keep(struct dsl_dynbuf *out, size_t max, const char *data, size_t n)
{
    size_t room = max > n ? max - n : 0;
    if (out->len > room)
        dsl_dynbuf_consume(out, out->len - room);
    if (n > max) {
        data += n - max;
        n = max;
    }
    if (dsl_dynbuf_add(out, data, n) < 0)
        dsl_dynbuf_reset(out);
}

/* Split data into lines; key lines go to keys, the rest (and long lines) to out. */
static void scan(struct dsl_cb_keys *k, struct dsl_dynbuf *out, size_t max, const char *data,
                 size_t n)
{
    while (n) {
        const char *nl = memchr(data, '\n', n);
        size_t part = nl ? (size_t)(nl - data) + 1 : n;
        if (k->skipping) {
            keep(out, max, data, part);
        } else if (k->len + part > sizeof(k->line)) { /* too long for a key line */
            keep(out, max, k->line, k->len);
            keep(out, max, data, part);
            k->len = 0;
            k->skipping = 1;
        } else {
            memcpy(k->line + k->len, data, part);
            k->len += part;
            if (nl) {
                if (!key_line(k, k->line, k->len - 1))
                    keep(out, max, k->line, k->len);
                k->len = 0;
            }
        }
        if (nl)
            k->skipping = 0;
        data += part;
        n -= part;
    }
}

void dsl_cb_drain_tail(int *fd, struct dsl_dynbuf *out, size_t max, struct dsl_cb_keys *keys)
{
    char buf[2048];
    while (*fd >= 0) {
        ssize_t n = read(*fd, buf, sizeof(buf));
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            close(*fd); /* also leaves every epoll set it was in */
            *fd = -1;
            if (keys && keys->len) { /* an unfinished last line is output, not a key */
                keep(out, max, keys->line, keys->len);
                keys->len = 0;
            }
            return;
        }
        if (keys)
            scan(keys, out, max, buf, (size_t)n);
        else
            keep(out, max, buf, (size_t)n);
    }
}

/* ---- the launcher's end ---- */

int dsl_cb_stream_init(struct dsl_cb_stream *st, int fd,
                       const unsigned char lpriv[DSL_SEAL_KEY_LEN],
                       const unsigned char apub[DSL_SEAL_KEY_LEN])
{
    st->fd = fd;
    dsl_net_set_nodelay(fd);
    return dsl_seal_init_launcher(&st->seal, lpriv, apub, NULL);
}

/* Send what the seal has queued, without blocking: 0, or -errno of a dead socket. */
static int push(struct dsl_cb_stream *st)
{
    struct dsl_dynbuf *o = &st->seal.out;
    while (o->len) {
        ssize_t w = send(st->fd, o->buf, o->len, MSG_NOSIGNAL);
        if (w > 0) {
            dsl_dynbuf_consume(o, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return 0;
        return w < 0 ? -errno : -EPIPE;
    }
    return 0;
}

/* Read the socket once into the seal: bytes read, 0 at EOF, -EAGAIN, or negative. */
static ssize_t pull(struct dsl_cb_stream *st)
{
    char buf[65536];
    ssize_t r = read(st->fd, buf, sizeof(buf));
    if (r < 0)
        return (errno == EAGAIN || errno == EINTR) ? -EAGAIN : -errno;
    if (r > 0) {
        int f = dsl_seal_feed(&st->seal, buf, (size_t)r);
        if (f < 0)
            return f;
    }
    return r;
}

int dsl_cb_stream_handshake(struct dsl_cb_stream *st, const char *host, char *err)
{
    for (;;) {
        int r = push(st);
        if (r < 0)
            return dsl_seterr(err, DSL_ECONNECT, "agent on '%s' dropped its connection during "
                              "the handshake: %s", host, strerror(-r));
        if (st->seal.state == DSL_SEAL_OPEN)
            return 1;
        ssize_t got = pull(st);
        if (got == -EAGAIN)
            return 0;
        if (got == 0)
            return dsl_seterr(err, DSL_EAUTH, "connection for '%s' closed during the handshake",
                              host);
        if (got < 0 && st->seal.state == DSL_SEAL_FAILED)
            return dsl_seterr(err, (int)got, "connection for '%s' refused: %s", host,
                              st->seal.err);
        if (got < 0)
            return dsl_seterr(err, DSL_ECONNECT, "connection for '%s' failed during the "
                              "handshake: %s", host, strerror((int)-got));
    }
}

ssize_t dsl_cb_stream_read(struct dsl_cb_stream *st, void *buf, size_t n)
{
    if (st->fd < 0)
        return -EIO;
    int r = push(st);
    if (r < 0)
        return r;
    for (;;) {
        size_t k = dsl_seal_read(&st->seal, buf, n);
        if (k)
            return (ssize_t)k;
        if (st->seal.state == DSL_SEAL_FAILED)
            return DSL_EAUTH; /* a held-back frame failed when the reader caught up */
        ssize_t got = pull(st);
        if (got <= 0)
            return got; /* EOF, -EAGAIN, or the error */
    }
}

ssize_t dsl_cb_stream_write(struct dsl_cb_stream *st, const void *buf, size_t n)
{
    if (st->fd < 0)
        return -EPIPE;
    int r = push(st);
    if (r < 0)
        return r;
    if (st->seal.out.len >= DSL_SEAL_FRAME_MAX)
        return -EAGAIN; /* a frame's worth still waits for the socket */
    size_t k = n > DSL_SEAL_FRAME_MAX ? DSL_SEAL_FRAME_MAX : n;
    r = dsl_seal_write(&st->seal, buf, k);
    if (r < 0)
        return r == -EAGAIN ? -EAGAIN : r;
    r = push(st);
    return r < 0 ? r : (ssize_t)k;
}

int dsl_cb_stream_want_write(const struct dsl_cb_stream *st)
{
    return st->fd >= 0 && st->seal.out.len > 0;
}

void dsl_cb_stream_shutdown(struct dsl_cb_stream *st)
{
    if (st->fd < 0)
        return;
    double deadline = dsl_now() + 2.0;
    while (st->seal.out.len && push(st) == 0 && st->seal.out.len &&
           dsl_net_wait(st->fd, POLLOUT, deadline) >= 0)
        ;
    shutdown(st->fd, SHUT_WR);
}

void dsl_cb_stream_close(struct dsl_cb_stream *st)
{
    if (st->fd >= 0) {
        close(st->fd);
        dsl_seal_release(&st->seal);
    }
    st->fd = -1;
}

/* ---- the agent's end ---- */

int dsl_agent_cb_handshake(int fd, struct dsl_seal *seal, double deadline, char *err)
{
    if (dsl_net_write_all(fd, seal->out.buf, seal->out.len, deadline) < 0)
        return dsl_seterr(err, DSL_ECONNECT, "cannot send the hello to the launcher");
    dsl_dynbuf_reset(&seal->out);
    unsigned char reply[64];
    int r = dsl_net_read_all(fd, reply, sizeof(reply), deadline);
    if (r < 0)
        return dsl_seterr(err, r == DSL_ETIMEDOUT ? DSL_ETIMEDOUT : DSL_EAUTH,
                          "the launcher did not answer the handshake (%s)", dsl_strerror(r));
    if (dsl_seal_feed(seal, reply, sizeof(reply)) < 0 || seal->state != DSL_SEAL_OPEN)
        return dsl_seterr(err, DSL_EAUTH, "connect-back refused: %s",
                          seal->err[0] ? seal->err : "handshake incomplete");
    if (dsl_net_write_all(fd, seal->out.buf, seal->out.len, deadline) < 0)
        return dsl_seterr(err, DSL_ECONNECT, "cannot send the handshake's confirm");
    dsl_dynbuf_reset(&seal->out);
    return 0;
}

int dsl_cb_conn_pollfd(const struct dsl_conn *c, const struct dsl_cb_stream *st, int wait_fd,
                       short *events)
{
    *events = POLLIN;
    if (!st || c->state == DSL_CONN_FAILED)
        return -1;
    if (c->state != DSL_CONN_OPEN)
        return wait_fd;
    if (dsl_cb_stream_want_write(st))
        *events |= POLLOUT;
    return st->fd;
}

ssize_t dsl_cb_conn_read(struct dsl_conn *c, struct dsl_cb_stream *st, void *buf, size_t n)
{
    if (!st || st->fd < 0)
        return -EIO;
    ssize_t r = dsl_cb_stream_read(st, buf, n);
    if (r < 0 && r != -EAGAIN && st->seal.state == DSL_SEAL_FAILED)
        snprintf(c->err, sizeof(c->err), "sealed channel to '%.100s': %.300s", c->host,
                 st->seal.err);
    if (r == 0)
        c->state = DSL_CONN_CLOSED;
    return r;
}

ssize_t dsl_cb_conn_write(struct dsl_cb_stream *st, const void *buf, size_t n)
{
    return st ? dsl_cb_stream_write(st, buf, n) : -EPIPE;
}

void dsl_cb_conn_close_write(struct dsl_cb_stream *st)
{
    if (st)
        dsl_cb_stream_shutdown(st);
}
