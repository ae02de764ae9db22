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

#include "dslaunch/data.h"
#include "dslaunch/model.h"
#include "dslaunch/trainer.h"

struct dsl_train_settings {
    struct dsl_trainer_opts to;  /* batch, ZeRO, optimizer, clipping */
    struct dsl_run_opts ro;      /* steps, printing, metrics, checkpoints */
    struct dsl_model_spec model; /* "dstrain": {"model": ...}, --hidden */
    struct dsl_data_opts data;   /* "dstrain": {"data": ...}, --data, --data-path */
    size_t train_batch;          /* train_batch_size as configured (0: infer) */
    int deterministic;           /* -1: default (on for the tcp backend) */
    int fp16, bf16;              /* requested half precision (CPU: runs fp32, warns) */
    int blas_threads;            /* --threads (0: OMP_NUM_THREADS or cores/local ranks) */
    int save_on_signal;          /* --save-on-signal */
    char *config_path;           /* --config */
    char *backend;               /* --backend ("tcp", "nccl", NULL: auto) */
    char *metrics_path;          /* --metrics */
    char *checkpoint_dir;        /* --checkpoint-dir */
    char *resume;                /* --resume [latest|TAG] (NULL: fresh start) */
    char *params_out;            /* --save-params FILE */
    void *sched;                 /* the scheduler state (config module), owned */
    void *cfg;                   /* the loaded config, owned */
    char *strs[16];              /* owned strings the structs above point into */
    int nstrs;
};

/** Parse argv (incl. --config). Returns 0, 1 for --help, or DSL_EUSAGE/DSL_ECONFIG. */
int dsl_train_settings_parse(struct dsl_train_settings *s, int argc, char **argv, char *err);
/** Checks that need the world size (batch triple, deterministic chunking). */
int dsl_train_settings_verify(struct dsl_train_settings *s, int world, char *err);
void dsl_train_settings_release(struct dsl_train_settings *s);
void dsl_train_settings_help(FILE *f);

/** With s->resume: load the checkpoint into t (any world size). Collective. */
int dsl_train_resume(struct dsl_train_settings *s, struct dsl_trainer *t, char *err);
/** `dstrain consolidate <dir> [--tag T] [--out FILE]` (argv[0] = "consolidate"). */
int dsl_train_consolidate_main(int argc, char **argv, char *err);

#endif
