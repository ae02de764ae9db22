/*
 * The digest a no-ssh node's hello carries of its PROGRAM and arguments (argv_sha256):
 * the agent computes it, the coordinator compares it (job/nossh_check.c). It is over
 * each word as an 8-byte big-endian length and its bytes, so no two different word
 * lists share an encoding ("a b" vs "a" "b", an empty word).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "dslaunch/proto/proto.h"
#include "dslaunch/common/banned.h"

void dsl_nossh_argv_digest(char *const *argv, size_t n, char hex[65])
{
    hex[0] = '\0';
    if (!n)
        return;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        abort(); /* out of memory: as dsl_xmalloc */
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(argv[i]);
        unsigned char be[8];
        for (int b = 0; b < 8; b++)
            be[b] = (unsigned char)((uint64_t)len >> (56 - 8 * b));
        EVP_DigestUpdate(ctx, be, sizeof(be));
        EVP_DigestUpdate(ctx, argv[i], len);
    }
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    for (unsigned int i = 0; i < mdlen && i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}
