/*
 * Datasets and the sampler of dstrain.
 *
 * A dataset is n samples of dim floats (row-major) with int32 labels in
 * [0, nclasses). Fashion-MNIST is read from the Debian package's gzipped idx files
 * (dataset-fashion-mnist, /usr/share/datasets/fashion-mnist) and normalised as the
 * PyTorch peer does: x / 255, then (x - mean) / std with the scalar mean and standard
 * deviation of all training pixels. The synthetic dataset is a learnable mixture of
 * class prototypes plus noise, generated from a seed.
 *
 * The sampler has DistributedSampler's meaning made world-size invariant: every epoch
 * is a permutation of [0, n) drawn from seed + epoch (or the identity without
 * shuffle), padded by repeating its head to a multiple of the GLOBAL batch (or cut to
 * one, with drop_last), so every rank gets the same number of samples. Global step s
 * of an epoch is positions [s*G, (s+1)*G) of that list, and it is cut into
 * micro-batch chunks that the trainer hands out to ranks: the samples a step sees
 * depend only on (seed, epoch, step, G), never on the world size.
 */
#ifndef DSLAUNCH_DATA_H
#define DSLAUNCH_DATA_H

#include <stddef.h>
#include <stdint.h>

#define DSL_FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#define DSL_TEXT_DIR "/usr/share/games/fortunes" /* Debian's fortunes: English text */

/* llm.c's token shards (tokens.c): 256 int32 of header, then uint16 tokens */
#define DSL_TOKENS_MAGIC 20240520u
#define DSL_TOKENS_HEADER 1024

/* a run of a split's token ids: an llm.c shard mapped read-only from its file (map
 * set: munmap(map, maplen) releases it), or an array of ours (map NULL: free(tok));
 * the split's tokens [start, start + n) */
struct dsl_token_run {
    const uint16_t *tok;
    size_t start, n;
    void *map;
    size_t maplen;
};

struct dsl_dataset {
    size_t n, dim, nclasses;
    float *x;   /* n x dim, owned; NULL for a lazy token dataset (below) */
    int32_t *y; /* n, owned; NULL as x */
    /* token data ("text", "tokens"; the GPT): a lazy dataset has x and y NULL, and
     * sample i is tokens [i*stride, i*stride + dim) as floats (labels 0), read from
     * its runs (nruns, owned, none empty, in order); the validation split too, with
     * stride = context */
    struct dsl_token_run *runs;
    size_t nruns, ntokens, stride;
    int byte_level;   /* a token is a byte (text data): losses per token are per byte */
};

struct dsl_data_opts {
    const char *name;   /* "fashion_mnist", "synthetic", "text" or "tokens" */
    const char *path;   /* fashion_mnist: directory of the idx.gz files; text: a file or
                           a directory of text files; tokens: a directory of llm.c
                           shards, *train*.bin and *val*.bin (NULL: the default, none
                           for tokens) */
    size_t context;     /* text, tokens: a sample is context + 1 tokens */
    size_t stride;      /* text, tokens: tokens between training windows (0: context) */
    size_t vocab;       /* text, tokens: token ids must be below it */
    double val_fraction; /* text: the last fraction of the bytes is validation */
    size_t synth_train; /* synthetic: sample counts and shape */
    size_t synth_test;
    size_t synth_dim;
    size_t synth_classes;
    uint64_t seed;
};

/** Load train and test sets. On failure both are empty and err names the path (and
 *  the Debian package for a missing Fashion-MNIST). */
int dsl_data_load(struct dsl_dataset *train, struct dsl_dataset *test,
                  const struct dsl_data_opts *o, char *err);
void dsl_dataset_release(struct dsl_dataset *d);

/** Tokens [first, first + n) of d's runs as floats into out (tokens.c); the range
 *  lies within the split. */
void dsl_tokens_window(const struct dsl_dataset *d, size_t first, size_t n, float *out);
/** Release n runs and the array that holds them. */
void dsl_token_runs_release(struct dsl_token_run *runs, size_t n);

/** Text (tokens.c): path a file, or a directory whose regular files (no symbolic
 *  links, no fortune ".dat" indexes) are read in name order; *out (malloc'd, the
 *  caller's) their concatenated bytes, *nfiles how many. */
int dsl_text_read(const char *path, uint8_t **out, size_t *len, size_t *nfiles, char *err);

/** Check the 1024-byte header of an llm.c token shard of file_size bytes (have: bytes
 *  of it read, short for a short file); *ntok the token count. DSL_EDATA naming path
 *  and what is wrong: short, bad magic or version, truncated, trailing bytes. */
/** The split dataset "tokens" reads a shard file's name (no directory) as: "train",
 *  "val", or NULL for neither or where it cannot tell ("train" and "val" both words of
 *  their own, or both inside other words: trainval.bin; *ambiguous then set). */
const char *dsl_tokens_split_of(const char *name, int *ambiguous);
int dsl_tokens_check_header(const uint8_t *hdr, size_t have, uint64_t file_size,
                            const char *path, uint64_t *ntok, char *err);
/** Read a whole shard; *out (malloc'd, the caller's) holds *count token ids. */
int dsl_tokens_read(const char *path, uint16_t **out, size_t *count, char *err);
/** Write tok as a shard at path (a temporary file renamed into place). */
int dsl_tokens_write(const char *path, const uint16_t *tok, size_t n, char *err);

/** The token datasets of dsl_data_load() (tokens.c): "text" and "tokens". */
int dsl_data_load_text(struct dsl_dataset *train, struct dsl_dataset *test,
                       const struct dsl_data_opts *o, char *err);
int dsl_data_load_tokens(struct dsl_dataset *train, struct dsl_dataset *test,
                         const struct dsl_data_opts *o, char *err);

/** Read one idx file (gzip or plain, via zlib) of unsigned bytes. *out is malloc'd,
 *  owned by the caller; dims[0..*ndim) receive the shape. */
int dsl_idx_read(const char *path, uint8_t **out, size_t *count, size_t dims[4],
                 size_t *ndim, char *err);

struct dsl_sampler {
    size_t n;            /* dataset size */
    size_t global_batch; /* G */
    size_t steps_per_epoch;
    uint64_t seed;
    int shuffle, drop_last;
    uint64_t epoch; /* epoch whose order is in idx */
    size_t *idx;    /* steps_per_epoch * G positions, owned */
};

/** Returns DSL_ECONFIG if the dataset is smaller than one global batch with drop_last. */
int dsl_sampler_init(struct dsl_sampler *s, size_t n, size_t global_batch, uint64_t seed,
                     int shuffle, int drop_last, char *err);
/** The G sample indices of step `step` (0-based, within the epoch) of epoch `epoch`;
 *  valid until the next call with another epoch. */
const size_t *dsl_sampler_step(struct dsl_sampler *s, uint64_t epoch, size_t step);
void dsl_sampler_release(struct dsl_sampler *s);

/** Copy the rows idx[0..k) of d into x (k x dim) and y. */
void dsl_dataset_gather(const struct dsl_dataset *d, const size_t *idx, size_t k, float *x,
                        int32_t *y);

#endif
