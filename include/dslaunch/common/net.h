/*
 * Blocking TCP helpers with deadlines (after redis anet.c). They never print: failures
 * are described in the caller's err buffer (DSL_ERR_LEN bytes, may be NULL) and returned
 * as negative codes. A deadline is an absolute dsl_now() time; a negative deadline means
 * wait forever.
 */
#ifndef DSLAUNCH_NET_H
#define DSLAUNCH_NET_H

#include <stddef.h>

/** Listen on host:port (host NULL or "" = all IPv4 addresses; port 0 = any). Returns fd. */
int dsl_net_listen(const char *host, int port, int backlog, char *err);
/** The local port a socket is bound to, or a negative code. */
int dsl_net_local_port(int fd);
/**
 * Connect to host:port (name or numeric address), retrying refused connections with
 * backoff until timeout_s has passed. Returns a blocking fd with TCP_NODELAY set.
 */
int dsl_net_connect(const char *host, int port, double timeout_s, char *err);
/** Accept one connection, waiting until deadline. Returns the fd. */
int dsl_net_accept(int lfd, double deadline, char *err);
/** Write exactly n bytes; -EPIPE/-ECONNRESET when the peer is gone, DSL_ETIMEDOUT at deadline. */
int dsl_net_write_all(int fd, const void *buf, size_t n, double deadline);
/** Read exactly n bytes; -ECONNRESET on EOF before n bytes, DSL_ETIMEDOUT at deadline. */
int dsl_net_read_all(int fd, void *buf, size_t n, double deadline);
/** Wait until fd is readable (events=POLLIN) or writable (POLLOUT). 0, or DSL_ETIMEDOUT. */
int dsl_net_wait(int fd, short events, double deadline);
int dsl_net_set_nodelay(int fd);
int dsl_net_set_nonblock(int fd, int on);
/** Ask for send and receive buffers of the given size (the kernel may cap them). */
int dsl_net_set_bufsize(int fd, int bytes);
/** 1 if a TCP listener could bind host:port now, 0 if it is in use, <0 on other errors. */
int dsl_net_port_free(const char *host, int port);

/** A port the kernel says is free now on host (NULL: all addresses), or -errno. Bound
 * for a moment, never listened on. */
int dsl_net_pick_port(const char *host);

/** Is this host name this machine (localhost, 127.x, ::1, our hostname)? */
int dsl_host_is_local(const char *host);

#endif
