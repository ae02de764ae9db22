/*
 * safetensors files (the format of huggingface/safetensors, readable by PyTorch and
 * other tools): an 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * padded with spaces to a multiple of 8, then the raw little-endian tensor data.
 * Offsets are relative to the start of the data; tensors tile the data without holes.
 *
 * dslaunch adds two metadata keys, each 64 lowercase hex digits of a SHA-256
 * (libcrypto):
 *   "dsl.data_sha256"  of the whole data region;
 *   "dsl.sha256"       of the file's first 8 + N bytes (length and header) with the 64
 *                      digits of this value read as '0's: every other byte of the
 *                      header, the data's checksum included, is covered.
 * So a flipped bit anywhere and an edit of any header field are caught. They are
 * ordinary metadata strings: other safetensors readers load the files unchanged.
 * Files from other tools have no such keys and are read without the checks; files of
 * older dslaunch versions carry "dsl.crc32" (zlib crc32 of the data), still checked.
 * A checksum is no signature: whoever can write a file can recompute it.
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
 * "key=value" entries, see dsl_env_set(); NULL for none; the checksum keys are the
 * writer's own) to path, atomically: a temporary file beside it with a random name
 * (created O_EXCL|O_NOFOLLOW), fsync, rename, fsync of the directory. Returns 0 or a
 * negative code with err naming the file.
 */
int dsl_st_write(const char *path, const struct dsl_st_tensor *t, size_t n,
                 const struct dsl_strvec *meta, char *err);

/** A file written in pieces: dsl_st_stream_begin() with the tensors (their data is not
 *  read), then their bytes in order through dsl_st_stream_put() in pieces of any size,
 *  then dsl_st_stream_end(), which puts the checksums in the header and renames the
 *  file into place as dsl_st_write() does; dsl_st_stream_abort() drops it. Whatever
 *  fails, nothing is left at path or beside it. The struct owns its copies. */
struct dsl_st_stream {
    char *path, *tmp;
    int fd;
    struct dsl_st_tensor *t; /* data NULL */
    size_t n;
    struct dsl_strvec meta;
    uint64_t total, done, hlen;
    void *md; /* libcrypto's digest of the data so far */
};
int dsl_st_stream_begin(struct dsl_st_stream *w, const char *path,
                        const struct dsl_st_tensor *t, size_t n,
                        const struct dsl_strvec *meta, char *err);
int dsl_st_stream_put(struct dsl_st_stream *w, const void *p, size_t n, char *err);
/** Releases w whatever the result. */
int dsl_st_stream_end(struct dsl_st_stream *w, char *err);
void dsl_st_stream_abort(struct dsl_st_stream *w);

/** The strongest checksum a loaded file carried (all that it carried matched). */
enum dsl_st_sum {
    DSL_ST_SUM_NONE = 0, /* none: another tool's file */
    DSL_ST_SUM_CRC32,    /* the data's crc32 only (older dslaunch): the header unchecked */
    DSL_ST_SUM_SHA256,   /* header and data */
};

/** Load flag: a header that does not match its dsl.sha256 is not an error of the load
 *  but sets header_bad (the data is then not checked); the caller must refuse the file
 *  (it can first tell which field differs from the files that agree). */
#define DSL_ST_HEADER_SUM_LATER 1u
/** Load flag: a file whose header carries no checksum at all (no dsl.sha256,
 *  dsl.data_sha256 or dsl.crc32) is refused after its header is read, before anything
 *  is allocated for its data: DSL_ECHECKPOINT with no_sums set (the caller may word the
 *  error its own way). */
#define DSL_ST_NEED_SUM 2u
/** The format's limit on the header (the reference implementation's): a file is at
 *  most 8 + this + its data. */
#define DSL_ST_MAX_HEADER (100u << 20)

struct dsl_st_file {
    char *path;                /* for messages */
    unsigned char *buf;        /* the whole file */
    size_t len;
    struct dsl_st_tensor *t;   /* sorted by data offset; names owned by the file */
    size_t n;
    struct dsl_strvec meta;    /* "key=value" entries; read with dsl_env_get() */
    enum dsl_st_sum sum;
    int header_bad;            /* only with DSL_ST_HEADER_SUM_LATER */
    int no_sums;               /* only with DSL_ST_NEED_SUM: refused for it */
    /* dsl_st_open only: the file stays open, the data is not read */
    int fd, fd_open;
    uint64_t data_at, data_len; /* the data region's place in the file */
    uint64_t *begin;            /* t[i]'s first byte in the data region */
    struct dsl_st_tensor whole; /* the data region as one tensor of bytes */
};

/**
 * Read and validate a whole file: a regular file (a FIFO or device is refused without
 * blocking), header length within the file, header JSON, every entry's dtype, shape
 * and offsets (in range, matching shape x dtype, contiguous, covering the data
 * exactly), and the checksums it carries (dsl.sha256, dsl.data_sha256, dsl.crc32).
 * The header is read and judged against the file's size first: nothing is allocated
 * for the data of a file whose header does not describe exactly its bytes.
 * flags: 0 or DSL_ST_HEADER_SUM_LATER and/or DSL_ST_NEED_SUM. Returns 0 or DSL_ECHECKPOINT (-errno when
 * unreadable) with err naming the file. f is initialised either way; release it with
 * dsl_st_release().
 */
int dsl_st_load(struct dsl_st_file *f, const char *path, unsigned flags, char *err);
/** The same over bytes in memory (copied); name is used in messages. */
int dsl_st_parse(struct dsl_st_file *f, const char *name, const void *buf, size_t len,
                 unsigned flags, char *err);
/**
 * dsl_st_load without the data: the header read and judged as there (its dsl.sha256
 * checked, or header_bad with DSL_ST_HEADER_SUM_LATER), the file kept open, every
 * tensor's data NULL. Read the data with dsl_st_pread, check it with dsl_st_verify;
 * release with dsl_st_release. For files larger than one wants in memory at once.
 */
int dsl_st_open(struct dsl_st_file *f, const char *path, unsigned flags, char *err);
/** n bytes of tensor t of an open file (one of f->t, or &f->whole), from byte off of
 *  its data, into buf. */
int dsl_st_pread(const struct dsl_st_file *f, const struct dsl_st_tensor *t, uint64_t off,
                 void *buf, size_t n, char *err);
/** The data checksum of an open file (dsl.data_sha256, or an older file's dsl.crc32),
 *  the data read through buf in pieces of bufsize bytes; sets f->sum. */
int dsl_st_verify(struct dsl_st_file *f, void *buf, size_t bufsize, char *err);
/** The tensor called name, or NULL. */
const struct dsl_st_tensor *dsl_st_find(const struct dsl_st_file *f, const char *name);
void dsl_st_release(struct dsl_st_file *f);

size_t dsl_st_dtype_size(enum dsl_st_dtype d);
const char *dsl_st_dtype_name(enum dsl_st_dtype d);

#endif
