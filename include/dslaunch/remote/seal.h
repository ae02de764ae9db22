/*
 * The sealed control channel of the connect-back transports (pdsh, Open MPI): a mutual
 * handshake that authenticates both ends and derives session keys, then every byte in
 * AES-256-GCM frames with sequence-number nonces. Sans-IO: the caller moves bytes
 * between a socket and dsl_seal_feed() / the out buffer, so the protocol is one pure
 * state machine (and one fuzz target, tests/remote/fuzz_seal.c).
 *
 * Who knows what. The launcher makes an X25519 key pair per connection (pdsh) or per
 * mpirun batch; its public half L travels on the agent's command line (public, not a
 * secret: knowing it lets nobody in). The agent makes its own key pair at start and
 * prints its public half A on its stdout, which pdsh (over ssh) or mpirun brings back to
 * the launcher; the launcher accepts only an agent that proves it holds the private half
 * of an A it read there. Each side computes the X25519 shared secret from its private
 * key and the other's public key, which nobody else can: not a user on a node who reads
 * L from `ps`, not an on-path attacker who sees both halves, not someone who connects to
 * the launcher's port or answers in its place.
 *
 * Wire format (all lengths fixed until the frames):
 *   agent -> launcher  hello    "DSLCB2\n\0" A(32) na(32)                      72 bytes
 *   launcher -> agent  reply    nl(32) HMAC(km, "launcher" T)                  64 bytes
 *   agent -> launcher  confirm  HMAC(km, "agent" T)                            32 bytes
 *   then frames both ways: len(4, big-endian, 1..DSL_SEAL_FRAME_MAX) ct(len) tag(16)
 * with T = "DSLCB2" L A na nl (na, nl: 32 random bytes each), the keys km, k_l2a, k_a2l
 * = HKDF-SHA256(X25519 shared secret, salt SHA-256(T)), and a frame sealed with the key
 * of its direction, the 4 length bytes as associated data and nonce 0^4 || seq (64-bit
 * big-endian, counting from 0 per direction). A replayed, dropped, reordered, truncated
 * or altered frame fails its tag and ends the channel; so does a wrong MAC.
 *
 * Ownership: a struct dsl_seal is the caller's; dsl_seal_release() frees what it owns.
 * Errors are written into s->err as one sentence and leave the state FAILED for good.
 */
#ifndef DSLAUNCH_SEAL_H
#define DSLAUNCH_SEAL_H

#include <stddef.h>
#include <stdint.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"

#define DSL_SEAL_KEY_LEN 32       /* X25519 private and public keys */
#define DSL_SEAL_HELLO_LEN 72     /* the agent's first message */
#define DSL_SEAL_FRAME_MAX 65536  /* plaintext bytes per frame */
#define DSL_SEAL_OVERHEAD 20      /* length header and tag per frame */

enum dsl_seal_role { DSL_SEAL_LAUNCHER, DSL_SEAL_AGENT };
enum dsl_seal_state {
    DSL_SEAL_HELLO,   /* launcher: waiting for the hello */
    DSL_SEAL_REPLY,   /* agent: hello sent, waiting for the reply */
    DSL_SEAL_CONFIRM, /* launcher: reply sent, waiting for the confirm */
    DSL_SEAL_OPEN,    /* frames both ways */
    DSL_SEAL_FAILED,
};

struct dsl_seal {
    enum dsl_seal_role role;
    enum dsl_seal_state state;
    unsigned char priv[DSL_SEAL_KEY_LEN];     /* own private key */
    unsigned char lpub[DSL_SEAL_KEY_LEN];     /* the launcher's public key */
    unsigned char apub[DSL_SEAL_KEY_LEN];     /* the agent's public key */
    unsigned char na[32], nl[32];             /* the handshake's nonces */
    unsigned char km[32], ktx[32], krx[32];   /* MAC key; frame keys per direction */
    uint64_t seq_tx, seq_rx;
    struct dsl_dynbuf in;    /* wire bytes received and not yet processed */
    struct dsl_dynbuf plain; /* opened plaintext not yet read */
    struct dsl_dynbuf out;   /* wire bytes to send (handshake and sealed frames) */
    char err[DSL_ERR_LEN];
};

/** A fresh X25519 key pair. 0, or DSL_EAUTH with err (no randomness, no X25519). */
int dsl_seal_keypair(unsigned char priv[DSL_SEAL_KEY_LEN], unsigned char pub[DSL_SEAL_KEY_LEN],
                     char *err);

/**
 * A key pair derived from a pre-shared secret (no-ssh mode, where every node holds the
 * job's secret and nothing else is shared): priv = HKDF-SHA256(secret, salt
 * "dslaunch no-ssh v1", info label), pub its X25519 public half. The same secret and
 * label give the same pair on every node. secret must be at least 16 bytes. 0, or
 * DSL_EAUTH with err.
 */
int dsl_seal_key_derive(const void *secret, size_t len, const char *label,
                        unsigned char priv[DSL_SEAL_KEY_LEN], unsigned char pub[DSL_SEAL_KEY_LEN],
                        char *err);

/**
 * The launcher's end: its private key and the public key of the one agent it accepts
 * (read from that agent's stdout). Waits for the hello. nonce: 32 bytes to use as nl,
 * or NULL for random ones (tests pass fixed ones). 0 or negative with s->err.
 */
int dsl_seal_init_launcher(struct dsl_seal *s, const unsigned char lpriv[DSL_SEAL_KEY_LEN],
                           const unsigned char apub[DSL_SEAL_KEY_LEN],
                           const unsigned char *nonce);
/**
 * The agent's end: its private key and the launcher's public key (from its command
 * line). Queues the hello in s->out. nonce as above (na).
 */
int dsl_seal_init_agent(struct dsl_seal *s, const unsigned char apriv[DSL_SEAL_KEY_LEN],
                        const unsigned char lpub[DSL_SEAL_KEY_LEN], const unsigned char *nonce);
void dsl_seal_release(struct dsl_seal *s);

/**
 * Wire bytes from the peer: advances the handshake (queueing the reply or confirm in
 * s->out) and opens complete frames into the plaintext buffer. 0, or a negative code
 * (DSL_EAUTH: a MAC or tag did not verify; DSL_EPROTO: malformed) with s->err; the
 * seal is then FAILED and stays so.
 */
int dsl_seal_feed(struct dsl_seal *s, const void *data, size_t n);
/** Up to n bytes of opened plaintext into buf; the count (0: none yet). */
size_t dsl_seal_read(struct dsl_seal *s, void *buf, size_t n);
/** Bytes of opened plaintext waiting. */
size_t dsl_seal_pending(const struct dsl_seal *s);
/**
 * Seal n bytes (OPEN only) into frames appended to s->out. 0, or negative with s->err
 * (not open, or the out buffer is over its bound: the caller sends s->out first).
 */
int dsl_seal_write(struct dsl_seal *s, const void *data, size_t n);

/**
 * The agent's public key from the first bytes a connection sent: 1 with pub filled
 * when n holds a complete hello, 0 while it is a prefix of one, -1 when it cannot be.
 */
int dsl_seal_hello_key(const void *data, size_t n, unsigned char pub[DSL_SEAL_KEY_LEN]);

/** Hex text of a key (2 * DSL_SEAL_KEY_LEN characters + NUL) and back (0 or -1). */
void dsl_seal_key_hex(const unsigned char key[DSL_SEAL_KEY_LEN],
                      char out[2 * DSL_SEAL_KEY_LEN + 1]);
int dsl_seal_key_parse(const char *hex, size_t len, unsigned char key[DSL_SEAL_KEY_LEN]);

#endif
