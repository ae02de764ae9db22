/*
 * ds_config.json's messages (config_internal.h): cJSON keeps no positions, so a small
 * scan of the text (dsl_cfgp_index_keys) tracks the dotted path of every object key and
 * remembers where each key starts; errors and warnings say "file:line:col:" from it
 * and echo a value as the user typed it.
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "config_internal.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/quote.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

/* The key as cJSON reads it: the quoted token q[0..n) with its escapes decoded
 * ("fo\u001bo"), so that the walk, which sees decoded keys, finds its position */
static char *decoded_key(const char *q, size_t n)
{
    cJSON *j = cJSON_ParseWithLength(q, n);
    char *key = cJSON_IsString(j) ? dsl_xstrdup(j->valuestring)
                                  : dsl_xstrndup(q + 1, n >= 2 ? n - 2 : 0);
    cJSON_Delete(j);
    return key;
}

/* Scan already-valid JSON and record the dotted path and offset of every object key. */
void dsl_cfgp_index_keys(struct parse_ctx *c)
{
    enum { MAXDEPTH = 64 };
    char *stack[MAXDEPTH];   /* path of the container at each depth */
    int isobj[MAXDEPTH];
    int objid[MAXDEPTH];     /* the object at each depth, numbered in text order */
    int depth = -1, expect_key = 0, nobj = 0;
    char *pending = NULL;    /* path of the last key, for the value that follows */
    size_t alloc = 0;
    const char *t = c->text;

    for (size_t i = 0; i < c->len; i++) {
        char ch = t[i];
        if (ch == '"') {
            size_t s = ++i;
            while (i < c->len && t[i] != '"') {
                if (t[i] == '\\')
                    i++;
                i++;
            }
            if (i > c->len)
                i = c->len;
            if (depth >= 0 && depth < MAXDEPTH && isobj[depth] && expect_key) {
                const char *parent = stack[depth];
                char *key = decoded_key(t + s - 1, (i < c->len ? i + 1 : c->len) - (s - 1));
                free(pending);
                pending = parent[0] ? dsl_xasprintf("%s.%s", parent, key)
                                    : dsl_xstrdup(key);
                free(key);
                if (c->nkp == alloc) {
                    alloc = alloc ? 2 * alloc : 32;
                    c->kp = dsl_xreallocarray(c->kp, alloc, sizeof(*c->kp));
                }
                c->kp[c->nkp].path = dsl_xstrdup(pending);
                c->kp[c->nkp].off = s - 1;
                c->kp[c->nkp].obj = objid[depth];
                c->nkp++;
                expect_key = 0;
            }
        } else if (ch == '{' || ch == '[') {
            depth++;
            if (depth < MAXDEPTH) {
                const char *parent = depth > 0 ? stack[depth - 1] : "";
                if (depth > 0 && !isobj[depth - 1])
                    stack[depth] = dsl_xasprintf("%s[]", parent);
                else
                    stack[depth] = dsl_xstrdup(pending ? pending : parent);
                isobj[depth] = ch == '{';
                objid[depth] = ++nobj;
            }
            expect_key = ch == '{';
        } else if (ch == '}' || ch == ']') {
            if (depth >= 0 && depth < MAXDEPTH)
                free(stack[depth]);
            if (depth >= 0)
                depth--;
            expect_key = 0;
        } else if (ch == ',') {
            expect_key = depth >= 0 && depth < MAXDEPTH && isobj[depth];
        }
    }
    for (; depth >= 0; depth--)
        if (depth < MAXDEPTH)
            free(stack[depth]);
    free(pending);
}

void dsl_cfgp_linecol(const char *text, size_t off, int *line, int *col)
{
    int l = 1, cl = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            l++;
            cl = 1;
        } else {
            cl++;
        }
    }
    *line = l;
    *col = cl;
}

/*
 * A key given twice in one object ("seed": 7, ..., "seed": 8): JSON leaves it open
 * which counts (cJSON takes the first, Python's json the last, as DeepSpeed reads
 * it), so the file means different things to different readers. Refused, naming both.
 */
int dsl_cfgp_check_duplicates(struct parse_ctx *c)
{
    for (size_t j = 1; j < c->nkp; j++)
        for (size_t i = 0; i < j; i++) {
            if (c->kp[i].obj != c->kp[j].obj || strcmp(c->kp[i].path, c->kp[j].path))
                continue;
            int l1, c1, l2, c2;
            dsl_cfgp_linecol(c->text, c->kp[i].off, &l1, &c1);
            dsl_cfgp_linecol(c->text, c->kp[j].off, &l2, &c2);
            return dsl_seterr(c->err, DSL_ECONFIG,
                              "%s:%d:%d: duplicate key '%s' (first at line %d, column %d): "
                              "keep one of them", c->file, l2, c2, c->kp[j].path, l1, c1);
        }
    return 0;
}

/* "file:line:col: " for a key path, or "file: " when unknown. */
static void where(const struct parse_ctx *c, const char *path, char *buf, size_t n)
{
    if (c->cli) {
        snprintf(buf, n, "command line: ");
        return;
    }
    for (size_t i = 0; path && i < c->nkp; i++) {
        if (strcmp(c->kp[i].path, path) == 0) {
            int l, col;
            dsl_cfgp_linecol(c->text, c->kp[i].off, &l, &col);
            snprintf(buf, n, "%s:%d:%d: ", c->file, l, col);
            return;
        }
    }
    snprintf(buf, n, "%s: ", c->file);
}

/* Both parts of a message about key path: where (as where() writes it) and the text. */
__attribute__((format(printf, 7, 0))) static void where_and_text(struct parse_ctx *c,
                                                                 const char *path, char *w,
                                                                 size_t wn, char *msg,
                                                                 size_t mn, const char *fmt,
                                                                 va_list ap)
{
    where(c, path, w, wn);
    vsnprintf(msg, mn, fmt, ap);
}

__attribute__((format(printf, 3, 4))) int dsl_cfgp_err(struct parse_ctx *c, const char *path,
                                                      const char *fmt, ...)
{
    char w[256], msg[DSL_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    where_and_text(c, path, w, sizeof(w), msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return dsl_seterr(c->err, DSL_ECONFIG, "%s%s", w, msg);
}

__attribute__((format(printf, 3, 4))) void dsl_cfgp_warn(struct parse_ctx *c,
                                                        const char *path, const char *fmt,
                                                        ...)
{
    char w[256], msg[DSL_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    where_and_text(c, path, w, sizeof(w), msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* escaped now, as dsl_seterr() does for errors: the warnings outlive this call */
    char safe[DSL_ERR_LEN];
    dsl_quote_for_humans(safe, sizeof(safe), msg, strlen(msg));
    dsl_strvec_pushf(&c->cfg->warnings, "%s%s", w, safe);
}

/*
 * The value of key path as the user wrote it, escaped, for messages: a number such as
 * 1e9 or 9223372036854775808 is echoed as typed, not as the double cJSON made of it.
 * From the command line it is the flag's value; from a file, the text after the key's
 * ':' up to the next ',', '}', ']' or line end. v formats it when neither is known.
 */
const char *dsl_cfgp_raw_value(const struct parse_ctx *c, const char *path, const cJSON *v,
                             char *buf, size_t cap)
{
    const char *t = NULL;
    size_t n = 0;
    if (c->cli && c->cli_value) {
        t = c->cli_value;
        n = strlen(t);
    }
    for (size_t i = 0; !t && c->text && path && i < c->nkp; i++) {
        if (strcmp(c->kp[i].path, path) != 0)
            continue;
        size_t o = c->kp[i].off + 1; /* past the key's opening quote */
        while (o < c->len && c->text[o] != '"')
            o += c->text[o] == '\\' ? 2 : 1;
        while (o < c->len && (c->text[o] == '"' || c->text[o] == ':' ||
                              isspace((unsigned char)c->text[o])))
            o++;
        size_t e = o;
        if (o < c->len && c->text[o] == '[') { /* an array, to its closing bracket */
            int depth = 0;
            for (; e < c->len && c->text[e] != '\n'; e++) {
                depth += c->text[e] == '[' ? 1 : c->text[e] == ']' ? -1 : 0;
                if (depth == 0) {
                    e++;
                    break;
                }
            }
        } else {
            while (e < c->len && !strchr(",}]\r\n", c->text[e]))
                e++;
        }
        while (e > o && isspace((unsigned char)c->text[e - 1]))
            e--;
        if (e > o) {
            t = c->text + o;
            n = e - o;
        }
    }
    if (t) {
        dsl_quote_for_humans(buf, cap, t, n);
    } else if (cJSON_IsNumber(v)) {
        snprintf(buf, cap, "%.17g", v->valuedouble);
    } else {
        snprintf(buf, cap, "?");
    }
    return buf;
}

/* a bound as people write it: integers in full, others in %g */
static const char *bound_text(double d, char *buf, size_t cap)
{
    if (d == floor(d) && fabs(d) < 1e16)
        snprintf(buf, cap, "%.0f", d);
    else
        snprintf(buf, cap, "%g", d);
    return buf;
}

/* "'key' out of range: allowed min..max, got 'text'" */
int dsl_cfgp_range_err(struct parse_ctx *c, const char *path, const cJSON *v, double min,
                     double max)
{
    char raw[96], lo[40], hi[40];
    return dsl_cfgp_err(c, path, "'%s' out of range: allowed %s..%s, got '%s'", path,
                        bound_text(min, lo, sizeof(lo)), bound_text(max, hi, sizeof(hi)),
                        dsl_cfgp_raw_value(c, path, v, raw, sizeof(raw)));
}

const char *dsl_cfgp_json_type(const cJSON *v)
{
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    return "something else";
}

/* An integral JSON number in [min, max]. */
int dsl_cfgp_get_integer(struct parse_ctx *c, const struct key *k, const cJSON *v, double min,
                       double max, double *out)
{
    char raw[96], lo[40], hi[40];
    if (!cJSON_IsNumber(v))
        return dsl_cfgp_err(c, k->path, "expected an integer for '%s', got %s", k->path,
                            dsl_cfgp_json_type(v));
    double d = v->valuedouble;
    if (isfinite(d) && d != floor(d))
        return dsl_cfgp_err(c, k->path, "expected an integer from %s to %s for '%s', got '%s'",
                            bound_text(min, lo, sizeof(lo)), bound_text(max, hi, sizeof(hi)),
                            k->path, dsl_cfgp_raw_value(c, k->path, v, raw, sizeof(raw)));
    if (!isfinite(d) || d < min || d > max)
        return dsl_cfgp_range_err(c, k->path, v, min, max);
    *out = d;
    return 0;
}
