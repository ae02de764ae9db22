/*
 * What the fuzz targets of a checkpoint directory (fuzz_ckpt, fuzz_ckpt_zero3) share:
 * the scratch directory with its tag's directory, and the input cut at every FUZZ_CUT
 * into the files of the directory, in order, a file the input stops before left missing. Define _GNU_SOURCE before the first include
 * (memmem).
 */
#ifndef DSL_TESTS_FUZZ_FILES_H
#define DSL_TESTS_FUZZ_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_CUT "\n--8<--\n"

/* A fresh directory /tmp/dsl_fuzz_<name>.XXXXXX into dir and its tag directory
 * global_step1 into tagdir (buffers of dirlen and taglen bytes); aborts where it cannot. */
static void fuzz_ckpt_dirs(const char *name, char *dir, size_t dirlen, char *tagdir,
                           size_t taglen)
{
    snprintf(dir, dirlen, "/tmp/dsl_fuzz_%s.XXXXXX", name);
    if (!mkdtemp(dir))
        abort();
    snprintf(tagdir, taglen, "%s/global_step1", dir);
    if (mkdir(tagdir, 0700) != 0)
        abort();
}

/* the n paths at paths, stride bytes apart (a char array per file) */
static void fuzz_write_parts(const uint8_t *data, size_t size, const char *paths,
                             size_t stride, int n)
{
    const uint8_t *p = data, *end = data + size;
    for (int i = 0; i < n; i++) {
        const char *path = paths + (size_t)i * stride;
        unlink(path);
        if (!p)
            continue;
        const uint8_t *cut = memmem(p, (size_t)(end - p), FUZZ_CUT, sizeof(FUZZ_CUT) - 1);
        size_t len = cut ? (size_t)(cut - p) : (size_t)(end - p);
        FILE *f = fopen(path, "wb");
        if (!f || (len && fwrite(p, 1, len, f) != len) || fclose(f) != 0)
            abort();
        p = cut ? cut + sizeof(FUZZ_CUT) - 1 : NULL;
    }
}

#endif
