/*
 * The trainer's collectives on small host arrays: the per-step loss sums and flags,
 * the gradient norm's maximum and integer limbs, evaluation counts, checkpoint
 * agreement and memory reports, whatever device holds the model; and the words of a
 * failed collective.
 *
 * Theory of operation. On a device with host memory (the CPU) the array goes straight
 * to the comm. On a GPU the nccl comm takes device pointers only, so the array crosses
 * to the device (the trainer's scratch buffer when it fits, else a buffer allocated
 * for the call), is reduced or gathered there in place, and crosses back. Every rank
 * calls these in the same order, like any collective. This file calls only the comm
 * and the device, nothing else of the trainer, so the step (trainer.c), the state
 * transfers (trainer_state.c), checkpoints and the run loop can all sit on it.
 */
#include <errno.h>
#include <stddef.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/common/error.h"
#include "dslaunch/train/trainer.h"
#include "dslaunch/common/banned.h"

const char *dsl_trainer_last_error(const struct dsl_trainer *t)
{
    if (t->dev && t->dev->failed)
        return t->dev->err;
    return dsl_comm_last_error(t->comm);
}

/* a comm (or device) failure: the text is the device's when it failed, else the comm's */
int dsl_trainer_comm_fail(struct dsl_trainer *t, int r, const char *what, char *err)
{
    t->ngather = t->gather_done = 0; /* the comm is unusable now: nothing to wait for */
    const char *why = dsl_trainer_last_error(t);
    return dsl_seterr(err, r, "%s failed at step %llu: %s", what,
                      (unsigned long long)t->step + 1, why && *why ? why : dsl_strerror(r));
}

int dsl_trainer_allreduce_host(struct dsl_trainer *t, void *buf, size_t count,
                               enum dsl_dtype ty, enum dsl_redop op)
{
    struct dsl_device *d = t->dev;
    size_t bytes = count * dsl_dtype_size(ty);
    int r;
    if (d->host_memory)
        return dsl_comm_allreduce(t->comm, buf, buf, count, ty, op);
    void *dbuf = bytes <= t->scratch_bytes ? t->scratch : d->ops->alloc(d, bytes);
    if (!dbuf)
        return -ENOMEM;
    if ((r = d->ops->copy(d, dbuf, buf, bytes, DSL_COPY_H2D)) >= 0 &&
        (r = dsl_comm_allreduce(t->comm, dbuf, dbuf, count, ty, op)) >= 0)
        r = d->ops->copy(d, buf, dbuf, bytes, DSL_COPY_D2H);
    if (dbuf != t->scratch)
        d->ops->free(d, dbuf);
    return r;
}

int dsl_trainer_allgather_host(struct dsl_trainer *t, void *buf, size_t count,
                               enum dsl_dtype ty)
{
    struct dsl_device *d = t->dev;
    size_t esz = dsl_dtype_size(ty), off, len;
    int r;
    dsl_shard_of(count, t->rank, t->world, &off, &len);
    if (d->host_memory)
        return dsl_comm_allgather(t->comm, (char *)buf + off * esz, buf, count, ty);
    char *dbuf = count * esz <= t->scratch_bytes ? t->scratch : d->ops->alloc(d, count * esz);
    if (!dbuf)
        return -ENOMEM;
    if ((r = d->ops->copy(d, dbuf + off * esz, (char *)buf + off * esz, len * esz,
                          DSL_COPY_H2D)) >= 0 &&
        (r = dsl_comm_allgather(t->comm, dbuf + off * esz, dbuf, count, ty)) >= 0)
        r = d->ops->copy(d, buf, dbuf, count * esz, DSL_COPY_D2H);
    if (dbuf != t->scratch)
        d->ops->free(d, dbuf);
    return r;
}
