/*
 * Two ends of a sealed channel in memory, for the unit test and the fuzz target: fixed
 * keys and nonces, so a run is reproducible, and a pump that moves each end's out
 * bytes into the other's feed until nothing moves.
 */
#ifndef DSLAUNCH_TEST_SEAL_PAIR_H
#define DSLAUNCH_TEST_SEAL_PAIR_H

#include <string.h>

#include "dslaunch/remote/seal.h"

static const unsigned char pair_lpriv[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                             17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
                                             30, 31, 32};
static const unsigned char pair_apriv[32] = {99, 98, 97, 96, 95, 94, 93, 92, 91, 90, 89, 88, 87,
                                             86, 85, 84, 83, 82, 81, 80, 79, 78, 77, 76, 75, 74,
                                             73, 72, 71, 70, 69, 68};
static const unsigned char pair_na[32] = {0xa0, 0xa1, 0xa2};
static const unsigned char pair_nl[32] = {0xb0, 0xb1, 0xb2};

/* The public key of priv (through an agent end, which computes it). */
static inline void pair_pub(const unsigned char *priv, unsigned char *pub)
{
    struct dsl_seal s;
    unsigned char other[32] = {9};
    dsl_seal_init_agent(&s, priv, other, pair_na);
    memcpy(pub, s.apub, 32);
    dsl_seal_release(&s);
}

/* Move out -> feed both ways until quiet; 0, or the first feed's negative code. */
static inline int pair_pump(struct dsl_seal *a, struct dsl_seal *b)
{
    for (int moved = 1; moved;) {
        moved = 0;
        struct dsl_seal *from[2] = {a, b}, *to[2] = {b, a};
        for (int k = 0; k < 2; k++) {
            if (!from[k]->out.len)
                continue;
            int r = dsl_seal_feed(to[k], from[k]->out.buf, from[k]->out.len);
            dsl_dynbuf_reset(&from[k]->out);
            moved = 1;
            if (r < 0)
                return r;
        }
    }
    return 0;
}

/* Launcher end l and agent end a with the fixed keys, handshake done; 0 or negative. */
static inline int pair_open(struct dsl_seal *l, struct dsl_seal *a)
{
    unsigned char lpub[32], apub[32];
    pair_pub(pair_lpriv, lpub);
    pair_pub(pair_apriv, apub);
    dsl_seal_init_launcher(l, pair_lpriv, apub, pair_nl);
    dsl_seal_init_agent(a, pair_apriv, lpub, pair_na);
    return pair_pump(l, a);
}

/* Both ends released, as pair_open() made them. */
static inline void pair_close(struct dsl_seal *l, struct dsl_seal *a)
{
    dsl_seal_release(l);
    dsl_seal_release(a);
}

#endif
