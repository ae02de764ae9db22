/*
 * ds_config.json -> struct dsl_train_config (see train_config.h and docs/config.md).
 *
 * Theory of operation. The file is parsed by cJSON in one go; cJSON's tree is walked
 * once, object by object, against a table of known keys (keys[] below, dotted paths
 * such as "optimizer.params.lr"). A section entry descends, a leaf entry converts and
 * range-checks its value into the struct, anything else becomes a warning. Command
 * line overrides (dsl_train_config_set) go through the same leaf entries, with the
 * flag's word made a value of the key's type (a string key's word byte for byte, never
 * re-read as JSON text), so a flag and a key can never disagree on what is valid.
 * Nothing of cJSON outlives a call.
 *
 * cJSON keeps no positions, so messages get theirs from a small scan of the text
 * (index_keys): it tracks the dotted path of every object key and remembers where
 * each key starts; syntax errors use the offset cJSON stops at.
 *
 * The batch triple and cross-field rules need the world size and the final overrides,
 * so they live in dsl_train_config_finish(), which reads only the values as written
 * (cfg->given) and can therefore run again after more overrides.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/quote.h"
#include "dslaunch/model/model.h"
#include "dslaunch/train/train_config.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define MAX_CONFIG_BYTES (16u << 20)

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
static void index_keys(struct parse_ctx *c)
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

static void offset_linecol(const char *text, size_t off, int *line, int *col)
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
static int check_duplicate_keys(struct parse_ctx *c)
{
    for (size_t j = 1; j < c->nkp; j++)
        for (size_t i = 0; i < j; i++) {
            if (c->kp[i].obj != c->kp[j].obj || strcmp(c->kp[i].path, c->kp[j].path))
                continue;
            int l1, c1, l2, c2;
            offset_linecol(c->text, c->kp[i].off, &l1, &c1);
            offset_linecol(c->text, c->kp[j].off, &l2, &c2);
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
            offset_linecol(c->text, c->kp[i].off, &l, &col);
            snprintf(buf, n, "%s:%d:%d: ", c->file, l, col);
            return;
        }
    }
    snprintf(buf, n, "%s: ", c->file);
}

__attribute__((format(printf, 3, 4))) static int cerr(struct parse_ctx *c, const char *path,
                                                      const char *fmt, ...)
{
    char w[256], msg[DSL_ERR_LEN];
    va_list ap;
    where(c, path, w, sizeof(w));
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return dsl_seterr(c->err, DSL_ECONFIG, "%s%s", w, msg);
}

__attribute__((format(printf, 3, 4))) static void cwarn(struct parse_ctx *c,
                                                        const char *path, const char *fmt,
                                                        ...)
{
    char w[256], msg[DSL_ERR_LEN];
    va_list ap;
    where(c, path, w, sizeof(w));
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
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
static const char *raw_value(const struct parse_ctx *c, const char *path, const cJSON *v,
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
static int range_err(struct parse_ctx *c, const char *path, const cJSON *v, double min,
                     double max)
{
    char raw[96], lo[40], hi[40];
    return cerr(c, path, "'%s' out of range: allowed %s..%s, got '%s'", path,
                bound_text(min, lo, sizeof(lo)), bound_text(max, hi, sizeof(hi)),
                raw_value(c, path, v, raw, sizeof(raw)));
}

/* ---- the key table ---------------------------------------------------------------- */

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
    const char *help; /* the flag's --help line */
    const char *def;  /* the default, as a flag's word; NULL: zero, or none */
};

#define OFF(m) offsetof(struct dsl_train_config, m)
#define FIELD(c, k, T) ((T *)(void *)((char *)(c)->cfg + (k)->off))

static int sp_batch(struct parse_ctx *c, const struct key *k, const cJSON *v);
static int sp_optim_type(struct parse_ctx *c, const struct key *k, const cJSON *v);
static int sp_betas(struct parse_ctx *c, const struct key *k, const cJSON *v);
static int sp_sched_type(struct parse_ctx *c, const struct key *k, const cJSON *v);
static int sp_warmup_type(struct parse_ctx *c, const struct key *k, const cJSON *v);
static int sp_max_lr(struct parse_ctx *c, const struct key *k, const cJSON *v);
static int sp_zero_stage(struct parse_ctx *c, const struct key *k, const cJSON *v);
static int sp_hidden(struct parse_ctx *c, const struct key *k, const cJSON *v);
static int sp_choice(struct parse_ctx *c, const struct key *k, const cJSON *v);
static int sp_tristate(struct parse_ctx *c, const struct key *k, const cJSON *v);
static int sp_anystring(struct parse_ctx *c, const struct key *k, const cJSON *v);

#define BIG 9.007199254740992e15 /* 2^53: integers a double holds exactly */
/* a default written as a macro, as the word a row's def holds */
#define WORD_(x) #x
#define WORD(x) WORD_(x)
#define DSL_CFG_VAL_FRACTION_WORD WORD(DSL_CFG_VAL_FRACTION)

static const struct key keys[] = {
    /* the rows with a flag come in the order dstrain --help lists them */
    {"dstrain", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"dstrain.backend", K_SPECIAL, OFF(dstrain.backend), 0, 0, sp_choice,
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
    {"dstrain.model.type", K_SPECIAL, OFF(dstrain.model_type), 0, 0, sp_choice,
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
    {"dstrain.model.hidden", K_SPECIAL, 0, 0, 0, sp_hidden, "hidden", 0,
     "hidden sizes, e.g. 1024,1024", "1024,1024"},
    {"dstrain.data", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"dstrain.data.dataset", K_SPECIAL, OFF(dstrain.dataset), 0, 0, sp_choice,
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
    {"dstrain.cpu_gemm", K_SPECIAL, OFF(dstrain.cpu_gemm), 0, 0, sp_choice,
     "cpu_gemm", 0,
     "the CPU's large matrix products: fp32, or bf16 (bf16 inputs, fp32 "
     "sums; needs AVX512-BF16 or AMX)",
     "fp32"},
    {"steps_per_print", K_LONG, OFF(steps_per_print), 0, BIG, NULL,
     "steps_per_print", 0, "steps between progress lines", "10"},
    {"seed", K_U64, OFF(seed), 0, BIG, NULL, "seed", 0, "seed", "42"},
    {"train_batch_size", K_SPECIAL, OFF(given.train), 0, 0, sp_batch,
     "train_batch", 0, "train_batch_size", NULL},
    {"train_micro_batch_size_per_gpu", K_SPECIAL, OFF(given.micro), 0, 0,
     sp_batch, "micro_batch", 0, "micro batch per rank", NULL},
    {"gradient_accumulation_steps", K_SPECIAL, OFF(given.accum), 0, 0, sp_batch,
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
    {"optimizer.type", K_SPECIAL, OFF(optimizer.type), 0, 0, sp_optim_type,
     NULL, 0, NULL, "Adam"},
    {"optimizer.params", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"optimizer.params.lr", K_DOUBLE, OFF(optimizer.lr), 0, 1e6, NULL, "lr", 0,
     "learning rate", "0.001"},
    {"optimizer.params.betas", K_SPECIAL, 0, 0, 0, sp_betas, NULL, 0, NULL,
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
    {"scheduler.type", K_SPECIAL, 0, 0, 0, sp_sched_type, NULL, 0, NULL, NULL},
    {"scheduler.params", K_SECTION, 0, 0, 0, NULL, NULL, 0, NULL, NULL},
    {"scheduler.params.warmup_min_lr", K_DOUBLE, OFF(scheduler.warmup_min_lr),
     0, 1e6, NULL, NULL, 0, NULL, NULL},
    {"scheduler.params.warmup_max_lr", K_SPECIAL, 0, 0, 1e6, sp_max_lr, NULL, 0,
     NULL, NULL},
    {"scheduler.params.warmup_num_steps", K_LONG,
     OFF(scheduler.warmup_num_steps), 0, BIG, NULL, NULL, 0, NULL, NULL},
    {"scheduler.params.warmup_type", K_SPECIAL, 0, 0, 0, sp_warmup_type, NULL,
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

int dsl_train_config_flag_at(size_t i, struct dsl_train_config_flag *f)
{
    for (size_t j = 0; j < sizeof(keys) / sizeof(keys[0]); j++) {
        if (!keys[j].flag || i-- > 0)
            continue;
        f->name = keys[j].flag;
        f->key = keys[j].path;
        f->help = keys[j].help;
        f->bare = (keys[j].flags & KEY_BARE) != 0;
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

static const struct key *find_key(const char *path)
{
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strcmp(keys[i].path, path) == 0)
            return &keys[i];
    return NULL;
}

static const char *json_type_name(const cJSON *v)
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
static int get_integer(struct parse_ctx *c, const struct key *k, const cJSON *v, double min,
                       double max, double *out)
{
    char raw[96], lo[40], hi[40];
    if (!cJSON_IsNumber(v))
        return cerr(c, k->path, "expected an integer for '%s', got %s", k->path,
                    json_type_name(v));
    double d = v->valuedouble;
    if (isfinite(d) && d != floor(d))
        return cerr(c, k->path, "expected an integer from %s to %s for '%s', got '%s'",
                    bound_text(min, lo, sizeof(lo)), bound_text(max, hi, sizeof(hi)), k->path,
                    raw_value(c, k->path, v, raw, sizeof(raw)));
    if (!isfinite(d) || d < min || d > max)
        return range_err(c, k->path, v, min, max);
    *out = d;
    return 0;
}

static int apply_leaf(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    double d = 0.0;
    int r;
    switch (k->kind) {
    case K_SECTION:
        return cerr(c, k->path, "expected an object for '%s', got %s", k->path,
                    json_type_name(v));
    case K_BOOL:
        if (!cJSON_IsBool(v))
            return cerr(c, k->path, "expected true or false for '%s', got %s", k->path,
                        json_type_name(v));
        *FIELD(c, k, int) = cJSON_IsTrue(v) ? 1 : 0;
        return 0;
    case K_INT:
    case K_LONG:
    case K_U64:
    case K_SIZE:
        if ((r = get_integer(c, k, v, k->min, k->max, &d)) < 0)
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
            return cerr(c, k->path, "expected a number for '%s', got %s", k->path,
                        json_type_name(v));
        d = v->valuedouble;
        if (!isfinite(d) || d < k->min || d > k->max)
            return range_err(c, k->path, v, k->min, k->max);
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
            return cerr(c, k->path, "expected a non-empty string for '%s', got %s", k->path,
                        json_type_name(v));
        free(*p);
        *p = dsl_xstrdup(v->valuestring);
        return 0;
    }
    case K_SPECIAL:
        return k->fn(c, k, v);
    }
    return 0;
}

/* ---- special keys ----------------------------------------------------------------- */

static int sp_batch(struct parse_ctx *c, const struct key *k, const cJSON *v)
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
    if ((r = get_integer(c, k, v, 1, DSL_CFG_MAX_BATCH, &d)) < 0)
        return r;
    *dst = (long)d;
    return 0;
}

static int sp_optim_type(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    static const struct {
        const char *name;
        enum dsl_cfg_optim t;
    } names[] = {{"adam", DSL_CFG_OPTIM_ADAM},
                 {"adamw", DSL_CFG_OPTIM_ADAMW},
                 {"sgd", DSL_CFG_OPTIM_SGD}};
    if (!cJSON_IsString(v))
        return cerr(c, k->path, "expected a string for '%s', got %s", k->path,
                    json_type_name(v));
    /* DeepSpeed compares optimizer names in lower case */
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(v->valuestring, names[i].name) == 0) {
            *FIELD(c, k, enum dsl_cfg_optim) = names[i].t;
            return 0;
        }
    }
    return cerr(c, k->path, "unsupported optimizer '%s' for '%s' (supported: Adam, AdamW, SGD)",
                v->valuestring, k->path);
}

static int sp_betas(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    double b[2];
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
        return cerr(c, k->path, "expected two numbers [beta1, beta2] for '%s'", k->path);
    for (int i = 0; i < 2; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0.0 && e->valuedouble < 1.0)) {
            char raw[96];
            return cerr(c, k->path, "'%s' must hold two numbers in [0, 1), got %s", k->path,
                        raw_value(c, k->path, v, raw, sizeof(raw)));
        }
        b[i] = e->valuedouble;
    }
    c->cfg->optimizer.beta1 = b[0];
    c->cfg->optimizer.beta2 = b[1];
    return 0;
}

static int sp_sched_type(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    static const enum dsl_sched_type types[] = {DSL_SCHED_WARMUP_LR, DSL_SCHED_WARMUP_DECAY_LR,
                                                DSL_SCHED_WARMUP_COSINE_LR};
    if (cJSON_IsNull(v)) {
        c->cfg->scheduler.type = DSL_SCHED_NONE;
        return 0;
    }
    if (!cJSON_IsString(v))
        return cerr(c, k->path, "expected a string for '%s', got %s", k->path,
                    json_type_name(v));
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (strcmp(v->valuestring, dsl_sched_type_name(types[i])) == 0) {
            c->cfg->scheduler.type = types[i];
            return 0;
        }
    }
    return cerr(c, k->path,
                "unsupported scheduler '%s' for '%s' (supported: WarmupLR, WarmupDecayLR, "
                "WarmupCosineLR)",
                v->valuestring, k->path);
}

static int sp_warmup_type(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    if (cJSON_IsString(v) && strcmp(v->valuestring, "log") == 0)
        c->cfg->scheduler.warmup_type = DSL_WARMUP_LOG;
    else if (cJSON_IsString(v) && strcmp(v->valuestring, "linear") == 0)
        c->cfg->scheduler.warmup_type = DSL_WARMUP_LINEAR;
    else
        return cerr(c, k->path, "'%s' must be \"log\" or \"linear\"", k->path);
    return 0;
}

static int sp_max_lr(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    if (!cJSON_IsNumber(v))
        return cerr(c, k->path, "expected a number for '%s', got %s", k->path,
                    json_type_name(v));
    if (!isfinite(v->valuedouble) || v->valuedouble < k->min || v->valuedouble > k->max)
        return range_err(c, k->path, v, k->min, k->max);
    c->cfg->scheduler.warmup_max_lr = v->valuedouble;
    c->cfg->scheduler.warmup_max_lr_set = 1;
    return 0;
}

static int sp_zero_stage(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    double d = 0.0;
    int r;
    if ((r = get_integer(c, k, v, -BIG, BIG, &d)) < 0)
        return r;
    if (d < 0 || d > 3)
        return cerr(c, k->path, "'%s' must be 0, 1, 2 or 3, got %.0f", k->path, d);
    *FIELD(c, k, int) = (int)d;
    return 0;
}

static int sp_hidden(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    struct dsl_dstrain_config *ds = &c->cfg->dstrain;
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0 || n > DSL_CFG_MAX_HIDDEN)
        return cerr(c, k->path, "expected an array of at most %d layer sizes for '%s'",
                    DSL_CFG_MAX_HIDDEN, k->path);
    size_t tmp[DSL_CFG_MAX_HIDDEN];
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(d >= 1 && d <= DSL_CFG_MAX_LAYER) || d != floor(d)) {
            char raw[96];
            return cerr(c, k->path, "'%s' out of range: each layer size allowed 1..%d, got %s",
                        k->path, DSL_CFG_MAX_LAYER, raw_value(c, k->path, v, raw, sizeof(raw)));
        }
        tmp[i] = (size_t)d;
    }
    memcpy(ds->hidden, tmp, (size_t)n * sizeof(tmp[0]));
    ds->nhidden = (size_t)n;
    return 0;
}

static int sp_choice(struct parse_ctx *c, const struct key *k, const cJSON *v)
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
        return cerr(c, k->path, "bad value '%s' for '%s' (expected one of %s)",
                    v->valuestring, k->path, list);
    return cerr(c, k->path, "expected one of %s for '%s', got %s", list, k->path,
                json_type_name(v));
}

/* a string that may be empty (DeepSpeed's monitors' output_path: "" is the working
   directory); null clears it */
static int sp_anystring(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    char **p = FIELD(c, k, char *);
    if (!cJSON_IsNull(v) && !cJSON_IsString(v))
        return cerr(c, k->path, "expected a string for '%s', got %s", k->path,
                    json_type_name(v));
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
        return cerr(c, k->path, "expected true, false or null for '%s', got %s", k->path,
                    json_type_name(v));
    return 0;
}

/* ---- walking the tree ------------------------------------------------------------- */

static int is_ignored_ds_key(const char *prefix, const char *name, const char *path)
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

/* "auto" for a key that is not a string: only DeepSpeed's HuggingFace integration fills
 * it in. Noted here, reported once for all such keys when the file is read. The batch
 * keys have their own message (it can say which number to write); "dstrain.backend"
 * takes "auto" as one of its values. */
static int auto_value(struct parse_ctx *c, const struct key *k, const cJSON *v)
{
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "auto") != 0 || k->kind == K_STRING ||
        k->kind == K_SECTION || (k->kind == K_SPECIAL && (k->fn == sp_batch || k->fn == sp_choice)))
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
        return cerr(c, path, "expected an object for '%s', got %s", path, json_type_name(v));
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
            const struct key *k = find_key(path);
            if (k)
                r = apply(c, path, k, it);
            else if (is_ignored_ds_key(prefix, it->string, path))
                cwarn(c, path, "DeepSpeed key '%s' is not implemented by dstrain and is ignored",
                      path);
            else
                cwarn(c, path, "unknown key '%s' (ignored)", path);
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
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (keys[i].def && set_word(cfg, &keys[i], keys[i].def, err) < 0)
            DSL_BUG(err);
    /* defaults are no request: only what the file or a flag sets counts as given */
    cfg->given.train = cfg->given.micro = cfg->given.accum = -1;
    cfg->given.model = cfg->given.data = 0;
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
        offset_linecol(text, off, &l, &col);
        return dsl_seterr(err, DSL_ECONFIG, "%s:%d:%d: invalid JSON", c.file, l, col);
    }
    /* only whitespace may follow the value */
    for (size_t off = (size_t)(end - text); off < len; off++) {
        if (!isspace((unsigned char)text[off])) {
            int l, col;
            offset_linecol(text, off, &l, &col);
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
    index_keys(&c);
    dsl_strvec_init(&c.autos);
    r = check_duplicate_keys(&c);
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
    if (k->kind == K_STRING || k->fn == sp_choice || k->fn == sp_optim_type ||
        k->fn == sp_sched_type || k->fn == sp_warmup_type) {
        v = cJSON_CreateString(w);
    } else if (k->fn == sp_hidden || k->fn == sp_betas) {
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
    const struct key *k = find_key(key);
    if (!k)
        return dsl_seterr(err, DSL_ECONFIG, "command line: unknown config key '%s'", key);
    return set_word(cfg, k, value, err);
}

/* ---- cross-field rules ------------------------------------------------------------ */

/* The samples of one optimizer step, micro x accum x world, within DSL_CFG_MAX_BATCH. */
static int global_batch(const char *file, long mb, long ga, long ws, char *err)
{
    double g = (double)mb * (double)ga * (double)ws;
    if (g <= DSL_CFG_MAX_BATCH)
        return 0;
    return dsl_seterr(err, DSL_ECONFIG,
                      "%s: global batch out of range: train_micro_batch_size_per_gpu %ld x "
                      "gradient_accumulation_steps %ld x world size %ld = %.0f samples per "
                      "step, allowed 1..%d",
                      file, mb, ga, ws, g, DSL_CFG_MAX_BATCH);
}

int dsl_train_config_keep_batch(struct dsl_train_config *cfg, long saved_batch,
                                int saved_world, const char *ckpt, char *note, size_t n,
                                char *err)
{
    long ws = cfg->world_size, mb = cfg->train_micro_batch_size_per_gpu;
    long ga = cfg->gradient_accumulation_steps;
    /* train_batch_size given: DeepSpeed's rule already holds it at every world size (or
       the config said otherwise on purpose); the same world: nothing changed by it */
    if (saved_batch <= 0 || saved_world <= 0 || saved_world == ws ||
        saved_batch == cfg->train_batch_size || cfg->given.train > 0)
        return 0;
    if (saved_batch % (mb * ws) == 0) {
        long nga = saved_batch / (mb * ws);
        snprintf(note, n,
                 "keeping the global batch of checkpoint '%s': train_batch_size %ld (saved at "
                 "world size %d) at world size %ld: gradient_accumulation_steps %ld -> %ld "
                 "(train_micro_batch_size_per_gpu %ld x %ld x world size %ld)",
                 ckpt, saved_batch, saved_world, ws, ga, nga, mb, nga, ws);
        cfg->gradient_accumulation_steps = nga;
        cfg->train_batch_size = saved_batch;
        return 1;
    }
    /* the largest micro batch below this one that keeps it, as a suggestion */
    long m = mb - 1;
    while (m > 0 && saved_batch % (m * ws) != 0)
        m--;
    char alt[320] = "";
    size_t l = 0;
    if (saved_batch % mb == 0) { /* the world sizes that keep it with this micro batch */
        long q = saved_batch / mb, shown = 0;
        for (long w = 1; w <= q && shown < 8; w++)
            if (q % w == 0 && l < sizeof(alt) - 40)
                l += (size_t)snprintf(alt + l, sizeof(alt) - l, "%s%ld",
                                      shown++ ? ", " : " (world size ", w);
        l += (size_t)snprintf(alt + l, sizeof(alt) - l, "%s)", shown == 8 ? ", ..." : "");
    }
    if (m > 0)
        snprintf(alt + l, sizeof(alt) - l, ", a micro batch that keeps it (--micro-batch %ld: "
                 "%ld x %ld x world size %ld)", m, m, saved_batch / (m * ws), ws);
    return dsl_seterr(err, DSL_ECONFIG,
                      "checkpoint '%s' was trained with train_batch_size %ld at world size %d; "
                      "at world size %ld with train_micro_batch_size_per_gpu %ld it cannot be "
                      "kept: %ld is not a multiple of %ld x %ld = %ld; resume at a world size "
                      "that keeps it%s, or set 'train_batch_size' (--train-batch) to change "
                      "the global batch on purpose",
                      ckpt, saved_batch, saved_world, ws, mb, saved_batch, mb, ws, mb * ws,
                      alt);
}

int dsl_train_config_finish(struct dsl_train_config *cfg, int world_size, char *err)
{
    /* no config parsed at all: the batch came (or not) from the command line alone */
    const char *file = cfg->path ? cfg->path : "command line";
    long tb = cfg->given.train, mb = cfg->given.micro, ga = cfg->given.accum;
    long ws = world_size;
    char inferred[128] = "";
    int r;

    if (world_size <= 0)
        return dsl_seterr(err, DSL_ECONFIG, "%s: world size %d is not positive", file,
                          world_size);
    if (tb == -2 || mb == -2 || ga == -2) {
        const char *name;
        long want;
        if (tb == -2) {
            name = "train_batch_size";
            double w = (double)(mb > 0 ? mb : 1) * (double)(ga > 0 ? ga : 1) * (double)ws;
            want = w <= DSL_CFG_MAX_BATCH ? (long)w : 0;
        } else if (mb == -2) {
            name = "train_micro_batch_size_per_gpu";
            want = tb > 0 ? tb / ws / (ga > 0 ? ga : 1) : 0;
        } else {
            name = "gradient_accumulation_steps";
            want = tb > 0 && mb > 0 ? tb / mb / ws : 1;
        }
        if (want <= 0)
            return dsl_seterr(err, DSL_ECONFIG,
                              "%s: '%s' is \"auto\", which only the HuggingFace integration of "
                              "DeepSpeed fills in: write a positive integer such that "
                              "train_batch_size = train_micro_batch_size_per_gpu x "
                              "gradient_accumulation_steps x world size (%ld)",
                              file, name, ws);
        return dsl_seterr(err, DSL_ECONFIG,
                          "%s: '%s' is \"auto\", which only the HuggingFace integration of "
                          "DeepSpeed fills in: write %ld (train_batch_size = "
                          "train_micro_batch_size_per_gpu x gradient_accumulation_steps x "
                          "world size %ld), or leave the key out",
                          file, name, want, ws);
    }
    /* deepspeed/runtime/config.py _set_batch_related_parameters; each given value is at
       most DSL_CFG_MAX_BATCH, so products are exact in a double and never overflow */
    if (tb > 0 && mb > 0 && ga > 0) {
        /* all given */
    } else if (tb > 0 && mb > 0) {
        ga = tb / mb / ws;
        snprintf(inferred, sizeof(inferred), " (gradient_accumulation_steps inferred)");
    } else if (tb > 0 && ga > 0) {
        mb = tb / ws / ga;
        snprintf(inferred, sizeof(inferred), " (train_micro_batch_size_per_gpu inferred)");
    } else if (mb > 0 && ga > 0) {
        if ((r = global_batch(file, mb, ga, ws, err)) < 0)
            return r;
        tb = mb * ga * ws;
    } else if (tb > 0) {
        ga = 1;
        mb = tb / ws;
        snprintf(inferred, sizeof(inferred),
                 " (train_micro_batch_size_per_gpu inferred, gradient_accumulation_steps 1)");
    } else if (mb > 0) {
        ga = 1;
        if ((r = global_batch(file, mb, ga, ws, err)) < 0)
            return r;
        tb = mb * ws;
    } else {
        return dsl_seterr(err, DSL_ECONFIG,
                          "%s: either 'train_batch_size' or 'train_micro_batch_size_per_gpu' "
                          "must be given",
                          cfg->path ? file : "no --config given");
    }
    if (mb <= 0 || ga <= 0 || (double)tb != (double)mb * (double)ga * (double)ws)
        return dsl_seterr(err, DSL_ECONFIG,
                          "%s: batch sizes do not add up: train_batch_size %ld != "
                          "train_micro_batch_size_per_gpu %ld x gradient_accumulation_steps "
                          "%ld x world size %ld%s",
                          file, tb, mb, ga, ws, inferred);
    cfg->train_batch_size = tb;
    cfg->train_micro_batch_size_per_gpu = mb;
    cfg->gradient_accumulation_steps = ga;
    cfg->world_size = world_size;

    if (cfg->fp16.enabled && cfg->bf16)
        return dsl_seterr(err, DSL_ECONFIG,
                          "%s: 'fp16.enabled' and 'bf16.enabled' cannot both be true", file);
    switch (cfg->optimizer.type) {
    case DSL_CFG_OPTIM_ADAMW:
        cfg->optimizer.adam_w_mode = 1;
        break;
    case DSL_CFG_OPTIM_ADAM:
        cfg->optimizer.adam_w_mode = cfg->optimizer.adam_w_mode_cfg != 0;
        break;
    case DSL_CFG_OPTIM_SGD:
        cfg->optimizer.adam_w_mode = 0;
        break;
    }
    if (cfg->dstrain.cpu_half && !cfg->fp16.enabled && !cfg->bf16)
        return dsl_seterr(err, DSL_ECONFIG,
                          "%s: 'dstrain.cpu_half' needs 'bf16.enabled' or 'fp16.enabled'",
                          file);
    const struct dsl_dstrain_config *ds = &cfg->dstrain;
    int gpt = ds->model_type && !strcmp(ds->model_type, "gpt");
    int tokens = ds->dataset && (!strcmp(ds->dataset, "text") || !strcmp(ds->dataset, "tokens"));
    if (gpt && !tokens)
        return dsl_seterr(err, DSL_ECONFIG,
                          "%s: model 'gpt' trains on token data: set 'dstrain.data.dataset' "
                          "to \"text\" (byte-level text files) or \"tokens\" (llm.c shards), "
                          "not \"%s\"",
                          file, ds->dataset ? ds->dataset : "");
    if (!gpt && tokens)
        return dsl_seterr(err, DSL_ECONFIG,
                          "%s: dataset '%s' holds tokens, which only 'dstrain.model.type' "
                          "\"gpt\" trains on", file, ds->dataset);
    if (gpt && ds->gpt_dim % ds->gpt_heads)
        return dsl_seterr(err, DSL_ECONFIG,
                          "%s: 'dstrain.model.heads' (%zu) must divide 'dstrain.model.dim' "
                          "(%zu): each head has dim / heads channels",
                          file, ds->gpt_heads, ds->gpt_dim);
    if (gpt && !strcmp(ds->dataset, "text") && ds->gpt_vocab < 256)
        return dsl_seterr(err, DSL_ECONFIG,
                          "%s: dataset \"text\" is byte-level: 'dstrain.model.vocab' must be at "
                          "least 256, got %zu", file, ds->gpt_vocab);
    if (cfg->dstrain.steps == 0 && cfg->dstrain.epochs == 0)
        return dsl_seterr(err, DSL_ECONFIG,
                          "%s: nothing to train: 'dstrain.steps' and 'dstrain.epochs' are both 0",
                          file);
    return 0;
}

enum dsl_precision dsl_train_config_precision(const struct dsl_train_config *cfg, int on_gpu,
                                              const char **warning)
{
    *warning = NULL;
    if (!cfg->fp16.enabled && !cfg->bf16)
        return DSL_PREC_FP32;
    if (!on_gpu && cfg->dstrain.cpu_half) {
        /* mixed precision on the CPU: the GPU's buffers and comm, fp32 arithmetic */
        if (!cfg->fp16.enabled) {
            *warning = "bf16 on the CPU (dstrain.cpu_half): bf16 parameters and gradients, "
                       "fp32 arithmetic and master weights";
            return DSL_PREC_BF16;
        }
        *warning = cfg->fp16.loss_scale > 0.0
                       ? "fp16 on the CPU (dstrain.cpu_half): fp16 parameters and gradients, "
                         "fp32 arithmetic and master weights, with DeepSpeed's static loss "
                         "scaling"
                       : "fp16 on the CPU (dstrain.cpu_half): fp16 parameters and gradients, "
                         "fp32 arithmetic and master weights, with DeepSpeed's dynamic loss "
                         "scaling";
        return DSL_PREC_FP16;
    }
    if (!on_gpu) {
        /* fp16's loss scaling runs on the CPU too (trainer.h); only the arithmetic
         * stays fp32 */
        if (!cfg->fp16.enabled)
            *warning = "bf16.enabled is ignored on the CPU: training runs in fp32";
        else if (cfg->fp16.loss_scale > 0.0)
            *warning = "fp16 on the CPU: computing in fp32, with DeepSpeed's static loss "
                       "scaling";
        else
            *warning = "fp16 on the CPU: computing in fp32, with DeepSpeed's dynamic loss "
                       "scaling";
        return DSL_PREC_FP32;
    }
    return cfg->fp16.enabled ? DSL_PREC_FP16 : DSL_PREC_BF16;
}

const char *dsl_cfg_optim_name(enum dsl_cfg_optim t)
{
    switch (t) {
    case DSL_CFG_OPTIM_ADAM:
        return "Adam";
    case DSL_CFG_OPTIM_ADAMW:
        return "AdamW";
    case DSL_CFG_OPTIM_SGD:
        return "SGD";
    }
    return "?";
}
