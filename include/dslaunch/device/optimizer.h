/*
 * Optimizers of dstrain, run over one (offset, len) slice of flat buffers, so that
 * ZeRO's sharded step is the ordinary loop over the rank's slice.
 *
 * Adam follows torch.optim.Adam/AdamW and DeepSpeed's FusedAdam: with adam_w_mode the
 * weight decay is decoupled (p -= lr*wd*p before the Adam update); without it the
 * decay is added to the gradient (L2). Bias correction uses the step count t >= 1.
 * SGD with momentum follows torch.optim.SGD (dampening 0, not Nesterov).
 */
#ifndef DSLAUNCH_OPTIMIZER_H
#define DSLAUNCH_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>

enum dsl_optim_type {
    DSL_OPTIM_ADAM = 0, /* Adam / AdamW: see adam_w_mode */
    DSL_OPTIM_SGD = 1,
};

struct dsl_optim_hparams {
    enum dsl_optim_type type;
    float lr;
    float beta1, beta2, eps;
    float weight_decay;
    int adam_w_mode; /* 1: decoupled weight decay (AdamW) */
    float momentum;  /* SGD */
};

/** Number of state floats per parameter: 2 for Adam (m, v), 1 for SGD with momentum,
 *  0 for plain SGD. */
size_t dsl_optim_state_per_param(const struct dsl_optim_hparams *h);

/**
 * One step over len elements: p, g, and the state slices m (and v) of the same length
 * (v unused for SGD, both unused for plain SGD). The final gradient is g[i] * gscale,
 * rounded to float (gscale 1: g itself), which is what a separate pass scaling g in
 * place would give, without that pass over memory. t is the 1-based step number, lr the
 * learning rate of this step (from the scheduler).
 */
void dsl_optim_step(const struct dsl_optim_hparams *h, float lr, uint64_t t, float gscale,
                    float *p, const float *g, float *m, float *v, size_t len);

#endif
