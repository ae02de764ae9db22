/*
 * The fuzz input as C text: a copy of the bytes with a NUL after them, so that a target
 * can hand it to parsers of strings (which then see it up to its first NUL byte).
 */
#ifndef DSL_TESTS_FUZZ_TEXT_H
#define DSL_TESTS_FUZZ_TEXT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* data and a NUL, in memory the caller frees; aborts when there is none. */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *t = malloc(size + 1);
    if (!t)
        abort();
    memcpy(t, data, size);
    t[size] = '\0';
    return t;
}

#endif
