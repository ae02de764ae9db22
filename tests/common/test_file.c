/* Unit tests of files made without following links (common/file.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/xalloc.h"
#include "test.h"
#include "test_fs.h"

static char *tmpdir(void)
{
    char *t = test_tmpdir("file");
    ASSERT(chmod(t, 0755) == 0);
    return t;
}

static void put(const char *path, const char *text)
{
    test_write_file(path, text, 0644);
}

static char *get(const char *path)
{
    static char buf[256];
    int fd = open(path, O_RDONLY);
    ASSERT(fd >= 0);
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    ASSERT(n >= 0);
    buf[n] = '\0';
    close(fd);
    return buf;
}

static void write_fd(int fd, const char *text)
{
    ASSERT(fd >= 0);
    ASSERT(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
}

TEST(private_dir_should_be_created_and_accepted_when_only_we_can_write_it)
{
    char *t = tmpdir(), err[DSL_ERR_LEN] = "";
    char *logs = dsl_xasprintf("%s/logs", t);
    int fd = dsl_dir_open_private(logs, err);
    ASSERT(fd >= 0);
    struct stat st;
    ASSERT(fstat(fd, &st) == 0);
    ASSERT(S_ISDIR(st.st_mode));
    ASSERT_EQ(st.st_mode & 022, 0);
    close(fd);
    fd = dsl_dir_open_private(logs, err); /* existing and ours: accepted again */
    ASSERT(fd >= 0);
    close(fd);
    free(logs);
    test_tmpdir_remove(t);
}

TEST(private_dir_should_refuse_group_or_world_writable_directories)
{
    char *t = tmpdir(), err[DSL_ERR_LEN] = "";
    char *d = dsl_xasprintf("%s/d", t);
    ASSERT(mkdir(d, 0700) == 0);
    ASSERT(chmod(d, 0775) == 0);
    ASSERT_EQ(dsl_dir_open_private(d, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "is writable by its group (mode 0775)");
    ASSERT_CONTAINS(err, d);
    ASSERT(chmod(d, 01777) == 0); /* shared like /tmp: a directory inside it, never chmod */
    ASSERT_EQ(dsl_dir_open_private(d, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "is shared (writable by group and others, sticky: mode 1777, like /tmp)");
    ASSERT_CONTAINS(err, "give a directory of your own inside it instead");
    ASSERT(strstr(err, "chmod") == NULL);
    char *slashed = dsl_xasprintf("%s/", d), *inside = dsl_xasprintf("'%s/logs'", d);
    ASSERT_EQ(dsl_dir_open_private(slashed, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, inside);
    free(slashed);
    free(inside);
    ASSERT(chmod(d, 0777) == 0); /* one's own open directory: chmod is the remedy */
    ASSERT_EQ(dsl_dir_open_private(d, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "is writable by group and others (mode 0777)");
    ASSERT_CONTAINS(err, "chmod go-w");
    ASSERT(chmod(d, 0757) == 0);
    ASSERT_EQ(dsl_dir_open_private(d, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "is writable by others (mode 0757)");
    free(d);
    test_tmpdir_remove(t);
}

TEST(private_dir_should_refuse_a_directory_or_link_of_another_user)
{
    char *t = tmpdir(), err[DSL_ERR_LEN] = "";
    if (geteuid() != 0) {
        /* "/" belongs to root */
        ASSERT_EQ(dsl_dir_open_private("/", err), DSL_EUSAGE);
        ASSERT_CONTAINS(err, "directory '/' belongs to another user (uid 0");
    } else {
        char *d = dsl_xasprintf("%s/theirs", t), *l = dsl_xasprintf("%s/link", t);
        char *mine = dsl_xasprintf("%s/mine", t);
        ASSERT(mkdir(d, 0755) == 0);
        ASSERT(chown(d, 65534, 65534) == 0);
        ASSERT_EQ(dsl_dir_open_private(d, err), DSL_EUSAGE);
        ASSERT_CONTAINS(err, "belongs to another user (uid 65534, not 0)");
        /* a link another user planted to a directory of ours is not followed */
        ASSERT(mkdir(mine, 0755) == 0);
        ASSERT(symlink(mine, l) == 0);
        int fd = dsl_dir_open_private(l, err); /* our own link: followed */
        ASSERT(fd >= 0);
        close(fd);
        ASSERT(lchown(l, 65534, 65534) == 0);
        ASSERT_EQ(dsl_dir_open_private(l, err), DSL_EUSAGE);
        ASSERT_CONTAINS(err, "is a symbolic link owned by another user (uid 65534)");
        free(d);
        free(l);
        free(mine);
    }
    test_tmpdir_remove(t);
}

TEST(create_should_never_write_through_a_planted_link)
{
    char *t = tmpdir(), err[DSL_ERR_LEN] = "";
    char *victim = dsl_xasprintf("%s/victim", t), *log = dsl_xasprintf("%s/rank0.log", t);
    char *dangling = dsl_xasprintf("%s/nowhere", t);
    put(victim, "precious");
    ASSERT(symlink(victim, log) == 0);
    int dfd = open(t, O_RDONLY | O_DIRECTORY);
    ASSERT(dfd >= 0);

    /* FAIL: the name is taken, by a link as much as by a file */
    ASSERT_EQ(dsl_file_create(dfd, "rank0.log", log, 0644, DSL_FILE_FAIL, err), -EEXIST);
    ASSERT_CONTAINS(err, "something is already there");
    /* APPEND: a link is refused, not followed */
    ASSERT_EQ(dsl_file_create(dfd, "rank0.log", log, 0644, DSL_FILE_APPEND, err), -ELOOP);
    ASSERT_CONTAINS(err, "is a symbolic link");
    ASSERT_STR_EQ(get(victim), "precious");
    /* REPLACE: the link goes, the new file is ours */
    write_fd(dsl_file_create(dfd, "rank0.log", log, 0644, DSL_FILE_REPLACE, err), "new");
    struct stat st;
    ASSERT(lstat(log, &st) == 0 && S_ISREG(st.st_mode));
    ASSERT_STR_EQ(get(log), "new");
    ASSERT_STR_EQ(get(victim), "precious");
    /* APPEND to our own file appends */
    write_fd(dsl_file_create(dfd, "rank0.log", log, 0644, DSL_FILE_APPEND, err), "+more");
    ASSERT_STR_EQ(get(log), "new+more");
    /* a dangling link is not followed either: nothing is created at its target */
    ASSERT(unlink(log) == 0 && symlink(dangling, log) == 0);
    ASSERT_EQ(dsl_file_create(dfd, "rank0.log", log, 0644, DSL_FILE_FAIL, err), -EEXIST);
    ASSERT(access(dangling, F_OK) < 0);
    /* a hard link to the victim is not appended to */
    ASSERT(unlink(log) == 0 && link(victim, log) == 0);
    ASSERT_EQ(dsl_file_create(dfd, "rank0.log", log, 0644, DSL_FILE_APPEND, err), -EEXIST);
    ASSERT_CONTAINS(err, "not a regular file of yours with one link");
    ASSERT_STR_EQ(get(victim), "precious");
    close(dfd);
    free(victim);
    free(log);
    free(dangling);
    test_tmpdir_remove(t);
}

TEST(temp_files_should_have_fresh_random_names_beside_the_target)
{
    char *t = tmpdir(), err[DSL_ERR_LEN] = "", *a = NULL, *b = NULL;
    char *path = dsl_xasprintf("%s/model.safetensors", t);
    int fa = dsl_file_create_temp(path, 0644, &a, err);
    int fb = dsl_file_create_temp(path, 0644, &b, err);
    ASSERT(fa >= 0 && fb >= 0);
    ASSERT(strcmp(a, b) != 0);
    size_t n = strlen(path);
    for (const char *p = a; p; p = p == a ? b : NULL) {
        ASSERT(strncmp(p, path, n) == 0 && strncmp(p + n, ".tmp.", 5) == 0);
        ASSERT_EQ(strlen(p + n + 5), 16);
        ASSERT_EQ(strspn(p + n + 5, "0123456789abcdef"), 16);
    }
    struct stat st;
    ASSERT(fstat(fa, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0);
    close(fa);
    close(fb);
    free(a);
    free(b);
    /* a missing directory: the message names the file asked for, not the temporary one */
    char *lost = dsl_xasprintf("%s/no/such/dir/out.safetensors", t), *c = NULL;
    ASSERT_EQ(dsl_file_create_temp(lost, 0644, &c, err), -ENOENT);
    ASSERT(c == NULL);
    char *want = dsl_xasprintf("cannot create '%s': No such file or directory", lost);
    ASSERT_STR_EQ(err, want);
    free(want);
    free(lost);
    free(path);
    /* dsl_dir_make_all: parents too, an existing directory is fine, a file is not one */
    char *deep = dsl_xasprintf("%s/x/y/z", t), *f = dsl_xasprintf("%s/x/file", t);
    ASSERT_OK(dsl_dir_make_all(deep));
    ASSERT(stat(deep, &st) == 0 && S_ISDIR(st.st_mode));
    ASSERT_OK(dsl_dir_make_all(deep));
    int ff = open(f, O_CREAT | O_WRONLY, 0600);
    ASSERT(ff >= 0);
    close(ff);
    ASSERT_EQ(dsl_dir_make_all(f), -ENOTDIR);
    char *under = dsl_xasprintf("%s/sub", f);
    ASSERT_EQ(dsl_dir_make_all(under), -ENOTDIR);
    free(under);
    free(deep);
    free(f);
    test_tmpdir_remove(t);
}

TEST(open_regular_should_refuse_a_fifo_at_once_and_other_non_files)
{
    char *t = tmpdir(), err[DSL_ERR_LEN] = "";
    char *fifo = dsl_xasprintf("%s/shard", t), *file = dsl_xasprintf("%s/ok", t);
    size_t size = 0;
    ASSERT(mkfifo(fifo, 0600) == 0);
    alarm(60); /* a hang guard: a blocking open of a FIFO without a writer never returns */
    ASSERT_EQ(dsl_file_open_regular(fifo, &size, err), -EINVAL);
    alarm(0);
    ASSERT_CONTAINS(err, "is not a regular file (a FIFO)");
    ASSERT_CONTAINS(err, fifo);
    ASSERT_EQ(dsl_file_open_regular(t, &size, err), -EINVAL);
    ASSERT_CONTAINS(err, "(a directory)");
    ASSERT_EQ(dsl_file_open_regular("/dev/null", &size, err), -EINVAL);
    ASSERT_CONTAINS(err, "(a device)");
    ASSERT_EQ(dsl_file_open_regular(file, &size, err), -ENOENT);
    put(file, "12345");
    int fd = dsl_file_open_regular(file, &size, err);
    ASSERT(fd >= 0);
    ASSERT_EQ(size, 5);
    ASSERT_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    close(fd);
    free(fifo);
    free(file);
    test_tmpdir_remove(t);
}

TEST_MAIN()
