/*
 * Model state in and out of the trainer: the parameters and the optimizer state
 * between the trainer's device (device.h) and host memory, in full flat order, for
 * checkpoints, resume and --save-params.
 *
 * Theory of operation. On the CPU device these are the memcpys and per-bucket
 * all-gathers they always were. On a GPU the same steps run in device memory and one
 * copy crosses to or from the host at the end: gathering the ZeRO shards of the
 * optimizer state needs a temporary device buffer of P floats (the collectives take
 * device pointers), which lives only for the call. Everything here runs between steps,
 * after dsl_trainer_sync() has waited for the parameter all-gathers a step leaves
 * running, so nothing else touches the buffers meanwhile. Gathering is collective:
 * every rank calls it in the same order.
 *
 * Mixed precision: "the parameters" are the fp32 master weights (what DeepSpeed saves
 * as fp32 and consolidates); going out they are gathered like the optimizer state,
 * coming in they set master and the 16-bit copy together (dsl_mixed_load).
 *
 * The collectives on small host arrays that these and the step share live apart, in
 * trainer_hostcoll.c, so that the step (trainer.c) and this file, which waits for the
 * step's all-gathers (dsl_trainer_sync), do not call each other.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/common/error.h"
#include "dslaunch/train/trainer.h"
#include "trainer_mixed.h"
#include "dslaunch/common/banned.h"

static int state_fail(struct dsl_trainer *t, int r, const char *what, char *err)
{
    const char *why = dsl_trainer_last_error(t);
    return dsl_seterr(err, r, "%s failed at step %llu: %s", what,
                      (unsigned long long)t->step + 1, why && *why ? why : dsl_strerror(r));
}

void dsl_trainer_shard_pack(const struct dsl_trainer *t, const float *full, float *shard)
{
    for (size_t j = 0; j < t->nbk; j++) {
        const struct dsl_bucket *b = &t->bk[j];
        memcpy(shard + b->soff, full + b->lo + b->poff, b->plen * sizeof(float));
    }
}

void dsl_trainer_shard_unpack(const struct dsl_trainer *t, const float *shard, float *full)
{
    for (size_t j = 0; j < t->nbk; j++) {
        const struct dsl_bucket *b = &t->bk[j];
        memcpy(full + b->lo + b->poff, shard + b->soff, b->plen * sizeof(float));
    }
}

/* One fp32 shard vector (S, or P at stage 0) in full flat order into host memory full;
 * dfull: device memory of P floats on a GPU at stages 1/2, else NULL. Collective. */
static int gather_vec(struct dsl_trainer *t, const float *vec, float *full, float *dfull)
{
    struct dsl_device *d = t->dev;
    int r = 0;
    if (t->o.zero_stage == 0)
        return d->ops->copy(d, full, vec, t->P * sizeof(float), DSL_COPY_D2H);
    float *buf = dfull ? dfull : full; /* in the device's memory */
    for (size_t j = 0; j < t->nbk && r >= 0; j++) {
        const struct dsl_bucket *b = &t->bk[j];
        r = d->ops->copy(d, buf + b->lo + b->poff, vec + b->soff, b->plen * sizeof(float),
                         DSL_COPY_D2D);
    }
    for (size_t j = 0; j < t->nbk && r >= 0; j++) {
        const struct dsl_bucket *b = &t->bk[j];
        r = dsl_comm_allgather(t->comm, buf + b->lo + b->poff, buf + b->lo, b->len,
                               DSL_FLOAT32);
    }
    if (r >= 0 && dfull)
        r = d->ops->copy(d, full, dfull, t->P * sizeof(float), DSL_COPY_D2H);
    if (r < 0)
        t->ngather = t->gather_done = 0; /* the comm may be unusable now */
    return r;
}

/* P floats of device memory for a call, or NULL with err set */
static float *dev_full(struct dsl_trainer *t, const char *what, char *err)
{
    struct dsl_device *d = t->dev;
    float *p = d->ops->alloc(d, t->P ? t->P * sizeof(float) : 1);
    if (!p)
        dsl_seterr(err, -ENOMEM, "cannot allocate %zu bytes on %s %s", t->P * sizeof(float),
                   d->name, what);
    return p;
}

int dsl_trainer_params_to_host(struct dsl_trainer *t, float *host, char *err)
{
    struct dsl_device *d = t->dev;
    int r = dsl_trainer_sync(t, err);
    if (r < 0)
        return r;
    if (t->master) {
        float *dfull = t->o.zero_stage > 0 ? dev_full(t, "to gather the parameters", err) : NULL;
        if (t->o.zero_stage > 0 && !dfull)
            return -ENOMEM;
        r = gather_vec(t, t->master, host, dfull);
        d->ops->free(d, dfull);
        if (r < 0)
            return state_fail(t, r, "parameter gather", err);
        return 0;
    }
    if ((r = d->ops->copy(d, host, t->params, t->P * sizeof(float), DSL_COPY_D2H)) < 0)
        return state_fail(t, r, "copying the parameters", err);
    return 0;
}

int dsl_trainer_params_from_host(struct dsl_trainer *t, const float *host, char *err)
{
    struct dsl_device *d = t->dev;
    int r = dsl_trainer_sync(t, err);
    if (r < 0)
        return r;
    if (t->master) {
        float *dfull = dev_full(t, "to load the parameters", err);
        if (!dfull)
            return -ENOMEM;
        if ((r = d->ops->copy(d, dfull, host, t->P * sizeof(float), DSL_COPY_H2D)) >= 0)
            r = dsl_mixed_load(t, dfull);
        d->ops->free(d, dfull);
        if (r < 0)
            return state_fail(t, r, "loading the parameters", err);
        return 0;
    }
    if ((r = d->ops->copy(d, t->params, host, t->P * sizeof(float), DSL_COPY_H2D)) < 0)
        return state_fail(t, r, "copying the parameters", err);
    return 0;
}

int dsl_trainer_gather_state(struct dsl_trainer *t, float *state, size_t nstate, char *err)
{
    struct dsl_device *d = t->dev;
    float *vecs[2] = {t->m, t->v};
    float *dfull = NULL; /* GPU, stages 1/2: the full vector in device memory */
    int r = dsl_trainer_sync(t, err);
    if (r < 0)
        return r;
    if (!d->host_memory && nstate && t->o.zero_stage > 0) {
        dfull = d->ops->alloc(d, t->P * sizeof(float));
        if (!dfull)
            return dsl_seterr(err, -ENOMEM,
                              "cannot allocate %zu bytes on %s to gather the optimizer state",
                              t->P * sizeof(float), d->name);
    }
    for (size_t s = 0; s < nstate && s < 2; s++) {
        if ((r = gather_vec(t, vecs[s], state + s * t->P, dfull)) < 0) {
            r = state_fail(t, r, t->o.zero_stage == 0 ? "optimizer state copy"
                                                      : "optimizer state gather", err);
            goto out;
        }
    }
    r = 0;
out:
    d->ops->free(d, dfull);
    return r;
}

int dsl_trainer_scatter_state(struct dsl_trainer *t, const float *state, size_t nstate,
                              char *err)
{
    struct dsl_device *d = t->dev;
    float *vecs[2] = {t->m, t->v};
    float *tmp = NULL; /* GPU, stages 1/2: this rank's shard in host memory */
    int r = 0;
    if (!d->host_memory && t->o.zero_stage > 0) {
        tmp = malloc(t->S ? t->S * sizeof(float) : 1);
        if (!tmp)
            return dsl_seterr(err, -ENOMEM, "cannot allocate %zu bytes for the optimizer "
                              "state", t->S * sizeof(float));
    }
    for (size_t s = 0; s < nstate && s < 2 && r >= 0; s++) {
        if (!vecs[s])
            continue;
        if (t->o.zero_stage == 0) {
            r = d->ops->copy(d, vecs[s], state + s * t->P, t->P * sizeof(float),
                             DSL_COPY_H2D);
        } else if (!tmp) {
            dsl_trainer_shard_pack(t, state + s * t->P, vecs[s]);
        } else {
            dsl_trainer_shard_pack(t, state + s * t->P, tmp);
            r = d->ops->copy(d, vecs[s], tmp, t->S * sizeof(float), DSL_COPY_H2D);
        }
    }
    free(tmp);
    if (r < 0)
        return state_fail(t, r, "optimizer state copy", err);
    return 0;
}
