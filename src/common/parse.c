/* Checked number parsing: the whole string must be a number within range. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dslaunch/common/parse.h"
#include "dslaunch/common/quote.h"
#include "dslaunch/common/banned.h"

int dsl_parse_long(const char *s, long min, long max, long *out)
{
    if (!s || !*s || isspace((unsigned char)*s))
        return -EINVAL;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end != '\0')
        return -EINVAL;
    if (errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

int dsl_parse_int(const char *s, int min, int max, int *out)
{
    long v;
    int r = dsl_parse_long(s, min, max, &v);
    if (r == 0)
        *out = (int)v;
    return r;
}

int dsl_parse_size(const char *s, size_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    unsigned long long mult = 1;
    if (*end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': mult = 1ULL << 10; break;
        case 'M': mult = 1ULL << 20; break;
        case 'G': mult = 1ULL << 30; break;
        case 'T': mult = 1ULL << 40; break;
        case 'P': mult = 1ULL << 50; break;
        case 'E': mult = 1ULL << 60; break;
        default: return -EINVAL;
        }
        end++;
        if (*end == 'B' || *end == 'b' || (*end == 'i' && (end[1] == 'B' || end[1] == 'b')))
            end += (*end == 'i') ? 2 : 1;
        if (*end)
            return -EINVAL;
    }
    if (v > SIZE_MAX / mult)
        return -ERANGE;
    *out = (size_t)(v * mult);
    return 0;
}

int dsl_parse_double(const char *s, double *out)
{
    if (!s || !*s || isspace((unsigned char)*s))
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0' || isnan(v))
        return -EINVAL;
    if ((errno == ERANGE && v != 0.0) || !isfinite(v))
        return -ERANGE;
    *out = v;
    return 0;
}

int dsl_parse_seconds(const char *s, double *out)
{
    if (!s || !*s)
        return -EINVAL;
    size_t n = strlen(s);
    double mult = 1.0;
    char buf[64];
    if (n >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, s, n + 1);
    if (n > 2 && !strcmp(buf + n - 2, "ms")) {
        mult = 0.001;
        buf[n - 2] = '\0';
    } else if (n > 1 && buf[n - 1] == 's') {
        buf[n - 1] = '\0';
    } else if (n > 1 && buf[n - 1] == 'm') {
        mult = 60.0;
        buf[n - 1] = '\0';
    } else if (n > 1 && buf[n - 1] == 'h') {
        mult = 3600.0;
        buf[n - 1] = '\0';
    }
    double v;
    int r = dsl_parse_double(buf, &v);
    if (r < 0)
        return r;
    if (v < 0 || !isfinite(v * mult))
        return -ERANGE;
    *out = v * mult;
    return 0;
}

void dsl_excerpt(char *dst, size_t cap, const char *s, size_t n)
{
    dsl_quote_for_humans(dst, cap < DSL_EXCERPT_LEN ? cap : DSL_EXCERPT_LEN, s, n);
}

double dsl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
