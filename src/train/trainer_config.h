/*
 * Inside dstrain: checkpoint glue shared by trainer_ckpt.c and the settings.
 */
#ifndef DSL_TRAINER_CONFIG_H
#define DSL_TRAINER_CONFIG_H

#include "dslaunch/train/trainer_settings.h"

/** The dsl_run_opts.save hook: ctx is the struct dsl_train_settings. */
int dsl_train_save_hook(void *ctx, struct dsl_trainer *t, const char *tag, char *err);

#endif
