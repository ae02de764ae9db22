/*
 * Scratch files for the unit tests: a private directory under /tmp, a file written in
 * one go, copied or with one byte flipped, and the recursive removal that cleans up
 * after them. Removal never follows a link: a link is unlinked, whatever it points at.
 */
#ifndef DSLAUNCH_TEST_FS_H
#define DSLAUNCH_TEST_FS_H

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

/* A fresh directory /tmp/dsl-TAG-test-XXXXXX (mode 0700); the caller frees the name. */
static inline char *test_tmpdir(const char *tag)
{
    size_t n = strlen(tag) + 32;
    char *t = malloc(n);
    ASSERT(t != NULL);
    snprintf(t, n, "/tmp/dsl-%s-test-XXXXXX", tag);
    ASSERT(mkdtemp(t) != NULL);
    return t;
}

/* path holds exactly text, with mode (when it is created). */
static inline void test_write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    ASSERT(fd >= 0);
    ASSERT(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    ASSERT(close(fd) == 0);
}

/* The size of the file at path. */
static inline long test_file_size(const char *path)
{
    struct stat st;
    ASSERT(stat(path, &st) == 0);
    return (long)st.st_size;
}

/* to holds the bytes of from. */
static inline void test_copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[4096];
    size_t n;
    ASSERT(a && b);
    while ((n = fread(buf, 1, sizeof(buf), a)) > 0)
        ASSERT(fwrite(buf, 1, n, b) == n);
    fclose(a);
    fclose(b);
}

/* Corrupt the byte at off (a bit that keeps it printable ASCII when it was). */
static inline void test_flip_byte(const char *path, long off)
{
    int fd = open(path, O_RDWR);
    unsigned char ch;
    ASSERT(fd >= 0);
    ASSERT(pread(fd, &ch, 1, off) == 1);
    ch ^= 0x40;
    ASSERT(pwrite(fd, &ch, 1, off) == 1);
    close(fd);
}

/* How many entries dir holds, not counting those whose name starts with '.'. */
static inline int test_count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    ASSERT(d != NULL);
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Remove path and, when it is a directory, everything below it. */
static inline void rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return;
    if (!S_ISDIR(st.st_mode)) {
        unlink(path);
        return;
    }
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            size_t n = strlen(path) + strlen(e->d_name) + 2;
            char *p = malloc(n);
            ASSERT(p != NULL);
            snprintf(p, n, "%s/%s", path, e->d_name);
            rm_rf(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(path);
}

/* The end of a test_tmpdir(): everything below it removed, the name freed. */
static inline void test_tmpdir_remove(char *dir)
{
    rm_rf(dir);
    free(dir);
}

#endif
