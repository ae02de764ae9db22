/*
 * DeepSpeed's csv_monitor and tensorboard monitors for dstrain's rank 0 (monitor.c has
 * the file layouts).
 */
#ifndef DSLAUNCH_TRAIN_MONITOR_H
#define DSLAUNCH_TRAIN_MONITOR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dslaunch/train/train_config.h"

struct dsl_monitor {
    char *csv_dir; /* <output_path>/<job_name> of csv_monitor, or NULL: off */
    FILE *tb;      /* the tensorboard event file, or NULL: off */
    char *tb_path;
};

/** Rank 0, before the first step: make the directories of the enabled monitors (either
 *  may be NULL) and start the event file. m is all off on error; owned by the caller
 *  until dsl_monitor_close(). */
int dsl_monitor_open(struct dsl_monitor *m, const struct dsl_cfg_monitor *csv,
                     const struct dsl_cfg_monitor *tb, char *err);
/** One scalar (DeepSpeed's name, e.g. "Train/Samples/train_loss") at x = step, to every
 *  enabled monitor. */
int dsl_monitor_scalar(struct dsl_monitor *m, const char *tag, double value, uint64_t step,
                       char *err);
void dsl_monitor_close(struct dsl_monitor *m);

/** CRC-32C, and TFRecord's masked form of it. */
uint32_t dsl_monitor_crc32c(const void *p, size_t n);
uint32_t dsl_monitor_masked_crc(const void *p, size_t n);

#endif
