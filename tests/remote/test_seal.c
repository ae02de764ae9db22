/*
 * Unit tests of the sealed control channel (remote/seal.c) with both ends in memory:
 * the handshake, frames both ways, and every way an attacker on the path or on a node
 * could try it (wrong launcher, forged agent, tampered, replayed, reordered, dropped
 * frames) ending the channel instead of delivering anything.
 */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/remote/seal.h"
#include "seal_pair.h"
#include "test.h"
#include "dslaunch/common/banned.h"

static size_t read_all(struct dsl_seal *s, char *buf, size_t n)
{
    size_t got = 0, k;
    while (got < n && (k = dsl_seal_read(s, buf + got, n - got)) > 0)
        got += k;
    return got;
}

TEST(seal_should_complete_the_handshake_and_carry_bytes_both_ways)
{
    struct dsl_seal l, a;
    ASSERT_OK(pair_open(&l, &a));
    ASSERT_EQ(l.state, DSL_SEAL_OPEN);
    ASSERT_EQ(a.state, DSL_SEAL_OPEN);
    ASSERT_OK(dsl_seal_write(&l, "{\"type\":\"start\"}\n", 17));
    ASSERT_OK(dsl_seal_write(&a, "{\"type\":\"hello\"}\n", 17));
    ASSERT_OK(pair_pump(&l, &a));
    char buf[64] = "";
    ASSERT_EQ(read_all(&a, buf, sizeof(buf) - 1), 17);
    ASSERT_STR_EQ(buf, "{\"type\":\"start\"}\n");
    memset(buf, 0, sizeof(buf));
    ASSERT_EQ(read_all(&l, buf, sizeof(buf) - 1), 17);
    ASSERT_STR_EQ(buf, "{\"type\":\"hello\"}\n");
    pair_close(&l, &a);
}

TEST(seal_should_split_a_large_write_into_frames_and_never_show_the_plaintext)
{
    struct dsl_seal l, a;
    ASSERT_OK(pair_open(&l, &a));
    size_t n = 3 * DSL_SEAL_FRAME_MAX + 123;
    char *msg = malloc(n), *got = malloc(n);
    for (size_t i = 0; i < n; i++)
        msg[i] = (char)('A' + i % 26);
    memcpy(msg + 1000, "CANARY=s3cr3t-canary", 20);
    ASSERT_OK(dsl_seal_write(&l, msg, n));
    ASSERT_EQ(l.out.len, n + 4 * DSL_SEAL_OVERHEAD);
    ASSERT(!memmem(l.out.buf, l.out.len, "CANARY", 6));
    ASSERT(!memmem(l.out.buf, l.out.len, "ABCDEFGH", 8));
    ASSERT_OK(pair_pump(&l, &a));
    ASSERT_EQ(read_all(&a, got, n), n);
    ASSERT(!memcmp(got, msg, n));
    free(msg);
    free(got);
    pair_close(&l, &a);
}

TEST(seal_agent_should_refuse_a_launcher_without_the_private_key)
{
    unsigned char lpub[32], apub[32], fake_priv[32] = {42};
    pair_pub(pair_lpriv, lpub);
    pair_pub(pair_apriv, apub);
    /* the impostor knows L (it is on the agent's command line) and the agent's key A
       from its hello, but answers with a key of its own */
    struct dsl_seal fake, a;
    ASSERT_OK(dsl_seal_init_launcher(&fake, fake_priv, apub, NULL));
    ASSERT_OK(dsl_seal_init_agent(&a, pair_apriv, lpub, NULL));
    ASSERT_EQ(pair_pump(&fake, &a), DSL_EAUTH);
    ASSERT_EQ(a.state, DSL_SEAL_FAILED);
    ASSERT_CONTAINS(a.err, "the launcher did not prove its key");
    ASSERT_ERR(dsl_seal_write(&a, "x", 1));
    dsl_seal_release(&fake);
    dsl_seal_release(&a);
}

TEST(seal_launcher_should_refuse_an_agent_whose_key_it_did_not_read)
{
    unsigned char apub[32], other_priv[32] = {7, 7, 7};
    pair_pub(pair_apriv, apub);
    unsigned char lpub[32];
    pair_pub(pair_lpriv, lpub);
    struct dsl_seal l, intruder;
    ASSERT_OK(dsl_seal_init_launcher(&l, pair_lpriv, apub, NULL));
    ASSERT_OK(dsl_seal_init_agent(&intruder, other_priv, lpub, NULL));
    ASSERT_EQ(pair_pump(&l, &intruder), DSL_EAUTH);
    ASSERT_CONTAINS(l.err, "not the one it printed");
    dsl_seal_release(&l);
    dsl_seal_release(&intruder);
}

TEST(seal_launcher_should_refuse_a_replayed_hello_without_the_agents_key)
{
    /* an attacker replays a real agent's hello (seen on the wire) and guesses the MAC */
    unsigned char apub[32], lpub[32];
    pair_pub(pair_apriv, apub);
    pair_pub(pair_lpriv, lpub);
    struct dsl_seal real, l;
    ASSERT_OK(dsl_seal_init_agent(&real, pair_apriv, lpub, pair_na));
    ASSERT_OK(dsl_seal_init_launcher(&l, pair_lpriv, apub, NULL));
    ASSERT_OK(dsl_seal_feed(&l, real.out.buf, real.out.len));
    ASSERT_EQ(l.state, DSL_SEAL_CONFIRM);
    unsigned char guess[32] = {0};
    ASSERT_EQ(dsl_seal_feed(&l, guess, sizeof(guess)), DSL_EAUTH);
    ASSERT_CONTAINS(l.err, "the agent did not prove its key");
    dsl_seal_release(&real);
    dsl_seal_release(&l);
}

TEST(seal_should_refuse_something_that_is_not_a_hello)
{
    unsigned char apub[32];
    pair_pub(pair_apriv, apub);
    struct dsl_seal l;
    ASSERT_OK(dsl_seal_init_launcher(&l, pair_lpriv, apub, NULL));
    ASSERT_EQ(dsl_seal_feed(&l, "DSLCB1 0123\n", 12), DSL_EPROTO);
    ASSERT_CONTAINS(l.err, "bad hello");
    dsl_seal_release(&l);
    unsigned char pub[32];
    ASSERT_EQ(dsl_seal_hello_key("DSLC", 4, pub), 0);
    ASSERT_EQ(dsl_seal_hello_key("GET / HTTP/1.1", 14, pub), -1);
}

/* Seal three frames from the agent; return their wire bytes and the frame offsets. */
static void three_frames(struct dsl_seal *l, struct dsl_seal *a, struct dsl_dynbuf *wire,
                         size_t off[4])
{
    ASSERT_OK(pair_open(l, a));
    dsl_dynbuf_init(wire, 1 << 20);
    const char *m[3] = {"first\n", "second\n", "third\n"};
    off[0] = 0;
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(dsl_seal_write(a, m[i], strlen(m[i])));
        dsl_dynbuf_add(wire, a->out.buf, a->out.len);
        dsl_dynbuf_reset(&a->out);
        off[i + 1] = wire->len;
    }
}

TEST(seal_should_end_the_channel_on_a_flipped_bit)
{
    struct dsl_seal l, a;
    struct dsl_dynbuf w;
    size_t off[4];
    three_frames(&l, &a, &w, off);
    w.buf[off[1] + 6] ^= 0x01;
    ASSERT_EQ(dsl_seal_feed(&l, w.buf, w.len), DSL_EAUTH);
    char buf[64] = "";
    ASSERT_EQ(read_all(&l, buf, sizeof(buf)), 0); /* nothing at all once failed */
    ASSERT_CONTAINS(l.err, "failed authentication");
    dsl_dynbuf_release(&w);
    pair_close(&l, &a);
}

TEST(seal_should_end_the_channel_on_a_replayed_frame)
{
    struct dsl_seal l, a;
    struct dsl_dynbuf w;
    size_t off[4];
    three_frames(&l, &a, &w, off);
    ASSERT_OK(dsl_seal_feed(&l, w.buf, off[2]));
    ASSERT_EQ(dsl_seal_feed(&l, w.buf + off[1], off[2] - off[1]), DSL_EAUTH);
    char buf[64] = "";
    read_all(&l, buf, sizeof(buf));
    dsl_dynbuf_release(&w);
    pair_close(&l, &a);
}

TEST(seal_should_end_the_channel_on_reordered_or_dropped_frames)
{
    for (int drop = 0; drop < 2; drop++) {
        struct dsl_seal l, a;
        struct dsl_dynbuf w;
        size_t off[4];
        three_frames(&l, &a, &w, off);
        if (drop) { /* second frame missing */
            ASSERT_OK(dsl_seal_feed(&l, w.buf, off[1]));
        } else { /* second and first swapped */
            ASSERT_EQ(dsl_seal_feed(&l, w.buf + off[1], off[2] - off[1]), DSL_EAUTH);
        }
        if (drop)
            ASSERT_EQ(dsl_seal_feed(&l, w.buf + off[2], off[3] - off[2]), DSL_EAUTH);
        ASSERT_EQ(l.state, DSL_SEAL_FAILED);
        dsl_dynbuf_release(&w);
        pair_close(&l, &a);
    }
}

TEST(seal_should_not_accept_a_frame_reflected_back_to_its_sender)
{
    struct dsl_seal l, a;
    ASSERT_OK(pair_open(&l, &a));
    ASSERT_OK(dsl_seal_write(&l, "stop\n", 5));
    ASSERT_EQ(dsl_seal_feed(&l, l.out.buf, l.out.len), DSL_EAUTH);
    pair_close(&l, &a);
}

TEST(seal_should_assemble_frames_fed_one_byte_at_a_time)
{
    struct dsl_seal l, a;
    ASSERT_OK(pair_open(&l, &a));
    ASSERT_OK(dsl_seal_write(&a, "one byte at a time\n", 19));
    for (size_t i = 0; i < a.out.len; i++)
        ASSERT_OK(dsl_seal_feed(&l, a.out.buf + i, 1));
    char buf[32] = "";
    ASSERT_EQ(read_all(&l, buf, sizeof(buf) - 1), 19);
    ASSERT_STR_EQ(buf, "one byte at a time\n");
    pair_close(&l, &a);
}

TEST(seal_keys_should_round_trip_through_hex_and_differ)
{
    unsigned char p1[32], q1[32], p2[32], q2[32], back[32];
    char err[DSL_ERR_LEN], hex[65];
    ASSERT_OK(dsl_seal_keypair(p1, q1, err));
    ASSERT_OK(dsl_seal_keypair(p2, q2, err));
    ASSERT(memcmp(p1, p2, 32) != 0);
    dsl_seal_key_hex(q1, hex);
    ASSERT_EQ(strlen(hex), 64);
    ASSERT_OK(dsl_seal_key_parse(hex, 64, back));
    ASSERT(!memcmp(back, q1, 32));
    ASSERT_ERR(dsl_seal_key_parse(hex, 63, back));
    hex[5] = 'g';
    ASSERT_ERR(dsl_seal_key_parse(hex, 64, back));
}

TEST_MAIN()
