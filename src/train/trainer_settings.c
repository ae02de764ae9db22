/*
 * dstrain's settings (see include/dslaunch/train/trainer_settings.h): the config module's
 * defaults, then the config file, then the command-line flags, which are applied
 * through dsl_train_config_set() so that a flag is checked exactly like the same key
 * in the file, then the world-size dependent resolution. The flags that set a key are
 * rows of the config module's key table (name, key, help); with dstrain's own few
 * they make the common parser's table (opt.h), which drives both the parsing and
 * --help. A flag's word travels as it was typed, never as JSON text.
 *
 * The backend decides the path: "tcp" trains on the CPU, "nccl" on the GPU (the CUDA
 * device of common/gpupick.h's rule, the CUDA model, nccl collectives), and "auto"
 * takes the GPU path when this dstrain was built with CUDA and this rank can have a GPU
 * of its own, and says so when it cannot.
 * fp16 turns on DeepSpeed's loss scaling (the scaler from the fp16 section) on the CPU
 * and the GPU alike; the arithmetic stays fp32 on both (no half-precision BLAS on the
 * CPU, half-precision compute on the GPU not implemented yet). bf16 means no loss
 * scaling and, for now, fp32. dstrain.cpu_half (--cpu-half) opts the CPU into the
 * GPU's mixed precision instead: 16-bit parameters and gradients (half the gradient
 * bytes over the comm), fp32 arithmetic and master weights; the GPU ignores it. On the GPU deterministic mode does not exist (nccl's
 * summation order is not ours). Each of these is reported on rank 0, and the run
 * goes on.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/cudalibs.h"
#include "dslaunch/device/device.h"
#include "dslaunch/common/error.h"
#include "dslaunch/train/lossscale.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/train/trainer_settings.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

/*
 * The flags. Each one that sets a config key is recorded with its word as typed (a bare
 * flag "true") and applied after every --config file has been read, in command-line
 * order; the config module makes the word a value of the key's type.
 */
struct pending {
    struct dsl_strvec configs;   /* --config files, in order */
    struct dsl_strvec overrides; /* key, word, key, word ... */
    char *params_out;            /* --save-params */
    int help;
};

static int set_key(void *target, const struct dsl_opt *d, const char *v, char *err)
{
    struct pending *p = target;
    (void)err;
    dsl_strvec_push(&p->overrides, d->data);
    dsl_strvec_push(&p->overrides, v ? v : "true"); /* a bare flag */
    return 0;
}

/* --no-save-on-signal: the key's false, which a bare key flag cannot say */
static int set_key_false(void *target, const struct dsl_opt *d, const char *v, char *err)
{
    (void)v;
    return set_key(target, d, "false", err);
}

static int set_local_rank(void *target, const struct dsl_opt *d, const char *v, char *err)
{
    int lr;
    (void)target;
    (void)d;
    int r = dsl_parse_int(v, 0, 1 << 20, &lr);
    if (r == -ERANGE)
        return dsl_seterr(err, DSL_EUSAGE,
                          "option '--local_rank' is out of range: allowed 0..%d, got '%s'",
                          1 << 20, v);
    if (r < 0)
        return dsl_seterr(err, DSL_EUSAGE, "bad value '%s' for --local_rank", v);
    return 0;
}

/* dstrain's own flags, which set no config key, and the key flag each follows in
 * --help (NULL: first, "": last); the others come from the config's key table */
static const struct {
    const char *after;
    struct dsl_opt opt;
} own_opts[] = {
    {NULL,
     {"config", 0, DSL_OPT_LIST, offsetof(struct pending, configs), "FILE",
      "DeepSpeed config file (ds_config.json)", NULL, 0, 0, NULL, 0, NULL}},
    {"save_on_signal",
     {"no_save_on_signal", 0, DSL_OPT_CALL, 0, NULL,
      "never save on a stop signal, also with a checkpoint dir; key dstrain.save_on_signal "
      "false", NULL, 0, 0, set_key_false, 0, "dstrain.save_on_signal"}},
    {"backend",
     {"local_rank", 0, DSL_OPT_CALL, 0, "N",
      "accepted for DeepSpeed (LOCAL_RANK from the env wins)", NULL, 0, 0, set_local_rank, 0,
      NULL}},
    {"cpu_gemm",
     {"save_params", 0, DSL_OPT_STRING, offsetof(struct pending, params_out), "FILE",
      "write the final fp32 parameters (raw) to FILE", NULL, 0, 0, NULL, 0, NULL}},
    {"",
     {"help", 'h', DSL_OPT_FLAG, offsetof(struct pending, help), NULL, "show this help", NULL,
      0, 0, NULL, 0, NULL}},
};

#define NOWN (sizeof(own_opts) / sizeof(own_opts[0]))

/* The option table of the parser: built from the key table, so that a flag and its
 * key are one row; released by flag_table_release() */
struct flag_table {
    struct dsl_opt *opts;
    size_t n;
    struct dsl_strvec helps; /* "help; key K", which opts[].help point into */
};

static void push_own(struct flag_table *t, const char *after)
{
    for (size_t i = 0; i < NOWN; i++)
        if (after ? own_opts[i].after && !strcmp(own_opts[i].after, after) : !own_opts[i].after)
            t->opts[t->n++] = own_opts[i].opt;
}

static void flag_table_init(struct flag_table *t, struct dsl_opt_parser *p)
{
    struct dsl_train_config_flag f;
    size_t nkeys = 0;
    while (dsl_train_config_flag_at(nkeys, &f))
        nkeys++;
    t->opts = dsl_xcalloc(nkeys + NOWN, sizeof(t->opts[0]));
    t->n = 0;
    dsl_strvec_init(&t->helps);
    push_own(t, NULL);
    for (size_t i = 0; dsl_train_config_flag_at(i, &f); i++) {
        dsl_strvec_pushf(&t->helps, "%s; key %s", f.help, f.key);
        t->opts[t->n++] = (struct dsl_opt){
            .name = f.name,
            .kind = DSL_OPT_CALL,
            .arg = f.bare ? NULL : "VALUE",
            .help = t->helps.v[t->helps.nr - 1],
            .fn = set_key,
            .data = f.key,
        };
        push_own(t, f.name);
    }
    push_own(t, "");
    *p = (struct dsl_opt_parser){.prog = "dstrain", .opts = t->opts, .nopts = t->n};
}

static void flag_table_release(struct flag_table *t)
{
    free(t->opts);
    dsl_strvec_release(&t->helps);
}

void dsl_train_settings_help(FILE *f)
{
    struct flag_table t;
    struct dsl_opt_parser parser;
    flag_table_init(&t, &parser);
    dsl_opt_help(&parser, f);
    flag_table_release(&t);
    fprintf(f, "Flags override the config file; see docs/trainer.md and docs/config.md.\n"
               "Every value is checked against its key's range, as in the file (docs/config.md,\n"
               "\"Ranges\"; e.g. the batch sizes and their product 1..%d).\n",
            DSL_CFG_MAX_BATCH);
}

/* docs/trainer.md's flag table: a row per flag in --help's order, with its config key */
static void flags_markdown(FILE *f)
{
    struct flag_table t;
    struct dsl_opt_parser parser;
    struct dsl_train_config_flag kf;
    size_t nkey = 0;
    flag_table_init(&t, &parser);
    fputs("| flag | key | meaning |\n|---|---|---|\n", f);
    for (size_t i = 0; i < t.n; i++) {
        const struct dsl_opt *o = &t.opts[i];
        int is_key = o->fn == set_key && dsl_train_config_flag_at(nkey++, &kf);
        char dashed[64], name[128], key[96];
        snprintf(dashed, sizeof(dashed), "%s", o->name);
        for (char *c = dashed; *c; c++)
            *c = *c == '_' ? '-' : *c;
        char shortname[8] = "";
        if (o->short_name)
            snprintf(shortname, sizeof(shortname), "`-%c`, ", o->short_name);
        snprintf(name, sizeof(name), "%s`--%s%s%s`", shortname, dashed, o->arg ? " " : "",
                 o->arg ? o->arg : "");
        snprintf(key, sizeof(key), is_key ? "`%s`" : "%s", is_key ? kf.key : "");
        dsl_train_doc_cell(f, name);
        dsl_train_doc_cell(f, key);
        dsl_train_doc_cell(f, is_key ? kf.help : o->help);
        fputs("|\n", f);
    }
    flag_table_release(&t);
}

int dsl_train_keys_main(int argc, char **argv, char *err)
{
    if (argc > 2 || (argc == 2 && argv[1][0] == '-' && strcmp(argv[1], "--flags") != 0))
        return dsl_seterr(err, DSL_EUSAGE, "usage: dstrain keys [SECTION | --flags]");
    if (argc == 2 && !strcmp(argv[1], "--flags")) {
        flags_markdown(stdout);
        return 0;
    }
    return dsl_train_config_doc(stdout, argc == 2 ? argv[1] : NULL, err);
}

/* The GPU of this rank: the driver, cuBLAS and NCCL loaded (cudalibs.h) and a device
 * by gpupick.h's rule on the loaded contract env; DSL_ENOGPU with what is missing,
 * DSL_ENOTSUP without CUDA.
 * driver_first: a node without the driver or a device does not open cuBLAS and NCCL
 * (auto on a CPU node); otherwise every missing library is named (nccl). */
static int gpu_for_rank(const struct dsl_rankenv *env, int *device, int driver_first,
                        char *err)
{
#ifdef DSL_HAVE_CUDA
    int n = 0, r;
    if (driver_first && (r = dsl_cudalib_device_count(&n, err)) < 0)
        return r;
    return dsl_cudalib_place(DSL_CUDALIB_ALL, env, device, err);
#else
    (void)env;
    (void)device;
    (void)driver_first;
    return dsl_seterr(err, DSL_ENOTSUP, "this dstrain was built without CUDA");
#endif
}

/* bin/../share/dslaunch/configs beside this dstrain, or NULL (a path to free); shown:
 * with "bin/.." taken away, for a message */
static char *shipped_dir(int shown)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return NULL;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    if (shown && (slash = strrchr(self, '/')) && slash != self) {
        *slash = '\0';
        return dsl_xasprintf("%s/share/dslaunch/configs", self);
    }
    return dsl_xasprintf("%s/../share/dslaunch/configs", self);
}

/* A --config that names no existing file and has no '/' may be one of the shipped
 * configs: NAME or NAME.json in bin/../share/dslaunch/configs of an installed tree
 * (dstrain's own directory is bin/). Returns a path to free, or NULL for "as given". */
static char *shipped_config(const char *name)
{
    if (!*name || strchr(name, '/') || access(name, F_OK) == 0)
        return NULL;
    char *dir = shipped_dir(0);
    if (!dir)
        return NULL;
    static const char *const suffix[] = {"", ".json"};
    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        char *path = dsl_xasprintf("%s/%s%s", dir, name, suffix[i]);
        if (access(path, R_OK) == 0) {
            free(dir);
            return path;
        }
        free(path);
    }
    free(dir);
    return NULL;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A bare --config NAME found nowhere: name the shipped configs, so that a typo or a
 * guess is one look away from the right name (appended to err while it fits) */
static void name_shipped_configs(const char *name, char *err)
{
    if (strchr(name, '/'))
        return;
    char *dir = shipped_dir(0);
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) {
        free(dir);
        return;
    }
    struct dsl_strvec names;
    dsl_strvec_init(&names);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n > 5 && e->d_name[0] != '.' && !strcmp(e->d_name + n - 5, ".json"))
            dsl_strvec_push_nodup(&names, dsl_xstrndup(e->d_name, n - 5));
    }
    closedir(d);
    if (names.nr) {
        qsort(names.v, names.nr, sizeof(names.v[0]), by_name);
        char *shown = shipped_dir(1);
        size_t len = strlen(err);
        int w = snprintf(err + len, DSL_ERR_LEN - len, " (the shipped configs in '%s' are:",
                         shown ? shown : dir);
        for (size_t i = 0; w > 0 && i < names.nr; i++) {
            len = strnlen(err, DSL_ERR_LEN);
            w = snprintf(err + len, DSL_ERR_LEN - len, " %s%s", names.v[i],
                         i + 1 < names.nr ? "," : ")");
        }
        free(shown);
    }
    dsl_strvec_release(&names);
    free(dir);
}

int dsl_train_settings_parse(struct dsl_train_settings *s, int argc, char **argv, char *err)
{
    memset(s, 0, sizeof(*s));
    dsl_train_config_init(&s->cfg);
    s->have_cfg = 1;
    struct pending p = {.params_out = NULL};
    dsl_strvec_init(&p.configs);
    dsl_strvec_init(&p.overrides);
    struct flag_table t;
    struct dsl_opt_parser parser;
    flag_table_init(&t, &parser);
    int r = dsl_opt_parse(&parser, &p, argc, argv, NULL, err);
    flag_table_release(&t);
    if (r == 0 && p.help)
        r = 1;
    /* the config files first, so that flags override them */
    for (size_t i = 0; r == 0 && i < p.configs.nr; i++) {
        char *shipped = shipped_config(p.configs.v[i]);
        r = dsl_train_config_load(&s->cfg, shipped ? shipped : p.configs.v[i], 0, err);
        if (r == -ENOENT && !shipped)
            name_shipped_configs(p.configs.v[i], err);
        free(shipped);
    }
    for (size_t i = 0; r == 0 && i + 1 < p.overrides.nr; i += 2)
        r = dsl_train_config_set(&s->cfg, p.overrides.v[i], p.overrides.v[i + 1], err);
    s->params_out = p.params_out;
    dsl_strvec_release(&p.configs);
    dsl_strvec_release(&p.overrides);
    return r;
}

/*
 * CPU or GPU: decided here and nowhere else, once, and kept in the settings, so that
 * the comm, the model, the precision and the warnings all act on one answer (the
 * device count is asked once, not once per reader). It needs the rank environment in
 * its final form (LOCAL_WORLD_SIZE for auto, LOCAL_RANK for the device), so dstrain
 * calls it after adopting srun's or mpirun's variables; _verify() calls it for callers
 * that did not.
 */
int dsl_train_settings_place(struct dsl_train_settings *s, char *err)
{
    if (s->placed)
        return 0;
    if (!s->have_env) {
        int r = dsl_rankenv_load(&s->env, err);
        if (r < 0)
            return r;
        s->have_env = 1;
    }
    const char *b = s->cfg.dstrain.backend;
    char why[DSL_ERR_LEN];
    int gpu = 0, device = 0;
    if (b && !strcmp(b, "nccl")) {
        int r = gpu_for_rank(&s->env, &device, 0, why);
        if (r == DSL_ENOTSUP)
            return dsl_seterr(err, r, "backend 'nccl': %s (use tcp)", why);
        if (r < 0)
            return dsl_seterr(err, r, "backend 'nccl' needs a GPU for this rank: %s (use tcp)",
                              why);
        gpu = 1;
    } else if (!b || !strcmp(b, "auto")) {
#ifdef DSL_HAVE_CUDA
        /* the GPU when this rank has one of its own (by the rule, the same answer on
         * every local rank), else the CPU, and never without a word */
        gpu = gpu_for_rank(&s->env, &device, 1, why) == 0;
        if (!gpu && s->env.local_rank == 0) /* one rank of the node says it */
            dsl_info("backend auto: training on the CPU (tcp): %s", why);
#endif
    }
    s->gpu = gpu;
    s->device = gpu ? device : 0;
    s->placed = 1;
    return 0;
}

const char *dsl_train_settings_backend(const struct dsl_train_settings *s)
{
    if (!s->placed)
        DSL_BUG("dsl_train_settings_backend() before dsl_train_settings_place()");
    return s->gpu ? "nccl" : "tcp";
}

/* rank 0: a key given for the other model or dataset goes unused, and says so */
static void warn_unused(const struct dsl_train_config *c, int rank)
{
    if (rank != 0)
        return;
    /* a size meant for the other model would go unused without a word */
    int gpt_model = c->dstrain.model_type && !strcmp(c->dstrain.model_type, "gpt");
    if (gpt_model && (c->given.model & DSL_CFG_GIVEN_MLP))
        dsl_warn("'dstrain.model.hidden' (--hidden) sizes the MLP: the GPT ignores it (its "
                 "sizes are layers, dim, heads, context and vocab)");
    if (!gpt_model && (c->given.model & DSL_CFG_GIVEN_GPT))
        dsl_warn("'dstrain.model' layers, dim, heads, context and vocab size the GPT: the MLP "
                 "ignores them (its sizes are 'dstrain.model.hidden'; for the GPT set "
                 "'dstrain.model.type' to \"gpt\")");
    const char *ds = c->dstrain.dataset;
    /* (the default's value is no request: configs/gpt_fortunes.json with --data tokens) */
    if ((c->given.data & DSL_CFG_GIVEN_VAL_FRACTION) && ds &&
        !strcmp(ds, "tokens") && c->dstrain.val_fraction != DSL_CFG_VAL_FRACTION)
        dsl_warn("'dstrain.data.val_fraction' splits dataset \"text\": token shards are split "
                 "by their names (*train*.bin, *val*.bin), so it is unused");
    if ((c->given.data & DSL_CFG_GIVEN_STRIDE) && !gpt_model)
        dsl_warn("'dstrain.data.stride' (--stride) spaces the GPT's training windows: the MLP "
                 "ignores it");
}

/* ZeRO-Offload once the device is known: the GPU trainer cannot honour it yet (a run
 * without it could exhaust the memory the user meant to free); on the CPU the state
 * it would move is in host memory already, which rank 0 says once. */
static int offload_where(const struct dsl_zero_config *z, int gpu, int rank, char *err)
{
    int opt = dsl_cfg_offloads(z->offload_optimizer), par = dsl_cfg_offloads(z->offload_param);
    if (!opt && !par)
        return 0;
    const char *what = opt && par ? "'zero_optimization.offload_optimizer' and 'offload_param'"
                       : opt      ? "'zero_optimization.offload_optimizer'"
                                  : "'zero_optimization.offload_param'";
    if (gpu)
        return dsl_seterr(err, DSL_ENOTSUP,
                          "%s to \"cpu\" is not implemented on the GPU yet: set its device "
                          "to \"none\" (the state stays in GPU memory), or train on the CPU "
                          "(--backend tcp)", what);
    if (rank == 0)
        dsl_info("%s \"cpu\": a no-op on the CPU (tcp), where the %s in host memory already",
                 what, opt && par ? "optimizer state and the parameters are"
                       : opt      ? "optimizer state is"
                                  : "parameters are");
    return 0;
}

/* the precision on this device, and what the device or the model cannot do */
static int check_device(const struct dsl_train_settings *s, int rank, enum dsl_precision *prec,
                        char *err)
{
    const struct dsl_train_config *c = &s->cfg;
    int gpu = s->gpu;
    const char *warning = NULL;
    *prec = dsl_train_config_precision(c, gpu, &warning);
    if (warning && rank == 0)
        dsl_warn("%s", warning);
    /* on the CPU the config module's warning above says that it computes in fp32, or
     * with cpu_half that parameters and gradients are 16-bit (fp32 arithmetic); on the
     * GPU fp16/bf16 mean 16-bit compute with fp32 master weights (trainer.h) */
    if (gpu && c->dstrain.deterministic > 0 && rank == 0)
        dsl_warn("dstrain.deterministic is ignored on the GPU: nccl's summation order is "
                 "not under dstrain's control, so the run is not bit-identical across world "
                 "sizes and stages");
    if (c->zero.stage > 3)
        return dsl_seterr(err, DSL_ENOTSUP, "ZeRO stage %d is not supported (0, 1, 2 or 3)",
                          c->zero.stage);
    return 0;
}

/* the trainer's batch, ZeRO, precision and optimizer */
static void fill_trainer(struct dsl_train_settings *s, enum dsl_precision prec)
{
    struct dsl_train_config *c = &s->cfg;
    int gpu = s->gpu;
    struct dsl_trainer_opts *to = &s->to;
    to->micro_batch = (size_t)c->train_micro_batch_size_per_gpu;
    to->grad_accum = (size_t)c->gradient_accumulation_steps;
    to->zero_stage = c->zero.stage;
    to->z3_prefetch = (size_t)c->zero.stage3_prefetch_bucket_size;
    to->z3_max_live = (size_t)c->zero.stage3_max_live_parameters;
    to->z3_persist = (size_t)c->zero.stage3_param_persistence_threshold;
    to->bucket_elems = (size_t)c->zero.reduce_bucket_size;
    to->overlap_comm = c->zero.overlap_comm;
    /* the GPU's defaults where the config is silent: buckets of DSL_GPU_BUCKET_ELEMS,
     * each all-reduced on the comm's stream as soon as backward has written it (DeepSpeed's
     * 5e8 makes a GPT-2 one bucket, reduced only after backward: no overlap) */
    if (gpu && !(c->given.zero & DSL_CFG_GIVEN_BUCKET))
        to->bucket_elems = DSL_GPU_BUCKET_ELEMS;
    if (gpu && !(c->given.zero & DSL_CFG_GIVEN_OVERLAP))
        to->overlap_comm = 1;
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
}

/* the model's shape and its products' precision */
static void fill_model(struct dsl_train_settings *s, int rank)
{
    const struct dsl_train_config *c = &s->cfg;
    const struct dsl_trainer_opts *to = &s->to;
    int gpu = s->gpu;
    struct dsl_model_spec *m = &s->model;
    m->type = c->dstrain.model_type;
    m->nhidden = c->dstrain.nhidden;
    for (size_t i = 0; i < m->nhidden && i < DSL_MODEL_MAX_LAYERS; i++)
        m->hidden[i] = c->dstrain.hidden[i];
    m->max_batch = 1000; /* evaluation batch */
    if (m->type && !strcmp(m->type, "gpt")) {
        /* activations grow with the batch: evaluate in micro batches */
        m->max_batch = to->micro_batch;
        m->gpt.layers = c->dstrain.gpt_layers;
        m->gpt.dim = c->dstrain.gpt_dim;
        m->gpt.heads = c->dstrain.gpt_heads;
        m->gpt.context = c->dstrain.gpt_context;
    }
    /* segments depend only on the bucket size, never on the world size or stage */
    m->seg_max = to->bucket_elems;
    m->dtype = to->dtype; /* DSL_FLOAT32 on the CPU unless cpu_half (prec says so) */
    /* bf16 products on the CPU where asked and possible; else fp32, said once */
    int want16 = c->dstrain.cpu_gemm && !strcmp(c->dstrain.cpu_gemm, "bf16");
    char why[200];
    m->gemm_bf16 = want16 && !gpu && dsl_model_gemm_bf16_supported(why, sizeof(why));
    if (want16 && gpu && rank == 0)
        dsl_warn("dstrain.cpu_gemm is for the CPU: on the GPU bf16.enabled decides the "
                 "precision");
    else if (want16 && !m->gemm_bf16 && rank == 0)
        dsl_warn("dstrain.cpu_gemm \"bf16\": %s, so the products stay fp32", why);
    if (m->gemm_bf16 && rank == 0)
        printf("dstrain: the model's large matrix products in bf16 (bf16-rounded inputs, fp32 "
               "sums; oneDNN)\n");
}

static void fill_data(struct dsl_train_settings *s)
{
    const struct dsl_train_config *c = &s->cfg;
    struct dsl_data_opts *d = &s->data;
    d->name = c->dstrain.dataset;
    d->path = c->dstrain.data_path;
    d->synth_train = c->dstrain.synthetic_train;
    d->synth_test = c->dstrain.synthetic_test;
    d->synth_dim = c->dstrain.synthetic_features;
    d->synth_classes = c->dstrain.synthetic_classes;
    d->seed = c->seed;
    d->context = c->dstrain.gpt_context;
    d->stride = c->dstrain.data_stride;
    d->vocab = c->dstrain.gpt_vocab;
    d->val_fraction = c->dstrain.val_fraction;
}

static void fill_run(struct dsl_train_settings *s)
{
    struct dsl_train_config *c = &s->cfg;
    struct dsl_run_opts *ro = &s->ro;
    ro->steps = c->dstrain.steps;
    ro->epochs = c->dstrain.epochs;
    ro->steps_per_print = c->steps_per_print > 0 ? (uint64_t)c->steps_per_print : 0;
    ro->eval_interval = c->dstrain.eval_interval;
    ro->save_interval = c->dstrain.save_interval;
    ro->save_minutes = c->dstrain.save_interval_minutes;
    ro->eval_iters = c->dstrain.eval_iters;
    ro->csv_monitor = &c->csv_monitor;
    ro->tensorboard = &c->tensorboard;
    ro->shuffle = c->dstrain.shuffle;
    ro->drop_last = c->dstrain.drop_last;
    ro->seed = c->seed;
    ro->metrics_path = c->dstrain.metrics;
    /* a run stopped (dslaunch's stop, Ctrl-C, Slurm's warning) keeps its work by
       default wherever it has somewhere to keep it */
    ro->save_on_signal = c->dstrain.save_on_signal >= 0
                             ? c->dstrain.save_on_signal
                             : c->dstrain.checkpoint_dir && *c->dstrain.checkpoint_dir;
    ro->params_out = s->params_out;
    ro->wall_clock_breakdown = c->wall_clock_breakdown;
}

int dsl_train_settings_verify(struct dsl_train_settings *s, int rank, int world, char *err)
{
    struct dsl_train_config *c = &s->cfg;
    enum dsl_precision prec;
    int r = dsl_train_settings_place(s, err);
    if (r < 0)
        return r;
    r = dsl_train_config_finish(c, world, err);
    if (r < 0)
        return r;
    if (rank == 0)
        for (size_t i = 0; i < c->warnings.nr; i++)
            dsl_warn("%s", c->warnings.v[i]);
    warn_unused(c, rank);
    if ((r = check_device(s, rank, &prec, err)) < 0 ||
        (r = offload_where(&c->zero, s->gpu, rank, err)) < 0)
        return r;
    fill_trainer(s, prec);
    fill_model(s, rank);
    fill_data(s);
    fill_run(s);
    size_t W = (size_t)world;
    if (s->to.deterministic && world > 1 && (W & (W - 1)) && rank == 0)
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
