/*
 * Inside the GPT: its flat layout (model_gpt_layout.c), shared by the CPU model
 * (model_gpt.c) and the CUDA model (model_gpt_cuda.c), so that both have the same parameter
 * offsets, gradient segment list and initial values. Only src/model includes this.
 */
#ifndef DSL_MODEL_GPT_IMPL_H
#define DSL_MODEL_GPT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "dslaunch/model/model.h"

/* the 12 tensors of one block, in flat order (Hugging Face's GPT2Model names) */
enum {
    GPT_LN1_W, GPT_LN1_B, GPT_QKV_W, GPT_QKV_B, GPT_PROJ_W, GPT_PROJ_B,
    GPT_LN2_W, GPT_LN2_B, GPT_FC_W, GPT_FC_B, GPT_FCPROJ_W, GPT_FCPROJ_B,
    GPT_PER_BLOCK
};

/* tensor t as a rows x cols matrix at flat offset off (a vector is 1 x n) */
struct dsl_gpt_tensor {
    size_t off, rows, cols;
    size_t seg0, nseg; /* its gradient segments: m->segs[seg0 .. seg0 + nseg) */
};

struct dsl_gpt_layout {
    size_t L, C, NH, T, V; /* blocks, width, heads, context, vocabulary */
    size_t ntensors;       /* 4 + 12 L: wte, wpe, the blocks', ln_f.weight, ln_f.bias */
    struct dsl_gpt_tensor t[DSL_MODEL_MAX_TENSORS];
    /* the segments' layers (ZeRO stage 3's unit): 0 the embeddings (wte, wpe), 1 + b
     * block b, L + 1 ln_f; layer l is the flat range [lo[l], lo[l + 1]) */
    size_t lo[DSL_GPT_MAX_LAYERS + 3];
};

/* the layer of block b, and that of ln_f */
#define GPT_LAYER_BLOCK(b) ((b) + 1)
#define GPT_LAYER_LNF(L) ((L) + 1)

/* tensor indices */
#define GPT_WTE 0
#define GPT_WPE 1
#define GPT_BLOCK(l, k) (2 + (l)*GPT_PER_BLOCK + (k))
#define GPT_LNF_W(L) (2 + (L)*GPT_PER_BLOCK)
#define GPT_LNF_B(L) (3 + (L)*GPT_PER_BLOCK)

/**
 * Check spec (type "gpt", shape) and compute the layout; fill m's shape fields and its
 * segment list (owned by m). Returns 0, or DSL_ECONFIG with err naming the bad field
 * (m zeroed).
 */
int dsl_gpt_layout_build(struct dsl_gpt_layout *lay, struct dsl_model *m,
                         const struct dsl_model_spec *spec, char *err);

/** GPT-2's initial parameters from seed into host memory (fp32). */
void dsl_gpt_layout_init(const struct dsl_gpt_layout *lay, float *params, uint64_t seed);

/** The CPU GPT (model_gpt.c): dsl_model_create() for type "gpt". */
int dsl_gpt_create(struct dsl_model *m, const struct dsl_model_spec *spec, char *err);

#ifdef DSL_HAVE_CUDA
/** The CUDA GPT (model_gpt_cuda.c): dsl_model_create_cuda() for type "gpt". */
int dsl_gpt_create_cuda(struct dsl_model *m, const struct dsl_model_spec *spec, char *err);
#endif

/** The GPT's named tensors (dsl_model_tensor_list() for type "gpt"). */
size_t dsl_gpt_tensors(const struct dsl_model_spec *spec, struct dsl_model_tensor *t,
                       size_t max);

/** dsl_model_next_logits() for the CPU GPT. */
int dsl_gpt_next_logits(struct dsl_model *m, const float *params, const int32_t *tokens,
                        size_t n, float *logits);

/** The tanh of the GELU (model_gpt.c): a rational approximation within a few ulp of
 *  tanhf, which GPU kernels tested against the CPU path must share. */
float dsl_gpt_tanh(float x);

#endif
