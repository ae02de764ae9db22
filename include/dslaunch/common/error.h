/*
 * Error codes shared by every dslaunch module.
 *
 * Functions return int: 0 (or a non-negative count) on success, a negative code on
 * failure. System-call failures are reported as -errno, as libuv does; failures that
 * are dslaunch's own use the DSL_E* codes below, which sit far below any errno value.
 * dsl_strerror() turns either kind into text.
 */
#ifndef DSLAUNCH_ERROR_H
#define DSLAUNCH_ERROR_H

#include <stdio.h>

/** Size of the caller-supplied error buffers that low-level helpers fill. */
#define DSL_ERR_LEN 512

enum dsl_error {
    DSL_EUSAGE = -10001,    /* bad command line */
    DSL_EHOSTFILE = -10002, /* hostfile syntax or content */
    DSL_EPLACEMENT = -10003, /* include/exclude/num_nodes/num_gpus */
    DSL_ECONFIG = -10004,   /* config file */
    DSL_ECONNECT = -10005,  /* host unreachable */
    DSL_EAUTH = -10006,     /* authentication or host key */
    DSL_EREMOTE = -10007,   /* remote side failed or spoke nonsense */
    DSL_ETIMEDOUT = -10008, /* a bounded wait ran out */
    DSL_EPROTO = -10009,    /* malformed message on a wire protocol */
    DSL_EPREFLIGHT = -10010, /* handshake found a mismatch */
    DSL_EVERSION = -10011,  /* protocol or program version mismatch */
    DSL_ETOKEN = -10012,    /* wrong or missing job secret */
    DSL_EPEER = -10013,     /* a peer rank failed or vanished */
    DSL_ESPAWN = -10014,    /* a program could not be started */
    DSL_EDATA = -10015,     /* input data missing or malformed */
    DSL_ECHECKPOINT = -10016, /* checkpoint missing, truncated or corrupt */
    DSL_ECANCELED = -10017, /* stopped on request (signal) */
    DSL_ENOTSUP = -10018,   /* not supported in this build or configuration */
    DSL_ENOTREG = -10019,   /* an input file that is a FIFO, socket or device */
    DSL_ENOGPU = -10020,    /* the GPU was asked for and this node cannot give one */
};

/** Text for a negative code (either -errno or DSL_E*). Never NULL; static storage. */
const char *dsl_strerror(int code);

/** Abort with a message: an internal invariant is broken (a dslaunch bug). */
_Noreturn void dsl_bug_at(const char *file, int line, const char *msg);
#define DSL_BUG(msg) dsl_bug_at(__FILE__, __LINE__, (msg))

/** snprintf into err (DSL_ERR_LEN bytes) if err is not NULL. Returns code. */
int dsl_seterr(char *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
