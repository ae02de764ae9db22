/*
 * What the fuzz targets of a command line (fuzz_options, fuzz_settings) share: the
 * input as words split at its NUL bytes, and an empty directory of the target's own to
 * parse in, entered and left around the parser (so libFuzzer's relative paths keep
 * working), so that no option can name a file that exists. The directory is
 * /tmp/dsl_fuzz_<tag>.XXXXXX, removed at exit.
 */
#ifndef DSL_TESTS_FUZZ_ARGV_H
#define DSL_TESTS_FUZZ_ARGV_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/xalloc.h"
#include "fuzz_text.h"

static char fuzz_dir[64];
static int fuzz_here = -1, fuzz_there = -1;

static void fuzz_remove_dir(void)
{
    rmdir(fuzz_dir);
}

static void fuzz_enter_empty_dir(const char *tag)
{
    if (fuzz_there < 0) {
        snprintf(fuzz_dir, sizeof(fuzz_dir), "/tmp/dsl_fuzz_%s.XXXXXX", tag);
        if (!mkdtemp(fuzz_dir) ||
            (fuzz_there = open(fuzz_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
            (fuzz_here = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
            abort();
        atexit(fuzz_remove_dir);
    }
    if (fchdir(fuzz_there) != 0)
        abort();
}

static void fuzz_leave_empty_dir(void)
{
    if (fchdir(fuzz_here) != 0)
        abort();
}

/* data's words, split at its NUL bytes, into *words (NULL-terminated, with room for
 * one more word in front: words[0] is left NULL for argv[0]); returns the copy of data
 * they point into. The caller frees both. NULL, and nothing to free, where data holds a
 * '/': no word then can name an existing file, even outside the empty directory. */
static char *fuzz_words(const uint8_t *data, size_t size, char ***words, size_t *nwords)
{
    if (memchr(data, '/', size))
        return NULL;
    char *buf = fuzz_text(data, size);
    size_t n = 1;
    for (size_t i = 0; i < size; i++)
        n += data[i] == '\0';
    *words = dsl_xcalloc(n + 2, sizeof(char *));
    size_t k = 1;
    for (char *w = buf; w <= buf + size; w += strlen(w) + 1)
        (*words)[k++] = w;
    *nwords = n;
    return buf;
}

#endif
