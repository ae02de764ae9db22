/*
 * The data-parallel trainer: one optimizer step = forward/backward over this rank's
 * micro batches, gradient reduction (ZeRO stage 0, 1, 2 or 3), optional clipping, the
 * optimizer on this rank's shard and (stages 1/2) an all-gather of the parameters.
 *
 * Ownership of the flat model state (P parameters, N ranks, S = this rank's shard):
 *   stage 0: params P, grads P, optimizer state P per state vector (16P bytes fp32)
 *   stage 1: params P, grads P, optimizer state S             (8P + 8S bytes)
 *   stage 2: params P, reduced grads S, optimizer state S, plus one (two with
 *            overlap_comm) bucket staging buffers             (4P + 12S + buckets)
 *   stage 3: params S (in shard order), grads S, optimizer state S, the staging
 *            buffers of stage 2, and the gathered layers: two windows of the largest
 *            layer (one without prefetch) plus whole copies of the layers under the
 *            persistence threshold (16S + buckets + gathered; trainer_zero3.c). The
 *            model gets each layer whole through the sink's layer() (model.h): the
 *            CPU and CUDA MLP and GPT (on a GPU the shards, windows and copies are
 *            device memory); a model without evaluate_src is refused at init.
 * Stages 1/2 all-gather the parameters bucket by bucket in forward order right after
 * each bucket's optimizer update and do not wait: the next forward waits for each
 * layer's buckets just before using them (model.h's need()).
 * The shard of a rank is, for every gradient bucket, its dsl_shard_of() piece of the
 * bucket; bucket boundaries come from the model's segment list and
 * reduce_bucket_size, so S differs from P/N by at most one element per bucket.
 *
 * Deterministic mode: micro step k of rank r works on chunk c = k*N + r of the global
 * batch (each chunk one micro batch). Each micro step's gradient is reduced over the
 * ranks (the comm's balanced pairwise tree in rank order), and the micro steps are
 * then combined in a pairwise tree over k. For N and the number of chunks powers of
 * two that is the pairwise tree over all chunks in order, the same for every world
 * size and stage; the division by the global batch comes after it.
 *
 * Where the state lives: every buffer above is allocated on the trainer's device
 * (dsl_trainer_opts.dev, device.h): host memory on the CPU, GPU memory with the CUDA
 * device, where the model must be a GPU model (dsl_model_create_cuda) and the comm the
 * nccl backend. The same code runs all three stages on both; t->params, t->m, t->v
 * and the rest are then device pointers, which only the device ops, the model and the
 * comm touch. Host code reads and writes them through dsl_trainer_params_to_host(),
 * dsl_trainer_params_from_host(), dsl_trainer_gather_state() and
 * dsl_trainer_scatter_state(), and reduces small host arrays with
 * dsl_trainer_allreduce_host(). Deterministic mode is a CPU (tcp) property: nccl's
 * summation order is not dstrain's to choose.
 *
 * fp16 loss scaling (opts.loss_scaling; DeepSpeed's FP16 optimizer and ZeRO stage 1/2
 * step): the model computes the gradient of scale x loss; after the reduction every
 * rank checks its final gradient pieces for inf/NaN and the flag is agreed (summed
 * with the per-step loss reduction); dsl_lossscale_update() then decides. A skipped
 * step changes nothing but t->step and the scaler: parameters, optimizer state, the
 * optimizer step count (Adam's bias correction) and the LR scheduler's position stay
 * where they were, and the gradients are dropped. An applied step folds 1/scale into
 * the division by the global batch, before clipping. The scale is an input of the
 * gradient only: with a power-of-two scale and nothing over- or underflowing, the
 * applied steps are bit-identical to fp32 steps (model.h). On the CPU the computation
 * stays fp32 (unless dstrain.cpu_half: mixed precision below, fp32 arithmetic).
 *
 * Mixed precision (opts.dtype fp16 or bf16; the GPU path, and the CPU with
 * dstrain.cpu_half; trainer_mixed.c), as
 * DeepSpeed: parameters and gradients are 16-bit, reduced over the comm as 16-bit
 * (half the bytes), and every rank keeps fp32 master weights next to its optimizer
 * state (the whole model at stage 0, its shard at stages 1/2); the optimizer widens
 * the gradient, unscales, averages and clips in fp32, updates the master piece and
 * writes its 16-bit rounding back for the all-gather. Model state per rank: 16P /
 * 4P + 12P/N / 2P + 14P/N bytes for Adam (fp32 master weights count as optimizer
 * state; dsl_zero_state_formula() in halfprec.h).
 *
 * Steps: t->step counts global steps, skipped ones included (the data position, the
 * checkpoint tag); t->step - t->ls.skipped counts applied optimizer steps (Adam's t
 * minus one, the scheduler's position). Without loss scaling they are equal.
 *
 * The trainer does not own the comm, the model, the device or the datasets; it owns
 * its buffers, which live until dsl_trainer_release().
 */
#ifndef DSLAUNCH_TRAINER_H
#define DSLAUNCH_TRAINER_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/model/data.h"
#include "dslaunch/device/device.h"
#include "dslaunch/train/lossscale.h"
#include "dslaunch/model/model.h"
#include "dslaunch/device/optimizer.h"

/* lr for the 0-based applied optimizer step (steps skipped on fp16 overflow do not
 * count: DeepSpeed does not step the scheduler on them) */
typedef float (*dsl_lr_fn)(void *ctx, uint64_t step);

struct dsl_trainer_opts {
    size_t micro_batch;   /* train_micro_batch_size_per_gpu */
    size_t grad_accum;    /* gradient_accumulation_steps */
    int zero_stage;       /* 0, 1, 2, 3 */
    /* stage 3 (DeepSpeed's stage3_* keys, in elements): a layer of at most
     * z3_persist parameters is kept whole on every rank; the next layer is fetched
     * while one computes when z3_prefetch > 0 and two layers fit in z3_max_live,
     * else one at a time (one layer over z3_max_live: dsl_trainer_init refuses) */
    size_t z3_prefetch, z3_max_live, z3_persist;
    size_t bucket_elems;  /* reduce_bucket_size (elements); DSL_GPU_BUCKET_ELEMS on a GPU
                           * when the config does not say */
    int overlap_comm;     /* issue reductions during backward (on a GPU unless the config
                           * says otherwise) */
    int deterministic;    /* canonical summation order */
    float grad_clip;      /* gradient_clipping; 0 = off */
    int prescale;         /* prescale_gradients */
    float predivide;      /* gradient_predivide_factor (1.0 default) */
    struct dsl_optim_hparams optim;
    dsl_lr_fn lr_fn;      /* NULL: constant optim.lr */
    void *lr_ctx;
    uint64_t seed;
    struct dsl_device *dev; /* where the model state lives; NULL: dsl_device_cpu() */
    int loss_scaling;       /* fp16: scale the loss, skip steps whose gradient overflows */
    struct dsl_lossscale scaler; /* with loss_scaling: the scaler's initial state
                                    (dsl_lossscale_init() from the fp16 section) */
    enum dsl_dtype dtype;   /* parameters and gradients: DSL_FLOAT32 (0), or
                               DSL_FLOAT16 / DSL_BFLOAT16 for mixed precision (fp16 /
                               bf16.enabled on a GPU, or on the CPU with
                               dstrain.cpu_half; model and device must agree) */
};

struct dsl_bucket {
    size_t lo, len;             /* flat range [lo, lo+len) */
    size_t seg_first, seg_last; /* model segments (backward order) it holds */
    size_t poff, plen;          /* this rank's piece, relative to lo */
    size_t soff;                /* offset of the piece in the shard arrays */
    int req;                    /* pending comm request, -1 if none */
    int pend;                   /* streamed stage 0: its reduction may still be running
                                   and its update is left to the next forward */
};

/* ZeRO stage 3: one model layer (the flat range of its segments) and the buckets
 * that hold it (bucket boundaries fall on layer boundaries at stage 3) */
struct dsl_z3_layer {
    size_t lo, len;
    size_t bfirst, blast; /* buckets [bfirst, blast] (backward order) */
    void *keep;           /* a persistent layer's whole copy (z3_persist), else NULL */
    int fresh;            /* keep holds this step's values */
};

struct dsl_mem_report {
    uint64_t params, grads, optim, buckets, accum, total;
    uint64_t gathered; /* stage 3: the gathered layers' windows and persistent layers */
    size_t shard_elems, padding_elems, nbuckets, max_bucket;
};

struct dsl_step_result {
    double loss;     /* mean loss of the global batch */
    double accuracy; /* training accuracy of the global batch */
    float lr;
    float grad_norm; /* before clipping; 0 when clipping is off or the step skipped */
    double loss_scale; /* the loss scale this step ran with (1 without loss scaling) */
    double next_scale; /* the scale after this step's update */
    int skipped;     /* the gradient overflowed on some rank: nothing was updated */
    int stop;        /* some rank asked to stop (signal) */
    int save;        /* rank 0 asked for a checkpoint after this step (save_interval_minutes) */
    uint64_t bytes_sent;
    /* seconds in this step: forward+backward (incl. issuing overlapped reductions),
     * waiting for gradient reductions after backward, loss/norm reductions,
     * optimizer, parameter all-gather */
    double t_compute, t_reduce, t_small, t_optim, t_gather;
    /* times the host waited for the GPU during this step (common/hostsync.h; the goal,
     * and what a GPU step does without evaluation or checkpoints, is 1); 0 on the CPU */
    uint64_t host_syncs;
};

struct dsl_trainer {
    struct dsl_trainer_opts o;
    struct dsl_comm *comm;
    struct dsl_model *model;
    struct dsl_device *dev; /* never NULL after init; not owned */
    int rank, world;
    size_t P, S, G; /* params, shard elements, global batch */

    /* params, grads, gshard, staging and acc hold elements of gtype (esz bytes) */
    enum dsl_dtype gtype; /* DSL_FLOAT32, or the 16-bit type of mixed precision */
    size_t esz;
    void *params;      /* P; at stage 3 this rank's S elements, in shard order */
    void *grads;       /* P (stages 0, 1) or NULL */
    void *gshard;      /* S (stage 2) or NULL */
    void *staging[2];  /* stage 2 bucket buffers */
    int nslots;
    float *master;     /* mixed precision: fp32 master weights, S (P at stage 0); else NULL */
    float *m, *v;      /* optimizer state: P (stage 0) or S */
    void **acc;        /* gradient accumulation levels (grad_accum > 1), of atype */
    enum dsl_dtype atype; /* fp32, except 16-bit gradients in deterministic mode (the
                             comm's 16-bit sums over ranks must equal the accumulation's
                             over micro steps for bit-identity across world sizes) */
    int *acc_used;
    int nacc;
    int defer;          /* stages 0/1 outside deterministic mode: reduce once per step */
    int last_micro;     /* the micro step running is the step's last */
    struct dsl_bucket *bk;
    size_t nbk;
    size_t *seg_bucket; /* model segment -> bucket */
    float *xb;          /* one micro batch */
    int32_t *yb;
    float *stats;       /* per micro step: loss, correct (+ stop flag) */
    void *scratch;      /* GPU: device copy of the small host arrays that are reduced */
    size_t scratch_bytes;
    /* GPU: the step's scalars in device memory (the per micro step loss and hits, the
     * stop and overflow flags, the gradient's maximum, its fixed-point sum of squares
     * and that sum's limbs; offsets below) and their page-locked host copy, read with
     * the step's one host synchronisation */
    void *dscal, *hscal;
    size_t scal_bytes, off_max, off_sum, off_limb;

    /* stage 3 (trainer_zero3.c): the layers, and two windows of the largest one whose
     * contents (win_layer, -1: none) stay valid until the next optimizer step */
    struct dsl_z3_layer *zl;
    size_t nzl, win_elems;
    void *win[2];
    int win_layer[2], win_req[2], win_held[2], nwin;

    int *gq;            /* all-gather requests of the last step, in issue order */
    size_t *gb;         /* ... and their buckets */
    size_t ngather, gather_done; /* issued, waited for (a prefix) */
    double gather_wait; /* seconds forward spent waiting for parameters */

    /* streamed stage 0 whose model hands its loss over early (trainer.c,
     * stream_end): the loss statistics' request, issued before backward's first
     * bucket, and what the last step left to the next forward: npend buckets (.pend)
     * still to wait for and update with pend_lr, at optimizer step pend_t, scaled by
     * pend_inv; pend_wait and pend_optim: seconds this step spent on them */
    int stats_req, stats_issued, stop_flag;
    size_t npend;
    float pend_lr, pend_inv;
    uint64_t pend_t;
    double pend_wait, pend_optim;

    uint64_t step;      /* global steps done, skipped ones included (see the top) */
    struct dsl_lossscale ls; /* the loss scaler (scale 1, static, without loss_scaling) */
    int comm_err;       /* first comm failure inside backward */
    struct dsl_mem_report mem;
};

/** Allocate and shard on o->dev; params get the model's init from o->seed (identical
 *  on every rank). The model must compute where the device keeps memory (a GPU model
 *  with the CUDA device). Returns 0 or a negative code with err set. */
int dsl_trainer_init(struct dsl_trainer *t, const struct dsl_trainer_opts *o,
                     struct dsl_comm *comm, struct dsl_model *model, char *err);
void dsl_trainer_release(struct dsl_trainer *t);

/**
 * One optimizer step over global batch `idx` (G = micro x accum x world indices into
 * `train`). stop_request: this rank's requests, DSL_STEP_STOP (stop after the step: a
 * signal) and DSL_STEP_SAVE (a checkpoint after it; rank 0 only), agreed over all ranks
 * with the loss into res->stop and res->save.
 */
/* reduce_bucket_size on the GPU path when the config does not set it: a few transformer
 * layers of GPT-2 124M (7.1M parameters each) per bucket, so the all-reduces on the comm
 * stream overlap backward (DeepSpeed's 5e8 makes the model one bucket) */
#define DSL_GPU_BUCKET_ELEMS ((size_t)25000000)

#define DSL_STEP_STOP 1
#define DSL_STEP_SAVE 2
int dsl_trainer_step(struct dsl_trainer *t, const struct dsl_dataset *train,
                     const size_t *idx, int stop_request, struct dsl_step_result *res,
                     char *err);

/** Finish what the last step left running into the next forward: the parameter
 *  all-gathers of stages 1/2, and at stage 0 with a streamed optimizer the last
 *  buckets' reductions and updates. Call before reading t->params. */
int dsl_trainer_sync(struct dsl_trainer *t, char *err);

/** Accuracy and mean loss on a dataset, split over the ranks (all ranks call it). */
int dsl_trainer_evaluate(struct dsl_trainer *t, const struct dsl_dataset *d, double *acc,
                         double *loss, char *err);
/** The same over the first limit samples of d (limit 0 or above d->n: all of them). */
int dsl_trainer_evaluate_n(struct dsl_trainer *t, const struct dsl_dataset *d, size_t limit,
                           double *acc, double *loss, char *err);

/** Text of the last failure: the device's if it failed, else the comm's. */
const char *dsl_trainer_last_error(const struct dsl_trainer *t);
/** A failed collective or device call of the trainer into err ("WHAT failed at step N:
 *  why", why from dsl_trainer_last_error()); returns r. The comm is unusable then, so
 *  nothing is left to wait for. (trainer_hostcoll.c) */
int dsl_trainer_comm_fail(struct dsl_trainer *t, int r, const char *what, char *err);

/**
 * Collectives on small HOST arrays, whatever the device: on the CPU straight to the
 * comm, on a GPU through device scratch (nccl takes device pointers only). Allreduce
 * is in place; allgather sends this rank's dsl_shard_of(count) piece of buf and fills
 * all of buf. Every rank calls them; 0 or a negative code (dsl_trainer_last_error()).
 * (trainer_hostcoll.c)
 */
int dsl_trainer_allreduce_host(struct dsl_trainer *t, void *buf, size_t count,
                               enum dsl_dtype ty, enum dsl_redop op);
int dsl_trainer_allgather_host(struct dsl_trainer *t, void *buf, size_t count,
                               enum dsl_dtype ty);

/** Model-state bytes as the formula counts them (see the top of this file). */
void dsl_trainer_memory(const struct dsl_trainer *t, struct dsl_mem_report *r);

/* ---- model state in and out of the device (trainer_state.c) ---------------------- */

/**
 * Optimizer state in full, unpadded, flat order (for checkpoints): for stage 1/2 the
 * shards are gathered from all ranks (collective: every rank calls it; on a GPU through
 * a temporary device buffer of P floats). state is host memory of nstate * P floats
 * (m then v). Stage 0 copies.
 */
int dsl_trainer_gather_state(struct dsl_trainer *t, float *state, size_t nstate, char *err);
/** The inverse: take this rank's part of a full flat optimizer state (host memory). */
int dsl_trainer_scatter_state(struct dsl_trainer *t, const float *state, size_t nstate,
                              char *err);
/** All P parameters into / from host memory (waits for parameter all-gathers first). */
int dsl_trainer_params_to_host(struct dsl_trainer *t, float *host, char *err);
int dsl_trainer_params_from_host(struct dsl_trainer *t, const float *host, char *err);
/** Copy this rank's pieces of a full flat vector into shard order (both host memory). */
void dsl_trainer_shard_pack(const struct dsl_trainer *t, const float *full, float *shard);

/* ---- the training loop (trainer_run.c) ------------------------------------------ */

struct dsl_cfg_monitor;

struct dsl_run_opts {
    uint64_t steps;           /* global steps in all (fp16: skipped ones count); 0: epochs
                                 x steps per epoch */
    uint64_t epochs;
    uint64_t steps_per_print; /* 0: never */
    uint64_t eval_interval;   /* steps; 0: at the end of every epoch */
    uint64_t save_interval;   /* steps; 0: only at the end (with a checkpoint dir) */
    double save_minutes;      /* also a checkpoint when this many minutes have passed
                                 since the last (rank 0's clock decides); 0: never */
    uint64_t eval_iters;      /* evaluate eval_iters x global batch samples of the test
                                 set (its first ones); 0: all of it */
    int shuffle, drop_last;
    uint64_t seed;
    const char *metrics_path; /* JSON lines, rank 0; NULL: none */
    volatile sig_atomic_t *stop_flag; /* set by a signal handler; NULL: none */
    int save_on_signal;
    /* checkpoint hooks (NULL: no checkpoints); tag is "global_step<N>" */
    int (*save)(void *ctx, struct dsl_trainer *t, const char *tag, char *err);
    void *save_ctx;
    const char *params_out;   /* write the final fp32 parameters (raw, rank 0); NULL */
    int wall_clock_breakdown; /* add the step-time split to every progress line */
    double t_process;         /* dsl_now() when the process started its work (0: unknown):
                                 the summary's setup phase is the time until training */
    const char *token_unit;   /* a language model (the model's tokens_per_sample > 0):
                                 "byte" or "token", the unit its losses are per */
    /* DeepSpeed's monitors (rank 0; src/train/monitor.c); NULL or not enabled: none */
    const struct dsl_cfg_monitor *csv_monitor, *tensorboard;
};

struct dsl_run_summary {
    uint64_t steps;
    double wall_s, train_s, samples_per_s;
    double setup_s, eval_s, save_s; /* phases of the wall time (setup: before wall_s) */
    double final_loss, test_acc;
    double test_loss;        /* the last evaluation's mean loss */
    double tokens_per_s;     /* a language model: samples_per_s x tokens per sample */
    uint64_t bytes_per_step; /* this rank's comm bytes per step (mean) */
    double t_compute, t_reduce, t_small, t_optim, t_gather; /* per step, mean (s) */
    int stopped;             /* ended by a signal */
    uint64_t skipped;        /* steps skipped on gradient overflow (fp16), in all */
};

/**
 * Train from t->step (0, or where a checkpoint left off) to the end, printing on rank
 * 0. Returns 0, DSL_ECANCELED when stopped by a signal (after saving with
 * save_on_signal), or another negative code with err set.
 */
int dsl_trainer_run(struct dsl_trainer *t, const struct dsl_run_opts *ro,
                    const struct dsl_dataset *train, const struct dsl_dataset *test,
                    struct dsl_run_summary *sum, char *err);

/** Print every rank's model-state bytes on rank 0 (collective). */
int dsl_trainer_report_memory(struct dsl_trainer *t, FILE *metrics, char *err);

/**
 * The model-state bytes the ZeRO formulas give for P parameters on N ranks with spp
 * optimizer state vectors per parameter (Adam 2), at half-parameter size hsz (2 for
 * mixed precision, whose fp32 master weights count as optimizer state as in the ZeRO
 * paper's K = 12; 4 for fp32, which keeps no master copy). Without buckets,
 * accumulation or padding:
 *   fp32:  16P / 8P + 8P/N / 4P + 12P/N          (Adam)
 *   mixed: 16P / 4P + 12P/N / 2P + 14P/N         (Adam)
 * Defined with the trainer's mixed-precision code (trainer_mixed.c).
 */
double dsl_zero_state_formula(int stage, size_t P, int N, size_t spp, size_t hsz);

/* ---- ZeRO stage 3's gathered layers (trainer_zero3.c) ------------------------------ */

/** Lay out the layers and allocate the windows and persistent copies (counted into
 *  t->mem.gathered); called by dsl_trainer_init after the buckets. 0 or a negative
 *  code with err set. */
int dsl_z3_setup(struct dsl_trainer *t, char *err);
void dsl_z3_release(struct dsl_trainer *t);
/** The sink's layer()/unlayer() (model.h) on a trainer */
const float *dsl_z3_layer(void *ctx, int l, int next);
void dsl_z3_unlayer(void *ctx, int l);
/** The parameters changed (optimizer step, load): every gathered copy is stale. Waits
 *  for gathers still in flight; 0 or a negative code. */
int dsl_z3_invalidate(struct dsl_trainer *t);

#endif
