/*
 * The key table (config_table.c) as docs/config.md's key tables: one markdown table per
 * section of that page, a row per key with its type, default, allowed values and notes.
 * `dstrain keys SECTION` prints one; scripts/gen-docs.py puts them between the page's
 * marker comments, and a test fails when the page differs, so the docs cannot drift
 * from the table.
 *
 * A default is the value dsl_train_config_init() leaves in the key's field (the row's
 * word after its check), so a default set in code shows as it is; a special key shows
 * its word, and a row's def_doc wins where the value alone would mislead.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config_internal.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/banned.h"

#define BIG 9.007199254740992e15 /* 2^53 */

/* The page's sections: a key belongs to the first whose prefix ("fp16.") or whole key
 * ("seed") matches; "top" takes every other key outside an object. */
static const struct {
    const char *name;
    const char *match[4];
} sections[] = {
    {"batch", {"train_batch_size", "train_micro_batch_size_per_gpu",
               "gradient_accumulation_steps"}},
    {"optimizer", {"optimizer."}},
    {"scheduler", {"scheduler."}},
    {"precision", {"fp16.", "bf16.", "bfloat16."}},
    {"top", {""}},
    {"zero_optimization", {"zero_optimization."}},
    {"dstrain", {"dstrain."}},
    {"monitors", {"csv_monitor.", "tensorboard."}},
};
#define NSECTIONS (sizeof(sections) / sizeof(sections[0]))

static int matches(const char *m, const char *path)
{
    size_t n = strlen(m);
    if (n == 0) /* "top" */
        return strchr(path, '.') == NULL;
    if (m[n - 1] == '.')
        return strncmp(path, m, n) == 0;
    return strcmp(path, m) == 0;
}

/* the section of a key, or -1 */
static int section_of(const char *path)
{
    for (size_t s = 0; s < NSECTIONS; s++)
        for (size_t i = 0; i < 4 && sections[s].match[i]; i++)
            if (matches(sections[s].match[i], path))
                return (int)s;
    return -1;
}

/* a bound or default as people write it: 2^53, 1000000, 0.001, 1e-8, 1e30 */
static const char *fmt_num(double x, char *buf, size_t cap)
{
    if (x == BIG) {
        snprintf(buf, cap, "2^53");
        return buf;
    }
    if (x > -1e15 && x < 1e15 && x == (double)(int64_t)x) { /* in range before the cast */
        snprintf(buf, cap, "%.0f", x);
        return buf;
    }
    char tmp[48];
    snprintf(tmp, sizeof(tmp), "%g", x);
    char *e = strchr(tmp, 'e');
    if (!e) {
        snprintf(buf, cap, "%s", tmp);
        return buf;
    }
    /* %g's exponent "e+30", "e-08" as "e30", "e-8" */
    const char *sign = e[1] == '-' ? "-" : "", *digits = e + 2;
    while (digits[0] == '0' && digits[1])
        digits++;
    *e = '\0';
    snprintf(buf, cap, "%se%s%s", tmp, sign, digits);
    return buf;
}

void dsl_train_doc_cell(FILE *f, const char *s)
{
    fputs("| ", f);
    for (; *s; s++) {
        if (*s == '|')
            fputc('\\', f);
        fputc(*s == '\n' ? ' ' : *s, f);
    }
    fputc(' ', f);
}

static void key_words(const struct key *k, struct key_words *w)
{
    static const char *const types[] = {
        [K_BOOL] = "boolean", [K_INT] = "integer", [K_LONG] = "integer", [K_U64] = "integer",
        [K_SIZE] = "integer", [K_DOUBLE] = "number", [K_STRING] = "string"};
    if (k->kind == K_SPECIAL) {
        dsl_cfgp_special_words(k, w);
    } else {
        *w = (struct key_words){.type = types[k->kind], .quoted = k->kind == K_STRING,
                                .bounds = k->kind != K_BOOL && k->kind != K_STRING};
        snprintf(w->allowed, sizeof(w->allowed), "%s",
                 k->kind == K_BOOL ? "true, false" : k->kind == K_STRING ? "any, null" : "");
    }
    if (w->bounds) {
        char lo[32], hi[32];
        snprintf(w->allowed, sizeof(w->allowed), "%s..%s", fmt_num(k->min, lo, sizeof(lo)),
                 fmt_num(k->max, hi, sizeof(hi)));
    }
}

/* the default's words: the row's def_doc, else the value init left in the field */
static void key_default(const struct key *k, const struct key_words *w,
                        const struct dsl_train_config *cfg, char *buf, size_t cap)
{
    const void *p = (const char *)cfg + k->off;
    const char *word = k->def;
    if (k->def_doc) {
        snprintf(buf, cap, "%s", k->def_doc);
        return;
    }
    switch (k->kind) {
    case K_BOOL: snprintf(buf, cap, "%s", *(const int *)p ? "true" : "false"); return;
    case K_INT: snprintf(buf, cap, "%d", *(const int *)p); return;
    case K_LONG: snprintf(buf, cap, "%ld", *(const long *)p); return;
    case K_U64: snprintf(buf, cap, "%" PRIu64, *(const uint64_t *)p); return;
    case K_SIZE: snprintf(buf, cap, "%zu", *(const size_t *)p); return;
    case K_DOUBLE: fmt_num(*(const double *)p, buf, cap); return;
    case K_STRING: word = *(char *const *)p; break;
    default: break;
    }
    if (!word)
        snprintf(buf, cap, "none");
    else if (w->quoted)
        snprintf(buf, cap, "`%s`", word);
    else if (w->list) { /* "0.9,0.999" as [0.9, 0.999] */
        size_t o = 0;
        buf[o++] = '[';
        for (; *word && o + 3 < cap; word++) {
            buf[o++] = *word;
            if (*word == ',')
                buf[o++] = ' ';
        }
        buf[o++] = ']';
        buf[o] = '\0';
    } else
        snprintf(buf, cap, "%s", word);
}

static void print_section(FILE *f, size_t s, const struct dsl_train_config *cfg)
{
    fputs("| key | type | default | allowed | notes |\n|---|---|---|---|---|\n", f);
    for (size_t i = 0; i < dsl_cfgp_nkeys; i++) {
        const struct key *k = &dsl_cfgp_keys[i];
        if (k->kind == K_SECTION || section_of(k->path) != (int)s)
            continue;
        struct key_words w;
        char def[160], name[160];
        key_words(k, &w);
        key_default(k, &w, cfg, def, sizeof(def));
        snprintf(name, sizeof(name), "`%s`", k->path);
        dsl_train_doc_cell(f, name);
        dsl_train_doc_cell(f, w.type);
        dsl_train_doc_cell(f, def);
        dsl_train_doc_cell(f, w.allowed);
        dsl_train_doc_cell(f, k->doc ? k->doc : k->help ? k->help : "");
        fputs("|\n", f);
    }
}

int dsl_train_config_doc(FILE *f, const char *section, char *err)
{
    struct dsl_train_config cfg;
    int found = 0;
    for (size_t i = 0; i < dsl_cfgp_nkeys; i++)
        if (dsl_cfgp_keys[i].kind != K_SECTION && section_of(dsl_cfgp_keys[i].path) < 0)
            return dsl_seterr(err, -EINVAL, "key '%s' belongs to no section of the docs",
                              dsl_cfgp_keys[i].path);
    for (size_t s = 0; section && s < NSECTIONS; s++)
        found |= strcmp(section, sections[s].name) == 0;
    if (section && !found) {
        char list[256] = "";
        for (size_t s = 0, used = 0; s < NSECTIONS && used < sizeof(list); s++)
            used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", s ? ", " : "",
                                     sections[s].name);
        return dsl_seterr(err, DSL_EUSAGE, "unknown section '%s' (sections: %s)", section,
                          list);
    }
    dsl_train_config_init(&cfg);
    for (size_t s = 0; s < NSECTIONS; s++) {
        if (section && strcmp(section, sections[s].name) != 0)
            continue;
        if (!section)
            fprintf(f, "%s## %s\n\n", s ? "\n" : "", sections[s].name);
        print_section(f, s, &cfg);
    }
    dsl_train_config_release(&cfg);
    return 0;
}
