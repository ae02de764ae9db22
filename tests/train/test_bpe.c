/*
 * GPT-2's BPE (src/train/bpe.c, bpe_pretok.c): GPT-2's ids for known text from the real
 * encoder.json and vocab.bpe (tests/data/gpt2), decode(encode(x)) == x for arbitrary
 * bytes, encoder.py's pre-tokenisation and merge order on a hand-made vocabulary, and
 * the loaders' errors. tests/e2e/train/bpe.sh compares whole texts with the Python
 * reference.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/bpe.h"
#include "dslaunch/common/error.h"
#include "test.h"

static struct dsl_bpe gpt2;
static int gpt2_loaded;

static struct dsl_bpe *real(void)
{
    if (!gpt2_loaded) {
        char err[DSL_ERR_LEN] = "";
        int r = dsl_bpe_load(&gpt2, DSL_GPT2_DIR "/encoder.json.gz",
                             DSL_GPT2_DIR "/vocab.bpe.gz", err);
        if (r < 0)
            DSL_FAIL_("loading GPT-2's files: %s", err);
        gpt2_loaded = 1;
    }
    return &gpt2;
}

/* text's ids, into ids (room for cap); their number */
static size_t encode(struct dsl_bpe *b, const char *text, size_t n, uint16_t *ids, size_t cap)
{
    size_t k;
    uint16_t *t = dsl_bpe_encode(b, (const uint8_t *)text, n, &k);
    ASSERT(k <= cap);
    memcpy(ids, t, k * sizeof(*t));
    free(t);
    return k;
}

/* the bytes of ids, decoded, into a malloc'ed buffer of *n bytes */
static uint8_t *decode(const struct dsl_bpe *b, const uint16_t *ids, size_t k, size_t *n)
{
    size_t cap = 16, len = 0;
    uint8_t *out = malloc(cap);
    for (size_t i = 0; i < k; i++) {
        size_t l;
        const uint8_t *p = dsl_bpe_token(b, ids[i], &l);
        ASSERT(p != NULL);
        while (len + l > cap)
            out = realloc(out, cap *= 2);
        memcpy(out + len, p, l);
        len += l;
    }
    *n = len;
    return out;
}

TEST(bpe_should_give_gpt2s_ids_for_hello_world)
{
    struct dsl_bpe *b = real();
    ASSERT_EQ(b->nvocab, 50257);
    ASSERT_EQ(b->ntokens, 50257);
    ASSERT_EQ(b->nmerges, 50000);
    uint16_t ids[16];
    ASSERT_EQ(encode(b, "Hello world", 11, ids, 16), 2);
    ASSERT_EQ(ids[0], 15496);
    ASSERT_EQ(ids[1], 995);
}

TEST(bpe_should_encode_endoftext_as_ordinary_text_and_decode_its_id)
{
    struct dsl_bpe *b = real();
    ASSERT_EQ(b->eot, 50256);
    size_t l;
    const uint8_t *p = dsl_bpe_token(b, 50256, &l);
    ASSERT(p && l == 13 && memcmp(p, "<|endoftext|>", 13) == 0);
    /* encoder.py has no special tokens: the text is "<", "|", "end", "of", "text", ... */
    uint16_t ids[16];
    size_t k = encode(b, "<|endoftext|>", 13, ids, 16);
    static const uint16_t want[] = {27, 91, 437, 1659, 5239, 91, 29};
    ASSERT_EQ(k, 7);
    for (size_t i = 0; i < k; i++)
        ASSERT_EQ(ids[i], want[i]);
    ASSERT(dsl_bpe_token(b, 50257, &l) == NULL);
    ASSERT(dsl_bpe_token(b, 65535, &l) == NULL);
}

TEST(bpe_should_decode_what_it_encodes_for_arbitrary_bytes)
{
    struct dsl_bpe *b = real();
    /* pieces that stress the pattern: spaces and newlines, apostrophes, digits,
     * letters beyond ASCII, emoji, invalid and truncated UTF-8 */
    static const char *const atoms[] = {
        " ", "  ", "\n", "\r\n", "\t", "'", "'s", "'ll", "a", "Z", "hello", "7", "42",
        "\xc3\xa9", "\xe2\x80\x94", "\xf0\x9f\x98\x80", "\xe3\x80\x80", "\xd9\xa3",
        "\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\x80", "\xf4\x90\x80\x80",
        "\xc2\xa0", "\x00", "\x1c", "<|endoftext|>", ".", "!!", "-"};
    uint64_t s = 19;
    uint8_t text[4096];
    for (int round = 0; round < 400; round++) {
        size_t n = 0, want = dsl_test_rng(&s) % 600;
        int raw = round % 4 == 3; /* a quarter: uniformly random bytes */
        while (n < want) {
            if (raw) {
                text[n++] = (uint8_t)dsl_test_rng(&s);
                continue;
            }
            const char *a = atoms[dsl_test_rng(&s) % (sizeof(atoms) / sizeof(atoms[0]))];
            size_t l = a[0] ? strlen(a) : 1;
            memcpy(text + n, a, l);
            n += l;
        }
        size_t k, m;
        uint16_t *ids = dsl_bpe_encode(b, text, n, &k);
        ASSERT(k <= n);
        uint8_t *back = decode(b, ids, k, &m);
        if (m != n || memcmp(back, text, n) != 0)
            DSL_FAIL_("round %d: %zu bytes decode to %zu different ones", round, n, m);
        free(back);
        free(ids);
    }
    /* long pieces (past the cache, the heap's case): a megabyte of spaces before a
     * word, and a megabyte-long word that merges a great deal */
    size_t n = 1 << 20, k, m;
    uint8_t *big = malloc(n + 5);
    for (int kind = 0; kind < 2; kind++) {
        for (size_t i = 0; i < n; i++)
            big[i] = kind ? (uint8_t)"thequickbrownfox"[i % 16] : ' ';
        memcpy(big + n, " wor", 4);
        uint16_t *ids = dsl_bpe_encode(b, big, n + 4, &k);
        uint8_t *back = decode(b, ids, k, &m);
        ASSERT(m == n + 4 && memcmp(back, big, m) == 0);
        if (kind)
            ASSERT(k < n / 2);
        free(back);
        free(ids);
    }
    free(big);
}

/* pieces of text as the pattern cuts them, joined with '|' */
static void pieces(const char *text, char *out)
{
    size_t n = strlen(text), o = 0;
    for (size_t i = 0; i < n;) {
        size_t j = dsl_bpe_pretok_next((const uint8_t *)text, n, i);
        ASSERT(j > i && j <= n);
        if (i)
            out[o++] = '|';
        memcpy(out + o, text + i, j - i);
        o += j - i;
        i = j;
    }
    out[o] = 0;
}

TEST(bpe_should_cut_text_as_gpt2s_pattern_does)
{
    char got[256];
    /* what Python's regex.findall gives for GPT-2's pattern */
    pieces("Hello  world\n\n  x's 3.14 caf\xc3\xa9 \xd9\xa1\xd9\xa2 \xf0\x9f\x98\x80", got);
    ASSERT_STR_EQ(got, "Hello| | world|\n\n | x|'s| 3|.|14| caf\xc3\xa9| \xd9\xa1\xd9\xa2|"
                       " \xf0\x9f\x98\x80");
    pieces("don't we'll I'm 'sup '' \t\tx  ", got);
    ASSERT_STR_EQ(got, "don|'t| we|'ll| I|'m| '|sup| ''| \t|\t|x|  ");
    /* invalid UTF-8 is "other", valid sequences keep their class */
    pieces("a\xff\xfe b\xe2\x82z \xc2\xa0x", got);
    ASSERT_STR_EQ(got, "a|\xff\xfe| b|\xe2\x82|z| |\xc2\xa0|x");
    ASSERT_EQ(dsl_bpe_class(0xE9), BPE_L);
    ASSERT_EQ(dsl_bpe_class(0x663), BPE_N);  /* ARABIC-INDIC DIGIT THREE */
    ASSERT_EQ(dsl_bpe_class(0xB2), BPE_N);   /* SUPERSCRIPT TWO (No) */
    ASSERT_EQ(dsl_bpe_class(0x3000), BPE_S); /* IDEOGRAPHIC SPACE */
    ASSERT_EQ(dsl_bpe_class(0x1C), BPE_O);   /* not \s in the regex module */
    ASSERT_EQ(dsl_bpe_class(0x1F600), BPE_O);
    ASSERT_EQ(dsl_bpe_class(0x4E2D), BPE_L); /* a CJK ideograph */
}

/* a vocabulary of the 256 bytes (ids 0..255 in byte order) and extra tokens (ids from
 * 256), spelt in GPT-2's byte alphabet, as encoder.json text */
static char *small_encoder(const char *const *extra, size_t nextra)
{
    size_t cap = 8192, o = 0;
    char *j = malloc(cap);
    o += (size_t)snprintf(j + o, cap - o, "{");
    uint32_t next = 256;
    for (int c = 0; c < 256; c++) {
        int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) ||
                        (c >= 0xAE && c <= 0xFF);
        uint32_t sym = printable ? (uint32_t)c : next++;
        o += (size_t)snprintf(j + o, cap - o, "%s\"\\u%04x\": %d", c ? ", " : "", sym, c);
    }
    for (size_t i = 0; i < nextra; i++)
        o += (size_t)snprintf(j + o, cap - o, ", \"%s\": %zu", extra[i], 256 + i);
    snprintf(j + o, cap - o, "}");
    return j;
}

static int load_small(struct dsl_bpe *b, const char *enc, const char *merges, char *err)
{
    return dsl_bpe_parse(b, enc, strlen(enc), "encoder.json", merges, strlen(merges),
                         "vocab.bpe", err);
}

TEST(bpe_should_merge_every_occurrence_of_the_best_pair_before_what_it_made)
{
    /* "aa a" ranks before "a a", out of training order: encoder.py still merges each
     * "a a" of a word left to right before it looks at the pairs those merges made, so
     * "aaaa" is aa|aa (not aaa|a) and "aaa" is aa|a, then aaa */
    static const char *const extra[] = {"aa", "aaa"};
    char *enc = small_encoder(extra, 2), err[DSL_ERR_LEN] = "";
    struct dsl_bpe b;
    ASSERT_EQ(load_small(&b, enc, "#version: 0.2\naa a\na a\n", err), 0);
    ASSERT_EQ(b.nmerges, 2);
    ASSERT_EQ(b.nvocab, 258);
    uint16_t ids[16];
    size_t k = encode(&b, "aaaa", 4, ids, 16);
    ASSERT_EQ(k, 2);
    ASSERT_EQ(ids[0], 256);
    ASSERT_EQ(ids[1], 256);
    k = encode(&b, "aaa", 3, ids, 16);
    ASSERT_EQ(k, 1);
    ASSERT_EQ(ids[0], 257);
    k = encode(&b, "aaaaa b", 7, ids, 16); /* aa|aa|a, then "aa a": aa|aaa */
    ASSERT_EQ(k, 4);
    ASSERT_EQ(ids[0], 256);
    ASSERT_EQ(ids[1], 257);
    ASSERT_EQ(ids[2], ' ');
    ASSERT_EQ(ids[3], 'b');
    ASSERT_EQ(b.eot, -1);
    dsl_bpe_release(&b);
    free(enc);
}

TEST(bpe_should_name_the_file_and_line_of_a_bad_vocabulary)
{
    static const char *const extra[] = {"aa", "\\u0120a", "<|endoftext|>"};
    char *enc = small_encoder(extra, 3), err[DSL_ERR_LEN];
    struct dsl_bpe b;
    static const struct {
        const char *merges, *msg;
    } bad[] = {
        {"#version: 0.2\na a\nab\n", "vocab.bpe:3: bad merge line 'ab': want two tokens"},
        {"a a\n\na  a\n", "vocab.bpe:3: bad merge line 'a  a'"},
        {"a\ta\n", "vocab.bpe:1: bad merge line"},
        {"a a\na b\n", "vocab.bpe:2: merge 'a b' makes a token the encoder lacks"},
        {"a ab\n", "vocab.bpe:1: merge 'a ab': 'ab' is not a token of the encoder"},
        {"a a\n\xc4\xa0 a\na a\n", "vocab.bpe:3: merge 'a a' repeats line 1"},
        {"\xe2\x82\xac a\n", "vocab.bpe:1: merge '\xe2\x82\xac a': '\xe2\x82\xac' is not a "
                             "token"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        ASSERT(load_small(&b, enc, bad[i].merges, err) < 0);
        ASSERT_CONTAINS(err, bad[i].msg);
    }
    /* CRLF lines and a first line of the version are fine; "<|endoftext|>" is found */
    ASSERT_EQ(load_small(&b, enc, "#version: 0.2\r\na a\r\n\xc4\xa0 a\r\n", err), 0);
    ASSERT_EQ(b.nmerges, 2);
    ASSERT_EQ(b.eot, 258);
    dsl_bpe_release(&b);
    free(enc);

    static const struct {
        const char *enc, *msg;
    } badenc[] = {
        {"[1, 2]", "encoder.json: not a JSON object of tokens and ids"},
        {"{\"a\": 1", "encoder.json: not a JSON object"},
        {"{}", "encoder.json: 0 tokens; a vocabulary has 256 to 65536"},
        {"{\"a\": 1, \"b\": 1}", "encoder.json: id 1 is given to two tokens (one is 'b')"},
        {"{\"a\": 1, \"a\": 2}", "encoder.json: token 'a' appears twice"},
        {"{\"a\": 1.5}", "encoder.json: token 'a' has id out of range, not a whole number"},
        {"{\"a\": 70000}", "encoder.json: token 'a' has id out of range"},
        {"{\"a\": \"1\"}", "encoder.json: token 'a' has id that is no number"},
        {"{\"\": 1}", "encoder.json: token '' is empty"},
        {"{\"a b\": 1}", "encoder.json: token 'a b' is not spelt in GPT-2's byte alphabet"},
        {"{\"a\": 0}", "encoder.json: byte 0x00 has no token (its symbol U+0100)"},
    };
    for (size_t i = 0; i < sizeof(badenc) / sizeof(badenc[0]); i++) {
        err[0] = 0;
        ASSERT(load_small(&b, badenc[i].enc, "", err) < 0);
        ASSERT_CONTAINS(err, badenc[i].msg);
    }
    err[0] = 0;
    ASSERT(dsl_bpe_load(&b, "/nonexistent/encoder.json", DSL_GPT2_DIR "/vocab.bpe.gz",
                        err) < 0);
    ASSERT_CONTAINS(err, "/nonexistent/encoder.json");
}

int main(int argc, char **argv)
{
    int r = RUN_TESTS(argc, argv);
    if (gpt2_loaded)
        dsl_bpe_release(&gpt2);
    return r;
}
