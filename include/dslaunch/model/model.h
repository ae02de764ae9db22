/*
 * The model interface of dstrain: what the data-parallel code needs from a model and
 * nothing more, so that a second model (a transformer) can be added as another ops
 * table without touching the trainer.
 *
 * Parameters live in one flat float buffer owned by the caller, so a shard is just an
 * (offset, len) slice of it; a
 * model only knows offsets into it. Its gradient is delivered in *segments*: fixed
 * (offset, len) slices of the flat buffer, listed in the order in which backward
 * finishes them (last layer first). Before writing segment i, backward asks the sink
 * for the destination of that segment (dest(ctx, i) returns len floats, which may be
 * the segment's place in a full-size gradient buffer or a slot of a small bucket
 * buffer), and after writing it calls done(ctx, i). That is what lets ZeRO stage 2
 * reduce-scatter buckets while the rest of backward still runs, without a full-size
 * gradient buffer. The segment list depends only on the model spec and seg_max, never
 * on the world size or the ZeRO stage, so every configuration runs the same sgemm
 * shapes (the basis of deterministic mode).
 *
 * Gradients are of the SUM of per-sample losses over the micro batch (not the mean):
 * the trainer divides once by the global batch, at the same point in every
 * configuration.
 *
 * Memory: a model computes where it was built. dsl_model_create() gives a CPU model:
 * params, and the segment destinations the sink returns, are host pointers.
 * dsl_model_create_cuda() gives a GPU model (on_device = 1): params and segment
 * destinations are device pointers on the current CUDA device (the trainer allocates
 * them through a struct dsl_device of the same kind). For both, the samples x and the
 * labels y passed to forward_backward/evaluate are host pointers (the GPU model
 * uploads them into its own workspace), and the stats come back in host memory.
 *
 * 16-bit models (spec.dtype DSL_FLOAT16 or DSL_BFLOAT16; m->dtype says which):
 * params and the sink's segment destinations hold 16-bit elements of that type, still
 * passed as float * (the interface predates them; offsets and lengths count elements,
 * not floats). On the GPU forward/backward compute with 16-bit inputs and outputs and
 * fp32 accumulation; on the CPU (dstrain.cpu_half) the 16-bit values are widened and
 * everything is computed in fp32, the gradient being rounded to 16 bits (to nearest
 * even) as it is handed to the sink. init_params writes fp32 whatever the dtype: the
 * trainer keeps fp32 master weights and rounds them to the 16-bit copy itself.
 */
#ifndef DSLAUNCH_MODEL_H
#define DSLAUNCH_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "dslaunch/common/dtype.h"
#include "dslaunch/common/error.h"

#define DSL_MODEL_MAX_LAYERS 16
#define DSL_GPT_MAX_LAYERS 48
/* named tensors of any model: the MLP's 2 per layer, the GPT's 12 per block + 4 */
#define DSL_MODEL_MAX_TENSORS (12 * DSL_GPT_MAX_LAYERS + 4)

/** One gradient segment: flat offset and length, and the layer it belongs to. */
struct dsl_model_seg {
    size_t off;
    size_t len;
    int layer;
};

struct dsl_model_stats;

/** Where backward writes gradient segments (see the top of this file). */
struct dsl_grad_sink {
    float *(*dest)(void *ctx, size_t seg);
    void (*done)(void *ctx, size_t seg);
    /** Forward calls need(ctx, off, len) before it reads params[off, off+len) (a
     *  layer, or a segment of one), so parameters still being all-gathered, or still
     *  waiting for the last step's update, can arrive just in time; NULL: everything
     *  is in place. */
    void (*need)(void *ctx, size_t off, size_t len);
    void *ctx;
    /** GPU models, optional: when not NULL, forward_backward may leave the micro batch's
     *  loss sum and hit count in device memory instead of waiting for them: dev_stats[0]
     *  = the loss sum, dev_stats[ga] = the hit count (fp32; ga = dev_stats_stride), and
     *  it then sets st->deferred. A model that does not sets st as usual. */
    float *dev_stats;
    size_t dev_stats_stride;
    /** CPU models, optional (NULL: not wanted): forward_backward calls loss(ctx, st)
     *  once, as soon as st holds the micro batch's loss sum and hit count and before
     *  the first dest(), so the trainer can start reducing them while backward runs. A
     *  model that never calls it still fills st. */
    void (*loss)(void *ctx, const struct dsl_model_stats *st);
    /** ZeRO stage 3 (NULL otherwise; only a model whose ops have evaluate_src takes
     *  it): the params pointer the model was passed is then not read. Before forward
     *  reads layer l's parameters (the flat range of the segments whose .layer is l),
     *  and again before backward reads them, the model calls layer(ctx, l, next),
     *  which returns that range whole (element 0 is the layer's lowest offset), valid
     *  until unlayer(ctx, l); next is the layer it will ask for after this one (-1:
     *  none this pass), so the source can fetch it while l computes. A model holds at
     *  most one layer at a time. On a failure layer() returns a readable range of
     *  zeros and records the error with its owner, who reports it after the pass. */
    const float *(*layer)(void *ctx, int l, int next);
    void (*unlayer)(void *ctx, int l);
};

/** Loss statistics of one forward pass. */
struct dsl_model_stats {
    double loss_sum; /* sum of per-sample cross-entropy, summed in sample order */
    size_t correct;  /* samples whose argmax equals the label (gpt: whose prediction at
                        the last position equals the last target) */
    int deferred;    /* 1: both are in the sink's dev_stats instead (GPU), not here */
};

/** What to build. type "mlp": in_dim - hidden[0] - ... - out_dim, ReLU, cross-entropy.
 *  type "gpt" (model_gpt.c): a GPT-2 language model with gpt.layers blocks of width
 *  gpt.dim and gpt.heads heads over windows of gpt.context tokens; out_dim is the
 *  vocabulary and in_dim must be gpt.context + 1: a sample is context + 1 token ids
 *  carried as floats (exact below 2^24), inputs the first context, targets the last
 *  context; the labels y are not used. Its per-sample loss is the MEAN cross-entropy
 *  over the sample's context positions (nats per token), so the trainer's division by
 *  the global batch gives the mean over every token of the step, as llm.c reports it. */
struct dsl_model_spec {
    const char *type;
    size_t in_dim;
    size_t out_dim;
    size_t hidden[DSL_MODEL_MAX_LAYERS];
    size_t nhidden;
    size_t max_batch; /* largest micro batch (or eval batch) that will be passed */
    size_t seg_max;   /* upper bound on a gradient segment's length (0 = whole tensors) */
    enum dsl_dtype dtype; /* DSL_FLOAT32 (0), or DSL_FLOAT16 / DSL_BFLOAT16: 16-bit
                             params and gradients (GPU: 16-bit compute; CPU: 16-bit
                             storage, fp32 arithmetic) */
    int gemm_bf16; /* CPU: 1 = the large products take bf16-rounded inputs and sum in
                      fp32 (oneDNN; dsl_model_gemm_bf16_supported() must say yes) */
    void *stream; /* GPU: the cudaStream_t to run on, the trainer's device stream
                     (struct dsl_device .stream); NULL: the legacy default stream */
    struct {
        size_t layers, dim, heads, context; /* type "gpt" only */
    } gpt;
};

struct dsl_model;

struct dsl_model_ops {
    const char *name;
    /** Fill params (nparams floats, fp32 for every dtype, in the model's memory: see
     *  the top of this file) from seed; the same seed gives the same bits on the CPU and
     *  the GPU. Returns 0 or a negative code (GPU: the copy failed), with the text in
     *  m->err. */
    int (*init_params)(struct dsl_model *m, float *params, uint64_t seed);
    /** Forward + backward over n samples (x: n x in_dim, y: n labels; host memory).
     *  loss_scale: the gradient delivered is that of loss_scale x the summed loss (the
     *  trainer's fp16 loss scaling: the softmax cross-entropy gradient dz is multiplied
     *  by it before backward runs); the stats stay those of the unscaled loss. With 1
     *  the gradient is the plain one, bit for bit. A power of two scales every
     *  gradient element exactly (backward is linear in dz) unless something
     *  overflows, which shows up as inf or NaN in the gradient.
     *  Returns 0, DSL_EDATA for a label out of range or n > max_batch, or (GPU) another
     *  negative code with the text in m->err. */
    int (*forward_backward)(struct dsl_model *m, const float *params, const float *x,
                            const int32_t *y, size_t n, float loss_scale,
                            const struct dsl_grad_sink *sink, struct dsl_model_stats *st);
    /** Forward only (evaluation); stats as above. */
    int (*evaluate)(struct dsl_model *m, const float *params, const float *x,
                    const int32_t *y, size_t n, struct dsl_model_stats *st);
    /** Forward only with the parameters from src's layer()/unlayer() (ZeRO stage 3,
     *  see dsl_grad_sink); NULL: the model cannot take its parameters a layer at a
     *  time, and the trainer refuses stage 3 for it. */
    int (*evaluate_src)(struct dsl_model *m, const struct dsl_grad_sink *src,
                        const float *x, const int32_t *y, size_t n,
                        struct dsl_model_stats *st);
    void (*release)(struct dsl_model *m);
};

struct dsl_model {
    const struct dsl_model_ops *ops;
    size_t nparams;
    size_t in_dim, out_dim, max_batch;
    struct dsl_model_seg *segs; /* backward order; owned by the model */
    size_t nsegs;
    size_t flops_per_sample; /* forward+backward multiply-adds x 2 (about 6 x nparams) */
    size_t tokens_per_sample; /* gpt: the context (progress reports tokens/s); mlp: 0 */
    int on_device;           /* params and gradients are CUDA device pointers */
    void *stream;            /* GPU: the cudaStream_t it runs on (spec.stream) */
    /* GPU: how to wait on the host for the stream (set by the trainer to the comm's
     * bounded wait); NULL: cudaStreamSynchronize */
    int (*wait)(void *ctx, void *stream);
    void *wait_ctx;
    enum dsl_dtype dtype;    /* element type of params and gradients (see the top) */
    char err[DSL_ERR_LEN];   /* text of the last failed op ("" if none given) */
    void *impl;              /* the implementation's state (activations) */
};

/**
 * Build a model on the CPU (OpenBLAS). Returns 0, or DSL_ECONFIG with err naming
 * the bad field. Release with dsl_model_release().
 */
int dsl_model_create(struct dsl_model *m, const struct dsl_model_spec *spec, char *err);

/**
 * Whether the CPU models can take spec.gemm_bf16: 1, or 0 with why (a sentence, e.g.
 * "this CPU has no bf16 instructions (AVX512-BF16 or AMX; ...)") when the build has no
 * oneDNN or the CPU no bf16 instructions. dsl_model_create() refuses gemm_bf16 then.
 */
int dsl_model_gemm_bf16_supported(char *why, size_t len);
#ifdef DSL_HAVE_CUDA
/**
 * Build the same model on the current CUDA device (cuBLAS; model_mlp_cuda.c for type
 * "mlp", model_gpt_cuda.c for type "gpt"): the
 * same layout, segment list and initial values as dsl_model_create(), its params and
 * gradients in device memory (on_device = 1). The device must have been selected
 * (dsl_device_cuda_open()). Returns 0, DSL_ECONFIG for a bad spec, or another
 * negative code (out of device memory, cuBLAS failed) with err set. The workspace
 * (activations, the uploaded batch) and the cuBLAS handle are owned by the model until
 * dsl_model_release().
 */
int dsl_model_create_cuda(struct dsl_model *m, const struct dsl_model_spec *spec, char *err);
#endif
void dsl_model_release(struct dsl_model *m);

/** A language model (the CPU GPT): the logits (out_dim floats, host memory) of the
 *  token after tokens[0..n), 1 <= n <= context. DSL_ENOTSUP for other models,
 *  DSL_EDATA for a bad n or token id; the text in m->err. Sampling reads these. */
int dsl_model_next_logits(struct dsl_model *m, const float *params, const int32_t *tokens,
                          size_t n, float *logits);

/** One named tensor of a model's flat buffer (checkpoints and tools). */
struct dsl_model_tensor {
    char name[48]; /* "0.weight" (mlp), "h.0.attn.c_attn.weight" (gpt) */
    size_t off, len;
    int ndim;
    size_t shape[2];
};

/** The named tensors of the model spec describes, in flat order, with PyTorch's
 *  names and shapes (nn.Sequential for the MLP, Hugging Face's GPT2Model for the
 *  GPT). Returns the number written (at most max), 0 for a bad spec. */
size_t dsl_model_tensor_list(const struct dsl_model_spec *spec, struct dsl_model_tensor *t,
                             size_t max);

/** Set the number of compute threads of this process on the CPU: the pool
 *  (cpupool.h) that the CPU model cuts each sgemm over and the optimizer runs on;
 *  OpenBLAS itself is set to one thread. Call once, before the first step; returns the
 *  count in effect. */
int dsl_blas_set_threads(int n);

#endif
