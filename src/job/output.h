/*
 * The launcher's console: its stdout and stderr, written without ever blocking the job.
 * Private to src/job/ (and its unit test); output.c says how it works.
 */
#ifndef DSLAUNCH_JOB_OUTPUT_H
#define DSLAUNCH_JOB_OUTPUT_H

#include <poll.h>
#include <stddef.h>

struct dsl_output_block;

/* How a destination is written without blocking (chosen at open from what the fd is). */
enum dsl_output_how {
    DSL_OUTPUT_DISCARD = 0, /* not open: what goes there is lost, as with a closed fd */
    DSL_OUTPUT_NONBLOCK,    /* our own non-blocking open file description of it */
    DSL_OUTPUT_SOCKET,      /* send(MSG_DONTWAIT) */
    DSL_OUTPUT_POLL,        /* poll for POLLOUT, then at most PIPE_BUF bytes */
    DSL_OUTPUT_BLOCKING,    /* a regular file or block device: writes do not wait on a reader */
};

struct dsl_output_dest {
    const char *name;       /* "stdout" or "stderr" */
    int fd;                 /* what is written to */
    int own;                /* fd is our reopen, closed by dsl_output_close */
    enum dsl_output_how how;
    struct dsl_output_block *head, *tail; /* queued bytes, oldest first (output.c) */
    size_t len;             /* bytes queued */
    size_t dropped;         /* lines dropped because the budget was full */
    int broken;             /* -errno of the write that failed; 0 while it works */
};

struct dsl_output {
    struct dsl_output_dest dest[2];
    int ndest;              /* 1 when stdout and stderr are the same file */
    size_t budget;          /* bound on the bytes queued in all destinations together */
    int reader_gone;        /* a write failed with EPIPE */
};

/**
 * Set up o for out_fd (stream 1) and err_fd (stream 2) with a budget of queued bytes.
 * Never fails: a destination that cannot be used is discarded.
 */
void dsl_output_open(struct dsl_output *o, int out_fd, int err_fd, size_t budget);
/** Write what is queued as far as it goes (dsl_output_drain), free everything. */
void dsl_output_close(struct dsl_output *o);
/**
 * Queue prefix, line and a newline for stream (1 or 2) as one unit. When the budget
 * cannot hold it even after a non-blocking flush (and the queues are not empty), the
 * whole line is dropped and counted.
 * 1 if it was dropped, else 0 (also when the destination is broken and it is discarded).
 */
int dsl_output_line(struct dsl_output *o, int stream, const char *prefix, const char *line);
/** The same for len bytes of line (NULs included) ended by end ("\n", "\r\n", "" ...). */
int dsl_output_bytes(struct dsl_output *o, int stream, const char *prefix, const char *line,
                     size_t len, const char *end);
/** Queue text for stream as it is, outside the budget: the launcher's own few messages. */
void dsl_output_text(struct dsl_output *o, int stream, const char *text);
/** Write what each destination takes now, without waiting. */
void dsl_output_flush(struct dsl_output *o);
/**
 * Fill pf (room for 2) with the destinations that have queued bytes and are waited on
 * with poll; the count. Any event on one of them calls for dsl_output_flush().
 */
int dsl_output_pollfds(const struct dsl_output *o, struct pollfd *pf);
/** Write everything queued, waiting for the readers as long as it takes (the job is over). */
void dsl_output_drain(struct dsl_output *o);
/** Bytes queued in all destinations. */
size_t dsl_output_queued(const struct dsl_output *o);
/** The destination stream (1 or 2) is written to. */
struct dsl_output_dest *dsl_output_dest_of(struct dsl_output *o, int stream);

#endif
