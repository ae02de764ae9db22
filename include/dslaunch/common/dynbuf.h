/*
 * A byte buffer with a hard maximum (after curl's dynbuf). An append
 * that would exceed the maximum frees the buffer and returns -ENOSPC, so a runaway
 * remote program cannot exhaust launcher memory. The contents are always
 * NUL-terminated for convenience.
 */
#ifndef DSLAUNCH_DYNBUF_H
#define DSLAUNCH_DYNBUF_H

#include <stddef.h>

struct dsl_dynbuf {
    char *buf;     /* owned; NULL until the first append */
    size_t len;
    size_t alloc;
    size_t max;    /* hard limit on len */
};

void dsl_dynbuf_init(struct dsl_dynbuf *b, size_t max);
int dsl_dynbuf_add(struct dsl_dynbuf *b, const void *data, size_t n);
int dsl_dynbuf_addstr(struct dsl_dynbuf *b, const char *s);
int dsl_dynbuf_addf(struct dsl_dynbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/** Drop the first n bytes (consumed input). */
void dsl_dynbuf_consume(struct dsl_dynbuf *b, size_t n);
void dsl_dynbuf_reset(struct dsl_dynbuf *b);  /* len = 0, keeps memory */
void dsl_dynbuf_release(struct dsl_dynbuf *b);
/**
 * Append the whole file at path. Returns 0, -errno (-EISDIR for a directory),
 * DSL_ENOTREG for a FIFO, socket or device (a FIFO without a writer would block the
 * read forever, a device may never end), or -EFBIG when the file is larger than the
 * buffer's maximum (the buffer is then released). Callers word the message, since only
 * they know what the file is.
 */
int dsl_dynbuf_load_file(struct dsl_dynbuf *b, const char *path);
/**
 * dsl_dynbuf_load_file() of a file the user named, what it is in words ("hostfile"):
 * 0, or the failure's code with err set to "WHAT 'PATH': larger than MAX bytes" or
 * "WHAT 'PATH': not a regular file" (both with code), or "WHAT 'PATH': <strerror>"
 * (with the -errno).
 */
int dsl_dynbuf_load_named(struct dsl_dynbuf *b, const char *path, const char *what, int code,
                          char *err);
/** Contents as a string; "" when empty. Valid until the next modification. */
const char *dsl_dynbuf_str(const struct dsl_dynbuf *b);

#endif
