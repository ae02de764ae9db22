/*
 * Inside dstrain's settings: the bridge to the config module (ds_config.json, LR
 * schedulers) and to checkpoints. Only trainer_settings.c and trainer_ckpt.c use it.
 */
#ifndef DSL_TRAINER_CONFIG_H
#define DSL_TRAINER_CONFIG_H

#include "dslaunch/trainer_settings.h"

/** Load the config file into s (DeepSpeed keys and the "dstrain" object). */
int dsl_trainer_config_apply(struct dsl_train_settings *s, const char *path, char *err);
/** --lr on the command line: a constant learning rate, no scheduler. */
void dsl_trainer_config_drop_scheduler(struct dsl_train_settings *s);
void dsl_trainer_config_release(struct dsl_train_settings *s);

#endif
