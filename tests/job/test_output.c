/*
 * Unit tests of the launcher's console queue (src/job/output.c) on real pipes: it never
 * blocks on a reader that does not read, drops whole lines past its budget and counts
 * them, leaves the fd's flags alone, reports a reader gone (EPIPE), and keeps stdout
 * and stderr in order when they are the same pipe. An alarm turns a blocked write into
 * a failure instead of a hung test.
 */
#define _GNU_SOURCE /* F_SETPIPE_SZ */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "job/output.h"
#include "test.h"

static void guard(void)
{
    signal(SIGPIPE, SIG_IGN);
    signal(SIGALRM, SIG_DFL);
    alarm(60); /* a write that blocks would hang here: fail instead */
}

/* A pipe p under the guard. */
static void guarded_pipe(int p[2])
{
    guard();
    ASSERT_OK(pipe(p));
}

/* o on a guarded pipe p (stdout alone) with budget bytes. */
static void open_on_pipe(struct dsl_output *o, int p[2], size_t budget)
{
    guarded_pipe(p);
    dsl_output_open(o, p[1], -1, budget);
}

/* In a forked reader: close every write end, the queue's own reopen too, or no EOF. */
static void close_writers(struct dsl_output *o, int fd)
{
    for (int i = 0; i < o->ndest; i++)
        if (o->dest[i].own)
            close(o->dest[i].fd);
    close(fd);
}

/* Read everything from fd until EOF into a new string. */
static char *slurp(int fd, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    for (;;) {
        if (n == cap)
            b = realloc(b, (cap *= 2) + 1);
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    b[n] = '\0';
    *len = n;
    return b;
}

/* The lines in text are "<tag> N" with N increasing: returns how many there are. */
static long check_lines(const char *text, const char *tag)
{
    long count = 0, last = -1;
    size_t tl = strlen(tag);
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        ASSERT(nl != NULL); /* never a partial line at the end */
        ASSERT(strncmp(p, tag, tl) == 0 && p[tl] == ' ');
        long v = strtol(p + tl + 1, NULL, 10);
        ASSERT(v > last);
        last = v;
        count++;
        p = nl + 1;
    }
    return count;
}

/* A reader at last, in a child: everything o queued on the pipe p arrives, in order, in
 * whole lines tagged tag, and with the dropped ones makes total; o is closed, and so is
 * extra, another writer of the pipe (-1: none). */
static void expect_read_back(struct dsl_output *o, int p[2], int extra, const char *tag,
                             long dropped, long total)
{
    pid_t c = fork();
    if (c == 0) {
        close_writers(o, p[1]);
        if (extra >= 0)
            close(extra);
        size_t n;
        char *all = slurp(p[0], &n);
        _exit(check_lines(all, tag) + dropped == total ? 0 : 1);
    }
    close(p[0]);
    dsl_output_close(o);
    close(p[1]);
    if (extra >= 0)
        close(extra);
    int st;
    ASSERT_EQ(waitpid(c, &st, 0), c);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    alarm(0);
}

TEST(an_unread_pipe_should_never_block_and_whole_lines_past_the_budget_are_dropped)
{
    int p[2];
    guarded_pipe(p);
    int flags = fcntl(p[1], F_GETFL);
    struct dsl_output o;
    dsl_output_open(&o, p[1], -1, 256 * 1024);
    ASSERT_EQ(o.ndest, 2);
    ASSERT_EQ(o.dest[1].how, DSL_OUTPUT_DISCARD);
    const long total = 100000;
    long dropped = 0;
    char line[64];
    for (long i = 0; i < total; i++) {
        snprintf(line, sizeof(line), "%ld padding padding padding", i);
        dropped += dsl_output_line(&o, 1, "[rank 0] ", line);
        if (i % 100 == 0)
            dsl_output_flush(&o);
    }
    ASSERT(dropped > 0);
    ASSERT_EQ(o.dest[0].dropped, dropped);
    ASSERT(dsl_output_queued(&o) <= 256 * 1024);
    ASSERT_EQ(fcntl(p[1], F_GETFL), flags); /* the shared description is untouched */
    expect_read_back(&o, p, -1, "[rank 0]", dropped, total);
}

TEST(the_poll_fallback_should_not_block_either)
{
    int p[2];
    struct dsl_output o;
    open_on_pipe(&o, p, 64 * 1024);
    /* as without /proc: the fd itself, poll(POLLOUT) and at most PIPE_BUF per write */
    if (o.dest[0].own)
        close(o.dest[0].fd);
    o.dest[0].own = 0;
    o.dest[0].fd = p[1];
    o.dest[0].how = DSL_OUTPUT_POLL;
    char line[64];
    long dropped = 0;
    for (long i = 0; i < 50000; i++) {
        snprintf(line, sizeof(line), "%ld", i);
        dropped += dsl_output_line(&o, 1, "x ", line);
        dsl_output_flush(&o);
    }
    ASSERT(dropped > 0);
    ASSERT_EQ(fcntl(p[1], F_GETFL) & O_NONBLOCK, 0);
    expect_read_back(&o, p, -1, "x", dropped, 50000);
}

TEST(a_budget_of_zero_should_pass_what_the_reader_takes_and_drop_the_rest)
{
    int p[2];
    struct dsl_output o;
    open_on_pipe(&o, p, 0);
    long dropped = 0, total = 20000;
    char line[64];
    for (long i = 0; i < total; i++) {
        snprintf(line, sizeof(line), "%ld", i);
        dropped += dsl_output_line(&o, 1, "z ", line);
        dsl_output_flush(&o);
    }
    ASSERT(dropped > 0 && dropped < total);
    expect_read_back(&o, p, -1, "z", dropped, total);
}

TEST(a_reader_gone_should_be_reported_and_the_queue_discarded)
{
    int p[2];
    struct dsl_output o;
    open_on_pipe(&o, p, 1 << 20);
    close(p[0]);
    ASSERT_EQ(dsl_output_line(&o, 1, "", "nobody reads this"), 0);
    dsl_output_flush(&o);
    ASSERT_EQ(o.reader_gone, 1);
    ASSERT_EQ(o.dest[0].broken, -EPIPE);
    ASSERT_EQ(dsl_output_queued(&o), 0);
    ASSERT_EQ(dsl_output_line(&o, 1, "", "discarded"), 0); /* not counted as dropped */
    ASSERT_EQ(o.dest[0].dropped, 0);
    dsl_output_close(&o);
    close(p[1]);
    alarm(0);
}

TEST(stdout_and_stderr_on_one_pipe_should_share_one_queue_in_order)
{
    int p[2];
    guarded_pipe(p);
    ASSERT_OK(fcntl(p[1], F_SETPIPE_SZ, 4096));
    struct dsl_output o;
    int dup_fd = dup(p[1]);
    dsl_output_open(&o, p[1], dup_fd, 1 << 20);
    ASSERT_EQ(o.ndest, 1);
    char line[64];
    for (long i = 0; i < 2000; i++) {
        snprintf(line, sizeof(line), "%ld", i);
        ASSERT_EQ(dsl_output_line(&o, i % 2 ? 2 : 1, "s ", line), 0);
        dsl_output_flush(&o);
    }
    dsl_output_text(&o, 2, "s 2000 the launcher's own text, outside the budget\n");
    expect_read_back(&o, p, dup_fd, "s", 0, 2001);
}

TEST(a_regular_file_should_be_written_at_once)
{
    guard();
    char path[] = "/tmp/dsl_test_output.XXXXXX";
    int fd = mkstemp(path);
    ASSERT_OK(fd);
    unlink(path);
    struct dsl_output o;
    dsl_output_open(&o, fd, -1, 16);
    ASSERT_EQ(o.dest[0].how, DSL_OUTPUT_BLOCKING);
    ASSERT_EQ(dsl_output_line(&o, 1, "[rank 1] ", "short"), 0);
    ASSERT_EQ(dsl_output_line(&o, 1, "[rank 1] ", "longer than the budget"), 0);
    dsl_output_flush(&o);
    ASSERT_EQ(dsl_output_queued(&o), 0);
    char buf[64] = "";
    ASSERT_EQ(pread(fd, buf, sizeof(buf) - 1, 0), 47);
    ASSERT_STR_EQ(buf, "[rank 1] short\n[rank 1] longer than the budget\n");
    dsl_output_close(&o);
    close(fd);
    alarm(0);
}

TEST_MAIN()
