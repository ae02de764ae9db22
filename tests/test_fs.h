/*
 * Scratch files for the unit tests: a private directory under /tmp, a file written in
 * one go, and the recursive removal that cleans up after them. Removal never follows
 * a link: a link is unlinked, whatever it points at.
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

#endif
