/*
 * The ranks' progress files on a node: one directory, one naming scheme, and the two
 * ways a file goes away when its agent could not remove it.
 *
 * A file is "dslaunch-<run>-<rank>.<agent pid>.progress" in /dev/shm (else $TMPDIR or
 * /tmp). The agent removes its files when its job ends. When the agent is SIGKILLed,
 * its clean-up process (contain.c) removes the files of its run and agent pid once it
 * has killed what the ranks left; if both die at once, the next agent on the host
 * removes every file whose agent pid names no process. Only regular files of this
 * user are removed, never a link.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "progress_files.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

const char *dsl_progress_files_dir(void)
{
    struct stat st;
    if (access("/dev/shm", W_OK | X_OK) == 0 && stat("/dev/shm", &st) == 0 &&
        S_ISDIR(st.st_mode))
        return "/dev/shm";
    const char *t = getenv("TMPDIR");
    return t && t[0] == '/' ? t : "/tmp";
}

static const char *run_name(const char *run_id)
{
    return run_id && run_id[0] && !strchr(run_id, '/') ? run_id : "run";
}

char *dsl_progress_files_path(const char *run_id, int rank, pid_t agent)
{
    return dsl_xasprintf("%s/dslaunch-%.40s-%d.%d.progress", dsl_progress_files_dir(),
                         run_name(run_id), rank, (int)agent);
}

/* The agent pid of a progress file's name, 0 when it is not one. */
static pid_t agent_of(const char *name)
{
    size_t n = strlen(name);
    if (strncmp(name, "dslaunch-", 9) || n < 18 || strcmp(name + n - 9, ".progress"))
        return 0;
    const char *dot = name + n - 9;
    const char *p = dot;
    while (p > name && p[-1] >= '0' && p[-1] <= '9')
        p--;
    if (p == dot || p[-1] != '.')
        return 0;
    long pid = 0;
    for (const char *q = p; q < dot && pid < (1L << 30); q++)
        pid = pid * 10 + (*q - '0');
    return pid > 0 && pid < (1L << 30) ? (pid_t)pid : 0;
}

static void remove_file(const char *dir, const char *name)
{
    char *path = dsl_xasprintf("%s/%s", dir, name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid())
        unlink(path);
    free(path);
}

void dsl_progress_files_sweep(void)
{
    const char *dir = dsl_progress_files_dir();
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        pid_t pid = agent_of(e->d_name);
        if (pid > 0 && kill(pid, 0) < 0 && errno == ESRCH)
            remove_file(dir, e->d_name);
    }
    closedir(d);
}

void dsl_progress_files_remove(const char *run_id, pid_t agent)
{
    const char *dir = dsl_progress_files_dir();
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "dslaunch-%.40s-", run_name(run_id));
    size_t np = strlen(prefix);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *rank = e->d_name + np;
        /* the run's prefix, then "<rank>." right before the agent pid */
        if (strncmp(e->d_name, prefix, np) || agent_of(e->d_name) != agent ||
            !(*rank >= '0' && *rank <= '9'))
            continue;
        while (*rank >= '0' && *rank <= '9')
            rank++;
        char tail[32];
        snprintf(tail, sizeof(tail), ".%d.progress", (int)agent);
        if (!strcmp(rank, tail))
            remove_file(dir, e->d_name);
    }
    closedir(d);
}
