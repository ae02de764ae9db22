/* SHA-256 (libcrypto, tools/digest.c) against the FIPS 180-4 / NIST example vectors,
 * whole and in odd-sized pieces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "tools/digest.h"
#include "test.h"

static void hex(const unsigned char d[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static const struct {
    const char *msg;
    size_t repeat;
    const char *want;
} vectors[] = {
    {"", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    {"abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
    {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    {"a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
    /* 55, 56 and 64 bytes: the padding boundaries */
    {"a", 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
    {"a", 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
    {"a", 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
};

TEST(sha256_should_match_the_nist_vectors_whole_and_in_pieces)
{
    for (size_t v = 0; v < sizeof(vectors) / sizeof(vectors[0]); v++) {
        size_t len = strlen(vectors[v].msg), total = len * vectors[v].repeat;
        char *buf = malloc(total + 1);
        for (size_t r = 0; r < vectors[v].repeat; r++)
            memcpy(buf + r * len, vectors[v].msg, len);
        for (size_t piece = 1; piece <= 131; piece += 13) {
            struct dsl_sha256 c;
            unsigned char d[32];
            char h[65];
            ASSERT_EQ(dsl_sha256_init(&c), 0);
            for (size_t off = 0; off < total; off += piece)
                dsl_sha256_update(&c, buf + off, total - off < piece ? total - off : piece);
            ASSERT_EQ(dsl_sha256_final(&c, d), 0);
            hex(d, h);
            ASSERT_STR_EQ(h, vectors[v].want);
        }
        free(buf);
    }
}

TEST(sha256_file_should_hash_a_file_and_report_a_missing_one)
{
    char path[] = "/tmp/dsl-sha256-XXXXXX", err[DSL_ERR_LEN], h[65];
    unsigned char d[32];
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    ASSERT_EQ(write(fd, "abc", 3), 3);
    close(fd);
    ASSERT_EQ(dsl_sha256_file(path, d, err), 0);
    hex(d, h);
    ASSERT_STR_EQ(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    unlink(path);
    ASSERT(dsl_sha256_file(path, d, err) < 0);
    ASSERT(strstr(err, "cannot read") != NULL);
}

TEST_MAIN()
