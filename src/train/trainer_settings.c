/*
 * dstrain's settings (see include/dslaunch/trainer_settings.h): the config module's
 * defaults, then the config file, then the command-line flags, which are applied
 * through dsl_train_config_set() so that a flag is checked exactly like the same key
 * in the file, then the world-size dependent resolution. A declarative table drives
 * both the parsing and --help; dashes and underscores in flag names are
 * interchangeable, and both --flag=value and --flag value work.
 *
 * The backend decides the path: "tcp" trains on the CPU, "nccl" on the GPU (CUDA device
 * LOCAL_RANK, the CUDA model, nccl collectives), and "auto" takes the GPU path when
 * this dstrain was built with CUDA and every local rank can have a GPU of its own.
 * fp16 turns on DeepSpeed's loss scaling (the scaler from the fp16 section) on the CPU
 * and the GPU alike; the arithmetic stays fp32 on both (no half-precision BLAS on the
 * CPU, half-precision compute on the GPU not implemented yet). bf16 means no loss
 * scaling and, for now, fp32. dstrain.cpu_half (--cpu-half) opts the CPU into the
 * GPU's mixed precision instead: 16-bit parameters and gradients (half the gradient
 * bytes over the comm), fp32 arithmetic and master weights; the GPU ignores it. On the GPU deterministic mode does not exist (nccl's
 * summation order is not ours). Each of these is reported on rank 0, and the run
 * goes on.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/model/device.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/train/lossscale.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/train/trainer_settings.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

enum opt_kind {
    O_KEY,    /* value goes to a config key as is */
    O_STRKEY, /* value is a string: quoted for the config */
    O_LIST,   /* "1024,1024" -> [1024,1024] */
    O_BOOL,   /* flag without value -> true */
    O_CONFIG, /* --config (read first) */
    O_LOCAL,  /* --local_rank: accepted, LOCAL_RANK from the env wins */
    O_PARAMS, /* --save-params */
};

struct opt {
    const char *name;
    enum opt_kind kind;
    const char *key; /* config key */
    const char *help;
};

static const struct opt opts[] = {
    {"config", O_CONFIG, NULL, "DeepSpeed config file (ds_config.json)"},
    {"backend", O_STRKEY, "dstrain.backend", "comm backend: tcp, nccl or auto"},
    {"local_rank", O_LOCAL, NULL, "accepted for DeepSpeed (LOCAL_RANK from the env wins)"},
    {"save_on_signal", O_BOOL, "dstrain.save_on_signal",
     "on SIGTERM finish the step and write a checkpoint"},
    {"metrics", O_STRKEY, "dstrain.metrics", "JSON lines, one object per step, to FILE"},
    {"threads", O_KEY, "dstrain.threads", "compute threads per rank (0: fair share)"},
    {"model", O_STRKEY, "dstrain.model.type", "model type (mlp)"},
    {"hidden", O_LIST, "dstrain.model.hidden", "hidden sizes, e.g. 1024,1024"},
    {"data", O_STRKEY, "dstrain.data.dataset", "fashion_mnist or synthetic"},
    {"data_path", O_STRKEY, "dstrain.data.path", "directory of the Fashion-MNIST files"},
    {"synthetic_train", O_KEY, "dstrain.data.synthetic.train_samples",
     "synthetic training samples"},
    {"synthetic_test", O_KEY, "dstrain.data.synthetic.test_samples", "synthetic test samples"},
    {"synthetic_dim", O_KEY, "dstrain.data.synthetic.features", "synthetic input size"},
    {"drop_last", O_KEY, "dstrain.data.drop_last", "drop the last partial batch (true/false)"},
    {"epochs", O_KEY, "dstrain.epochs", "epochs (when steps is 0)"},
    {"steps", O_KEY, "dstrain.steps", "optimizer steps (0: epochs decide)"},
    {"eval_interval", O_KEY, "dstrain.eval_interval", "steps between evaluations (0: epoch)"},
    {"checkpoint_dir", O_STRKEY, "dstrain.checkpoint_dir", "checkpoint directory"},
    {"save_interval", O_KEY, "dstrain.save_interval", "steps between checkpoints"},
    {"resume", O_STRKEY, "dstrain.resume", "resume from 'latest' or a tag"},
    {"deterministic", O_KEY, "dstrain.deterministic", "canonical reduction order (true/false)"},
    {"cpu_half", O_BOOL, "dstrain.cpu_half",
     "fp16/bf16 on the CPU: 16-bit params and gradients (half the comm bytes)"},
    {"save_params", O_PARAMS, NULL, "write the final fp32 parameters (raw) to FILE"},
    {"steps_per_print", O_KEY, "steps_per_print", "steps between progress lines"},
    {"seed", O_KEY, "seed", "seed"},
    {"train_batch", O_KEY, "train_batch_size", "train_batch_size"},
    {"micro_batch", O_KEY, "train_micro_batch_size_per_gpu", "micro batch per rank"},
    {"grad_accum", O_KEY, "gradient_accumulation_steps", "gradient_accumulation_steps"},
    {"zero_stage", O_KEY, "zero_optimization.stage", "ZeRO stage (0, 1, 2)"},
    {"bucket_size", O_KEY, "zero_optimization.reduce_bucket_size", "reduce_bucket_size"},
    {"overlap_comm", O_KEY, "zero_optimization.overlap_comm", "overlap_comm (true/false)"},
    {"lr", O_KEY, "optimizer.params.lr", "learning rate"},
    {"gradient_clipping", O_KEY, "gradient_clipping", "global L2 norm clip (0: off)"},
};

static int name_eq(const char *flag, size_t n, const char *name)
{
    if (strlen(name) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((flag[i] == '-' ? '_' : flag[i]) != name[i])
            return 0;
    return 1;
}

void dsl_train_settings_help(FILE *f)
{
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        char name[32];
        snprintf(name, sizeof(name), "%s", opts[i].name);
        for (char *c = name; *c; c++)
            *c = *c == '_' && opts[i].kind != O_LOCAL ? '-' : *c;
        fprintf(f, "  --%-18s %-6s %s%s%s\n", name, opts[i].kind == O_BOOL ? "" : "VALUE",
                opts[i].help, opts[i].key ? "; key " : "", opts[i].key ? opts[i].key : "");
    }
    fprintf(f, "Flags override the config file; see docs/trainer.md and docs/config.md.\n");
}

/* the value as the config module's override syntax wants it */
static int apply(struct dsl_train_settings *s, const struct opt *o, const char *v, char *err)
{
    struct dsl_dynbuf b;
    int r;
    dsl_dynbuf_init(&b, 4096);
    switch (o->kind) {
    case O_STRKEY:
        r = dsl_dynbuf_addf(&b, "\"%s\"", v);
        break;
    case O_LIST:
        r = dsl_dynbuf_addf(&b, "[%s]", v);
        break;
    case O_BOOL:
        r = dsl_dynbuf_addstr(&b, "true");
        break;
    default:
        r = dsl_dynbuf_addstr(&b, v);
        break;
    }
    if (r < 0) {
        dsl_dynbuf_release(&b);
        return dsl_seterr(err, DSL_EUSAGE, "value of --%s is too long", o->name);
    }
    r = dsl_train_config_set(&s->cfg, o->key, b.buf, err);
    dsl_dynbuf_release(&b);
    return r;
}

/* backend nccl: the GPU path must be built in and have a GPU to run on */
static int check_gpu(const struct dsl_train_settings *s, char *err)
{
    const char *b = s->cfg.dstrain.backend;
    if (!b || strcmp(b, "nccl") != 0)
        return 0;
#ifdef DSL_HAVE_CUDA
    if (dsl_device_cuda_count() > 0)
        return 0;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    return dsl_seterr(err, DSL_ENOTSUP,
                      "backend 'nccl' needs a GPU and none is visible%s%s%s (use tcp)",
                      cvd ? " with CUDA_VISIBLE_DEVICES='" : "", cvd ? cvd : "",
                      cvd ? "'" : "");
#else
    return dsl_seterr(err, DSL_ENOTSUP,
                      "backend 'nccl': this dstrain was built without CUDA (use tcp)");
#endif
}

int dsl_train_settings_parse(struct dsl_train_settings *s, int argc, char **argv, char *err)
{
    memset(s, 0, sizeof(*s));
    dsl_train_config_init(&s->cfg);
    s->have_cfg = 1;
    int r;
    /* the config file first, so that flags override it */
    for (int i = 1; i < argc; i++) {
        const char *path = NULL;
        if (!strncmp(argv[i], "--config=", 9))
            path = argv[i] + 9;
        else if (!strcmp(argv[i], "--config") && i + 1 < argc)
            path = argv[++i];
        if (path && (r = dsl_train_config_load(&s->cfg, path, 0, err)) < 0)
            return r;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        if (strncmp(a, "--", 2) != 0)
            return dsl_seterr(err, DSL_EUSAGE, "unexpected argument '%s'", a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t n = eq ? (size_t)(eq - name) : strlen(name);
        const struct opt *o = NULL;
        for (size_t k = 0; k < sizeof(opts) / sizeof(opts[0]); k++)
            if (name_eq(name, n, opts[k].name))
                o = &opts[k];
        if (!o)
            return dsl_seterr(err, DSL_EUSAGE, "unknown option '%s'", a);
        const char *v = eq ? eq + 1 : NULL;
        if (o->kind == O_BOOL && v)
            return dsl_seterr(err, DSL_EUSAGE, "option '--%s' takes no value", o->name);
        if (o->kind != O_BOOL && !v) {
            if (i + 1 >= argc)
                return dsl_seterr(err, DSL_EUSAGE, "option '--%s' needs a value", o->name);
            v = argv[++i];
        }
        if (o->kind == O_CONFIG)
            continue;
        if (o->kind == O_LOCAL) {
            int lr;
            if (dsl_parse_int(v, 0, 1 << 20, &lr) < 0)
                return dsl_seterr(err, DSL_EUSAGE, "bad value '%s' for --local_rank", v);
            continue;
        }
        if (o->kind == O_PARAMS) {
            free(s->params_out);
            s->params_out = dsl_xstrdup(v);
            continue;
        }
        if ((r = apply(s, o, v, err)) < 0)
            return r;
    }
    return check_gpu(s, err);
}

#ifdef DSL_HAVE_CUDA
/* LOCAL_WORLD_SIZE, 1 when unset or bad */
static int local_world(void)
{
    const char *e = getenv("LOCAL_WORLD_SIZE");
    int n;
    return e && dsl_parse_int(e, 1, 1 << 20, &n) == 0 ? n : 1;
}
#endif

const char *dsl_train_settings_backend(const struct dsl_train_settings *s)
{
    const char *b = s->cfg.dstrain.backend;
    if (b && strcmp(b, "auto") != 0)
        return b;
#ifdef DSL_HAVE_CUDA
    /* every local rank on a GPU of its own (the same answer on all of them) */
    if (dsl_device_cuda_count() >= local_world())
        return "nccl";
#endif
    return "tcp";
}

int dsl_train_settings_device(void)
{
    const char *e = getenv("LOCAL_RANK");
    int n;
    return e && dsl_parse_int(e, 0, 1 << 20, &n) == 0 ? n : 0;
}

int dsl_train_settings_verify(struct dsl_train_settings *s, int rank, int world, char *err)
{
    struct dsl_train_config *c = &s->cfg;
    int r = dsl_train_config_finish(c, world, err);
    if (r < 0)
        return r;
    if (rank == 0)
        for (size_t i = 0; i < c->warnings.nr; i++)
            dsl_warn("%s", c->warnings.v[i]);
    const char *backend = dsl_train_settings_backend(s);
    int gpu = backend && !strcmp(backend, "nccl");
    const char *warning = NULL;
    enum dsl_precision prec = dsl_train_config_precision(c, gpu, &warning);
    if (warning && rank == 0)
        dsl_warn("%s", warning);
    /* on the CPU the config module's warning above says that it computes in fp32, or
     * with cpu_half that parameters and gradients are 16-bit (fp32 arithmetic); on the
     * GPU fp16/bf16 mean 16-bit compute with fp32 master weights (trainer.h) */
    if (gpu && c->dstrain.deterministic > 0 && rank == 0)
        dsl_warn("dstrain.deterministic is ignored on the GPU: nccl's summation order is "
                 "not under dstrain's control, so the run is not bit-identical across world "
                 "sizes and stages");
    if (c->zero.stage > 2)
        return dsl_seterr(err, DSL_ENOTSUP, "ZeRO stage %d is not supported (0, 1 or 2)",
                          c->zero.stage);

    struct dsl_trainer_opts *to = &s->to;
    to->micro_batch = (size_t)c->train_micro_batch_size_per_gpu;
    to->grad_accum = (size_t)c->gradient_accumulation_steps;
    to->zero_stage = c->zero.stage;
    to->bucket_elems = (size_t)c->zero.reduce_bucket_size;
    to->overlap_comm = c->zero.overlap_comm;
    to->deterministic = gpu ? 0 : c->dstrain.deterministic < 0 ? 1 : c->dstrain.deterministic;
    to->grad_clip = (float)c->gradient_clipping;
    to->prescale = c->prescale_gradients;
    to->predivide = (float)c->gradient_predivide_factor;
    to->seed = c->seed;
    /* fp16: DeepSpeed's loss scaler, whatever the device; bf16 and fp32: none */
    to->loss_scaling = c->fp16.enabled != 0;
    to->dtype = prec == DSL_PREC_FP16   ? DSL_FLOAT16
                : prec == DSL_PREC_BF16 ? DSL_BFLOAT16
                                        : DSL_FLOAT32;
    dsl_lossscale_init(&to->scaler, &c->fp16);
    struct dsl_optim_hparams *h = &to->optim;
    h->type = c->optimizer.type == DSL_CFG_OPTIM_SGD ? DSL_OPTIM_SGD : DSL_OPTIM_ADAM;
    h->lr = (float)c->optimizer.lr;
    h->beta1 = (float)c->optimizer.beta1;
    h->beta2 = (float)c->optimizer.beta2;
    h->eps = (float)c->optimizer.eps;
    h->weight_decay = (float)c->optimizer.weight_decay;
    h->adam_w_mode = c->optimizer.adam_w_mode;
    h->momentum = (float)c->optimizer.momentum;

    struct dsl_model_spec *m = &s->model;
    m->type = c->dstrain.model_type;
    m->nhidden = c->dstrain.nhidden;
    for (size_t i = 0; i < m->nhidden && i < DSL_MODEL_MAX_LAYERS; i++)
        m->hidden[i] = c->dstrain.hidden[i];
    m->max_batch = 1000; /* evaluation batch */
    /* segments depend only on the bucket size, never on the world size or stage */
    m->seg_max = to->bucket_elems;
    m->dtype = to->dtype; /* DSL_FLOAT32 on the CPU unless cpu_half (prec says so) */

    struct dsl_data_opts *d = &s->data;
    d->name = c->dstrain.dataset;
    d->path = c->dstrain.data_path;
    d->synth_train = c->dstrain.synthetic_train;
    d->synth_test = c->dstrain.synthetic_test;
    d->synth_dim = c->dstrain.synthetic_features;
    d->synth_classes = c->dstrain.synthetic_classes;
    d->seed = c->seed;

    struct dsl_run_opts *ro = &s->ro;
    ro->steps = c->dstrain.steps;
    ro->epochs = c->dstrain.epochs;
    ro->steps_per_print = c->steps_per_print > 0 ? (uint64_t)c->steps_per_print : 0;
    ro->eval_interval = c->dstrain.eval_interval;
    ro->save_interval = c->dstrain.save_interval;
    ro->shuffle = c->dstrain.shuffle;
    ro->drop_last = c->dstrain.drop_last;
    ro->seed = c->seed;
    ro->metrics_path = c->dstrain.metrics;
    ro->save_on_signal = c->dstrain.save_on_signal;
    ro->prefix = "dstrain";
    ro->params_out = s->params_out;
    ro->wall_clock_breakdown = c->wall_clock_breakdown;

    size_t W = (size_t)world;
    if (to->deterministic && world > 1 && (W & (W - 1)) && rank == 0)
        dsl_warn("world size %d is not a power of two: the run is reproducible at this "
                 "world size, but not bit-identical to other world sizes",
                 world);
    return 0;
}

void dsl_train_settings_bind(struct dsl_train_settings *s, size_t train_samples,
                             size_t global_batch)
{
    uint64_t spe = s->ro.drop_last ? train_samples / global_batch
                                   : (train_samples + global_batch - 1) / global_batch;
    uint64_t total = s->ro.steps ? s->ro.steps : s->ro.epochs * spe;
    dsl_sched_init(&s->sched, &s->cfg.scheduler, s->cfg.optimizer.lr, total);
    s->to.lr_fn = dsl_sched_lr_fn;
    s->to.lr_ctx = &s->sched;
}

void dsl_train_settings_release(struct dsl_train_settings *s)
{
    if (s->have_cfg)
        dsl_train_config_release(&s->cfg);
    free(s->params_out);
    memset(s, 0, sizeof(*s));
}
