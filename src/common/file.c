/*
 * Files made without following links (rules in file.h).
 *
 * Theory of operation. The attack is a local user who reaches a name before we do: a
 * symbolic link "rank0.log -> /etc/victim" planted in a shared log directory, or a
 * link at the predictable name of a temporary file. Two defences, used together:
 * every creation is O_EXCL|O_NOFOLLOW, which fails on any existing name (a dangling
 * link included) instead of writing through it, and a directory we reuse under fixed
 * names must be ours and writable by no one else, so whatever is in it was put there by
 * this user. Files are created with openat() on the directory's descriptor, so the
 * directory checked is the one written, even if the path is swapped afterwards.
 * Replacing unlinks the name first (for a link that removes the link, not its target)
 * and then creates it exclusively; appending opens without O_CREAT and accepts only a
 * regular file of ours with a single link (a hard link to a victim has two).
 *
 * Temporary names carry 64 random bits from getrandom(2); a name that exists anyway is
 * retried with fresh bits a few times. Readers open with O_NONBLOCK, so opening a FIFO
 * returns at once, and refuse anything that fstat does not call a regular file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define TEMP_TRIES 8

static const char *who_writes(mode_t m)
{
    if ((m & S_IWGRP) && (m & S_IWOTH))
        return "group and others";
    return (m & S_IWGRP) ? "its group" : "others";
}

#ifndef S_ISVTX
#define S_ISVTX 01000 /* the sticky bit: XSI, not in the POSIX base this tree compiles to */
#endif

int dsl_dir_open_private(const char *dir, char *err)
{
    struct stat lst, st;
    uid_t me = geteuid();
    int fd;

    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return dsl_seterr(err, -errno, "cannot create directory '%s': %s", dir,
                          strerror(errno));
    if (lstat(dir, &lst) < 0)
        return dsl_seterr(err, -errno, "cannot look at directory '%s': %s", dir,
                          strerror(errno));
    if (S_ISLNK(lst.st_mode) && lst.st_uid != me)
        return dsl_seterr(err, DSL_EUSAGE,
                          "directory '%s' is a symbolic link owned by another user (uid %ld): "
                          "not following it; give the directory itself",
                          dir, (long)lst.st_uid);
    /* not a link when looked at: not one when opened either, and the same directory */
    int nofollow = S_ISLNK(lst.st_mode) ? 0 : O_NOFOLLOW;
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | nofollow);
    if (fd < 0)
        return dsl_seterr(err, -errno, "cannot open directory '%s': %s", dir, strerror(errno));
    if (fstat(fd, &st) < 0) {
        int r = dsl_seterr(err, -errno, "cannot look at directory '%s': %s", dir,
                           strerror(errno));
        close(fd);
        return r;
    }
    if (!S_ISLNK(lst.st_mode) && (st.st_dev != lst.st_dev || st.st_ino != lst.st_ino)) {
        close(fd);
        return dsl_seterr(err, DSL_EUSAGE, "directory '%s' was replaced while it was checked",
                          dir);
    }
    if (st.st_uid != me) {
        close(fd);
        return dsl_seterr(err, DSL_EUSAGE,
                          "directory '%s' belongs to another user (uid %ld, not %ld): files "
                          "in it could be links planted by its owner; use a directory of "
                          "your own",
                          dir, (long)st.st_uid, (long)me);
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && (st.st_mode & S_ISVTX)) {
        /* a shared directory such as /tmp: never advise making it private */
        size_t n = strlen(dir);
        int slash = n > 0 && dir[n - 1] == '/';
        close(fd);
        return dsl_seterr(err, DSL_EUSAGE,
                          "directory '%s' is shared (writable by %s, sticky: mode %04o, like "
                          "/tmp): another user could plant links in it; give a directory of "
                          "your own inside it instead, e.g. '%s%slogs' (created if missing)",
                          dir, who_writes(st.st_mode), (unsigned)(st.st_mode & 07777), dir,
                          slash ? "" : "/");
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        close(fd);
        return dsl_seterr(err, DSL_EUSAGE,
                          "directory '%s' is writable by %s (mode %04o): another user could "
                          "plant links in it; use a directory only you can write "
                          "(chmod go-w '%s')",
                          dir, who_writes(st.st_mode), (unsigned)(st.st_mode & 07777), dir);
    }
    return fd;
}

static int create_excl(int dirfd, const char *name, mode_t mode)
{
    return openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
}

static int open_append(int dirfd, const char *name, const char *shown, char *err)
{
    struct stat st;
    int fd = openat(dirfd, name, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return -ENOENT; /* the caller creates it */
        if (e == ELOOP)
            return dsl_seterr(err, -ELOOP, "'%s' is a symbolic link: not writing through it",
                              shown);
        return dsl_seterr(err, -e, "cannot open '%s': %s", shown, strerror(e));
    }
    if (fstat(fd, &st) < 0) {
        int r = dsl_seterr(err, -errno, "cannot look at '%s': %s", shown, strerror(errno));
        close(fd);
        return r;
    }
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1) {
        close(fd);
        return dsl_seterr(err, -EEXIST,
                          "'%s' exists and is not a regular file of yours with one link: not "
                          "appending to it",
                          shown);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int dsl_file_create(int dirfd, const char *name, const char *shown, mode_t mode,
                    enum dsl_file_exist how, char *err)
{
    int fd;
    if (how == DSL_FILE_APPEND) {
        fd = open_append(dirfd, name, shown, err);
        if (fd != -ENOENT)
            return fd;
    } else if (how == DSL_FILE_REPLACE) {
        if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
            return dsl_seterr(err, -errno, "cannot replace '%s': %s", shown, strerror(errno));
    }
    fd = create_excl(dirfd, name, mode);
    if (fd < 0) {
        int e = errno;
        if (e == EEXIST)
            return dsl_seterr(err, -e,
                              "cannot create '%s': something is already there (a file or a "
                              "link; not writing through it)",
                              shown);
        return dsl_seterr(err, -e, "cannot create '%s': %s", shown, strerror(e));
    }
    return fd;
}

int dsl_file_create_temp(const char *path, mode_t mode, char **tmp, char *err)
{
    *tmp = NULL;
    for (int i = 0; i < TEMP_TRIES; i++) {
        uint64_t rnd;
        ssize_t got;
        do
            got = getrandom(&rnd, sizeof(rnd), 0);
        while (got < 0 && errno == EINTR);
        if (got != (ssize_t)sizeof(rnd))
            return dsl_seterr(err, got < 0 ? -errno : -EIO,
                              "cannot name a temporary file for '%s': getrandom: %s", path,
                              strerror(got < 0 ? errno : EIO));
        char *name = dsl_xasprintf("%s.tmp.%016llx", path, (unsigned long long)rnd);
        int fd = create_excl(AT_FDCWD, name, mode);
        if (fd >= 0) {
            *tmp = name;
            return fd;
        }
        int e = errno;
        if (e != EEXIST) {
            /* the name the user gave, not the temporary one beside it */
            int r = dsl_seterr(err, -e, "cannot create '%s': %s", path, strerror(e));
            free(name);
            return r;
        }
        free(name);
    }
    return dsl_seterr(err, -EEXIST,
                      "cannot create a temporary file for '%s': %d random names were all "
                      "taken",
                      path, TEMP_TRIES);
}

int dsl_file_check_readable(const char *what, const char *path, char *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return dsl_seterr(err, DSL_EUSAGE, "%s '%s': %s", what, path, strerror(errno));
    struct stat st;
    int dir = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
    close(fd);
    if (dir)
        return dsl_seterr(err, DSL_EUSAGE, "%s '%s' is a directory, not a file", what, path);
    return 0;
}

int dsl_file_open_regular(const char *path, size_t *size, char *err)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return dsl_seterr(err, -errno, "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fd, &st) < 0) {
        int r = dsl_seterr(err, -errno, "cannot stat '%s': %s", path, strerror(errno));
        close(fd);
        return r;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return dsl_seterr(err, -EINVAL, "'%s' is not a regular file (%s): not reading it",
                          path,
                          S_ISFIFO(st.st_mode)   ? "a FIFO"
                          : S_ISDIR(st.st_mode)  ? "a directory"
                          : S_ISSOCK(st.st_mode) ? "a socket"
                                                 : "a device");
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *size = (size_t)st.st_size;
    return fd;
}

int dsl_file_sync_dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? dsl_xstrndup(path, (size_t)(slash - path)) : dsl_xstrdup(".");
    if (!dir[0]) {
        free(dir);
        dir = dsl_xstrdup("/");
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r = 0;
    if (fd < 0 || fsync(fd) < 0)
        r = -errno;
    if (fd >= 0)
        close(fd);
    free(dir);
    return r;
}

static int mkdir_one(const char *p)
{
    struct stat st;
    if (mkdir(p, 0755) == 0)
        return 0;
    if (errno != EEXIST)
        return -errno;
    if (stat(p, &st) < 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int dsl_dir_make_all(const char *path)
{
    char *p = dsl_xstrdup(path);
    int r = 0;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if ((r = mkdir_one(p)) < 0)
            break;
        *s = '/';
    }
    if (r == 0)
        r = mkdir_one(p);
    free(p);
    return r;
}
