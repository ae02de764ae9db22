/*
 * The trainer's set-up and tear-down (trainer.h): the bucket list, every model-state
 * buffer, and the model-state report. The step itself is trainer.c's.
 *
 * Theory of operation. dsl_trainer_init() lays the model's gradient segments out in
 * buckets (build_buckets: consecutive segments of at most reduce_bucket_size elements,
 * a segment never split), cuts this rank's shard of every bucket (stages 1/2), and
 * allocates what the stage needs, counting every byte into t->mem as it goes, so the
 * reported model state is what was allocated, not a formula: parameters and gradients
 * (the gradient only at stages 0/1), the shard (stage 2), staging slots (stage 2: one,
 * or two with overlap_comm), accumulation buffers with gradient accumulation (the
 * pairwise tree's levels in deterministic mode, else one: full-size for the deferred
 * sum of stages 0/1, shard-size at stage 2), fp32 master weights (mixed precision) and
 * optimizer state for the rank's partition. Buffers that collectives
 * touch come from the comm on the CPU (dsl_comm_alloc: shared with same-host peers, so
 * reductions need no copies) and from the device otherwise. On any failure everything
 * allocated so far is released and nothing is left half-built. Nothing here runs
 * concurrently with anything; the comm must outlive the trainer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/device/device.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/fixedsum.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/train/trainer.h"
#include "dslaunch/common/xalloc.h"
#include "trainer_mixed.h"
#include "dslaunch/common/banned.h"

/* n zeroed floats of model state on the device */
static float *alloc_floats(struct dsl_device *d, size_t n, int *fail, uint64_t *bytes)
{
    float *p = d->ops->alloc(d, (n ? n : 1) * sizeof(float));
    if (!p)
        *fail = 1;
    if (bytes)
        *bytes += n * sizeof(float);
    return p;
}

/* n zeroed elements of t->gtype that collectives read or write, counted in *bytes */
static void *comm_elems(struct dsl_trainer *t, size_t n, int *fail, uint64_t *bytes)
{
    void *p = dsl_trainer_coll_alloc(t, n * t->esz);
    if (!p)
        *fail = 1;
    *bytes += n * t->esz;
    return p;
}

static void build_buckets(struct dsl_trainer *t)
{
    const struct dsl_model *m = t->model;
    size_t B = t->o.bucket_elems;
    t->bk = dsl_xcalloc(m->nsegs, sizeof(*t->bk));
    t->seg_bucket = dsl_xcalloc(m->nsegs, sizeof(size_t));
    size_t nb = 0, len = 0, first = 0;
    for (size_t i = 0; i < m->nsegs; i++) {
        /* stage 3 gathers a layer as a run of whole buckets: cut at every layer */
        int cut = t->o.zero_stage == 3 && i > 0 && m->segs[i].layer != m->segs[i - 1].layer;
        if (len && ((B && len + m->segs[i].len > B) || cut)) {
            t->bk[nb++] = (struct dsl_bucket){.lo = m->segs[i - 1].off, .len = len,
                                              .seg_first = first, .seg_last = i - 1};
            len = 0;
            first = i;
        }
        len += m->segs[i].len;
        t->seg_bucket[i] = nb;
    }
    t->bk[nb++] = (struct dsl_bucket){.lo = m->segs[m->nsegs - 1].off, .len = len,
                                      .seg_first = first, .seg_last = m->nsegs - 1};
    t->nbk = nb;
    size_t soff = 0;
    for (size_t j = 0; j < nb; j++) {
        struct dsl_bucket *b = &t->bk[j];
        b->req = -1;
        if (t->o.zero_stage == 0) {
            b->poff = 0;
            b->plen = b->len;
            b->soff = b->lo;
        } else {
            dsl_shard_of(b->len, t->rank, t->world, &b->poff, &b->plen);
            b->soff = soff;
            soff += b->plen;
        }
    }
    t->S = t->o.zero_stage == 0 ? t->P : soff;
}

/* The host waits of the GPU device and model: the comm's bounded wait. A failure (a
 * dead peer, a timeout) puts the comm's text where the waiter reports from. */
static int dev_stream_wait(void *ctx, void *stream)
{
    struct dsl_trainer *t = ctx;
    int r = dsl_comm_stream_wait_host(t->comm, stream);
    if (r < 0 && !t->dev->failed) {
        t->dev->failed = r;
        snprintf(t->dev->err, sizeof(t->dev->err), "%s", dsl_comm_last_error(t->comm));
    }
    return r;
}

static int model_stream_wait(void *ctx, void *stream)
{
    struct dsl_trainer *t = ctx;
    int r = dsl_comm_stream_wait_host(t->comm, stream);
    if (r < 0)
        snprintf(t->model->err, sizeof(t->model->err), "%s", dsl_comm_last_error(t->comm));
    return r;
}

/* What the device, the model and the options must agree on before anything is allocated;
 * sets up mixed precision and the GPU's stream waits. */
static int check_setup(struct dsl_trainer *t, const struct dsl_trainer_opts *o,
                       struct dsl_comm *comm, struct dsl_model *model, char *err)
{
    struct dsl_device *d = t->dev;
    if ((model->on_device != 0) == (d->host_memory != 0))
        return dsl_seterr(err, DSL_ECONFIG, "a %s model cannot train on device '%s'",
                          model->on_device ? "GPU" : "CPU", d->name);
    int rs = dsl_mixed_setup(t, err);
    if (rs < 0)
        return rs;
    if (!d->host_memory) {
        /* one stream for the model, the device ops and the comm's ordering */
        if (model->stream != d->stream)
            return dsl_seterr(err, DSL_ECONFIG, "the GPU model runs on another CUDA stream "
                              "than device '%s' (set the model spec's stream to the "
                              "device's)", d->name);
        dsl_comm_set_compute_stream(comm, d->stream);
        if (dsl_comm_stream(comm)) {
            /* nccl: every host wait is the comm's bounded one, which a dead peer ends */
            d->wait = dev_stream_wait;
            d->wait_ctx = t;
            model->wait = model_stream_wait;
            model->wait_ctx = t;
        }
    }
    if (!dsl_fixedsum_fits(t->world)) /* the gradient norm's exact limb sums */
        return dsl_seterr(err, DSL_ECONFIG, "%d ranks: the gradient norm's exact sums "
                          "allow at most %d", t->world, DSL_FIXEDSUM_MAX_RANKS);
    if (o->zero_stage < 0 || o->zero_stage > 3)
        return dsl_seterr(err, DSL_ENOTSUP, "ZeRO stage %d is not supported (0, 1, 2 or 3)",
                          o->zero_stage);
    /* stage 3 needs a model that takes its layers from the sink (model.h) */
    if (o->zero_stage == 3 && !model->ops->evaluate_src)
        return dsl_seterr(err, DSL_ENOTSUP, "ZeRO stage 3 is not implemented for this model "
                          "(the %s %s cannot take its parameters a layer at a time): use "
                          "stage 0, 1 or 2", d->host_memory ? "CPU" : "GPU", model->ops->name);
    if (!o->micro_batch || !o->grad_accum || o->micro_batch > model->max_batch)
        return dsl_seterr(err, DSL_ECONFIG, "bad micro batch %zu / accumulation %zu",
                          o->micro_batch, o->grad_accum);
    return 0;
}

/* The step's buffers and state, each counted in t->mem; returns 1 when one failed (the
 * caller reports the total), and the largest bucket in *maxb_out. */
static int alloc_state(struct dsl_trainer *t, const struct dsl_trainer_opts *o,
                       struct dsl_model *model, size_t *maxb_out)
{
    struct dsl_device *d = t->dev;
    struct dsl_mem_report *r = &t->mem;
    int fail = 0;
    size_t maxb = 0;
    for (size_t j = 0; j < t->nbk; j++)
        maxb = t->bk[j].len > maxb ? t->bk[j].len : maxb;
    /* stage 3: only this rank's shard of the parameters (trainer_zero3.c) */
    t->params = comm_elems(t, o->zero_stage == 3 ? t->S : t->P, &fail, &r->params);
    if (o->zero_stage < 2) {
        t->grads = comm_elems(t, t->P, &fail, &r->grads);
    } else {
        /* the shard is no collective's buffer on the CPU: plain device memory */
        t->gshard = d->ops->alloc(d, (t->S ? t->S : 1) * t->esz);
        fail |= !t->gshard;
        r->grads += t->S * t->esz;
        t->nslots = o->overlap_comm ? 2 : 1;
        for (int i = 0; i < t->nslots; i++)
            t->staging[i] = comm_elems(t, maxb, &fail, &r->buckets);
    }
    if (t->gtype != DSL_FLOAT32) /* fp32 master weights count as optimizer state */
        t->master = alloc_floats(d, t->S, &fail, &r->optim);
    size_t spp = dsl_optim_state_per_param(&o->optim);
    if (spp >= 1)
        t->m = alloc_floats(d, t->S, &fail, &r->optim);
    if (spp >= 2)
        t->v = alloc_floats(d, t->S, &fail, &r->optim);
    /* stages 0/1 outside deterministic mode sum the micro steps locally, in one
     * full-size buffer, and reduce once per step (as DeepSpeed does); otherwise every
     * micro step is reduced and the reduced pieces are accumulated (shard-size levels) */
    t->defer = o->grad_accum > 1 && !o->deterministic && o->zero_stage < 2;
    /* micro steps accumulate in fp32, 16-bit gradients too (DeepSpeed's fp32
     * accumulation), except in deterministic mode (see trainer.h: atype) */
    t->atype = t->gtype != DSL_FLOAT32 && o->deterministic ? t->gtype : DSL_FLOAT32;
    if (o->grad_accum > 1) {
        int levels = 1;
        if (o->deterministic)
            while (((size_t)1 << levels) <= o->grad_accum)
                levels++;
        t->nacc = levels;
        t->acc = dsl_xcalloc((size_t)levels, sizeof(void *));
        t->acc_used = dsl_xcalloc((size_t)levels, sizeof(int));
        size_t na = t->defer ? t->P : t->S, asz = dsl_dtype_size(t->atype);
        for (int i = 0; i < levels; i++) {
            t->acc[i] = d->ops->alloc(d, (na ? na : 1) * asz);
            fail |= !t->acc[i];
            r->accum += na * asz;
        }
    }
    size_t nx = o->micro_batch * model->in_dim; /* host: the trainer gathers here */
    t->xb = calloc(nx ? nx : 1, sizeof(float));
    if (!t->xb)
        fail = 1;
    t->yb = dsl_xcalloc(o->micro_batch, sizeof(int32_t));
    t->stats = dsl_xcalloc(2 * o->grad_accum + 2, sizeof(float));
    if (!d->host_memory) {
        /* the small host arrays that are reduced, one at a time (not model state) */
        t->scratch_bytes = (2 * o->grad_accum + 4) * sizeof(float);
        t->scratch = d->ops->alloc(d, t->scratch_bytes);
        if (!t->scratch)
            fail = 1;
        /* the step's scalars: stats (2 ga + 2 floats), max (uint32, padded to 8),
         * sum (uint64), limbs (int32) */
        t->off_max = ((2 * o->grad_accum + 2) * sizeof(float) + 7) / 8 * 8;
        t->off_sum = t->off_max + 8;
        t->off_limb = t->off_sum + 8;
        t->scal_bytes = (t->off_limb + DSL_FIXEDSUM_LIMBS * sizeof(int32_t) + 7) / 8 * 8;
        t->dscal = d->ops->alloc(d, t->scal_bytes);
        t->hscal = d->ops->host_alloc ? d->ops->host_alloc(d, t->scal_bytes) : NULL;
        if (!t->dscal || !t->hscal)
            fail = 1;
    }
    *maxb_out = maxb;
    return fail;
}

/* The model's initial parameters, straight into t->params or through fp32 into the
 * master weights and their 16-bit copy; releases t on an error. */
static int first_params(struct dsl_trainer *t, const struct dsl_trainer_opts *o,
                        struct dsl_model *model, char *err)
{
    struct dsl_device *d = t->dev;
    int ri;
    if (t->gtype == DSL_FLOAT32 && o->zero_stage < 3) {
        ri = model->ops->init_params(model, t->params, o->seed);
    } else {
        /* fp32 initial values through a temporary buffer into master and 16-bit copy */
        float *full = d->ops->alloc(d, (t->P ? t->P : 1) * sizeof(float));
        ri = !full ? -ENOMEM : model->ops->init_params(model, full, o->seed);
        if (ri >= 0 && (ri = dsl_mixed_load(t, full)) < 0)
            snprintf(model->err, sizeof(model->err), "%s", d->err);
        d->ops->free(d, full);
    }
    if (ri < 0) {
        dsl_trainer_release(t);
        return dsl_seterr(err, ri, "cannot initialise the parameters: %s",
                          *model->err ? model->err : dsl_strerror(ri));
    }
    return 0;
}

int dsl_trainer_init(struct dsl_trainer *t, const struct dsl_trainer_opts *o,
                     struct dsl_comm *comm, struct dsl_model *model, char *err)
{
    memset(t, 0, sizeof(*t));
    t->o = *o;
    t->comm = comm;
    t->model = model;
    t->dev = o->dev ? o->dev : dsl_device_cpu();
    t->rank = dsl_comm_rank(comm);
    t->world = dsl_comm_size(comm);
    t->P = model->nparams;
    if (o->loss_scaling)
        t->ls = o->scaler;
    else
        dsl_lossscale_init(&t->ls, NULL);
    int rc = check_setup(t, o, comm, model, err);
    if (rc < 0)
        return rc;
    struct dsl_device *d = t->dev;
    t->G = o->micro_batch * o->grad_accum * (size_t)t->world;
    build_buckets(t);
    t->gq = dsl_xcalloc(t->nbk, sizeof(int));
    t->gb = dsl_xcalloc(t->nbk, sizeof(size_t));

    struct dsl_mem_report *r = &t->mem;
    size_t maxb = 0;
    int fail = alloc_state(t, o, model, &maxb);
    if (fail) {
        uint64_t total = r->params + r->grads + r->optim + r->buckets + r->accum;
        char why[DSL_ERR_LEN + 2] = "";
        if (d->err[0]) /* the device's own text (CUDA: which allocation, and why) */
            snprintf(why, sizeof(why), ": %s", d->err);
        dsl_trainer_release(t);
        return dsl_seterr(err, -ENOMEM, "cannot allocate %llu bytes of model state%s%s%s",
                          (unsigned long long)total, d->host_memory ? "" : " on ",
                          d->host_memory ? "" : d->name, why);
    }
    /* the padded scratch of uneven shards, sized once for the largest bucket (in fp32:
     * checkpoints gather fp32 state bucket by bucket), so no step allocates */
    if (!d->host_memory && (fail = dsl_comm_reserve(comm, maxb * sizeof(float))) < 0) {
        int rr = fail;
        dsl_seterr(err, rr, "%s", dsl_comm_last_error(comm));
        dsl_trainer_release(t);
        return rr;
    }
    if (o->zero_stage == 3 && (fail = dsl_z3_setup(t, err)) < 0) {
        int rr = fail;
        dsl_trainer_release(t);
        return rr;
    }
    r->total = r->params + r->grads + r->optim + r->buckets + r->accum + r->gathered;
    r->shard_elems = t->S;
    r->nbuckets = t->nbk;
    r->max_bucket = t->o.zero_stage >= 2 ? maxb : 0;
    for (size_t j = 0; j < t->nbk && o->zero_stage > 0; j++)
        r->padding_elems += dsl_shard_size(t->bk[j].len, t->world) * (size_t)t->world -
                            t->bk[j].len;
    return first_params(t, o, model, err);
}

void dsl_trainer_release(struct dsl_trainer *t)
{
    struct dsl_device *d = t->dev ? t->dev : dsl_device_cpu();
    /* reductions a streamed step left running (trainer.c, stream_end) write into
     * these buffers: let them end first, whatever their outcome */
    for (size_t j = 0; t->comm && t->bk && j < t->nbk; j++)
        if (t->bk[j].pend && t->bk[j].req >= 0)
            (void)dsl_comm_wait(t->comm, t->bk[j].req);
    if (t->comm && t->stats_issued)
        (void)dsl_comm_wait(t->comm, t->stats_req);
    dsl_z3_release(t);
    dsl_trainer_coll_free(t, t->params);
    dsl_trainer_coll_free(t, t->grads);
    d->ops->free(d, t->gshard);
    dsl_trainer_coll_free(t, t->staging[0]);
    dsl_trainer_coll_free(t, t->staging[1]);
    d->ops->free(d, t->master);
    d->ops->free(d, t->m);
    d->ops->free(d, t->v);
    for (int i = 0; i < t->nacc; i++)
        d->ops->free(d, t->acc[i]);
    d->ops->free(d, t->scratch);
    d->ops->free(d, t->dscal);
    if (t->hscal && d->ops->host_free)
        d->ops->host_free(d, t->hscal);
    if (!d->host_memory) { /* the comm may be closed after us */
        d->wait = NULL;
        d->wait_ctx = NULL;
        if (t->model) {
            t->model->wait = NULL;
            t->model->wait_ctx = NULL;
        }
    }
    free(t->acc);
    free(t->acc_used);
    free(t->bk);
    free(t->gq);
    free(t->gb);
    free(t->seg_bucket);
    free(t->xb);
    free(t->yb);
    free(t->stats);
    memset(t, 0, sizeof(*t));
}

void dsl_trainer_memory(const struct dsl_trainer *t, struct dsl_mem_report *r)
{
    *r = t->mem;
}
