/*
 * The sealed control channel (seal.h has the protocol and who knows what).
 *
 * Theory of operation. One struct per end, no I/O: dsl_seal_feed() appends what the
 * socket delivered to `in` and runs the state machine over it as far as complete
 * messages allow; everything to send goes into `out`, which the caller drains to the
 * socket. Launcher: HELLO (72 bytes; the public key must be the one expected) -> the
 * keys are derived, the reply queued -> CONFIRM (32 bytes, the agent's MAC) -> OPEN.
 * Agent: hello queued at init -> REPLY (64 bytes; the launcher's MAC) -> confirm
 * queued -> OPEN. In OPEN every complete frame is opened in order with the next
 * sequence number; the first failure of any kind is final (FAILED), so a peer gets no
 * second try and no oracle. Nothing here blocks or sleeps; the cryptography is
 * libcrypto's (X25519, HKDF-SHA256, HMAC-SHA256, AES-256-GCM), MACs are compared in
 * constant time, and key material is wiped on release.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "dslaunch/remote/seal.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define MAGIC "DSLCB2\n" /* with its NUL: 8 bytes */
#define MAGIC_LEN 8
#define REPLY_LEN 64
#define CONFIRM_LEN 32
#define TAG_LEN 16
#define OUT_MAX (4u * (DSL_SEAL_FRAME_MAX + DSL_SEAL_OVERHEAD))
#define IN_MAX (2u * (DSL_SEAL_FRAME_MAX + DSL_SEAL_OVERHEAD))

static int fail(struct dsl_seal *s, int code, const char *what)
{
    snprintf(s->err, sizeof(s->err), "%s", what);
    s->state = DSL_SEAL_FAILED;
    dsl_dynbuf_reset(&s->plain);
    OPENSSL_cleanse(s->km, sizeof(s->km));
    OPENSSL_cleanse(s->ktx, sizeof(s->ktx));
    OPENSSL_cleanse(s->krx, sizeof(s->krx));
    return code;
}

int dsl_seal_keypair(unsigned char priv[DSL_SEAL_KEY_LEN], unsigned char pub[DSL_SEAL_KEY_LEN],
                     char *err)
{
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, NULL);
    EVP_PKEY *k = NULL;
    size_t pl = DSL_SEAL_KEY_LEN, ql = DSL_SEAL_KEY_LEN;
    int ok = ctx && EVP_PKEY_keygen_init(ctx) > 0 && EVP_PKEY_keygen(ctx, &k) > 0 &&
             EVP_PKEY_get_raw_private_key(k, priv, &pl) > 0 &&
             EVP_PKEY_get_raw_public_key(k, pub, &ql) > 0 && pl == DSL_SEAL_KEY_LEN &&
             ql == DSL_SEAL_KEY_LEN;
    EVP_PKEY_free(k);
    EVP_PKEY_CTX_free(ctx);
    if (!ok)
        return dsl_seterr(err, DSL_EAUTH, "cannot make an X25519 key pair (libcrypto)");
    return 0;
}

/* pub = the X25519 public key of priv; 1, or 0 when libcrypto refuses priv */
static int x25519_public(const unsigned char priv[DSL_SEAL_KEY_LEN],
                         unsigned char pub[DSL_SEAL_KEY_LEN])
{
    EVP_PKEY *k = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, priv, DSL_SEAL_KEY_LEN);
    size_t len = DSL_SEAL_KEY_LEN;
    int ok = k && EVP_PKEY_get_raw_public_key(k, pub, &len) > 0 && len == DSL_SEAL_KEY_LEN;
    EVP_PKEY_free(k);
    return ok;
}

int dsl_seal_key_derive(const void *secret, size_t len, const char *label,
                        unsigned char priv[DSL_SEAL_KEY_LEN], unsigned char pub[DSL_SEAL_KEY_LEN],
                        char *err)
{
    static const char salt[] = "dslaunch no-ssh v1";
    if (len < 16)
        return dsl_seterr(err, DSL_EAUTH, "the job secret is shorter than 16 bytes");
    unsigned char k[DSL_SEAL_KEY_LEN];
    size_t klen = sizeof(k);
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    int ok = ctx && EVP_PKEY_derive_init(ctx) > 0 &&
             EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_salt(ctx, (const unsigned char *)salt, sizeof(salt) - 1) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_key(ctx, secret, (int)len) > 0 &&
             EVP_PKEY_CTX_add1_hkdf_info(ctx, (const unsigned char *)label, (int)strlen(label)) > 0 &&
             EVP_PKEY_derive(ctx, k, &klen) > 0 && klen == sizeof(k);
    EVP_PKEY_CTX_free(ctx);
    ok = ok && x25519_public(k, pub);
    if (ok)
        memcpy(priv, k, sizeof(k));
    OPENSSL_cleanse(k, sizeof(k));
    if (!ok)
        return dsl_seterr(err, DSL_EAUTH, "cannot derive a key from the job secret (libcrypto)");
    return 0;
}

/* The X25519 shared secret of priv and peer; 0 or -1 (a low-order peer key included). */
static int x25519(const unsigned char *priv, const unsigned char *peer, unsigned char out[32])
{
    EVP_PKEY *own = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, priv, DSL_SEAL_KEY_LEN);
    EVP_PKEY *other = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, NULL, peer, DSL_SEAL_KEY_LEN);
    EVP_PKEY_CTX *ctx = own ? EVP_PKEY_CTX_new(own, NULL) : NULL;
    size_t len = 32;
    int ok = ctx && other && EVP_PKEY_derive_init(ctx) > 0 &&
             EVP_PKEY_derive_set_peer(ctx, other) > 0 && EVP_PKEY_derive(ctx, out, &len) > 0 &&
             len == 32;
    if (ok) { /* an all-zero secret means a low-order point: nothing secret in it */
        unsigned char acc = 0;
        for (int i = 0; i < 32; i++)
            acc |= out[i];
        ok = acc != 0;
    }
    EVP_PKEY_CTX_free(ctx);
    EVP_PKEY_free(other);
    EVP_PKEY_free(own);
    return ok ? 0 : -1;
}

/* T = "DSLCB2" L A na nl */
static void transcript(const struct dsl_seal *s, unsigned char t[6 + 4 * 32])
{
    memcpy(t, "DSLCB2", 6);
    memcpy(t + 6, s->lpub, 32);
    memcpy(t + 38, s->apub, 32);
    memcpy(t + 70, s->na, 32);
    memcpy(t + 102, s->nl, 32);
}

/* km, k_l2a, k_a2l from the shared secret and the transcript; 0 or -1 */
static int derive_keys(struct dsl_seal *s, const unsigned char *peer)
{
    unsigned char shared[32], t[6 + 4 * 32], salt[SHA256_DIGEST_LENGTH], okm[96];
    if (x25519(s->priv, peer, shared) < 0)
        return -1;
    transcript(s, t);
    SHA256(t, sizeof(t), salt);
    static const unsigned char info[] = "dslaunch connect-back keys v2";
    size_t olen = sizeof(okm);
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    int ok = ctx && EVP_PKEY_derive_init(ctx) > 0 &&
             EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_salt(ctx, salt, sizeof(salt)) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_key(ctx, shared, sizeof(shared)) > 0 &&
             EVP_PKEY_CTX_add1_hkdf_info(ctx, info, sizeof(info) - 1) > 0 &&
             EVP_PKEY_derive(ctx, okm, &olen) > 0 && olen == sizeof(okm);
    EVP_PKEY_CTX_free(ctx);
    OPENSSL_cleanse(shared, sizeof(shared));
    if (!ok)
        return -1;
    const unsigned char *l2a = okm + 32, *a2l = okm + 64;
    memcpy(s->km, okm, 32);
    memcpy(s->ktx, s->role == DSL_SEAL_LAUNCHER ? l2a : a2l, 32);
    memcpy(s->krx, s->role == DSL_SEAL_LAUNCHER ? a2l : l2a, 32);
    OPENSSL_cleanse(okm, sizeof(okm));
    return 0;
}

/* HMAC-SHA256(km, label T) */
static int handshake_mac(const struct dsl_seal *s, const char *label, unsigned char mac[32])
{
    unsigned char msg[16 + 6 + 4 * 32];
    size_t ll = strlen(label);
    memcpy(msg, label, ll);
    transcript(s, msg + ll);
    unsigned int len = 0;
    if (!HMAC(EVP_sha256(), s->km, sizeof(s->km), msg, ll + 6 + 4 * 32, mac, &len) || len != 32)
        return -1;
    return 0;
}

static int init_common(struct dsl_seal *s, enum dsl_seal_role role, const unsigned char *priv,
                       const unsigned char *nonce, unsigned char *own_nonce)
{
    memset(s, 0, sizeof(*s));
    s->role = role;
    dsl_dynbuf_init(&s->in, IN_MAX);
    dsl_dynbuf_init(&s->plain, 4u * DSL_SEAL_FRAME_MAX);
    dsl_dynbuf_init(&s->out, OUT_MAX + 256);
    memcpy(s->priv, priv, DSL_SEAL_KEY_LEN);
    if (nonce)
        memcpy(own_nonce, nonce, 32);
    else if (RAND_bytes(own_nonce, 32) != 1)
        return fail(s, DSL_EAUTH, "cannot get random bytes for the handshake (libcrypto)");
    return 0;
}

int dsl_seal_init_launcher(struct dsl_seal *s, const unsigned char lpriv[DSL_SEAL_KEY_LEN],
                           const unsigned char apub[DSL_SEAL_KEY_LEN],
                           const unsigned char *nonce)
{
    int r = init_common(s, DSL_SEAL_LAUNCHER, lpriv, nonce, s->nl);
    if (r < 0)
        return r;
    memcpy(s->apub, apub, DSL_SEAL_KEY_LEN);
    if (!x25519_public(lpriv, s->lpub))
        return fail(s, DSL_EAUTH, "bad launcher key");
    s->state = DSL_SEAL_HELLO;
    return 0;
}

int dsl_seal_init_agent(struct dsl_seal *s, const unsigned char apriv[DSL_SEAL_KEY_LEN],
                        const unsigned char lpub[DSL_SEAL_KEY_LEN], const unsigned char *nonce)
{
    int r = init_common(s, DSL_SEAL_AGENT, apriv, nonce, s->na);
    if (r < 0)
        return r;
    memcpy(s->lpub, lpub, DSL_SEAL_KEY_LEN);
    if (!x25519_public(apriv, s->apub))
        return fail(s, DSL_EAUTH, "bad agent key");
    dsl_dynbuf_add(&s->out, MAGIC, MAGIC_LEN);
    dsl_dynbuf_add(&s->out, s->apub, DSL_SEAL_KEY_LEN);
    dsl_dynbuf_add(&s->out, s->na, 32);
    s->state = DSL_SEAL_REPLY;
    return 0;
}

void dsl_seal_release(struct dsl_seal *s)
{
    OPENSSL_cleanse(s->priv, sizeof(s->priv));
    OPENSSL_cleanse(s->km, sizeof(s->km));
    OPENSSL_cleanse(s->ktx, sizeof(s->ktx));
    OPENSSL_cleanse(s->krx, sizeof(s->krx));
    if (s->plain.buf)
        OPENSSL_cleanse(s->plain.buf, s->plain.len);
    dsl_dynbuf_release(&s->in);
    dsl_dynbuf_release(&s->plain);
    dsl_dynbuf_release(&s->out);
    s->state = DSL_SEAL_FAILED;
}

int dsl_seal_hello_key(const void *data, size_t n, unsigned char pub[DSL_SEAL_KEY_LEN])
{
    size_t m = n < MAGIC_LEN ? n : MAGIC_LEN;
    if (memcmp(data, MAGIC, m) != 0)
        return -1;
    if (n < DSL_SEAL_HELLO_LEN)
        return 0;
    memcpy(pub, (const unsigned char *)data + MAGIC_LEN, DSL_SEAL_KEY_LEN);
    return 1;
}

static void nonce_of(uint64_t seq, unsigned char iv[12])
{
    memset(iv, 0, 4);
    for (int i = 0; i < 8; i++)
        iv[4 + i] = (unsigned char)(seq >> (56 - 8 * i));
}

/* AES-256-GCM in one direction; 0 or -1 (open: the tag did not verify) */
static int gcm(int enc, const unsigned char *key, uint64_t seq, const unsigned char *aad,
               const unsigned char *in, size_t n, unsigned char *out, unsigned char *tag)
{
    unsigned char iv[12];
    nonce_of(seq, iv);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int len = 0, ok = ctx && EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, iv, enc) > 0 &&
                      EVP_CipherUpdate(ctx, NULL, &len, aad, 4) > 0 &&
                      EVP_CipherUpdate(ctx, out, &len, in, (int)n) > 0;
    if (ok && !enc)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG_LEN, tag) > 0;
    ok = ok && EVP_CipherFinal_ex(ctx, out + len, &len) > 0;
    if (ok && enc)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, TAG_LEN, tag) > 0;
    EVP_CIPHER_CTX_free(ctx);
    return ok ? 0 : -1;
}

/* Handle what `in` holds; 0 (maybe waiting for more) or negative (FAILED). */
static int advance(struct dsl_seal *s)
{
    for (;;) {
        const unsigned char *b = (const unsigned char *)s->in.buf;
        size_t have = s->in.len;
        switch (s->state) {
        case DSL_SEAL_HELLO: {
            unsigned char pub[DSL_SEAL_KEY_LEN];
            int h = have ? dsl_seal_hello_key(b, have, pub) : 0;
            if (h < 0)
                return fail(s, DSL_EPROTO, "not a dslaunch agent (bad hello)");
            if (h == 0)
                return 0;
            if (CRYPTO_memcmp(pub, s->apub, DSL_SEAL_KEY_LEN) != 0)
                return fail(s, DSL_EAUTH, "the agent's key is not the one it printed");
            memcpy(s->na, b + MAGIC_LEN + DSL_SEAL_KEY_LEN, 32);
            dsl_dynbuf_consume(&s->in, DSL_SEAL_HELLO_LEN);
            unsigned char mac[32];
            if (derive_keys(s, s->apub) < 0 || handshake_mac(s, "launcher", mac) < 0)
                return fail(s, DSL_EAUTH, "key agreement with the agent failed");
            dsl_dynbuf_add(&s->out, s->nl, 32);
            dsl_dynbuf_add(&s->out, mac, 32);
            s->state = DSL_SEAL_CONFIRM;
            break;
        }
        case DSL_SEAL_REPLY: {
            if (have < REPLY_LEN)
                return 0;
            memcpy(s->nl, b, 32);
            unsigned char mac[32];
            if (derive_keys(s, s->lpub) < 0 || handshake_mac(s, "launcher", mac) < 0 ||
                CRYPTO_memcmp(mac, b + 32, 32) != 0)
                return fail(s, DSL_EAUTH, "the launcher did not prove its key (wrong launcher "
                                          "or tampered handshake)");
            dsl_dynbuf_consume(&s->in, REPLY_LEN);
            if (handshake_mac(s, "agent", mac) < 0)
                return fail(s, DSL_EAUTH, "cannot compute the handshake MAC");
            dsl_dynbuf_add(&s->out, mac, 32);
            s->state = DSL_SEAL_OPEN;
            break;
        }
        case DSL_SEAL_CONFIRM: {
            if (have < CONFIRM_LEN)
                return 0;
            unsigned char mac[32];
            if (handshake_mac(s, "agent", mac) < 0 || CRYPTO_memcmp(mac, b, 32) != 0)
                return fail(s, DSL_EAUTH, "the agent did not prove its key (forged or "
                                          "tampered handshake)");
            dsl_dynbuf_consume(&s->in, CONFIRM_LEN);
            s->state = DSL_SEAL_OPEN;
            break;
        }
        case DSL_SEAL_OPEN: {
            if (have < 4)
                return 0;
            size_t len = (size_t)b[0] << 24 | (size_t)b[1] << 16 | (size_t)b[2] << 8 | b[3];
            if (len == 0 || len > DSL_SEAL_FRAME_MAX)
                return fail(s, DSL_EPROTO, "bad frame length on the sealed channel");
            if (have < 4 + len + TAG_LEN)
                return 0;
            if (s->plain.len + len > s->plain.max)
                return 0; /* the reader catches up first */
            unsigned char tag[TAG_LEN];
            memcpy(tag, b + 4 + len, TAG_LEN);
            unsigned char *dst = dsl_xmalloc(len);
            int r = gcm(0, s->krx, s->seq_rx, b, b + 4, len, dst, tag);
            if (r == 0)
                dsl_dynbuf_add(&s->plain, dst, len);
            OPENSSL_cleanse(dst, len);
            free(dst);
            if (r < 0)
                return fail(s, DSL_EAUTH, "a frame on the sealed channel failed authentication "
                                          "(tampered, replayed or out of order)");
            s->seq_rx++;
            dsl_dynbuf_consume(&s->in, 4 + len + TAG_LEN);
            break;
        }
        default:
            return DSL_EPROTO;
        }
    }
}

int dsl_seal_feed(struct dsl_seal *s, const void *data, size_t n)
{
    if (s->state == DSL_SEAL_FAILED)
        return DSL_EPROTO;
    const char *p = data;
    while (n) { /* in pieces that fit; opened frames make room for the next piece */
        size_t room = s->in.max - s->in.len, k = n < room ? n : room;
        if (!k)
            return fail(s, DSL_EPROTO, "the peer sent more than the sealed channel buffers "
                                       "(read the plaintext first)");
        dsl_dynbuf_add(&s->in, p, k);
        p += k;
        n -= k;
        int r = advance(s);
        if (r < 0)
            return r;
    }
    return advance(s);
}

size_t dsl_seal_read(struct dsl_seal *s, void *buf, size_t n)
{
    size_t k = s->plain.len < n ? s->plain.len : n;
    if (!k)
        return 0;
    memcpy(buf, s->plain.buf, k);
    OPENSSL_cleanse(s->plain.buf, k);
    dsl_dynbuf_consume(&s->plain, k);
    if (s->state == DSL_SEAL_OPEN && s->in.len)
        advance(s); /* frames held back while plain was full */
    return k;
}

size_t dsl_seal_pending(const struct dsl_seal *s)
{
    return s->plain.len;
}

int dsl_seal_write(struct dsl_seal *s, const void *data, size_t n)
{
    if (s->state != DSL_SEAL_OPEN)
        return DSL_EPROTO;
    const unsigned char *p = data;
    while (n) {
        size_t len = n > DSL_SEAL_FRAME_MAX ? DSL_SEAL_FRAME_MAX : n;
        if (s->out.len + 4 + len + TAG_LEN > OUT_MAX)
            return -EAGAIN;
        unsigned char hdr[4] = {(unsigned char)(len >> 24), (unsigned char)(len >> 16),
                                (unsigned char)(len >> 8), (unsigned char)len};
        unsigned char *ct = dsl_xmalloc(len + TAG_LEN);
        int r = gcm(1, s->ktx, s->seq_tx, hdr, p, len, ct, ct + len);
        if (r == 0) {
            dsl_dynbuf_add(&s->out, hdr, 4);
            dsl_dynbuf_add(&s->out, ct, len + TAG_LEN);
        }
        free(ct);
        if (r < 0)
            return fail(s, DSL_EAUTH, "cannot seal a frame (libcrypto)");
        s->seq_tx++;
        p += len;
        n -= len;
    }
    return 0;
}

void dsl_seal_key_hex(const unsigned char key[DSL_SEAL_KEY_LEN],
                      char out[2 * DSL_SEAL_KEY_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < DSL_SEAL_KEY_LEN; i++) {
        out[2 * i] = hex[key[i] >> 4];
        out[2 * i + 1] = hex[key[i] & 15];
    }
    out[2 * DSL_SEAL_KEY_LEN] = '\0';
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int dsl_seal_key_parse(const char *hex, size_t len, unsigned char key[DSL_SEAL_KEY_LEN])
{
    if (len != 2 * DSL_SEAL_KEY_LEN)
        return -1;
    for (int i = 0; i < DSL_SEAL_KEY_LEN; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        key[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}
