/*
 * Schemas: a struct and the JSON object that carries it, described once as a table of
 * rows (member name, kind, offset, bounds, default, flags) and walked by one encoder and
 * one decoder: the control protocol's messages (proto/proto.c) and the plan `--dry-run`
 * prints (plan/plan.c).
 *
 * Decoding is strict: a required member must be present with its JSON type; numbers are
 * finite, integral where the member is an integer, and within the row's bounds; strings
 * and arrays are no longer than the row allows. Unknown members are ignored, so a newer
 * peer may add members an older one does not know. Strings and arrays are copied out,
 * so no cJSON object outlives a call. The JSON member order is the table's order.
 */
#ifndef DSLAUNCH_SCHEMA_H
#define DSLAUNCH_SCHEMA_H

#include <stddef.h>

struct cJSON;

enum dsl_schema_kind {
    DSL_SK_INT,    /* int: an integral number */
    DSL_SK_U64,    /* uint64_t: an integral number (bounds at most 2^53) */
    DSL_SK_DOUBLE, /* double: a finite number */
    DSL_SK_BOOL,   /* int: written as 1 when > 0, else 0; read as an integer */
    DSL_SK_STR,    /* char *, owned: a string (NULL is written as "") */
    DSL_SK_TEXT,   /* char[size] inline: a string of at most size - 1 bytes */
    DSL_SK_CHAR,   /* char: a string of at most one byte ("" for 0) */
    DSL_SK_STRVEC, /* struct dsl_strvec: an array of strings */
    DSL_SK_FLAGS,  /* int *, owned, count in the int at aux: numbers, read as 0 or 1 */
    DSL_SK_DOUBLES, /* double *, owned, count in the int at aux: finite numbers */
    DSL_SK_ARRAY,  /* element *, owned, count in the int at aux: objects of sub, each
                      size bytes */
    DSL_SK_OBJECT, /* a struct inline: an object of sub */
    DSL_SK_OBJPTR, /* a struct *, owned (size bytes): an object of sub; NULL: absent */
    DSL_SK_CUSTOM, /* the row's own encode and decode */
};

/* Row flags. */
enum {
    DSL_SF_OPTIONAL = 1 << 0,  /* may be absent when read: the member keeps def */
    DSL_SF_WHEN_SET = 1 << 1,  /* written only when set: a number != 0, a string or
                                  pointer not NULL, an array not empty */
    DSL_SF_OPT = DSL_SF_OPTIONAL | DSL_SF_WHEN_SET,
    DSL_SF_POSITIVE = 1 << 2,  /* with WHEN_SET: a number is set when > 0 */
    DSL_SF_FLAGGED = 1 << 3,   /* set means the int at aux is != 0; reading the member
                                  sets that int to 1 */
    DSL_SF_WITH_PREV = 1 << 4, /* written and required exactly when the row before was
                                  written or read */
    DSL_SF_SAME_COUNT = 1 << 5, /* an array whose count (at aux) an earlier row set:
                                  its length must be that count */
    DSL_SF_NULLABLE = 1 << 6,  /* STR: NULL is written as null, and null reads as NULL */
};

struct dsl_schema;

/* A member of a shape no kind describes: encode adds it (or them) to o; decode reads
   them from o, returning 0 or a negative code with err set (NULL: a schema that is
   only written, as `--dry-run`'s). */
struct dsl_schema_custom {
    void (*encode)(const void *obj, struct cJSON *o);
    int (*decode)(void *obj, const struct cJSON *o, char *err);
};

struct dsl_schema_row {
    const char *name;
    enum dsl_schema_kind kind;
    size_t off;          /* of the member in the struct */
    double lo, hi;       /* numbers: bounds; strings, arrays: bounds of the length;
                            both 0: none but the kind's own */
    double def;          /* numbers: the value of an absent optional member */
    unsigned flags;      /* DSL_SF_* */
    size_t aux;          /* arrays: offset of the int count; FLAGGED: of the int flag */
    size_t size;         /* TEXT: the array's size; ARRAY, OBJPTR: an element's */
    const struct dsl_schema *sub;          /* ARRAY, OBJECT, OBJPTR */
    const struct dsl_schema_custom *custom; /* CUSTOM */
    const char *bad;     /* optional: the words of an out-of-range error, which then
                            reads "bad <words> <value>" */
};

struct dsl_schema {
    const char *name;    /* "hello", "interface": for messages */
    const struct dsl_schema_row *rows;
    int nrows;
    /* optional: the rules between members, after every row was read */
    int (*check)(const void *obj, char *err);
};

/** Add the members of obj that s describes to the JSON object o. */
void dsl_schema_encode(const struct dsl_schema *s, const void *obj, struct cJSON *o);
/**
 * Read the members s describes from the JSON object o into obj (zeroed by the caller,
 * or holding only what s leaves alone). On error obj may hold some members already:
 * every owned one is in place for the caller's release, and err says why.
 */
int dsl_schema_decode(const struct dsl_schema *s, void *obj, const struct cJSON *o, char *err);

#endif
