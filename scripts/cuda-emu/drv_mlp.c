/*
 * The CUDA MLP (model_mlp_cuda.c) on the emulated device (run.sh, filter "cuda_mlp")
 * against the CPU MLP, in fp32: forward's need() calls (model.h) the same, call for
 * call, with a sink that has need() and none without; the segments handed over in the
 * segment list's order; gradients within 1e-5 of the largest, the loss within 1e-5
 * relative and the same hits, for forward_backward and evaluate. Device memory is host
 * memory here, so the buffers are plain malloc'd ones. test_gpu_trainer checks the
 * same on a GPU (through the CUDA device); this is the check before a GPU session.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/model/model.h"
#include "model/full_sink.h"
#include "test.h"

static void compare(const struct dsl_model_spec *sp, size_t n, int with_need)
{
    char err[DSL_ERR_LEN];
    struct dsl_model a, b;
    ASSERT_OK(dsl_model_create(&a, sp, err));
    if (dsl_model_create_cuda(&b, sp, err) < 0)
        DSL_FAIL_("dsl_model_create_cuda: %s", err);
    size_t P = a.nparams, X = sp->max_batch * sp->in_dim;
    float *p = malloc(P * sizeof(float)), *dp = malloc(P * sizeof(float));
    float *ga = calloc(P, sizeof(float)), *gb = calloc(P, sizeof(float));
    float *x = malloc(X * sizeof(float));
    int32_t *y = malloc(sp->max_batch * sizeof(int32_t));
    ASSERT_OK(a.ops->init_params(&a, p, 3));
    ASSERT_OK(b.ops->init_params(&b, dp, 3));
    ASSERT(memcmp(p, dp, P * sizeof(float)) == 0);
    for (size_t i = 0; i < X; i++)
        x[i] = (float)(i * 7919 % 1000) / 500.0f - 1.0f;
    for (size_t i = 0; i < sp->max_batch; i++)
        y[i] = (int32_t)(i * 3 % sp->out_dim);

    struct need_rec ra = {.fs = {.grads = ga, .m = &a, .last_off = P}},
                    rb = {.fs = {.grads = gb, .m = &b, .last_off = P}};
    struct dsl_grad_sink ka = {.dest = fs_dest, .done = fs_done,
                               .need = with_need ? nr_need : NULL, .ctx = &ra};
    struct dsl_grad_sink kb = {.dest = fs_dest, .done = fs_done,
                               .need = with_need ? nr_need : NULL, .ctx = &rb};
    struct dsl_model_stats sa, sb;
    ASSERT_OK(a.ops->forward_backward(&a, p, x, y, n, 1.0f, &ka, &sa));
    if (b.ops->forward_backward(&b, dp, x, y, n, 1.0f, &kb, &sb) < 0)
        DSL_FAIL_("emulated forward_backward: %s", b.err);
    ASSERT_EQ(rb.fs.ndone, b.nsegs);
    nr_expect_same(&ra, &rb);
    double gmax, diff = grad_maxdiff(ga, gb, P, &gmax);
    double ldiff = fabs(sa.loss_sum - sb.loss_sum) / fmax(fabs(sa.loss_sum), 1e-30);
    fprintf(stderr, "# mlp %zu-..-%zu seg_max %zu batch %zu need %s: %zu need() calls, "
            "gradient max diff %.3g of %.3g, loss rel %.3g, hits %zu vs %zu\n", sp->in_dim,
            sp->out_dim, sp->seg_max, n, with_need ? "yes" : "no", rb.nneed, diff, gmax, ldiff,
            sb.correct, sa.correct);
    ASSERT(diff <= 1e-5 * gmax);
    ASSERT(ldiff <= 1e-5);
    ASSERT_EQ(sb.correct, sa.correct);
    ASSERT_OK(a.ops->evaluate(&a, p, x, y, sp->max_batch, &sa));
    if (b.ops->evaluate(&b, dp, x, y, sp->max_batch, &sb) < 0)
        DSL_FAIL_("emulated evaluate: %s", b.err);
    ASSERT(fabs(sa.loss_sum - sb.loss_sum) <= 1e-5 * fabs(sa.loss_sum));
    ASSERT_EQ(sb.correct, sa.correct);
    free(p);
    free(dp);
    free(ga);
    free(gb);
    free(x);
    free(y);
    dsl_model_release(&a);
    dsl_model_release(&b);
}

TEST(cuda_mlp_should_ask_need_as_the_cpu_mlp_does_and_match_it)
{
    static const struct dsl_model_spec specs[] = {
        /* test_gpu_trainer's: 9 need() calls on the CPU, 3 on the GPU before the fix */
        {.type = "mlp", .in_dim = 13, .out_dim = 5, .nhidden = 2, .hidden = {17, 9},
         .max_batch = 11, .seg_max = 40},
        {.type = "mlp", .in_dim = 50, .out_dim = 10, .nhidden = 2, .hidden = {37, 20},
         .max_batch = 16, .seg_max = 400},
        {.type = "mlp", .in_dim = 9, .out_dim = 3, .nhidden = 0, .max_batch = 4,
         .seg_max = 5}, /* a block per row */
        {.type = "mlp", .in_dim = 7, .out_dim = 4, .nhidden = 1, .hidden = {6},
         .max_batch = 5, .seg_max = 0}, /* whole tensors */
    };
    for (int w = 0; w < 2; w++)
        for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
            compare(&specs[i], specs[i].max_batch, w);
            compare(&specs[i], specs[i].max_batch - 2, w); /* below max_batch */
        }
}

int main(int argc, char **argv)
{
    return RUN_TESTS(argc, argv);
}
