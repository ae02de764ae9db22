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
/** Register a token to wait for (a copy is kept). */
void dsl_cb_listener_expect(struct dsl_cb_listener *l, const char *token);
/** Forget a token (its socket, if it arrived and was not taken, is closed). */
void dsl_cb_listener_cancel(struct dsl_cb_listener *l, const char *token);
/** Accept new connections and read first lines; never blocks. */
void dsl_cb_listener_service(struct dsl_cb_listener *l);
/**
 * The socket (non-blocking, owned by the caller from now on) whose agent presented
 * token, or -EAGAIN while it has not arrived. The token is then forgotten.
 */
int dsl_cb_listener_take(struct dsl_cb_listener *l, const char *token);

#endif
