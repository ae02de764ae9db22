/*
 * Connect-back: the control channel for transports that cannot carry a per-host stdin
 * (pdsh, whose remote stdin is never fed; mpirun, which forwards stdin to rank 0 only).
 *
 * The launcher opens one TCP listener and gives every agent a one-time random token on
 * its command line: `dslaunch --agent --connect ADDR:PORT[,ADDR:PORT...] --token T`.
 * The agent connects to the first address that answers and sends the line
 * "DSLCB1 <token>\n"; from then on the socket is the byte stream to the launcher that
 * stdin/stdout would have been. The launcher hands each accepted socket to the
 * connection that expects its token; an unknown token, a malformed or slow first line
 * closes the socket. A token is consumed by its first use.
 *
 * NEEDSWORK: the token travels on the remote command line, so it is visible to other
 * users of that node (ps) until the agent connects; a user who races the agent gets
 * the job's plan instead of it. Use the ssh transport where that matters.
 */
#ifndef DSLAUNCH_CONNECTBACK_H
#define DSLAUNCH_CONNECTBACK_H

#include <stddef.h>
#include <sys/types.h>

#define DSL_CB_TOKEN_LEN 32 /* hex characters */

/* ---- agent side ---- */

/**
 * Connect to the launcher: hostports is "ADDR:PORT" or a comma-separated list of them
 * ("[v6addr]:PORT" for IPv6), all tried at once; the first that connects wins, within
 * timeout_s seconds. Sends the token line. On success *fd_out is a blocking socket
 * owned by the caller; otherwise a negative code with err set.
 */
int dsl_agent_connect_back_timeout(const char *hostports, const char *token,
                                   double timeout_s, int *fd_out, char *err);
/** The same with a 30 s bound. */
int dsl_agent_connect_back(const char *hostport, const char *token, int *fd_out, char *err);

/* ---- launcher side ---- */

struct dsl_cb_listener; /* opaque: sockets, pending connections, expected tokens */

/** A fresh random token (DSL_CB_TOKEN_LEN hex characters + NUL) into out. */
int dsl_cb_token_new(char out[DSL_CB_TOKEN_LEN + 1]);

/**
 * Listen on bind_addr (NULL: every IPv4 address) on an ephemeral port. The listener is
 * owned by the caller and freed with dsl_cb_listener_free().
 */
int dsl_cb_listener_open(struct dsl_cb_listener **out, const char *bind_addr, char *err);
void dsl_cb_listener_free(struct dsl_cb_listener *l);
/**
 * The --connect argument for agents: bind_addr:PORT, or every IPv4 address of this host
 * that is up, non-loopback ones first. Owned by the listener.
 */
const char *dsl_cb_listener_connect_arg(const struct dsl_cb_listener *l);
/** An fd to poll for POLLIN (an epoll set): readable when service() has work. */
int dsl_cb_listener_pollfd(const struct dsl_cb_listener *l);
/**
 * Register a token to wait for (a copy is kept). Returns its ready fd: an eventfd owned
 * by the listener that becomes readable (POLLIN) once the token's socket has arrived,
 * whichever caller's service() read it, and is closed by take() or cancel(). Put it
 * into the owner's poll set next to dsl_cb_listener_pollfd(). -errno if none could be
 * made (the token is still expected; the owner then learns of it by polling take()).
 */
int dsl_cb_listener_expect(struct dsl_cb_listener *l, const char *token);
/** Forget a token (its socket, if it arrived and was not taken, is closed). */
void dsl_cb_listener_cancel(struct dsl_cb_listener *l, const char *token);
/** Accept new connections and read first lines; never blocks. */
void dsl_cb_listener_service(struct dsl_cb_listener *l);
/**
 * The socket (non-blocking, owned by the caller from now on) whose agent presented
 * token, or -EAGAIN while it has not arrived. The token is then forgotten.
 */
int dsl_cb_listener_take(struct dsl_cb_listener *l, const char *token);

/*
 * The listener shared by every connect-back connection of this process, reference
 * counted: get() opens it on first use (bind_addr of later calls is ignored) and takes
 * a reference, NULL with err set on failure; put() drops one, the last frees it.
 */
struct dsl_cb_listener *dsl_cb_shared_get(const char *bind_addr, char *err);
void dsl_cb_shared_put(void);

/* ---- helpers of the connect-back transports (pdsh, openmpi) ---- */

struct dsl_transport_opts;
struct dsl_dynbuf;
struct dsl_conn;

/**
 * The ssh options of o as one space-separated string ("-o BatchMode=yes -F cfg ..."),
 * for programs that split it on spaces (PDSH_SSH_ARGS_APPEND, plm_rsh_agent). A path
 * with a space or quote is refused: NULL with err naming prog. Owned by the caller.
 */
char *dsl_cb_ssh_options(const struct dsl_transport_opts *o, const char *prog, char *err);
/**
 * Fork and exec argv with env as the leader of its own process group, stdin /dev/null,
 * stdout and stderr into *outfd (non-blocking read end), SIGTERM when this process
 * dies. *pidfd is a pidfd of the child or -1 where unsupported. All owned by the
 * caller. Negative code with err set when it could not fork (an exec failure is exit
 * 127 of the child).
 */
int dsl_cb_spawn(char *const *argv, char *const *env, pid_t *pid, int *outfd, int *pidfd,
                 char *err);
/**
 * Reap the spawned *pid if it has exited (then *pid = 0, *status its wait status, and
 * *pidfd closed, which also takes it out of every epoll set). With neither outfd nor
 * *pidfd left to wake the caller, it is exiting: wait for it, at most a second.
 * 1 once reaped.
 */
int dsl_cb_reap(pid_t *pid, int *status, int outfd, int *pidfd);
/** Set c FAILED with err_code code and the message; returns code. */
int dsl_cb_conn_fail(struct dsl_conn *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/**
 * read() / send() on an accepted socket as a dsl_conn's read()/write() report them:
 * bytes, 0 at EOF (read), -EAGAIN when it would block, else -errno; -EIO / -EPIPE for
 * fd < 0. The write never raises SIGPIPE.
 */
ssize_t dsl_cb_sock_read(int fd, void *buf, size_t n);
ssize_t dsl_cb_sock_write(int fd, const void *buf, size_t n);
/**
 * Read what *fd has without blocking, keeping the last max bytes in out (max > 2048);
 * at EOF closes *fd and sets it to -1.
 */
void dsl_cb_drain_tail(int *fd, struct dsl_dynbuf *out, size_t max);

#endif
