/*
 * safetensors files (the format of huggingface/safetensors, readable by PyTorch and
 * other tools): an 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * padded with spaces to a multiple of 8, then the raw little-endian tensor data.
 * Offsets are relative to the start of the data; tensors tile the data without holes.
 *
 * dslaunch adds the metadata key "dsl.crc32" (hex crc32 of the whole data region,
 * zlib's crc32) so a flipped bit is caught; files from other tools have no such key
 * and are read without that check.
 */
#ifndef DSLAUNCH_SAFETENSORS_H
#define DSLAUNCH_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "dslaunch/common/strvec.h"

#define DSL_ST_MAX_DIMS 8

enum dsl_st_dtype {
    DSL_ST_F32 = 0,
    DSL_ST_F16,
    DSL_ST_BF16,
    DSL_ST_F64,
    DSL_ST_I64,
    DSL_ST_I32,
    DSL_ST_U8,
};

/** A tensor to write (data points at its bytes) or one read (data points into the
 *  file's buffer, owned by the struct dsl_st_file). */
struct dsl_st_tensor {
    const char *name;
    enum dsl_st_dtype dtype;
    int ndim;
    uint64_t shape[DSL_ST_MAX_DIMS];
    const void *data;
    uint64_t nbytes; /* product of shape x dtype size */
};

/**
 * Write n tensors (in this order in the data) and the metadata (a strvec of
 * "key=value" entries, see dsl_env_set(); NULL for none) to path, atomically: a
 * temporary file beside it, fsync, rename, fsync of the directory. Returns 0 or a
 * negative code with err naming the file.
 */
int dsl_st_write(const char *path, const struct dsl_st_tensor *t, size_t n,
                 const struct dsl_strvec *meta, char *err);

struct dsl_st_file {
    char *path;                /* for messages */
    unsigned char *buf;        /* the whole file */
    size_t len;
    struct dsl_st_tensor *t;   /* sorted by data offset; names owned by the file */
    size_t n;
    struct dsl_strvec meta;    /* "key=value" entries; read with dsl_env_get() */
};

/**
 * Read and validate a whole file: header length within the file, header JSON, every
 * entry's dtype, shape and offsets (in range, matching shape x dtype, contiguous,
 * covering the data exactly), and the crc32 when "dsl.crc32" is present. Returns 0 or
 * DSL_ECHECKPOINT (-errno when unreadable) with err naming the file. f is
 * initialised either way; release it with dsl_st_release().
 */
int dsl_st_load(struct dsl_st_file *f, const char *path, char *err);
/** The same over bytes in memory (copied); name is used in messages. */
int dsl_st_parse(struct dsl_st_file *f, const char *name, const void *buf, size_t len,
                 char *err);
/** The tensor called name, or NULL. */
const struct dsl_st_tensor *dsl_st_find(const struct dsl_st_file *f, const char *name);
void dsl_st_release(struct dsl_st_file *f);

size_t dsl_st_dtype_size(enum dsl_st_dtype d);
const char *dsl_st_dtype_name(enum dsl_st_dtype d);

#endif
