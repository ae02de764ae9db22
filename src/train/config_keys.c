/*
 * ds_config.json's keys (config_internal.h): one row per setting, with its type, place,
 * bounds or check, and dstrain's flag; the checks of the special keys; the DeepSpeed
 * keys dstrain knows of but ignores. A table, long by nature: a key is one row here.
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

#define OFF(m) offsetof(struct dsl_train_config, m)
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

static int sp_max_lr(struct parse_ctx *c, const struct key *k, const cJSON *v)
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

static int sp_zero_stage(struct parse_ctx *c, const struct key *k, const cJSON *v)
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

int dsl_cfgp_sp_choice(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
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
    };
    char list[256] = "";
    size_t used = 0;
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
    for (size_t i = 0; i < sizeof(choices) / sizeof(choices[0]); i++) {
        if (strcmp(choices[i].path, k->path) != 0 || strchr(choices[i].accept, '-'))
            continue;
        int w = snprintf(list + used, sizeof(list) - used, "%s\"%s\"", used ? ", " : "",
                         choices[i].accept);
        if (w > 0 && (size_t)w < sizeof(list) - used)
            used += (size_t)w;
    }
    if (cJSON_IsString(v))
        return dsl_cfgp_err(c, k->path, "bad value '%s' for '%s' (expected one of %s)",
                            v->valuestring, k->path, list);
    return dsl_cfgp_err(c, k->path, "expected one of %s for '%s', got %s", list, k->path,
                        dsl_cfgp_json_type(v));
}

/* a string that may be empty (DeepSpeed's monitors' output_path: "" is the working
   directory); null clears it */
static int sp_anystring(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    char **p = FIELD(c, k, char *);
    if (!cJSON_IsNull(v) && !cJSON_IsString(v))
        return dsl_cfgp_err(c, k->path, "expected a string for '%s', got %s", k->path,
                            dsl_cfgp_json_type(v));
    free(*p);
    *p = cJSON_IsNull(v) ? NULL : dsl_xstrdup(v->valuestring);
    return 0;
}

static int sp_tristate(struct parse_ctx *c, const struct key *k, const cJSON *v)
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

/* ---- the key table ---------------------------------------------------------------- */


/* a default written as a macro, as the word a row's def holds */
#define WORD_(x) #x
#define WORD(x) WORD_(x)
#define DSL_CFG_VAL_FRACTION_WORD WORD(DSL_CFG_VAL_FRACTION)

const struct key dsl_cfgp_keys[] = {
    /* the rows with a flag come in the order dstrain --help lists them */
    {"dstrain", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"dstrain.backend", K_SPECIAL, OFF(dstrain.backend), 0, 0, dsl_cfgp_sp_choice,
     "backend", 0, "comm backend: tcp, nccl or auto", "auto"},
    {"dstrain.save_on_signal", K_SPECIAL, OFF(dstrain.save_on_signal), 0, 0, sp_tristate,
     "save_on_signal", KEY_BARE,
     "on SIGTERM, SIGINT or SIGUSR1 (Slurm's warning) finish the step, write a "
     "checkpoint, exit 128 + the signal (default: on when a checkpoint dir is set)",
     "null"},
    {"dstrain.metrics", K_STRING, OFF(dstrain.metrics), 0, 0, NULL, "metrics",
     0, "JSON lines, one object per step, to FILE", NULL},
    {"dstrain.threads", K_INT, OFF(dstrain.threads), 0, 4096, NULL, "threads",
     0, "compute threads per rank (0: fair share)", "0"},
    {"dstrain.model", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"dstrain.model.type", K_SPECIAL, OFF(dstrain.model_type), 0, 0, dsl_cfgp_sp_choice,
     "model", 0, "model type (mlp or gpt)", "mlp"},
    {"dstrain.model.layers", K_SIZE, OFF(dstrain.gpt_layers), 1,
     DSL_GPT_MAX_LAYERS, NULL, "layers", 0, "gpt: transformer blocks", "4"},
    {"dstrain.model.dim", K_SIZE, OFF(dstrain.gpt_dim), 1, 65536, NULL, "dim",
     0, "gpt: model width", "128"},
    {"dstrain.model.heads", K_SIZE, OFF(dstrain.gpt_heads), 1, 65536, NULL,
     "heads", 0, "gpt: attention heads (dividing dim)", "4"},
    {"dstrain.model.context", K_SIZE, OFF(dstrain.gpt_context), 1, 65536, NULL,
     "context", 0, "gpt: tokens per window", "128"},
    {"dstrain.model.vocab", K_SIZE, OFF(dstrain.gpt_vocab), 2, 65536, NULL,
     "vocab", 0, "gpt: vocabulary size", "256"},
    {"dstrain.model.hidden", K_SPECIAL, 0, 0, 0, dsl_cfgp_sp_hidden, "hidden", 0,
     "hidden sizes, e.g. 1024,1024", "1024,1024"},
    {"dstrain.data", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"dstrain.data.dataset", K_SPECIAL, OFF(dstrain.dataset), 0, 0, dsl_cfgp_sp_choice,
     "data", 0, "fashion_mnist, synthetic, text or tokens", "fashion_mnist"},
    {"dstrain.data.path", K_STRING, OFF(dstrain.data_path), 0, 0, NULL,
     "data_path", 0,
     "the dataset's files (Fashion-MNIST or token shard directory, text "
     "file or directory)",
     NULL},
    {"dstrain.data.stride", K_SIZE, OFF(dstrain.data_stride), 0, 65536, NULL,
     "stride", 0, "gpt: tokens between training windows (0: context)", "0"},
    {"dstrain.data.synthetic", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"dstrain.data.synthetic.train_samples", K_SIZE,
     OFF(dstrain.synthetic_train), 1, 1e9, NULL, "synthetic_train", 0,
     "synthetic training samples", "60000"},
    {"dstrain.data.synthetic.test_samples", K_SIZE, OFF(dstrain.synthetic_test),
     1, 1e9, NULL, "synthetic_test", 0, "synthetic test samples", "10000"},
    {"dstrain.data.synthetic.features", K_SIZE, OFF(dstrain.synthetic_features),
     1, 1e7, NULL, "synthetic_dim", 0, "synthetic input size", "784"},
    {"dstrain.data.synthetic.classes", K_SIZE, OFF(dstrain.synthetic_classes),
     2, 1e6, NULL, NULL, 0, NULL, "10"},
    {"dstrain.data.drop_last", K_BOOL, OFF(dstrain.drop_last), 0, 0, NULL,
     "drop_last", 0, "drop the last partial batch (true/false)", "false"},
    {"dstrain.data.shuffle", K_BOOL, OFF(dstrain.shuffle), 0, 0, NULL, NULL, 0,
     NULL, "true"},
    {"dstrain.data.val_fraction", K_DOUBLE, OFF(dstrain.val_fraction), 0.001,
     0.999, NULL, NULL, 0, NULL, DSL_CFG_VAL_FRACTION_WORD},
    {"dstrain.epochs", K_U64, OFF(dstrain.epochs), 0, 1e9, NULL, "epochs", 0,
     "epochs (when steps is 0)", "1"},
    {"dstrain.steps", K_U64, OFF(dstrain.steps), 0, BIG, NULL, "steps", 0,
     "optimizer steps (0: epochs decide)", "0"},
    {"dstrain.eval_interval", K_U64, OFF(dstrain.eval_interval), 0, BIG, NULL,
     "eval_interval", 0, "steps between evaluations (0: epoch)", "0"},
    {"dstrain.eval_iters", K_U64, OFF(dstrain.eval_iters), 0, BIG, NULL, "eval_iters", 0,
     "global batches of the test set per evaluation (0: all of it)", "0"},
    {"dstrain.checkpoint_dir", K_STRING, OFF(dstrain.checkpoint_dir), 0, 0,
     NULL, "checkpoint_dir", 0, "checkpoint directory", NULL},
    {"dstrain.save_interval", K_U64, OFF(dstrain.save_interval), 0, BIG, NULL,
     "save_interval", 0, "steps between checkpoints", "0"},
    {"dstrain.save_interval_minutes", K_DOUBLE, OFF(dstrain.save_interval_minutes), 0, 1e6,
     NULL, "save_interval_minutes", 0, "minutes between checkpoints (0: none by time)", "0"},
    {"dstrain.resume", K_STRING, OFF(dstrain.resume), 0, 0, NULL, "resume", 0,
     "resume from 'latest', a tag, or 'auto' (latest if any, else fresh)",
     NULL},
    {"dstrain.allow_unverified_checkpoint", K_BOOL,
     OFF(dstrain.allow_unverified_checkpoint), 0, 0, NULL, "allow_unverified_checkpoint",
     KEY_BARE, "resume from a checkpoint whose files carry no checksums", "false"},
    {"dstrain.deterministic", K_SPECIAL, OFF(dstrain.deterministic), 0, 0,
     sp_tristate, "deterministic", 0, "canonical reduction order (true/false)",
     "null"},
    {"dstrain.cpu_half", K_BOOL, OFF(dstrain.cpu_half), 0, 0, NULL, "cpu_half",
     KEY_BARE,
     "fp16/bf16 on the CPU: 16-bit params and gradients (half the comm "
     "bytes)",
     "false"},
    {"dstrain.cpu_gemm", K_SPECIAL, OFF(dstrain.cpu_gemm), 0, 0, dsl_cfgp_sp_choice,
     "cpu_gemm", 0,
     "the CPU's large matrix products: fp32, or bf16 (bf16 inputs, fp32 "
     "sums; needs AVX512-BF16 or AMX)",
     "fp32"},
    {"steps_per_print", K_LONG, OFF(steps_per_print), 0, BIG, NULL,
     "steps_per_print", 0, "steps between progress lines", "10"},
    {"seed", K_U64, OFF(seed), 0, BIG, NULL, "seed", 0, "seed", "42"},
    {"train_batch_size", K_SPECIAL, OFF(given.train), 0, 0, dsl_cfgp_sp_batch,
     "train_batch", 0, "train_batch_size", NULL},
    {"train_micro_batch_size_per_gpu", K_SPECIAL, OFF(given.micro), 0, 0,
     dsl_cfgp_sp_batch, "micro_batch", 0, "micro batch per rank", NULL},
    {"gradient_accumulation_steps", K_SPECIAL, OFF(given.accum), 0, 0, dsl_cfgp_sp_batch,
     "grad_accum", 0, "gradient_accumulation_steps", NULL},
    {"zero_optimization", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"zero_optimization.stage", K_SPECIAL, OFF(zero.stage), 0, 0, sp_zero_stage,
     "zero_stage", 0, "ZeRO stage (0, 1, 2, 3)", "0"},
    {"zero_optimization.reduce_bucket_size", K_U64,
     OFF(zero.reduce_bucket_size), 1, BIG, NULL, "bucket_size", 0,
     "reduce_bucket_size", "500000000"},
    {"zero_optimization.overlap_comm", K_BOOL, OFF(zero.overlap_comm), 0, 0,
     NULL, "overlap_comm", 0, "overlap_comm (true/false)", "false"},
    {"zero_optimization.allgather_bucket_size", K_U64,
     OFF(zero.allgather_bucket_size), 1, BIG, NULL, NULL, 0, NULL, "500000000"},
    {"zero_optimization.contiguous_gradients", K_BOOL,
     OFF(zero.contiguous_gradients), 0, 0, NULL, NULL, 0, NULL, "true"},
    {"zero_optimization.stage3_prefetch_bucket_size", K_U64,
     OFF(zero.stage3_prefetch_bucket_size), 0, BIG, NULL, "prefetch_bucket_size", 0,
     "stage 3: fetch the next layer while one computes (0: off)", "50000000"},
    {"zero_optimization.stage3_max_live_parameters", K_U64,
     OFF(zero.stage3_max_live_parameters), 1, BIG, NULL, "max_live_parameters", 0,
     "stage 3: most gathered parameters at once", "1000000000"},
    {"zero_optimization.stage3_param_persistence_threshold", K_U64,
     OFF(zero.stage3_param_persistence_threshold), 0, BIG, NULL,
     "param_persistence_threshold", 0, "stage 3: layers this small stay whole", "100000"},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save", K_BOOL,
     OFF(zero.stage3_gather_16bit_weights_on_model_save), 0, 0, NULL, NULL, 0, NULL,
     "false"},
    {"zero_optimization.reduce_scatter", K_BOOL, OFF(zero.reduce_scatter), 0, 0,
     NULL, NULL, 0, NULL, "true"},
    {"optimizer", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"optimizer.type", K_SPECIAL, OFF(optimizer.type), 0, 0, dsl_cfgp_sp_optim_type,
     NULL, 0, NULL, "Adam"},
    {"optimizer.params", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"optimizer.params.lr", K_DOUBLE, OFF(optimizer.lr), 0, 1e6, NULL, "lr", 0,
     "learning rate", "0.001"},
    {"optimizer.params.betas", K_SPECIAL, 0, 0, 0, dsl_cfgp_sp_betas, NULL, 0, NULL,
     "0.9,0.999"},
    {"optimizer.params.eps", K_DOUBLE, OFF(optimizer.eps), 0, 1, NULL, NULL, 0,
     NULL, "1e-8"},
    {"optimizer.params.weight_decay", K_DOUBLE, OFF(optimizer.weight_decay), 0,
     1e6, NULL, NULL, 0, NULL, "0"},
    {"optimizer.params.adam_w_mode", K_BOOL, OFF(optimizer.adam_w_mode_cfg), 0,
     0, NULL, NULL, 0, NULL, NULL},
    {"optimizer.params.momentum", K_DOUBLE, OFF(optimizer.momentum), 0, 1, NULL,
     NULL, 0, NULL, "0"},
    {"gradient_clipping", K_DOUBLE, OFF(gradient_clipping), 0, 1e30, NULL,
     "gradient_clipping", 0, "global L2 norm clip (0: off)", "0"},
    {"scheduler", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"scheduler.type", K_SPECIAL, 0, 0, 0, dsl_cfgp_sp_sched_type, NULL, 0, NULL, NULL},
    {"scheduler.params", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"scheduler.params.warmup_min_lr", K_DOUBLE, OFF(scheduler.warmup_min_lr),
     0, 1e6, NULL, NULL, 0, NULL, NULL},
    {"scheduler.params.warmup_max_lr", K_SPECIAL, 0, 0, 1e6, sp_max_lr, NULL, 0,
     NULL, NULL},
    {"scheduler.params.warmup_num_steps", K_LONG,
     OFF(scheduler.warmup_num_steps), 0, BIG, NULL, NULL, 0, NULL, NULL},
    {"scheduler.params.warmup_type", K_SPECIAL, 0, 0, 0, dsl_cfgp_sp_warmup_type, NULL,
     0, NULL, NULL},
    {"scheduler.params.total_num_steps", K_LONG, OFF(scheduler.total_num_steps),
     1, BIG, NULL, NULL, 0, NULL, NULL},
    {"scheduler.params.warmup_min_ratio", K_DOUBLE,
     OFF(scheduler.warmup_min_ratio), 0, 1, NULL, NULL, 0, NULL, NULL},
    {"scheduler.params.cos_min_ratio", K_DOUBLE, OFF(scheduler.cos_min_ratio),
     0, 1, NULL, NULL, 0, NULL, NULL},
    {"wall_clock_breakdown", K_BOOL, OFF(wall_clock_breakdown), 0, 0, NULL,
     NULL, 0, NULL, "false"},
    {"prescale_gradients", K_BOOL, OFF(prescale_gradients), 0, 0, NULL, NULL, 0,
     NULL, "false"},
    {"gradient_predivide_factor", K_DOUBLE, OFF(gradient_predivide_factor),
     1e-30, 1e30, NULL, NULL, 0, NULL, "1"},
    {"fp16", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"fp16.enabled", K_BOOL, OFF(fp16.enabled), 0, 0, NULL, NULL, 0, NULL,
     "false"},
    {"fp16.loss_scale", K_DOUBLE, OFF(fp16.loss_scale), 0, 1e30, NULL, NULL, 0,
     NULL, "0"},
    /* 2^127: the largest power of two in fp32, the type the scaled gradient has
     */
    {"fp16.initial_scale_power", K_INT, OFF(fp16.initial_scale_power), 0, 127,
     NULL, NULL, 0, NULL, "16"},
    {"fp16.loss_scale_window", K_LONG, OFF(fp16.loss_scale_window), 1, BIG,
     NULL, NULL, 0, NULL, "1000"},
    {"fp16.hysteresis", K_INT, OFF(fp16.hysteresis), 1, 1e9, NULL, NULL, 0,
     NULL, "2"},
    {"fp16.consecutive_hysteresis", K_BOOL, OFF(fp16.consecutive_hysteresis), 0,
     0, NULL, NULL, 0, NULL, "false"},
    {"fp16.min_loss_scale", K_DOUBLE, OFF(fp16.min_loss_scale), 1e-30, 1e30,
     NULL, NULL, 0, NULL, "1"},
    {"bf16", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"bf16.enabled", K_BOOL, OFF(bf16), 0, 0, NULL, NULL, 0, NULL, "false"},
    {"csv_monitor", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"csv_monitor.enabled", K_BOOL, OFF(csv_monitor.enabled), 0, 0, NULL, NULL, 0, NULL,
     "false"},
    {"csv_monitor.output_path", K_SPECIAL, OFF(csv_monitor.output_path), 0, 0, sp_anystring,
     NULL, 0, NULL, NULL},
    {"csv_monitor.job_name", K_STRING, OFF(csv_monitor.job_name), 0, 0, NULL, NULL, 0, NULL,
     "DeepSpeedJobName"},
    {"tensorboard", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"tensorboard.enabled", K_BOOL, OFF(tensorboard.enabled), 0, 0, NULL, NULL, 0, NULL,
     "false"},
    {"tensorboard.output_path", K_SPECIAL, OFF(tensorboard.output_path), 0, 0, sp_anystring,
     NULL, 0, NULL, NULL},
    {"tensorboard.job_name", K_STRING, OFF(tensorboard.job_name), 0, 0, NULL, NULL, 0, NULL,
     "DeepSpeedJobName"},
    {"bfloat16", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"bfloat16.enabled", K_BOOL, OFF(bf16), 0, 0, NULL, NULL, 0, NULL, NULL},
};
const size_t dsl_cfgp_nkeys = sizeof(dsl_cfgp_keys) / sizeof(dsl_cfgp_keys[0]);

int dsl_train_config_flag_at(size_t i, struct dsl_train_config_flag *f)
{
    for (size_t j = 0; j < dsl_cfgp_nkeys; j++) {
        if (!dsl_cfgp_keys[j].flag || i-- > 0)
            continue;
        f->name = dsl_cfgp_keys[j].flag;
        f->key = dsl_cfgp_keys[j].path;
        f->help = dsl_cfgp_keys[j].help;
        f->bare = (dsl_cfgp_keys[j].flags & KEY_BARE) != 0;
        return 1;
    }
    return 0;
}

/* DeepSpeed keys dstrain knows of but does not implement: a warning says so. */
static const char *const ignored_ds_keys[] = {
    "activation_checkpointing", "aio", "amp", "autotuning", "checkpoint", "comms_logger",
    "communication_data_type", "compression_training", "curriculum_learning", "data_efficiency",
    "data_types", "dump_state", "elasticity", "flops_profiler", "gradient_clipping_type",
    "memory_breakdown", "monitor", "wandb", "comet", "pipeline",
    "sparse_attention", "sparse_gradients", "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer", "disable_allgather", "fp32_allreduce", "timers",
    "nebula", "compile", "quantize_training", "eigenvalue", "progressive_layer_drop",
};

/* Nested DeepSpeed keys dstrain knows of but does not implement (any other key under
 * zero_optimization is DeepSpeed's too, and said so). */
static const char *const ignored_ds_paths[] = {
    "fp16_master_weights_and_grads", "zero_optimization.allgather_partitions",
    "zero_optimization.cpu_offload", "zero_optimization.cpu_offload_params",
    "zero_optimization.cpu_offload_use_pin_memory", "zero_optimization.offload_optimizer",
    "zero_optimization.offload_param", "zero_optimization.sub_group_size",
    "zero_optimization.round_robin_gradients", "zero_optimization.load_from_fp32_weights",
    "zero_optimization.elastic_checkpoint", "zero_optimization.ignore_unused_parameters",
    "zero_optimization.fp16_master_weights_and_grads", "zero_optimization.mics_shard_size",
    "zero_optimization.zero_hpz_partition_size", "zero_optimization.zero_quantized_weights",
    "zero_optimization.zero_quantized_gradients", "fp16.auto_cast",
    "bf16.immediate_grad_update",
};

const struct key *dsl_cfgp_find_key(const char *path)
{
    for (size_t i = 0; i < dsl_cfgp_nkeys; i++)
        if (strcmp(dsl_cfgp_keys[i].path, path) == 0)
            return &dsl_cfgp_keys[i];
    return NULL;
}

int dsl_cfgp_is_ignored(const char *prefix, const char *name, const char *path)
{
    for (size_t i = 0; !prefix[0] && i < sizeof(ignored_ds_keys) / sizeof(ignored_ds_keys[0]);
         i++)
        if (strcmp(ignored_ds_keys[i], name) == 0)
            return 1;
    for (size_t i = 0; i < sizeof(ignored_ds_paths) / sizeof(ignored_ds_paths[0]); i++)
        if (strcmp(ignored_ds_paths[i], path) == 0)
            return 1;
    return !strncmp(path, "zero_optimization.", 18) && !strchr(path + 18, '.');
}
