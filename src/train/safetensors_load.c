/*
 * safetensors reader (format in safetensors.h; the header's grammar in
 * safetensors_header.c).
 *
 * Theory of operation. A file is validated before anyone looks at a tensor, and its
 * header before anything is allocated for its data: the length and the header are read
 * first, and every size the header claims is judged against the file's real size (a
 * sparse file of a terabyte behind a small header fails there, not in malloc). Header
 * length inside the file, entries well formed, sizes = product(shape) x dtype size
 * without overflow, offsets that tile the data region exactly (sorted, no gap, no
 * overlap, nothing after the last), unique names, then the checksums: the header's
 * SHA-256 over its own bytes with its digits zeroed (so any edited field fails), the
 * data's SHA-256, or an older file's crc32. Reads open the file O_NONBLOCK and accept
 * only a regular file, so a FIFO in its place cannot hang a resume.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <zlib.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "safetensors.h"
#include "safetensors_internal.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

void dsl_st_release(struct dsl_st_file *f)
{
    for (size_t i = 0; i < f->n; i++)
        free((char *)(uintptr_t)f->t[i].name);
    free(f->t);
    free(f->buf);
    free(f->path);
    if (f->fd_open)
        close(f->fd);
    free(f->begin);
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

/* The data's checksums against what the header says: got, the data's SHA-256 in hex
 * (NULL: the header has none), crc its crc32 (for an older file's dsl.crc32). */
static int sums_match(struct dsl_st_file *f, const char *got, unsigned long crc, char *err)
{
    const char *want = dsl_env_get(&f->meta, META_DATA_SHA);
    const char *wcrc = dsl_env_get(&f->meta, META_CRC);
    if (want) {
        if (strcmp(got, want) != 0)
            return dsl_seterr(err, DSL_ECHECKPOINT,
                              "safetensors file '%s': the tensor data does not match its "
                              "checksum (" META_DATA_SHA " %.12s..., the data hashes to "
                              "%.12s...): the data is corrupt",
                              f->path, want, got);
        if (dsl_env_get(&f->meta, META_SHA))
            f->sum = DSL_ST_SUM_SHA256;
    } else if (wcrc) {
        char c[16];
        snprintf(c, sizeof(c), "%08lx", crc);
        if (strcmp(c, wcrc) != 0)
            return dsl_seterr(err, DSL_ECHECKPOINT,
                              "safetensors file '%s': checksum mismatch (crc32 %s, header says "
                              "%s): the data is corrupt",
                              f->path, c, wcrc);
        f->sum = DSL_ST_SUM_CRC32;
    }
    return 0;
}

/* a file that got shorter between its stat and its read */
static int st_changed(const char *path, size_t len, char *err)
{
    return dsl_seterr(err, DSL_ECHECKPOINT,
                      "safetensors file '%s' changed while it was read (it is shorter than "
                      "its size of %zu bytes): is something else writing it?",
                      path, len);
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
        if (dsl_st_header_sha(f->buf, hlen, sha_at, got) < 0)
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
    if (!want && !crc)
        return 0;
    if (want && dsl_st_sha256_hex(data, datalen, NULL, 0, NULL, 0, got) < 0)
        return dsl_seterr(err, DSL_ENOTSUP,
                          "safetensors file '%s': cannot check it: libcrypto has no SHA-256",
                          f->path);
    return sums_match(f, want ? got : NULL,
                      dsl_st_crc_update(crc32(0L, Z_NULL, 0), data, datalen) & 0xffffffffUL,
                      err);
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

    r = dsl_st_header_parse(f, (const char *)f->buf + 8, (size_t)h->hlen, &h->t, &offs, &h->n,
                            &h->sha_at, err);
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
        if (dsl_st_tensor_nbytes(t, &nb) < 0) {
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
 * The length and the header of path, judged against the file's size (st_header): f
 * holds the header (f->len = 8 + its length), h the entries, *fd the open file, *size
 * its size. So a header or a file size that lies costs no more than the header (at
 * most MAX_HEADER_BYTES).
 */
static int st_open_head(struct dsl_st_file *f, const char *path, unsigned flags,
                        struct st_head *h, int *fdp, size_t *size, char *err)
{
    size_t len = 0, head;
    uint64_t hlen = 0;
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
    if ((k = read_full(fd, f->buf, head)) < 0)
        goto unreadable;
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
    if ((k = read_full(fd, f->buf + 8, head - 8)) < 0)
        goto unreadable;
    if ((size_t)k != head - 8)
        goto changed;
    f->len = head;
    if ((r = st_header(f, len, h, err)) < 0 || (r = need_sums(f, h, flags, err)) < 0)
        goto out;
    *fdp = fd;
    *size = len;
    return 0;
unreadable:
    r = dsl_seterr(err, (int)k, "cannot read '%s': %s", path, strerror((int)-k));
    goto out;
changed:
    r = st_changed(path, len, err);
out:
    close(fd);
    return r;
}

/* In two reads: the header (st_open_head), then, only for a file that is what its
 * header says, the data into a buffer of the file's size. */
int dsl_st_load(struct dsl_st_file *f, const char *path, unsigned flags, char *err)
{
    size_t len = 0, head;
    struct st_head h;
    ssize_t k;
    int fd = -1, r;
    if ((r = st_open_head(f, path, flags, &h, &fd, &len, err)) < 0)
        return r;
    head = f->len;
    /* every size in the header matches the file: now the data */
    unsigned char *all = realloc(f->buf, len ? len : 1);
    if (!all) {
        r = dsl_seterr(err, -ENOMEM, "cannot allocate %zu bytes to read '%s'", len, path);
        goto fail;
    }
    f->buf = all;
    if ((k = read_full(fd, f->buf + head, len - head)) < 0) {
        r = dsl_seterr(err, (int)k, "cannot read '%s': %s", path, strerror((int)-k));
        goto fail;
    }
    if ((size_t)k != len - head) {
        r = st_changed(path, len, err);
        goto fail;
    }
    f->len = len;
    close(fd);
    return st_finish(f, &h, flags, err);
fail:
    st_head_release(&h);
    close(fd);
    return r;
}

int dsl_st_open(struct dsl_st_file *f, const char *path, unsigned flags, char *err)
{
    struct st_head h;
    size_t len = 0;
    int fd = -1, r;
    char got[SHA_HEX + 1];
    if ((r = st_open_head(f, path, flags, &h, &fd, &len, err)) < 0)
        return r;
    f->fd = fd;
    f->fd_open = 1;
    f->data_at = f->len;
    f->data_len = len - f->len;
    f->t = h.t; /* data NULL: read it with dsl_st_pread */
    f->n = h.n;
    f->begin = h.begin;
    f->whole.name = "";
    f->whole.nbytes = f->data_len;
    const char *head = dsl_env_get(&f->meta, META_SHA);
    const char *want = dsl_env_get(&f->meta, META_DATA_SHA);
    /* what the file carries; dsl_st_verify says whether its data matches */
    f->sum = head && want                                   ? DSL_ST_SUM_SHA256
             : !want && dsl_env_get(&f->meta, META_CRC) ? DSL_ST_SUM_CRC32
                                                            : DSL_ST_SUM_NONE;
    if (!head)
        return 0;
    if (dsl_st_header_sha(f->buf, (size_t)h.hlen, h.sha_at, got) < 0)
        return dsl_seterr(err, DSL_ENOTSUP, "safetensors file '%s': cannot check it: "
                          "libcrypto has no SHA-256", f->path);
    if (strcmp(got, head) == 0)
        return 0;
    if (flags & DSL_ST_HEADER_SUM_LATER) {
        f->header_bad = 1;
        return 0;
    }
    return dsl_seterr(err, DSL_ECHECKPOINT, "safetensors file '%s': the header does not "
                      "match its checksum (" META_SHA "): it was edited or is corrupt",
                      f->path);
}

int dsl_st_pread(const struct dsl_st_file *f, const struct dsl_st_tensor *t, uint64_t off,
                 void *buf, size_t n, char *err)
{
    uint64_t at = f->data_at + off;
    if (t != &f->whole)
        at += f->begin[t - f->t];
    unsigned char *p = buf;
    if (off > t->nbytes || n > t->nbytes - off)
        return dsl_seterr(err, DSL_ECHECKPOINT, "safetensors file '%s': read past tensor '%s'",
                          f->path, t->name);
    while (n > 0) {
        ssize_t k = pread(f->fd, p, n, (off_t)at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? dsl_seterr(err, -errno, "cannot read '%s': %s", f->path,
                                      strerror(errno))
                         : st_changed(f->path, (size_t)(f->data_at + f->data_len), err);
        p += k;
        at += (uint64_t)k;
        n -= (size_t)k;
    }
    return 0;
}

int dsl_st_verify(struct dsl_st_file *f, void *buf, size_t bufsize, char *err)
{
    const char *want = dsl_env_get(&f->meta, META_DATA_SHA);
    const char *crc = dsl_env_get(&f->meta, META_CRC);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned long c32 = crc32(0L, Z_NULL, 0);
    int r = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1
                ? 0
                : dsl_seterr(err, DSL_ENOTSUP, "safetensors file '%s': cannot check it: "
                             "libcrypto has no SHA-256", f->path);
    f->sum = DSL_ST_SUM_NONE;
    for (uint64_t at = 0; r == 0 && at < f->data_len && (want || crc);) {
        size_t k = f->data_len - at < bufsize ? (size_t)(f->data_len - at) : bufsize;
        if ((r = dsl_st_pread(f, &f->whole, at, buf, k, err)) < 0)
            break;
        if (EVP_DigestUpdate(md, buf, k) != 1)
            r = dsl_seterr(err, DSL_ENOTSUP, "safetensors file '%s': SHA-256 failed", f->path);
        c32 = dsl_st_crc_update(c32, buf, k);
        at += k;
    }
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    char got[SHA_HEX + 1] = "";
    if (r == 0 && want && (EVP_DigestFinal_ex(md, d, &dlen) != 1 || dlen * 2 != SHA_HEX))
        r = dsl_seterr(err, DSL_ENOTSUP, "safetensors file '%s': SHA-256 failed", f->path);
    for (unsigned i = 0; r == 0 && i < dlen; i++)
        snprintf(got + 2 * i, 3, "%02x", d[i]);
    EVP_MD_CTX_free(md);
    return r < 0 ? r : sums_match(f, want ? got : NULL, c32 & 0xffffffffUL, err);
}

const struct dsl_st_tensor *dsl_st_find(const struct dsl_st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}
