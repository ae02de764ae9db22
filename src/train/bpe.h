/*
 * GPT-2's byte-level BPE tokenizer (OpenAI's encoder.py, in C): a vocabulary from
 * encoder.json, merges from vocab.bpe, encoding of arbitrary bytes into token ids and
 * back. `dstrain tokenize --encoder --bpe` and `dstrain sample --encoder --bpe` use it.
 */
#ifndef DSLAUNCH_TRAIN_BPE_H
#define DSLAUNCH_TRAIN_BPE_H

#include <stddef.h>
#include <stdint.h>

/* the pre-tokeniser's classes of a code point (bpe_pretok.c) */
enum { BPE_O = 0, BPE_L = 1, BPE_N = 2, BPE_S = 3 };

struct bpe_cache;

/** A loaded tokenizer. Every member is owned by it until dsl_bpe_release(). */
struct dsl_bpe {
    size_t nvocab;       /* the largest id + 1 (50257 for GPT-2) */
    size_t ntokens;      /* ids in encoder.json */
    size_t nmerges;      /* lines of vocab.bpe */
    uint8_t *bytes;      /* every token's bytes, one after the other */
    uint32_t *off, *len; /* [nvocab]: token id's bytes; len UINT32_MAX: no such id */
    uint16_t byte_id[256]; /* the token of each single byte */
    long eot;            /* the id of "<|endoftext|>", or -1 */
    /* merges: a hash of the pair (left id << 16 | right id) */
    uint32_t *mkey, *mrank;
    uint16_t *mres;
    size_t mcap;
    struct bpe_cache *cache; /* pre-token -> ids */
};

/**
 * Load encoder.json and vocab.bpe (each may be gzip-compressed: read through zlib).
 * Errors name the file and, for vocab.bpe, the line (`vocab.bpe:12: bad merge line
 * 'x'`). On failure b holds nothing to release.
 */
int dsl_bpe_load(struct dsl_bpe *b, const char *encoder_path, const char *merges_path,
                 char *err);

/** The same from the files' contents; enc_name and merges_name are for messages. */
int dsl_bpe_parse(struct dsl_bpe *b, const char *enc, size_t enc_len, const char *enc_name,
                  const char *merges, size_t merges_len, const char *merges_name, char *err);

void dsl_bpe_release(struct dsl_bpe *b);

/**
 * Encode n bytes of text as encoder.py does (invalid UTF-8: docs/gpt.md, "GPT-2 BPE").
 * Returns the ids (malloc'ed, the caller's; at most n of them) and their number in
 * *count. The text "<|endoftext|>" is ordinary text here, as in encoder.py.
 */
uint16_t *dsl_bpe_encode(struct dsl_bpe *b, const uint8_t *text, size_t n, size_t *count);

/** The bytes of token id (not NUL-terminated; *len bytes), or NULL for no such id. */
const uint8_t *dsl_bpe_token(const struct dsl_bpe *b, size_t id, size_t *len);

/**
 * The end of the pre-token that starts at s[i] (i < n): GPT-2's pattern
 * `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
 * over UTF-8, a byte that starts no valid sequence being a character of class BPE_O.
 */
size_t dsl_bpe_pretok_next(const uint8_t *s, size_t n, size_t i);

/** The class (BPE_*) of code point c. */
int dsl_bpe_class(uint32_t c);

#endif
