/*
 * pdsh-style host ranges: "node[01-04,7]" is node01 node02 node03 node04 node7.
 *
 * A spec is literal text with zero or more bracket groups. A group is a comma list of
 * items, each a number or LO-HI; numbers are at most 9 digits, so every count fits an
 * unsigned long. A lower bound written with a leading zero ("08") fixes the width of
 * every number of its item, as pdsh does. Several groups expand as a cartesian
 * product, leftmost group varying slowest, so "r[1-2]n[1-2]" is r1n1 r1n2 r2n1 r2n2.
 *
 * A host list (Slurm's SLURM_JOB_NODELIST) is ranges separated by commas outside the
 * brackets; each item is checked and counted before anything is appended.
 *
 * Expansion runs in two passes: count() checks the whole spec and multiplies the group
 * sizes (saturating), so a spec like "n[0-999999999]" is refused before anything is
 * allocated; emit() then writes the names and may assume the spec is well formed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/hostrange.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define NUM_DIGITS_MAX 9
#define GROUPS_MAX 8     /* bounds emit()'s recursion */
#define SPEC_LEN_MAX 1024 /* a host name is at most 253 bytes anyway */
#define LIST_LEN_MAX 65536 /* a whole host list (Slurm lists are ranges, so short) */

struct range_item {
    unsigned long lo, hi;
    int width; /* 0: natural width */
};

/* Parse a run of digits at s (at most NUM_DIGITS_MAX). Returns digits consumed, 0 if none. */
static size_t parse_num(const char *s, size_t n, unsigned long *v)
{
    size_t i = 0;
    *v = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        if (i == NUM_DIGITS_MAX)
            return 0;
        *v = *v * 10 + (unsigned long)(s[i] - '0');
        i++;
    }
    return i;
}

/*
 * Parse the body of one bracket group (between '[' and ']'). Fills items (may be NULL
 * to only count) and the number of names in *count. Returns 0 or -EINVAL.
 */
static int parse_group(const char *spec, const char *b, size_t n, struct range_item **items,
                       size_t *nitems, unsigned long *count, char *err)
{
    size_t i = 0;
    unsigned long total = 0;
    if (n == 0)
        return dsl_seterr(err, -EINVAL, "bad host range '%s': empty brackets", spec);
    while (i <= n) {
        size_t end = i;
        while (end < n && b[end] != ',')
            end++;
        const char *it = b + i;
        size_t len = end - i;
        unsigned long lo, hi;
        size_t d1 = parse_num(it, len, &lo), d2 = 0;
        if (d1 == 0)
            goto bad;
        hi = lo;
        if (d1 < len) {
            if (it[d1] != '-')
                goto bad;
            d2 = parse_num(it + d1 + 1, len - d1 - 1, &hi);
            if (d2 == 0 || d1 + 1 + d2 != len)
                goto bad;
            if (hi < lo)
                return dsl_seterr(err, -EINVAL, "bad host range '%s': reversed range '%.*s'",
                                  spec, (int)len, it);
        }
        total += hi - lo + 1;
        if (total > DSL_HOSTRANGE_MAX_HOSTS)
            return dsl_seterr(err, -EINVAL, "bad host range '%s': more than %d hosts", spec,
                              DSL_HOSTRANGE_MAX_HOSTS);
        if (items) {
            *items = dsl_xreallocarray(*items, *nitems + 1, sizeof(**items));
            (*items)[*nitems] = (struct range_item){
                lo, hi, (it[0] == '0' && d1 > 1) ? (int)d1 : 0};
            (*nitems)++;
        }
        i = end + 1;
        continue;
    bad:
        return dsl_seterr(err, -EINVAL, "bad host range '%s': bad item '%.*s' in '[%.*s]'",
                          spec, (int)len, it, (int)n, b);
    }
    *count = total;
    return 0;
}

/* Find the next group at or after p: *lb at '[', *rb at its ']'. 0 = none, 1 = found. */
static int next_group(const char *spec, const char *p, const char **lb, const char **rb,
                      char *err)
{
    const char *l = strchr(p, '['), *r = strchr(p, ']');
    if (!l) {
        if (r)
            return dsl_seterr(err, -EINVAL, "bad host range '%s': unmatched ']'", spec);
        return 0;
    }
    if (r && r < l)
        return dsl_seterr(err, -EINVAL, "bad host range '%s': unmatched ']'", spec);
    if (!r)
        return dsl_seterr(err, -EINVAL, "bad host range '%s': unclosed '['", spec);
    const char *l2 = strchr(l + 1, '[');
    if (l2 && l2 < r)
        return dsl_seterr(err, -EINVAL, "bad host range '%s': nested '['", spec);
    *lb = l;
    *rb = r;
    return 1;
}

/* Check spec; *n gets the number of names it expands to. */
static int count(const char *spec, unsigned long *n, char *err)
{
    const char *p = spec, *lb = NULL, *rb = NULL;
    unsigned long total = 1;
    int r, groups = 0;
    if (strlen(spec) > SPEC_LEN_MAX)
        return dsl_seterr(err, -EINVAL, "bad host range '%.40s...': longer than %d bytes", spec,
                          SPEC_LEN_MAX);
    while ((r = next_group(spec, p, &lb, &rb, err)) == 1) {
        unsigned long c;
        if (++groups > GROUPS_MAX)
            return dsl_seterr(err, -EINVAL, "bad host range '%s': more than %d bracket groups",
                              spec, GROUPS_MAX);
        if ((r = parse_group(spec, lb + 1, (size_t)(rb - lb - 1), NULL, NULL, &c, err)) < 0)
            return r;
        total *= c; /* both <= MAX_HOSTS, so no overflow */
        if (total > DSL_HOSTRANGE_MAX_HOSTS)
            return dsl_seterr(err, -EINVAL, "bad host range '%s': more than %d hosts", spec,
                              DSL_HOSTRANGE_MAX_HOSTS);
        p = rb + 1;
    }
    if (r == 0)
        *n = total;
    return r;
}

/* Expand the already-checked spec; prefix is the expanded text so far. */
static void emit(const char *spec, const char *p, const char *prefix, struct dsl_strvec *out)
{
    const char *lb = NULL, *rb = NULL;
    if (next_group(spec, p, &lb, &rb, NULL) != 1) {
        dsl_strvec_push_nodup(out, dsl_xasprintf("%s%s", prefix, p));
        return;
    }
    struct range_item *items = NULL;
    size_t nitems = 0;
    unsigned long c;
    if (parse_group(spec, lb + 1, (size_t)(rb - lb - 1), &items, &nitems, &c, NULL) < 0)
        DSL_BUG("host range changed between passes");
    for (size_t i = 0; i < nitems; i++)
        for (unsigned long v = items[i].lo; v <= items[i].hi; v++) {
            char *next = dsl_xasprintf("%s%.*s%0*lu", prefix, (int)(lb - p), p, items[i].width,
                                       v);
            emit(spec, rb + 1, next, out);
            free(next);
        }
    free(items);
}

int dsl_hostrange_expand(const char *spec, struct dsl_strvec *out, char *err)
{
    unsigned long n;
    int r = count(spec, &n, err);
    if (r < 0)
        return r;
    emit(spec, spec, "", out);
    return 0;
}

int dsl_hostlist_expand(const char *list, struct dsl_strvec *out, char *err)
{
    size_t n = strlen(list), i = 0;
    unsigned long total = 0;
    struct dsl_strvec items;
    char rerr[DSL_ERR_LEN];
    int r = 0;

    if (n == 0)
        return dsl_seterr(err, -EINVAL, "bad host list '': empty");
    if (n > LIST_LEN_MAX)
        return dsl_seterr(err, -EINVAL, "bad host list '%.40s...': longer than %d bytes", list,
                          LIST_LEN_MAX);
    dsl_strvec_init(&items);
    /* split at the commas outside brackets; count() checks each item */
    while (i <= n && r == 0) {
        size_t end = i;
        int depth = 0;
        while (end < n && (list[end] != ',' || depth > 0)) {
            if (list[end] == '[')
                depth++;
            else if (list[end] == ']' && depth > 0)
                depth--;
            end++;
        }
        if (end == i) {
            r = dsl_seterr(err, -EINVAL, "bad host list '%.200s': empty item at offset %zu",
                           list, i);
            break;
        }
        char *item = dsl_xasprintf("%.*s", (int)(end - i), list + i);
        unsigned long c;
        dsl_strvec_push_nodup(&items, item);
        if ((r = count(item, &c, rerr)) < 0) {
            if (end - i == n) /* the whole list is one range: its message says it all */
                dsl_seterr(err, r, "%s", rerr);
            else
                dsl_seterr(err, r, "bad host list '%.200s': %s", list, rerr);
            break;
        }
        total += c;
        if (total > DSL_HOSTRANGE_MAX_HOSTS)
            r = dsl_seterr(err, -EINVAL, "bad host list '%.40s%s': more than %d hosts", list,
                           n > 40 ? "..." : "", DSL_HOSTRANGE_MAX_HOSTS);
        i = end + 1;
    }
    for (size_t k = 0; r == 0 && k < items.nr; k++)
        emit(items.v[k], items.v[k], "", out);
    dsl_strvec_release(&items);
    return r;
}
