/*
 * Blocking TCP helpers with deadlines. Sockets stay blocking; every wait goes
 * through poll() with the time left until the deadline, so no call can hang past it.
 */
/* accept4, SOCK_CLOEXEC: Linux-specific, only this file needs them */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/banned.h"

static int ms_left(double deadline)
{
    if (deadline < 0)
        return -1;
    double left = deadline - dsl_now();
    if (left <= 0)
        return 0;
    if (left > 1e6)
        left = 1e6;
    return (int)(left * 1000.0) + 1;
}

int dsl_net_wait(int fd, short events, double deadline)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, ms_left(deadline));
        if (r > 0)
            return 0;
        if (r == 0)
            return DSL_ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

int dsl_net_set_nodelay(int fd)
{
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ? -errno : 0;
}

int dsl_net_set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -errno;
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    return fcntl(fd, F_SETFL, fl) ? -errno : 0;
}

int dsl_net_set_bufsize(int fd, int bytes)
{
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)))
        return -errno;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)))
        return -errno;
    return 0;
}

/* A TCP socket bound to host:port (all addresses for NULL or ""), not yet listening:
 * the listener's first half, and on its own a probe of the port that nobody can
 * connect to, even for the moment it exists. */
static int bound_socket(const char *host, int port, char *err)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (!host || !*host) {
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
    } else if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        return dsl_seterr(err, -EINVAL, "cannot listen on '%s': not an IPv4 address", host);
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return dsl_seterr(err, -errno, "cannot create socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
        int e = errno;
        close(fd);
        return dsl_seterr(err, -e, "cannot listen on port %d: %s", port, strerror(e));
    }
    return fd;
}

int dsl_net_listen(const char *host, int port, int backlog, char *err)
{
    int fd = bound_socket(host, port, err);
    if (fd >= 0 && listen(fd, backlog)) {
        int e = errno;
        close(fd);
        return dsl_seterr(err, -e, "cannot listen on port %d: %s", port, strerror(e));
    }
    return fd;
}

int dsl_net_local_port(int fd)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    if (getsockname(fd, (struct sockaddr *)&sa, &len))
        return -errno;
    return ntohs(sa.sin_port);
}

static int connect_once(const struct addrinfo *ai, double deadline, int *fdp)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
        return -errno;
    dsl_net_set_nonblock(fd, 1);
    int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (r && errno != EINPROGRESS) {
        r = -errno;
        close(fd);
        return r;
    }
    if (r) {
        r = dsl_net_wait(fd, POLLOUT, deadline);
        if (r < 0) {
            close(fd);
            return r;
        }
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
        if (soerr) {
            close(fd);
            return -soerr;
        }
    }
    dsl_net_set_nonblock(fd, 0);
    dsl_net_set_nodelay(fd);
    *fdp = fd;
    return 0;
}

int dsl_net_connect(const char *host, int port, double timeout_s, char *err)
{
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    double deadline = dsl_now() + timeout_s;
    int gr = getaddrinfo(host, portstr, &hints, &res);
    if (gr)
        return dsl_seterr(err, DSL_ECONNECT, "cannot resolve '%s': %s", host, gai_strerror(gr));
    double backoff = 0.01;
    int r = DSL_ETIMEDOUT;
    for (;;) {
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            int fd = -1;
            r = connect_once(ai, deadline, &fd);
            if (r == 0) {
                freeaddrinfo(res);
                return fd;
            }
        }
        double left = deadline - dsl_now();
        if (left <= 0 || (r != -ECONNREFUSED && r != -EHOSTUNREACH && r != -ENETUNREACH &&
                          r != -ETIMEDOUT && r != DSL_ETIMEDOUT && r != -EAGAIN))
            break;
        double nap = backoff < left ? backoff : left;
        struct timespec ts = {(time_t)nap, (long)((nap - (double)(time_t)nap) * 1e9)};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 0.5 ? 0.5 : backoff * 2;
    }
    freeaddrinfo(res);
    if (r == -ETIMEDOUT || r == DSL_ETIMEDOUT)
        return dsl_seterr(err, DSL_ETIMEDOUT, "cannot connect to '%s:%d': timed out after %.1f s",
                          host, port, timeout_s);
    return dsl_seterr(err, r, "cannot connect to '%s:%d': %s", host, port, dsl_strerror(r));
}

int dsl_net_accept(int lfd, double deadline, char *err)
{
    for (;;) {
        int r = dsl_net_wait(lfd, POLLIN, deadline);
        if (r < 0)
            return dsl_seterr(err, r, "accept: %s", dsl_strerror(r));
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            dsl_net_set_nodelay(fd);
            return fd;
        }
        if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
            return dsl_seterr(err, -errno, "accept: %s", strerror(errno));
    }
}

int dsl_net_write_all(int fd, const void *buf, size_t n, double deadline)
{
    const char *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        int r = dsl_net_wait(fd, POLLOUT, deadline);
        if (r < 0)
            return r;
    }
    return 0;
}

int dsl_net_read_all(int fd, void *buf, size_t n, double deadline)
{
    char *p = buf;
    while (n) {
        ssize_t got = recv(fd, p, n, MSG_DONTWAIT);
        if (got > 0) {
            p += got;
            n -= (size_t)got;
            continue;
        }
        if (got == 0)
            return -ECONNRESET;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        int r = dsl_net_wait(fd, POLLIN, deadline);
        if (r < 0)
            return r;
    }
    return 0;
}

int dsl_net_port_free(const char *host, int port)
{
    int fd = bound_socket(host, port, NULL);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return fd == -EADDRINUSE ? 0 : fd;
}

int dsl_net_pick_port(const char *host)
{
    int fd = bound_socket(host, 0, NULL);
    if (fd < 0)
        return fd;
    int port = dsl_net_local_port(fd);
    close(fd);
    return port;
}

int dsl_host_is_local(const char *host)
{
    if (!strcmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "::1") ||
        !strcmp(host, "localhost.localdomain"))
        return 1;
    char me[256];
    if (gethostname(me, sizeof(me)) == 0) {
        me[sizeof(me) - 1] = '\0';
        if (!strcmp(host, me))
            return 1;
        char *dot = strchr(me, '.');
        if (dot && strlen(host) == (size_t)(dot - me) && !strncmp(host, me, (size_t)(dot - me)))
            return 1;
    }
    return 0;
}
