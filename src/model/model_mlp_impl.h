/*
 * Inside the MLP: its flat layout, shared by the CPU model (model_mlp.c) and the CUDA
 * model (model_mlp_cuda.c) so that both have the same parameter offsets, the same
 * gradient segment list and the same initial values. Only model_mlp*.c include this.
 */
#ifndef DSL_MODEL_MLP_IMPL_H
#define DSL_MODEL_MLP_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "dslaunch/model/model.h"

struct dsl_mlp_layout {
    size_t nlayers;
    size_t dims[DSL_MODEL_MAX_LAYERS + 2]; /* dims[0] = in_dim, dims[nlayers] = out_dim */
    size_t woff[DSL_MODEL_MAX_LAYERS + 1]; /* flat offset of W_l; b_l follows */
    size_t maxdim;                         /* largest of dims[] */
};

/**
 * Check spec (type "mlp", sizes) and compute the layout; fill m's shape fields
 * (nparams, in_dim, out_dim, max_batch, flops_per_sample) and its segment list (owned
 * by m, freed by dsl_model_release()). m->ops and m->impl are left to the caller.
 * Returns 0, or DSL_ECONFIG with err naming the bad field (m untouched but zeroed).
 */
int dsl_mlp_layout_build(struct dsl_mlp_layout *lay, struct dsl_model *m,
                         const struct dsl_model_spec *spec, char *err);

/** One step of forward's parameter requests (model.h's need()): ask for
 *  params[off, off + len), then compute the output columns [r0, r0 + rows) of layer
 *  `layer` (rows 0: nothing to compute yet; the first layer's bias comes first). */
struct dsl_mlp_need {
    size_t off, len;
    size_t layer, r0, rows;
};

/**
 * Forward's need() calls in order, into plan, which must have room for m->nsegs +
 * lay->nlayers entries; returns how many it wrote. blocks 1 (a sink with need()): the
 * first layer segment by segment in backward order (its bias, then its weight's row
 * blocks in the order of m's segment list), every later layer whole; blocks 0: every
 * layer whole. This is the contract model_mlp.c keeps in its own loop (mlp_forward);
 * the CUDA model walks this plan, and test_train_model checks on the CPU that the two
 * agree call for call.
 */
size_t dsl_mlp_layout_need_plan(const struct dsl_mlp_layout *lay, const struct dsl_model *m,
                                int blocks, struct dsl_mlp_need *plan);

/** The initial parameters (PyTorch's nn.Linear init from seed) into host memory. */
void dsl_mlp_layout_init(const struct dsl_mlp_layout *lay, float *params, uint64_t seed);

/** The CPU MLP (model_mlp.c): dsl_model_create() for type "mlp". */
int dsl_mlp_create(struct dsl_model *m, const struct dsl_model_spec *spec, char *err);

#ifdef DSL_HAVE_CUDA
/** The CUDA MLP (model_mlp_cuda.c): dsl_model_create_cuda() for type "mlp". */
int dsl_mlp_create_cuda(struct dsl_model *m, const struct dsl_model_spec *spec, char *err);
#endif

/** The MLP's named tensors (dsl_model_tensor_list() for type "mlp"). */
size_t dsl_mlp_tensors(const struct dsl_model_spec *spec, struct dsl_model_tensor *t,
                       size_t max);

#endif
