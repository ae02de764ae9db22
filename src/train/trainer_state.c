/*
 * Model state in and out of the trainer: the parameters and the optimizer state
 * between the trainer's device (device.h) and host memory, in full flat order, for
 * checkpoints, resume and --save-params.
 *
 * Theory of operation. On the CPU device these are the memcpys and per-bucket
 * all-gathers they always were. On a GPU at stages 1/2 the shards go bucket by bucket
 * through one temporary device buffer of the largest bucket's size (the collectives
 * take device pointers): a piece in, the bucket all-gathered in place, the bucket out
 * to the host; never a buffer of P floats, which a model near the GPU's memory could
 * not afford next to its state; stage 3's shards the same way. Everything here runs
 * between steps,
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

/* the largest bucket, in elements */
static size_t max_bucket(const struct dsl_trainer *t)
{
    size_t m = 0;
    for (size_t j = 0; j < t->nbk; j++)
        m = t->bk[j].len > m ? t->bk[j].len : m;
    return m;
}

/* A staging buffer of one bucket of floats in device memory (GPU, stages 1-3), or NULL
 * with err set; bounded by the bucket size, never P floats */
static float *dev_staging(struct dsl_trainer *t, const char *what, char *err)
{
    struct dsl_device *d = t->dev;
    size_t n = max_bucket(t);
    float *p = d->ops->alloc(d, (n ? n : 1) * sizeof(float));
    if (!p)
        dsl_seterr(err, -ENOMEM, "cannot allocate %zu bytes on %s %s", n * sizeof(float),
                   d->name, what);
    return p;
}

/* One fp32 shard vector (S, or P at stage 0) in full flat order into host memory full;
 * stage: device memory of one bucket of floats on a GPU at stages 1-3, else NULL: each
 * bucket is gathered there and copied out, so no full-size device buffer is needed.
 * Collective. */
static int gather_vec(struct dsl_trainer *t, const float *vec, float *full, float *stage)
{
    struct dsl_device *d = t->dev;
    int r = 0;
    if (t->o.zero_stage == 0)
        return d->ops->copy(d, full, vec, t->P * sizeof(float), DSL_COPY_D2H);
    if (stage) {
        for (size_t j = 0; j < t->nbk && r >= 0; j++) {
            const struct dsl_bucket *b = &t->bk[j];
            if ((r = d->ops->copy(d, stage + b->poff, vec + b->soff, b->plen * sizeof(float),
                                  DSL_COPY_D2D)) >= 0 &&
                (r = dsl_comm_allgather(t->comm, stage + b->poff, stage, b->len,
                                        DSL_FLOAT32)) >= 0)
                r = d->ops->copy(d, full + b->lo, stage, b->len * sizeof(float),
                                 DSL_COPY_D2H);
        }
    } else {
        for (size_t j = 0; j < t->nbk && r >= 0; j++) {
            const struct dsl_bucket *b = &t->bk[j];
            r = d->ops->copy(d, full + b->lo + b->poff, vec + b->soff, b->plen * sizeof(float),
                             DSL_COPY_D2D);
        }
        for (size_t j = 0; j < t->nbk && r >= 0; j++) {
            const struct dsl_bucket *b = &t->bk[j];
            r = dsl_comm_allgather(t->comm, full + b->lo + b->poff, full + b->lo, b->len,
                                   DSL_FLOAT32);
        }
    }
    if (r < 0)
        t->ngather = t->gather_done = 0; /* the comm may be unusable now */
    return r;
}

int dsl_trainer_params_to_host(struct dsl_trainer *t, float *host, char *err)
{
    struct dsl_device *d = t->dev;
    int r = dsl_trainer_sync(t, err);
    if (r < 0)
        return r;
    if (t->master || t->o.zero_stage == 3) {
        /* the fp32 master weights, or the fp32 shard of stage 3: gathered bucket by
         * bucket (on a GPU through one bucket of device memory) */
        float *stage = t->o.zero_stage > 0 && !d->host_memory
                           ? dev_staging(t, "to gather the parameters", err)
                           : NULL;
        if (t->o.zero_stage > 0 && !d->host_memory && !stage)
            return -ENOMEM;
        r = gather_vec(t, t->master ? t->master : (const float *)t->params, host, stage);
        d->ops->free(d, stage);
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
    if (t->master || t->o.zero_stage == 3) {
        if (d->host_memory) { /* the host vector is the device's memory */
            if ((r = dsl_mixed_load(t, host)) < 0 ||
                (t->o.zero_stage == 3 && (r = dsl_z3_invalidate(t)) < 0))
                return state_fail(t, r, "loading the parameters", err);
            return 0;
        }
        /* bucket by bucket through one bucket of device memory: this rank's piece into
         * the master weights (stage 3 in fp32: into the shard), the whole bucket rounded
         * into the 16-bit parameters (stage 3: this rank's piece of them) */
        int z3 = t->o.zero_stage == 3;
        float *stage = dev_staging(t, "to load the parameters", err);
        if (!stage)
            return -ENOMEM;
        for (size_t j = 0; j < t->nbk && r >= 0; j++) {
            const struct dsl_bucket *b = &t->bk[j];
            float *mine = (t->master ? t->master : (float *)t->params) + b->soff;
            if ((r = d->ops->copy(d, stage, host + b->lo, b->len * sizeof(float),
                                  DSL_COPY_H2D)) >= 0 &&
                (r = d->ops->copy(d, mine, stage + b->poff, b->plen * sizeof(float),
                                  DSL_COPY_D2D)) >= 0 && t->master)
                r = d->ops->to_half(d, t->gtype,
                                    dsl_mixed_el(t, t->params, z3 ? b->soff : b->lo),
                                    z3 ? stage + b->poff : stage, z3 ? b->plen : b->len);
        }
        d->ops->free(d, stage);
        if (r >= 0 && z3)
            r = dsl_z3_invalidate(t); /* the gathered layers held the old parameters */
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
    float *stage = NULL; /* GPU, stages 1-3: one bucket of device memory */
    int r = dsl_trainer_sync(t, err);
    if (r < 0)
        return r;
    if (!d->host_memory && nstate && t->o.zero_stage > 0 &&
        !(stage = dev_staging(t, "to gather the optimizer state", err)))
        return -ENOMEM;
    for (size_t s = 0; s < nstate && s < 2; s++) {
        if ((r = gather_vec(t, vecs[s], state + s * t->P, stage)) < 0) {
            r = state_fail(t, r, t->o.zero_stage == 0 ? "optimizer state copy"
                                                      : "optimizer state gather", err);
            goto out;
        }
    }
    r = 0;
out:
    d->ops->free(d, stage);
    return r;
}

int dsl_trainer_scatter_state(struct dsl_trainer *t, const float *state, size_t nstate,
                              char *err)
{
    struct dsl_device *d = t->dev;
    float *vecs[2] = {t->m, t->v};
    float *tmp = NULL; /* GPU, stages 1-3: this rank's shard in host memory */
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
