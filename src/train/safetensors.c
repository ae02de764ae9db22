/*
 * safetensors writer, and what its reader shares with it: the dtypes, the checksums
 * (format in safetensors.h; the header's grammar in safetensors_header.c, loading in
 * safetensors_load.c).
 *
 * Theory of operation. A write is a stream (dsl_st_stream_*, so that a consolidation
 * can write one layer at a time): the header goes first with zeros for the data's
 * checksum, the data follows and is hashed as it passes (dsl.data_sha256), and at the
 * end the header, whose length the checksum's fixed 64 digits do not change, is
 * written again over the first with the data's checksum and its own (over the 8
 * length bytes and the header with its own digits as zeros, as the reader hashes it).
 * All of it goes to a temporary file with a random name beside the target,
 * created O_EXCL|O_NOFOLLOW so that no link planted there is followed, which is
 * fsynced and renamed into place, then the directory is fsynced, so a crash leaves
 * either the old file or the new one.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <zlib.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "safetensors.h"
#include "safetensors_internal.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

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

int dsl_st_dtype_parse(const char *name)
{
    for (size_t d = 0; d < NDTYPES; d++)
        if (strcmp(name, dtypes[d].name) == 0)
            return (int)d;
    return -1;
}

unsigned long dsl_st_crc_update(unsigned long crc, const unsigned char *p, uint64_t n)
{
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return crc;
}

int dsl_st_sha256_hex(const void *a, size_t na, const void *b, size_t nb, const void *c,
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

const char dsl_st_zeros[SHA_HEX + 1] = "00000000000000000000000000000000"
                                       "00000000000000000000000000000000";

int dsl_st_header_sha(const unsigned char *file, size_t hlen, size_t at, char hex[SHA_HEX + 1])
{
    return dsl_st_sha256_hex(file, 8 + at, dsl_st_zeros, SHA_HEX, file + 8 + at + SHA_HEX,
                      hlen - at - SHA_HEX, hex);
}

int dsl_st_tensor_nbytes(const struct dsl_st_tensor *t, uint64_t *out)
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
    dsl_dynbuf_addf(h, "%s\"}", dsl_st_zeros);
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = 0;
        dsl_st_tensor_nbytes(&t[i], &nb);
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

/* The 8 length bytes and the header, both checksums in place, at the start of the
 * file: data_sha is the data's, and the header's own is computed over its zeros. */
static int put_header(struct dsl_st_stream *w, const char *data_sha, char *err)
{
    struct dsl_dynbuf h;
    char head_sha[SHA_HEX + 1];
    unsigned char lenbuf[8];
    int r = 0;
    /* no hard limit while building; the size is checked once at the end */
    dsl_dynbuf_init(&h, (size_t)-1 / 2);
    size_t sha_at = build_header(&h, w->t, w->n, &w->meta, data_sha);
    if (!h.buf || h.len > MAX_HEADER_BYTES) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "cannot write '%s': header too large", w->path);
        goto out;
    }
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    /* the digits are still zeros here, as the reader reads them (header_sha) */
    if (dsl_st_sha256_hex(lenbuf, 8, h.buf, h.len, NULL, 0, head_sha) < 0) {
        r = dsl_seterr(err, DSL_ENOTSUP, "cannot write '%s': SHA-256 failed", w->path);
        goto out;
    }
    memcpy(h.buf + sha_at, head_sha, SHA_HEX);
    if (w->hlen && w->hlen != h.len) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "cannot write '%s': the header changed size",
                       w->path);
        goto out;
    }
    w->hlen = h.len;
    if (lseek(w->fd, 0, SEEK_SET) < 0 || (r = write_all(w->fd, lenbuf, 8)) < 0 ||
        (r = write_all(w->fd, h.buf, h.len)) < 0)
        r = dsl_seterr(err, r < 0 ? r : -errno, "cannot write '%s': %s", w->tmp,
                       strerror(r < 0 ? -r : errno));
out:
    dsl_dynbuf_release(&h);
    return r;
}

int dsl_st_stream_begin(struct dsl_st_stream *w, const char *path,
                        const struct dsl_st_tensor *t, size_t n,
                        const struct dsl_strvec *meta, char *err)
{
    int r;
    memset(w, 0, sizeof(*w));
    w->fd = -1;
    w->path = dsl_xstrdup(path);
    w->t = dsl_xcalloc(n ? n : 1, sizeof(*w->t));
    w->n = n;
    dsl_strvec_init(&w->meta);
    for (size_t i = 0; meta && i < meta->nr; i++)
        dsl_strvec_push(&w->meta, meta->v[i]);
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = 0;
        w->t[i] = t[i];
        w->t[i].data = NULL;
        if (dsl_st_tensor_nbytes(&t[i], &nb) < 0) {
            r = dsl_seterr(err, DSL_ECHECKPOINT, "cannot write '%s': bad tensor '%s'", path,
                           t[i].name);
            goto fail;
        }
        w->total += nb;
    }
    w->md = EVP_MD_CTX_new();
    if (!w->md || EVP_DigestInit_ex(w->md, EVP_sha256(), NULL) != 1) {
        r = dsl_seterr(err, DSL_ENOTSUP, "cannot write '%s': libcrypto has no SHA-256", path);
        goto fail;
    }
    /* O_EXCL|O_NOFOLLOW at a random name: nothing planted beside path is written */
    if ((r = w->fd = dsl_file_create_temp(path, 0644, &w->tmp, err)) < 0)
        goto fail;
    /* the header goes first with zeros for the data's checksum; dsl_st_stream_end
     * writes it again, of the same length, once the data is hashed */
    if ((r = put_header(w, dsl_st_zeros, err)) < 0)
        goto fail;
    return 0;
fail:
    dsl_st_stream_abort(w);
    return r;
}

int dsl_st_stream_put(struct dsl_st_stream *w, const void *p, size_t n, char *err)
{
    int r;
    if (n > w->total - w->done)
        return dsl_seterr(err, DSL_ECHECKPOINT, "cannot write '%s': more data than its tensors",
                          w->path);
    if (n && EVP_DigestUpdate(w->md, p, n) != 1)
        return dsl_seterr(err, DSL_ENOTSUP, "cannot write '%s': SHA-256 failed", w->path);
    if ((r = write_all(w->fd, p, n)) < 0)
        return dsl_seterr(err, r, "cannot write '%s': %s", w->tmp, strerror(-r));
    w->done += n;
    return 0;
}

int dsl_st_stream_end(struct dsl_st_stream *w, char *err)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char data_sha[SHA_HEX + 1];
    int r;
    if (w->done != w->total) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "cannot write '%s': %" PRIu64 " of %" PRIu64
                       " data bytes given", w->path, w->done, w->total);
        goto out;
    }
    if (EVP_DigestFinal_ex(w->md, md, &mdlen) != 1 || mdlen * 2 != SHA_HEX) {
        r = dsl_seterr(err, DSL_ENOTSUP, "cannot write '%s': SHA-256 failed", w->path);
        goto out;
    }
    for (unsigned i = 0; i < mdlen; i++)
        snprintf(data_sha + 2 * i, 3, "%02x", md[i]);
    if ((r = put_header(w, data_sha, err)) < 0)
        goto out;
    if (fsync(w->fd) < 0 || close(w->fd) < 0) {
        w->fd = -1;
        r = dsl_seterr(err, -errno, "cannot write '%s': %s", w->tmp, strerror(errno));
        goto out;
    }
    w->fd = -1;
    if (rename(w->tmp, w->path) < 0) {
        r = dsl_seterr(err, -errno, "cannot rename '%s' to '%s': %s", w->tmp, w->path,
                       strerror(errno));
        goto out;
    }
    free(w->tmp);
    w->tmp = NULL;
    if ((r = dsl_file_sync_dir_of(w->path)) < 0)
        dsl_seterr(err, r, "cannot sync the directory of '%s': %s", w->path, strerror(-r));
out:
    dsl_st_stream_abort(w);
    return r;
}

void dsl_st_stream_abort(struct dsl_st_stream *w)
{
    if (w->fd >= 0)
        close(w->fd);
    if (w->tmp)
        unlink(w->tmp);
    free(w->tmp);
    free(w->path);
    free(w->t);
    EVP_MD_CTX_free(w->md);
    dsl_strvec_release(&w->meta);
    memset(w, 0, sizeof(*w));
    w->fd = -1;
}

int dsl_st_write(const char *path, const struct dsl_st_tensor *t, size_t n,
                 const struct dsl_strvec *meta, char *err)
{
    struct dsl_st_stream w;
    int r = dsl_st_stream_begin(&w, path, t, n, meta, err);
    for (size_t i = 0; i < n && r >= 0; i++) {
        uint64_t nb = 0;
        dsl_st_tensor_nbytes(&t[i], &nb);
        r = dsl_st_stream_put(&w, t[i].data, (size_t)nb, err);
    }
    if (r < 0) {
        dsl_st_stream_abort(&w);
        return r;
    }
    return dsl_st_stream_end(&w, err);
}
