/*
 * SHA-256 for content comparisons (dslaunch sync --checksum compares it with what
 * `sha256sum` says on the other host), from libcrypto's EVP interface: OpenSSL, which
 * libssh already brings into the process.
 */
#ifndef DSLAUNCH_DIGEST_H
#define DSLAUNCH_DIGEST_H

#include <stddef.h>

#define DSL_SHA256_LEN 32

struct evp_md_ctx_st; /* OpenSSL's EVP_MD_CTX, kept out of this header */

/* One hash in progress: init, any number of updates, final. */
struct dsl_sha256 {
    struct evp_md_ctx_st *ctx; /* owned from init until final */
    int failed;                /* an update failed: final reports it */
};

/** Start a hash. 0, or negative (-ENOMEM, DSL_ENOTSUP) with nothing to release. */
int dsl_sha256_init(struct dsl_sha256 *c);
/** Hash n more bytes of data. */
void dsl_sha256_update(struct dsl_sha256 *c, const void *data, size_t n);
/** The digest into out; releases c whatever the result. 0 or negative. */
int dsl_sha256_final(struct dsl_sha256 *c, unsigned char out[DSL_SHA256_LEN]);
/** Hash the file at path into out; 0 or -errno with err ("cannot read 'p': ..."). */
int dsl_sha256_file(const char *path, unsigned char out[DSL_SHA256_LEN], char *err);
/**
 * One line of sha256sum's output (from the other host, so anything): "<64 hex>  <path>"
 * or "<64 hex> *<path>"; a path with a backslash or newline makes GNU sha256sum start
 * the line with '\' and escape them ("\\", "\n", and "\r" in newer versions). line
 * is len bytes, no newline. Returns 0 and fills hex (NUL-terminated) and *path
 * (malloc'd, the caller frees it), or -1 for a line that is not a hash (an error
 * message, say).
 */
int dsl_sha256_parse_sum_line(const char *line, size_t len, char hex[65], char **path);

#endif
