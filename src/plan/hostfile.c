/*
 * The DeepSpeed hostfile: "[user@]host slots=N [max_slots=M] [# comment]" per line.
 *
 * Theory of operation: the text is split into lines ('\n', with a trailing '\r'
 * dropped), each line is cut at its first '#', trimmed, and split into words at blanks
 * (spaces and tabs). Word one is the host, or a pdsh range expanded by
 * dsl_hostrange_expand(), optionally after "user@" (the login user, as DeepSpeed passes
 * it to pdsh and ssh; it applies to every host of a range and is kept apart from the
 * name, which alone is what filters, duplicates and messages use); the other words must be "slots=N" (required) and
 * "max_slots=M" (optional), each once. Hosts are appended in file order and are never
 * sorted: the order is the rank order. A hash of the names finds duplicates in O(1) so
 * that a file of many ranges stays linear.
 *
 * A UTF-8 byte order mark at the start is skipped. Every message quotes the offending
 * text escaped (dsl_excerpt: "\x1b", "\t"), so a hostfile cannot drive the terminal
 * that shows its errors.
 *
 * DeepSpeed's own parser matches the regex '^(\S+)\s+slots=(\d+)' and so accepts
 * "w slots=4abc" as 4 slots and silently ignores the rest of the line; every such case
 * is an error here, reported as "hostfile 'PATH':LINE: what 'offending text'".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/quote.h"
#include "dslaunch/plan/hostfile.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define HOSTFILE_MAX_BYTES (16u << 20)

/* Open-addressing set of host indexes keyed by name, to find duplicates. */
struct name_set {
    size_t *slot; /* index + 1; 0 = empty */
    size_t cap;   /* power of two */
};

/* host names are compared as DNS compares them, ASCII case ignored: 'Worker-0' and
 * 'worker-0' are one machine, and two agents on it would fight over its ports */
static unsigned char lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c - 'A' + 'a') : c;
}

static int name_eq(const char *a, const char *b)
{
    for (; *a && lower((unsigned char)*a) == lower((unsigned char)*b); a++, b++)
        ;
    return lower((unsigned char)*a) == lower((unsigned char)*b);
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ lower((unsigned char)*s)) * 1099511628211ull;
    return h;
}

/* the slot of name in a table of cap slots (a power of two) holding index + 1 of the
   names get(arg, index): the one that holds it, or the empty one where it would go */
static size_t name_probe(const size_t *slot, size_t cap, const char *name,
                         const char *(*get)(const void *, size_t), const void *arg)
{
    size_t i = (size_t)name_hash(name) & (cap - 1);
    while (slot[i] && !name_eq(get(arg, slot[i] - 1), name))
        i = (i + 1) & (cap - 1);
    return i;
}

static const char *host_name(const void *hf, size_t k)
{
    return ((const struct dsl_hostfile *)hf)->hosts[k].name;
}

static size_t name_set_find(const struct name_set *ns, const struct dsl_hostfile *hf,
                            const char *name)
{
    return name_probe(ns->slot, ns->cap, name, host_name, hf);
}

static const char *vec_name(const void *names, size_t k)
{
    return ((char *const *)names)[k];
}

size_t dsl_host_names_first_repeat(char *const *names, size_t n)
{
    size_t cap = 64, first = n;
    while (cap < 2 * n)
        cap *= 2;
    size_t *slot = dsl_xcalloc(cap, sizeof(*slot));
    for (size_t k = 0; k < n && first == n; k++) {
        size_t i = name_probe(slot, cap, names[k], vec_name, names);
        if (slot[i])
            first = k;
        else
            slot[i] = k + 1;
    }
    free(slot);
    return first;
}

static void name_set_grow(struct name_set *ns, const struct dsl_hostfile *hf)
{
    free(ns->slot);
    ns->cap = ns->cap ? ns->cap * 2 : 64;
    ns->slot = dsl_xcalloc(ns->cap, sizeof(*ns->slot));
    for (size_t k = 0; k < hf->nr; k++)
        ns->slot[name_set_find(ns, hf, hf->hosts[k].name)] = k + 1;
}

void dsl_hostfile_init(struct dsl_hostfile *hf)
{
    memset(hf, 0, sizeof(*hf));
}

void dsl_hostfile_release(struct dsl_hostfile *hf)
{
    for (size_t i = 0; i < hf->nr; i++) {
        free(hf->hosts[i].name);
        free(hf->hosts[i].user);
    }
    free(hf->hosts);
    free(hf->path);
    dsl_hostfile_init(hf);
}

static void add_host(struct dsl_hostfile *hf, const char *name, const char *user, int slots,
                     int max_slots, int line)
{
    DSL_ALLOC_GROW(hf->hosts, hf->nr, hf->alloc);
    hf->hosts[hf->nr++] = (struct dsl_host){dsl_xstrdup(name), user ? dsl_xstrdup(user) : NULL,
                                            slots, max_slots, line};
}

void dsl_hostfile_add(struct dsl_hostfile *hf, const char *name, int slots)
{
    add_host(hf, name, NULL, slots, -1, 0);
}

const struct dsl_host *dsl_hostfile_find(const struct dsl_hostfile *hf, const char *name)
{
    for (size_t i = 0; i < hf->nr; i++)
        if (name_eq(hf->hosts[i].name, name))
            return &hf->hosts[i];
    return NULL;
}

/* [A-Za-z0-9._-]: the POSIX portable filename characters */
static int portable_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '-' || c == '_';
}

/* 1 to max portable characters, not starting with '-' (it would read as an option) */
static int portable_name(const char *name, size_t max)
{
    size_t n = strlen(name);
    if (n == 0 || n > max || name[0] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!portable_char(name[i]))
            return 0;
    return 1;
}

int dsl_user_name_valid(const char *name)
{
    return portable_name(name, DSL_USER_NAME_MAX);
}

int dsl_host_name_valid(const char *name)
{
    return portable_name(name, DSL_HOST_NAME_MAX);
}

/* State of one parse: where we are, for messages. */
struct parser {
    const char *path;
    int line;
    char *err;
};

static int fail(struct parser *p, const char *what, const char *text, size_t n)
{
    char ex[DSL_EXCERPT_LEN]; /* a short excerpt, escaped: "\x1b" instead of ESC */
    dsl_quote_for_humans(ex, sizeof(ex), text, n);
    return dsl_seterr(p->err, DSL_EHOSTFILE, "hostfile '%s':%d: %s '%s'", p->path, p->line,
                      what, ex);
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r';
}

/* "slots=N": N is 1..DSL_HOSTFILE_MAX_SLOTS, digits only (no sign, no suffix). */
static int parse_count(struct parser *p, const char *word, size_t wn, size_t keylen, int *out)
{
    const char *v = word + keylen;
    size_t n = wn - keylen;
    long x = 0;
    if (n == 0)
        return fail(p, "missing count in", word, wn);
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return fail(p, keylen == 6 ? "bad slot count" : "bad max_slots count", v, n);
        x = x * 10 + (v[i] - '0');
        if (x > DSL_HOSTFILE_MAX_SLOTS) {
            char what[64];
            snprintf(what, sizeof(what), "more than %d slots in", DSL_HOSTFILE_MAX_SLOTS);
            return fail(p, what, word, wn);
        }
    }
    if (x == 0)
        return fail(p, "slot count must be at least 1, not", word, wn);
    *out = (int)x;
    return 0;
}

static int has_prefix(const char *w, size_t n, const char *pre)
{
    size_t l = strlen(pre);
    return n >= l && memcmp(w, pre, l) == 0;
}

/* One non-blank line (already cut at '#' and trimmed), s[0..n). */
static int parse_line(struct parser *p, struct dsl_hostfile *hf, struct name_set *ns,
                      const char *s, size_t n)
{
    const char *w[8] = {0};
    size_t wl[8] = {0}, nw = 0;
    int slots = -1, max_slots = -1, r;

    for (size_t i = 0; i < n;) {
        while (i < n && is_blank(s[i]))
            i++;
        if (i == n)
            break;
        size_t j = i;
        while (j < n && !is_blank(s[j]))
            j++;
        if (nw == 8)
            return fail(p, "unexpected text", s + i, n - i);
        w[nw] = s + i;
        wl[nw++] = j - i;
        i = j;
    }
    if (memchr(w[0], '=', wl[0]))
        return fail(p, "missing host name before", s, n);

    for (size_t k = 1; k < nw; k++) {
        const char *x = w[k];
        size_t xn = wl[k];
        size_t rest = n - (size_t)(x - s);
        int key = (xn == 5 && memcmp(x, "slots", 5) == 0) ||
                  (xn == 9 && memcmp(x, "max_slots", 9) == 0);
        int more = k + 1 < nw;
        if (x[0] == '=' || (key && more && w[k + 1][0] == '=') ||
            (x[xn - 1] == '=' && more && w[k + 1][0] >= '0' && w[k + 1][0] <= '9'))
            return fail(p, "spaces around '=' (write slots=N) in", x, rest);
        if (has_prefix(x, xn, "slots=")) {
            if (slots != -1)
                return fail(p, "slots given twice in", s, n);
            if ((r = parse_count(p, x, xn, 6, &slots)) < 0)
                return r;
        } else if (has_prefix(x, xn, "max_slots=")) {
            if (max_slots != -1)
                return fail(p, "max_slots given twice in", s, n);
            if ((r = parse_count(p, x, xn, 10, &max_slots)) < 0)
                return r;
        } else {
            return fail(p, "unexpected text", x, rest);
        }
    }
    if (slots == -1)
        return fail(p, "missing slots=N in", s, n);
    if (max_slots != -1 && max_slots < slots)
        return fail(p, "slots above max_slots in", s, n);

    /* "user@host": the login user is kept apart; the host part alone is the name */
    char *user = NULL;
    const char *ua = memchr(w[0], '@', wl[0]);
    if (ua) {
        user = dsl_xstrndup(w[0], (size_t)(ua - w[0]));
        if (!dsl_user_name_valid(user)) {
            r = fail(p, "bad user name", w[0], (size_t)(ua - w[0]));
            free(user);
            return r;
        }
        if (ua + 1 == w[0] + wl[0]) {
            free(user);
            return fail(p, "missing host name after", w[0], wl[0]);
        }
    }
    const char *hs = ua ? ua + 1 : w[0];
    char *spec = dsl_xstrndup(hs, wl[0] - (size_t)(hs - w[0]));
    struct dsl_strvec names;
    char rerr[DSL_ERR_LEN];
    dsl_strvec_init(&names);
    if (dsl_hostrange_expand(spec, &names, rerr) < 0) {
        r = dsl_seterr(p->err, DSL_EHOSTFILE, "hostfile '%s':%d: %s", p->path, p->line, rerr);
        goto out;
    }
    for (size_t k = 0; k < names.nr; k++) {
        const char *name = names.v[k];
        if (!dsl_host_name_valid(name)) {
            r = fail(p, "bad host name", name, strlen(name));
            goto out;
        }
        if (hf->nr >= DSL_HOSTFILE_MAX_HOSTS) {
            r = dsl_seterr(p->err, DSL_EHOSTFILE, "hostfile '%s':%d: more than %d hosts",
                           p->path, p->line, DSL_HOSTFILE_MAX_HOSTS);
            goto out;
        }
        if (2 * (hf->nr + 1) > ns->cap)
            name_set_grow(ns, hf);
        size_t at = name_set_find(ns, hf, name);
        if (ns->slot[at]) {
            const struct dsl_host *first = &hf->hosts[ns->slot[at] - 1];
            if (strcmp(first->name, name) != 0)
                r = dsl_seterr(p->err, DSL_EHOSTFILE,
                               "hostfile '%s':%d: duplicate host '%s' (first on line %d as "
                               "'%s'; host names ignore case)", p->path, p->line, name,
                               first->line, first->name);
            else
                r = dsl_seterr(p->err, DSL_EHOSTFILE,
                               "hostfile '%s':%d: duplicate host '%s' (first on line %d)",
                               p->path, p->line, name, first->line);
            goto out;
        }
        add_host(hf, name, user, slots, max_slots, p->line);
        ns->slot[at] = hf->nr;
    }
    r = 0;
out:
    dsl_strvec_release(&names);
    free(spec);
    free(user);
    return r;
}

int dsl_hostfile_parse(struct dsl_hostfile *hf, const char *path, const char *text, size_t len,
                       char *err)
{
    struct parser p = {path ? path : "-", 0, err};
    struct name_set ns = {NULL, 0};
    int r = 0;
    size_t i = 0;

    /* a UTF-8 byte order mark (editors on Windows write one) says nothing: skip it */
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        i = 3;
    while (i < len && r == 0) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len;
        const char *s = text + i;
        size_t n = end - i;
        i = end + 1;
        p.line++;
        if (memchr(s, '\0', n)) {
            r = fail(&p, "NUL byte in", s, n);
            break;
        }
        const char *hash = memchr(s, '#', n);
        if (hash)
            n = (size_t)(hash - s);
        while (n && is_blank(s[n - 1]))
            n--;
        while (n && is_blank(*s)) {
            s++;
            n--;
        }
        if (n)
            r = parse_line(&p, hf, &ns, s, n);
    }
    free(ns.slot);
    if (r == 0 && hf->nr == 0)
        r = dsl_seterr(err, DSL_EHOSTFILE, "hostfile '%s': no hosts", p.path);
    if (r < 0) {
        dsl_hostfile_release(hf);
        return r;
    }
    hf->path = path ? dsl_xstrdup(path) : NULL;
    return 0;
}

int dsl_hostfile_load(struct dsl_hostfile *hf, const char *path, char *err)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, HOSTFILE_MAX_BYTES);
    int r = dsl_dynbuf_load_named(&b, path, "hostfile", DSL_EHOSTFILE, err);
    if (r == 0)
        r = dsl_hostfile_parse(hf, path, dsl_dynbuf_str(&b), b.len, err);
    dsl_dynbuf_release(&b);
    return r;
}
