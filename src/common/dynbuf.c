/* Bounded byte buffers: an append past the hard maximum frees and fails. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

void dsl_dynbuf_init(struct dsl_dynbuf *b, size_t max)
{
    b->buf = NULL;
    b->len = 0;
    b->alloc = 0;
    b->max = max;
}

int dsl_dynbuf_add(struct dsl_dynbuf *b, const void *data, size_t n)
{
    if (n > b->max || b->len > b->max - n) {
        dsl_dynbuf_release(b);
        return -ENOSPC;
    }
    if (b->len + n + 1 > b->alloc) {
        size_t a = b->alloc ? b->alloc : 64;
        while (a < b->len + n + 1)
            a *= 2;
        if (a > b->max + 1)
            a = b->max + 1;
        b->buf = dsl_xrealloc(b->buf, a);
        b->alloc = a;
    }
    if (n)
        memcpy(b->buf + b->len, data, n);
    b->len += n;
    b->buf[b->len] = '\0';
    return 0;
}

int dsl_dynbuf_addstr(struct dsl_dynbuf *b, const char *s)
{
    return dsl_dynbuf_add(b, s, strlen(s));
}

int dsl_dynbuf_addf(struct dsl_dynbuf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n < sizeof(small))
        return dsl_dynbuf_add(b, small, (size_t)n);
    char *big = dsl_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int r = dsl_dynbuf_add(b, big, (size_t)n);
    free(big);
    return r;
}

void dsl_dynbuf_consume(struct dsl_dynbuf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
    } else {
        memmove(b->buf, b->buf + n, b->len - n);
        b->len -= n;
    }
    if (b->buf)
        b->buf[b->len] = '\0';
}

void dsl_dynbuf_reset(struct dsl_dynbuf *b)
{
    b->len = 0;
    if (b->buf)
        b->buf[0] = '\0';
}

void dsl_dynbuf_release(struct dsl_dynbuf *b)
{
    free(b->buf);
    b->buf = NULL;
    b->len = 0;
    b->alloc = 0;
}

int dsl_dynbuf_load_named(struct dsl_dynbuf *b, const char *path, const char *what, int code,
                          char *err)
{
    int r = dsl_dynbuf_load_file(b, path);
    if (r == -EFBIG)
        return dsl_seterr(err, code, "%s '%s': larger than %zu bytes", what, path, b->max);
    if (r == DSL_ENOTREG)
        return dsl_seterr(err, code, "%s '%s': %s", what, path, dsl_strerror(r));
    if (r < 0)
        return dsl_seterr(err, r, "%s '%s': %s", what, path, strerror(-r));
    return 0;
}

const char *dsl_dynbuf_str(const struct dsl_dynbuf *b)
{
    return b->buf ? b->buf : "";
}

int dsl_dynbuf_load_file(struct dsl_dynbuf *b, const char *path)
{
    struct stat st;
    char chunk[65536];
    int r = 0;
    /* O_NONBLOCK: opening a FIFO that has no writer must not wait for one */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto out;
    }
    if (S_ISDIR(st.st_mode)) {
        r = -EISDIR;
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        r = DSL_ENOTREG;
        goto out;
    }
    for (;;) {
        ssize_t got = read(fd, chunk, sizeof(chunk));
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            r = -errno;
            break;
        }
        if (got == 0)
            break;
        if (dsl_dynbuf_add(b, chunk, (size_t)got) < 0) {
            r = -EFBIG;
            break;
        }
    }
out:
    close(fd);
    return r;
}
