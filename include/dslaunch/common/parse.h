/*
 * Checked number parsing (never atoi): the whole string must be a number in range.
 */
#ifndef DSLAUNCH_PARSE_H
#define DSLAUNCH_PARSE_H

#include <stddef.h>

/** Parse a base-10 integer in [min, max]. Returns 0 or -EINVAL / -ERANGE. */
int dsl_parse_long(const char *s, long min, long max, long *out);
int dsl_parse_int(const char *s, int min, int max, int *out);
/** Parse a size with an optional K/M/G/T/P/E suffix (powers of 1024), e.g. "512M". */
int dsl_parse_size(const char *s, size_t *out);
/** Parse a finite double. */
int dsl_parse_double(const char *s, double *out);
/** Parse a duration in seconds ("30", "2.5", "500ms", "2m"). */
int dsl_parse_seconds(const char *s, double *out);

/** Room for a dsl_excerpt() of any input, with its terminating NUL. */
#define DSL_EXCERPT_LEN 88
/**
 * Copy the first n bytes of s into dst (cap bytes) for an error message, escaped by
 * dsl_quote_for_humans() (quote.h: "\x1b", "\n"...) and cut with "..." past
 * DSL_EXCERPT_LEN bytes. Always NUL-terminates.
 */
void dsl_excerpt(char *dst, size_t cap, const char *s, size_t n);

/** Monotonic clock in seconds. */
double dsl_now(void);

#endif
