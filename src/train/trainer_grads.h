/*
 * Inside the trainer (trainer.c): the step's gradient after backward (trainer_grads.c).
 * Bucket j is t->bk[j]; "final" is the step's gradient once every micro step is in.
 */
#ifndef DSL_TRAIN_TRAINER_GRADS_H
#define DSL_TRAIN_TRAINER_GRADS_H

#include <stddef.h>
#include <stdint.h>

#include "dslaunch/common/dtype.h"
#include "dslaunch/train/trainer.h"

/* this rank's reduced gradient piece of bucket j after the micro step's reduction */
void *dsl_grads_leaf(struct dsl_trainer *t, size_t j);
/* add this micro step's reduced gradient into the accumulation levels */
int dsl_grads_accumulate(struct dsl_trainer *t);
/* fold the leftover tree levels, so that the highest used one holds the step's gradient */
int dsl_grads_fold(struct dsl_trainer *t);
/* the final gradient's element type, and its piece of bucket j (after dsl_grads_fold) */
enum dsl_dtype dsl_grads_final_type(const struct dsl_trainer *t);
void *dsl_grads_final(struct dsl_trainer *t, size_t j);
/* the global L2 norm of the final gradient, the same bits at every world size and
 * stage; local_max: this rank's max |g| bits when known, else NULL */
int dsl_grads_norm(struct dsl_trainer *t, float *norm, const uint32_t *local_max);
/* 1 in *overflow when this rank's final gradient holds inf or NaN; else *max_bits is
 * the bit pattern of its largest |g| */
int dsl_grads_overflow(struct dsl_trainer *t, int *overflow, uint32_t *max_bits);
/* GPU: the step's scalars (stats with the stop word, overflow, clip's norm inputs)
 * reduced on the device and read back with one host synchronisation: t->stats, the
 * agreed max |g| bits in *gmax, the fixed-point sum of squares in *sum */
int dsl_grads_device_scalars(struct dsl_trainer *t, float stop, int clip, size_t nstats,
                             uint32_t *gmax, uint64_t *sum);
/* the norm from the agreed maximum and the fixed-point sum */
float dsl_grads_norm_of(uint32_t gmax, uint64_t sum);

#endif
