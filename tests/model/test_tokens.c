/*
 * Unit tests of the GPT's data (tokens.c): llm.c's shard format round trip and its
 * header errors, the text reader's choice of files, and the "text" and "tokens"
 * datasets' windows.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/model/data.h"

#include "test.h"
#include "dslaunch/common/banned.h"

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof(dir), "/tmp/dsl_test_tokens.%ld", (long)getpid());
    mkdir(dir, 0700);
}

static void put(const char *name, const void *data, size_t n)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    ASSERT(f && fwrite(data, 1, n, f) == n && fclose(f) == 0);
}

/* The token data at path as most of these tests read it: windows of 4, ids below 50. */
static struct dsl_data_opts tokens_opts(const char *path)
{
    return (struct dsl_data_opts){.name = "tokens", .path = path, .context = 4, .vocab = 50};
}

/* The data o names loads with ntrain training and nval validation windows. */
static void expect_windows(const struct dsl_data_opts *o, size_t ntrain, size_t nval)
{
    struct dsl_dataset tr, te;
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_data_load(&tr, &te, o, err));
    ASSERT_EQ(tr.n, ntrain);
    ASSERT_EQ(te.n, nval);
    dsl_dataset_release(&tr);
    dsl_dataset_release(&te);
}

/* A token shard of n tokens in the scratch directory. */
static void put_tokens(const char *name, const uint16_t *tok, size_t n)
{
    char p[128], err[DSL_ERR_LEN];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    ASSERT_OK(dsl_tokens_write(p, tok, n, err));
}

static void clean(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ASSERT_EQ(system(cmd), 0);
}

TEST(token_shards_should_round_trip_in_llm_c_format)
{
    make_dir();
    char p[128], err[DSL_ERR_LEN];
    snprintf(p, sizeof(p), "%s/a_train.bin", dir);
    uint16_t tok[5] = {0, 1, 255, 50256, 65535};
    ASSERT_OK(dsl_tokens_write(p, tok, 5, err));
    FILE *f = fopen(p, "rb");
    uint8_t raw[1034];
    ASSERT(f && fread(raw, 1, sizeof(raw), f) == sizeof(raw) && fgetc(f) == EOF);
    fclose(f);
    ASSERT_EQ(raw[0] | raw[1] << 8 | raw[2] << 16 | raw[3] << 24, 20240520);
    ASSERT_EQ(raw[4], 1);
    ASSERT_EQ(raw[8], 5);
    ASSERT_EQ(raw[1024 + 6] | raw[1024 + 7] << 8, 50256); /* little-endian uint16 */
    uint16_t *back;
    size_t n;
    ASSERT_OK(dsl_tokens_read(p, &back, &n, err));
    ASSERT_EQ(n, 5);
    ASSERT(memcmp(back, tok, sizeof(tok)) == 0);
    free(back);
    clean();
}

/* An llm.c shard header into h: magic, version and the token count, little-endian
 * 32-bit words; the rest zero. */
static void llmc_header(uint8_t h[1024], uint32_t magic, uint8_t version, uint8_t ntok)
{
    memset(h, 0, 1024);
    for (int i = 0; i < 4; i++)
        h[i] = (uint8_t)(magic >> (8 * i));
    h[4] = version;
    h[8] = ntok;
}

TEST(token_shard_headers_should_be_checked_against_the_file)
{
    uint8_t h[1024];
    uint64_t n;
    char err[DSL_ERR_LEN];
    llmc_header(h, 20240520, 1, 10);
    ASSERT(h[0] == 0x88 && h[1] == 0xd8 && h[2] == 0x34 && h[3] == 0x01); /* 0x0134d888 */
    ASSERT_OK(dsl_tokens_check_header(h, 1024, 1044, "s.bin", &n, err));
    ASSERT_EQ(n, 10);
    ASSERT_EQ(dsl_tokens_check_header(h, 1024, 1043, "s.bin", &n, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "token shard 's.bin': truncated: the header claims 10 tokens");
    ASSERT_EQ(dsl_tokens_check_header(h, 1024, 1046, "s.bin", &n, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "2 bytes after the 10 tokens");
    ASSERT_EQ(dsl_tokens_check_header(h, 100, 100, "s.bin", &n, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "shorter than the 1024-byte header");
    h[4] = 2;
    ASSERT_EQ(dsl_tokens_check_header(h, 1024, 1044, "s.bin", &n, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "version 2 not supported");
    h[0] = 0;
    ASSERT_EQ(dsl_tokens_check_header(h, 1024, 1044, "s.bin", &n, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "bad magic");
}

TEST(llm_c_llama3_shards_should_be_named_as_such_when_refused)
{
    /* llm.c's dev/data writes LLaMA 3 shards (magic 20240801, version 7, uint32 ids)
       beside GPT-2's: "bad magic" alone leaves the user guessing */
    uint8_t h[1024];
    uint64_t n;
    char err[DSL_ERR_LEN];
    llmc_header(h, 20240801, 7, 10);
    ASSERT(h[0] == 0xa1 && h[1] == 0xd9 && h[2] == 0x34 && h[3] == 0x01); /* 0x0134d9a1 */
    ASSERT_EQ(dsl_tokens_check_header(h, 1024, 1064, "l.bin", &n, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "token shard 'l.bin': magic 20240801 is llm.c's LLaMA 3 format "
                         "(uint32 tokens), which dstrain does not read: write GPT-2 shards "
                         "(magic 20240520, uint16 tokens)");
}

TEST(text_data_should_read_regular_files_in_name_order_without_indexes_or_links)
{
    make_dir();
    put("b", "BB", 2);
    put("a", "A", 1);
    put("a.dat", "xxxx", 4);
    char t[128], l[128], err[DSL_ERR_LEN];
    snprintf(t, sizeof(t), "%s/a", dir);
    snprintf(l, sizeof(l), "%s/c", dir);
    ASSERT_EQ(symlink(t, l), 0);
    uint8_t *b;
    size_t n, nf;
    ASSERT_OK(dsl_text_read(dir, &b, &n, &nf, err));
    ASSERT_EQ(nf, 2);
    ASSERT_EQ(n, 3);
    ASSERT(memcmp(b, "ABB", 3) == 0);
    free(b);
    clean();
}

TEST(a_text_directory_of_only_links_should_say_that_links_are_skipped)
{
    make_dir();
    char t[128], l[128], err[DSL_ERR_LEN];
    snprintf(t, sizeof(t), "%s/sub", dir);
    ASSERT_EQ(mkdir(t, 0700), 0);
    put("real", "text", 4);
    snprintf(t, sizeof(t), "%s/real", dir);
    snprintf(l, sizeof(l), "%s/sub/link", dir);
    ASSERT_EQ(symlink(t, l), 0);
    snprintf(t, sizeof(t), "%s/sub", dir);
    uint8_t *b;
    size_t n, nf;
    ASSERT_EQ(dsl_text_read(t, &b, &n, &nf, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "/sub': no regular files in it (1 symbolic link skipped: give a linked "
                         "file by its own path, or the directory it is in)");
    clean();
}

TEST(text_data_should_refuse_llm_c_shards_taken_for_text)
{
    /* --data-path to tokenize's output without --data tokens: the shards' header and
       uint16 ids would train as bytes, nats/byte and all, without a word */
    make_dir();
    char p[128], err[DSL_ERR_LEN];
    uint16_t tok[40] = {0};
    put_tokens("f_train.bin", tok, 40);
    put("notes.txt", "some text", 9);
    uint8_t *b;
    size_t n, nf;
    ASSERT_EQ(dsl_text_read(dir, &b, &n, &nf, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "f_train.bin' is an llm.c token shard, not text: use dataset "
                         "\"tokens\" (--data tokens)");
    /* a text file that merely starts like one is still text when shorter than a header */
    put("short.bin", "\x88\xd8\x34\x01", 4);
    snprintf(p, sizeof(p), "%s/short.bin", dir);
    ASSERT_OK(dsl_text_read(p, &b, &n, &nf, err));
    ASSERT_EQ(n, 4);
    free(b);
    clean();
}

TEST(text_dataset_should_cut_training_and_validation_windows)
{
    make_dir();
    char text[100];
    for (int i = 0; i < 100; i++)
        text[i] = (char)('a' + i % 26);
    put("t", text, 100);
    struct dsl_dataset tr, te;
    char err[DSL_ERR_LEN];
    struct dsl_data_opts o = {.name = "text", .path = dir, .context = 8, .stride = 3,
                              .vocab = 256, .val_fraction = 0.2};
    ASSERT_OK(dsl_data_load(&tr, &te, &o, err));
    /* 80 training bytes: windows of 9 every 3 bytes; 20 validation bytes every 8 */
    ASSERT_EQ(tr.n, (80 - 9) / 3 + 1);
    ASSERT_EQ(tr.dim, 9);
    ASSERT(tr.byte_level && tr.x == NULL);
    ASSERT_EQ(te.n, (20 - 1) / 8);
    size_t idx[2] = {2, 0};
    float x[18];
    int32_t y[2];
    dsl_dataset_gather(&tr, idx, 2, x, y);
    ASSERT_EQ((int)x[0], 'a' + 6);
    ASSERT_EQ((int)x[9], 'a');
    size_t one = 1;
    dsl_dataset_gather(&te, &one, 1, x, y);
    ASSERT(te.x == NULL && te.runs != NULL);
    ASSERT_EQ((int)x[0], 'a' + (80 + 8) % 26); /* validation window 1 starts at 88 */
    dsl_dataset_release(&tr);
    dsl_dataset_release(&te);
    o.context = 30; /* longer than the validation split */
    ASSERT_EQ(dsl_data_load(&tr, &te, &o, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "fewer than one window of context + 1 = 31");
    clean();
}

TEST(token_dataset_should_read_shards_and_reject_ids_beyond_the_vocabulary)
{
    make_dir();
    char p[128], err[DSL_ERR_LEN];
    uint16_t tok[40];
    for (int i = 0; i < 40; i++)
        tok[i] = (uint16_t)(i * 7 % 50);
    put_tokens("x_train_000.bin", tok, 40);
    put_tokens("x_val_000.bin", tok, 20);
    struct dsl_dataset tr, te;
    struct dsl_data_opts o = tokens_opts(dir);
    ASSERT_OK(dsl_data_load(&tr, &te, &o, err));
    ASSERT_EQ(tr.n, (40 - 5) / 4 + 1);
    ASSERT_EQ(te.n, 19 / 4);
    ASSERT(!tr.byte_level);
    dsl_dataset_release(&tr);
    dsl_dataset_release(&te);
    o.vocab = 40;
    ASSERT_EQ(dsl_data_load(&tr, &te, &o, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "training shards: token 42 at position 6 is outside the vocabulary of 40");
    /* the largest of i * 7 % 50 */
    ASSERT_CONTAINS(err, "the largest id is 49, so the model needs a vocabulary of at least 50");
    o.path = "/nonexistent-dir";
    ASSERT(dsl_data_load(&tr, &te, &o, err) < 0);
    ASSERT_CONTAINS(err, "/nonexistent-dir");
    /* llm.c's users give a shard's file or a pattern (-i "x_train_*.bin"): told the rule */
    o.vocab = 50;
    snprintf(p, sizeof(p), "%s/x_train_000.bin", dir);
    o.path = p;
    ASSERT_EQ(dsl_data_load(&tr, &te, &o, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "x_train_000.bin' is a file, not a directory: give the directory that "
                         "holds the *train*.bin and *val*.bin shards");
    snprintf(p, sizeof(p), "%s/x_train_*.bin", dir);
    ASSERT_EQ(dsl_data_load(&tr, &te, &o, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "no such directory (a pattern is not expanded");
    clean();
}

/* three training shards (one empty) read as one split: windows across a shard's end
   give the concatenation's tokens, the empty shard is no run, and on a little-endian
   machine the runs are the files' own pages, not copies */
TEST(token_shards_should_be_one_split_with_windows_across_shard_ends)
{
    make_dir();
    char err[DSL_ERR_LEN];
    uint16_t all[23];
    for (int i = 0; i < 23; i++)
        all[i] = (uint16_t)(3 * i + 1);
    put_tokens("s_train_000001.bin", all, 9);
    put_tokens("s_train_000002.bin", all, 0);
    put_tokens("s_train_000003.bin", all + 9, 5);
    put_tokens("s_train_000004.bin", all + 14, 9);
    put_tokens("s_val_000000.bin", all + 3, 12);
    struct dsl_dataset tr, te;
    struct dsl_data_opts o = {.name = "tokens", .path = dir, .context = 6, .stride = 1,
                              .vocab = 70};
    ASSERT_OK(dsl_data_load(&tr, &te, &o, err));
    ASSERT_EQ(tr.nruns, 3);
    ASSERT_EQ(tr.ntokens, 23);
    ASSERT_EQ(tr.n, 23 - 7 + 1);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (size_t k = 0; k < tr.nruns; k++)
        ASSERT(tr.runs[k].map != NULL);
#endif
    size_t idx[17];
    for (size_t i = 0; i < tr.n; i++)
        idx[i] = tr.n - 1 - i;
    float x[17 * 7];
    int32_t y[17];
    dsl_dataset_gather(&tr, idx, tr.n, x, y);
    for (size_t i = 0; i < tr.n; i++)
        for (size_t j = 0; j < 7; j++)
            ASSERT_EQ((int)x[i * 7 + j], (int)all[idx[i] + j]);
    /* validation: windows of 7 at stride 6 over its 12 tokens, from its mapped run too */
    ASSERT(te.x == NULL && te.nruns == 1);
    ASSERT_EQ(te.n, 1);
    size_t zero = 0;
    dsl_dataset_gather(&te, &zero, 1, x, y);
    for (size_t j = 0; j < 7; j++)
        ASSERT_EQ((int)x[j], (int)all[3 + j]);
    dsl_dataset_release(&tr);
    dsl_dataset_release(&te);
    /* an id beyond the vocabulary in the third shard is named at its place in the split */
    o.vocab = 60;
    ASSERT_EQ(dsl_data_load(&tr, &te, &o, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "training shards: token 61 at position 20 is outside the vocabulary "
                         "of 60: the largest id is 67");
    clean();
}

TEST(token_shards_named_for_both_splits_should_go_where_their_split_word_says)
{
    /* "interval" holds "val": interval_train.bin is a training shard, not a validation
       one too (validation on training data would look like a model that generalises) */
    make_dir();
    char err[DSL_ERR_LEN];
    uint16_t tok[40];
    for (int i = 0; i < 40; i++)
        tok[i] = (uint16_t)i;
    put_tokens("interval_train.bin", tok, 40);
    put_tokens("interval_val.bin", tok, 10);
    struct dsl_dataset tr, te;
    struct dsl_data_opts o = tokens_opts(dir);
    expect_windows(&o, (40 - 5) / 4 + 1, 9 / 4); /* interval_val.bin's 10 tokens only */
    /* llm.c's names: the split is a word of its own */
    put_tokens("medieval_train_000001.bin", tok, 20);
    expect_windows(&o, (60 - 5) / 4 + 1, 9 / 4);
    /* neither word stands alone: which split is a guess, so the name is refused */
    put_tokens("trainval.bin", tok, 20);
    ASSERT_EQ(dsl_data_load(&tr, &te, &o, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "trainval.bin' holds both \"train\" and \"val\"");
    ASSERT_CONTAINS(err, "rename it");
    clean();
}

TEST(splits_too_short_for_a_window_should_be_named_with_what_to_change)
{
    make_dir();
    char p[128], err[DSL_ERR_LEN];
    uint16_t tok[40] = {0};
    put_tokens("x_train.bin", tok, 40);
    put_tokens("x_val.bin", tok, 0); /* an empty validation shard */
    struct dsl_dataset tr, te;
    struct dsl_data_opts o = tokens_opts(dir);
    ASSERT_EQ(dsl_data_load(&tr, &te, &o, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "validation shards of '");
    ASSERT_CONTAINS(err, "(1 file): 0 tokens, fewer than one window of context + 1 = 5");
    ASSERT_CONTAINS(err, "lower 'dstrain.model.context' or give more tokens");
    o.context = 40; /* the training shards too short */
    ASSERT_EQ(dsl_data_load(&tr, &te, &o, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "training shards of '");
    ASSERT_CONTAINS(err, "(1 file): 40 tokens, fewer than one window of context + 1 = 41");
    /* text: which split, the fraction, and the knobs */
    char text[100];
    memset(text, 'a', sizeof(text));
    put("t", text, 100);
    snprintf(p, sizeof(p), "%s/t", dir);
    struct dsl_data_opts ot = {.name = "text", .path = p, .context = 30, .vocab = 256,
                               .val_fraction = 0.2};
    ASSERT_EQ(dsl_data_load(&tr, &te, &ot, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "text data '");
    ASSERT_CONTAINS(err, "(1 file): the validation split (the last 0.2 of 100 bytes) has 20 "
                         "tokens, fewer than one window of context + 1 = 31: lower "
                         "'dstrain.model.context', raise 'dstrain.data.val_fraction' or give "
                         "more text");
    ot.val_fraction = 0.5;
    ot.context = 60;
    ASSERT_EQ(dsl_data_load(&tr, &te, &ot, err), DSL_EDATA);
    ASSERT_CONTAINS(err, "the training split (the first 0.5 of 100 bytes) has 50 tokens, "
                         "fewer than one window of context + 1 = 61: lower "
                         "'dstrain.model.context', lower 'dstrain.data.val_fraction' or give "
                         "more text");
    clean();
}

TEST(token_shards_given_as_symbolic_links_should_be_read)
{
    /* shards are big: people link them into a directory rather than copy them */
    make_dir();
    char p[160], q[160], err[DSL_ERR_LEN];
    uint16_t tok[40];
    for (int i = 0; i < 40; i++)
        tok[i] = (uint16_t)i;
    snprintf(p, sizeof(p), "%s/store", dir);
    ASSERT_EQ(mkdir(p, 0700), 0);
    put_tokens("store/x_train_000001.bin", tok, 40);
    put_tokens("store/x_val_000000.bin", tok, 10);
    snprintf(p, sizeof(p), "%s/d", dir);
    ASSERT_EQ(mkdir(p, 0700), 0);
    snprintf(q, sizeof(q), "%s/d/x_train_000001.bin", dir);
    ASSERT_EQ(symlink("../store/x_train_000001.bin", q), 0);
    snprintf(q, sizeof(q), "%s/d/x_val_000000.bin", dir);
    ASSERT_EQ(symlink("../store/x_val_000000.bin", q), 0);
    snprintf(q, sizeof(q), "%s/d/x_train_000002.bin", dir);
    ASSERT_OK(dsl_tokens_write(q, tok, 20, err));
    struct dsl_dataset tr, te;
    struct dsl_data_opts o = tokens_opts(p);
    expect_windows(&o, (60 - 5) / 4 + 1, 9 / 4); /* the linked shard and the copied one */
    /* a dangling link is an error that names it, not a shard quietly left out */
    snprintf(q, sizeof(q), "%s/d/x_train_000003.bin", dir);
    ASSERT_EQ(symlink("../store/gone.bin", q), 0);
    ASSERT(dsl_data_load(&tr, &te, &o, err) < 0);
    ASSERT_CONTAINS(err, "x_train_000003.bin");
    clean();
}

TEST_MAIN()
