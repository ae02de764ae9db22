/*
 * The command-line parser of every program (dslaunch and its commands, dstrain,
 * dsbench): a declarative table drives both the parsing and the generated --help.
 *
 * Long names are written with '_' between words and match either spelling (--num-gpus
 * and --num_gpus); --name=value and --name value both work, as do -x value, -xvalue and
 * -x=value for a short name. "--" ends the options. Values are checked as they are
 * parsed (integers, sizes and durations, each with its bounds), and every error names
 * the option and quotes the value as given: "option '--master_port' needs an integer
 * from 1 to 65535, not 'x'", "option '--keepalive' is out of range: allowed 2..3600
 * seconds, got '0.2'". --help shows every bounded option's range.
 *
 * The parser writes into a caller's struct through each option's offset; strings and
 * lists it stores are copies, owned by that struct (free() them and release the
 * strvecs when done).
 */
#ifndef DSLAUNCH_COMMON_OPT_H
#define DSLAUNCH_COMMON_OPT_H

#include <stddef.h>
#include <stdio.h>

#include "dslaunch/common/strvec.h"

enum dsl_opt_kind {
    DSL_OPT_FLAG,    /* no value: the int at offset becomes 1 */
    DSL_OPT_SET,     /* no value: the int at offset becomes tag (-v/-q, modes) */
    DSL_OPT_STRING,  /* char * at offset: a copy of the value (a previous one is freed) */
    DSL_OPT_INT,     /* int at offset, from min to max */
    DSL_OPT_SIZE,    /* size_t at offset: bytes, with an optional K/M/G/T/P/E suffix, from min
                        to max bytes (min = max = 0: unbounded) */
    DSL_OPT_SECONDS, /* double at offset: a duration in seconds (ms/s/m/h suffixes), from
                        min to max whole seconds (min = max = 0: unbounded) */
    DSL_OPT_LIST,    /* struct dsl_strvec at offset: the value appended (repeatable) */
    DSL_OPT_CALL,    /* fn decides; it takes a value only when arg is set */
};

struct dsl_opt {
    const char *name;   /* long name, '_' between words */
    char short_name;    /* 0: none */
    enum dsl_opt_kind kind;
    size_t offset;      /* of the field in the caller's struct */
    const char *arg;    /* value placeholder in --help (DSL_OPT_CALL: NULL = no value) */
    const char *help;   /* NULL hides the option from --help */
    const char *def;    /* default shown in --help, or NULL */
    long min, max;      /* DSL_OPT_INT, _SIZE, _SECONDS bounds, shown in --help */
    /* DSL_OPT_CALL: apply the option (val is NULL without arg) to the caller's struct;
       0, or a negative code with err set */
    int (*fn)(void *target, const struct dsl_opt *o, const char *val, char *err);
    int tag;            /* free for fn (e.g. which mode a flag selects) */
    const char *data;   /* free for fn (e.g. the config key a flag sets) */
};

enum dsl_opt_flags {
    /* the first word that is not an option ends the options: it and everything after
       it go to rest untouched (dslaunch's PROGRAM ARGS...) */
    DSL_OPT_STOP_AT_ARG = 1 << 0,
    /* options not in the table go to rest in order, with the words after them, instead
       of being errors (a command that forwards them to another parser) */
    DSL_OPT_KEEP_UNKNOWN = 1 << 1,
};

struct dsl_opt_parser {
    const char *prog;            /* "dslaunch", "dstrain", "dslaunch sync": for errors */
    const struct dsl_opt *opts;
    size_t nopts;
    unsigned flags;              /* enum dsl_opt_flags */
};

/**
 * Parse argv[1..argc-1] into target. Words that are not options (and, with
 * DSL_OPT_KEEP_UNKNOWN, unknown options) are appended to rest; with rest NULL such a
 * word is an error ("unexpected argument 'x'"). Returns 0, or DSL_EUSAGE (or fn's
 * code) with err set; target may then hold some parsed values, which the caller
 * releases as usual.
 */
int dsl_opt_parse(const struct dsl_opt_parser *p, void *target, int argc, char **argv,
                  struct dsl_strvec *rest, char *err);

/**
 * The option that argv[i] starts (for a caller that passes options on, as dsl_opt_parse
 * read them: argv must have parsed), with *words set to how many words it takes, 1 or 2
 * (its value in the next word). NULL with *words 0 where argv[i] is no option of the
 * table: the program, "--", or an unknown option.
 */
const struct dsl_opt *dsl_opt_at(const struct dsl_opt_parser *p, int argc, char **argv, int i,
                                 int *words);

/** v bytes as --help writes sizes: the largest exact K/M/G/T/P/E unit ("64K", "1000"). */
void dsl_opt_format_size(char *buf, size_t cap, size_t v);

/** One line per visible option: "  -H, --hostfile FILE   help (default: d)". */
void dsl_opt_help(const struct dsl_opt_parser *p, FILE *f);

/**
 * For a subcommand without its own --help option: when argv[1..argc-1] holds -h or
 * --help before any "--", print usage (one or more lines), a blank line and p's options
 * to f and return 1; otherwise 0.
 */
int dsl_opt_help_if_asked(const struct dsl_opt_parser *p, const char *usage, int argc,
                          char **argv, FILE *f);

#endif
