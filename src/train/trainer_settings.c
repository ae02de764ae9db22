/*
 * dstrain's settings: defaults, the config file, command-line flags, verification
 * (see include/dslaunch/trainer_settings.h). A declarative table drives both the
 * parsing and --help; every flag has both spellings (--eval-interval and
 * --eval_interval) and both --flag=value and --flag value work.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/error.h"
#include "dslaunch/log.h"
#include "dslaunch/parse.h"
#include "dslaunch/trainer_settings.h"
#include "dslaunch/xalloc.h"
#include "trainer_config.h"
#include "common/banned.h"

enum opt_kind { O_STR, O_SIZE, O_U64, O_INT, O_FLOAT, O_FLAG, O_HIDDEN, O_IGNORE };

struct opt {
    const char *name;
    enum opt_kind kind;
    size_t off; /* into struct dsl_train_settings */
    const char *help;
};

#define OFF(f) offsetof(struct dsl_train_settings, f)

static const struct opt opts[] = {
    {"config", O_STR, OFF(config_path), "DeepSpeed config (ds_config.json)"},
    {"backend", O_STR, OFF(backend), "comm backend: tcp or nccl (default: auto)"},
    {"local_rank", O_IGNORE, 0, "accepted for DeepSpeed compatibility (LOCAL_RANK wins)"},
    {"save_on_signal", O_FLAG, OFF(save_on_signal),
     "on SIGTERM finish the step and save a checkpoint"},
    {"metrics", O_STR, OFF(metrics_path), "write JSON lines (one per step) to FILE"},
    {"threads", O_INT, OFF(blas_threads), "BLAS threads per rank (default: fair share)"},
    {"model", O_STR, OFF(model.type), "\"dstrain\".model.type (mlp)"},
    {"hidden", O_HIDDEN, 0, "\"dstrain\".model.hidden, e.g. 1024,1024"},
    {"data", O_STR, OFF(data.name), "\"dstrain\".data.name: fashion_mnist or synthetic"},
    {"data_path", O_STR, OFF(data.path), "\"dstrain\".data.path (Fashion-MNIST dir)"},
    {"synthetic_train", O_SIZE, OFF(data.synth_train), "synthetic training samples"},
    {"synthetic_test", O_SIZE, OFF(data.synth_test), "synthetic test samples"},
    {"synthetic_dim", O_SIZE, OFF(data.synth_dim), "synthetic input size"},
    {"epochs", O_U64, OFF(ro.epochs), "\"dstrain\".epochs"},
    {"steps", O_U64, OFF(ro.steps), "\"dstrain\".steps (overrides epochs)"},
    {"eval_interval", O_U64, OFF(ro.eval_interval), "\"dstrain\".eval_interval (steps)"},
    {"steps_per_print", O_U64, OFF(ro.steps_per_print), "steps_per_print"},
    {"checkpoint_dir", O_STR, OFF(checkpoint_dir), "\"dstrain\".checkpoint_dir"},
    {"save_interval", O_U64, OFF(ro.save_interval), "\"dstrain\".save_interval (steps)"},
    {"resume", O_STR, OFF(resume), "resume from 'latest' or a tag of checkpoint_dir"},
    {"save_params", O_STR, OFF(params_out),
     "write the final fp32 parameters, raw little-endian, to FILE (rank 0)"},
    {"deterministic", O_INT, OFF(deterministic), "\"dstrain\".deterministic (0 or 1)"},
    {"seed", O_U64, OFF(to.seed), "seed"},
    {"micro_batch", O_SIZE, OFF(to.micro_batch), "train_micro_batch_size_per_gpu"},
    {"grad_accum", O_SIZE, OFF(to.grad_accum), "gradient_accumulation_steps"},
    {"train_batch", O_SIZE, OFF(train_batch), "train_batch_size"},
    {"zero_stage", O_INT, OFF(to.zero_stage), "zero_optimization.stage (0, 1, 2)"},
    {"bucket_size", O_SIZE, OFF(to.bucket_elems), "zero_optimization.reduce_bucket_size"},
    {"overlap_comm", O_INT, OFF(to.overlap_comm), "zero_optimization.overlap_comm (0/1)"},
    {"lr", O_FLOAT, OFF(to.optim.lr), "optimizer.params.lr (constant, no scheduler)"},
    {"gradient_clipping", O_FLOAT, OFF(to.grad_clip), "gradient_clipping (0 = off)"},
};

static int name_eq(const char *flag, size_t n, const char *name)
{
    if (strlen(name) != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char a = flag[i] == '-' ? '_' : flag[i];
        if (a != name[i])
            return 0;
    }
    return 1;
}

static void keep_str(struct dsl_train_settings *s, char **slot, const char *v)
{
    char *c = dsl_xstrdup(v);
    if (s->nstrs < (int)(sizeof(s->strs) / sizeof(s->strs[0])))
        s->strs[s->nstrs++] = c; /* freed at release */
    *slot = c;
}

static int parse_hidden(struct dsl_train_settings *s, const char *v, char *err)
{
    size_t n = 0;
    char *copy = dsl_xstrdup(v), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t h;
        if (n >= DSL_MODEL_MAX_LAYERS - 1 || dsl_parse_size(tok, &h) < 0 || !h) {
            free(copy);
            return dsl_seterr(err, DSL_EUSAGE, "bad hidden sizes '%s'", v);
        }
        s->model.hidden[n++] = h;
    }
    free(copy);
    s->model.nhidden = n;
    return 0;
}

static int set_opt(struct dsl_train_settings *s, const struct opt *o, const char *v,
                   char *err)
{
    void *p = (char *)s + o->off;
    double d;
    long l;
    switch (o->kind) {
    case O_STR:
        keep_str(s, (char **)p, v);
        return 0;
    case O_SIZE:
        if (dsl_parse_size(v, (size_t *)p) < 0)
            break;
        return 0;
    case O_U64:
        if (dsl_parse_long(v, 0, 1L << 62, &l) < 0)
            break;
        *(uint64_t *)p = (uint64_t)l;
        return 0;
    case O_INT:
        if (dsl_parse_int(v, -1, 1 << 30, (int *)p) < 0)
            break;
        return 0;
    case O_FLOAT:
        if (dsl_parse_double(v, &d) < 0 || d < 0)
            break;
        *(float *)p = (float)d;
        return 0;
    case O_HIDDEN:
        return parse_hidden(s, v, err);
    case O_IGNORE:
        return 0;
    case O_FLAG:
        *(int *)p = 1;
        return 0;
    }
    return dsl_seterr(err, DSL_EUSAGE, "bad value '%s' for --%s", v, o->name);
}

void dsl_train_settings_help(FILE *f)
{
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        char name[32];
        snprintf(name, sizeof(name), "%s", opts[i].name);
        for (char *c = name; *c; c++)
            *c = *c == '_' && strcmp(opts[i].name, "local_rank") ? '-' : *c;
        fprintf(f, "  --%-18s %-6s %s\n", name, opts[i].kind == O_FLAG ? "" : "VALUE",
                opts[i].help);
    }
    fprintf(f, "  (dashes and underscores are interchangeable in flag names)\n");
}

static void defaults(struct dsl_train_settings *s)
{
    memset(s, 0, sizeof(*s));
    s->model.type = "mlp";
    s->model.nhidden = 2;
    s->model.hidden[0] = s->model.hidden[1] = 1024;
    s->model.max_batch = 1000; /* evaluation batch */
    s->data.name = "fashion_mnist";
    s->data.seed = 1234;
    s->to.micro_batch = 0;
    s->to.grad_accum = 0;
    s->to.predivide = 1.0f;
    s->to.seed = 1234;
    s->to.bucket_elems = 500000000;
    s->to.optim = (struct dsl_optim_hparams){DSL_OPTIM_ADAM, 1e-3f, 0.9f, 0.999f, 1e-8f,
                                             0.01f, 1, 0.0f};
    s->ro.epochs = 1;
    s->ro.steps_per_print = 10;
    s->ro.shuffle = 1;
    s->deterministic = -1;
    s->to.zero_stage = -1;
    s->to.overlap_comm = -1;
}

int dsl_train_settings_parse(struct dsl_train_settings *s, int argc, char **argv, char *err)
{
    defaults(s);
    /* the config file first, so that flags override it */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "--config=", 9))
            keep_str(s, &s->config_path, a + 9);
        else if (!strcmp(a, "--config") && i + 1 < argc)
            keep_str(s, &s->config_path, argv[++i]);
    }
    int r;
    if (s->config_path && (r = dsl_trainer_config_apply(s, s->config_path, err)) < 0)
        return r;
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
        if (o->kind != O_FLAG && !v) {
            if (i + 1 >= argc)
                return dsl_seterr(err, DSL_EUSAGE, "option '--%s' needs a value", o->name);
            v = argv[++i];
        }
        if (o->kind == O_FLAG && v)
            return dsl_seterr(err, DSL_EUSAGE, "option '--%s' takes no value", o->name);
        if (o->off == OFF(config_path))
            continue;
        if ((r = set_opt(s, o, v, err)) < 0)
            return r;
        if (o->off == OFF(to.optim.lr))
            dsl_trainer_config_drop_scheduler(s);
    }
    if (s->checkpoint_dir)
        s->ro.save_ctx = s;
    return 0;
}

int dsl_train_settings_verify(struct dsl_train_settings *s, int world, char *err)
{
    size_t W = (size_t)world, *mb = &s->to.micro_batch, *ga = &s->to.grad_accum,
           tb = s->train_batch;
    /* DeepSpeed's rule: any two of the triple give the third by integer division */
    if (!*mb && !*ga && !tb)
        *mb = 64;
    if (tb && *mb && !*ga)
        *ga = tb / (*mb * W);
    else if (tb && *ga && !*mb)
        *mb = tb / (*ga * W);
    else if (tb && !*mb && !*ga) {
        *ga = 1;
        *mb = tb / W;
    }
    if (!*ga)
        *ga = 1;
    if (!*mb || !*ga || (tb && tb != *mb * *ga * W))
        return dsl_seterr(err, DSL_ECONFIG,
                          "batch size mismatch: train_batch_size %zu != "
                          "train_micro_batch_size_per_gpu %zu x gradient_accumulation_steps "
                          "%zu x world size %d",
                          tb, *mb, *ga, world);
    if (s->to.zero_stage < 0)
        s->to.zero_stage = 0;
    if (s->to.zero_stage > 2)
        return dsl_seterr(err, DSL_ENOTSUP,
                          "ZeRO stage %d is not supported yet (use 0, 1 or 2)",
                          s->to.zero_stage);
    if (s->to.overlap_comm < 0)
        s->to.overlap_comm = s->to.zero_stage == 2;
    int gpu = s->backend && !strcmp(s->backend, "nccl");
    if (gpu)
        return dsl_seterr(err, DSL_ENOTSUP,
                          "the GPU path of dstrain is not built yet (use --backend tcp)");
    if (s->deterministic < 0)
        s->deterministic = !gpu;
    s->to.deterministic = s->deterministic;
    if ((s->fp16 || s->bf16) && !gpu)
        dsl_warn("%s requested: the CPU path trains in fp32", s->fp16 ? "fp16" : "bf16");
    /* the gradient segments depend only on the bucket size, not on the world size */
    s->model.seg_max = s->to.bucket_elems;
    s->ro.seed = s->to.seed;
    s->data.seed = s->to.seed;
    s->ro.metrics_path = s->metrics_path;
    s->ro.save_on_signal = s->save_on_signal;
    s->ro.prefix = "dstrain";
    s->ro.params_out = s->params_out;
    if (s->deterministic && world > 1 && (W & (W - 1)))
        dsl_warn("world size %d is not a power of two: results are reproducible at this "
                 "world size but not bit-identical to other world sizes",
                 world);
    return 0;
}

void dsl_train_settings_release(struct dsl_train_settings *s)
{
    dsl_trainer_config_release(s);
    for (int i = 0; i < s->nstrs; i++)
        free(s->strs[i]);
    s->nstrs = 0;
}
