/*
 * The --log-dir files of a run (logdir.h). A run's logs used to be rank<N>.log,
 * replaced by the next run and appended to by restarts with nothing between the
 * attempts; now every attempt has its own file per rank (the restart count, and
 * Slurm's requeue count for a requeued batch job, are in the name, so each file is the
 * rank's output of one attempt byte for byte), and a directory that already holds an
 * earlier run's logs is refused unless --log-dir-overwrite asks to replace them.
 *
 * Only names of this pattern are looked at or removed, with unlinkat (a link is removed,
 * never followed); the directory was checked to be this user's and writable by no one
 * else (dsl_dir_open_private), so nothing in it was planted by another user.
 */
#define _DEFAULT_SOURCE /* DT_DIR */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "logdir.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

char *dsl_logdir_rank_name(int rank, int requeue, int restart)
{
    char rq[32] = "", rs[32] = "";
    if (requeue > 0)
        snprintf(rq, sizeof(rq), ".requeue%d", requeue);
    if (restart > 0)
        snprintf(rs, sizeof(rs), ".restart%d", restart);
    return dsl_xasprintf("rank%d%s%s.log", rank, rq, rs);
}

int dsl_logdir_requeue(void)
{
    const char *job = getenv("SLURM_JOB_ID"), *n = getenv("SLURM_RESTART_COUNT");
    int k;
    if (!job || !job[0] || !n || dsl_parse_int(n, 0, 1 << 30, &k) < 0)
        return 0;
    return k;
}

/* digits at *p (at least one), their value in *v (capped); advances *p */
static int digits(const char **p, long *v)
{
    const char *s = *p;
    *v = 0;
    while (**p >= '0' && **p <= '9') {
        if (*v < 1L << 30)
            *v = *v * 10 + (**p - '0');
        (*p)++;
    }
    return *p > s;
}

/* name is a rank log (rank<N>[.requeue<K>][.restart<J>].log): 1 with *requeue = K */
static int rank_log(const char *name, long *requeue)
{
    const char *p = name;
    long v;
    *requeue = 0;
    if (strncmp(p, "rank", 4))
        return 0;
    p += 4;
    if (!digits(&p, &v))
        return 0;
    if (!strncmp(p, ".requeue", 8)) {
        p += 8;
        if (!digits(&p, requeue))
            return 0;
    }
    if (!strncmp(p, ".restart", 8)) {
        p += 8;
        if (!digits(&p, &v))
            return 0;
    }
    return !strcmp(p, ".log");
}

int dsl_logdir_claim(int dirfd, const char *dir, int requeue, int overwrite, char *err)
{
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return dsl_seterr(err, -errno, "cannot read directory '%s': %s", dir, strerror(errno));
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return dsl_seterr(err, -e, "cannot read directory '%s': %s", dir, strerror(e));
    }
    char first[256] = "";
    size_t n = 0;
    int r = 0;
    for (struct dirent *e; r == 0 && (errno = 0, e = readdir(d));) {
        long k;
        if (!rank_log(e->d_name, &k) || (!overwrite && requeue > 0 && k != requeue))
            continue;
        if (overwrite) {
            if (unlinkat(dirfd, e->d_name, 0) < 0 && errno != ENOENT)
                r = dsl_seterr(err, -errno, "--log-dir-overwrite: cannot remove '%s/%s': %s",
                               dir, e->d_name, strerror(errno));
            continue;
        }
        /* the smallest name, so that the message does not depend on readdir's order */
        if (!n++ || strcmp(e->d_name, first) < 0)
            snprintf(first, sizeof(first), "%s", e->d_name);
    }
    if (r == 0 && errno)
        r = dsl_seterr(err, -errno, "cannot read directory '%s': %s", dir, strerror(errno));
    closedir(d);
    if (r < 0 || n == 0)
        return r;
    char more[48] = "";
    if (n > 1)
        snprintf(more, sizeof(more), " and %zu more", n - 1);
    return dsl_seterr(err, DSL_EUSAGE, "directory '%s' holds the logs of an earlier run "
                      "('%s'%s), which dslaunch does not overwrite: give another --log-dir, "
                      "move them away, or add --log-dir-overwrite to replace them", dir,
                      first, more);
}
