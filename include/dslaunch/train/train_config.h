/*
 * ds_config.json with DeepSpeed's meaning, plus the trainer's own "dstrain" object
 * (docs/config.md lists every key). The only user of cJSON in the project (house
 * style 19): the file is parsed, every known key is copied into struct
 * dsl_train_config with range checks, and the cJSON tree is deleted before returning.
 *
 * Layers: dsl_train_config_init() sets the defaults, dsl_train_config_parse() (or
 * _load()) applies the file, dsl_train_config_set() applies a command-line override
 * through the same validation, and dsl_train_config_finish() resolves what needs the
 * world size (the batch triple) and checks the cross-field rules. _load()/_parse()
 * call _finish() themselves when given a world size > 0; pass 0 to defer it until
 * the overrides are in.
 *
 * Errors are git style with a position where there is one:
 *   config.json:12:5: expected a number for 'optimizer.params.lr'
 * Unknown keys are not errors: each gives one line in cfg->warnings, which the caller
 * prints (rank 0 only) with dsl_warn().
 *
 * Every string in the struct is owned by it and freed by dsl_train_config_release().
 */
#ifndef DSLAUNCH_TRAIN_CONFIG_H
#define DSLAUNCH_TRAIN_CONFIG_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "dslaunch/train/scheduler.h"
#include "dslaunch/common/strvec.h"

#define DSL_CFG_MAX_HIDDEN 16
/* The largest hidden layer (dstrain.model.hidden[i]) */
#define DSL_CFG_MAX_LAYER 1000000
/* The most samples per optimizer step (train_batch_size, and micro x accumulation x
   world size): the sampler holds an index per sample of an epoch, rounded up to it */
#define DSL_CFG_MAX_BATCH 16777216

enum dsl_cfg_optim {
    DSL_CFG_OPTIM_ADAM = 0, /* "Adam": decoupled weight decay unless adam_w_mode false */
    DSL_CFG_OPTIM_ADAMW,    /* "AdamW": always decoupled */
    DSL_CFG_OPTIM_SGD,      /* "SGD" (momentum, torch.optim.SGD) */
};

struct dsl_optim_config {
    enum dsl_cfg_optim type;
    double lr;           /* params.lr; default 0.001 */
    double beta1, beta2; /* params.betas; default [0.9, 0.999] */
    double eps;          /* params.eps; default 1e-8 */
    double weight_decay; /* params.weight_decay; default 0 (DeepSpeed's FusedAdam) */
    int adam_w_mode;     /* resolved by _finish(): 1 for AdamW, params.adam_w_mode
                            (default 1) for Adam, 0 for SGD */
    int adam_w_mode_cfg; /* params.adam_w_mode as written; -1: not given */
    double momentum;     /* params.momentum (SGD); default 0 */
};

struct dsl_fp16_config {
    int enabled;                /* fp16.enabled; default 0 */
    double loss_scale;          /* 0: dynamic (default); > 0: static scale */
    int initial_scale_power;    /* default 16; 0..127 (2^127: fp32's largest power of 2) */
    long loss_scale_window;     /* default 1000 */
    int hysteresis;             /* default 2 */
    int consecutive_hysteresis; /* default 0 */
    double min_loss_scale;      /* default 1 */
};

struct dsl_zero_config {
    int stage;                   /* 0, 1, 2, 3 (3: on the CPU only); default 0 */
    uint64_t reduce_bucket_size; /* elements; default 500000000 */
    uint64_t allgather_bucket_size; /* elements; default 500000000 */
    int overlap_comm;            /* default 0 */
    int contiguous_gradients;    /* default 1 */
    int reduce_scatter;          /* default 1 */
    /* stage 3, in elements (DeepSpeed's defaults) */
    uint64_t stage3_prefetch_bucket_size;        /* default 50000000; 0: no prefetch */
    uint64_t stage3_max_live_parameters;         /* default 1000000000 */
    uint64_t stage3_param_persistence_threshold; /* default 100000 */
    int stage3_gather_16bit_weights_on_model_save; /* default 0 */
    /* ZeRO-Offload's target, "none", "cpu" or "nvme" (NULL: none): offload_optimizer
     * (stages 1-3) and offload_param (stage 3). The CPU trainer's state is in host
     * memory already (a no-op, said once); the GPU trainer refuses it, and "nvme"
     * everywhere. */
    char *offload_optimizer;
    char *offload_param;
    int offload_optimizer_pin;   /* offload_optimizer.pin_memory; default 0 */
    int offload_param_pin;       /* offload_param.pin_memory; default 0 */
    int cpu_offload;             /* legacy: offload_optimizer "cpu"; default 0 */
};

enum dsl_precision {
    DSL_PREC_FP32 = 0,
    DSL_PREC_FP16,
    DSL_PREC_BF16,
};

/** "dstrain": {...}: the trainer's own settings, each also a command-line flag. */
struct dsl_dstrain_config {
    char *model_type;            /* model.type: "mlp" (default) or "gpt" */
    size_t gpt_layers;           /* model.layers (gpt); default 4 */
    size_t gpt_dim;              /* model.dim (gpt); default 128 */
    size_t gpt_heads;            /* model.heads (gpt), dividing dim; default 4 */
    size_t gpt_context;          /* model.context (gpt): tokens per window; default 128 */
    size_t gpt_vocab;            /* model.vocab (gpt); default 256 (bytes) */
    size_t hidden[DSL_CFG_MAX_HIDDEN]; /* model.hidden; default [1024, 1024] */
    size_t nhidden;
    char *dataset;               /* data.dataset: "fashion_mnist" (default), "synthetic",
                                    "text", "tokens" (the last two for gpt) */
    char *data_path;             /* data.path; NULL (default): the dataset's own
                                    (/usr/share/datasets/fashion-mnist,
                                    /usr/share/games/fortunes) */
    size_t data_stride;          /* data.stride: tokens between training windows; 0
                                    (default): the context */
    double val_fraction;         /* data.val_fraction (text): default
                                    DSL_CFG_VAL_FRACTION */
    size_t synthetic_train;      /* data.synthetic.train_samples; default 60000 */
    size_t synthetic_test;       /* data.synthetic.test_samples; default 10000 */
    size_t synthetic_features;   /* data.synthetic.features; default 784 */
    size_t synthetic_classes;    /* data.synthetic.classes; default 10 */
    int shuffle;                 /* data.shuffle; default 1 */
    int drop_last;               /* data.drop_last; default 0 */
    uint64_t epochs;             /* default 1 (used when steps is 0) */
    uint64_t steps;              /* optimizer steps; 0 (default): epochs decide */
    uint64_t eval_interval;      /* steps; 0 (default): at the end of every epoch */
    char *checkpoint_dir;        /* NULL (default): no checkpoints */
    uint64_t save_interval;      /* steps; 0 (default): only at the end */
    double save_interval_minutes; /* also after a step this long after the last save;
                                     0 (default): none by time */
    uint64_t eval_iters;         /* global batches per evaluation; 0 (default): all */
    int save_on_signal;          /* -1 (default): on when checkpoint_dir is set */
    int deterministic;           /* -1 (default): on for the tcp (CPU) backend */
    char *backend;               /* "auto" (default), "tcp", "nccl" */
    char *metrics;               /* JSON-lines file; NULL (default): none */
    char *resume;                /* "latest", a tag, or "auto" (latest if there is one,
                                    else fresh); NULL (default): fresh start, or "auto"
                                    when restarted by a launcher */
    int allow_unverified_checkpoint; /* default 0: a checkpoint file without checksums
                                        is refused */
    int threads;                 /* BLAS threads per rank; 0 (default): automatic */
    int cpu_half;                /* default 0: fp16/bf16 on the CPU compute in fp32; 1:
                                    16-bit params and gradients (mixed precision) */
    char *cpu_gemm;              /* "fp32" (default) or "bf16": the CPU models' large
                                    products with bf16-rounded inputs (oneDNN) */
};

/* data.val_fraction's default: the last tenth of the text is validation (tokenize
 * splits the same way) */
#define DSL_CFG_VAL_FRACTION 0.1

/* cfg->given.model: 'dstrain.model.hidden' (the MLP's) or any of the GPT's size keys */
#define DSL_CFG_GIVEN_MLP 1u
#define DSL_CFG_GIVEN_GPT 2u
/* cfg->given.data: data keys that only some datasets or models use */
#define DSL_CFG_GIVEN_VAL_FRACTION 1u
#define DSL_CFG_GIVEN_STRIDE 2u
/* cfg->given.zero: keys whose default differs on the GPU path when they are not set */
#define DSL_CFG_GIVEN_BUCKET 1u
#define DSL_CFG_GIVEN_OVERLAP 2u

/* DeepSpeed's csv_monitor / tensorboard sections (src/train/monitor.c) */
struct dsl_cfg_monitor {
    int enabled;       /* default 0 */
    char *output_path; /* NULL or "" (default): the working directory */
    char *job_name;    /* default "DeepSpeedJobName" */
};

struct dsl_train_config {
    char *path;                     /* the file, for messages ("<string>" if none) */
    /* the batch triple, resolved by _finish() (0 before it) */
    long train_batch_size;
    long train_micro_batch_size_per_gpu;
    long gradient_accumulation_steps;
    int world_size;                 /* the world size _finish() resolved against */
    struct {
        long train, micro, accum;   /* as written; -1: not given, -2: "auto" */
        unsigned model;             /* DSL_CFG_GIVEN_*: which model's size keys were set */
        unsigned data;              /* DSL_CFG_GIVEN_VAL_FRACTION, _STRIDE: set */
        unsigned zero;              /* DSL_CFG_GIVEN_BUCKET, _OVERLAP: set */
    } given;

    struct dsl_optim_config optimizer;
    struct dsl_sched_config scheduler;
    double gradient_clipping;       /* default 0 = off */
    long steps_per_print;           /* default 10 */
    uint64_t seed;                  /* default 42 */
    int wall_clock_breakdown;       /* default 0 */
    int prescale_gradients;         /* default 0 */
    double gradient_predivide_factor; /* default 1.0 */
    struct dsl_fp16_config fp16;
    int bf16;                       /* bf16.enabled (or legacy "bfloat16"); default 0 */
    struct dsl_cfg_monitor csv_monitor, tensorboard;
    struct dsl_zero_config zero;
    struct dsl_dstrain_config dstrain;

    struct dsl_strvec warnings;     /* one line per unknown key, owned */
};

/** Defaults (DeepSpeed's where DeepSpeed has one). */
void dsl_train_config_init(struct dsl_train_config *cfg);
/* 1 when an offload device (zero.offload_optimizer, zero.offload_param) moves data:
 * "cpu" or "nvme"; NULL and "none" do not */
int dsl_cfg_offloads(const char *device);
void dsl_train_config_release(struct dsl_train_config *cfg);

/**
 * Read and parse `path` on top of what cfg holds (call _init() first). With
 * world_size > 0, also _finish(). Returns 0 or DSL_ECONFIG (or -errno for an
 * unreadable file) with err set; cfg must still be released either way.
 */
int dsl_train_config_load(struct dsl_train_config *cfg, const char *path, int world_size,
                          char *err);
/** The same for text already in memory (len bytes, need not be NUL-terminated);
 *  path is only used in messages (NULL: "<string>"). */
int dsl_train_config_parse(struct dsl_train_config *cfg, const char *path,
                           const char *text, size_t len, int world_size, char *err);

/**
 * Apply one override, key as a dotted path of the file's keys and value a command-line
 * word, taken as a value of the key's type and never read as JSON text: a string key
 * takes it byte for byte ("dstrain.metrics", "c\"d.jsonl"), a list key comma-separated
 * items ("dstrain.model.hidden", "256,256" or "[256,256]"), any other key true, false,
 * null or a number that is the whole word ("dstrain.epochs", "3"),
 * ("optimizer.params.lr", "1e-3"). The same checks as in the file apply; an unknown
 * key is an error here. Returns 0 or DSL_ECONFIG with err set.
 */
int dsl_train_config_set(struct dsl_train_config *cfg, const char *key, const char *value,
                         char *err);

/** A config key that is also one of dstrain's flags (a row of config_table.c's key table). */
struct dsl_train_config_flag {
    const char *name; /* "checkpoint_dir": --checkpoint-dir or --checkpoint_dir */
    const char *key;  /* "dstrain.checkpoint_dir", for dsl_train_config_set() */
    const char *help; /* its line in --help, without the key */
    int bare;         /* 1: takes no value and sets true */
};

/**
 * The i-th key that has a flag, in the order dstrain --help lists them: returns 1 with
 * *f filled, or 0 past the last. The strings are static.
 */
int dsl_train_config_flag_at(size_t i, struct dsl_train_config_flag *f);

/**
 * docs/config.md's key table of one section of the page (batch, optimizer, scheduler,
 * precision, top, zero_optimization, dstrain, monitors) as markdown on f: a row per key
 * with its type, default, allowed values and notes; section NULL: every section, each
 * under a heading of its name. DSL_EUSAGE for an unknown section (err lists them).
 */
int dsl_train_config_doc(FILE *f, const char *section, char *err);
/** One markdown table cell ("| s "), with '|' escaped. */
void dsl_train_doc_cell(FILE *f, const char *s);

/**
 * Resolve the batch triple for world_size with DeepSpeed's integer-division rules
 * (any two given infer the third; only train_batch_size or only the micro batch give
 * gradient_accumulation_steps 1), then check train = micro x accum x world and the
 * cross-field rules (fp16 with bf16). Safe to call again after more overrides.
 */
int dsl_train_config_finish(struct dsl_train_config *cfg, int world_size, char *err);
/**
 * Resuming a checkpoint of global batch saved_batch, saved at world size saved_world,
 * with a finished cfg (dsl_train_config_finish): keep train_batch_size when the world
 * size changed and the config does not give train_batch_size itself (its global batch
 * then followed the world size), by changing gradient_accumulation_steps. Returns 1
 * when it did (note: one line for people, naming ckpt and the numbers), 0 when nothing
 * needs changing (train_batch_size given, the same world size or the same batch, an
 * unknown saved batch), DSL_ECONFIG with err when the micro batch and world size
 * cannot make it.
 */
int dsl_train_config_keep_batch(struct dsl_train_config *cfg, long saved_batch,
                                int saved_world, const char *ckpt, char *note, size_t n,
                                char *err);

/**
 * The precision this run will use. On a GPU: what the config asks. On the CPU
 * (on_gpu 0) fp16/bf16 compute in fp32 and *warning is set to a one-line explanation
 * (NULL when there is nothing to say): fp16 still gets its loss scaling there, bf16
 * is plain fp32. With dstrain.cpu_half the CPU gets what the config asks too (16-bit
 * parameters and gradients, fp32 arithmetic and master weights), and the warning
 * says so.
 */
enum dsl_precision dsl_train_config_precision(const struct dsl_train_config *cfg,
                                              int on_gpu, const char **warning);

/** Name of an optimizer type as written in the file ("Adam", "AdamW", "SGD"). */
const char *dsl_cfg_optim_name(enum dsl_cfg_optim t);

#endif
