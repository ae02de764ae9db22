/*
 * libFuzzer target: the first bytes a connection to a rank's mesh port sends, read by
 * the tcp backend before it knows who is there (dsl_comm_tcp_read_hello). Anyone who
 * can reach the port can send them. The first byte is the world size (1..8); the rest
 * arrives on a socket, then EOF. The verdict must be the one the hello's layout gives
 * (magic, rank, world, token length, token, all big-endian): the sender's rank only for
 * this job's token and a rank inside the world, DSL_ETOKEN for another token,
 * DSL_EPROTO for anything else, and never a wait for bytes that cannot come.
 */
#include <arpa/inet.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/comm_impl.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char token[] = "job-token-42";

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* what the hello in d[0..n) must be judged, from its layout alone */
static int expected(const uint8_t *d, size_t n, int world)
{
    if (n < 12 || be32(d) != 0x44534C54u || be32(d + 8) != (uint32_t)world || n < 14)
        return DSL_EPROTO;
    size_t tl = (size_t)d[12] << 8 | d[13];
    if (tl > 1024 || n < 14 + tl)
        return DSL_EPROTO;
    if (tl != strlen(token) || memcmp(d + 14, token, tl) != 0)
        return DSL_ETOKEN;
    return be32(d + 4) < (uint32_t)world ? (int)be32(d + 4) : DSL_EPROTO;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 60000)
        return 0;
    int world = 1 + data[0] % 8;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        abort();
    if (size > 1 && write(sv[1], data + 1, size - 1) != (ssize_t)(size - 1))
        abort();
    shutdown(sv[1], SHUT_WR);
    /* a deadline far away: EOF, not the clock, must end every read */
    int r = dsl_comm_tcp_read_hello(sv[0], world, token, dsl_now() + 3600);
    if (r != expected(data + 1, size - 1, world))
        abort();
    close(sv[0]);
    close(sv[1]);
    return 0;
}
