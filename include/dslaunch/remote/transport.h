/*
 * Transports: how the launcher reaches the node agent on each host, behind a small ops
 * table so that a new way (a scheduler, a container runtime) is one more file.
 *
 * A transport turns a host name into a bidirectional byte stream to a running
 * `dslaunch --agent` on that host: the agent's stdin and stdout. Everything else (plan,
 * env, argv, output, exits) travels over that stream as control-protocol messages, so
 * no transport ever passes user data through a remote shell. The only remote command
 * line is fixed: exec '<remote dslaunch>' --agent, quoted by dsl_shell_quote().
 *
 * All operations are non-blocking. The fan-out loop (one thread) calls progress() until
 * the connection is OPEN, then polls pollfd() and calls read()/write(). A connection
 * that fails sets state FAILED, err_code (DSL_ECONNECT, DSL_EAUTH, DSL_ETIMEDOUT, ...)
 * and the per-host message in err.
 *
 * Contract with the loop (all transports):
 * - progress() may be called at any time; it also fails a connection that has not
 *   reached OPEN within connect_timeout, but a silent server never wakes poll(), so the
 *   loop must enforce that bound too (or call progress() at least every ~100 ms).
 * - libssh buffers internally: bytes can wait in a channel while its fd is quiet, so
 *   call read() on every pass for OPEN connections of the ssh and pdsh transports, not
 *   only on POLLIN (the pdsh transport also drains pdsh's own output there).
 * - SIGPIPE must be ignored by the process (writes to a vanished peer return errors).
 * - read() returning 0 or a negative code other than -EAGAIN ends the stream; err then
 *   says why when the transport knows (exit status and stderr of a remote command that
 *   failed to start, "connection to 'h' lost: ..." with err_code DSL_ECONNECT).
 */
#ifndef DSLAUNCH_TRANSPORT_H
#define DSLAUNCH_TRANSPORT_H

#include <stddef.h>
#include <sys/types.h>

#include "dslaunch/common/error.h"
#include "dslaunch/plan/options.h" /* struct dsl_transport_opts */

enum dsl_conn_state {
    DSL_CONN_PENDING = 0,
    DSL_CONN_CONNECTING,     /* TCP connect / process start */
    DSL_CONN_AUTHENTICATING, /* SSH key exchange, host key, user auth */
    DSL_CONN_STARTING,       /* opening the exec channel */
    DSL_CONN_OPEN,           /* byte stream to the agent is usable */
    DSL_CONN_CLOSED,         /* EOF from the agent */
    DSL_CONN_FAILED,
};

struct dsl_conn;

struct dsl_transport_ops {
    const char *name;
    /** Begin reaching host and starting agent_argv there (argv[0] is the dslaunch path).
     *  The local transport also takes NULL: the forked child then runs c->agent_main
     *  itself instead of exec'ing a second dslaunch. */
    int (*open)(struct dsl_conn *c, const struct dsl_transport_opts *o,
                char *const *agent_argv);
    /** Advance a connection that is not OPEN yet; 0 (state updated) or negative (FAILED). */
    int (*progress)(struct dsl_conn *c);
    /** The fd to poll now and the events to wait for; -1 if none. */
    int (*pollfd)(struct dsl_conn *c, short *events);
    /** >0 bytes, 0 on EOF, -EAGAIN when nothing is available, other negative on error. */
    ssize_t (*read)(struct dsl_conn *c, void *buf, size_t n);
    /** Bytes written (may be short), -EAGAIN, or negative on error. */
    ssize_t (*write)(struct dsl_conn *c, const void *buf, size_t n);
    /** Send EOF to the agent's stdin (it then kills its workers and exits). */
    void (*close_write)(struct dsl_conn *c);
    /** Release everything. A local agent still running is killed. */
    void (*close)(struct dsl_conn *c);
};

/** The ops table of a transport called name_ whose functions are prefix_open,
 *  prefix_progress, ... prefix_close. */
#define DSL_TRANSPORT_OPS(name_, prefix_)                                                \
    {                                                                                    \
        .name = (name_), .open = prefix_##_open, .progress = prefix_##_progress,        \
        .pollfd = prefix_##_pollfd, .read = prefix_##_read, .write = prefix_##_write,    \
        .close_write = prefix_##_close_write, .close = prefix_##_close,                  \
    }

struct dsl_conn {
    const struct dsl_transport_ops *ops;
    char *host;                /* owned */
    char *user;                /* login user ("user@host" in the hostfile), owned: it wins
                                  over the ssh config's User; NULL: the config's or ours */
    enum dsl_conn_state state;
    double t_start, t_open;    /* dsl_now() when opened and when OPEN was reached */
    int err_code;
    char err[DSL_ERR_LEN];
    void *priv;                /* transport-private state */
    /* local transport with no agent_argv: the agent's main, run in the forked child on
       its stdin and stdout (the job sets it to dsl_agent_main) */
    int (*agent_main)(int in_fd, int out_fd);
};

extern const struct dsl_transport_ops dsl_transport_local;
#ifdef DSL_HAVE_SSH
extern const struct dsl_transport_ops dsl_transport_ssh;
#endif
extern const struct dsl_transport_ops dsl_transport_pdsh;
/* one mpirun per batch of hosts opened in the same pass; agents connect back */
extern const struct dsl_transport_ops dsl_transport_openmpi;
/* one srun step per batch of hosts opened in the same pass; agents connect back */
extern const struct dsl_transport_ops dsl_transport_slurm;
/**
 * The agent's side of the slurm transport (`--agent --slurm-nodes H0,H1,..`): its index
 * is the place of its SLURMD_NODENAME in nodes; the srun step's own SLURM_* variables
 * (task and node ids, step id, the step's tasks per node) are removed from the
 * environment, which the ranks inherit. Negative with err if this node is not listed.
 */
int dsl_slurm_agent_prepare(const char *nodes, int *index, char *err);

/** Quote s for a POSIX shell as one word ('...' with '\'' for quotes). malloc'd. */
char *dsl_shell_quote(const char *s);
/**
 * The fixed remote command line for argv: "exec" followed by every element quoted with
 * dsl_shell_quote(), e.g. exec '/opt/ds launch' '--agent'. The caller frees it.
 */
char *dsl_shell_command(char *const *argv);

#endif
