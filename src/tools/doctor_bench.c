/*
 * The all-reduce of `dslaunch doctor`: the bundled dsbench run as a normal job.
 *
 * Theory of operation. A child `dslaunch` gets the user's launcher options and the
 * dsbench command, so the job goes through exactly the machinery a training job would
 * (transport, probe, MASTER_ADDR, interfaces). Its stdout and stderr are read through
 * non-blocking pipes in one poll() loop until both close; past the deadline the child
 * gets SIGTERM, which it forwards to every rank as it does for ^C, and the pipes then
 * close. dsbench prints only on rank 0, and --no-prefix keeps its lines as they are:
 * '#' lines and the size rows are kept for the report, the "# avg busbw" line is the
 * value. The child dies with doctor (PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dslaunch/tools/doctor.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/plan/plan.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

extern char **environ;

static int read_some(int fd, struct dsl_dynbuf *b)
{
    char buf[8192];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
        if (dsl_dynbuf_add(b, buf, (size_t)n) < 0)
            dsl_dynbuf_init(b, 1u << 20); /* oversized: keep reading, drop it */
        return 1;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 1;
    return 0;
}

static void split_into(struct dsl_strvec *lines, struct dsl_dynbuf *b)
{
    if (dsl_dynbuf_add(b, "", 1) < 0 || !b->buf)
        return;
    char *save = NULL;
    for (char *l = strtok_r(b->buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
        dsl_strvec_push(lines, l);
}

void dsl_doctor_bench_init(struct dsl_doctor_bench *b)
{
    memset(b, 0, sizeof(*b));
    dsl_strvec_init(&b->table);
    dsl_strvec_init(&b->tail);
}

void dsl_doctor_bench_release(struct dsl_doctor_bench *b)
{
    dsl_strvec_release(&b->table);
    dsl_strvec_release(&b->tail);
    free(b->cmdline);
    dsl_doctor_bench_init(b);
}

void dsl_doctor_bench_run(struct dsl_doctor_bench *b, const char *self_exe, char *const *opts,
                          const char *backend)
{
    b->backend = backend;
    char *dir = dsl_xstrdup(self_exe);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    char *bench = dsl_plan_program_name("dsbench", slash ? dir : NULL);
    free(dir);
    struct dsl_strvec argv;
    dsl_strvec_init(&argv);
    dsl_strvec_push(&argv, self_exe);
    for (char *const *o = opts; *o; o++)
        dsl_strvec_push(&argv, *o);
    dsl_strvec_push(&argv, "--no-prefix");
    const char *args[] = {"-b", "1M", "-e", "16M", "-f", "4", "-o", "allreduce",
                          "-w", "2", "-n", "5", "--backend", b->backend, NULL};
    dsl_strvec_push_nodup(&argv, bench);
    dsl_strvec_pushv(&argv, args);
    struct dsl_dynbuf cmd;
    dsl_dynbuf_init(&cmd, 1u << 16);
    for (size_t i = 0; i < argv.nr; i++)
        dsl_dynbuf_addf(&cmd, "%s%s", i ? " " : "", argv.v[i]);
    b->cmdline = dsl_xstrdup(cmd.buf ? cmd.buf : "");
    dsl_dynbuf_release(&cmd);

    struct dsl_proc p;
    struct dsl_spawn_opts so = {.argv = argv.v, .env = environ, .stdin_null = 1,
                                .pdeathsig = SIGTERM};
    char err[DSL_ERR_LEN];
    struct dsl_dynbuf out, errb;
    dsl_dynbuf_init(&out, 1u << 20);
    dsl_dynbuf_init(&errb, 1u << 20);
    b->ran = 1;
    if (dsl_spawn(&p, &so, err) < 0) {
        dsl_strvec_push(&b->tail, err);
        b->code = 127;
        goto out;
    }
    double deadline = dsl_now() + DSL_DOCTOR_BENCH_TIMEOUT;
    int open_out = 1, open_err = 1, termed = 0;
    while (open_out || open_err) {
        struct pollfd pf[2] = {{.fd = open_out ? p.out_fd : -1, .events = POLLIN},
                               {.fd = open_err ? p.err_fd : -1, .events = POLLIN}};
        int pr = poll(pf, 2, 200);
        if (pr > 0 && pf[0].revents)
            open_out = read_some(p.out_fd, &out);
        if (pr > 0 && pf[1].revents)
            open_err = read_some(p.err_fd, &errb);
        if (!termed && dsl_now() > deadline) {
            kill(p.pid, SIGTERM);
            termed = 1;
            dsl_strvec_pushf(&b->tail, "no result within %.0f s: stopped", DSL_DOCTOR_BENCH_TIMEOUT);
        }
    }
    close(p.out_fd);
    close(p.err_fd);
    int status = 0;
    while (waitpid(p.pid, &status, 0) < 0 && errno == EINTR)
        ;
    b->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    struct dsl_strvec lines, elines;
    dsl_strvec_init(&lines);
    dsl_strvec_init(&elines);
    split_into(&lines, &out);
    split_into(&elines, &errb);
    int have = 0;
    for (size_t i = 0; i < lines.nr; i++) {
        const char *l = lines.v[i];
        if (dsl_doctor_parse_busbw(l, &b->busbw))
            have = 1;
        else if (l[0] == ' ' || (l[0] == '#' && l[1] == ' ' && strchr(l, '(') == NULL))
            dsl_strvec_push(&b->table, l);
    }
    if (dsl_log_level() >= 2) /* -v: everything the all-reduce job said */
        for (size_t i = 0; i < elines.nr; i++)
            fprintf(stderr, "allreduce: %s\n", elines.v[i]);
    size_t from = elines.nr > 5 ? elines.nr - 5 : 0;
    for (size_t i = from; i < elines.nr; i++)
        dsl_strvec_push(&b->tail, elines.v[i]);
    /* the first error line says more than the launcher's closing words: it goes last */
    for (size_t i = 0; i < elines.nr; i++)
        if (strstr(elines.v[i], "error:")) {
            dsl_strvec_push(&b->tail, elines.v[i]);
            break;
        }
    b->ok = b->code == 0 && have && !termed;
    dsl_strvec_release(&lines);
    dsl_strvec_release(&elines);
out:
    dsl_dynbuf_release(&out);
    dsl_dynbuf_release(&errb);
    dsl_strvec_release(&argv);
}
