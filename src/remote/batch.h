/*
 * Batch transports (private to remote): one launcher process (mpirun, srun) starts the
 * node agents of a whole batch of hosts, and each agent connects back (connectback.h).
 * batch.c holds what every such transport does the same way: the batch of the opens of
 * one pass, the launch on the first progress(), the launcher's output drained for the
 * agents' key lines, the handshake, failure when the launcher ends first, the close
 * that waits 2 s for it; a transport gives the hooks below and uses the dsl_batch_*
 * functions as its ops.
 */
#ifndef DSLAUNCH_REMOTE_BATCH_H
#define DSLAUNCH_REMOTE_BATCH_H

#include <stddef.h>
#include <sys/types.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/remote/connectback.h"
#include "dslaunch/remote/transport.h"

struct dsl_batch;

/* One kind of batch launcher: its hooks and its one mutable field. */
struct dsl_batch_kind {
    const char *prog;       /* "mpirun": named in messages */
    const char *setup_what; /* "an mpirun batch": "cannot set up <setup_what>" */
    const char *timeout_hint; /* appended to the "no connect-back within" message */
    int squeeze;            /* summaries drop lines of dashes and squeeze runs of spaces
                               (mpirun's banners) */
    /** 0 or a negative code with c failed (dsl_cb_conn_fail): can c->host be passed? */
    int (*check_host)(struct dsl_conn *c);
    /** The line handler's words (NULL-terminated): a line of the launcher's output
     *  holding one says why a daemon or agent did not start, and such lines alone make
     *  up a failure's message. */
    const char *const *reasons;
    /** Optional: the batch's private state, made for the connection c that opens a new
     *  batch (o with c's login user applied). 0, or negative with err (then the open
     *  fails with DSL_EUSAGE and that message). */
    int (*prepare)(const struct dsl_transport_opts *o, const struct dsl_conn *c, void **extra,
                   char *err);
    /** Optional: every agent of b connected back. */
    void (*all_open)(struct dsl_batch *b);
    /** Optional: free what prepare() made. */
    void (*release)(void *extra);
    /** Optional: the launcher (process pid) died of SIGKILL, ours or anyone's, so it
     *  could not remove what it leaves behind while running; this removes it. */
    void (*killed)(pid_t pid);
    /** The argv builder: append the launcher's command line for b to argv: it runs
     *  b->agent_argv on every host with --connect dsl_batch_connect_arg() and
     *  --launcher-key b->lhex. 0, or negative with err. */
    int (*argv)(const struct dsl_batch *b, struct dsl_strvec *argv, char *err);
    /** The message of c whose batch's launcher ended (exit code, its output's summary
     *  tail) before c's agent connected back: calls dsl_cb_conn_fail and returns it. */
    int (*ended)(struct dsl_conn *c, int code, const char *tail);
    /** Hosts of another login user than the open batch's start a new batch (one ssh
     *  command line per launcher process: mpirun's plm_rsh_agent). */
    int group_by_user;
    size_t out_max;         /* bytes of the launcher's output kept for messages */
    struct dsl_batch *open; /* the batch that open() currently adds to (state) */
};

struct dsl_batch {
    struct dsl_batch_kind *kind;
    struct dsl_strvec hosts, agent_argv; /* by index; the agents' common argv */
    char *user;             /* the login user of its hosts (group_by_user), or NULL */
    char *launcher_args;    /* --launcher_args, or NULL */
    void *extra;            /* from kind->prepare() */
    /* the rest is batch.c's */
    int refs, launched, failed_launch, nopen;
    pid_t pid;              /* the launcher, own process group; 0 once reaped */
    pid_t lpid;             /* the launcher's pid, kept after it was reaped */
    int status;
    int outfd, pidfd;
    int evfd;               /* readable: launch me; drained at launch, readable again for
                               good once the launcher ended or could not be started */
    int epfd;               /* {evfd, outfd, pidfd}; in every conn's set */
    unsigned char lpriv[DSL_SEAL_KEY_LEN];
    char lhex[2 * DSL_SEAL_KEY_LEN + 1]; /* the public key, for --launcher-key */
    struct dsl_batch_conn **conns; /* by index; NULL once closed */
    int aconns;
    struct dsl_cb_keys keys; /* the agents' key lines, by index (from the launch on) */
    struct dsl_dynbuf out;  /* the launcher's output, tail only */
};

/** The agents' --connect value (A:P,..: the shared listener), for kind->argv(). */
const char *dsl_batch_connect_arg(void);

/** open() of a batch transport of kind k: joins k's open batch or starts one. */
int dsl_batch_open(struct dsl_batch_kind *k, struct dsl_conn *c,
                   const struct dsl_transport_opts *o, char *const *agent_argv);
int dsl_batch_progress(struct dsl_conn *c);
int dsl_batch_pollfd(struct dsl_conn *c, short *events);
ssize_t dsl_batch_read(struct dsl_conn *c, void *buf, size_t n);
ssize_t dsl_batch_write(struct dsl_conn *c, const void *buf, size_t n);
void dsl_batch_close_write(struct dsl_conn *c);
void dsl_batch_close(struct dsl_conn *c);

/** The ops table of a batch transport called name whose open() is open_fn. */
#define DSL_BATCH_TRANSPORT_OPS(name_, open_fn)                                          \
    {                                                                                    \
        .name = (name_), .open = (open_fn), .progress = dsl_batch_progress,              \
        .pollfd = dsl_batch_pollfd, .read = dsl_batch_read, .write = dsl_batch_write,     \
        .close_write = dsl_batch_close_write, .close = dsl_batch_close,                  \
    }

#endif
