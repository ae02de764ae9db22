/*
 * What the trainer tests share at the end of a run (test_trainer.c, test_gpu_gpt.c,
 * test_gpu_trainer.c): the release of its model, data sets and comm, the reverse of the
 * order they were set up in (the trainer and the sampler are released before).
 */
#ifndef DSLAUNCH_TESTS_WORLD_RELEASE_H
#define DSLAUNCH_TESTS_WORLD_RELEASE_H

#include "dslaunch/comm/comm.h"
#include "dslaunch/model/data.h"
#include "dslaunch/model/model.h"

static inline void world_release(struct dsl_model *m, struct dsl_dataset *tr,
                                 struct dsl_dataset *te, struct dsl_comm *c)
{
    dsl_model_release(m);
    dsl_dataset_release(tr);
    dsl_dataset_release(te);
    dsl_comm_close(c);
}

#endif
