/*
 * SHA-256 through libcrypto's EVP interface, and the lines of sha256sum's output it is
 * compared with.
 *
 * Theory of operation. A hash is an EVP_MD_CTX set up for EVP_sha256(): init allocates
 * and initialises it, update feeds it, final reads the 32 bytes and frees it, so a
 * caller holds nothing once final has returned, whatever it returned. An update that
 * fails is remembered and becomes final's error, so callers check one place. A file is
 * read in 64 KiB pieces; reading errors keep their errno, hashing errors are
 * DSL_ENOTSUP (libcrypto refused SHA-256, e.g. a provider configuration without it).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "digest.h"
#include "dslaunch/common/banned.h"

int dsl_sha256_init(struct dsl_sha256 *c)
{
    c->failed = 0;
    c->ctx = EVP_MD_CTX_new();
    if (!c->ctx)
        return -ENOMEM;
    if (EVP_DigestInit_ex(c->ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(c->ctx);
        c->ctx = NULL;
        return DSL_ENOTSUP;
    }
    return 0;
}

void dsl_sha256_update(struct dsl_sha256 *c, const void *data, size_t n)
{
    if (!c->ctx || c->failed)
        return;
    if (EVP_DigestUpdate(c->ctx, data, n) != 1)
        c->failed = 1;
}

int dsl_sha256_final(struct dsl_sha256 *c, unsigned char out[DSL_SHA256_LEN])
{
    unsigned int len = 0;
    int ok = c->ctx && !c->failed && EVP_DigestFinal_ex(c->ctx, out, &len) == 1 &&
             len == DSL_SHA256_LEN;
    EVP_MD_CTX_free(c->ctx);
    c->ctx = NULL;
    return ok ? 0 : DSL_ENOTSUP;
}

int dsl_sha256_file(const char *path, unsigned char out[DSL_SHA256_LEN], char *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dsl_seterr(err, -errno, "cannot read '%s': %s", path, strerror(errno));
    struct dsl_sha256 c;
    int r = dsl_sha256_init(&c);
    if (r < 0) {
        close(fd);
        return dsl_seterr(err, r, "cannot hash '%s': %s", path, dsl_strerror(r));
    }
    unsigned char buf[65536];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            dsl_sha256_final(&c, out);
            return dsl_seterr(err, -e, "cannot read '%s': %s", path, strerror(e));
        }
        if (n == 0)
            break;
        dsl_sha256_update(&c, buf, (size_t)n);
    }
    close(fd);
    if ((r = dsl_sha256_final(&c, out)) < 0)
        return dsl_seterr(err, r, "cannot hash '%s': %s", path, dsl_strerror(r));
    return 0;
}

/* sha256sum's line: see digest.h */
int dsl_sha256_parse_sum_line(const char *line, size_t len, char hex[65], char **path)
{
    int escaped = len > 0 && line[0] == '\\';
    if (escaped) {
        line++;
        len--;
    }
    if (len < 67 || (line[64] != ' ') || (line[65] != ' ' && line[65] != '*'))
        return -1;
    for (int k = 0; k < 64; k++) {
        char c = line[k];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return -1;
        hex[k] = c;
    }
    hex[64] = '\0';
    const char *s = line + 66;
    size_t n = len - 66;
    char *out = dsl_xmalloc(n + 1), *o = out;
    for (size_t k = 0; k < n; k++) {
        if (escaped && s[k] == '\\' && k + 1 < n) {
            char c = s[++k];
            *o++ = c == 'n' ? '\n' : c == 'r' ? '\r' : c;
        } else {
            *o++ = s[k];
        }
    }
    *o = '\0';
    *path = out;
    return 0;
}
