/*
 * Messages for people. Errors go to stderr as "dslaunch: error: ..." (git style:
 * lowercase, subject in quotes, no trailing period); the program name is set once.
 */
#ifndef DSLAUNCH_LOG_H
#define DSLAUNCH_LOG_H

void dsl_log_set_prog(const char *prog);
/** 0 = quiet (errors only), 1 = normal, 2 = verbose. */
void dsl_log_set_level(int level);
int dsl_log_level(void);
/**
 * Send what would go to stderr to fn instead (a line without its newline), until
 * called again with NULL. A forked child that keeps running this program's code must
 * clear it: the sink belongs to its parent.
 */
void dsl_log_set_sink(void (*fn)(void *arg, const char *line), void *arg);

void dsl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void dsl_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void dsl_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void dsl_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/**
 * A phase mark for measuring a launch: with DSLAUNCH_TIMINGS=1 in the environment, one
 * line "dslaunch timing: PROG WHAT SECONDS" on stderr (written directly, never to the
 * sink), SECONDS the wall clock (CLOCK_REALTIME, to the microsecond) so that the marks
 * of the launcher, its agents and a script's own clock line up (bench/launch.sh).
 * Without it: nothing, at the cost of one cached check. what is a fixed word or two.
 */
void dsl_log_mark(const char *what);

#endif
