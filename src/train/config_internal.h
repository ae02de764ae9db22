/*
 * Inside the ds_config reader (config.c): what its files share. Only config*.c include
 * this. config_msg.c places keys in the text and words the messages, config_keys.c holds
 * the checks of the special keys, config_table.c the key table, config.c walks the tree
 * and takes the flags, config_check.c holds the cross-key rules, config_doc.c prints the
 * table as the docs' key tables; each uses only the ones before.
 */
#ifndef DSL_TRAIN_CONFIG_INTERNAL_H
#define DSL_TRAIN_CONFIG_INTERNAL_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "dslaunch/common/strvec.h"
#include "dslaunch/train/train_config.h"

/* ---- key positions ---------------------------------------------------------------- */

struct keypos {
    char *path;
    size_t off;
    int obj;      /* which object of the text it is a key of (1, 2, ... in text order) */
};

struct parse_ctx {
    struct dsl_train_config *cfg;
    const char *file;   /* for messages */
    const char *text;   /* NULL for command-line values */
    size_t len;
    struct keypos *kp;
    size_t nkp;
    int cli;            /* 1: values come from dsl_train_config_set */
    const char *cli_value; /* the value text as given on the command line */
    int world_size;
    char *err;
    struct dsl_strvec autos; /* known keys whose value is "auto" (one error at the end) */
};

enum kind {
    K_SECTION,
    K_BOOL,    /* int */
    K_INT,     /* int */
    K_LONG,    /* long */
    K_U64,     /* uint64_t */
    K_SIZE,    /* size_t */
    K_DOUBLE,  /* double */
    K_STRING,  /* char *, null clears */
    K_SPECIAL, /* fn */
};

struct key;
typedef int (*special_fn)(struct parse_ctx *c, const struct key *k, const cJSON *v);

enum key_flags {
    KEY_BARE = 1 << 0, /* the flag takes no value and sets true */
};

/* One setting: the file's key, its type and place in struct dsl_train_config, its
 * bounds or check, and dstrain's flag for it where it has one (with the flag's help) */
struct key {
    const char *path;
    enum kind kind;
    size_t off;
    double min, max;
    special_fn fn;
    const char *flag; /* dstrain's --flag, '_' between words; NULL: none */
    unsigned flags;   /* enum key_flags */
    const char *help; /* what it is, in a line; a flag's is its --help line */
    const char *def;  /* the default, as a flag's word; NULL: zero, or none */
    const char *doc;  /* docs/config.md's notes, where help is not enough (NULL: help) */
    const char *def_doc; /* the default in words, where no value says it */
};

#define FIELD(c, k, T) ((T *)(void *)((char *)(c)->cfg + (k)->off))

/* the table (config_table.c), in dstrain --help's order for the rows with a flag */
extern const struct key dsl_cfgp_keys[];
extern const size_t dsl_cfgp_nkeys;
const struct key *dsl_cfgp_find_key(const char *path);
/* a DeepSpeed key dstrain knows of but does not implement (a warning, not an error) */
int dsl_cfgp_is_ignored(const char *prefix, const char *name, const char *path);
/* the special checks that config.c tells apart ("auto", a flag's word as a list) */
int dsl_cfgp_sp_batch(struct parse_ctx *c, const struct key *k, const cJSON *v);
int dsl_cfgp_sp_choice(struct parse_ctx *c, const struct key *k, const cJSON *v);
int dsl_cfgp_sp_optim_type(struct parse_ctx *c, const struct key *k, const cJSON *v);
int dsl_cfgp_sp_sched_type(struct parse_ctx *c, const struct key *k, const cJSON *v);
int dsl_cfgp_sp_warmup_type(struct parse_ctx *c, const struct key *k, const cJSON *v);
int dsl_cfgp_sp_hidden(struct parse_ctx *c, const struct key *k, const cJSON *v);
int dsl_cfgp_sp_betas(struct parse_ctx *c, const struct key *k, const cJSON *v);
int dsl_cfgp_sp_max_lr(struct parse_ctx *c, const struct key *k, const cJSON *v);
int dsl_cfgp_sp_zero_stage(struct parse_ctx *c, const struct key *k, const cJSON *v);
int dsl_cfgp_sp_anystring(struct parse_ctx *c, const struct key *k, const cJSON *v);
int dsl_cfgp_sp_tristate(struct parse_ctx *c, const struct key *k, const cJSON *v);

/* What a key takes, in words, for the docs' key tables */
struct key_words {
    const char *type;  /* "integer", "string", ... */
    char allowed[160]; /* "`mlp`, `gpt`", "1..16777216, null" */
    int bounds;        /* allowed is the row's min..max */
    int quoted;        /* a default is shown as code: `mlp` */
    int list;          /* a default is a comma-separated list, shown as [a, b] */
};
/* the words of a K_SPECIAL row (config_keys.c) */
void dsl_cfgp_special_words(const struct key *k, struct key_words *w);

/* positions and messages (config_msg.c) */
void dsl_cfgp_index_keys(struct parse_ctx *c);
void dsl_cfgp_linecol(const char *text, size_t off, int *line, int *col);
int dsl_cfgp_check_duplicates(struct parse_ctx *c);
__attribute__((format(printf, 3, 4))) int dsl_cfgp_err(struct parse_ctx *c, const char *path,
                                                       const char *fmt, ...);
__attribute__((format(printf, 3, 4))) void dsl_cfgp_warn(struct parse_ctx *c,
                                                         const char *path, const char *fmt,
                                                         ...);
const char *dsl_cfgp_raw_value(const struct parse_ctx *c, const char *path, const cJSON *v,
                               char *buf, size_t cap);
int dsl_cfgp_range_err(struct parse_ctx *c, const char *path, const cJSON *v, double min,
                       double max);
const char *dsl_cfgp_json_type(const cJSON *v);
int dsl_cfgp_get_integer(struct parse_ctx *c, const struct key *k, const cJSON *v, double min,
                         double max, double *out);

#endif
