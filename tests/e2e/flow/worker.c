/*
 * A fake worker for the flow tests: what a rank does is chosen by argv[1].
 *
 *   env                 print the env contract, one VAR=value per line, to stdout
 *   args ARG...         print each argument hex-encoded on its own line ("arg <hex>")
 *   exit CODE [DELAY]   exit with CODE after DELAY seconds (rank-selectable: see below)
 *   sleep SECONDS       sleep, then exit 0
 *   kill SIG [DELAY]    kill itself with signal SIG
 *   ignore-term S       ignore SIGTERM, sleep S seconds
 *   grandchild S        start a child (same process group) that writes its own pid to
 *                       $FLOW_PIDFILE.<rank>.gc and sleeps S; once that file is written,
 *                       write own pid to $FLOW_PIDFILE.<rank>, then sleep S. The child
 *                       writes the .gc file itself, so the file exists only if it ran.
 *   stderr N            print N numbered lines to stderr, then exit 5
 *   progress            write '\r'-updated progress, then a final line
 *   pidfile S           write own pid to $FLOW_PIDFILE.<rank>, then sleep S
 *   print N S           print N numbered stdout lines ("out <rank> <i> ...") over about
 *                       S seconds, then write own pid to $FLOW_PIDFILE.<rank>; N = 0
 *                       prints forever
 *   on-signal CODE D    write own pid to $FLOW_PIDFILE.<rank>, wait for SIGINT, SIGTERM
 *                       or SIGHUP, then take D seconds (a checkpoint saved on the
 *                       signal), write $FLOW_PIDFILE.<rank>.done and exit CODE
 *   oom MB              allocate and touch MB MiB, 1 MiB at a time, then exit 0 (past
 *                       a memory limit the OOM killer ends it first)
 *   hold MB S           allocate and touch MB MiB, start 4 threads that sleep, write own
 *                       pid to $FLOW_PIDFILE.<rank>, then sleep S: a multi-threaded process
 *                       that takes a while to die (its last thread frees the memory), as
 *                       a trainer does
 *
 * Prefixes, which run before the command and may be combined:
 *   only R CMD ...      run CMD on rank R and "sleep 600" on the others, so tests can
 *                       make one rank fail while its siblings wait to be torn down
 *   descend CMD ...     first leave two processes behind that escape the rank's process
 *                       group and session, as `setsid sleep &` and a daemon do: a child
 *                       that calls setsid() (keeps the rank's stdout and stderr), and a
 *                       double-fork daemon (setsid, fork, the middle exits; stdio on
 *                       /dev/null; ignores SIGTERM, so only SIGKILL ends it). Each writes
 *                       its own pid to $FLOW_PIDFILE.<rank>.sid or .dmn and sleeps 600 s;
 *                       once both files are written, $FLOW_PIDFILE.<rank>.ready is, with
 *                       the job's DSLAUNCH_RUN_ID in it
 *   await R CMD ...     wait (at most 30 s) for $FLOW_PIDFILE.R.ready, then run CMD
 *
 * With FLOW_RUNIDS set, every rank first appends its DSLAUNCH_RUN_ID as a line to that
 * file, so a test can count what the job left behind (tests/e2e/flow/census.sh).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static int rank(void)
{
    const char *r = getenv("RANK");
    return r ? (int)strtol(r, NULL, 10) : -1;
}

/* append pid to $FLOW_PIDFILE.<rank><suffix> */
static void write_pidfile_as(const char *suffix, pid_t pid)
{
    const char *base = getenv("FLOW_PIDFILE");
    if (!base)
        return;
    char path[4096];
    snprintf(path, sizeof(path), "%s.%d%s", base, rank(), suffix);
    FILE *f = fopen(path, "a");
    if (f) {
        fprintf(f, "%d\n", (int)pid);
        fclose(f);
    }
}

static void write_pidfile(pid_t pid)
{
    write_pidfile_as("", pid);
}

/* a thread of "hold": sleeps until the process ends */
static void *sleeper(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

static volatile sig_atomic_t got_stop;

static void on_stop(int sig)
{
    got_stop = sig;
}

/* "descend": a setsid child and a double-fork daemon, both still running on return. */
static int descend(void)
{
    int up[2];
    if (pipe(up) != 0)
        return -1;
    pid_t c = fork();
    if (c < 0)
        return -1;
    if (c == 0) { /* `setsid sleep 600 &` */
        close(up[0]);
        setsid();
        write_pidfile_as(".sid", getpid());
        close(up[1]);
        nap(600);
        _exit(0);
    }
    pid_t mid = fork();
    if (mid < 0)
        return -1;
    if (mid == 0) { /* the daemon's first fork: new session, fork again, leave */
        close(up[0]);
        setsid();
        pid_t d = fork();
        if (d == 0) {
            signal(SIGTERM, SIG_IGN);
            int nul = open("/dev/null", O_RDWR);
            if (nul >= 0) {
                dup2(nul, 0);
                dup2(nul, 1);
                dup2(nul, 2);
                if (nul > 2)
                    close(nul);
            }
            write_pidfile_as(".dmn", getpid());
            close(up[1]);
            nap(600);
            _exit(0);
        }
        _exit(d < 0 ? 1 : 0);
    }
    close(up[1]);
    waitpid(mid, NULL, 0);
    char b;
    while (read(up[0], &b, 1) < 0 && errno == EINTR) /* EOF once both files are written */
        ;
    close(up[0]);
    const char *base = getenv("FLOW_PIDFILE");
    if (base) {
        char path[4096];
        snprintf(path, sizeof(path), "%s.%d.ready", base, rank());
        FILE *f = fopen(path, "w");
        if (f) {
            const char *id = getenv("DSLAUNCH_RUN_ID");
            fprintf(f, "%s\n", id ? id : "");
            fclose(f);
        }
    }
    return 0;
}

/* "await R": wait for rank R's descendants. */
static void await_rank(int r)
{
    const char *base = getenv("FLOW_PIDFILE");
    char path[4096];
    snprintf(path, sizeof(path), "%s.%d.ready", base ? base : "", r);
    struct stat st;
    for (int i = 0; i < 3000 && stat(path, &st) != 0; i++)
        nap(0.01);
}

/* one line, one write to an O_APPEND file: ranks never interleave */
static void note_run_id(void)
{
    const char *path = getenv("FLOW_RUNIDS"), *id = getenv("DSLAUNCH_RUN_ID");
    if (!path || !id)
        return;
    char line[256];
    int n = snprintf(line, sizeof(line), "%s\n", id);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || n <= 0 || (size_t)n >= sizeof(line)) {
        if (fd >= 0)
            close(fd);
        return;
    }
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    note_run_id();
    for (;;) {
        if (!strcmp(argv[1], "only") && argc >= 4) {
            if (rank() != (int)strtol(argv[2], NULL, 10)) {
                nap(600);
                return 0;
            }
            argv += 2;
            argc -= 2;
        } else if (!strcmp(argv[1], "descend") && argc >= 3) {
            if (descend() < 0)
                return 3;
            argv += 1;
            argc -= 1;
        } else if (!strcmp(argv[1], "await") && argc >= 4) {
            await_rank((int)strtol(argv[2], NULL, 10));
            argv += 2;
            argc -= 2;
        } else {
            break;
        }
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "env")) {
        static const char *const vars[] = {
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_SIZE", "NODE_RANK",
            "GROUP_RANK", "CROSS_RANK", "NNODES", "CROSS_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "CUDA_VISIBLE_DEVICES", "DSLAUNCH_RUN_ID", "DSLAUNCH_RUN_TOKEN",
            "DSLAUNCH_RESTART_COUNT", "OMP_NUM_THREADS", "NCCL_SOCKET_IFNAME",
            "GLOO_SOCKET_IFNAME", "NCCL_DEBUG", "FLOW_PRIVATE", "FLOW_EXPORTED", NULL};
        for (int i = 0; vars[i]; i++) {
            const char *v = getenv(vars[i]);
            printf("%s=%s\n", vars[i], v ? v : "<unset>");
        }
        return 0;
    }
    if (!strcmp(cmd, "args")) {
        for (int i = 2; i < argc; i++) {
            printf("arg ");
            for (const unsigned char *p = (const unsigned char *)argv[i]; *p; p++)
                printf("%02x", *p);
            printf("\n");
        }
        return 0;
    }
    if (!strcmp(cmd, "exit") && argc >= 3) {
        if (argc >= 4)
            nap(strtod(argv[3], NULL));
        fprintf(stderr, "rank %d exiting with %s\n", rank(), argv[2]);
        return (int)strtol(argv[2], NULL, 10);
    }
    if (!strcmp(cmd, "sleep") && argc >= 3) {
        nap(strtod(argv[2], NULL));
        return 0;
    }
    if (!strcmp(cmd, "kill") && argc >= 3) {
        if (argc >= 4)
            nap(strtod(argv[3], NULL));
        raise((int)strtol(argv[2], NULL, 10));
        return 99;
    }
    if (!strcmp(cmd, "ignore-term") && argc >= 3) {
        signal(SIGTERM, SIG_IGN);
        write_pidfile(getpid());
        nap(strtod(argv[2], NULL));
        return 0;
    }
    if (!strcmp(cmd, "pidfile") && argc >= 3) {
        write_pidfile(getpid());
        nap(strtod(argv[2], NULL));
        return 0;
    }
    if (!strcmp(cmd, "grandchild") && argc >= 3) {
        /* The grandchild closes its end of the pipe once its pid file is written; the
         * rank writes its own pid file only after that, so a test that sees the rank's
         * file also sees the grandchild's, if there is a grandchild. */
        int up[2];
        if (pipe(up) != 0)
            return 3;
        pid_t c = fork();
        if (c < 0)
            return 3;
        if (c == 0) {
            close(up[0]);
            write_pidfile_as(".gc", getpid());
            close(up[1]);
            nap(strtod(argv[2], NULL));
            _exit(0);
        }
        close(up[1]);
        char b;
        while (read(up[0], &b, 1) < 0 && errno == EINTR)
            ;
        close(up[0]);
        write_pidfile(getpid());
        nap(strtod(argv[2], NULL));
        return 0;
    }
    if (!strcmp(cmd, "stderr") && argc >= 3) {
        int n = (int)strtol(argv[2], NULL, 10);
        for (int i = 1; i <= n; i++)
            fprintf(stderr, "problem line %d\n", i);
        return 5;
    }
    if (!strcmp(cmd, "progress")) {
        for (int i = 0; i <= 100; i += 10) {
            printf("\rprogress %3d%%", i);
            fflush(stdout);
            nap(0.01);
        }
        printf("\ndone\n");
        return 0;
    }
    if (!strcmp(cmd, "print") && argc >= 4) {
        long n = strtol(argv[2], NULL, 10);
        double secs = strtod(argv[3], NULL);
        long batch = n > 0 && secs > 0 ? n / (long)(secs * 20 + 1) + 1 : 1000;
        for (long i = 1; n == 0 || i <= n; i++) {
            printf("out %d %ld the quick brown fox jumps over the lazy dog\n", rank(), i);
            if (i % batch == 0) {
                fflush(stdout);
                if (n > 0 && secs > 0)
                    nap(0.05);
            }
        }
        fflush(stdout);
        write_pidfile(getpid());
        return 0;
    }
    if (!strcmp(cmd, "on-signal") && argc >= 4) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_stop;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        write_pidfile(getpid());
        while (!got_stop)
            nap(0.02);
        nap(strtod(argv[3], NULL));
        write_pidfile_as(".done", getpid());
        return (int)strtol(argv[2], NULL, 10);
    }
    if ((!strcmp(cmd, "oom") && argc >= 3) || (!strcmp(cmd, "hold") && argc >= 4)) {
        static void *held; /* a chain of the chunks: reachable, so no leak report */
        long mb = strtol(argv[2], NULL, 10);
        for (long i = 0; i < mb; i++) {
            char *p = malloc(1 << 20);
            if (!p)
                return 4;
            memset(p, (int)(i & 0x7f) + 1, 1 << 20); /* touched: really in use */
            memcpy(p, &held, sizeof(held));
            held = p;
        }
        if (!strcmp(cmd, "hold")) {
            for (int t = 0; t < 4; t++) {
                pthread_t th;
                if (pthread_create(&th, NULL, sleeper, NULL) != 0)
                    return 4;
            }
            write_pidfile(getpid());
            nap(strtod(argv[3], NULL));
        }
        return 0;
    }
    fprintf(stderr, "worker: unknown command '%s'\n", cmd);
    return 2;
}
