/*
 * What the safetensors writer (safetensors.c), the header's grammar
 * (safetensors_header.c) and the reader (safetensors_load.c) share.
 */
#ifndef DSLAUNCH_SAFETENSORS_INTERNAL_H
#define DSLAUNCH_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

#define MAX_HEADER_BYTES DSL_ST_MAX_HEADER
#define META_CRC "dsl.crc32"
#define META_SHA "dsl.sha256"
#define META_DATA_SHA "dsl.data_sha256"
#define SHA_HEX 64

/** 64 '0's: the header's own checksum digits while it is hashed. */
extern const char dsl_st_zeros[SHA_HEX + 1];

/** The dtype called name ("F32"), or -1. */
int dsl_st_dtype_parse(const char *name);
/** crc32 over a buffer of any size (zlib takes uInt lengths). */
unsigned long dsl_st_crc_update(unsigned long crc, const unsigned char *p, uint64_t n);
/** SHA-256 (libcrypto) of up to three pieces, as 64 lowercase hex digits into hex. */
int dsl_st_sha256_hex(const void *a, size_t na, const void *b, size_t nb, const void *c,
                      size_t nc, char hex[SHA_HEX + 1]);
/** The header's checksum: SHA-256 of the 8 length bytes and the header with the 64
 *  digits of its own dsl.sha256 value (at offset at of the header) read as zeros. */
int dsl_st_header_sha(const unsigned char *file, size_t hlen, size_t at,
                      char hex[SHA_HEX + 1]);
/** product(shape) x dtype size into *out; -1 when impossible (overflow, bad dtype). */
int dsl_st_tensor_nbytes(const struct dsl_st_tensor *t, uint64_t *out);

/**
 * The header JSON s[0..n) of f (f->path names it in messages): its entries into the
 * arrays at *tp and *offp (*np of them, grown here; the names and both arrays are the
 * caller's to free, also on failure) and its metadata into f->meta; *sha_at: where the
 * 64 digits of dsl.sha256 start in s (0: no such key).
 */
int dsl_st_header_parse(struct dsl_st_file *f, const char *s, size_t n,
                        struct dsl_st_tensor **tp, uint64_t (**offp)[2], size_t *np,
                        size_t *sha_at, char *err);

#endif
