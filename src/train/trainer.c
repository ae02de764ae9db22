/*
 * The data-parallel step of dstrain: ZeRO stages 0, 1, 2 and 3 over flat buffers.
 *
 * Theory of operation. The model hands its gradient over in segments, last layer
 * first (model.h); the trainer groups consecutive segments into buckets of at most
 * reduce_bucket_size elements (a segment is never split, so a bucket is at least one
 * segment). A bucket is complete when its last segment in backward order (the one at
 * its lowest offset) is done. Then, per stage:
 *   0: the bucket is all-reduced in place in the full gradient buffer;
 *   1: the bucket is reduce-scattered in place: this rank's piece of the bucket in
 *      the full gradient buffer receives the sum;
 *   2: backward wrote the bucket into a staging buffer (one, or two alternating with
 *      overlap_comm); it is reduce-scattered into the rank's shard buffer, and the
 *      staging buffer is reused for a later bucket once that call has completed;
 *   3: as 2; the parameters are sharded too, and forward and backward get each layer
 *      whole from the sink's layer() (trainer_zero3.c), gathered from the shards.
 *      Bucket boundaries fall on layer boundaries, so the shard is per bucket as at
 *      stages 1/2, and the optimizer updates the shard in place; after the step
 *      every gathered copy is stale and the next forward gathers again.
 * With overlap_comm the calls are the asynchronous ones (dsl_comm_i*), issued from
 * inside backward and executed by the comm's progress thread while backward goes on
 * with the next layers; every rank issues the same calls in the same order because
 * the bucket list is the same on every rank. Without overlap_comm stages 0/1 reduce
 * all buckets after backward and stage 2 reduces each bucket with a blocking call as
 * it completes.
 *
 * After the last micro step the gradient pieces are divided by the global batch (the
 * model gives fp32 gradients of the summed loss; 16-bit ones already of the mean, see
 * lavg in step_begin), optionally clipped with the global L2 norm (trainer_grads.c),
 * and the optimizer runs over this rank's pieces (stage 0: everything). Stages
 * 1/2 then all-gather the parameters bucket by bucket, in place. Stage 0 on the CPU
 * with overlap, one micro step and neither clipping nor loss scaling streams instead:
 * each bucket is updated as soon as its all-reduce completes, while the later ones are
 * still on the wire (streams_optimizer). When the model hands its loss over before
 * backward (the sink's loss()), the loss goes out ahead of the buckets and the step
 * ends as soon as it is back; the buckets' waits and updates move into the next
 * forward, just before it reads each bucket's parameters (stream_end), so the first
 * layer, whose gradient comes out of backward last, is reduced while the next forward
 * already runs on its blocks that are in.
 *
 * fp16 loss scaling (trainer.h) adds three things to that: the model is asked for the
 * gradient of scale x loss; before the per-step loss reduction every rank looks for
 * inf/NaN in its final gradient pieces (absmax_bits) and the flag travels with the
 * loss sums, so all ranks see the same sum and take the same decision from
 * dsl_lossscale_update(); and 1/scale joins the division by the global batch. A
 * skipped step returns before clipping and the optimizer and issues no all-gather
 * (the parameters did not change). Without loss scaling none of this runs, and the
 * arithmetic is what it always was.
 *
 * In deterministic mode every micro step is reduced over the ranks, and the micro steps
 * are combined afterwards in a pairwise tree; see trainer.h for why this gives the same
 * bits at every world size. Outside it, stages 0/1 sum the micro steps locally in one
 * full-size buffer (acc[0], P floats) and reduce once, at the last micro step, whose
 * buckets add that sum in just before they are reduced (t->defer; grad_accum times
 * fewer bytes on the wire, as in DeepSpeed); stage 2 keeps reducing every micro step
 * into its shard (no rank holds a full gradient there) and sums the pieces.
 *
 * Memory (allocated in trainer_setup.c). Every model-state buffer (params, grads, the
 * shard, staging buckets, accumulation levels, optimizer state) lives on t->dev
 * (device.h) and is allocated, copied, scaled, summed and updated only through its ops:
 * host memory and plain loops on the CPU device (the loops this file always ran, so CPU
 * results are unchanged), GPU memory and kernels on the CUDA device, whose calls run on
 * the device's stream with the model's cuBLAS work; the nccl comm orders its collectives
 * after that stream with events, and every dsl_comm_wait() makes the stream wait for a
 * collective with an event, so the step never waits on the host for a bucket, a staging
 * slot or a parameter all-gather (device.h, comm.h). The comm is handed the same
 * buffers: host memory for tcp, device memory for nccl. On the CPU the small host arrays
 * that are reduced (per micro step loss/accuracy and the stop flag, the norm's maximum
 * and integer limbs) go straight to the comm. On a GPU they never leave the device
 * during the step: the model sums each micro step's loss and hits into device memory,
 * the overflow check and the norm accumulate over the buckets on the device, the ranks
 * reduce them there, and dsl_grads_device_scalars() reads the whole block back with the
 * step's one host synchronisation, bounded by the comm's timeout (res->host_syncs counts
 * the waits; --metrics reports them). Evaluation counts still go through a small device
 * scratch buffer (dsl_trainer_allreduce_host). The micro batch is gathered on the host;
 * the model uploads it asynchronously from page-locked memory while the host gathers the
 * next one.
 *
 * Mixed precision (fp16/bf16 on a GPU, or on the CPU with dstrain.cpu_half): params,
 * grads, shard, staging and accumulation hold 16-bit elements and go over the comm as
 * such; the buffer ops above go through trainer_mixed.c, which picks the device's
 * fp32 or 16-bit op, and the optimizer updates fp32 master weights there. A 16-bit
 * gradient is never averaged or unscaled in place: those factors ride with the
 * optimizer in fp32, and the norm is scaled.
 *
 * A comm or device failure inside backward is recorded in comm_err and reported when
 * backward returns; the trainer never exits on its own (dstrain decides).
 */
#include <float.h>
#include <string.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/device/device.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/gpuprof.h"
#include "dslaunch/common/hostsync.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/train/trainer.h"
#include "trainer_grads.h"
#include "trainer_mixed.h"
#include "dslaunch/common/banned.h"

/* the device ops on gradient elements (fp32 or 16-bit: trainer_mixed.h), short */
#define dscale dsl_mixed_scale
#define EL(base, off) dsl_mixed_el(t, (base), (off))
#define ACC(base, off) dsl_mixed_acc_el(t, (base), (off)) /* levels: t->atype */

/* ---- gradient sink: where backward writes, and what happens when a bucket is done */

static void *slot_of(struct dsl_trainer *t, size_t j)
{
    return t->staging[j % (size_t)t->nslots];
}

/* Bucket j's update that the last step left to this one (stream_end): wait for its
 * all-reduce, then run the optimizer over it with the last step's settings */
static int apply_pending(struct dsl_trainer *t, size_t j)
{
    struct dsl_bucket *b = &t->bk[j];
    if (!b->pend)
        return 0;
    b->pend = 0;
    t->npend--;
    double w0 = dsl_now();
    int r = dsl_comm_wait(t->comm, b->req);
    b->req = -1;
    double w1 = dsl_now();
    t->pend_wait += w1 - w0;
    if (r < 0)
        return r;
    r = dsl_mixed_optim(t, j, t->gtype, dsl_grads_leaf(t, j), t->pend_lr, t->pend_t, 1.0f,
                        t->pend_inv);
    t->pend_optim += dsl_now() - w1;
    return r;
}

static int apply_all_pending(struct dsl_trainer *t)
{
    for (size_t j = 0; j < t->nbk && t->npend; j++) {
        int r = apply_pending(t, j);
        if (r < 0)
            return r;
    }
    return 0;
}

static float *sink_dest(void *ctx, size_t seg)
{
    struct dsl_trainer *t = ctx;
    const struct dsl_model_seg *s = &t->model->segs[seg];
    if (t->npend && !t->comm_err) {
        /* the last step's reduced gradient of this bucket is still to be applied
         * (a model that did not need() these parameters): before it is overwritten */
        int r = apply_pending(t, t->seg_bucket[seg]);
        if (r < 0)
            t->comm_err = r;
    }
    if (t->o.zero_stage < 2)
        return EL(t->grads, s->off);
    size_t j = t->seg_bucket[seg];
    struct dsl_bucket *b = &t->bk[j];
    if (seg == b->seg_first && j >= (size_t)t->nslots) {
        /* the slot's previous bucket must have left before we overwrite it */
        struct dsl_bucket *prev = &t->bk[j - (size_t)t->nslots];
        if (prev->req >= 0 && !t->comm_err) {
            int r = dsl_comm_wait(t->comm, prev->req);
            if (r < 0)
                t->comm_err = r;
        }
        prev->req = -1;
    }
    return EL(slot_of(t, j), s->off - b->lo);
}

/* reduce bucket j: asynchronously (issue) or blocking; with deferred reduction the
 * earlier micro steps' local sum is added in first */
static int reduce_bucket(struct dsl_trainer *t, size_t j, int async)
{
    struct dsl_bucket *b = &t->bk[j];
    void *src = t->o.zero_stage >= 2 ? slot_of(t, j) : EL(t->grads, b->lo);
    void *dst = t->o.zero_stage >= 2 ? EL(t->gshard, b->soff) : EL(src, b->poff);
    enum dsl_dtype ty = t->gtype;
    int r;
    if (t->defer && (r = dsl_mixed_acc_out(t, src, ACC(t->acc[0], b->lo), b->len)) < 0)
        return r;
    if (t->o.prescale && t->o.predivide != 1.0f &&
        (r = dscale(t, src, b->len, 1.0f / t->o.predivide)) < 0)
        return r;
    if (!async && !t->dev->host_memory) {
        /* GPU: never a host wait inside the step; the compute stream waits instead */
        int req;
        r = t->o.zero_stage == 0
                ? dsl_comm_iallreduce(t->comm, src, src, b->len, ty, DSL_SUM, &req)
                : dsl_comm_ireduce_scatter(t->comm, src, dst, b->len, ty, DSL_SUM, &req);
        return r < 0 ? r : dsl_comm_wait(t->comm, req);
    }
    if (t->o.zero_stage == 0)
        return async ? dsl_comm_iallreduce(t->comm, src, src, b->len, ty, DSL_SUM, &b->req)
                     : dsl_comm_allreduce(t->comm, src, src, b->len, ty, DSL_SUM);
    return async ? dsl_comm_ireduce_scatter(t->comm, src, dst, b->len, ty, DSL_SUM, &b->req)
                 : dsl_comm_reduce_scatter(t->comm, src, dst, b->len, ty, DSL_SUM);
}

static void sink_done(void *ctx, size_t seg)
{
    struct dsl_trainer *t = ctx;
    size_t j = t->seg_bucket[seg];
    if (seg != t->bk[j].seg_last || t->comm_err || (t->defer && !t->last_micro))
        return;
    dsl_gpuprof_mark(DSL_PROF_GRAD); /* GPU timers: the bucket's work, until the model's next */
    int r = 0;
    if (t->o.overlap_comm)
        r = reduce_bucket(t, j, 1);
    else if (t->o.zero_stage >= 2)
        r = reduce_bucket(t, j, 0);
    if (r < 0)
        t->comm_err = r;
}

/* wait until the k-th issued all-gather (and every earlier one) is complete */
static int gather_wait_upto(struct dsl_trainer *t, size_t k)
{
    if (k < t->gather_done)
        return 0;
    double w0 = dsl_now();
    dsl_gpuprof_mark(DSL_PROF_GATHER_WAIT);
    int r = dsl_comm_wait(t->comm, t->gq[k]);
    t->gather_wait += dsl_now() - w0;
    t->gather_done = k + 1;
    return r;
}

static void sink_need(void *ctx, size_t off, size_t len)
{
    struct dsl_trainer *t = ctx;
    /* the last step's buckets complete in issue order: waiting for the last one this
     * range needs is waiting for every earlier one too, so those are updated on the way
     * (while the later ones are still on the wire) rather than left for later */
    size_t upto = 0;
    for (size_t j = 0; j < t->nbk && t->npend; j++) {
        const struct dsl_bucket *b = &t->bk[j];
        if (b->pend && b->lo < off + len && off < b->lo + b->len)
            upto = j + 1;
    }
    for (size_t j = 0; j < upto && t->npend && !t->comm_err; j++) {
        int r = apply_pending(t, j);
        if (r < 0)
            t->comm_err = r;
    }
    if (t->gather_done >= t->ngather || t->comm_err)
        return;
    size_t need = 0;
    int any = 0;
    for (size_t k = 0; k < t->ngather; k++) {
        const struct dsl_bucket *b = &t->bk[t->gb[k]];
        if (b->lo < off + len && off < b->lo + b->len) {
            need = k;
            any = 1;
        }
    }
    if (any) {
        int r = gather_wait_upto(t, need);
        if (r < 0)
            t->comm_err = r;
    }
}

/* A rank's requests for the step (DSL_STEP_STOP, DSL_STEP_SAVE), as a number the loss
 * reduction sums: 1 for a stop, 2^21 for a save. A world has at most 2^20 ranks and
 * only rank 0 asks for saves, so the sum is exact in a float and both can be read
 * back (request_of). */
#define SAVE_UNIT 2097152.0f
static float request_word(int req)
{
    return (req & DSL_STEP_STOP ? 1.0f : 0.0f) + (req & DSL_STEP_SAVE ? SAVE_UNIT : 0.0f);
}

static void request_of(float sum, struct dsl_step_result *res)
{
    res->save = sum >= SAVE_UNIT;
    res->stop = sum - (res->save ? SAVE_UNIT : 0.0f) > 0.0f;
}

/* A streamed step's loss, hits (stats[0], stats[1]) and stop flag, reduced over the
 * ranks in one asynchronous call (stats_req) */
static int issue_stats(struct dsl_trainer *t)
{
    t->stats[2] = request_word(t->stop_flag);
    int r = dsl_comm_iallreduce(t->comm, t->stats, t->stats, 3, DSL_FLOAT32, DSL_SUM,
                                &t->stats_req);
    t->stats_issued = r == 0;
    return r;
}

/* The model's loss of a streamed step, before backward's first bucket: reduced from
 * here, ahead of every bucket, so that it completes first (stream_end) */
static void sink_loss(void *ctx, const struct dsl_model_stats *st)
{
    struct dsl_trainer *t = ctx;
    if (t->comm_err)
        return;
    /* forward has read every parameter; anything still pending goes before the
     * statistics so that the requests stay in the order every rank issues them */
    int r = apply_all_pending(t);
    if (r < 0) {
        t->comm_err = r;
        return;
    }
    t->stats[0] = (float)st->loss_sum;
    t->stats[1] = (float)st->correct;
    if ((r = issue_stats(t)) < 0)
        t->comm_err = r;
}

int dsl_trainer_sync(struct dsl_trainer *t, char *err)
{
    int r;
    if (t->npend && (r = apply_all_pending(t)) < 0)
        return dsl_trainer_comm_fail(t, r, "gradient reduction", err);
    if (t->gather_done >= t->ngather)
        return 0;
    r = gather_wait_upto(t, t->ngather - 1);
    if (r < 0)
        return dsl_trainer_comm_fail(t, r, "parameter all-gather", err);
    return 0;
}

/* ---- the step --------------------------------------------------------------------- */

static float tree_sum(const float *v, size_t n)
{
    /* pairwise tree in index order, odd element carried up: the comm's order */
    float tmp[64];
    if (n == 0)
        return 0.0f;
    if (n > 64) {
        size_t h = 1;
        while (h * 2 < n)
            h *= 2;
        return tree_sum(v, h) + tree_sum(v + h, n - h);
    }
    memcpy(tmp, v, n * sizeof(float));
    while (n > 1) {
        size_t k = 0;
        for (size_t i = 0; i + 1 < n; i += 2)
            tmp[k++] = tmp[i] + tmp[i + 1];
        if (n & 1)
            tmp[k++] = tmp[n - 1];
        n = k;
    }
    return tmp[0];
}

/* A step skipped on gradient overflow: drop the gradients (the accumulation levels
 * start over; the leaves are overwritten by the next backward) and leave parameters,
 * optimizer state and the applied-step count alone. Nothing to all-gather. */
static void skip_step(struct dsl_trainer *t, struct dsl_step_result *res, uint64_t sent0)
{
    for (int i = 0; i < t->nacc; i++)
        t->acc_used[i] = 0;
    t->ngather = t->gather_done = 0;
    res->skipped = 1;
    t->step++;
    res->bytes_sent = dsl_comm_bytes_sent(t->comm) - sent0;
}

/* loss, accuracy and the stop flag of the step from the reduced statistics (ga micro
 * steps), and the loss scale it ran with */
static void read_stats(const struct dsl_trainer *t, size_t ga, struct dsl_step_result *res)
{
    res->loss = (double)tree_sum(t->stats, ga) / (double)t->G;
    res->accuracy = (double)tree_sum(t->stats + ga, ga) / (double)t->G;
    request_of(t->stats[2 * ga], res);
    res->loss_scale = res->next_scale = t->ls.cur_scale;
}

/* The learning rate of the next applied step (skipped fp16 steps do not count) */
static float step_lr(const struct dsl_trainer *t, uint64_t applied)
{
    return t->o.lr_fn ? t->o.lr_fn(t->o.lr_ctx, applied) : t->o.optim.lr;
}

/*
 * Whether this step's optimizer streams: stage 0 on host memory with overlapped
 * reduction, one micro step, fp32, and nothing that needs the whole reduced gradient
 * before an update (no clipping, no loss scaling). Then each bucket is updated as soon
 * as its all-reduce has completed (inside the step, or in the next forward), and the
 * loss statistics ride with the buckets instead of taking a round trip of their own
 * (stream_end). The optimizers are elementwise, so the order in which the buckets are
 * updated changes no bit.
 */
static int streams_optimizer(const struct dsl_trainer *t)
{
    return t->dev->host_memory && t->o.overlap_comm && t->o.zero_stage == 0 &&
           t->o.grad_accum == 1 && !t->o.loss_scaling && t->o.grad_clip <= 0.0f &&
           t->gtype == DSL_FLOAT32;
}

/*
 * The end of a streamed step (streams_optimizer): backward has issued every bucket.
 * Every bucket is marked for its update with this step's settings (pend_*). When the
 * model handed its loss over before backward (sink_loss), the statistics went out
 * ahead of every bucket, so they are the first request to complete: the step reports
 * its loss and stop flag as soon as they are in, and leaves each bucket's wait and
 * update to the point where the next forward reads those parameters (sink_need). The
 * first layer's gradient, the last to come out of backward, is then reduced while the
 * next step's forward already runs on the blocks that are in; dsl_trainer_sync
 * finishes the updates for anything else that reads the parameters (evaluation,
 * checkpoints, the end of training). Otherwise the statistics go out behind the last
 * bucket, and each bucket is updated here as soon as its reduction completes. The
 * optimizer is elementwise, so when each bucket is updated changes no bit.
 */
static int stream_end(struct dsl_trainer *t, struct dsl_step_result *res, char *err)
{
    int deferred = t->stats_issued, r;
    if (!deferred && (r = issue_stats(t)) < 0)
        return dsl_trainer_comm_fail(t, r, "loss reduction", err);
    uint64_t applied = t->step - t->ls.skipped;
    t->pend_lr = res->lr = step_lr(t, applied);
    t->pend_t = applied + 1;
    /* the mean over the global batch rides with the optimizer, as in the full step */
    t->pend_inv = (t->o.prescale ? t->o.predivide : 1.0f) / (float)t->G;
    for (size_t j = 0; j < t->nbk; j++)
        t->bk[j].pend = 1;
    t->npend = t->nbk;
    if (!deferred) {
        double w0 = t->pend_wait, o0 = t->pend_optim;
        r = apply_all_pending(t);
        res->t_reduce += t->pend_wait - w0;
        res->t_optim += t->pend_optim - o0;
        if (r < 0)
            return dsl_trainer_comm_fail(t, r, "gradient reduction", err);
    }
    double s0 = dsl_now();
    r = dsl_comm_wait(t->comm, t->stats_req);
    t->stats_issued = 0;
    if (r < 0)
        return dsl_trainer_comm_fail(t, r, "loss reduction", err);
    res->t_small = dsl_now() - s0;
    read_stats(t, 1, res);
    return 0;
}

/* What one step carries from phase to phase (dsl_trainer_step) */
struct step {
    struct dsl_step_result *res;
    struct dsl_grad_sink sink;
    uint64_t sent0, syncs0; /* the comm's bytes and the host waits before the step */
    int gpu, streamed;      /* device memory; the optimizer streams (streams_optimizer) */
    int stop_request;
    float scale; /* the loss scale of this step (1 without loss scaling) */
    float lavg;  /* 16-bit gradients: 1/G, the mean folded into the loss; else 1 */
    /* after the reduction: averaging (with 1/scale), unscaling first where inv/scale
     * would be subnormal, the clipping coefficient; half: 16-bit gradients; fold: the
     * optimizer applies inv itself */
    float inv, pre, coef;
    int half, fold;
    uint32_t lmax; /* loss scaling: this rank's largest |g| (bits), still scaled */
    uint32_t gmax; /* GPU: the agreed max |g| (bits) of the raw gradient */
    uint64_t gsum; /* GPU: its fixed-point sum of squares over every rank */
    double c0, c1; /* the clock between phases */
};

static int step_begin(struct dsl_trainer *t, struct step *s, int stop_request,
                      struct dsl_step_result *res, char *err)
{
    int r;
    *s = (struct step){
        .res = res,
        .sink = {.dest = sink_dest, .done = sink_done, .need = sink_need, .ctx = t},
        .sent0 = dsl_comm_bytes_sent(t->comm),
        .syncs0 = dsl_hostsync_count(),
        .gpu = !t->dev->host_memory,
        .stop_request = stop_request,
        /* one beyond fp32's range (a dynamic scale doubled past 2^127) becomes inf, so
         * the gradient overflows and the scaler halves it */
        .scale = t->o.loss_scaling ? (float)t->ls.cur_scale : 1.0f,
        /* 16-bit gradients are those of the mean loss over the global batch, times the
         * scale (DeepSpeed's magnitudes: the mean over the micro batch, divided by the
         * accumulation steps, and, as with its prescale_gradients, by the world size
         * before the reduction), so that a 16-bit gradient is not G times too large and
         * fp16 does not overflow at the default scale; 1/G is the same at every world
         * size, so deterministic mode keeps its bits across them. fp32 gradients stay
         * those of the summed loss (bit for bit what the CPU trainer always computed):
         * the division by G happens once, after the reduction. */
        .lavg = t->gtype != DSL_FLOAT32 ? 1.0f / (float)t->G : 1.0f,
        .streamed = streams_optimizer(t),
    };
    memset(res, 0, sizeof(*res));
    s->c1 = dsl_now();
    dsl_gpuprof_step_begin(t->step + 1); /* GPU timers (gpuprof.h): no-ops on the CPU */
    t->gather_wait = t->pend_wait = t->pend_optim = 0.0;
    t->stop_flag = stop_request;
    if (s->streamed)
        s->sink.loss = sink_loss;
    if (t->o.zero_stage == 3) { /* the layers come whole from the shards */
        s->sink.need = NULL;
        s->sink.layer = dsl_z3_layer;
        s->sink.unlayer = dsl_z3_unlayer;
    }
    if (s->gpu && (r = t->dev->ops->set_zero(t->dev, t->dscal, t->scal_bytes / 4)) < 0)
        return dsl_trainer_comm_fail(t, r, "step setup", err);
    return 0;
}

/* micro step k's reduction after backward, by how the buckets went out */
static int micro_reduce(struct dsl_trainer *t, const struct step *s, size_t k, char *err)
{
    int r;
    if (t->defer && !t->last_micro) {
        /* deferred: keep a local sum of the micro steps, reduce at the last one */
        r = dsl_mixed_acc_in(t, t->acc[0], t->grads, t->P, k == 0);
        if (r < 0)
            return dsl_trainer_comm_fail(t, r, "gradient accumulation", err);
    } else if (s->streamed) {
        /* stream_end waits for each bucket just before its update */
    } else if (t->o.overlap_comm) {
        /* requests complete in issue order: the last bucket's wait covers all */
        if ((r = dsl_comm_wait(t->comm, t->bk[t->nbk - 1].req)) < 0)
            return dsl_trainer_comm_fail(t, r, "gradient reduction", err);
    } else if (t->o.zero_stage < 2) {
        for (size_t j = 0; j < t->nbk; j++)
            if ((r = reduce_bucket(t, j, 0)) < 0)
                return dsl_trainer_comm_fail(t, r, "gradient reduction", err);
    }
    return 0;
}

/* micro step k's loss and hits into t->stats (and on a GPU into its block), unless the
 * model deferred them or they went out already (sink_loss) */
static int micro_stats(struct dsl_trainer *t, const struct step *s, size_t k,
                       const struct dsl_model_stats *st, char *err)
{
    size_t ga = t->o.grad_accum;
    int r;
    if (st->deferred || t->stats_issued)
        return 0;
    t->stats[k] = (float)st->loss_sum;
    t->stats[ga + k] = (float)st->correct;
    if (s->gpu && ((r = t->dev->ops->copy(t->dev, (float *)t->dscal + k, &t->stats[k],
                                          sizeof(float), DSL_COPY_H2D)) < 0 ||
                   (r = t->dev->ops->copy(t->dev, (float *)t->dscal + ga + k,
                                          &t->stats[ga + k], sizeof(float),
                                          DSL_COPY_H2D)) < 0))
        return dsl_trainer_comm_fail(t, r, "loss statistics", err);
    return 0;
}

/* micro step k: gather its batch, forward and backward (which issue the buckets), the
 * reduction and the accumulation */
static int micro_step(struct dsl_trainer *t, struct step *s, const struct dsl_dataset *train,
                      const size_t *idx, size_t k, char *err)
{
    struct dsl_model *m = t->model;
    struct dsl_step_result *res = s->res;
    size_t mb = t->o.micro_batch, ga = t->o.grad_accum;
    size_t chunk = k * (size_t)t->world + (size_t)t->rank;
    int r;
    s->c0 = s->c1;
    dsl_dataset_gather(train, idx + chunk * mb, mb, t->xb, t->yb);
    struct dsl_model_stats st = {0}; /* a model that knows nothing of deferred leaves it 0 */
    for (size_t j = 0; j < t->nbk; j++)
        if (!t->bk[j].pend) /* the last step's, still running (stream_end) */
            t->bk[j].req = -1;
    t->last_micro = k + 1 == ga;
    if (s->gpu) { /* the micro step's loss and hits stay on the device */
        s->sink.dev_stats = (float *)t->dscal + k;
        s->sink.dev_stats_stride = ga;
    }
    /* stage 3: the model reads no flat buffer (the layers come from the sink) */
    const float *fp = t->o.zero_stage == 3 ? NULL : (const float *)t->params;
    r = m->ops->forward_backward(m, fp, t->xb, t->yb, mb, s->scale * s->lavg, &s->sink, &st);
    if (r < 0)
        return dsl_seterr(err, r, "forward/backward failed at step %llu%s%s",
                          (unsigned long long)t->step + 1, *m->err ? ": " : "", m->err);
    if (t->comm_err)
        return dsl_trainer_comm_fail(t, t->comm_err, "gradient reduction", err);
    s->c1 = dsl_now();
    res->t_compute += s->c1 - s->c0;
    dsl_gpuprof_mark(t->defer && !t->last_micro ? DSL_PROF_GRAD : DSL_PROF_COMM_WAIT);
    if ((r = micro_reduce(t, s, k, err)) < 0)
        return r;
    s->c0 = dsl_now();
    res->t_reduce += s->c0 - s->c1;
    dsl_gpuprof_mark(DSL_PROF_GRAD);
    if (ga > 1 && !t->defer && (r = dsl_grads_accumulate(t)) < 0)
        return dsl_trainer_comm_fail(t, r, "gradient accumulation", err);
    s->c1 = dsl_now();
    res->t_compute += s->c1 - s->c0;
    return micro_stats(t, s, k, &st, err);
}

/* loss, accuracy, the stop flag and (loss scaling) the overflow flag, summed over the
 * ranks per micro step, into res */
static int step_scalars(struct dsl_trainer *t, struct step *s, char *err)
{
    size_t ga = t->o.grad_accum;
    size_t nstats = 2 * ga + 1 + (t->o.loss_scaling ? 1 : 0);
    int r;
    dsl_gpuprof_mark(DSL_PROF_COMM_WAIT);
    if ((r = dsl_trainer_sync(t, err)) < 0)
        return r;
    if ((r = dsl_grads_fold(t)) < 0)
        return dsl_trainer_comm_fail(t, r, "gradient accumulation", err);
    dsl_gpuprof_mark(DSL_PROF_SCALARS);
    if (s->gpu) {
        if ((r = dsl_grads_device_scalars(t, request_word(s->stop_request),
                                          t->o.grad_clip > 0.0f, nstats, &s->gmax,
                                          &s->gsum)) < 0)
            return dsl_trainer_comm_fail(t, r, "loss, overflow and norm reduction", err);
    } else {
        t->stats[2 * ga] = request_word(s->stop_request);
        if (t->o.loss_scaling) {
            int overflow;
            if ((r = dsl_grads_overflow(t, &overflow, &s->lmax)) < 0)
                return dsl_trainer_comm_fail(t, r, "gradient overflow check", err);
            t->stats[2 * ga + 1] = overflow ? 1.0f : 0.0f;
        }
        if ((r = dsl_trainer_allreduce_host(t, t->stats, nstats, DSL_FLOAT32, DSL_SUM)) < 0)
            return dsl_trainer_comm_fail(t, r, "loss reduction", err);
    }
    read_stats(t, ga, s->res);
    return 0;
}

/* The mean over the global batch and 1/scale in one factor (inv), applied now only
 * where clipping needs the averaged gradient first */
static int step_average(struct dsl_trainer *t, struct step *s, char *err)
{
    int r;
    s->inv = (t->o.prescale ? t->o.predivide : 1.0f) / (s->lavg != 1.0f ? 1.0f : (float)t->G);
    s->pre = 1.0f;
    if (s->scale != 1.0f) {
        /* inv / scale is exact for a power-of-two scale unless it is subnormal: then
         * divide by the scale first (exact for a power of two), inv second */
        float f = s->inv / s->scale;
        if (f >= FLT_MIN)
            s->inv = f;
        else
            s->pre = 1.0f / s->scale;
    }
    /* Without clipping nothing needs the averaged gradient before the optimizer, which
     * then applies inv itself (gscale): one pass over the gradient fewer, the same
     * bits (g * inv rounded either way). A 16-bit gradient is never scaled in place
     * (it would lose bits or underflow): the optimizer applies the factors in fp32,
     * and the norm is taken on the raw gradient and scaled (trainer_mixed.c). */
    s->half = t->gtype != DSL_FLOAT32;
    s->fold = (t->o.grad_clip <= 0.0f && s->pre == 1.0f) || s->half;
    for (size_t j = 0; j < t->nbk && !s->fold; j++) {
        if (s->pre != 1.0f &&
            (r = dscale(t, dsl_grads_final(t, j), t->bk[j].plen, s->pre)) < 0)
            return dsl_trainer_comm_fail(t, r, "gradient unscaling", err);
        if ((r = dscale(t, dsl_grads_final(t, j), t->bk[j].plen, s->inv)) < 0)
            return dsl_trainer_comm_fail(t, r, "gradient averaging", err);
    }
    return 0;
}

/* clipping with the global norm of the true gradient: s->coef */
static int step_clip(struct dsl_trainer *t, struct step *s, char *err)
{
    struct dsl_step_result *res = s->res;
    int r;
    s->coef = 1.0f;
    if (t->o.grad_clip <= 0.0f)
        return 0;
    /* with loss scaling the local max is known from the overflow check: multiplying
     * by positive factors and rounding are monotonic, so the largest unscaled element
     * is the largest scaled one put through the same multiplies (host floats round as
     * the device's scale op does); one pass over the gradient saved */
    uint32_t umax;
    if (s->gpu) {
        /* the norm of the raw gradient, reduced with the step's one wait; scaled like
         * the 16-bit one below */
        res->grad_norm = dsl_grads_norm_of(s->gmax, s->gsum);
    } else if (t->o.loss_scaling) {
        float mx;
        memcpy(&mx, &s->lmax, sizeof(mx));
        if (s->pre != 1.0f && !s->half)
            mx *= s->pre;
        if (!s->half)
            mx *= s->inv;
        memcpy(&umax, &mx, sizeof(umax));
    }
    if (!s->gpu &&
        (r = dsl_grads_norm(t, &res->grad_norm, t->o.loss_scaling ? &umax : NULL)) < 0)
        return dsl_trainer_comm_fail(t, r, "gradient norm", err);
    if (s->half || s->gpu)
        res->grad_norm = (float)((double)res->grad_norm * (double)s->pre * (double)s->inv);
    float c = t->o.grad_clip / (res->grad_norm + 1e-6f);
    if (c < 1.0f)
        s->coef = c;
    return 0;
}

/*
 * The optimizer bucket by bucket, in forward order (buckets are listed in backward
 * order); with a shard (stages 1/2) each bucket's all-gather is issued right after its
 * update and left running: the next forward waits for each layer's buckets just before
 * it needs them (sink_need).
 */
static int step_optimize(struct dsl_trainer *t, struct step *s, float lr, uint64_t applied,
                         char *err)
{
    struct dsl_step_result *res = s->res;
    int gather = (t->o.zero_stage == 1 || t->o.zero_stage == 2) && t->world > 1, r;
    double t_issue = 0.0;
    float pre = s->pre, inv = s->inv, coef = s->coef;
    dsl_gpuprof_mark(DSL_PROF_OPTIM);
    t->ngather = t->gather_done = 0;
    for (size_t jj = t->nbk; jj-- > 0;) {
        struct dsl_bucket *b = &t->bk[jj];
        /* the last multiply (averaging, or the clipping coefficient) rides along with
         * the optimizer; 16-bit: all of them, in fp32 (pre, when there is one, first) */
        float g1 = !s->half ? 1.0f : pre != 1.0f ? pre : inv;
        float gs = !s->half ? (s->fold ? inv : coef) : pre != 1.0f ? inv * coef : coef;
        if ((r = dsl_mixed_optim(t, jj, dsl_grads_final_type(t), dsl_grads_final(t, jj), lr,
                                 applied + 1, g1, gs)) < 0)
            return dsl_trainer_comm_fail(t, r, "optimizer", err);
        if (gather) {
            double i0 = dsl_now();
            void *p = EL(t->params, b->lo);
            if ((r = dsl_comm_iallgather(t->comm, EL(p, b->poff), p, b->len, t->gtype,
                                         &t->gq[t->ngather])) < 0)
                return dsl_trainer_comm_fail(t, r, "parameter all-gather", err);
            t->gb[t->ngather++] = jj;
            t_issue += dsl_now() - i0;
        }
    }
    for (int i = 0; i < t->nacc; i++)
        t->acc_used[i] = 0;
    /* stage 3: the next forward gathers the updated layers */
    if (t->o.zero_stage == 3 && (r = dsl_z3_invalidate(t)) < 0)
        return dsl_trainer_comm_fail(t, r, "parameter all-gather", err);
    /* GPU: no wait here: the optimizer's kernels and the all-gathers run on while the
     * host gathers the next batch; a fault shows up at the next step's one wait */
    res->t_optim = dsl_now() - s->c0 - t_issue;
    /* the all-gather's cost shows up as the next forward's wait; count it here */
    res->t_gather = t_issue + t->gather_wait;
    return 0;
}

/* the step's counters once it is over (a skipped step counted itself: skip_step) */
static int step_close(struct dsl_trainer *t, const struct step *s)
{
    if (!s->res->skipped) {
        t->step++;
        s->res->bytes_sent = dsl_comm_bytes_sent(t->comm) - s->sent0;
    }
    s->res->host_syncs = dsl_hostsync_count() - s->syncs0;
    dsl_gpuprof_step_end();
    return 0;
}

int dsl_trainer_step(struct dsl_trainer *t, const struct dsl_dataset *train,
                     const size_t *idx, int stop_request, struct dsl_step_result *res,
                     char *err)
{
    struct step s;
    int r;
    if ((r = step_begin(t, &s, stop_request, res, err)) < 0)
        return r;
    for (size_t k = 0; k < t->o.grad_accum; k++)
        if ((r = micro_step(t, &s, train, idx, k, err)) < 0)
            return r;
    /* forward's waits for the last step's buckets and their updates (stream_end) */
    res->t_compute -= t->gather_wait + t->pend_wait + t->pend_optim;
    res->t_reduce += t->pend_wait;
    res->t_optim += t->pend_optim;
    if (s.streamed) {
        if ((r = stream_end(t, res, err)) < 0)
            return r;
        return step_close(t, &s);
    }
    if ((r = step_scalars(t, &s, err)) < 0)
        return r;
    uint64_t applied = t->step - t->ls.skipped;
    float lr = step_lr(t, applied);
    res->lr = lr;
    if (t->o.loss_scaling) {
        char why[DSL_ERR_LEN];
        size_t ga = t->o.grad_accum;
        if ((r = dsl_lossscale_update(&t->ls, t->stats[2 * ga + 1] > 0.0f, why)) < 0)
            return dsl_seterr(err, r, "step %llu: %s", (unsigned long long)t->step + 1, why);
        res->next_scale = t->ls.cur_scale;
        if (r == 1) {
            skip_step(t, res, s.sent0);
            res->t_small = dsl_now() - s.c1;
            return step_close(t, &s);
        }
    }
    if ((r = step_average(t, &s, err)) < 0 || (r = step_clip(t, &s, err)) < 0)
        return r;
    s.c0 = dsl_now();
    res->t_small = s.c0 - s.c1;
    if ((r = step_optimize(t, &s, lr, applied, err)) < 0)
        return r;
    return step_close(t, &s);
}
