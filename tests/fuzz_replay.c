/*
 * Replays a fuzz target's seeds as an ordinary test, for the builds without libFuzzer
 * (DSL_FUZZ=OFF: the normal and the ASan build). Linked with one target's
 * LLVMFuzzerTestOneInput, it calls it once per file named on the command line and per
 * regular file in a directory named there (not recursively, in name order). Each input
 * is passed in a buffer of exactly its size, as libFuzzer does, so a read past the end
 * shows under ASan. A target reports a bug by aborting; a clean exit means every input
 * passed. No input at all is a failure, so a wrong seed path cannot pass.
 *
 *   fuzz_hostfile tests/plan/seeds/fuzz_hostfile
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dslaunch/common/banned.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what, const char *path)
{
    fprintf(stderr, "fuzz_replay: %s '%s': %s\n", what, path, strerror(errno));
    exit(2);
}

/* run the target on the whole content of the regular file at path */
static void replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open", path);
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    if (!buf)
        die("out of memory reading", path);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            uint8_t *grown = realloc(buf, cap);
            if (!grown)
                die("out of memory reading", path);
            buf = grown;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f))
        die("cannot read", path);
    fclose(f);
    /* exactly n bytes (at least one for malloc), so ASan sees any read past the end */
    uint8_t *data = malloc(n ? n : 1);
    if (!data)
        die("out of memory reading", path);
    memcpy(data, buf, n);
    free(buf);
    fprintf(stderr, "# %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(data, n);
    free(data);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* replay every regular file directly in dir; returns how many */
static int replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        die("cannot open directory", dir);
    char **paths = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        size_t len = strlen(dir) + 1 + strlen(e->d_name) + 1;
        char *p = malloc(len);
        if (!p)
            die("out of memory listing", dir);
        snprintf(p, len, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) != 0)
            die("cannot stat", p);
        if (!S_ISREG(st.st_mode)) {
            free(p);
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **grown = realloc(paths, cap * sizeof(*paths));
            if (!grown)
                die("out of memory listing", dir);
            paths = grown;
        }
        paths[n++] = p;
    }
    closedir(d);
    if (n)
        qsort(paths, n, sizeof(*paths), by_name);
    for (size_t i = 0; i < n; i++) {
        replay_file(paths[i]);
        free(paths[i]);
    }
    free(paths);
    return (int)n;
}

int main(int argc, char **argv)
{
    int ran = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s SEED_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0)
            die("cannot stat", argv[i]);
        if (S_ISDIR(st.st_mode)) {
            ran += replay_dir(argv[i]);
        } else {
            replay_file(argv[i]);
            ran++;
        }
    }
    fprintf(stderr, "# %d input(s) passed\n", ran);
    return ran ? 0 : 1;
}
