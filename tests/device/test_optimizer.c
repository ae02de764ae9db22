/*
 * Unit tests of the optimizer update the devices run (optimizer.c): Adam against AdamW
 * and SGD with momentum on single values, and the vectorised loop against its scalar
 * definition, bit for bit.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/device/optimizer.h"
#include "test.h"
#include "dslaunch/common/banned.h"

static void fill(float *x, size_t n, unsigned seed)
{
    srand(seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
}

TEST(adamw_should_decay_weights_decoupled_and_adam_l2_otherwise)
{
    struct dsl_optim_hparams h = {DSL_OPTIM_ADAM, 0.1f, 0.9f, 0.999f, 1e-8f, 0.5f, 1, 0};
    float p = 2.0f, g = 0.0f, m = 0.0f, v = 0.0f;
    dsl_optim_step(&h, 0.1f, 1, 1.0f, &p, &g, &m, &v, 1);
    /* AdamW with zero gradient: only the decay p *= (1 - lr*wd) */
    ASSERT(fabsf(p - 2.0f * (1.0f - 0.05f)) < 1e-6f);
    h.adam_w_mode = 0;
    p = 2.0f, m = 0.0f, v = 0.0f;
    dsl_optim_step(&h, 0.1f, 1, 1.0f, &p, &g, &m, &v, 1);
    /* Adam (L2): the decay enters the gradient; the first step moves by ~lr */
    ASSERT(fabsf(p - 1.9f) < 1e-5f);
    struct dsl_optim_hparams s = {DSL_OPTIM_SGD, 0.1f, 0, 0, 0, 0.0f, 0, 0.9f};
    float q = 1.0f, gq = 1.0f, mq = 0.0f;
    dsl_optim_step(&s, 0.1f, 1, 1.0f, &q, &gq, &mq, NULL, 1);
    dsl_optim_step(&s, 0.1f, 2, 1.0f, &q, &gq, &mq, NULL, 1);
    ASSERT(fabsf(q - (1.0f - 0.1f - 0.19f)) < 1e-6f);
}

/* Adam's loop is built for several instruction sets (optimizer.c target_clones) and
 * runs the widest this CPU has; each element must still get exactly the operations of
 * the definition, written here one element at a time, so no ISA changes a bit */
TEST(adam_should_give_the_bits_of_its_scalar_definition_on_this_cpu)
{
    const size_t n = 4099;
    float *p = malloc(n * sizeof(float)), *m = calloc(n, sizeof(float)),
          *v = calloc(n, sizeof(float)), *g = malloc(n * sizeof(float)),
          *rp = malloc(n * sizeof(float)), *rm = calloc(n, sizeof(float)),
          *rv = calloc(n, sizeof(float));
    ASSERT(p && m && v && g && rp && rm && rv);
    fill(p, n, 3);
    memcpy(rp, p, n * sizeof(float));
    for (int w = 0; w < 2; w++) {
        struct dsl_optim_hparams h = {.type = DSL_OPTIM_ADAM, .beta1 = 0.9f, .beta2 = 0.999f,
                                      .eps = 1e-8f, .weight_decay = 0.01f, .adam_w_mode = w};
        for (uint64_t t = 1; t <= 3; t++) {
            fill(g, n, 10 + (unsigned)t);
            float lr = 1e-3f, gs = 0.125f;
            dsl_optim_step(&h, lr, t, gs, p, g, m, v, n);
            float bc1 = 1.0f - (float)pow((double)h.beta1, (double)t);
            float bc2 = 1.0f - (float)pow((double)h.beta2, (double)t);
            float step = lr / bc1, bc2s = sqrtf(bc2);
            for (size_t i = 0; i < n; i++) {
                float gi = g[i] * gs, pi = rp[i];
                if (w)
                    pi = pi - lr * h.weight_decay * pi;
                else
                    gi = gi + h.weight_decay * pi;
                float mi = h.beta1 * rm[i] + (1.0f - h.beta1) * gi;
                float vi = h.beta2 * rv[i] + (1.0f - h.beta2) * gi * gi;
                rm[i] = mi;
                rv[i] = vi;
                rp[i] = pi - step * mi / (sqrtf(vi) / bc2s + h.eps);
            }
        }
        ASSERT(memcmp(p, rp, n * sizeof(float)) == 0);
        ASSERT(memcmp(m, rm, n * sizeof(float)) == 0);
        ASSERT(memcmp(v, rv, n * sizeof(float)) == 0);
    }
    free(p), free(m), free(v), free(g), free(rp), free(rm), free(rv);
}

TEST_MAIN()
