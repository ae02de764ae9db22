/*
 * The wire's limit for bench/allreduce_net.sh: plain TCP moving the bytes of a ring
 * step, with nothing else to do. Every process sends BYTES to the next one and
 * receives BYTES from the previous one at the same time (a sender thread, the main
 * thread receiving; blocking send/recv of 1 MiB from and into buffers of BYTES, touched
 * once, like the buffers of an allreduce), ITERS times, and prints the median of the
 * per-iteration rate. An allreduce sends and receives 2(n-1)/n of its size per rank, so
 * this rate is the busbw a ring allreduce would reach if sums and bookkeeping were
 * free.
 *
 *   tcp_ref LISTEN_ADDR PORT NEXT_ADDR NEXT_PORT [BYTES [ITERS]]
 *
 * Prints "tcp_ref bytes=B iters=N rate=R GB/s" (R the median). World 2: NEXT is the
 * other process, so both directions of one pair are busy, as in the allreduce.
 *
 * TCP_REF_MODE=poll moves the same bytes from one thread instead, with non-blocking
 * send/recv and poll() as the tcp engine does (src/comm/comm_tcp.c): the two rates
 * side by side tell whether a second thread per rank would buy the engine anything.
 */
#define _DEFAULT_SOURCE /* usleep */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IO ((size_t)1 << 20)

static size_t bytes = (size_t)64 << 20;
static int out_fd, in_fd;
static char *sbuf, *rbuf;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    fprintf(stderr, "tcp_ref: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void send_all(void)
{
    for (size_t d = 0; d < bytes;) {
        ssize_t w = send(out_fd, sbuf + d, bytes - d < IO ? bytes - d : IO, MSG_NOSIGNAL);
        if (w < 0 && errno != EINTR)
            die("send");
        d += w > 0 ? (size_t)w : 0;
    }
}

static void recv_all(void)
{
    for (size_t d = 0; d < bytes;) {
        ssize_t g = recv(in_fd, rbuf + d, bytes - d < IO ? bytes - d : IO, 0);
        if (g == 0) {
            fprintf(stderr, "tcp_ref: the previous process closed the connection\n");
            exit(1);
        }
        if (g < 0 && errno != EINTR)
            die("recv");
        d += g > 0 ? (size_t)g : 0;
    }
}

/* both directions from this thread: whatever can move moves, poll() when nothing can */
static void send_recv_polled(void)
{
    size_t sd = 0, rd = 0;
    while (sd < bytes || rd < bytes) {
        int moved = 0;
        if (sd < bytes) {
            ssize_t w = send(out_fd, sbuf + sd, bytes - sd < IO ? bytes - sd : IO, MSG_NOSIGNAL);
            if (w < 0 && errno != EAGAIN && errno != EINTR)
                die("send");
            sd += w > 0 ? (size_t)w : 0;
            moved |= w > 0;
        }
        if (rd < bytes) {
            ssize_t g = recv(in_fd, rbuf + rd, bytes - rd < IO ? bytes - rd : IO, 0);
            if (g == 0) {
                fprintf(stderr, "tcp_ref: the previous process closed the connection\n");
                exit(1);
            }
            if (g < 0 && errno != EAGAIN && errno != EINTR)
                die("recv");
            rd += g > 0 ? (size_t)g : 0;
            moved |= g > 0;
        }
        if (!moved) {
            struct pollfd p[2] = {{.fd = out_fd, .events = sd < bytes ? POLLOUT : 0},
                                  {.fd = in_fd, .events = rd < bytes ? POLLIN : 0}};
            if (poll(p, 2, 60000) == 0) {
                fprintf(stderr, "tcp_ref: no progress for 60 s\n");
                exit(1);
            }
        }
    }
}

static void *sender(void *arg)
{
    send_all();
    return arg;
}

static struct sockaddr_in addr_of(const char *host, const char *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
        fprintf(stderr, "tcp_ref: bad address '%s'\n", host);
        exit(2);
    }
    return a;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: tcp_ref LISTEN_ADDR PORT NEXT_ADDR NEXT_PORT [BYTES [ITERS]]\n");
        return 2;
    }
    if (argc > 5)
        bytes = strtoull(argv[5], NULL, 10);
    int iters = argc > 6 ? atoi(argv[6]) : 10, one = 1;
    if (!bytes || iters < 1 || iters > 10000) {
        fprintf(stderr, "tcp_ref: bad BYTES or ITERS\n");
        return 2;
    }
    struct sockaddr_in me = addr_of(argv[1], argv[2]), next = addr_of(argv[3], argv[4]);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(lfd, (struct sockaddr *)&me, sizeof(me)) || listen(lfd, 4))
        die("listen");
    double give_up = now() + 30;
    for (;;) { /* the next process may not listen yet */
        out_fd = socket(AF_INET, SOCK_STREAM, 0);
        if (out_fd < 0)
            die("socket");
        if (!connect(out_fd, (struct sockaddr *)&next, sizeof(next)))
            break;
        close(out_fd);
        if (now() > give_up)
            die("connect");
        usleep(20000);
    }
    struct pollfd pl = {.fd = lfd, .events = POLLIN};
    if (poll(&pl, 1, 60000) != 1) { /* the previous process never came */
        fprintf(stderr, "tcp_ref: nobody connected within 60 s\n");
        return 1;
    }
    if ((in_fd = accept(lfd, NULL, NULL)) < 0)
        die("accept");
    close(lfd);
    setsockopt(out_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const char *mode = getenv("TCP_REF_MODE");
    int polled = mode && !strcmp(mode, "poll");
    if (mode && *mode && !polled && strcmp(mode, "threads")) {
        fprintf(stderr, "tcp_ref: bad TCP_REF_MODE '%s' (threads or poll)\n", mode);
        return 2;
    }
    if (polled && (fcntl(out_fd, F_SETFL, fcntl(out_fd, F_GETFL) | O_NONBLOCK) < 0 ||
                   fcntl(in_fd, F_SETFL, fcntl(in_fd, F_GETFL) | O_NONBLOCK) < 0))
        die("fcntl");
    sbuf = malloc(bytes);
    rbuf = malloc(bytes);
    double *rate = calloc((size_t)iters, sizeof(double));
    if (!sbuf || !rbuf || !rate)
        die("malloc");
    memset(sbuf, 1, bytes);
    memset(rbuf, 0, bytes);
    for (int i = -1; i < iters; i++) { /* one warm-up round */
        pthread_t th;
        double t0 = now();
        if (polled) {
            send_recv_polled();
        } else {
            if (pthread_create(&th, NULL, sender, NULL))
                die("pthread_create");
            recv_all();
            pthread_join(th, NULL);
        }
        if (i >= 0)
            rate[i] = (double)bytes / (now() - t0) / 1e9;
    }
    qsort(rate, (size_t)iters, sizeof(double), cmp);
    printf("tcp_ref bytes=%zu iters=%d rate=%.3f GB/s\n", bytes, iters, rate[iters / 2]);
    return 0;
}
