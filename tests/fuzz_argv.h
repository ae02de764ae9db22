/*
 * What the fuzz targets of a command line (fuzz_options, fuzz_settings) share: the
 * input as words split at its NUL bytes, and an empty directory of the target's own to
 * parse in, entered and left around the parser (so libFuzzer's relative paths keep
 * working), so that no option can name a file that exists, and the rule that every
 * refusal names its reason. The directory is /tmp/dsl_fuzz_<tag>.XXXXXX, removed at
 * exit.
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

/* r, a parser's result with its message in err; aborts where it refused (r < 0) without
 * saying why: every refusal names its reason. */
static int fuzz_explained(int r, const char *err)
{
    if (r < 0 && !err[0])
        abort();
    return r;
}

/* fuzz_explained() of a parser that ran in the empty directory, left again first. */
static int fuzz_left(int r, const char *err)
{
    fuzz_leave_empty_dir();
    return fuzz_explained(r, err);
}

/* The input's words: v[1..n] (v[0] is left NULL for argv[0], v[n + 1] is NULL), in
 * buf, a copy of the input. */
struct fuzz_words {
    char *buf;
    char **v;
    size_t n;
};

/* data's words, split at its NUL bytes, into w: 1, or 0 (and nothing to free) where data
 * holds a '/': no word then can name an existing file, even outside the empty
 * directory. fuzz_words_free() frees what w holds. */
static int fuzz_words(const uint8_t *data, size_t size, struct fuzz_words *w)
{
    if (memchr(data, '/', size))
        return 0;
    w->buf = fuzz_text(data, size);
    w->n = 1;
    for (size_t i = 0; i < size; i++)
        w->n += data[i] == '\0';
    w->v = dsl_xcalloc(w->n + 2, sizeof(char *));
    size_t k = 1;
    for (char *p = w->buf; p <= w->buf + size; p += strlen(p) + 1)
        w->v[k++] = p;
    return 1;
}

static void fuzz_words_free(struct fuzz_words *w)
{
    free(w->v);
    free(w->buf);
}

#endif
