/*
 * libFuzzer target: the sealed control channel (remote/seal.c), handshake and frames.
 * The first byte picks what the input drives:
 *   0  the launcher end, waiting for a hello: arbitrary bytes, after the real hello or not
 *   1  the agent end, waiting for the launcher's reply: arbitrary bytes
 *   2  an open launcher end fed arbitrary frames: it must never deliver a byte (nobody
 *      without the keys can make a frame that opens)
 *   3  the agent seals the rest of the input as messages of sizes the input picks, an
 *      on-path attacker drops, duplicates, swaps or flips bytes of the wire as the
 *      input says; what the launcher delivers must always be a prefix of what was
 *      sent, and all of it when nothing was touched
 * Fixed keys and nonces (seal_pair.h) keep every run reproducible.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/remote/seal.h"
#include "seal_pair.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void drain(struct dsl_seal *s, struct dsl_dynbuf *into)
{
    char buf[4096];
    size_t k;
    while ((k = dsl_seal_read(s, buf, sizeof(buf))) > 0)
        if (dsl_dynbuf_add(into, buf, k) < 0)
            __builtin_trap();
}

static void fuzz_handshake(int agent, const uint8_t *data, size_t size)
{
    unsigned char lpub[32], apub[32];
    pair_pub(pair_lpriv, lpub);
    pair_pub(pair_apriv, apub);
    struct dsl_seal s, real;
    if (agent) {
        dsl_seal_init_agent(&s, pair_apriv, lpub, pair_na);
    } else {
        dsl_seal_init_launcher(&s, pair_lpriv, apub, pair_nl);
        if (size && data[0] & 1) { /* the real hello first, then the fuzz as the confirm */
            dsl_seal_init_agent(&real, pair_apriv, lpub, pair_na);
            dsl_seal_feed(&s, real.out.buf, real.out.len);
            dsl_seal_release(&real);
        }
    }
    size_t half = size / 2;
    dsl_seal_feed(&s, data, half);
    dsl_seal_feed(&s, data + half, size - half);
    /* without the peer's private key the handshake cannot succeed */
    if (s.state == DSL_SEAL_OPEN)
        __builtin_trap();
    dsl_seal_release(&s);
}

static void fuzz_forged_frames(const uint8_t *data, size_t size)
{
    struct dsl_seal l, a;
    if (pair_open(&l, &a) < 0)
        __builtin_trap();
    dsl_seal_feed(&l, data, size);
    if (dsl_seal_pending(&l) != 0)
        __builtin_trap();
    dsl_seal_release(&l);
    dsl_seal_release(&a);
}

static void fuzz_on_path(const uint8_t *data, size_t size)
{
    if (size < 4)
        return;
    uint8_t op = data[0], where = data[1], val = data[2];
    data += 3;
    size -= 3;
    struct dsl_seal l, a;
    if (pair_open(&l, &a) < 0)
        __builtin_trap();
    /* messages: each byte of the input below 8 ends one (sizes vary with the input) */
    struct dsl_dynbuf wire, sent, got;
    dsl_dynbuf_init(&wire, 1 << 22);
    dsl_dynbuf_init(&sent, 1 << 22);
    dsl_dynbuf_init(&got, 1 << 22);
    size_t frame_off[64];
    int nframes = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && nframes < 63; i++) {
        if (i < size && data[i] >= 8)
            continue;
        if (i > start) {
            if (dsl_seal_write(&a, data + start, i - start) < 0)
                __builtin_trap();
            dsl_dynbuf_add(&sent, data + start, i - start);
            frame_off[nframes++] = wire.len;
            dsl_dynbuf_add(&wire, a.out.buf, a.out.len);
            dsl_dynbuf_reset(&a.out);
        }
        start = i + 1;
    }
    frame_off[nframes] = wire.len;
    /* the attacker's move */
    struct dsl_dynbuf evil;
    dsl_dynbuf_init(&evil, 1 << 23);
    if (!nframes)
        goto done; /* nothing was sent */
    int f = nframes ? where % nframes : 0;
    switch (op % 5) {
    case 0: /* untouched */
        dsl_dynbuf_add(&evil, wire.buf, wire.len);
        break;
    case 1: /* flip one byte */
        dsl_dynbuf_add(&evil, wire.buf, wire.len);
        if (wire.len)
            evil.buf[((size_t)where * 257 + val) % wire.len] ^= (char)(val | 1);
        break;
    case 2: /* drop frame f */
        dsl_dynbuf_add(&evil, wire.buf, frame_off[f]);
        dsl_dynbuf_add(&evil, wire.buf + frame_off[f + 1], wire.len - frame_off[f + 1]);
        break;
    case 3: /* frame f twice */
        dsl_dynbuf_add(&evil, wire.buf, frame_off[f + 1]);
        dsl_dynbuf_add(&evil, wire.buf + frame_off[f], wire.len - frame_off[f]);
        break;
    default: /* frames f and f+1 swapped */
        if (f + 1 < nframes) {
            dsl_dynbuf_add(&evil, wire.buf, frame_off[f]);
            dsl_dynbuf_add(&evil, wire.buf + frame_off[f + 1], frame_off[f + 2] - frame_off[f + 1]);
            dsl_dynbuf_add(&evil, wire.buf + frame_off[f], frame_off[f + 1] - frame_off[f]);
            dsl_dynbuf_add(&evil, wire.buf + frame_off[f + 2], wire.len - frame_off[f + 2]);
        } else {
            dsl_dynbuf_add(&evil, wire.buf, wire.len);
        }
        break;
    }
    /* fed in pieces the input picks, reading as the launcher would */
    size_t pos = 0, step = (size_t)val % 97 + 1;
    while (pos < evil.len) {
        size_t n = evil.len - pos < step ? evil.len - pos : step;
        int r = dsl_seal_feed(&l, evil.buf + pos, n);
        drain(&l, &got);
        if (r < 0)
            break;
        pos += n;
    }
    drain(&l, &got);
    if (got.len > sent.len || (got.len && memcmp(got.buf, sent.buf, got.len) != 0))
        __builtin_trap(); /* delivered something that was not sent, or out of order */
    if (evil.len == wire.len && (!wire.len || !memcmp(evil.buf, wire.buf, wire.len)) &&
        got.len != sent.len)
        __builtin_trap(); /* an untouched stream must arrive whole */
done:
    dsl_dynbuf_release(&evil);
    dsl_dynbuf_release(&wire);
    dsl_dynbuf_release(&sent);
    dsl_dynbuf_release(&got);
    dsl_seal_release(&l);
    dsl_seal_release(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 20))
        return 0;
    switch (data[0] % 4) {
    case 0:
        fuzz_handshake(0, data + 1, size - 1);
        break;
    case 1:
        fuzz_handshake(1, data + 1, size - 1);
        break;
    case 2:
        fuzz_forged_frames(data + 1, size - 1);
        break;
    default:
        fuzz_on_path(data + 1, size - 1);
        break;
    }
    return 0;
}
