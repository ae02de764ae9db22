/*
 * safetensors reader and writer (format in safetensors.h).
 *
 * The header is JSON, but cJSON stays inside config.c (house style 19), and the
 * header's grammar is small and fixed: an object whose members are tensor entries
 * {"dtype": string, "shape": [uint...], "data_offsets": [uint, uint]} or the
 * "__metadata__" object of string values. So this file carries a strict
 * recursive-descent reader for exactly that grammar; anything else is an error that
 * names the file and the byte offset inside the header. It is fuzzed (fuzz_safetensors).
 *
 * A file is read whole and validated before anyone looks at a tensor: header length
 * inside the file, entries well formed, sizes = product(shape) x dtype size without
 * overflow, offsets that tile the data region exactly (sorted, no gap, no overlap,
 * nothing after the last), unique names, and dsl.crc32 when present. Writes go to a
 * temporary file that is fsynced and renamed into place, then the directory is
 * fsynced, so a crash leaves either the old file or the new one.
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

#include <zlib.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "safetensors.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define MAX_HEADER_BYTES (100u << 20) /* the limit of the reference implementation */
#define META_CRC "dsl.crc32"

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

static int fsync_dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? dsl_xstrndup(path, (size_t)(slash - path)) : dsl_xstrdup(".");
    if (!dir[0]) {
        free(dir);
        dir = dsl_xstrdup("/");
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    int r = 0;
    if (fd < 0 || fsync(fd) < 0)
        r = -errno;
    if (fd >= 0)
        close(fd);
    free(dir);
    return r;
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

int dsl_st_write(const char *path, const struct dsl_st_tensor *t, size_t n,
                 const struct dsl_strvec *meta, char *err)
{
    struct dsl_dynbuf h;
    unsigned long crc = crc32(0L, Z_NULL, 0);
    uint64_t off = 0, hlen;
    char *tmp = NULL;
    int fd = -1, r;
    unsigned char lenbuf[8];

    /* no hard limit while building; the size is checked once at the end */
    dsl_dynbuf_init(&h, (size_t)-1 / 2);
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = 0;
        if (tensor_nbytes(&t[i], &nb) < 0) {
            r = dsl_seterr(err, DSL_ECHECKPOINT, "cannot write '%s': bad tensor '%s'", path,
                           t[i].name);
            goto out;
        }
        crc = crc_update(crc, t[i].data, nb);
    }
    dsl_dynbuf_addstr(&h, "{\"__metadata__\":{");
    for (size_t i = 0; meta && i < meta->nr; i++) {
        const char *eq = strchr(meta->v[i], '=');
        if (!eq)
            continue;
        char *k = dsl_xstrndup(meta->v[i], (size_t)(eq - meta->v[i]));
        if (strcmp(k, META_CRC) != 0) {
            json_str(&h, k);
            dsl_dynbuf_addstr(&h, ":");
            json_str(&h, eq + 1);
            dsl_dynbuf_addstr(&h, ",");
        }
        free(k);
    }
    dsl_dynbuf_addf(&h, "\"" META_CRC "\":\"%08lx\"}", crc & 0xffffffffUL);
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = 0;
        tensor_nbytes(&t[i], &nb);
        dsl_dynbuf_addstr(&h, ",");
        json_str(&h, t[i].name);
        dsl_dynbuf_addf(&h, ":{\"dtype\":\"%s\",\"shape\":[", dsl_st_dtype_name(t[i].dtype));
        for (int d = 0; d < t[i].ndim; d++)
            dsl_dynbuf_addf(&h, "%s%" PRIu64, d ? "," : "", t[i].shape[d]);
        dsl_dynbuf_addf(&h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + nb);
        off += nb;
    }
    dsl_dynbuf_addstr(&h, "}");
    while ((8 + h.len) % 8 != 0)
        dsl_dynbuf_addstr(&h, " ");
    if (!h.buf || h.len > MAX_HEADER_BYTES) {
        r = dsl_seterr(err, DSL_ECHECKPOINT, "cannot write '%s': header too large", path);
        goto out;
    }
    hlen = h.len;
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)(hlen >> (8 * i));

    tmp = dsl_xasprintf("%s.tmp.%ld", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        r = dsl_seterr(err, -errno, "cannot create '%s': %s", tmp, strerror(errno));
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
    if ((r = fsync_dir_of(path)) < 0) {
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

struct rd {
    const char *s; /* the header */
    size_t n, i;
    const char *file;
    char *err;
};

__attribute__((format(printf, 2, 3))) static int rd_err(struct rd *p, const char *fmt, ...)
{
    char msg[DSL_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return dsl_seterr(p->err, DSL_ECHECKPOINT, "safetensors file '%s': bad header at byte %zu: %s",
                      p->file, p->i, msg);
}

static void ws(struct rd *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                           p->s[p->i] == '\r'))
        p->i++;
}

static int expect(struct rd *p, char ch)
{
    ws(p);
    if (p->i >= p->n || p->s[p->i] != ch)
        return rd_err(p, "expected '%c'", ch);
    p->i++;
    return 0;
}

static int peek(struct rd *p, char ch)
{
    ws(p);
    return p->i < p->n && p->s[p->i] == ch;
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

static int read_hex4(struct rd *p, unsigned *out)
{
    unsigned v = 0;
    if (p->n - p->i < 4)
        return rd_err(p, "short \\u escape");
    for (int k = 0; k < 4; k++) {
        int h = hexval(p->s[p->i + (size_t)k]);
        if (h < 0)
            return rd_err(p, "bad \\u escape");
        v = v * 16 + (unsigned)h;
    }
    p->i += 4;
    *out = v;
    return 0;
}

/* A JSON string into a malloc'ed UTF-8 C string (no embedded NULs). */
static int rd_string(struct rd *p, char **out)
{
    struct dsl_dynbuf b;
    int r;
    *out = NULL;
    if ((r = expect(p, '"')) < 0)
        return r;
    dsl_dynbuf_init(&b, MAX_HEADER_BYTES);
    dsl_dynbuf_add(&b, "", 0);
    for (;;) {
        if (p->i >= p->n) {
            dsl_dynbuf_release(&b);
            return rd_err(p, "unterminated string");
        }
        unsigned char ch = (unsigned char)p->s[p->i++];
        if (ch == '"')
            break;
        if (ch < 0x20) {
            dsl_dynbuf_release(&b);
            return rd_err(p, "control character in string");
        }
        if (ch != '\\') {
            dsl_dynbuf_add(&b, &ch, 1);
            continue;
        }
        if (p->i >= p->n) {
            dsl_dynbuf_release(&b);
            return rd_err(p, "unterminated string");
        }
        char e = p->s[p->i++];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char repl[] = "\"\\/\b\f\n\r\t";
            dsl_dynbuf_add(&b, &repl[simple - "\"\\/bfnrt"], 1);
        } else if (e == 'u') {
            unsigned cp, lo;
            if ((r = read_hex4(p, &cp)) < 0)
                goto fail;
            if (cp >= 0xd800 && cp < 0xdc00) {
                if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u') {
                    r = rd_err(p, "lone surrogate in string");
                    goto fail;
                }
                p->i += 2;
                if ((r = read_hex4(p, &lo)) < 0)
                    goto fail;
                if (lo < 0xdc00 || lo > 0xdfff) {
                    r = rd_err(p, "bad surrogate pair in string");
                    goto fail;
                }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                r = rd_err(p, "lone surrogate in string");
                goto fail;
            }
            if (cp == 0) {
                r = rd_err(p, "NUL in string");
                goto fail;
            }
            unsigned char u[4];
            size_t un;
            if (cp < 0x80) {
                u[0] = (unsigned char)cp;
                un = 1;
            } else if (cp < 0x800) {
                u[0] = (unsigned char)(0xc0 | (cp >> 6));
                u[1] = (unsigned char)(0x80 | (cp & 0x3f));
                un = 2;
            } else if (cp < 0x10000) {
                u[0] = (unsigned char)(0xe0 | (cp >> 12));
                u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
                u[2] = (unsigned char)(0x80 | (cp & 0x3f));
                un = 3;
            } else {
                u[0] = (unsigned char)(0xf0 | (cp >> 18));
                u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
                u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
                u[3] = (unsigned char)(0x80 | (cp & 0x3f));
                un = 4;
            }
            dsl_dynbuf_add(&b, u, un);
        } else {
            r = rd_err(p, "bad escape in string");
            goto fail;
        }
    }
    if (!b.buf) {
        dsl_dynbuf_release(&b);
        return rd_err(p, "string too long");
    }
    *out = dsl_xstrndup(b.buf, b.len);
    dsl_dynbuf_release(&b);
    return 0;
fail:
    dsl_dynbuf_release(&b);
    return r;
}

static int rd_uint(struct rd *p, uint64_t *out)
{
    uint64_t v = 0;
    size_t start;
    ws(p);
    start = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        unsigned dgt = (unsigned)(p->s[p->i] - '0');
        if (v > (UINT64_MAX - dgt) / 10)
            return rd_err(p, "number out of range");
        v = v * 10 + dgt;
        p->i++;
    }
    if (p->i == start)
        return rd_err(p, "expected a non-negative integer");
    if (p->i - start > 1 && p->s[start] == '0')
        return rd_err(p, "leading zero in number");
    *out = v;
    return 0;
}

/* [uint, ...] with at most max entries */
static int rd_uint_array(struct rd *p, uint64_t *v, int max, int *count)
{
    int r, k = 0;
    if ((r = expect(p, '[')) < 0)
        return r;
    if (!peek(p, ']')) {
        for (;;) {
            if (k >= max)
                return rd_err(p, "too many entries in array (at most %d)", max);
            if ((r = rd_uint(p, &v[k])) < 0)
                return r;
            k++;
            if (peek(p, ','))
                p->i++;
            else
                break;
        }
    }
    if ((r = expect(p, ']')) < 0)
        return r;
    *count = k;
    return 0;
}

static int rd_tensor(struct rd *p, struct dsl_st_tensor *t, uint64_t off[2])
{
    int r, have_dtype = 0, have_shape = 0, have_off = 0;
    if ((r = expect(p, '{')) < 0)
        return r;
    if (!peek(p, '}')) {
        for (;;) {
            char *key;
            if ((r = rd_string(p, &key)) < 0)
                return r;
            if ((r = expect(p, ':')) < 0) {
                free(key);
                return r;
            }
            if (strcmp(key, "dtype") == 0 && !have_dtype) {
                char *dt;
                free(key);
                if ((r = rd_string(p, &dt)) < 0)
                    return r;
                size_t d;
                for (d = 0; d < NDTYPES; d++)
                    if (strcmp(dt, dtypes[d].name) == 0)
                        break;
                if (d == NDTYPES) {
                    r = rd_err(p, "unsupported dtype '%s'", dt);
                    free(dt);
                    return r;
                }
                free(dt);
                t->dtype = (enum dsl_st_dtype)d;
                have_dtype = 1;
            } else if (strcmp(key, "shape") == 0 && !have_shape) {
                free(key);
                if ((r = rd_uint_array(p, t->shape, DSL_ST_MAX_DIMS, &t->ndim)) < 0)
                    return r;
                have_shape = 1;
            } else if (strcmp(key, "data_offsets") == 0 && !have_off) {
                int k = 0;
                free(key);
                if ((r = rd_uint_array(p, off, 2, &k)) < 0)
                    return r;
                if (k != 2)
                    return rd_err(p, "data_offsets must hold two numbers");
                have_off = 1;
            } else {
                r = rd_err(p, "unexpected or repeated field '%s'", key);
                free(key);
                return r;
            }
            if (peek(p, ','))
                p->i++;
            else
                break;
        }
    }
    if ((r = expect(p, '}')) < 0)
        return r;
    if (!have_dtype || !have_shape || !have_off)
        return rd_err(p, "tensor entry needs dtype, shape and data_offsets");
    return 0;
}

static int rd_metadata(struct rd *p, struct dsl_strvec *meta)
{
    int r;
    if ((r = expect(p, '{')) < 0)
        return r;
    if (!peek(p, '}')) {
        for (;;) {
            char *k, *v;
            if ((r = rd_string(p, &k)) < 0)
                return r;
            if (strchr(k, '=') || !k[0] || dsl_env_get(meta, k)) {
                r = rd_err(p, "unsupported or repeated metadata key '%s'", k);
                free(k);
                return r;
            }
            if ((r = expect(p, ':')) < 0 || (r = rd_string(p, &v)) < 0) {
                free(k);
                return r;
            }
            dsl_env_set(meta, k, v);
            free(k);
            free(v);
            if (peek(p, ','))
                p->i++;
            else
                break;
        }
    }
    return expect(p, '}');
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

static int cmp_begin(const void *a, const void *b)
{
    const struct dsl_st_tensor *x = a, *y = b;
    uintptr_t px = (uintptr_t)x->data, py = (uintptr_t)y->data;
    if (px != py)
        return px < py ? -1 : 1;
    /* zero-size tensors may share an offset; keep a total order */
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Parse f->buf (f->len bytes). */
static int st_validate(struct dsl_st_file *f, char *err)
{
    uint64_t hlen = 0, datalen;
    size_t alloc = 0;
    int r;
    const char *name = f->path;

    if (f->len < 8)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "safetensors file '%s' is truncated: %zu bytes, no header length",
                          name, f->len);
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | f->buf[i];
    if (hlen > f->len - 8)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "safetensors file '%s' is truncated: header of %" PRIu64
                          " bytes but only %zu bytes follow",
                          name, hlen, f->len - 8);
    if (hlen > MAX_HEADER_BYTES || hlen < 2)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "safetensors file '%s': bad header length %" PRIu64, name, hlen);
    datalen = f->len - 8 - hlen;
    const unsigned char *data = f->buf + 8 + hlen;

    struct rd p = {.s = (const char *)f->buf + 8, .n = (size_t)hlen, .file = name, .err = err};
    struct dsl_st_tensor *t = NULL;
    uint64_t (*offs)[2] = NULL;
    size_t n = 0;
    if ((r = expect(&p, '{')) < 0)
        goto fail;
    if (!peek(&p, '}')) {
        for (;;) {
            char *key;
            if ((r = rd_string(&p, &key)) < 0)
                goto fail;
            if ((r = expect(&p, ':')) < 0) {
                free(key);
                goto fail;
            }
            if (strcmp(key, "__metadata__") == 0) {
                free(key);
                if (f->meta.nr) {
                    r = rd_err(&p, "repeated __metadata__");
                    goto fail;
                }
                if ((r = rd_metadata(&p, &f->meta)) < 0)
                    goto fail;
            } else {
                if (n == alloc) {
                    alloc = alloc ? 2 * alloc : 16;
                    t = dsl_xreallocarray(t, alloc, sizeof(*t));
                    offs = dsl_xreallocarray(offs, alloc, sizeof(*offs));
                }
                memset(&t[n], 0, sizeof(t[n]));
                t[n].name = key;
                n++;
                if ((r = rd_tensor(&p, &t[n - 1], offs[n - 1])) < 0)
                    goto fail;
            }
            if (peek(&p, ','))
                p.i++;
            else
                break;
        }
    }
    if ((r = expect(&p, '}')) < 0)
        goto fail;
    ws(&p);
    if (p.i != p.n) {
        r = rd_err(&p, "unexpected text after the header object");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = 0;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(t[i].name, t[j].name) == 0) {
                r = dsl_seterr(err, DSL_ECHECKPOINT,
                               "safetensors file '%s': tensor '%s' appears twice", name,
                               t[i].name);
                goto fail;
            }
        }
        if (tensor_nbytes(&t[i], &nb) < 0) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "safetensors file '%s': tensor '%s' has an impossible size", name,
                           t[i].name);
            goto fail;
        }
        if (offs[i][0] > offs[i][1] || offs[i][1] > datalen || offs[i][1] - offs[i][0] != nb) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "safetensors file '%s': tensor '%s' has data_offsets [%" PRIu64
                           ", %" PRIu64 "] but needs %" PRIu64 " bytes within %" PRIu64
                           " bytes of data%s",
                           name, t[i].name, offs[i][0], offs[i][1], nb, datalen,
                           offs[i][1] > datalen ? " (truncated file?)" : "");
            goto fail;
        }
        t[i].nbytes = nb;
        t[i].data = data + offs[i][0];
    }
    if (n)
        qsort(t, n, sizeof(*t), cmp_begin);
    uint64_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = (uint64_t)((const unsigned char *)t[i].data - data);
        if (b != pos) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "safetensors file '%s': tensor '%s' starts at byte %" PRIu64
                           " of the data, expected %" PRIu64 " (%s)",
                           name, t[i].name, b, pos, b < pos ? "overlap" : "gap");
            goto fail;
        }
        pos = b + t[i].nbytes;
    }
    if (pos != datalen) {
        r = dsl_seterr(err, DSL_ECHECKPOINT,
                       "safetensors file '%s': %" PRIu64 " bytes of data but the tensors "
                       "cover %" PRIu64,
                       name, datalen, pos);
        goto fail;
    }
    const char *want = dsl_env_get(&f->meta, META_CRC);
    if (want) {
        char got[16];
        snprintf(got, sizeof(got), "%08lx", crc_update(crc32(0L, Z_NULL, 0), data, datalen) &
                                                 0xffffffffUL);
        if (strcmp(got, want) != 0) {
            r = dsl_seterr(err, DSL_ECHECKPOINT,
                           "safetensors file '%s': checksum mismatch (crc32 %s, header says "
                           "%s): the data is corrupt",
                           name, got, want);
            goto fail;
        }
    }
    f->t = t;
    f->n = n;
    free(offs);
    return 0;
fail:
    for (size_t i = 0; i < n; i++)
        free((char *)(uintptr_t)t[i].name);
    free(t);
    free(offs);
    return r;
}

int dsl_st_parse(struct dsl_st_file *f, const char *name, const void *buf, size_t len,
                 char *err)
{
    memset(f, 0, sizeof(*f));
    dsl_strvec_init(&f->meta);
    f->path = dsl_xstrdup(name ? name : "<memory>");
    f->buf = dsl_xmalloc(len ? len : 1);
    if (len)
        memcpy(f->buf, buf, len);
    f->len = len;
    return st_validate(f, err);
}

int dsl_st_load(struct dsl_st_file *f, const char *path, char *err)
{
    struct stat st;
    int fd, r;
    memset(f, 0, sizeof(*f));
    dsl_strvec_init(&f->meta);
    f->path = dsl_xstrdup(path);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dsl_seterr(err, errno == ENOENT ? DSL_ECHECKPOINT : -errno,
                          "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fd, &st) < 0) {
        r = dsl_seterr(err, -errno, "cannot stat '%s': %s", path, strerror(errno));
        close(fd);
        return r;
    }
    size_t len = (size_t)st.st_size;
    f->buf = malloc(len ? len : 1);
    if (!f->buf) {
        close(fd);
        return dsl_seterr(err, -ENOMEM, "cannot allocate %zu bytes to read '%s'", len, path);
    }
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(fd, f->buf + got, len - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            r = dsl_seterr(err, -errno, "cannot read '%s': %s", path, strerror(errno));
            close(fd);
            return r;
        }
        if (k == 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    f->len = got;
    return st_validate(f, err);
}

const struct dsl_st_tensor *dsl_st_find(const struct dsl_st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}
