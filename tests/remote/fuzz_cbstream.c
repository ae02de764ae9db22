/*
 * libFuzzer target: what reaches the launcher's end of a connect-back connection (the
 * pdsh, openmpi and slurm transports) before any key is proven. The first byte picks:
 *   0, 3  pdsh's or mpirun's output, through a pipe, read by dsl_cb_drain_tail() with
 *         the agents' key lines taken out ("DSLCB2-KEY I HEX"); it arrives in four
 *         pieces. A key is only ever one a line of the input spelled; output without a
 *         key line is kept exactly, its last max bytes (max from the byte);
 *   1     the first bytes of a connection as the listener peeks at them
 *         (dsl_seal_hello_key): a complete hello stays one when more bytes follow;
 *   2, 4  a socket that sends the input, after the real agent's hello (4) or not (2),
 *         then EOF, read by the launcher's stream (dsl_cb_stream_handshake, then
 *         dsl_cb_conn_read as the transports call it): without the agent's key nothing
 *         is ever delivered, and the stream never hangs.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/remote/connectback.h"
#include "dslaunch/remote/seal.h"
#include "dslaunch/remote/transport.h"
#include "seal_pair.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int contains(const uint8_t *h, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; k <= n && i <= n - k; i++)
        if (!memcmp(h + i, needle, k))
            return 1;
    return 0;
}

static void output(const uint8_t *d, size_t n, size_t max)
{
    int p[2];
    if (pipe(p) != 0 || fcntl(p[0], F_SETFL, O_NONBLOCK) != 0)
        abort();
    struct dsl_cb_keys keys;
    struct dsl_dynbuf out;
    dsl_cb_keys_init(&keys, 4);
    dsl_dynbuf_init(&out, max);
    int rfd = p[0];
    for (size_t part = 0, at = 0; part < 4; part++) {
        size_t len = part == 3 ? n - at : n / 4;
        if (len && write(p[1], d + at, len) != (ssize_t)len)
            abort();
        at += len;
        dsl_cb_drain_tail(&rfd, &out, max, &keys);
        if (rfd < 0)
            abort(); /* EOF before the writer closed */
    }
    close(p[1]);
    dsl_cb_drain_tail(&rfd, &out, max, &keys);
    if (rfd != -1 || out.len > max)
        abort();
    for (int i = 0; i < keys.n; i++) {
        char hex[2 * DSL_SEAL_KEY_LEN + 1];
        if (!keys.have[i])
            continue;
        dsl_seal_key_hex(keys.key[i], hex);
        if (!contains(d, n, hex) || !contains(d, n, DSL_CB_KEY_LINE))
            abort();
    }
    if (!contains(d, n, DSL_CB_KEY_LINE)) {
        size_t keep = n < max ? n : max;
        if (out.len != keep || (keep && memcmp(out.buf, d + n - keep, keep) != 0))
            abort();
    }
    dsl_dynbuf_release(&out);
    dsl_cb_keys_release(&keys);
}

static void hello(const uint8_t *d, size_t n)
{
    unsigned char pub[DSL_SEAL_KEY_LEN], again[DSL_SEAL_KEY_LEN];
    int h = dsl_seal_hello_key(d, n, pub);
    if (h < -1 || h > 1)
        abort();
    if (h == 1 && (n < DSL_SEAL_HELLO_LEN || dsl_seal_hello_key(d, DSL_SEAL_HELLO_LEN, again) != 1 ||
                   memcmp(pub, again, sizeof(pub)) != 0))
        abort();
    if (h == -1 && n > DSL_SEAL_HELLO_LEN && dsl_seal_hello_key(d, DSL_SEAL_HELLO_LEN, again) != -1)
        abort();
}

static void stream(const uint8_t *d, size_t n, int real_hello)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        abort();
    unsigned char apub[32];
    pair_pub(pair_apriv, apub);
    if (real_hello) {
        struct dsl_seal agent;
        unsigned char lpub[32];
        pair_pub(pair_lpriv, lpub);
        dsl_seal_init_agent(&agent, pair_apriv, lpub, pair_na);
        if (write(sv[1], agent.out.buf, agent.out.len) != (ssize_t)agent.out.len)
            abort();
        dsl_seal_release(&agent);
    }
    if (n && write(sv[1], d, n) != (ssize_t)n)
        abort();
    shutdown(sv[1], SHUT_WR);
    struct dsl_cb_stream st;
    if (dsl_cb_stream_init(&st, sv[0], pair_lpriv, apub) < 0)
        abort();
    char err[DSL_ERR_LEN] = "";
    int h, tries = 0;
    while ((h = dsl_cb_stream_handshake(&st, "fuzz", err)) == 0)
        if (++tries > 1000)
            abort(); /* all input is there and then EOF: it must end */
    if (h < 0 && !err[0])
        abort();
    if (h == 1)
        abort(); /* the confirm needs the agent's private key */
    struct dsl_conn c;
    memset(&c, 0, sizeof(c));
    c.host = (char *)"fuzz";
    c.state = DSL_CONN_OPEN;
    char buf[512];
    ssize_t r;
    tries = 0;
    while ((r = dsl_cb_conn_read(&c, &st, buf, sizeof(buf))) != 0 && r != -EAGAIN &&
           r >= 0)
        if (++tries > 1000)
            abort();
    if (r > 0)
        abort();
    dsl_cb_stream_close(&st);
    close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 60000) /* a pipe holds 64 KiB */
        return 0;
    const uint8_t *d = data + 1;
    size_t n = size - 1;
    switch (data[0] % 5) {
    case 0:
    case 3: output(d, n, 2049 + (size_t)data[0] * 16); break;
    case 1: hello(d, n); break;
    case 2: stream(d, n, 0); break;
    case 4: stream(d, n, 1); break;
    }
    return 0;
}
