/*
 * What the multi-process tests of the tcp collectives share (comm_mp_test.c,
 * comm_mp_failure_test.c): the ranks' env contract, forking a world of ranks that each
 * run a check and agree on the verdict, buffers from the zero-copy path or malloc, and
 * the data paths chosen through the backend's knobs.
 */
#ifndef DSLAUNCH_TESTS_COMM_MP_H
#define DSLAUNCH_TESTS_COMM_MP_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/net.h"
#include "test.h"

typedef int (*rank_fn)(struct dsl_comm *c, int rank, int world);

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "rank %d: %s:%d: ", g_rank, __FILE__, __LINE__);   \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            return 1;                                                          \
        }                                                                      \
    } while (0)

static int g_rank;
static int g_det; /* the ranks' communicators are deterministic */
/* buffers from dsl_comm_alloc (the zero-copy path); g_mixed: rank 0 keeps malloc */
static int g_shared, g_mixed;

static inline int shared_here(void)
{
    return g_shared && !(g_mixed && g_rank == 0);
}

static inline void *tbuf(struct dsl_comm *c, size_t bytes)
{
    return shared_here() ? dsl_comm_alloc(c, bytes) : malloc(bytes);
}

static inline void tfree(struct dsl_comm *c, void *p)
{
    if (shared_here())
        dsl_comm_free(c, p);
    else
        free(p);
}

/* Is p inside a shared buffer mapping (memfd "dslaunch-buf") of this process? */
static inline int is_shared_mapping(const void *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    uintptr_t a = (uintptr_t)p;
    while (f && !found && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi)
            found = strstr(line, "memfd:dslaunch-buf") != NULL;
    }
    if (f)
        fclose(f);
    return found;
}

/* The env contract of rank rs of a world of ws on this host, the store at port. */
static inline void rank_env(const char *rs, const char *ws, const char *port)
{
    setenv("RANK", rs, 1);
    setenv("LOCAL_RANK", rs, 1);
    setenv("WORLD_SIZE", ws, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    setenv("DSLAUNCH_RUN_ID", "mp-test", 1);
    setenv("DSLAUNCH_RUN_TOKEN", "sekrit", 1);
    setenv("DSLAUNCH_STORE_TIMEOUT", "30", 1);
}

static inline int free_port(void)
{
    int fd = dsl_net_listen("127.0.0.1", 0, 1, NULL);
    int port = dsl_net_local_port(fd);
    close(fd);
    return port;
}

static inline struct dsl_comm *open_rank(int det, char *err)
{
    struct dsl_comm_opts o = {.backend = "tcp", .deterministic = det};
    struct dsl_comm *c = NULL;
    if (dsl_comm_open_env(&c, &o, err) < 0)
        return NULL;
    return c;
}

/* Fork world ranks running fn (expect_kill: rank 1 is expected to die by SIGKILL). */
static inline int run_world(int world, rank_fn fn, int det, const char *timeout,
                            int expect_kill)
{
    char port[16], ws[16];
    snprintf(port, sizeof(port), "%d", free_port());
    snprintf(ws, sizeof(ws), "%d", world);
    pid_t pids[16];
    /* With a rank killed, a survivor must not exit before every survivor has its error:
     * its exit would be a second death for the slower ones to see first (a real job's
     * launcher names the first death itself). Survivors report on done, then wait for
     * the gate to close. */
    int done[2], gate[2];
    if (pipe(done) < 0 || pipe(gate) < 0)
        return 1;
    for (int r = 0; r < world; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            close(done[0]);
            close(gate[1]);
            char rs[16], err[DSL_ERR_LEN] = "";
            snprintf(rs, sizeof(rs), "%d", r);
            rank_env(rs, ws, port);
            setenv("DSLAUNCH_COMM_TIMEOUT", timeout, 1);
            alarm(120); /* a hang is a failure, not a stuck CI job */
            g_rank = r;
            g_det = det;
            struct dsl_comm *c = open_rank(det, err);
            if (!c) {
                fprintf(stderr, "rank %d: open: %s\n", r, err);
                _exit(2);
            }
            int bad = fn(c, r, world);
            if (expect_kill) {
                char b = 1, x;
                if (write(done[1], &b, 1) != 1 || read(gate[0], &x, 1) < 0)
                    bad = 1;
            }
            dsl_comm_close(c);
            _exit(bad ? 1 : 0);
        }
        pids[r] = pid;
    }
    close(done[1]);
    close(gate[0]);
    if (expect_kill) {
        char b;
        for (int k = 0; k < world - 1 && read(done[0], &b, 1) == 1; k++)
            ;
    }
    close(gate[1]); /* every survivor has its error (or one failed): let them go */
    close(done[0]);
    int failed = 0;
    for (int r = 0; r < world; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        int killed = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
        if (expect_kill && r == 1) {
            if (!killed)
                failed = 1;
            continue;
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "rank %d failed (status 0x%x)\n", r, st);
            failed = 1;
        }
    }
    return failed;
}

/* Agree on the verdict: the sum of every rank's error count. */
static inline int agree(struct dsl_comm *c, int bad)
{
    int32_t b = bad, total = -1;
    if (dsl_comm_allreduce(c, &b, &total, 1, DSL_INT32, DSL_SUM) < 0) {
        fprintf(stderr, "rank %d: verdict allreduce: %s\n", g_rank, dsl_comm_last_error(c));
        return 1;
    }
    return total != 0;
}

/* The data paths of the tcp backend, chosen through its environment knobs. */
static inline void use_path(const char *path)
{
    fprintf(stderr, "#   path %s\n", path);
    g_shared = !strcmp(path, "shared") || !strcmp(path, "mixed");
    g_mixed = !strcmp(path, "mixed");
    setenv("DSL_COMM_CMA", strcmp(path, "ring") && strcmp(path, "mesh") ? "1" : "0", 1);
    setenv("DSL_COMM_ALGO", strcmp(path, "mesh") ? "auto" : "mesh", 1);
}

#endif
