/*
 * The table-driven command-line parser (opt.h). One pass over argv, left to right:
 * each word is "--", a long option, a short option, or a word that is not an option
 * (which ends the options with DSL_OPT_STOP_AT_ARG, and is collected otherwise). A
 * value is taken from "=value", the rest of a short option's word, or the next word.
 * Nothing is global and nothing is kept between calls.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

static const struct dsl_opt *find_long(const struct dsl_opt_parser *p, const char *name,
                                       size_t len)
{
    for (size_t i = 0; i < p->nopts; i++) {
        const char *n = p->opts[i].name;
        if (!n || strlen(n) != len)
            continue;
        size_t k = 0;
        while (k < len && (name[k] == '-' ? '_' : name[k]) == n[k])
            k++;
        if (k == len)
            return &p->opts[i];
    }
    return NULL;
}

/* The edit distance between a typed name and an option's (insertions, deletions,
 * substitutions and swaps of neighbours each cost 1; '-' and '_' are the same), capped
 * at cap + 1 so that long words cost no more than short ones. */
static size_t name_distance(const char *a, size_t la, const char *b, size_t cap)
{
    size_t lb = strlen(b);
    if (la > 47 || lb > 47)
        return cap + 1;
    if ((la > lb ? la - lb : lb - la) > cap)
        return cap + 1;
    size_t d[48][48];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            char ca = a[i - 1] == '-' ? '_' : a[i - 1];
            size_t best = d[i - 1][j - 1] + (ca != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == b[j - 2] &&
                (a[i - 2] == '-' ? '_' : a[i - 2]) == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb] > cap ? cap + 1 : d[la][lb];
}

/*
 * For an unknown long option: the visible option nearest to what was typed, when one is
 * near enough (one edit for names up to 4 characters, two up to 8, three beyond) and
 * no other is as near, written in the typed spelling ("--num-gpu" -> "--num-gpus").
 * Empty when there is none.
 */
static void did_you_mean(const struct dsl_opt_parser *p, const char *name, size_t len,
                         char *out, size_t cap)
{
    size_t limit = len <= 4 ? 1 : len <= 8 ? 2 : 3, best = limit + 1;
    const struct dsl_opt *pick = NULL;
    int tie = 0;
    out[0] = '\0';
    for (size_t i = 0; i < p->nopts; i++) {
        const struct dsl_opt *d = &p->opts[i];
        if (!d->name || !d->help)
            continue;
        size_t k = name_distance(name, len, d->name, limit);
        if (k < best) {
            best = k;
            pick = d;
            tie = 0;
        } else if (k == best && pick) {
            tie = 1;
        }
    }
    if (!pick || tie || cap < 8)
        return;
    int dashes = memchr(name, '-', len) != NULL;
    size_t n = (size_t)snprintf(out, cap, "%s", pick->name);
    for (size_t i = 0; dashes && i < n && i < cap; i++)
        out[i] = out[i] == '_' ? '-' : out[i];
}

static const struct dsl_opt *find_short(const struct dsl_opt_parser *p, char c)
{
    for (size_t i = 0; i < p->nopts; i++)
        if (p->opts[i].short_name && p->opts[i].short_name == c)
            return &p->opts[i];
    return NULL;
}

static int takes_value(const struct dsl_opt *d)
{
    return d->kind != DSL_OPT_FLAG && d->kind != DSL_OPT_SET &&
           !(d->kind == DSL_OPT_CALL && !d->arg);
}

/* SIZE and SECONDS entries with min = max = 0 take any value their parser accepts */
static int bounded(const struct dsl_opt *d)
{
    return d->min != 0 || d->max != 0;
}

void dsl_opt_format_size(char *buf, size_t cap, size_t v)
{
    static const char units[] = "KMGTPE";
    int u = -1;
    while (v >= 1024 && v % 1024 == 0 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, cap, "%zu", v);
    else
        snprintf(buf, cap, "%zu%c", v, units[u]);
}

static int apply(const struct dsl_opt *d, void *target, const char *val, char *err)
{
    char *field = (char *)target + d->offset;
    switch (d->kind) {
    case DSL_OPT_FLAG:
        *(int *)field = 1;
        return 0;
    case DSL_OPT_SET:
        *(int *)field = d->tag;
        return 0;
    case DSL_OPT_STRING:
        free(*(char **)field);
        *(char **)field = dsl_xstrdup(val);
        return 0;
    case DSL_OPT_INT: {
        long v;
        int r = dsl_parse_long(val, d->min, d->max, &v);
        if (r == -ERANGE)
            return dsl_seterr(err, DSL_EUSAGE,
                              "option '--%s' is out of range: allowed %ld..%ld, got '%s'",
                              d->name, d->min, d->max, val);
        if (r < 0)
            return dsl_seterr(err, DSL_EUSAGE,
                              "option '--%s' needs an integer from %ld to %ld, not '%s'",
                              d->name, d->min, d->max, val);
        *(int *)field = (int)v;
        return 0;
    }
    case DSL_OPT_SIZE: {
        size_t v;
        int r = dsl_parse_size(val, &v);
        if (r == -EINVAL)
            return dsl_seterr(err, DSL_EUSAGE,
                              "option '--%s' needs a size in bytes (e.g. 4096, 64K, 1M), "
                              "not '%s'", d->name, val);
        if (r < 0 || (bounded(d) && (v < (size_t)d->min || v > (size_t)d->max))) {
            char lo[32], hi[32];
            dsl_opt_format_size(lo, sizeof(lo), (size_t)d->min);
            dsl_opt_format_size(hi, sizeof(hi), bounded(d) ? (size_t)d->max : SIZE_MAX);
            return dsl_seterr(err, DSL_EUSAGE,
                              "option '--%s' is out of range: allowed %s..%s bytes, got '%s'",
                              d->name, lo, hi, val);
        }
        *(size_t *)field = v;
        return 0;
    }
    case DSL_OPT_SECONDS: {
        double v;
        int r = dsl_parse_seconds(val, &v);
        if (r == -EINVAL)
            return dsl_seterr(err, DSL_EUSAGE,
                              "option '--%s' needs a duration in seconds (e.g. 30, 2.5, "
                              "500ms, 2m), not '%s'", d->name, val);
        if (r < 0 && !bounded(d))
            return dsl_seterr(err, DSL_EUSAGE,
                              "option '--%s' is out of range: a duration is finite and not "
                              "negative, got '%s'", d->name, val);
        if (r < 0 || (bounded(d) && (v < (double)d->min || v > (double)d->max)))
            return dsl_seterr(err, DSL_EUSAGE,
                              "option '--%s' is out of range: allowed %ld..%ld seconds, got '%s'",
                              d->name, d->min, d->max, val);
        *(double *)field = v;
        return 0;
    }
    case DSL_OPT_LIST:
        dsl_strvec_push((struct dsl_strvec *)field, val);
        return 0;
    case DSL_OPT_CALL:
        return d->fn(target, d, val, err);
    }
    return dsl_seterr(err, DSL_EUSAGE, "option '--%s' has no kind", d->name);
}

/* the words from argv[i] on, which are not options, to rest */
static int rest_from(const struct dsl_opt_parser *p, int i, int argc, char **argv,
                     struct dsl_strvec *rest, char *err)
{
    if (i < argc && !rest)
        return dsl_seterr(err, DSL_EUSAGE, "unexpected argument '%s' (see %s --help)",
                          argv[i], p->prog);
    for (; i < argc; i++)
        dsl_strvec_push(rest, argv[i]);
    return 0;
}

const struct dsl_opt *dsl_opt_at(const struct dsl_opt_parser *p, int argc, char **argv, int i,
                                 int *words)
{
    const char *a = argv[i];
    const struct dsl_opt *d;
    int inline_val;
    *words = 0;
    if (a[0] != '-' || a[1] == '\0' || !strcmp(a, "--"))
        return NULL;
    if (a[1] == '-') {
        const char *eq = strchr(a + 2, '=');
        d = find_long(p, a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
        inline_val = eq != NULL;
    } else {
        d = find_short(p, a[1]);
        inline_val = a[2] != '\0';
    }
    if (!d)
        return NULL;
    *words = takes_value(d) && !inline_val && i + 1 < argc ? 2 : 1;
    return d;
}

int dsl_opt_parse(const struct dsl_opt_parser *p, void *target, int argc, char **argv,
                  struct dsl_strvec *rest, char *err)
{
    int keep = (p->flags & DSL_OPT_KEEP_UNKNOWN) && rest;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            if (keep)
                dsl_strvec_push(rest, a);
            return rest_from(p, i + 1, argc, argv, rest, err);
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (p->flags & DSL_OPT_STOP_AT_ARG)
                return rest_from(p, i, argc, argv, rest, err);
            if (!rest)
                return dsl_seterr(err, DSL_EUSAGE, "unexpected argument '%s' (see %s --help)",
                                  a, p->prog);
            dsl_strvec_push(rest, a);
            continue;
        }
        const struct dsl_opt *d;
        const char *val = NULL;
        if (a[1] == '-') {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            d = find_long(p, name, len);
            if (!d && keep) {
                dsl_strvec_push(rest, a);
                continue;
            }
            if (!d) {
                char near[64];
                did_you_mean(p, name, len, near, sizeof(near));
                if (near[0])
                    return dsl_seterr(err, DSL_EUSAGE, "unknown option '--%.*s': did you mean "
                                      "'--%s'? (see %s --help)", (int)len, name, near,
                                      p->prog);
                return dsl_seterr(err, DSL_EUSAGE, "unknown option '--%.*s' (see %s --help)",
                                  (int)len, name, p->prog);
            }
            if (eq) {
                if (!takes_value(d))
                    return dsl_seterr(err, DSL_EUSAGE, "option '--%s' takes no value", d->name);
                val = eq + 1;
            }
        } else {
            d = find_short(p, a[1]);
            if (!d && keep) {
                dsl_strvec_push(rest, a);
                continue;
            }
            if (!d)
                return dsl_seterr(err, DSL_EUSAGE, "unknown option '-%c' (see %s --help)", a[1],
                                  p->prog);
            if (a[2]) {
                if (!takes_value(d))
                    return dsl_seterr(err, DSL_EUSAGE, "option '-%c' takes no value", a[1]);
                val = a[2] == '=' ? a + 3 : a + 2;
            }
        }
        if (takes_value(d) && !val) {
            if (i + 1 >= argc)
                return dsl_seterr(err, DSL_EUSAGE, "option '--%s' needs a value", d->name);
            /* "--log-dir --dry-run": a forgotten value, not a directory named --dry-run */
            const char *next = argv[i + 1];
            if (next[0] == '-' && next[1] == '-' && next[2]) {
                const char *eq2 = strchr(next + 2, '=');
                size_t l2 = eq2 ? (size_t)(eq2 - next - 2) : strlen(next + 2);
                if (find_long(p, next + 2, l2))
                    return dsl_seterr(err, DSL_EUSAGE,
                                      "option '--%s' needs a value, and '%s' is an option; "
                                      "write --%s=%s if you mean that value",
                                      d->name, next, d->name, next);
            }
            val = argv[++i];
        }
        int r = apply(d, target, val, err);
        if (r < 0)
            return r;
    }
    return 0;
}

void dsl_opt_help(const struct dsl_opt_parser *p, FILE *f)
{
    for (size_t i = 0; i < p->nopts; i++) {
        const struct dsl_opt *d = &p->opts[i];
        if (!d->help)
            continue;
        char dashed[48], left[96];
        snprintf(dashed, sizeof(dashed), "%s", d->name);
        for (char *c = dashed; *c; c++)
            *c = *c == '_' ? '-' : *c;
        const char *arg = takes_value(d) ? (d->arg ? d->arg : "VALUE") : NULL;
        if (d->short_name)
            snprintf(left, sizeof(left), "-%c, --%s%s%s", d->short_name, dashed,
                     arg ? " " : "", arg ? arg : "");
        else
            snprintf(left, sizeof(left), "    --%s%s%s", dashed, arg ? " " : "",
                     arg ? arg : "");
        fprintf(f, "  %-34s %s", left, d->help);
        char range[80] = "";
        if (d->kind == DSL_OPT_INT)
            snprintf(range, sizeof(range), "%ld..%ld", d->min, d->max);
        else if (d->kind == DSL_OPT_SECONDS && bounded(d))
            snprintf(range, sizeof(range), "%ld..%ld s", d->min, d->max);
        else if (d->kind == DSL_OPT_SIZE && bounded(d)) {
            char lo[32], hi[32];
            dsl_opt_format_size(lo, sizeof(lo), (size_t)d->min);
            dsl_opt_format_size(hi, sizeof(hi), (size_t)d->max);
            snprintf(range, sizeof(range), "%s..%s", lo, hi);
        }
        if (range[0] && d->def)
            fprintf(f, " (allowed %s, default: %s)", range, d->def);
        else if (range[0])
            fprintf(f, " (allowed %s)", range);
        else if (d->def)
            fprintf(f, " (default: %s)", d->def);
        fputc('\n', f);
    }
}

int dsl_opt_help_if_asked(const struct dsl_opt_parser *p, const char *usage, int argc,
                          char **argv, FILE *f)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if (strcmp(argv[i], "-h") && strcmp(argv[i], "--help"))
            continue;
        fprintf(f, "%s\n\n", usage);
        dsl_opt_help(p, f);
        return 1;
    }
    return 0;
}
