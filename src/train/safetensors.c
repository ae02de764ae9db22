/*
 * safetensors reader and writer (format in safetensors.h).
 *
 * Theory of operation. The header is JSON and cJSON parses it (cJSON is already the
 * trainer's JSON reader, for ds_config.json), but the format's grammar is small and
 * fixed: an object whose members are tensor entries {"dtype": string, "shape":
 * [uint...], "data_offsets": [uint, uint]} or the "__metadata__" object of string
 * values, and a checkpoint reader must be strict where cJSON is lenient. So one pass
 * over the bytes comes first (scan): it enforces what cJSON does not (JSON's escapes
 * and whitespace, no control characters, numbers as plain non-negative integers that
 * fit 64 bits, at most three levels of nesting) and notes where every key and value
 * starts. cJSON_ParseWithLengthOpts, with the terminating NUL required inside the
 * length, then judges the structure, and a walk of its tree checks the grammar above
 * (field names, types, repeats). The walk meets items in the order the scan met them,
 * so each item has its byte offset for messages and each number its exact value (cJSON
 * keeps numbers as doubles). Every error names the file and the byte offset inside the
 * header. It is fuzzed (fuzz_safetensors).
 *
 * A file is validated before anyone looks at a tensor, and its header before anything
 * is allocated for its data: the length and the header are read first, and every
 * size the header claims is judged against the file's real size (a sparse file of a
 * terabyte behind a small header fails there, not in malloc). Header length inside
 * the file, entries well formed, sizes = product(shape) x dtype size without
 * overflow, offsets that tile the data region exactly (sorted, no gap, no overlap,
 * nothing after the last), unique names, then the checksums: the header's SHA-256
 * over its own bytes with its digits zeroed (so any edited field fails), the data's
 * SHA-256, or an older file's crc32. Writes go to a temporary file with a random name
 * beside the target, created O_EXCL|O_NOFOLLOW so that no link planted there is
 * followed, which is fsynced and renamed into place, then the directory is fsynced,
 * so a crash leaves either the old file or the new one. Reads open the file O_NONBLOCK
 * and accept only a regular file, so a FIFO in its place cannot hang a resume.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <zlib.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "safetensors.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define MAX_HEADER_BYTES DSL_ST_MAX_HEADER
#define META_CRC "dsl.crc32"
#define META_SHA "dsl.sha256"
#define META_DATA_SHA "dsl.data_sha256"
#define SHA_HEX 64

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [DSL_ST_F32] = {"F32", 4}, [DSL_ST_F16] = {"F16", 2}, [DSL_ST_BF16] = {"BF16", 2},
    [DSL_ST_F64] = {"F64", 8}, [DSL_ST_I64] = {"I64", 8}, [DSL_ST_I32] = {"I32", 4},
    [DSL_ST_U8] = {"U8", 1},
};
#define NDTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

size_t dsl_st_dtype_size(enum dsl_st_dtype d)
{
    return (size_t)d < NDTYPES ? dtypes[d].size : 0;
}

const char *dsl_st_dtype_name(enum dsl_st_dtype d)
{
    return (size_t)d < NDTYPES ? dtypes[d].name : "?";
}

/* crc32 over a buffer of any size (zlib takes uInt lengths) */
static unsigned long crc_update(unsigned long crc, const unsigned char *p, uint64_t n)
{
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return crc;
}

/* SHA-256 (libcrypto) of up to three pieces, as 64 lowercase hex digits into hex. */
static int sha256_hex(const void *a, size_t na, const void *b, size_t nb, const void *c,
                      size_t nc, char hex[SHA_HEX + 1])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
             (!na || EVP_DigestUpdate(ctx, a, na) == 1) &&
             (!nb || EVP_DigestUpdate(ctx, b, nb) == 1) &&
             (!nc || EVP_DigestUpdate(ctx, c, nc) == 1) &&
             EVP_DigestFinal_ex(ctx, md, &len) == 1 && len * 2 == SHA_HEX;
    EVP_MD_CTX_free(ctx);
    if (!ok)
        return DSL_ENOTSUP;
    for (unsigned i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return 0;
}

static const char zeros[SHA_HEX + 1] = "00000000000000000000000000000000"
                                       "00000000000000000000000000000000";

/* The header's checksum: SHA-256 of the 8 length bytes and the header with the 64
 * digits of its own dsl.sha256 value (at offset at of the header) read as zeros. */
static int header_sha(const unsigned char *file, size_t hlen, size_t at, char hex[SHA_HEX + 1])
{
    return sha256_hex(file, 8 + at, zeros, SHA_HEX, file + 8 + at + SHA_HEX,
                      hlen - at - SHA_HEX, hex);
}

/* ---- writing ---------------------------------------------------------------------- */

static void json_str(struct dsl_dynbuf *b, const char *s)
{
    dsl_dynbuf_addstr(b, "\"");
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            dsl_dynbuf_addf(b, "\\%c", ch);
        else if (ch < 0x20)
            dsl_dynbuf_addf(b, "\\u%04x", ch);
        else
            dsl_dynbuf_add(b, s, 1);
    }
    dsl_dynbuf_addstr(b, "\"");
}

static int write_all(int fd, const void *p, uint64_t n)
{
    const unsigned char *c = p;
    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t w = write(fd, c, chunk);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        c += w;
        n -= (uint64_t)w;
    }
    return 0;
}

static int tensor_nbytes(const struct dsl_st_tensor *t, uint64_t *out)
{
    uint64_t n = dsl_st_dtype_size(t->dtype);
    if (n == 0 || t->ndim < 0 || t->ndim > DSL_ST_MAX_DIMS)
        return -1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] != 0 && n > UINT64_MAX / t->shape[d])
            return -1;
        n *= t->shape[d];
    }
    *out = n;
    return 0;
}

/* The SHA-256 of all tensors' bytes in order, as hex into data_sha. */
static int data_digest(const char *path, const struct dsl_st_tensor *t, size_t n,
                       char data_sha[SHA_HEX + 1], char *err)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    int r = 0;

    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        r = dsl_seterr(err, DSL_ENOTSUP, "cannot write '%s': libcrypto has no SHA-256", path);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = 0;
        if (tensor_nbytes(&t[i], &nb) < 0) {
            r = dsl_seterr(err, DSL_ECHECKPOINT, "cannot write '%s': bad tensor '%s'", path,
                           t[i].name);
            goto done;
        }
        if (nb && EVP_DigestUpdate(ctx, t[i].data, (size_t)nb) != 1) {
            r = dsl_seterr(err, DSL_ENOTSUP, "cannot write '%s': SHA-256 failed", path);
            goto done;
        }
    }
    if (EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen * 2 != SHA_HEX) {
        r = dsl_seterr(err, DSL_ENOTSUP, "cannot write '%s': SHA-256 failed", path);
        goto done;
    }
    for (unsigned i = 0; i < mdlen; i++)
        snprintf(data_sha + 2 * i, 3, "%02x", md[i]);
done:
    EVP_MD_CTX_free(ctx);
    return r;
}

/* The JSON header into h: meta (less the checksum keys), the data's checksum, zeros
 * where the header's own goes (returns their offset), each tensor, padding to 8. */
static size_t build_header(struct dsl_dynbuf *h, const struct dsl_st_tensor *t, size_t n,
                           const struct dsl_strvec *meta, const char *data_sha)
{
    uint64_t off = 0;
    size_t sha_at;
    dsl_dynbuf_addstr(h, "{\"__metadata__\":{");
    for (size_t i = 0; meta && i < meta->nr; i++) {
        const char *eq = strchr(meta->v[i], '=');
        if (!eq)
            continue;
        char *k = dsl_xstrndup(meta->v[i], (size_t)(eq - meta->v[i]));
        if (strcmp(k, META_CRC) != 0 && strcmp(k, META_SHA) != 0 &&
            strcmp(k, META_DATA_SHA) != 0) {
            json_str(h, k);
            dsl_dynbuf_addstr(h, ":");
            json_str(h, eq + 1);
            dsl_dynbuf_addstr(h, ",");
        }
        free(k);
    }
    /* the data's checksum, then the header's own, which covers every other byte of
     * the header (the data's checksum included); its digits are zeros while hashing */
    dsl_dynbuf_addf(h, "\"" META_DATA_SHA "\":\"%s\",\"" META_SHA "\":\"", data_sha);
    sha_at = h->len;
    dsl_dynbuf_addf(h, "%s\"}", zeros);
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = 0;
        tensor_nbytes(&t[i], &nb);
        dsl_dynbuf_addstr(h, ",");
        json_str(h, t[i].name);
        dsl_dynbuf_addf(h, ":{\"dtype\":\"%s\",\"shape\":[", dsl_st_dtype_name(t[i].dtype));
        for (int d = 0; d < t[i].ndim; d++)
            dsl_dynbuf_addf(h, "%s%" PRIu64, d ? "," : "", t[i].shape[d]);
        dsl_dynbuf_addf(h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + nb);
        off += nb;
    }
    dsl_dynbuf_addstr(h, "}");
    while ((8 + h->len) % 8 != 0)
        dsl_dynbuf_addstr(h, " ");
    return sha_at;
}

int dsl_st_write(const char *path, const struct dsl_st_tensor *t, size_t n,
                 const struct dsl_strvec *meta, char *err)
{
    struct dsl_dynbuf h;
    uint64_t hlen;
    char *tmp = NULL, data_sha[SHA_HEX + 1], head_sha[SHA_HEX + 1];
    int fd = -1, r;
    size_t sha_at;
    unsigned char lenbuf[8];

    /* no hard limit while building; the size is checked once at the end */
    dsl_dynbuf_init(&h, (size_t)-1 / 2);
    if ((r = data_digest(path, t, n, data_sha, err)) < 0)
        goto out;
    sha_at = build_header(&h, t, n, meta, data_sha);
    if (!h.buf || h.len > MAX_HEADER_BYTES) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "cannot write '%s': header too large", path);
        goto out;
    }
    hlen = h.len;
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)(hlen >> (8 * i));
    /* the digits are still zeros here, as the reader reads them (header_sha) */
    if (sha256_hex(lenbuf, 8, h.buf, h.len, NULL, 0, head_sha) < 0) {
        r = dsl_seterr(err, DSL_ENOTSUP, "cannot write '%s': SHA-256 failed", path);
        goto out;
    }
    memcpy(h.buf + sha_at, head_sha, SHA_HEX);

    /* O_EXCL|O_NOFOLLOW at a random name: nothing planted beside path is written */
    if ((fd = dsl_file_create_temp(path, 0644, &tmp, err)) < 0) {
        r = fd;
        goto out;
    }
    if ((r = write_all(fd, lenbuf, 8)) < 0 || (r = write_all(fd, h.buf, h.len)) < 0)
        goto write_failed;
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = 0;
        tensor_nbytes(&t[i], &nb);
        if ((r = write_all(fd, t[i].data, nb)) < 0)
            goto write_failed;
    }
    if (fsync(fd) < 0) {
        r = -errno;
        goto write_failed;
    }
    if (close(fd) < 0) {
        fd = -1;
        r = -errno;
        goto write_failed;
    }
    fd = -1;
    if (rename(tmp, path) < 0) {
        r = dsl_seterr(err, -errno, "cannot rename '%s' to '%s': %s", tmp, path,
                       strerror(errno));
        goto out;
    }
    free(tmp);
    tmp = NULL;
    if ((r = dsl_file_sync_dir_of(path)) < 0) {
        dsl_seterr(err, r, "cannot sync the directory of '%s': %s", path, strerror(-r));
        goto out;
    }
    r = 0;
    goto out;
write_failed:
    dsl_seterr(err, r, "cannot write '%s': %s", tmp, strerror(-r));
out:
    if (fd >= 0)
        close(fd);
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    dsl_dynbuf_release(&h);
    return r;
}

/* ---- reading ---------------------------------------------------------------------- */

/*
 * One key or value of the header as the scan met it. cJSON lists a parsed document
 * depth first, each object member's key before its value, which is the order in which
 * keys and values start in the text; so the k-th token is the k-th item of that walk.
 * That gives each item its place for messages (cJSON keeps none) and each number its
 * exact value (cJSON keeps doubles, exact only up to 2^53).
 */
enum tok_kind { TK_STR, TK_NUM, TK_LIT, TK_OBJ, TK_ARR };

struct tok {
    size_t start, end; /* in the header; a container ends after its closing bracket */
    uint64_t num;      /* TK_NUM */
    enum tok_kind kind;
};

/* The deepest valid nesting: the top object, an entry, its shape or data_offsets. */
#define MAX_DEPTH 3

struct rd {
    const char *s; /* the header */
    size_t n;
    const char *file;
    char *err;
    struct tok *t;
    size_t nt, cap;
    size_t k;       /* the walk's next token */
    size_t top_end; /* where the top-level object closed (0: not yet) */
    size_t bad_at;  /* where the token the scan failed in starts */
    size_t sha_at;  /* where the 64 digits of dsl.sha256 start (0: no such key) */
};

__attribute__((format(printf, 3, 4))) static int rd_err(struct rd *p, size_t at,
                                                        const char *fmt, ...)
{
    char msg[DSL_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return dsl_seterr(p->err, DSL_ECHECKPOINT, "safetensors file '%s': bad header at byte %zu: %s",
                      p->file, at, msg);
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t add_tok(struct rd *p, enum tok_kind kind, size_t start, size_t end)
{
    if (p->nt == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->t = dsl_xreallocarray(p->t, p->cap, sizeof(*p->t));
    }
    p->t[p->nt] = (struct tok){.start = start, .end = end, .kind = kind};
    return p->nt++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int scan_hex4(struct rd *p, size_t *i, unsigned *out)
{
    unsigned v = 0;
    if (p->n - *i < 4)
        return rd_err(p, *i, "short \\u escape");
    for (size_t k = 0; k < 4; k++) {
        int h = hexval(p->s[*i + k]);
        if (h < 0)
            return rd_err(p, *i, "bad \\u escape");
        v = v * 16 + (unsigned)h;
    }
    *i += 4;
    *out = v;
    return 0;
}

/*
 * A string from its opening quote: JSON's rules, which cJSON does not all enforce (it
 * takes raw control characters, decodes a bad hex digit as 0 and \u0000 as the end of
 * the string). Positions are where the old reader stopped, for the same messages.
 */
static int scan_string(struct rd *p, size_t *pi)
{
    size_t i = *pi + 1;
    int r;
    for (;;) {
        if (i >= p->n)
            return rd_err(p, i, "unterminated string");
        unsigned char ch = (unsigned char)p->s[i++];
        if (ch == '"')
            break;
        if (ch < 0x20)
            return rd_err(p, i, "control character in string");
        if (ch != '\\')
            continue;
        if (i >= p->n)
            return rd_err(p, i, "unterminated string");
        char e = p->s[i++];
        if (e == 'u') {
            unsigned cp, lo;
            if ((r = scan_hex4(p, &i, &cp)) < 0)
                return r;
            if (cp >= 0xd800 && cp < 0xdc00) {
                if (p->n - i < 2 || p->s[i] != '\\' || p->s[i + 1] != 'u')
                    return rd_err(p, i, "lone surrogate in string");
                i += 2;
                if ((r = scan_hex4(p, &i, &lo)) < 0)
                    return r;
                if (lo < 0xdc00 || lo > 0xdfff)
                    return rd_err(p, i, "bad surrogate pair in string");
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                return rd_err(p, i, "lone surrogate in string");
            }
            if (cp == 0)
                return rd_err(p, i, "NUL in string");
        } else if (!e || !strchr("\"\\/bfnrt", e)) {
            return rd_err(p, i, "bad escape in string");
        }
    }
    add_tok(p, TK_STR, *pi, i);
    *pi = i;
    return 0;
}

/* A number: only a non-negative integer in plain digits (no sign, fraction, exponent or
 * leading zero) that fits 64 bits, read exactly; cJSON would take any JSON number. */
static int scan_number(struct rd *p, size_t *pi)
{
    size_t i = *pi, start = i;
    uint64_t v = 0;
    while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') {
        unsigned dgt = (unsigned)(p->s[i] - '0');
        if (v > (UINT64_MAX - dgt) / 10)
            return rd_err(p, i, "number out of range");
        v = v * 10 + dgt;
        i++;
    }
    if (i == start || (i < p->n && memchr("+-.eE", p->s[i], 5)))
        return rd_err(p, start, "expected a non-negative integer");
    if (i - start > 1 && p->s[start] == '0')
        return rd_err(p, i, "leading zero in number");
    size_t k = add_tok(p, TK_NUM, start, i); /* may move p->t */
    p->t[k].num = v;
    *pi = i;
    return 0;
}

/*
 * One pass over the header before cJSON sees it: the lexical rules above, JSON's four
 * whitespace characters only (cJSON skips every byte up to 0x20 and a UTF-8 byte-order
 * mark), at most MAX_DEPTH levels of nesting (anything deeper is invalid here, and a
 * hostile header cannot make it deep), and the token list. The structure (colons,
 * commas, brackets that match) is left to cJSON.
 */
static int scan(struct rd *p)
{
    size_t open[MAX_DEPTH];
    size_t i = 0;
    int depth = 0, r = 0;
    while (i < p->n && is_ws(p->s[i]))
        i++;
    if (i >= p->n || p->s[i] != '{') {
        p->bad_at = i;
        return rd_err(p, i, "expected '{'");
    }
    while (i < p->n && r == 0) {
        unsigned char ch = (unsigned char)p->s[i];
        p->bad_at = i;
        if (is_ws((char)ch)) {
            i++;
        } else if (ch < 0x20) {
            r = rd_err(p, i, p->top_end ? "unexpected text after the header object"
                                        : "control character outside a string");
        } else if (ch == '"') {
            r = scan_string(p, &i);
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            r = scan_number(p, &i);
        } else if (ch == 't' || ch == 'f' || ch == 'n') { /* true, false, null */
            size_t start = i;
            while (i < p->n && p->s[i] >= 'a' && p->s[i] <= 'z')
                i++;
            add_tok(p, TK_LIT, start, i);
        } else if (ch == '{' || ch == '[') {
            if (depth == MAX_DEPTH) /* in shape or data_offsets, a number was due */
                return rd_err(p, i, p->t[open[depth - 1]].kind == TK_ARR
                                        ? "expected a non-negative integer"
                                        : "nested too deep");
            open[depth++] = add_tok(p, ch == '{' ? TK_OBJ : TK_ARR, i, 0);
            i++;
        } else if (ch == '}' || ch == ']') {
            i++;
            if (depth > 0)
                p->t[open[--depth]].end = i;
            if (depth == 0 && !p->top_end)
                p->top_end = i;
        } else {
            i++; /* ':', ',' or a stray byte, which cJSON rejects */
        }
    }
    return r;
}

/* cJSON's verdict on the structure, at the byte where it stopped. */
static int parse_failed(struct rd *p, size_t at)
{
    if (at >= p->n)
        return rd_err(p, p->n, "unexpected end of the header");
    if (p->top_end && at >= p->top_end)
        return rd_err(p, at, "unexpected text after the header object");
    /* Where a key should start, cJSON stops one byte past the byte that is not a
     * quote: a stray byte (in no string, number or literal of the scan) right after
     * '{' or ','. */
    size_t b = at - (at > 0);
    int in_tok = 0;
    for (size_t k = 0; k < p->nt && !in_tok; k++)
        in_tok = p->t[k].kind != TK_OBJ && p->t[k].kind != TK_ARR && p->t[k].start <= b &&
                 b < p->t[k].end;
    if (at > 0 && !in_tok && !is_ws(p->s[b]) && !strchr("{[,:]}\"", p->s[b])) {
        while (b > 0 && is_ws(p->s[b - 1]))
            b--;
        if (b > 0 && (p->s[b - 1] == '{' || p->s[b - 1] == ','))
            return rd_err(p, at - 1, "expected '\"'");
    }
    unsigned char ch = (unsigned char)p->s[at];
    if (ch >= 0x20 && ch < 0x7f)
        return rd_err(p, at, "unexpected '%c'", ch);
    return rd_err(p, at, "unexpected byte 0x%02x", ch);
}

/* The token of the walk's next key or value v; NULL if the scan and cJSON disagree,
 * which they cannot on a header both accepted (lost() reports it all the same). */
static const struct tok *next_tok(struct rd *p, enum tok_kind kind)
{
    if (p->k >= p->nt || p->t[p->k].kind != kind)
        return NULL;
    return &p->t[p->k++];
}

static const struct tok *val_tok(struct rd *p, const cJSON *v)
{
    return next_tok(p, cJSON_IsObject(v)   ? TK_OBJ
                       : cJSON_IsArray(v)  ? TK_ARR
                       : cJSON_IsString(v) ? TK_STR
                       : cJSON_IsNumber(v) ? TK_NUM
                                           : TK_LIT);
}

static int lost(struct rd *p)
{
    return rd_err(p, p->k < p->nt ? p->t[p->k].start : p->n,
                  "cannot match the JSON reader's items to the text");
}

/* Where the walk's next value starts (for errors about a value not yet taken). */
static size_t next_start(const struct rd *p)
{
    return p->k < p->nt ? p->t[p->k].start : p->n;
}

/* [uint, ...] with at most max entries */
static int rd_uint_array(struct rd *p, const cJSON *a, uint64_t *v, int max, int *count,
                         size_t *end)
{
    const struct tok *at = val_tok(p, a);
    int k = 0;
    if (!at)
        return lost(p);
    if (!cJSON_IsArray(a))
        return rd_err(p, at->start, "expected '['");
    for (const cJSON *e = a->child; e; e = e->next) {
        const struct tok *et = val_tok(p, e);
        if (!et)
            return lost(p);
        if (k >= max)
            return rd_err(p, et->start, "too many entries in array (at most %d)", max);
        if (!cJSON_IsNumber(e))
            return rd_err(p, et->start, "expected a non-negative integer");
        v[k++] = et->num;
    }
    *count = k;
    *end = at->end;
    return 0;
}

static int rd_tensor(struct rd *p, const cJSON *o, struct dsl_st_tensor *t, uint64_t off[2])
{
    int r, have_dtype = 0, have_shape = 0, have_off = 0;
    const struct tok *ot = val_tok(p, o);
    if (!ot)
        return lost(p);
    if (!cJSON_IsObject(o))
        return rd_err(p, ot->start, "expected '{'");
    for (const cJSON *m = o->child; m; m = m->next) {
        if (!next_tok(p, TK_STR))
            return lost(p);
        size_t vat = next_start(p), end = 0;
        if (strcmp(m->string, "dtype") == 0 && !have_dtype) {
            const struct tok *vt = val_tok(p, m);
            if (!vt)
                return lost(p);
            if (!cJSON_IsString(m))
                return rd_err(p, vt->start, "expected '\"'");
            size_t d;
            for (d = 0; d < NDTYPES; d++)
                if (strcmp(m->valuestring, dtypes[d].name) == 0)
                    break;
            if (d == NDTYPES)
                return rd_err(p, vt->end, "unsupported dtype '%s'", m->valuestring);
            t->dtype = (enum dsl_st_dtype)d;
            have_dtype = 1;
        } else if (strcmp(m->string, "shape") == 0 && !have_shape) {
            if ((r = rd_uint_array(p, m, t->shape, DSL_ST_MAX_DIMS, &t->ndim, &end)) < 0)
                return r;
            have_shape = 1;
        } else if (strcmp(m->string, "data_offsets") == 0 && !have_off) {
            int k = 0;
            if ((r = rd_uint_array(p, m, off, 2, &k, &end)) < 0)
                return r;
            if (k != 2)
                return rd_err(p, end, "data_offsets must hold two numbers");
            have_off = 1;
        } else {
            return rd_err(p, vat, "unexpected or repeated field '%s'", m->string);
        }
    }
    if (!have_dtype || !have_shape || !have_off)
        return rd_err(p, ot->end, "tensor entry needs dtype, shape and data_offsets");
    return 0;
}

static int rd_metadata(struct rd *p, const cJSON *o, struct dsl_strvec *meta)
{
    const struct tok *ot = val_tok(p, o);
    if (!ot)
        return lost(p);
    if (!cJSON_IsObject(o))
        return rd_err(p, ot->start, "expected '{'");
    for (const cJSON *m = o->child; m; m = m->next) {
        const struct tok *kt = next_tok(p, TK_STR);
        if (!kt)
            return lost(p);
        if (strchr(m->string, '=') || !m->string[0] || dsl_env_get(meta, m->string))
            return rd_err(p, kt->end, "unsupported or repeated metadata key '%s'", m->string);
        const struct tok *vt = val_tok(p, m);
        if (!vt)
            return lost(p);
        if (!cJSON_IsString(m))
            return rd_err(p, vt->start, "expected '\"'");
        if (strcmp(m->string, META_SHA) == 0 || strcmp(m->string, META_DATA_SHA) == 0) {
            /* 64 lowercase hex digits, spelled without escapes, so the header's own
             * digits sit at a known place and read as zeros while hashing */
            size_t k = 0;
            while (k < SHA_HEX && hexval(m->valuestring[k]) >= 0 &&
                   !(m->valuestring[k] >= 'A' && m->valuestring[k] <= 'F'))
                k++;
            if (k != SHA_HEX || m->valuestring[k] || vt->end - vt->start != SHA_HEX + 2)
                return rd_err(p, vt->start, "%s must be 64 lowercase hex digits", m->string);
            if (strcmp(m->string, META_SHA) == 0)
                p->sha_at = vt->start + 1;
        }
        dsl_env_set(meta, m->string, m->valuestring);
    }
    return 0;
}

/* The header's entries into the arrays at tp and offp (*np of them; the names are the
 * caller's to free) and its metadata into f->meta. */
static int rd_header(struct rd *p, struct dsl_st_file *f, struct dsl_st_tensor **tp,
                     uint64_t (**offp)[2], size_t *np)
{
    size_t alloc = 0;
    int have_meta = 0;
    /*
     * The scan stops at the first lexical fault; cJSON stops at the first structural
     * one. The earlier of the two is reported: after a quote lost to a flipped bit the
     * scan reads strings as text and fails far on, where cJSON already failed at the
     * quote; a bad escape fails both, the scan with the precise reason, from the start
     * of the same string.
     */
    int r = scan(p);
    /* cJSON wants the terminating NUL inside the length to accept a document that
     * ends there; the header is followed by tensor data in the file, so copy it */
    char *text = dsl_xmalloc(p->n + 1);
    memcpy(text, p->s, p->n);
    text[p->n] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, p->n + 1, &end, 1);
    if (!root) {
        size_t at = end && end >= text && end <= text + p->n ? (size_t)(end - text) : p->n;
        if (r == 0 || at < p->bad_at)
            r = parse_failed(p, at);
    }
    free(text);
    if (r < 0)
        goto out;
    if (!next_tok(p, TK_OBJ) || !cJSON_IsObject(root)) {
        r = lost(p);
        goto out;
    }
    for (const cJSON *m = root->child; m; m = m->next) {
        if (!next_tok(p, TK_STR)) {
            r = lost(p);
            goto out;
        }
        if (strcmp(m->string, "__metadata__") == 0) {
            if (have_meta) {
                r = rd_err(p, next_start(p), "repeated __metadata__");
                goto out;
            }
            have_meta = 1;
            if ((r = rd_metadata(p, m, &f->meta)) < 0)
                goto out;
            continue;
        }
        if (*np == alloc) {
            alloc = alloc ? 2 * alloc : 16;
            *tp = dsl_xreallocarray(*tp, alloc, sizeof(**tp));
            *offp = dsl_xreallocarray(*offp, alloc, sizeof(**offp));
        }
        struct dsl_st_tensor *t = &(*tp)[*np];
        memset(t, 0, sizeof(*t));
        t->name = dsl_xstrdup(m->string);
        (*np)++;
        if ((r = rd_tensor(p, m, t, (*offp)[*np - 1])) < 0)
            goto out;
    }
    r = 0;
out:
    cJSON_Delete(root);
    return r;
}

void dsl_st_release(struct dsl_st_file *f)
{
    for (size_t i = 0; i < f->n; i++)
        free((char *)(uintptr_t)f->t[i].name);
    free(f->t);
    free(f->buf);
    free(f->path);
    dsl_strvec_release(&f->meta);
    memset(f, 0, sizeof(*f));
    dsl_strvec_init(&f->meta);
}

/* a tensor's place in the data region, to sort the entries by it */
struct span {
    uint64_t begin, nbytes;
    size_t i;
};

static int cmp_span(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    /* zero-size tensors may share an offset; keep a total order */
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/*
 * The checksums, after the structure is known to be sound. The header's (dsl.sha256)
 * comes first: when it fails, the header may also carry a wrong data checksum, so the
 * data is not judged by it; with DSL_ST_HEADER_SUM_LATER that is noted in
 * f->header_bad for the caller, who can name the field that changed. Files with only
 * dsl.crc32 (older dslaunch) have their data checked by it.
 */
static int check_sums(struct dsl_st_file *f, size_t hlen, size_t sha_at, unsigned flags,
                      char *err)
{
    const unsigned char *data = f->buf + 8 + hlen;
    size_t datalen = f->len - 8 - hlen;
    const char *head = dsl_env_get(&f->meta, META_SHA);
    const char *want = dsl_env_get(&f->meta, META_DATA_SHA);
    const char *crc = dsl_env_get(&f->meta, META_CRC);
    char got[SHA_HEX + 1];
    f->sum = DSL_ST_SUM_NONE;
    if (head) {
        if (header_sha(f->buf, hlen, sha_at, got) < 0)
            return dsl_seterr(err, DSL_ENOTSUP,
                              "safetensors file '%s': cannot check it: libcrypto has no "
                              "SHA-256",
                              f->path);
        if (strcmp(got, head) != 0) {
            if (flags & DSL_ST_HEADER_SUM_LATER) {
                f->header_bad = 1;
                return 0;
            }
            return dsl_seterr(err, DSL_ECHECKPOINT,
                              "safetensors file '%s': the header does not match its checksum "
                              "(" META_SHA "): it was edited or is corrupt",
                              f->path);
        }
    }
    if (want) {
        if (sha256_hex(data, datalen, NULL, 0, NULL, 0, got) < 0)
            return dsl_seterr(err, DSL_ENOTSUP,
                              "safetensors file '%s': cannot check it: libcrypto has no "
                              "SHA-256",
                              f->path);
        if (strcmp(got, want) != 0)
            return dsl_seterr(err, DSL_ECHECKPOINT,
                              "safetensors file '%s': the tensor data does not match its "
                              "checksum (" META_DATA_SHA " %.12s..., the data hashes to "
                              "%.12s...): the data is corrupt",
                              f->path, want, got);
        if (head)
            f->sum = DSL_ST_SUM_SHA256;
    } else if (crc) {
        char c[16];
        snprintf(c, sizeof(c), "%08lx",
                 crc_update(crc32(0L, Z_NULL, 0), data, datalen) & 0xffffffffUL);
        if (strcmp(c, crc) != 0)
            return dsl_seterr(err, DSL_ECHECKPOINT,
                              "safetensors file '%s': checksum mismatch (crc32 %s, header says "
                              "%s): the data is corrupt",
                              f->path, c, crc);
        f->sum = DSL_ST_SUM_CRC32;
    }
    return 0;
}

/* What st_header() found, for st_finish(). */
struct st_head {
    uint64_t hlen;
    size_t sha_at;
    struct dsl_st_tensor *t; /* sorted by data offset; data not set yet */
    uint64_t *begin;         /* t[i]'s first byte in the data region */
    size_t n;
};

static void st_head_release(struct st_head *h)
{
    for (size_t i = 0; i < h->n; i++)
        free((char *)(uintptr_t)h->t[i].name);
    free(h->t);
    free(h->begin);
    memset(h, 0, sizeof(*h));
}

/* The header length of a file of filelen bytes whose first min(filelen, 8) bytes are
 * at buf, checked against the file size and the format's limit. */
static int st_hlen(const char *name, const unsigned char *buf, uint64_t filelen, uint64_t *out,
                   char *err)
{
    uint64_t hlen = 0;
    if (filelen < 8)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "safetensors file '%s' is truncated: %" PRIu64
                          " bytes, no header length",
                          name, filelen);
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | buf[i];
    if (hlen > filelen - 8)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "safetensors file '%s' is truncated: header of %" PRIu64
                          " bytes but only %" PRIu64 " bytes follow",
                          name, hlen, filelen - 8);
    if (hlen > MAX_HEADER_BYTES || hlen < 2)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "safetensors file '%s': bad header length %" PRIu64, name, hlen);
    *out = hlen;
    return 0;
}

/*
 * The header of a file of filelen bytes, of which f->buf holds at least the first
 * 8 + header length: its entries, and every size they claim judged against the data
 * region the file really has (filelen - 8 - header length), which they must tile
 * exactly. Nothing here touches the data, so a loader knows that the file is what its
 * header says before it allocates for the data (a sparse file of a terabyte with a
 * small header fails here, not in malloc).
 */
static int st_header(struct dsl_st_file *f, uint64_t filelen, struct st_head *h, char *err)
{
    uint64_t datalen;
    int r;
    const char *name = f->path;
    struct span *sp = NULL;
    uint64_t (*offs)[2] = NULL;

    memset(h, 0, sizeof(*h));
    if ((r = st_hlen(name, f->buf, filelen, &h->hlen, err)) < 0)
        return r;
    datalen = filelen - 8 - h->hlen;

    struct rd p = {.s = (const char *)f->buf + 8, .n = (size_t)h->hlen, .file = name,
                   .err = err};
    r = rd_header(&p, f, &h->t, &offs, &h->n);
    free(p.t);
    h->sha_at = p.sha_at;
    if (r < 0)
        goto fail;
    sp = dsl_xcalloc(h->n ? h->n : 1, sizeof(*sp));
    for (size_t i = 0; i < h->n; i++) {
        struct dsl_st_tensor *t = &h->t[i];
        uint64_t nb = 0;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(t->name, h->t[j].name) == 0) {
                r = dsl_seterr(err, DSL_ECHECKPOINT,
                               "safetensors file '%s': tensor '%s' appears twice", name,
                               t->name);
                goto fail;
            }
        }
        if (tensor_nbytes(t, &nb) < 0) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "safetensors file '%s': tensor '%s' has an impossible size", name,
                           t->name);
            goto fail;
        }
        if (offs[i][0] > offs[i][1] || offs[i][1] > datalen || offs[i][1] - offs[i][0] != nb) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "safetensors file '%s': tensor '%s' has data_offsets [%" PRIu64
                           ", %" PRIu64 "] but needs %" PRIu64 " bytes within %" PRIu64
                           " bytes of data%s",
                           name, t->name, offs[i][0], offs[i][1], nb, datalen,
                           offs[i][1] > datalen ? " (truncated file?)" : "");
            goto fail;
        }
        t->nbytes = nb;
        sp[i] = (struct span){offs[i][0], nb, i};
    }
    if (h->n)
        qsort(sp, h->n, sizeof(*sp), cmp_span);
    uint64_t pos = 0;
    for (size_t i = 0; i < h->n; i++) {
        if (sp[i].begin != pos) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "safetensors file '%s': tensor '%s' starts at byte %" PRIu64
                           " of the data, expected %" PRIu64 " (%s)",
                           name, h->t[sp[i].i].name, sp[i].begin, pos,
                           sp[i].begin < pos ? "overlap" : "gap");
            goto fail;
        }
        pos = sp[i].begin + sp[i].nbytes;
    }
    if (pos != datalen) {
        r = dsl_seterr(err, DSL_ECHECKPOINT,
                       "safetensors file '%s': %" PRIu64 " bytes of data but the tensors "
                       "cover %" PRIu64 "%s",
                       name, datalen, pos,
                       datalen > pos ? " (bytes the header does not describe: the file was "
                                       "extended, or is not what its header says)"
                                     : "");
        goto fail;
    }
    /* the entries in data order, with their offsets */
    struct dsl_st_tensor *sorted = dsl_xcalloc(h->n ? h->n : 1, sizeof(*sorted));
    h->begin = dsl_xcalloc(h->n ? h->n : 1, sizeof(*h->begin));
    for (size_t i = 0; i < h->n; i++) {
        sorted[i] = h->t[sp[i].i];
        h->begin[i] = sp[i].begin;
    }
    free(h->t);
    h->t = sorted;
    free(sp);
    free(offs);
    return 0;
fail:
    free(sp);
    free(offs);
    st_head_release(h);
    return r;
}

/* The data is in: point the tensors at it, check the sums, hand the entries to f. */
static int st_finish(struct dsl_st_file *f, struct st_head *h, unsigned flags, char *err)
{
    const unsigned char *data = f->buf + 8 + h->hlen;
    for (size_t i = 0; i < h->n; i++)
        h->t[i].data = data + h->begin[i];
    int r = check_sums(f, (size_t)h->hlen, h->sha_at, flags, err);
    if (r < 0) {
        st_head_release(h);
        return r;
    }
    f->t = h->t;
    f->n = h->n;
    free(h->begin);
    memset(h, 0, sizeof(*h));
    return 0;
}

/* DSL_ST_NEED_SUM: refuse a header without any checksum (h released then) */
static int need_sums(struct dsl_st_file *f, struct st_head *h, unsigned flags, char *err)
{
    if (!(flags & DSL_ST_NEED_SUM) || dsl_env_get(&f->meta, META_SHA) ||
        dsl_env_get(&f->meta, META_DATA_SHA) || dsl_env_get(&f->meta, META_CRC))
        return 0;
    st_head_release(h);
    f->no_sums = 1;
    return dsl_seterr(err, DSL_ECHECKPOINT, "safetensors file '%s' has no checksums", f->path);
}

int dsl_st_parse(struct dsl_st_file *f, const char *name, const void *buf, size_t len,
                 unsigned flags, char *err)
{
    struct st_head h;
    int r;
    memset(f, 0, sizeof(*f));
    dsl_strvec_init(&f->meta);
    f->path = dsl_xstrdup(name ? name : "<memory>");
    f->buf = dsl_xmalloc(len ? len : 1);
    if (len)
        memcpy(f->buf, buf, len);
    f->len = len;
    if ((r = st_header(f, len, &h, err)) < 0 || (r = need_sums(f, &h, flags, err)) < 0)
        return r;
    return st_finish(f, &h, flags, err);
}

/* n bytes from fd into buf; how many came (fewer: end of file) or -errno */
static ssize_t read_full(int fd, unsigned char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, buf + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        if (k == 0)
            break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

/*
 * In two reads: the length and the header first, judged against the file's size
 * (st_header), then, only for a file that is what its header says, the data into a
 * buffer of the file's size. So a header or a file size that lies costs no more than
 * the header (at most MAX_HEADER_BYTES).
 */
int dsl_st_load(struct dsl_st_file *f, const char *path, unsigned flags, char *err)
{
    size_t len = 0, head;
    uint64_t hlen = 0;
    struct st_head h;
    ssize_t k;
    int fd, r;
    memset(f, 0, sizeof(*f));
    dsl_strvec_init(&f->meta);
    f->path = dsl_xstrdup(path);
    /* a regular file only: a FIFO in a shard's place fails here instead of hanging */
    fd = dsl_file_open_regular(path, &len, err);
    if (fd < 0)
        return fd == -ENOENT || fd == -EINVAL ? DSL_ECHECKPOINT : fd;
    head = len < 8 ? len : 8;
    f->buf = dsl_xmalloc(8);
    if ((k = read_full(fd, f->buf, head)) < 0) {
        r = dsl_seterr(err, (int)k, "cannot read '%s': %s", path, strerror((int)-k));
        goto out;
    }
    if ((size_t)k != head)
        goto changed;
    if ((r = st_hlen(path, f->buf, len, &hlen, err)) < 0)
        goto out;
    head = 8 + (size_t)hlen; /* at most 8 + MAX_HEADER_BYTES, within the file */
    unsigned char *hb = realloc(f->buf, head);
    if (!hb) {
        r = dsl_seterr(err, -ENOMEM, "cannot allocate %zu bytes for the header of '%s'", head,
                       path);
        goto out;
    }
    f->buf = hb;
    if ((k = read_full(fd, f->buf + 8, head - 8)) < 0) {
        r = dsl_seterr(err, (int)k, "cannot read '%s': %s", path, strerror((int)-k));
        goto out;
    }
    if ((size_t)k != head - 8)
        goto changed;
    f->len = head;
    if ((r = st_header(f, len, &h, err)) < 0)
        goto out;
    if ((r = need_sums(f, &h, flags, err)) < 0)
        goto out;
    /* every size in the header matches the file: now the data */
    unsigned char *all = realloc(f->buf, len ? len : 1);
    if (!all) {
        st_head_release(&h);
        r = dsl_seterr(err, -ENOMEM, "cannot allocate %zu bytes to read '%s'", len, path);
        goto out;
    }
    f->buf = all;
    if ((k = read_full(fd, f->buf + head, len - head)) < 0) {
        st_head_release(&h);
        r = dsl_seterr(err, (int)k, "cannot read '%s': %s", path, strerror((int)-k));
        goto out;
    }
    if ((size_t)k != len - head) {
        st_head_release(&h);
        goto changed;
    }
    f->len = len;
    close(fd);
    return st_finish(f, &h, flags, err);
changed:
    r = dsl_seterr(err, DSL_ECHECKPOINT,
                   "safetensors file '%s' changed while it was read (it is shorter than "
                   "its size of %zu bytes): is something else writing it?",
                   path, len);
out:
    close(fd);
    return r;
}

const struct dsl_st_tensor *dsl_st_find(const struct dsl_st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}
