/*
 * dstrain's settings: the layers defaults -> ds_config.json (through the config
 * module) -> command-line flags -> verification, gathered into the structs the model,
 * data, trainer and loop take. Also the checkpoint glue (resume, save hook,
 * consolidate), so that launcher/dstrain.c stays a thin main().
 *
 * Strings in the settings are owned by it and freed by dsl_train_settings_release().
 */
#ifndef DSLAUNCH_TRAINER_SETTINGS_H
#define DSLAUNCH_TRAINER_SETTINGS_H

#include <stdio.h>

#include "dslaunch/common/rankenv.h"
#include "dslaunch/model/data.h"
#include "dslaunch/model/model.h"
#include "dslaunch/train/scheduler.h"
#include "dslaunch/train/train_config.h"
#include "dslaunch/train/trainer.h"

struct dsl_train_settings {
    struct dsl_train_config cfg; /* the config module's view: file + overrides */
    struct dsl_sched sched;      /* the bound LR scheduler (to.lr_fn points here) */
    struct dsl_trainer_opts to;  /* batch, ZeRO, optimizer, clipping */
    struct dsl_run_opts ro;      /* steps, printing, metrics, checkpoints */
    struct dsl_model_spec model; /* "dstrain": {"model": ...} */
    struct dsl_data_opts data;   /* "dstrain": {"data": ...} */
    char *params_out;            /* --save-params FILE (owned) */
    int have_cfg;                /* cfg was initialised */
    /* CPU or GPU, set once by dsl_train_settings_place() */
    int placed;                  /* the decision is made */
    int gpu;                     /* 1: the GPU path (backend nccl); 0: the CPU (tcp) */
    int device;                  /* the CUDA device (common/gpupick.h's rule); 0 on the CPU */
    /* the rank contract: the worker's, loaded once (have_env), else by _place() */
    struct dsl_rankenv env;
    int have_env;
};

/** Parse argv (incl. --config). Returns 0, 1 for --help, or DSL_EUSAGE/DSL_ECONFIG. */
int dsl_train_settings_parse(struct dsl_train_settings *s, int argc, char **argv, char *err);
/**
 * Decide CPU or GPU, once (later calls keep the answer), into s->gpu and s->device:
 * backend "nccl" is the GPU path and needs CUDA built in (else DSL_ENOTSUP) and, on
 * this node, the GPU's libraries and a GPU of this rank's own by the rule of
 * common/gpupick.h (else DSL_ENOGPU, err naming what is missing); "tcp" the CPU;
 * "auto" the GPU when CUDA is built in and this rank can have one, otherwise the CPU
 * with a one-line notice from local rank 0 saying why (a build without CUDA: no
 * notice). The rule's inputs come from s->env, which the worker sets (have_env = 1)
 * once the rank environment is final (after dsl_rankenv_adopt()), or _place() loads
 * it (DSL_EUSAGE for a bad RANK or WORLD_SIZE);
 * dsl_train_settings_verify() calls it when nobody has.
 */
int dsl_train_settings_place(struct dsl_train_settings *s, char *err);
/** The comm backend of the decision above: "nccl" (the GPU path) or "tcp". */
const char *dsl_train_settings_backend(const struct dsl_train_settings *s);
/** Resolve what needs the world size (batch triple) and fill the structs above;
 *  config warnings are printed on rank 0. */
int dsl_train_settings_verify(struct dsl_train_settings *s, int rank, int world, char *err);
/** After the data is loaded: bind the scheduler to the run's total optimizer steps. */
void dsl_train_settings_bind(struct dsl_train_settings *s, size_t train_samples,
                             size_t global_batch);
void dsl_train_settings_release(struct dsl_train_settings *s);
void dsl_train_settings_help(FILE *f);

/** With s->resume: load the checkpoint into t (any world size). Collective. */
/** After _verify(), before the data is bound: keep the global batch of the checkpoint
 *  the run resumes when the world size changed (dsl_train_config_keep_batch; rank 0
 *  says so in one line), or DSL_ECONFIG with the numbers when it cannot be kept. */
int dsl_train_resume_batch(struct dsl_train_settings *s, int rank, char *err);
int dsl_train_resume(struct dsl_train_settings *s, struct dsl_trainer *t, char *err);
/** `dstrain consolidate <dir> [--tag T] [--out FILE]` (argv[0] = "consolidate"). */
int dsl_train_consolidate_main(int argc, char **argv, char *err);
/** `dstrain keys [SECTION | --flags]` (argv[0] = "keys"): docs/config.md's key table of
 *  a section (every section without one), or with --flags docs/trainer.md's flag table,
 *  as markdown on stdout, from the tables that drive parsing (scripts/gen-docs.py). */
int dsl_train_keys_main(int argc, char **argv, char *err);
/** `dstrain tokenize [--out DIR] [--name NAME] [--val_fraction F] PATH...` (argv[0] =
 *  "tokenize", tokenize.c): text into llm.c token shards, byte-level. */
int dsl_train_tokenize_main(int argc, char **argv, char *err);
/** `dstrain sample --checkpoint DIR [--prompt TEXT] ...` (argv[0] = "sample",
 *  sample.c): a GPT checkpoint continues a prompt. */
int dsl_train_sample_main(int argc, char **argv, char *err);
/** `dstrain plot METRICS.jsonl [--width N] [--height N]` (argv[0] = "plot"): the losses
 *  of a metrics file as a text chart on stdout (src/train/plot.c). */
int dsl_train_plot_main(int argc, char **argv, char *err);

#endif
