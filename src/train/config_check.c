/*
 * ds_config's cross-key rules (train_config.h): the batch triple against the world
 * size, the rules between keys, precision by device. They read only the values as
 * written (cfg->given), so they can run again after more overrides.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/model/model.h"
#include "dslaunch/train/train_config.h"
#include "dslaunch/common/banned.h"

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

/* A batch key written "auto" (-2): the number to write instead, where one follows. */
static int batch_auto_err(const char *file, long tb, long mb, long ga, long ws, char *err)
{
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

/* The batch triple from what was given, as DeepSpeed completes it, into cfg. */
static int resolve_batch(struct dsl_train_config *cfg, const char *file, int world_size,
                         char *err)
{
    long tb = cfg->given.train, mb = cfg->given.micro, ga = cfg->given.accum;
    long ws = world_size;
    char inferred[128] = "";
    int r;

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
    return 0;
}

/* ZeRO-Offload's keys against the stage, as DeepSpeed has them: the optimizer state
 * moves at stages 1-3 (it is sharded there), the parameters at stage 3. The legacy
 * "cpu_offload": true is offload_optimizer "cpu". */
static int check_offload(struct dsl_zero_config *z, const char *file, char *err)
{
    if (z->cpu_offload && !dsl_cfg_offloads(z->offload_optimizer)) {
        free(z->offload_optimizer);
        z->offload_optimizer = dsl_xstrdup("cpu");
    }
    const char *opt = z->offload_optimizer, *par = z->offload_param;
    const char *nvme = opt && !strcmp(opt, "nvme")   ? "offload_optimizer"
                       : par && !strcmp(par, "nvme") ? "offload_param"
                                                     : NULL;
    if (nvme)
        return dsl_seterr(err, DSL_ECONFIG,
                          "%s: 'zero_optimization.%s.device' \"nvme\" is not supported by "
                          "dstrain (no NVMe offload): use \"cpu\" or \"none\"",
                          file, nvme);
    if (dsl_cfg_offloads(opt) && z->stage < 1)
        return dsl_seterr(err, DSL_ECONFIG,
                          "%s: 'zero_optimization.offload_optimizer' needs ZeRO stage 1, 2 or "
                          "3 (it moves the optimizer state those stages shard), and "
                          "'zero_optimization.stage' is 0", file);
    if (dsl_cfg_offloads(par) && z->stage != 3)
        return dsl_seterr(err, DSL_ECONFIG,
                          "%s: 'zero_optimization.offload_param' needs ZeRO stage 3 (it moves "
                          "the parameter shards), and 'zero_optimization.stage' is %d",
                          file, z->stage);
    return 0;
}

/* The rules between keys other than the batch's; sets the optimizer's resolved mode. */
static int check_rules(struct dsl_train_config *cfg, const char *file, char *err)
{
    int r;
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
    if ((r = check_offload(&cfg->zero, file, err)) < 0)
        return r;
    if (cfg->dstrain.steps == 0 && cfg->dstrain.epochs == 0)
        return dsl_seterr(err, DSL_ECONFIG,
                          "%s: nothing to train: 'dstrain.steps' and 'dstrain.epochs' are both 0",
                          file);
    return 0;
}

int dsl_train_config_finish(struct dsl_train_config *cfg, int world_size, char *err)
{
    /* no config parsed at all: the batch came (or not) from the command line alone */
    const char *file = cfg->path ? cfg->path : "command line";
    long tb = cfg->given.train, mb = cfg->given.micro, ga = cfg->given.accum;
    long ws = world_size;
    int r;

    if (world_size <= 0)
        return dsl_seterr(err, DSL_ECONFIG, "%s: world size %d is not positive", file,
                          world_size);
    if (tb == -2 || mb == -2 || ga == -2)
        return batch_auto_err(file, tb, mb, ga, ws, err);
    if ((r = resolve_batch(cfg, file, world_size, err)) < 0)
        return r;
    return check_rules(cfg, file, err);
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

int dsl_cfg_offloads(const char *device)
{
    return device && strcmp(device, "none") != 0;
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
