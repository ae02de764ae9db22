/*
 * ds_config.json -> struct dsl_train_config (see train_config.h and docs/config.md).
 *
 * Theory of operation. The file is parsed by cJSON in one go; cJSON's tree is walked
 * once, object by object, against a table of known keys (dsl_cfgp_keys[] in
 * config_table.c, dotted paths such as "optimizer.params.lr"). A section entry
 * descends, a leaf entry converts and range-checks its value into the struct, anything
 * else becomes a warning. Command line overrides (dsl_train_config_set) go through the
 * same leaf entries, with the flag's word made a value of the key's type (a string
 * key's word byte for byte, never re-read as JSON text), so a flag and a key can never
 * disagree on what is valid. Nothing of cJSON outlives a call.
 *
 * cJSON keeps no positions, so messages get theirs from a small scan of the text
 * (config_msg.c); syntax errors use the offset cJSON stops at.
 *
 * The batch triple and cross-field rules need the world size and the final overrides,
 * so they live in dsl_train_config_finish() (config_check.c), which reads only the
 * values as written (cfg->given) and can therefore run again after more overrides.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "config_internal.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define MAX_CONFIG_BYTES (16u << 20)

/* ---- leaves ---------------------------------------------------------------------- */

static int apply_leaf(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    double d = 0.0;
    int r;
    switch (k->kind) {
    case K_SECTION:
        return dsl_cfgp_err(c, k->path, "expected an object for '%s', got %s", k->path,
                            dsl_cfgp_json_type(v));
    case K_BOOL:
        if (!cJSON_IsBool(v))
            return dsl_cfgp_err(c, k->path, "expected true or false for '%s', got %s", k->path,
                                dsl_cfgp_json_type(v));
        *FIELD(c, k, int) = cJSON_IsTrue(v) ? 1 : 0;
        return 0;
    case K_INT:
    case K_LONG:
    case K_U64:
    case K_SIZE:
        if ((r = dsl_cfgp_get_integer(c, k, v, k->min, k->max, &d)) < 0)
            return r;
        if (k->kind == K_INT)
            *FIELD(c, k, int) = (int)d;
        else if (k->kind == K_LONG)
            *FIELD(c, k, long) = (long)d;
        else if (k->kind == K_U64)
            *FIELD(c, k, uint64_t) = (uint64_t)d;
        else
            *FIELD(c, k, size_t) = (size_t)d;
        return 0;
    case K_DOUBLE:
        if (!cJSON_IsNumber(v))
            return dsl_cfgp_err(c, k->path, "expected a number for '%s', got %s", k->path,
                                dsl_cfgp_json_type(v));
        d = v->valuedouble;
        if (!isfinite(d) || d < k->min || d > k->max)
            return dsl_cfgp_range_err(c, k->path, v, k->min, k->max);
        *FIELD(c, k, double) = d;
        return 0;
    case K_STRING: {
        char **p = FIELD(c, k, char *);
        if (cJSON_IsNull(v)) {
            free(*p);
            *p = NULL;
            return 0;
        }
        if (!cJSON_IsString(v) || !v->valuestring[0])
            return dsl_cfgp_err(c, k->path, "expected a non-empty string for '%s', got %s", k->path,
                                dsl_cfgp_json_type(v));
        free(*p);
        *p = dsl_xstrdup(v->valuestring);
        return 0;
    }
    case K_SPECIAL:
        return k->fn(c, k, v);
    }
    return 0;
}

/* ---- walking the tree ------------------------------------------------------------- */

/* "auto" for a key that is not a string: only DeepSpeed's HuggingFace integration fills
 * it in. Noted here, reported once for all such keys when the file is read. The batch
 * keys have their own message (it can say which number to write); "dstrain.backend"
 * takes "auto" as one of its values. */
static int auto_value(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "auto") != 0 || k->kind == K_STRING ||
        k->kind == K_SECTION ||
        (k->kind == K_SPECIAL && (k->fn == dsl_cfgp_sp_batch || k->fn == dsl_cfgp_sp_choice)))
        return 0;
    for (size_t i = 0; i < c->autos.nr; i++)
        if (!strcmp(c->autos.v[i], k->path))
            return 1;
    dsl_strvec_push(&c->autos, k->path);
    return 1;
}

static int walk(struct parse_ctx *c, const char *prefix, const cJSON *obj);

static int apply(struct parse_ctx *c, const char *path, const struct key *k, const cJSON *v)
{
    if (auto_value(c, k, v))
        return 0;
    if (!strncmp(path, "dstrain.model.", 14) && strcmp(path, "dstrain.model.type"))
        c->cfg->given.model |= strcmp(path, "dstrain.model.hidden") ? DSL_CFG_GIVEN_GPT
                                                                    : DSL_CFG_GIVEN_MLP;
    if (!strcmp(path, "dstrain.data.val_fraction"))
        c->cfg->given.data |= DSL_CFG_GIVEN_VAL_FRACTION;
    if (!strcmp(path, "dstrain.data.stride"))
        c->cfg->given.data |= DSL_CFG_GIVEN_STRIDE;
    if (!strcmp(path, "zero_optimization.reduce_bucket_size"))
        c->cfg->given.zero |= DSL_CFG_GIVEN_BUCKET;
    if (!strcmp(path, "zero_optimization.overlap_comm"))
        c->cfg->given.zero |= DSL_CFG_GIVEN_OVERLAP;
    if (k->kind != K_SECTION)
        return apply_leaf(c, k, v);
    /* DeepSpeed's legacy "zero_optimization": true|false means stage 1|0 */
    if (strcmp(path, "zero_optimization") == 0 && cJSON_IsBool(v)) {
        c->cfg->zero.stage = cJSON_IsTrue(v) ? 1 : 0;
        return 0;
    }
    if (cJSON_IsNull(v) && strcmp(path, "scheduler") == 0) {
        c->cfg->scheduler.type = DSL_SCHED_NONE;
        return 0;
    }
    if (!cJSON_IsObject(v))
        return dsl_cfgp_err(c, path, "expected an object for '%s', got %s", path,
                            dsl_cfgp_json_type(v));
    return walk(c, path, v);
}

static int walk(struct parse_ctx *c, const char *prefix, const cJSON *obj)
{
    int r = 0;
    /* two passes: "type" first, so that an optimizer's or scheduler's parameters never
     * depend on the order of the keys */
    for (int pass = 0; pass < 2 && r == 0; pass++) {
        for (const cJSON *it = obj->child; it && r == 0; it = it->next) {
            int is_type = strcmp(it->string, "type") == 0;
            if (is_type != (pass == 0))
                continue;
            char *path = prefix[0] ? dsl_xasprintf("%s.%s", prefix, it->string)
                                   : dsl_xstrdup(it->string);
            const struct key *k = dsl_cfgp_find_key(path);
            if (k)
                r = apply(c, path, k, it);
            else if (dsl_cfgp_is_ignored(prefix, it->string, path))
                dsl_cfgp_warn(c, path,
                              "DeepSpeed key '%s' is not implemented by dstrain and is ignored",
                              path);
            else
                dsl_cfgp_warn(c, path, "unknown key '%s' (ignored)", path);
            free(path);
        }
    }
    return r;
}

static void ctx_release(struct parse_ctx *c)
{
    for (size_t i = 0; i < c->nkp; i++)
        free(c->kp[i].path);
    free(c->kp);
}

/* ---- public ----------------------------------------------------------------------- */

static int set_word(struct dsl_train_config *cfg, const struct key *k, const char *word,
                    char *err);

/* The defaults are the table's: each row's word goes through the row's own check, as a
 * flag's would; what no key holds (the batch triple not given, the optimizer's resolved
 * mode, the scheduler's module defaults) is set here */
void dsl_train_config_init(struct dsl_train_config *cfg)
{
    char err[DSL_ERR_LEN];
    memset(cfg, 0, sizeof(*cfg));
    dsl_strvec_init(&cfg->warnings);
    dsl_sched_config_init(&cfg->scheduler, DSL_SCHED_NONE);
    for (size_t i = 0; i < dsl_cfgp_nkeys; i++)
        if (dsl_cfgp_keys[i].def && set_word(cfg, &dsl_cfgp_keys[i], dsl_cfgp_keys[i].def, err) < 0)
            DSL_BUG(err);
    /* defaults are no request: only what the file or a flag sets counts as given */
    cfg->given.train = cfg->given.micro = cfg->given.accum = -1;
    cfg->given.model = cfg->given.data = cfg->given.zero = 0;
    cfg->optimizer.adam_w_mode = 1;
    cfg->optimizer.adam_w_mode_cfg = -1;
    /* data_path, checkpoint_dir, metrics, resume: NULL, the dataset's own path or none */
}

void dsl_train_config_release(struct dsl_train_config *cfg)
{
    struct dsl_dstrain_config *ds = &cfg->dstrain;
    free(cfg->path);
    free(ds->model_type);
    free(ds->dataset);
    free(ds->data_path);
    free(ds->checkpoint_dir);
    free(ds->backend);
    free(ds->cpu_gemm);
    free(ds->metrics);
    free(ds->resume);
    free(cfg->zero.offload_optimizer);
    free(cfg->zero.offload_param);
    free(cfg->csv_monitor.output_path);
    free(cfg->csv_monitor.job_name);
    free(cfg->tensorboard.output_path);
    free(cfg->tensorboard.job_name);
    dsl_strvec_release(&cfg->warnings);
    memset(cfg, 0, sizeof(*cfg));
}

int dsl_train_config_parse(struct dsl_train_config *cfg, const char *path, const char *text,
                           size_t len, int world_size, char *err)
{
    struct parse_ctx c = {.cfg = cfg, .file = path ? path : "<string>", .text = text,
                          .len = len, .err = err, .world_size = world_size};
    const char *end = NULL;
    int r;

    free(cfg->path);
    cfg->path = dsl_xstrdup(c.file);
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t off = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        int l, col;
        dsl_cfgp_linecol(text, off, &l, &col);
        return dsl_seterr(err, DSL_ECONFIG, "%s:%d:%d: invalid JSON", c.file, l, col);
    }
    /* only whitespace may follow the value */
    for (size_t off = (size_t)(end - text); off < len; off++) {
        if (!isspace((unsigned char)text[off])) {
            int l, col;
            dsl_cfgp_linecol(text, off, &l, &col);
            cJSON_Delete(root);
            return dsl_seterr(err, DSL_ECONFIG, "%s:%d:%d: unexpected text after the JSON value",
                              c.file, l, col);
        }
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dsl_seterr(err, DSL_ECONFIG, "%s: expected a JSON object at the top level",
                          c.file);
    }
    dsl_cfgp_index_keys(&c);
    dsl_strvec_init(&c.autos);
    r = dsl_cfgp_check_duplicates(&c);
    if (r == 0)
        r = walk(&c, "", root);
    cJSON_Delete(root);
    if (r == 0 && c.autos.nr) {
        struct dsl_dynbuf b;
        dsl_dynbuf_init(&b, 4096);
        for (size_t i = 0; i < c.autos.nr; i++)
            dsl_dynbuf_addf(&b, "%s'%s'", i == 0 ? "" : i + 1 == c.autos.nr ? " and " : ", ",
                            c.autos.v[i]);
        r = dsl_seterr(err, DSL_ECONFIG,
                       "%s: %s %s \"auto\", which only the HuggingFace integration of "
                       "DeepSpeed fills in: write %s, or leave %s out for dstrain's default "
                       "(docs/config.md)",
                       c.file, dsl_dynbuf_str(&b), c.autos.nr == 1 ? "is" : "are",
                       c.autos.nr == 1 ? "a value" : "a value for each",
                       c.autos.nr == 1 ? "the key" : "them");
        dsl_dynbuf_release(&b);
    }
    dsl_strvec_release(&c.autos);
    ctx_release(&c);
    if (r < 0)
        return r;
    if (world_size > 0)
        return dsl_train_config_finish(cfg, world_size, err);
    return 0;
}

int dsl_train_config_load(struct dsl_train_config *cfg, const char *path, int world_size,
                          char *err)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, MAX_CONFIG_BYTES);
    int r = dsl_dynbuf_load_file(&b, path);
    if (r == -EFBIG)
        r = dsl_seterr(err, DSL_ECONFIG, "config '%s' is larger than %u bytes", path,
                       MAX_CONFIG_BYTES);
    else if (r == DSL_ENOTREG)
        r = dsl_seterr(err, DSL_ECONFIG, "config '%s': %s", path, dsl_strerror(r));
    else if (r < 0)
        r = dsl_seterr(err, r, "cannot open config '%s': %s", path, strerror(-r));
    else
        r = dsl_train_config_parse(cfg, path, dsl_dynbuf_str(&b), b.len, world_size, err);
    dsl_dynbuf_release(&b);
    return r;
}

/*
 * A command-line word as a value of the key's type, never as JSON text: a string key
 * takes the word byte for byte (quotes, backslashes and "\u0041" are characters of a
 * path); a list key takes comma-separated items (within an optional [ ]); any other key
 * takes "true", "false", "null", a number (the whole word) or else a string, which its
 * check then names ("expected a number ..., got a string"). The value is built as a
 * cJSON node, the typed form the file's values have, so that a flag goes through the
 * very checks of the same key in the file. Returns the node, owned by the caller.
 */
static cJSON *scalar_word(const char *w, size_t n)
{
    while (n && isspace((unsigned char)*w)) {
        w++;
        n--;
    }
    while (n && isspace((unsigned char)w[n - 1]))
        n--;
    char *t = dsl_xstrndup(w, n);
    cJSON *v;
    char *end = NULL;
    double d = 0.0;
    /* strtod's own extras (inf, nan, hex) are words, not numbers */
    int number = n && strspn(t, "0123456789+-.eE") == n && strpbrk(t, "0123456789");
    if (number)
        d = strtod(t, &end);
    if (!strcmp(t, "true") || !strcmp(t, "false"))
        v = cJSON_CreateBool(!strcmp(t, "true"));
    else if (!strcmp(t, "null"))
        v = cJSON_CreateNull();
    else if (number && end && *end == '\0')
        v = cJSON_CreateNumber(d);
    else
        v = cJSON_CreateString(t);
    free(t);
    return v;
}

static cJSON *word_value(const struct key *k, const char *w)
{
    cJSON *v;
    if (k->kind == K_STRING || k->fn == dsl_cfgp_sp_choice || k->fn == dsl_cfgp_sp_optim_type ||
        k->fn == dsl_cfgp_sp_sched_type || k->fn == dsl_cfgp_sp_warmup_type) {
        v = cJSON_CreateString(w);
    } else if (k->fn == dsl_cfgp_sp_hidden || k->fn == dsl_cfgp_sp_betas) {
        size_t n = strlen(w);
        if (n >= 2 && w[0] == '[' && w[n - 1] == ']') {
            w++;
            n -= 2;
        }
        v = cJSON_CreateArray();
        if (v && strspn(w, " \t") < n) {
            for (const char *item = w, *stop = w + n; item <= stop; item++) {
                const char *comma = memchr(item, ',', (size_t)(stop - item));
                const char *e = comma ? comma : stop;
                cJSON *it = scalar_word(item, (size_t)(e - item));
                if (!it || !cJSON_AddItemToArray(v, it))
                    DSL_BUG("cJSON out of memory");
                item = e;
            }
        }
    } else {
        v = scalar_word(w, strlen(w));
    }
    if (!v)
        DSL_BUG("cJSON out of memory");
    return v;
}

static int set_word(struct dsl_train_config *cfg, const struct key *k, const char *word,
                    char *err)
{
    struct parse_ctx c = {.cfg = cfg, .file = "command line", .cli = 1, .err = err,
                          .cli_value = word};
    cJSON *v = word_value(k, word);
    dsl_strvec_init(&c.autos);
    int r = apply(&c, k->path, k, v);
    cJSON_Delete(v);
    if (r == 0 && c.autos.nr)
        r = dsl_seterr(err, DSL_ECONFIG,
                       "command line: '%s' cannot be \"auto\" (only DeepSpeed's HuggingFace "
                       "integration fills that in): give a value",
                       k->path);
    dsl_strvec_release(&c.autos);
    return r;
}

int dsl_train_config_set(struct dsl_train_config *cfg, const char *key, const char *value,
                         char *err)
{
    const struct key *k = dsl_cfgp_find_key(key);
    if (!k)
        return dsl_seterr(err, DSL_ECONFIG, "command line: unknown config key '%s'", key);
    return set_word(cfg, k, value, err);
}
