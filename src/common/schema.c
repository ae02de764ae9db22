/*
 * The schema walker (schema.h): one encoder and one decoder for every table of rows.
 *
 * A row names a member by its offset in the struct, so the walker reads and writes
 * through typed pointers made from (char *)obj + off; the tables are the only place a
 * member's name, kind and bounds are written. Nothing here allocates a cJSON object
 * that outlives the call, and decoding fills a member only with what it copied.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/schema.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define AT(obj, off, type) ((type *)(void *)((char *)(obj) + (off)))
#define CAT(obj, off, type) ((const type *)(const void *)((const char *)(obj) + (off)))

static void init_members(const struct dsl_schema *s, void *obj)
{
    for (int i = 0; i < s->nrows; i++) {
        const struct dsl_schema_row *r = &s->rows[i];
        if (r->kind == DSL_SK_STRVEC)
            dsl_strvec_init(AT(obj, r->off, struct dsl_strvec));
        else if (r->kind == DSL_SK_OBJECT)
            init_members(r->sub, AT(obj, r->off, char));
    }
}

/* ---- encoding ---- */

static double number_of(const struct dsl_schema_row *r, const void *obj)
{
    switch (r->kind) {
    case DSL_SK_INT:
    case DSL_SK_BOOL: return *CAT(obj, r->off, int);
    case DSL_SK_U64: return (double)*CAT(obj, r->off, uint64_t);
    default: return *CAT(obj, r->off, double);
    }
}

static int is_set(const struct dsl_schema_row *r, const void *obj)
{
    if (r->flags & DSL_SF_FLAGGED)
        return *CAT(obj, r->aux, int) != 0;
    switch (r->kind) {
    case DSL_SK_INT:
    case DSL_SK_U64:
    case DSL_SK_DOUBLE:
    case DSL_SK_BOOL:
        return (r->flags & DSL_SF_POSITIVE) ? number_of(r, obj) > 0 : number_of(r, obj) != 0;
    case DSL_SK_STR:
    case DSL_SK_OBJPTR: return *CAT(obj, r->off, void *) != NULL;
    case DSL_SK_STRVEC: return CAT(obj, r->off, struct dsl_strvec)->nr > 0;
    case DSL_SK_TEXT:
    case DSL_SK_CHAR: return *CAT(obj, r->off, char) != '\0';
    default: return *CAT(obj, r->aux, int) > 0;
    }
}

static void encode_row(const struct dsl_schema_row *r, const void *obj, cJSON *o)
{
    const int *count = CAT(obj, r->aux, int);
    cJSON *a;
    switch (r->kind) {
    case DSL_SK_BOOL: cJSON_AddNumberToObject(o, r->name, number_of(r, obj) > 0); break;
    case DSL_SK_INT:
    case DSL_SK_U64:
    case DSL_SK_DOUBLE: cJSON_AddNumberToObject(o, r->name, number_of(r, obj)); break;
    case DSL_SK_STR: {
        const char *s = *CAT(obj, r->off, char *);
        if (!s && (r->flags & DSL_SF_NULLABLE))
            cJSON_AddNullToObject(o, r->name);
        else
            cJSON_AddStringToObject(o, r->name, s ? s : "");
        break;
    }
    case DSL_SK_TEXT: cJSON_AddStringToObject(o, r->name, CAT(obj, r->off, char)); break;
    case DSL_SK_CHAR: {
        char c[2] = {*CAT(obj, r->off, char), '\0'};
        cJSON_AddStringToObject(o, r->name, c);
        break;
    }
    case DSL_SK_STRVEC: {
        const struct dsl_strvec *sv = CAT(obj, r->off, struct dsl_strvec);
        a = cJSON_AddArrayToObject(o, r->name);
        for (size_t i = 0; i < sv->nr; i++)
            cJSON_AddItemToArray(a, cJSON_CreateString(sv->v[i]));
        break;
    }
    case DSL_SK_FLAGS:
        a = cJSON_AddArrayToObject(o, r->name);
        for (int i = 0; i < *count; i++)
            cJSON_AddItemToArray(a, cJSON_CreateNumber((*CAT(obj, r->off, int *))[i]));
        break;
    case DSL_SK_DOUBLES:
        a = cJSON_AddArrayToObject(o, r->name);
        for (int i = 0; i < *count; i++)
            cJSON_AddItemToArray(a, cJSON_CreateNumber((*CAT(obj, r->off, double *))[i]));
        break;
    case DSL_SK_ARRAY:
        a = cJSON_AddArrayToObject(o, r->name);
        for (int i = 0; i < *count; i++) {
            cJSON *e = cJSON_CreateObject();
            dsl_schema_encode(r->sub, *CAT(obj, r->off, char *) + (size_t)i * r->size, e);
            cJSON_AddItemToArray(a, e);
        }
        break;
    case DSL_SK_OBJECT:
        dsl_schema_encode(r->sub, CAT(obj, r->off, char), cJSON_AddObjectToObject(o, r->name));
        break;
    case DSL_SK_OBJPTR:
        dsl_schema_encode(r->sub, *CAT(obj, r->off, void *), cJSON_AddObjectToObject(o, r->name));
        break;
    case DSL_SK_CUSTOM: r->custom->encode(obj, o); break;
    }
}

void dsl_schema_encode(const struct dsl_schema *s, const void *obj, cJSON *o)
{
    int wrote = 0;
    for (int i = 0; i < s->nrows; i++) {
        const struct dsl_schema_row *r = &s->rows[i];
        if (r->flags & DSL_SF_WITH_PREV) {
            if (!wrote)
                continue;
        } else if ((r->flags & DSL_SF_WHEN_SET) && !is_set(r, obj)) {
            wrote = 0;
            continue;
        }
        encode_row(r, obj, o);
        wrote = 1;
    }
}

/* ---- decoding ---- */

static int decode_number(const struct dsl_schema_row *r, const cJSON *v, void *obj, char *err)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return dsl_seterr(err, DSL_EPROTO, "member '%s' missing or not a number", r->name);
    double d = v->valuedouble, lo = r->lo, hi = r->hi;
    if (lo == 0 && hi == 0) { /* the kind's own range */
        lo = r->kind == DSL_SK_DOUBLE ? -HUGE_VAL : r->kind == DSL_SK_U64 ? 0 : -2147483648.0;
        hi = r->kind == DSL_SK_DOUBLE ? HUGE_VAL
             : r->kind == DSL_SK_U64  ? 9007199254740992.0
                                      : 2147483647.0;
    }
    if (r->kind != DSL_SK_DOUBLE && d != floor(d))
        return dsl_seterr(err, DSL_EPROTO, "member '%s' is not an integer", r->name);
    if (!(d >= lo && d <= hi)) {
        if (r->bad)
            return dsl_seterr(err, DSL_EPROTO, "bad %s %.17g", r->bad, d);
        return dsl_seterr(err, DSL_EPROTO, "member '%s' out of range", r->name);
    }
    if (r->kind == DSL_SK_DOUBLE)
        *AT(obj, r->off, double) = d;
    else if (r->kind == DSL_SK_U64)
        *AT(obj, r->off, uint64_t) = (uint64_t)d;
    else
        *AT(obj, r->off, int) = (int)d;
    return 0;
}

static int decode_string(const struct dsl_schema_row *r, const cJSON *v, void *obj, char *err)
{
    if (cJSON_IsNull(v) && r->kind == DSL_SK_STR && (r->flags & DSL_SF_NULLABLE))
        return 0; /* stays NULL */
    if (!cJSON_IsString(v) || !v->valuestring)
        return dsl_seterr(err, DSL_EPROTO, "member '%s' missing or not a string", r->name);
    size_t n = strlen(v->valuestring);
    size_t max = r->kind == DSL_SK_TEXT ? r->size - 1 : r->kind == DSL_SK_CHAR ? 1 : (size_t)r->hi;
    if (max && n > max)
        return dsl_seterr(err, DSL_EPROTO, "member '%s' is too long", r->name);
    if (r->kind == DSL_SK_TEXT)
        memcpy(AT(obj, r->off, char), v->valuestring, n + 1);
    else if (r->kind == DSL_SK_CHAR)
        *AT(obj, r->off, char) = v->valuestring[0];
    else
        *AT(obj, r->off, char *) = dsl_xstrdup(v->valuestring);
    return 0;
}

/* The array member of r: its length checked against the row's bounds. */
static int array_of(const struct dsl_schema_row *r, const cJSON *v, int *n, char *err)
{
    if (!cJSON_IsArray(v))
        return dsl_seterr(err, DSL_EPROTO, "member '%s' missing or not an array", r->name);
    *n = cJSON_GetArraySize(v);
    if ((r->lo != 0 || r->hi != 0) && !(*n >= r->lo && *n <= r->hi))
        return dsl_seterr(err, DSL_EPROTO, "member '%s' holds %d entries, allowed %g..%g",
                          r->name, *n, r->lo, r->hi);
    return 0;
}

static int decode_numbers(const struct dsl_schema_row *r, const cJSON *v, void *obj, int n,
                          char *err)
{
    int *count = AT(obj, r->aux, int);
    if ((r->flags & DSL_SF_SAME_COUNT) && n != *count)
        return dsl_seterr(err, DSL_EPROTO, "member '%s' differs in length from the one before",
                          r->name);
    int is_flags = r->kind == DSL_SK_FLAGS;
    void *vals = dsl_xcalloc((size_t)n + 1, is_flags ? sizeof(int) : sizeof(double));
    *AT(obj, r->off, void *) = vals;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v)
    {
        if (!cJSON_IsNumber(e) || (!is_flags && !isfinite(e->valuedouble)))
            return dsl_seterr(err, DSL_EPROTO, "member '%s' holds a non-number", r->name);
        if (is_flags)
            ((int *)vals)[i++] = e->valuedouble != 0;
        else
            ((double *)vals)[i++] = e->valuedouble;
    }
    *count = n;
    return 0;
}

static int decode_array(const struct dsl_schema_row *r, const cJSON *v, void *obj, int n,
                        char *err)
{
    int *count = AT(obj, r->aux, int);
    char *elems = dsl_xcalloc((size_t)n + 1, r->size);
    *AT(obj, r->off, char *) = elems;
    *count = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v)
    {
        char *el = elems + (size_t)(*count)++ * r->size; /* counted first: released whole */
        init_members(r->sub, el);
        if (!cJSON_IsObject(e))
            return dsl_seterr(err, DSL_EPROTO, "%s entry is not an object", r->sub->name);
        int rc = dsl_schema_decode(r->sub, el, e, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int decode_row(const struct dsl_schema_row *r, const cJSON *v, void *obj, char *err)
{
    int n, rc;
    switch (r->kind) {
    case DSL_SK_INT:
    case DSL_SK_U64:
    case DSL_SK_DOUBLE:
    case DSL_SK_BOOL: return decode_number(r, v, obj, err);
    case DSL_SK_STR:
    case DSL_SK_TEXT:
    case DSL_SK_CHAR: return decode_string(r, v, obj, err);
    case DSL_SK_STRVEC: {
        if ((rc = array_of(r, v, &n, err)) < 0)
            return rc;
        const cJSON *e;
        cJSON_ArrayForEach(e, v)
        {
            if (!cJSON_IsString(e) || !e->valuestring)
                return dsl_seterr(err, DSL_EPROTO, "member '%s' holds a non-string", r->name);
            dsl_strvec_push(AT(obj, r->off, struct dsl_strvec), e->valuestring);
        }
        return 0;
    }
    case DSL_SK_FLAGS:
    case DSL_SK_DOUBLES:
        if ((rc = array_of(r, v, &n, err)) < 0)
            return rc;
        return decode_numbers(r, v, obj, n, err);
    case DSL_SK_ARRAY:
        if ((rc = array_of(r, v, &n, err)) < 0)
            return rc;
        return decode_array(r, v, obj, n, err);
    case DSL_SK_OBJECT:
    case DSL_SK_OBJPTR: {
        if (!cJSON_IsObject(v))
            return dsl_seterr(err, DSL_EPROTO, "member '%s' is not an object", r->name);
        void *sub = AT(obj, r->off, char);
        if (r->kind == DSL_SK_OBJPTR) {
            sub = dsl_xcalloc(1, r->size);
            *AT(obj, r->off, void *) = sub;
        }
        init_members(r->sub, sub);
        return dsl_schema_decode(r->sub, sub, v, err);
    }
    case DSL_SK_CUSTOM: return r->custom->decode(obj, v, err);
    }
    return 0;
}

int dsl_schema_decode(const struct dsl_schema *s, void *obj, const cJSON *o, char *err)
{
    int read = 0;
    for (int i = 0; i < s->nrows; i++) {
        const struct dsl_schema_row *r = &s->rows[i];
        if (r->kind == DSL_SK_CUSTOM) { /* it reads its own members: o, not one of them */
            int rc = r->custom->decode ? r->custom->decode(obj, o, err) : 0;
            if (rc < 0)
                return rc;
            continue;
        }
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, r->name);
        if ((r->flags & DSL_SF_WITH_PREV) ? !read : (!v && (r->flags & DSL_SF_OPTIONAL))) {
            if (r->kind == DSL_SK_INT || r->kind == DSL_SK_BOOL)
                *AT(obj, r->off, int) = (int)r->def;
            else if (r->kind == DSL_SK_DOUBLE)
                *AT(obj, r->off, double) = r->def;
            read = 0;
            continue;
        }
        int rc = decode_row(r, v, obj, err);
        if (rc < 0)
            return rc;
        if (r->flags & DSL_SF_FLAGGED)
            *AT(obj, r->aux, int) = 1;
        read = 1;
    }
    return s->check ? s->check(obj, err) : 0;
}
