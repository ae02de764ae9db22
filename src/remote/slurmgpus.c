/*
 * Whether the Slurm cluster has GPUs (slurmgpus.h). One child, `sinfo -h -o %G`, its
 * stdout on a pipe and its stderr with it (for the reason when it fails), read for at
 * most 10 s and 64 KiB; a sinfo that takes longer (a controller that does not answer)
 * is killed with its process group and the answer is "cannot be told". sinfo prints
 * one line per group of nodes with their gres: "gpu:4", "gpu:a100:8(S:0-1)",
 * "gpu:2,shard:4" or "(null)" for none.
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/remote/emit.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define SINFO_SECONDS 10
#define SINFO_MAX (64 * 1024)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int dsl_slurm_gres_has_gpu(const char *text)
{
    for (const char *p = text; (p = strstr(p, "gpu")); p += 3)
        if (p == text || p[-1] == '\n' || p[-1] == ',')
            return 1;
    return 0;
}

int dsl_slurm_cluster_has_gpus(char *why, size_t cap)
{
    const char *sinfo = getenv("DSLAUNCH_SINFO");
    if (!sinfo || !sinfo[0])
        sinfo = "sinfo";
    char *argv[] = {(char *)sinfo, (char *)"-h", (char *)"-o", (char *)"%G", NULL};
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0) {
        snprintf(why, cap, "cannot create a pipe for sinfo: %s", strerror(errno));
        return -1;
    }
    static const int dfl[] = {SIGPIPE, 0};
    struct dsl_child_opts co = {
        .argv = argv,
        .fd_in = DSL_SPAWN_DEVNULL,
        .fd_out = fds[1],
        .fd_err = fds[1],
        .new_pgroup = 1,
        .pdeathsig = SIGKILL,
        .sigdfl = dfl,
        .report_errors = 1,
    };
    char err[DSL_ERR_LEN];
    pid_t pid;
    int r = dsl_spawn_child(&co, &pid, err);
    close(fds[1]);
    if (r < 0) {
        close(fds[0]);
        snprintf(why, cap, "sinfo could not be run (%s)", err);
        return -1;
    }
    char *buf = dsl_xmalloc(SINFO_MAX + 1);
    size_t len = 0;
    int timed_out = 0;
    double end = now() + SINFO_SECONDS;
    for (;;) {
        double left = end - now();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int n = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            continue;
        ssize_t got = read(fds[0], buf + len, SINFO_MAX - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0 || (len += (size_t)got) >= SINFO_MAX)
            break;
    }
    close(fds[0]);
    if (timed_out)
        kill(-pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    buf[len] = '\0';
    int answer;
    if (timed_out) {
        snprintf(why, cap, "sinfo did not answer within %d s", SINFO_SECONDS);
        answer = -1;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || len == 0) {
        /* its first line says why, as text for a comment: no control characters */
        size_t n = strcspn(buf, "\n");
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
                buf[i] = '?';
        snprintf(why, cap, "sinfo failed%s%.*s", n ? ": " : " without a word",
                 (int)(n > 160 ? 160 : n), buf);
        answer = -1;
    } else if (dsl_slurm_gres_has_gpu(buf)) {
        snprintf(why, cap, "sinfo lists GPUs on the cluster's nodes");
        answer = 1;
    } else {
        snprintf(why, cap, "sinfo lists no GPU on any node of the cluster");
        answer = 0;
    }
    free(buf);
    return answer;
}
