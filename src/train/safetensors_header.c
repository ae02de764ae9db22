/*
 * The safetensors header's grammar (format in safetensors.h), for safetensors_load.c.
 *
 * Theory of operation. The header is JSON and cJSON parses it (cJSON is already the
 * trainer's JSON reader, for ds_config.json), but the format's grammar is small and
 * fixed: an object whose members are tensor entries {"dtype": string, "shape":
 * [uint...], "data_offsets": [uint, uint]} or the "__metadata__" object of string
 * values, and a checkpoint reader must be strict where cJSON is lenient. So one pass
 * over the bytes comes first (scan): it enforces what cJSON does not (JSON's escapes
 * and whitespace, no control characters, numbers as plain non-negative integers that
 * fit 64 bits, at most three levels of nesting) and notes where every key and value
 * starts. cJSON_ParseWithLengthOpts, with the terminating NUL required inside the
 * length, then judges the structure, and a walk of its tree checks the grammar above
 * (field names, types, repeats). The walk meets items in the order the scan met them,
 * so each item has its byte offset for messages and each number its exact value (cJSON
 * keeps numbers as doubles). Every error names the file and the byte offset inside the
 * header. It is fuzzed (fuzz_safetensors).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dslaunch/common/error.h"
#include "safetensors.h"
#include "safetensors_internal.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

/*
 * One key or value of the header as the scan met it. cJSON lists a parsed document
 * depth first, each object member's key before its value, which is the order in which
 * keys and values start in the text; so the k-th token is the k-th item of that walk.
 * That gives each item its place for messages (cJSON keeps none) and each number its
 * exact value (cJSON keeps doubles, exact only up to 2^53).
 */
enum tok_kind { TK_STR, TK_NUM, TK_LIT, TK_OBJ, TK_ARR };

struct tok {
    size_t start, end; /* in the header; a container ends after its closing bracket */
    uint64_t num;      /* TK_NUM */
    enum tok_kind kind;
};

/* The deepest valid nesting: the top object, an entry, its shape or data_offsets. */
#define MAX_DEPTH 3

struct rd {
    const char *s; /* the header */
    size_t n;
    const char *file;
    char *err;
    struct tok *t;
    size_t nt, cap;
    size_t k;       /* the walk's next token */
    size_t top_end; /* where the top-level object closed (0: not yet) */
    size_t bad_at;  /* where the token the scan failed in starts */
    size_t sha_at;  /* where the 64 digits of dsl.sha256 start (0: no such key) */
};

__attribute__((format(printf, 3, 4))) static int rd_err(struct rd *p, size_t at,
                                                        const char *fmt, ...)
{
    char msg[DSL_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return dsl_seterr(p->err, DSL_ECHECKPOINT, "safetensors file '%s': bad header at byte %zu: %s",
                      p->file, at, msg);
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t add_tok(struct rd *p, enum tok_kind kind, size_t start, size_t end)
{
    if (p->nt == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->t = dsl_xreallocarray(p->t, p->cap, sizeof(*p->t));
    }
    p->t[p->nt] = (struct tok){.start = start, .end = end, .kind = kind};
    return p->nt++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int scan_hex4(struct rd *p, size_t *i, unsigned *out)
{
    unsigned v = 0;
    if (p->n - *i < 4)
        return rd_err(p, *i, "short \\u escape");
    for (size_t k = 0; k < 4; k++) {
        int h = hexval(p->s[*i + k]);
        if (h < 0)
            return rd_err(p, *i, "bad \\u escape");
        v = v * 16 + (unsigned)h;
    }
    *i += 4;
    *out = v;
    return 0;
}

/*
 * A string from its opening quote: JSON's rules, which cJSON does not all enforce (it
 * takes raw control characters, decodes a bad hex digit as 0 and \u0000 as the end of
 * the string). Positions are where the old reader stopped, for the same messages.
 */
static int scan_string(struct rd *p, size_t *pi)
{
    size_t i = *pi + 1;
    int r;
    for (;;) {
        if (i >= p->n)
            return rd_err(p, i, "unterminated string");
        unsigned char ch = (unsigned char)p->s[i++];
        if (ch == '"')
            break;
        if (ch < 0x20)
            return rd_err(p, i, "control character in string");
        if (ch != '\\')
            continue;
        if (i >= p->n)
            return rd_err(p, i, "unterminated string");
        char e = p->s[i++];
        if (e == 'u') {
            unsigned cp, lo;
            if ((r = scan_hex4(p, &i, &cp)) < 0)
                return r;
            if (cp >= 0xd800 && cp < 0xdc00) {
                if (p->n - i < 2 || p->s[i] != '\\' || p->s[i + 1] != 'u')
                    return rd_err(p, i, "lone surrogate in string");
                i += 2;
                if ((r = scan_hex4(p, &i, &lo)) < 0)
                    return r;
                if (lo < 0xdc00 || lo > 0xdfff)
                    return rd_err(p, i, "bad surrogate pair in string");
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                return rd_err(p, i, "lone surrogate in string");
            }
            if (cp == 0)
                return rd_err(p, i, "NUL in string");
        } else if (!e || !strchr("\"\\/bfnrt", e)) {
            return rd_err(p, i, "bad escape in string");
        }
    }
    add_tok(p, TK_STR, *pi, i);
    *pi = i;
    return 0;
}

/* A number: only a non-negative integer in plain digits (no sign, fraction, exponent or
 * leading zero) that fits 64 bits, read exactly; cJSON would take any JSON number. */
static int scan_number(struct rd *p, size_t *pi)
{
    size_t i = *pi, start = i;
    uint64_t v = 0;
    while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') {
        unsigned dgt = (unsigned)(p->s[i] - '0');
        if (v > (UINT64_MAX - dgt) / 10)
            return rd_err(p, i, "number out of range");
        v = v * 10 + dgt;
        i++;
    }
    if (i == start || (i < p->n && memchr("+-.eE", p->s[i], 5)))
        return rd_err(p, start, "expected a non-negative integer");
    if (i - start > 1 && p->s[start] == '0')
        return rd_err(p, i, "leading zero in number");
    size_t k = add_tok(p, TK_NUM, start, i); /* may move p->t */
    p->t[k].num = v;
    *pi = i;
    return 0;
}

/*
 * One pass over the header before cJSON sees it: the lexical rules above, JSON's four
 * whitespace characters only (cJSON skips every byte up to 0x20 and a UTF-8 byte-order
 * mark), at most MAX_DEPTH levels of nesting (anything deeper is invalid here, and a
 * hostile header cannot make it deep), and the token list. The structure (colons,
 * commas, brackets that match) is left to cJSON.
 */
static int scan(struct rd *p)
{
    size_t open[MAX_DEPTH];
    size_t i = 0;
    int depth = 0, r = 0;
    while (i < p->n && is_ws(p->s[i]))
        i++;
    if (i >= p->n || p->s[i] != '{') {
        p->bad_at = i;
        return rd_err(p, i, "expected '{'");
    }
    while (i < p->n && r == 0) {
        unsigned char ch = (unsigned char)p->s[i];
        p->bad_at = i;
        if (is_ws((char)ch)) {
            i++;
        } else if (ch < 0x20) {
            r = rd_err(p, i, p->top_end ? "unexpected text after the header object"
                                        : "control character outside a string");
        } else if (ch == '"') {
            r = scan_string(p, &i);
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            r = scan_number(p, &i);
        } else if (ch == 't' || ch == 'f' || ch == 'n') { /* true, false, null */
            size_t start = i;
            while (i < p->n && p->s[i] >= 'a' && p->s[i] <= 'z')
                i++;
            add_tok(p, TK_LIT, start, i);
        } else if (ch == '{' || ch == '[') {
            if (depth == MAX_DEPTH) /* in shape or data_offsets, a number was due */
                return rd_err(p, i, p->t[open[depth - 1]].kind == TK_ARR
                                        ? "expected a non-negative integer"
                                        : "nested too deep");
            open[depth++] = add_tok(p, ch == '{' ? TK_OBJ : TK_ARR, i, 0);
            i++;
        } else if (ch == '}' || ch == ']') {
            i++;
            if (depth > 0)
                p->t[open[--depth]].end = i;
            if (depth == 0 && !p->top_end)
                p->top_end = i;
        } else {
            i++; /* ':', ',' or a stray byte, which cJSON rejects */
        }
    }
    return r;
}

/* cJSON's verdict on the structure, at the byte where it stopped. */
static int parse_failed(struct rd *p, size_t at)
{
    if (at >= p->n)
        return rd_err(p, p->n, "unexpected end of the header");
    if (p->top_end && at >= p->top_end)
        return rd_err(p, at, "unexpected text after the header object");
    /* Where a key should start, cJSON stops one byte past the byte that is not a
     * quote: a stray byte (in no string, number or literal of the scan) right after
     * '{' or ','. */
    size_t b = at - (at > 0);
    int in_tok = 0;
    for (size_t k = 0; k < p->nt && !in_tok; k++)
        in_tok = p->t[k].kind != TK_OBJ && p->t[k].kind != TK_ARR && p->t[k].start <= b &&
                 b < p->t[k].end;
    if (at > 0 && !in_tok && !is_ws(p->s[b]) && !strchr("{[,:]}\"", p->s[b])) {
        while (b > 0 && is_ws(p->s[b - 1]))
            b--;
        if (b > 0 && (p->s[b - 1] == '{' || p->s[b - 1] == ','))
            return rd_err(p, at - 1, "expected '\"'");
    }
    unsigned char ch = (unsigned char)p->s[at];
    if (ch >= 0x20 && ch < 0x7f)
        return rd_err(p, at, "unexpected '%c'", ch);
    return rd_err(p, at, "unexpected byte 0x%02x", ch);
}

/* The token of the walk's next key or value v; NULL if the scan and cJSON disagree,
 * which they cannot on a header both accepted (lost() reports it all the same). */
static const struct tok *next_tok(struct rd *p, enum tok_kind kind)
{
    if (p->k >= p->nt || p->t[p->k].kind != kind)
        return NULL;
    return &p->t[p->k++];
}

static const struct tok *val_tok(struct rd *p, const cJSON *v)
{
    return next_tok(p, cJSON_IsObject(v)   ? TK_OBJ
                       : cJSON_IsArray(v)  ? TK_ARR
                       : cJSON_IsString(v) ? TK_STR
                       : cJSON_IsNumber(v) ? TK_NUM
                                           : TK_LIT);
}

static int lost(struct rd *p)
{
    return rd_err(p, p->k < p->nt ? p->t[p->k].start : p->n,
                  "cannot match the JSON reader's items to the text");
}

/* Where the walk's next value starts (for errors about a value not yet taken). */
static size_t next_start(const struct rd *p)
{
    return p->k < p->nt ? p->t[p->k].start : p->n;
}

/* The token of value v when v is of the kind cJSON's test is() accepts; else NULL with
 * *r the error: the walk lost, or "expected 'c'" where the value starts. */
static const struct tok *typed_tok(struct rd *p, const cJSON *v,
                                   cJSON_bool (*is)(const cJSON *), char c, int *r)
{
    const struct tok *t = val_tok(p, v);
    if (!t) {
        *r = lost(p);
        return NULL;
    }
    if (!is(v)) {
        *r = rd_err(p, t->start, "expected '%c'", c);
        return NULL;
    }
    return t;
}

/* [uint, ...] with at most max entries */
static int rd_uint_array(struct rd *p, const cJSON *a, uint64_t *v, int max, int *count,
                         size_t *end)
{
    int k = 0, r = 0;
    const struct tok *at = typed_tok(p, a, cJSON_IsArray, '[', &r);
    if (!at)
        return r;
    for (const cJSON *e = a->child; e; e = e->next) {
        const struct tok *et = val_tok(p, e);
        if (!et)
            return lost(p);
        if (k >= max)
            return rd_err(p, et->start, "too many entries in array (at most %d)", max);
        if (!cJSON_IsNumber(e))
            return rd_err(p, et->start, "expected a non-negative integer");
        v[k++] = et->num;
    }
    *count = k;
    *end = at->end;
    return 0;
}

static int rd_tensor(struct rd *p, const cJSON *o, struct dsl_st_tensor *t, uint64_t off[2])
{
    int r = 0, have_dtype = 0, have_shape = 0, have_off = 0;
    const struct tok *ot = typed_tok(p, o, cJSON_IsObject, '{', &r);
    if (!ot)
        return r;
    for (const cJSON *m = o->child; m; m = m->next) {
        if (!next_tok(p, TK_STR))
            return lost(p);
        size_t vat = next_start(p), end = 0;
        if (strcmp(m->string, "dtype") == 0 && !have_dtype) {
            const struct tok *vt = typed_tok(p, m, cJSON_IsString, '"', &r);
            if (!vt)
                return r;
            int d = dsl_st_dtype_parse(m->valuestring);
            if (d < 0)
                return rd_err(p, vt->end, "unsupported dtype '%s'", m->valuestring);
            t->dtype = (enum dsl_st_dtype)d;
            have_dtype = 1;
        } else if (strcmp(m->string, "shape") == 0 && !have_shape) {
            if ((r = rd_uint_array(p, m, t->shape, DSL_ST_MAX_DIMS, &t->ndim, &end)) < 0)
                return r;
            have_shape = 1;
        } else if (strcmp(m->string, "data_offsets") == 0 && !have_off) {
            int k = 0;
            if ((r = rd_uint_array(p, m, off, 2, &k, &end)) < 0)
                return r;
            if (k != 2)
                return rd_err(p, end, "data_offsets must hold two numbers");
            have_off = 1;
        } else {
            return rd_err(p, vat, "unexpected or repeated field '%s'", m->string);
        }
    }
    if (!have_dtype || !have_shape || !have_off)
        return rd_err(p, ot->end, "tensor entry needs dtype, shape and data_offsets");
    return 0;
}

static int rd_metadata(struct rd *p, const cJSON *o, struct dsl_strvec *meta)
{
    int r = 0;
    const struct tok *ot = typed_tok(p, o, cJSON_IsObject, '{', &r);
    if (!ot)
        return r;
    for (const cJSON *m = o->child; m; m = m->next) {
        const struct tok *kt = next_tok(p, TK_STR);
        if (!kt)
            return lost(p);
        if (strchr(m->string, '=') || !m->string[0] || dsl_env_get(meta, m->string))
            return rd_err(p, kt->end, "unsupported or repeated metadata key '%s'", m->string);
        const struct tok *vt = typed_tok(p, m, cJSON_IsString, '"', &r);
        if (!vt)
            return r;
        if (strcmp(m->string, META_SHA) == 0 || strcmp(m->string, META_DATA_SHA) == 0) {
            /* 64 lowercase hex digits, spelled without escapes, so the header's own
             * digits sit at a known place and read as zeros while hashing */
            size_t k = 0;
            while (k < SHA_HEX && hexval(m->valuestring[k]) >= 0 &&
                   !(m->valuestring[k] >= 'A' && m->valuestring[k] <= 'F'))
                k++;
            if (k != SHA_HEX || m->valuestring[k] || vt->end - vt->start != SHA_HEX + 2)
                return rd_err(p, vt->start, "%s must be 64 lowercase hex digits", m->string);
            if (strcmp(m->string, META_SHA) == 0)
                p->sha_at = vt->start + 1;
        }
        dsl_env_set(meta, m->string, m->valuestring);
    }
    return 0;
}

/* The header's entries into the arrays at tp and offp (*np of them; the names are the
 * caller's to free) and its metadata into f->meta. */
static int rd_header(struct rd *p, struct dsl_st_file *f, struct dsl_st_tensor **tp,
                     uint64_t (**offp)[2], size_t *np)
{
    size_t alloc = 0;
    int have_meta = 0;
    /*
     * The scan stops at the first lexical fault; cJSON stops at the first structural
     * one. The earlier of the two is reported: after a quote lost to a flipped bit the
     * scan reads strings as text and fails far on, where cJSON already failed at the
     * quote; a bad escape fails both, the scan with the precise reason, from the start
     * of the same string.
     */
    int r = scan(p);
    /* cJSON wants the terminating NUL inside the length to accept a document that
     * ends there; the header is followed by tensor data in the file, so copy it */
    char *text = dsl_xmalloc(p->n + 1);
    memcpy(text, p->s, p->n);
    text[p->n] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, p->n + 1, &end, 1);
    if (!root) {
        size_t at = end && end >= text && end <= text + p->n ? (size_t)(end - text) : p->n;
        if (r == 0 || at < p->bad_at)
            r = parse_failed(p, at);
    }
    free(text);
    if (r < 0)
        goto out;
    if (!next_tok(p, TK_OBJ) || !cJSON_IsObject(root)) {
        r = lost(p);
        goto out;
    }
    for (const cJSON *m = root->child; m; m = m->next) {
        if (!next_tok(p, TK_STR)) {
            r = lost(p);
            goto out;
        }
        if (strcmp(m->string, "__metadata__") == 0) {
            if (have_meta) {
                r = rd_err(p, next_start(p), "repeated __metadata__");
                goto out;
            }
            have_meta = 1;
            if ((r = rd_metadata(p, m, &f->meta)) < 0)
                goto out;
            continue;
        }
        if (*np == alloc) {
            alloc = alloc ? 2 * alloc : 16;
            *tp = dsl_xreallocarray(*tp, alloc, sizeof(**tp));
            *offp = dsl_xreallocarray(*offp, alloc, sizeof(**offp));
        }
        struct dsl_st_tensor *t = &(*tp)[*np];
        memset(t, 0, sizeof(*t));
        t->name = dsl_xstrdup(m->string);
        (*np)++;
        if ((r = rd_tensor(p, m, t, (*offp)[*np - 1])) < 0)
            goto out;
    }
    r = 0;
out:
    cJSON_Delete(root);
    return r;
}

int dsl_st_header_parse(struct dsl_st_file *f, const char *s, size_t n,
                        struct dsl_st_tensor **tp, uint64_t (**offp)[2], size_t *np,
                        size_t *sha_at, char *err)
{
    struct rd p = {.s = s, .n = n, .file = f->path, .err = err};
    int r = rd_header(&p, f, tp, offp, np);
    free(p.t);
    *sha_at = p.sha_at;
    return r;
}
