/*
 * Messages for people: errors and warnings on stderr, rank-0 chatter on stdout. While
 * a sink is set (the launcher's job, whose stderr must never block it), the stderr
 * messages go to the sink instead, one whole line at a time.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/common/log.h"
#include "dslaunch/common/quote.h"
#include "dslaunch/common/banned.h"

static const char *prog = "dslaunch";
static int level = 1;
static void (*sink)(void *arg, const char *line);
static void *sink_arg;

void dsl_log_set_prog(const char *p) { prog = p; }
void dsl_log_set_level(int l) { level = l; }
int dsl_log_level(void) { return level; }

void dsl_log_set_sink(void (*fn)(void *arg, const char *line), void *arg)
{
    sink = fn;
    sink_arg = arg;
}

static void vlog(FILE *f, const char *kind, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
static void vlog(FILE *f, const char *kind, const char *fmt, va_list ap)
{
    char line[4096];
    int n = snprintf(line, sizeof(line), "%s: %s", prog, kind);
    if (n < 0 || (size_t)n >= sizeof(line))
        n = 0;
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    /* one line, whatever the message quotes: no control character reaches the terminal */
    char safe[sizeof(line)];
    dsl_quote_for_humans(safe, sizeof(safe), line, strlen(line));
    if (sink && f == stderr) {
        sink(sink_arg, safe);
        return;
    }
    /* one fputs per line keeps lines from different processes whole */
    fprintf(f, "%s\n", safe);
    fflush(f);
}

void dsl_log_mark(const char *what)
{
    static int on = -1; /* -1: not looked up yet */
    if (on < 0) {
        const char *v = getenv("DSLAUNCH_TIMINGS");
        on = v && v[0] && strcmp(v, "0") != 0;
    }
    if (!on)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char line[256];
    int n = snprintf(line, sizeof(line), "dslaunch timing: %s %s %lld.%06ld\n", prog, what,
                     (long long)ts.tv_sec, ts.tv_nsec / 1000);
    if (n > 0 && (size_t)n < sizeof(line)) {
        ssize_t w = write(2, line, (size_t)n); /* one write: lines of processes stay whole */
        (void)w;
    }
}

void dsl_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, "error: ", fmt, ap);
    va_end(ap);
}

void dsl_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, "warning: ", fmt, ap);
    va_end(ap);
}

void dsl_info(const char *fmt, ...)
{
    if (level < 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, "", fmt, ap);
    va_end(ap);
}

void dsl_debug(const char *fmt, ...)
{
    if (level < 2)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, "debug: ", fmt, ap);
    va_end(ap);
}

