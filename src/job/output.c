/*
 * The launcher's console output: rank lines and the launcher's own messages, on stdout
 * and stderr, without ever blocking the job's loop.
 *
 * Theory of operation. The launcher is one thread that also sends keepalives and
 * supervises every node, so a write that waits for a reader (a paused pager, ^S on a
 * terminal, a pipe into a program that reads late) would stop all of it. Every line is
 * therefore queued for its destination and written only as far as the destination
 * takes it now; the job's poll loop waits for POLLOUT on destinations with a backlog.
 * How "without waiting" is done depends on what the fd is (fstat at open):
 *
 *   pipe, FIFO, terminal    our own open file description of the same object, opened
 *                           through /proc/self/fd/N with O_NONBLOCK. O_NONBLOCK lives
 *                           on the open file description, which stdout shares with the
 *                           user's shell (a terminal) or the next program of a pipeline,
 *                           so setting it on fd 1 itself would leak into them; the
 *                           reopen is private and is simply closed at the end.
 *   the same, no /proc      poll(POLLOUT, 0) before each write of at most PIPE_BUF
 *                           bytes: POLLOUT on a pipe means a free buffer slot, which
 *                           such a write fits without waiting (we are its only writer
 *                           at that instant; a terminal may still take a moment).
 *   socket                  send(MSG_DONTWAIT), which does not touch the fd's flags.
 *   regular file, block     written straight away: these never wait for a reader.
 *
 * When stdout and stderr are the same file (2>&1, or one terminal), both streams share
 * one queue, so their order is kept and a line is never cut by the other stream's.
 *
 * Memory: the bytes queued in all destinations together stay within the budget (or one
 * line, when the queues are empty). A rank line that does not fit (after trying to
 * write) is dropped whole and counted, never split; the launcher's own messages
 * (errors, the summary) are few and always queued.
 * --log-dir files are written directly by the job, so they hold every line regardless.
 *
 * A write failing with EPIPE means the reader went away (`| head -3`): the destination
 * is marked broken, its queue is discarded, and reader_gone tells the job, which stops
 * as a shell pipeline would on SIGPIPE. Any other write error just breaks the
 * destination. At the end of the job dsl_output_drain() writes what is left, waiting for
 * the reader like any program (by then no rank depends on the loop).
 */
#define _GNU_SOURCE /* O_CLOEXEC, MSG_DONTWAIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "output.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

/* Queued bytes live in a list of blocks of this size, freed as soon as written, so the
 * memory held is what is queued plus at most one block. */
#define BLOCK (64u * 1024)

struct dsl_output_block {
    struct dsl_output_block *next;
    size_t off, len; /* unwritten bytes: data[off, len) */
    char data[BLOCK];
};

static void dest_open(struct dsl_output_dest *d, int fd, const char *name)
{
    memset(d, 0, sizeof(*d));
    d->name = name;
    d->fd = fd;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        d->how = DSL_OUTPUT_DISCARD;
        return;
    }
    if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) {
        d->how = DSL_OUTPUT_BLOCKING;
        return;
    }
    if (S_ISSOCK(st.st_mode)) {
        d->how = DSL_OUTPUT_SOCKET;
        return;
    }
    d->how = DSL_OUTPUT_POLL;
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    int nfd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (nfd < 0)
        return;
    struct stat nst;
    if (fstat(nfd, &nst) < 0 || nst.st_dev != st.st_dev || nst.st_ino != st.st_ino) {
        close(nfd); /* not the same object after all: keep to the fd we were given */
        return;
    }
    d->fd = nfd;
    d->own = 1;
    d->how = DSL_OUTPUT_NONBLOCK;
}

static int same_file(int a, int b)
{
    struct stat sa, sb;
    return a >= 0 && b >= 0 && fstat(a, &sa) == 0 && fstat(b, &sb) == 0 &&
           sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void dsl_output_open(struct dsl_output *o, int out_fd, int err_fd, size_t budget)
{
    memset(o, 0, sizeof(*o));
    o->budget = budget;
    dest_open(&o->dest[0], out_fd, "stdout");
    o->ndest = 1;
    if (!same_file(out_fd, err_fd)) {
        dest_open(&o->dest[1], err_fd, "stderr");
        o->ndest = 2;
    }
}

struct dsl_output_dest *dsl_output_dest_of(struct dsl_output *o, int stream)
{
    return stream == 2 && o->ndest == 2 ? &o->dest[1] : &o->dest[0];
}

size_t dsl_output_queued(const struct dsl_output *o)
{
    size_t n = 0;
    for (int i = 0; i < o->ndest; i++)
        n += o->dest[i].len;
    return n;
}

static void dest_append(struct dsl_output_dest *d, const char *p, size_t n)
{
    while (n) {
        struct dsl_output_block *b = d->tail;
        if (!b || b->len == BLOCK) {
            b = dsl_xmalloc(sizeof(*b));
            b->next = NULL;
            b->off = b->len = 0;
            if (d->tail)
                d->tail->next = b;
            else
                d->head = b;
            d->tail = b;
        }
        size_t k = BLOCK - b->len < n ? BLOCK - b->len : n;
        memcpy(b->data + b->len, p, k);
        b->len += k;
        d->len += k;
        p += k;
        n -= k;
    }
}

static void dest_consume(struct dsl_output_dest *d, size_t n)
{
    while (n && d->head) {
        struct dsl_output_block *b = d->head;
        size_t k = b->len - b->off < n ? b->len - b->off : n;
        b->off += k;
        d->len -= k;
        n -= k;
        if (b->off == b->len) {
            d->head = b->next;
            if (!d->head)
                d->tail = NULL;
            free(b);
        }
    }
}

static void dest_break(struct dsl_output *o, struct dsl_output_dest *d, int err)
{
    d->broken = -err;
    if (err == EPIPE)
        o->reader_gone = 1;
    dest_consume(d, d->len); /* nobody will read it */
}

/* One write without waiting: bytes written, or -1 with errno (EAGAIN: not now). */
static ssize_t dest_write_some(struct dsl_output_dest *d)
{
    const char *p = d->head->data + d->head->off;
    size_t n = d->head->len - d->head->off;
    switch (d->how) {
    case DSL_OUTPUT_NONBLOCK:
    case DSL_OUTPUT_BLOCKING:
        return write(d->fd, p, n);
    case DSL_OUTPUT_SOCKET:
        return send(d->fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    case DSL_OUTPUT_POLL: {
        struct pollfd pf = {.fd = d->fd, .events = POLLOUT};
        int r = poll(&pf, 1, 0);
        if (r < 0)
            return -1;
        if (r == 0) {
            errno = EAGAIN;
            return -1;
        }
        return write(d->fd, p, n > PIPE_BUF ? PIPE_BUF : n);
    }
    case DSL_OUTPUT_DISCARD:
        break;
    }
    return (ssize_t)n;
}

static void dest_flush(struct dsl_output *o, struct dsl_output_dest *d)
{
    while (d->len && !d->broken) {
        ssize_t w = dest_write_some(d);
        if (w > 0) {
            dest_consume(d, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        dest_break(o, d, w < 0 ? errno : EIO);
    }
}

void dsl_output_flush(struct dsl_output *o)
{
    for (int i = 0; i < o->ndest; i++)
        dest_flush(o, &o->dest[i]);
}

int dsl_output_pollfds(const struct dsl_output *o, struct pollfd *pf)
{
    int n = 0;
    for (int i = 0; i < o->ndest; i++) {
        const struct dsl_output_dest *d = &o->dest[i];
        if (d->len && !d->broken &&
            (d->how == DSL_OUTPUT_NONBLOCK || d->how == DSL_OUTPUT_SOCKET ||
             d->how == DSL_OUTPUT_POLL))
            pf[n++] = (struct pollfd){.fd = d->fd, .events = POLLOUT};
    }
    return n;
}

int dsl_output_line(struct dsl_output *o, int stream, const char *prefix, const char *line)
{
    return dsl_output_bytes(o, stream, prefix, line, strlen(line), "\n");
}

int dsl_output_bytes(struct dsl_output *o, int stream, const char *prefix, const char *line,
                     size_t ll, const char *end)
{
    struct dsl_output_dest *d = dsl_output_dest_of(o, stream);
    if (d->broken || d->how == DSL_OUTPUT_DISCARD)
        return 0;
    size_t pl = strlen(prefix), el = strlen(end), n = pl + ll + el;
    if (dsl_output_queued(o) + n > o->budget) {
        dest_flush(o, d);
        if (d->broken)
            return 0;
        /* an empty queue takes any one line, so even a budget of 0 passes what the
         * reader takes at once */
        if (dsl_output_queued(o) && dsl_output_queued(o) + n > o->budget) {
            d->dropped++;
            return 1;
        }
    }
    dest_append(d, prefix, pl);
    dest_append(d, line, ll);
    dest_append(d, end, el);
    return 0;
}

void dsl_output_text(struct dsl_output *o, int stream, const char *text)
{
    struct dsl_output_dest *d = dsl_output_dest_of(o, stream);
    if (d->broken || d->how == DSL_OUTPUT_DISCARD)
        return;
    dest_append(d, text, strlen(text));
}

void dsl_output_drain(struct dsl_output *o)
{
    for (int i = 0; i < o->ndest; i++) {
        struct dsl_output_dest *d = &o->dest[i];
        for (;;) {
            dest_flush(o, d);
            if (!d->len || d->broken)
                break;
            struct pollfd pf = {.fd = d->fd, .events = POLLOUT};
            if (poll(&pf, 1, -1) < 0 && errno != EINTR) {
                dest_break(o, d, errno);
                break;
            }
        }
    }
}

void dsl_output_close(struct dsl_output *o)
{
    dsl_output_drain(o);
    for (int i = 0; i < o->ndest; i++) {
        struct dsl_output_dest *d = &o->dest[i];
        if (d->own)
            close(d->fd);
        dest_consume(d, d->len);
    }
    memset(o, 0, sizeof(*o));
}
