/*
 * SHA-256 (FIPS 180-4), for content comparisons (dslaunch sync --checksum).
 * Plain C, no dependencies; not constant-time and not meant for secrets.
 */
#ifndef DSLAUNCH_SHA256_H
#define DSLAUNCH_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct dsl_sha256 {
    uint32_t h[8];
    uint64_t len;          /* bytes hashed so far */
    unsigned char buf[64];
    size_t nbuf;
};

void dsl_sha256_init(struct dsl_sha256 *c);
void dsl_sha256_update(struct dsl_sha256 *c, const void *data, size_t n);
void dsl_sha256_final(struct dsl_sha256 *c, unsigned char out[32]);
/** Hash the file at path into out; 0 or -errno with err ("cannot read 'p': ..."). */
int dsl_sha256_file(const char *path, unsigned char out[32], char *err);

#endif
