/*
 * The checks of ds_config.json's special keys (config_internal.h), the rows of the key
 * table (config_table.c) that no plain kind describes: batch sizes that may be "auto",
 * names, lists, choices, true/false/null; and what each of them takes, in words, for
 * the docs' key tables (config_doc.c).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "config_internal.h"
#include "dslaunch/common/error.h"
#include "dslaunch/model/model.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define BIG 9.007199254740992e15 /* 2^53: integers a double holds exactly */

/* ---- special keys ----------------------------------------------------------------- */

int dsl_cfgp_sp_batch(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    long *dst = FIELD(c, k, long);
    double d = 0.0;
    int r;
    if (cJSON_IsNull(v)) {
        *dst = -1;
        return 0;
    }
    if (cJSON_IsString(v) && strcmp(v->valuestring, "auto") == 0) {
        /* DeepSpeed only accepts "auto" through the HuggingFace integration; the error
         * comes from _finish(), which knows the world size and can say what to write */
        *dst = -2;
        return 0;
    }
    if ((r = dsl_cfgp_get_integer(c, k, v, 1, DSL_CFG_MAX_BATCH, &d)) < 0)
        return r;
    *dst = (long)d;
    return 0;
}

int dsl_cfgp_sp_optim_type(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    static const struct {
        const char *name;
        enum dsl_cfg_optim t;
    } names[] = {{"adam", DSL_CFG_OPTIM_ADAM},
                 {"adamw", DSL_CFG_OPTIM_ADAMW},
                 {"sgd", DSL_CFG_OPTIM_SGD}};
    if (!cJSON_IsString(v))
        return dsl_cfgp_err(c, k->path, "expected a string for '%s', got %s", k->path,
                            dsl_cfgp_json_type(v));
    /* DeepSpeed compares optimizer names in lower case */
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(v->valuestring, names[i].name) == 0) {
            *FIELD(c, k, enum dsl_cfg_optim) = names[i].t;
            return 0;
        }
    }
    return dsl_cfgp_err(c, k->path,
                        "unsupported optimizer '%s' for '%s' (supported: Adam, AdamW, SGD)",
                        v->valuestring, k->path);
}

int dsl_cfgp_sp_betas(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    double b[2];
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
        return dsl_cfgp_err(c, k->path, "expected two numbers [beta1, beta2] for '%s'", k->path);
    for (int i = 0; i < 2; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0.0 && e->valuedouble < 1.0)) {
            char raw[96];
            return dsl_cfgp_err(c, k->path, "'%s' must hold two numbers in [0, 1), got %s", k->path,
                                dsl_cfgp_raw_value(c, k->path, v, raw, sizeof(raw)));
        }
        b[i] = e->valuedouble;
    }
    c->cfg->optimizer.beta1 = b[0];
    c->cfg->optimizer.beta2 = b[1];
    return 0;
}

int dsl_cfgp_sp_sched_type(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    static const enum dsl_sched_type types[] = {DSL_SCHED_WARMUP_LR, DSL_SCHED_WARMUP_DECAY_LR,
                                                DSL_SCHED_WARMUP_COSINE_LR};
    if (cJSON_IsNull(v)) {
        c->cfg->scheduler.type = DSL_SCHED_NONE;
        return 0;
    }
    if (!cJSON_IsString(v))
        return dsl_cfgp_err(c, k->path, "expected a string for '%s', got %s", k->path,
                            dsl_cfgp_json_type(v));
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (strcmp(v->valuestring, dsl_sched_type_name(types[i])) == 0) {
            c->cfg->scheduler.type = types[i];
            return 0;
        }
    }
    return dsl_cfgp_err(c, k->path,
                        "unsupported scheduler '%s' for '%s' (supported: WarmupLR, WarmupDecayLR, "
                        "WarmupCosineLR)",
                        v->valuestring, k->path);
}

int dsl_cfgp_sp_warmup_type(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    if (cJSON_IsString(v) && strcmp(v->valuestring, "log") == 0)
        c->cfg->scheduler.warmup_type = DSL_WARMUP_LOG;
    else if (cJSON_IsString(v) && strcmp(v->valuestring, "linear") == 0)
        c->cfg->scheduler.warmup_type = DSL_WARMUP_LINEAR;
    else
        return dsl_cfgp_err(c, k->path, "'%s' must be \"log\" or \"linear\"", k->path);
    return 0;
}

int dsl_cfgp_sp_max_lr(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    if (!cJSON_IsNumber(v))
        return dsl_cfgp_err(c, k->path, "expected a number for '%s', got %s", k->path,
                            dsl_cfgp_json_type(v));
    if (!isfinite(v->valuedouble) || v->valuedouble < k->min || v->valuedouble > k->max)
        return dsl_cfgp_range_err(c, k->path, v, k->min, k->max);
    c->cfg->scheduler.warmup_max_lr = v->valuedouble;
    c->cfg->scheduler.warmup_max_lr_set = 1;
    return 0;
}

int dsl_cfgp_sp_zero_stage(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    double d = 0.0;
    int r;
    if ((r = dsl_cfgp_get_integer(c, k, v, -BIG, BIG, &d)) < 0)
        return r;
    if (d < 0 || d > 3)
        return dsl_cfgp_err(c, k->path, "'%s' must be 0, 1, 2 or 3, got %.0f", k->path, d);
    *FIELD(c, k, int) = (int)d;
    return 0;
}

int dsl_cfgp_sp_hidden(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    struct dsl_dstrain_config *ds = &c->cfg->dstrain;
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0 || n > DSL_CFG_MAX_HIDDEN)
        return dsl_cfgp_err(c, k->path, "expected an array of at most %d layer sizes for '%s'",
                            DSL_CFG_MAX_HIDDEN, k->path);
    size_t tmp[DSL_CFG_MAX_HIDDEN];
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(d >= 1 && d <= DSL_CFG_MAX_LAYER) || d != floor(d)) {
            char raw[96];
            return dsl_cfgp_err(c, k->path,
                                "'%s' out of range: each layer size allowed 1..%d, got %s",
                                k->path, DSL_CFG_MAX_LAYER,
                                dsl_cfgp_raw_value(c, k->path, v, raw, sizeof(raw)));
        }
        tmp[i] = (size_t)d;
    }
    memcpy(ds->hidden, tmp, (size_t)n * sizeof(tmp[0]));
    ds->nhidden = (size_t)n;
    return 0;
}

/* the words of the choice keys; a word with '-' is an alternative spelling */
static const struct {
    const char *path, *accept, *store;
} choices[] = {
    {"dstrain.model.type", "mlp", "mlp"},
    {"dstrain.model.type", "gpt", "gpt"},
    {"dstrain.data.dataset", "fashion_mnist", "fashion_mnist"},
    {"dstrain.data.dataset", "fashion-mnist", "fashion_mnist"},
    {"dstrain.data.dataset", "synthetic", "synthetic"},
    {"dstrain.data.dataset", "text", "text"},
    {"dstrain.data.dataset", "tokens", "tokens"},
    {"dstrain.backend", "auto", "auto"},
    {"dstrain.backend", "tcp", "tcp"},
    {"dstrain.backend", "nccl", "nccl"},
    {"dstrain.cpu_gemm", "fp32", "fp32"},
    {"dstrain.cpu_gemm", "bf16", "bf16"},
    {"zero_optimization.offload_optimizer.device", "none", "none"},
    {"zero_optimization.offload_optimizer.device", "cpu", "cpu"},
    {"zero_optimization.offload_optimizer.device", "nvme", "nvme"},
    {"zero_optimization.offload_param.device", "none", "none"},
    {"zero_optimization.offload_param.device", "cpu", "cpu"},
    {"zero_optimization.offload_param.device", "nvme", "nvme"},
};

/* the words a choice key takes (no alternative spellings), each between quotes q */
static void choice_list(const char *path, const char *q, char *list, size_t cap)
{
    size_t used = 0;
    list[0] = '\0';
    for (size_t i = 0; i < sizeof(choices) / sizeof(choices[0]); i++) {
        if (strcmp(choices[i].path, path) != 0 || strchr(choices[i].accept, '-'))
            continue;
        int w = snprintf(list + used, cap - used, "%s%s%s%s", used ? ", " : "", q,
                         choices[i].accept, q);
        if (w > 0 && (size_t)w < cap - used)
            used += (size_t)w;
    }
}

int dsl_cfgp_sp_choice(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    char list[256];
    if (cJSON_IsString(v)) {
        for (size_t i = 0; i < sizeof(choices) / sizeof(choices[0]); i++) {
            if (strcmp(choices[i].path, k->path) == 0 &&
                strcmp(choices[i].accept, v->valuestring) == 0) {
                char **p = FIELD(c, k, char *);
                free(*p);
                *p = dsl_xstrdup(choices[i].store);
                return 0;
            }
        }
    }
    choice_list(k->path, "\"", list, sizeof(list));
    if (cJSON_IsString(v))
        return dsl_cfgp_err(c, k->path, "bad value '%s' for '%s' (expected one of %s)",
                            v->valuestring, k->path, list);
    return dsl_cfgp_err(c, k->path, "expected one of %s for '%s', got %s", list, k->path,
                        dsl_cfgp_json_type(v));
}

/* a string that may be empty (DeepSpeed's monitors' output_path: "" is the working
   directory); null clears it */
int dsl_cfgp_sp_anystring(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    char **p = FIELD(c, k, char *);
    if (!cJSON_IsNull(v) && !cJSON_IsString(v))
        return dsl_cfgp_err(c, k->path, "expected a string for '%s', got %s", k->path,
                            dsl_cfgp_json_type(v));
    free(*p);
    *p = cJSON_IsNull(v) ? NULL : dsl_xstrdup(v->valuestring);
    return 0;
}

int dsl_cfgp_sp_tristate(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    if (cJSON_IsNull(v))
        *FIELD(c, k, int) = -1;
    else if (cJSON_IsBool(v))
        *FIELD(c, k, int) = cJSON_IsTrue(v) ? 1 : 0;
    else
        return dsl_cfgp_err(c, k->path, "expected true, false or null for '%s', got %s", k->path,
                            dsl_cfgp_json_type(v));
    return 0;
}

/* ---- the special keys in words ---------------------------------------------------- */

void dsl_cfgp_special_words(const struct key *k, struct key_words *w)
{
    special_fn f = k->fn;
    *w = (struct key_words){.type = "string", .quoted = 1};
    if (f == dsl_cfgp_sp_choice) {
        choice_list(k->path, "`", w->allowed, sizeof(w->allowed));
    } else if (f == dsl_cfgp_sp_batch) {
        *w = (struct key_words){.type = "integer"};
        snprintf(w->allowed, sizeof(w->allowed), "1..%d, null", DSL_CFG_MAX_BATCH);
    } else if (f == dsl_cfgp_sp_optim_type) {
        snprintf(w->allowed, sizeof(w->allowed), "`Adam`, `AdamW`, `SGD`");
    } else if (f == dsl_cfgp_sp_sched_type) {
        snprintf(w->allowed, sizeof(w->allowed), "`%s`, `%s`, `%s`, null",
                 dsl_sched_type_name(DSL_SCHED_WARMUP_LR),
                 dsl_sched_type_name(DSL_SCHED_WARMUP_DECAY_LR),
                 dsl_sched_type_name(DSL_SCHED_WARMUP_COSINE_LR));
    } else if (f == dsl_cfgp_sp_warmup_type) {
        snprintf(w->allowed, sizeof(w->allowed), "`log`, `linear`");
    } else if (f == dsl_cfgp_sp_anystring) {
        snprintf(w->allowed, sizeof(w->allowed), "any, null");
    } else if (f == dsl_cfgp_sp_betas) {
        *w = (struct key_words){.type = "two numbers", .list = 1};
        snprintf(w->allowed, sizeof(w->allowed), "each in [0, 1)");
    } else if (f == dsl_cfgp_sp_hidden) {
        *w = (struct key_words){.type = "integers", .list = 1};
        snprintf(w->allowed, sizeof(w->allowed), "1..%d each, at most %d", DSL_CFG_MAX_LAYER,
                 DSL_CFG_MAX_HIDDEN);
    } else if (f == dsl_cfgp_sp_tristate) {
        *w = (struct key_words){.type = "boolean"};
        snprintf(w->allowed, sizeof(w->allowed), "true, false, null");
    } else if (f == dsl_cfgp_sp_zero_stage) {
        *w = (struct key_words){.type = "integer"};
        snprintf(w->allowed, sizeof(w->allowed), "0, 1, 2, 3");
    } else { /* a number checked against the row's bounds */
        *w = (struct key_words){.type = "number", .bounds = 1};
    }
}
