/*
 * The safetensors format: a round trip of every dtype and shape with escaped names and
 * metadata, every rule of the header's grammar with its message, and the checkpoint
 * metadata's size lists.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "train/checkpoint.h"
#include "train/safetensors.h"
#include "test.h"
#include "test_fs.h"

TEST(safetensors_should_round_trip_dtypes_shapes_and_escaped_metadata)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN];
    char *path = dsl_xasprintf("%s/x.safetensors", dir);
    float f[6] = {1, 2, 3, 4, 5, 6};
    int64_t q[2] = {-1, 1LL << 40};
    unsigned char u[3] = {1, 2, 3};
    struct dsl_st_tensor t[] = {
        {"a \"quoted\"\nname", DSL_ST_F32, 2, {2, 3}, f, 0},
        {"empty", DSL_ST_F32, 1, {0}, f, 0},
        {"scalar", DSL_ST_I64, 0, {0}, q, 0},
        {"q", DSL_ST_I64, 1, {2}, q, 0},
        {"bytes\xc3\xa9", DSL_ST_U8, 1, {3}, u, 0},
    };
    struct dsl_strvec meta;
    dsl_strvec_init(&meta);
    dsl_env_set(&meta, "note", "tab\there \"q\" back\\slash \x01");
    ASSERT_OK(dsl_st_write(path, t, sizeof(t) / sizeof(t[0]), &meta, err));
    struct dsl_st_file r;
    ASSERT_OK(dsl_st_load(&r, path, 0, err));
    ASSERT_EQ(r.n, 5);
    ASSERT_EQ((8 + (r.buf[0] | r.buf[1] << 8)) % 8, 0); /* data aligned to 8 */
    const struct dsl_st_tensor *a = dsl_st_find(&r, "a \"quoted\"\nname");
    ASSERT(a && a->ndim == 2 && a->shape[1] == 3 && a->nbytes == 24);
    ASSERT(memcmp(a->data, f, 24) == 0);
    const struct dsl_st_tensor *sc = dsl_st_find(&r, "scalar");
    ASSERT(sc && sc->ndim == 0 && sc->nbytes == 8);
    ASSERT(memcmp(sc->data, q, 8) == 0);
    ASSERT(dsl_st_find(&r, "empty")->nbytes == 0);
    ASSERT(memcmp(dsl_st_find(&r, "bytes\xc3\xa9")->data, u, 3) == 0);
    ASSERT_STR_EQ(dsl_env_get(&r.meta, "note"), "tab\there \"q\" back\\slash \x01");
    ASSERT(dsl_env_get(&r.meta, "dsl.sha256") != NULL);
    dsl_st_release(&r);
    dsl_strvec_release(&meta);
    free(path);
    test_tmpdir_remove(dir);
}

/* In-memory file from a header and data bytes. */
static int parse_st(const char *header, const void *data, size_t dlen, char *err)
{
    size_t hl = strlen(header), len = 8 + hl + dlen;
    unsigned char *buf = dsl_xmalloc(len);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    memcpy(buf + 8 + hl, data, dlen);
    struct dsl_st_file f;
    int r = dsl_st_parse(&f, "m.safetensors", buf, len, 0, err);
    dsl_st_release(&f);
    free(buf);
    return r;
}

/* 64 hex digits: eight times the 8 given */
#define HEX64(x8) x8 x8 x8 x8 x8 x8 x8 x8
#define HEX63_ZEROS "0000000" HEX64("0000000") /* 7 + 56 */

static const struct {
    const char *header;
    size_t dlen;
    const char *err; /* NULL: valid */
} header_cases[] = {
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, NULL},
    /* a file from another writer: no crc, spaces, escapes, metadata first */
    {" { \"__metadata__\" : {\"format\":\"pt\"} , \"\\u00e9\\ud83d\\ude00\" : "
     "{ \"shape\" : [ 1 , 2 ] , \"dtype\" : \"BF16\" , \"data_offsets\" : [ 0 , 4 ] } }   ",
     4, NULL},
    {"{}", 0, NULL},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
     "12 bytes of data but the tensors cover 8"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
     "needs 12 bytes"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "(overlap)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, "(gap)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "appears twice"},
    {"{\"a\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "unsupported dtype 'F31'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, "needs dtype, shape and data_offsets"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
     "unexpected or repeated field 'x'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
     "expected a non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
     "\"data_offsets\":[0,4]}}", 4, "impossible size"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "data_offsets [4, 0]"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", 4,
     "number out of range"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4,
     "unexpected text after the header object"},
    {"[1]", 0, "expected '{'"},
    {"{\"__metadata__\":{\"k\":1}}", 0, "expected '\"'"},
    {"{\"__metadata__\":{\"a=b\":\"1\"}}", 0, "unsupported or repeated metadata key 'a=b'"},
    {"{\"\\q\":{}}", 0, "bad escape"},
    {"{\"\\ud800\":{}}", 0, "lone surrogate"},
    {"{\"__metadata__\":{\"dsl.crc32\":\"00000000\"},"
     "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "checksum mismatch"},
    /* the checksums of dslaunch's files: 64 lowercase hex digits without escapes */
    {"{\"__metadata__\":{\"dsl.sha256\":\"abc\"}}", 0,
     "dsl.sha256 must be 64 lowercase hex digits"},
    {"{\"__metadata__\":{\"dsl.data_sha256\":\"" HEX64("AAAAAAAA") "\"}}", 0,
     "dsl.data_sha256 must be 64 lowercase hex digits"},
    {"{\"__metadata__\":{\"dsl.sha256\":\"\\u0030" HEX63_ZEROS "\"}}", 0,
     "dsl.sha256 must be 64 lowercase hex digits"},
    {"{\"__metadata__\":{\"dsl.sha256\":\"" HEX64("00000000") "\"}}", 0,
     "'m.safetensors': the header does not match its checksum (dsl.sha256): it was edited"},
    {"{\"__metadata__\":{\"dsl.data_sha256\":\"" HEX64("00000000") "\"},"
     "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     "the tensor data does not match its checksum (dsl.data_sha256 000000000000..."},
    /* numbers are exact 64-bit integers (a zero dimension makes this one 0 bytes) */
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0,18446744073709551615],\"data_offsets\":[0,0]}}", 0,
     NULL},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0,18446744073709551616],\"data_offsets\":[0,0]}}", 0,
     "number out of range"},
    {"{\"\\u005f_metadata__\":{\"k\":\"v\"}}", 0, NULL},
    /* the grammar of an entry */
    {"{\"a\":1}", 0, "expected '{'"},
    {"{\"a\":{\"dtype\":1,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "expected '\"'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4, "expected '['"},
    {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "unexpected or repeated field 'dtype'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
     "too many entries in array (at most 8)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,4]}}", 4,
     "too many entries in array (at most 2)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4,
     "data_offsets must hold two numbers"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4,
     "leading zero in number"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4,
     "expected a non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e0],\"data_offsets\":[0,4]}}", 4,
     "expected a non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[true],\"data_offsets\":[0,4]}}", 4,
     "expected a non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[[1]],\"data_offsets\":[0,4]}}", 4,
     "expected a non-negative integer"},
    {"{\"__metadata__\":{\"k\":{\"x\":{}}}}", 0, "nested too deep"},
    /* metadata */
    {"{\"__metadata__\":\"x\"}", 0, "expected '{'"},
    {"{\"__metadata__\":{\"k\":null}}", 0, "expected '\"'"},
    {"{\"__metadata__\":{\"\":\"1\"}}", 0, "unsupported or repeated metadata key ''"},
    {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0,
     "unsupported or repeated metadata key 'k'"},
    {"{\"__metadata__\":{\"k\":\"1\"},\"__metadata__\":{\"j\":\"2\"}}", 0, "repeated __metadata__"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "repeated __metadata__"},
    /* strings and the JSON text itself */
    {"{\"a\x01\":{}}", 0, "control character in string"},
    {"{\x01}", 0, "control character outside a string"},
    {"{\"\\u0000\":{}}", 0, "NUL in string"},
    {"{\"\\udc00\":{}}", 0, "lone surrogate"},
    {"{\"\\ud800\\u0041\":{}}", 0, "bad surrogate pair"},
    {"{\"\\u12g4\":{}}", 0, "bad \\u escape"},
    {"{\"\\u12", 0, "short \\u escape"},
    {"{\"abc", 0, "unterminated string"},
    {"{\"a\":{\"dtype\":\"F32\"", 0, "unexpected end of the header"},
    {"{a:{}}", 0, "bad header at byte 1: expected '\"'"},
    {"{\"a\" {}}", 0, "bad header at byte 5"},
    {"\xef\xbb\xbf{}", 0, "expected '{'"},
    {"{", 0, "bad header length 1"},
};

TEST(safetensors_reader_should_validate_every_header_rule)
{
    unsigned char data[16] = {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7};
    for (size_t i = 0; i < sizeof(header_cases) / sizeof(header_cases[0]); i++) {
        char err[DSL_ERR_LEN] = "";
        int r = parse_st(header_cases[i].header, data, header_cases[i].dlen, err);
        fprintf(stderr, "  %zu -> %s\n", i, r < 0 ? err : "ok");
        if (!header_cases[i].err) {
            ASSERT_OK(r);
        } else {
            ASSERT_EQ(r, DSL_ECHECKPOINT);
            ASSERT_CONTAINS(err, header_cases[i].err);
            ASSERT_CONTAINS(err, "'m.safetensors'");
        }
    }
    char err[DSL_ERR_LEN];
    struct dsl_st_file f;
    unsigned char huge[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    ASSERT_EQ(dsl_st_parse(&f, "m.safetensors", huge, 8, 0, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "is truncated: header of");
    dsl_st_release(&f);
    ASSERT_EQ(dsl_st_parse(&f, "m.safetensors", huge, 5, 0, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "no header length");
    dsl_st_release(&f);
}

TEST(checkpoint_meta_sizes_should_take_exactly_n_plain_numbers)
{
    /* dstrain sample read the "gpt" key with sscanf("%zu,..."), undefined past SIZE_MAX
       and lenient with signs, spaces and trailing text */
    struct dsl_ckpt c;
    char err[DSL_ERR_LEN];
    size_t v[5] = {0};
    memset(&c, 0, sizeof(c));
    c.path = (char *)"ck/global_step1";
    dsl_strvec_init(&c.meta);
    dsl_strvec_push(&c.meta, "gpt=4,128,4,128,256");
    ASSERT_OK(dsl_ckpt_meta_sizes(&c, "gpt", v, 5, err));
    ASSERT(v[0] == 4 && v[1] == 128 && v[2] == 4 && v[3] == 128 && v[4] == 256);
    static const char *const bad[] = {"gpt=4,128,4,128", "gpt=4,128,4,128,256,1",
                                      "gpt=4,128,4,128,256x", "gpt= 4,128,4,128,256",
                                      "gpt=-4,128,4,128,256", "gpt=4,,4,128,256",
                                      "gpt=4,128,4,128,99999999999999999999", "gpt=",
                                      "gpt=04,128,4,128,256"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        dsl_strvec_clear(&c.meta);
        dsl_strvec_push(&c.meta, bad[i]);
        size_t w[5] = {7, 7, 7, 7, 7};
        ASSERT_EQ(dsl_ckpt_meta_sizes(&c, "gpt", w, 5, err), DSL_ECHECKPOINT);
        ASSERT_CONTAINS(err, "bad metadata 'gpt'");
        ASSERT(w[0] == 7 && w[4] == 7); /* filled only on success */
    }
    ASSERT_EQ(dsl_ckpt_meta_sizes(&c, "nope", v, 5, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "missing metadata 'nope'");
    dsl_strvec_release(&c.meta);
}

TEST_MAIN()
