/*
 * The GPU path of the trainer against its CPU reference, its oracle (label gpu):
 *   - every op of the CUDA device against the CPU device on random data: copy,
 *     set_zero, scale and add bit for bit, absmax_bits and sumsq_fixed bit for bit
 *     (they are integer results), Adam/AdamW/SGD within 1e-6 relative;
 *   - the CUDA MLP against the CPU MLP: the same segment list and initial parameters
 *     (bit for bit), the same need() calls in the same order, gradients within 1e-5 of the largest gradient magnitude, the same
 *     loss (1e-5 relative) and hits;
 *   - the CUDA MLP's gradient at loss scale 2^10 is exactly 2^10 times its gradient at
 *     scale 1 (fp16 loss scaling, model.h);
 *   - a few trainer steps at world 1 on the nccl backend for ZeRO stages 0, 1 and 2
 *     (with overlap, accumulation, clipping, SGD, fp16 loss scaling) against the CPU
 *     trainer: losses and final parameters within 1e-4 relative, the same skipped
 *     steps and scale; the optimizer state in and out of the GPU;
 *   - fp16 from a static 2^127: every step overflows and is skipped on the GPU too,
 *     in fp32 and in fp16 compute;
 *   - mixed precision (bf16 and fp16 compute with fp32 master weights) at world 1
 *     against the CPU's fp32 trainer within half-precision tolerances, the model-state
 *     bytes equal to the mixed-precision ZeRO formula, and the loss falling.
 * All of it with dstrain's GPU timers on (common/gpuprof.h), so the one host wait per
 * step holds with them. Every comparison prints its largest difference ("# ... max diff"). Exits 77 (skip)
 * without a CUDA device, non-zero on a mismatch.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/model/data.h"
#include "dslaunch/device/device.h"
#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/gpuprof.h"
#include "dslaunch/common/dtype.h"
#include "dslaunch/train/lossscale.h"
#include "dslaunch/model/model.h"
#include "dslaunch/train/train_config.h"
#include "dslaunch/train/trainer.h"
#include "gpu_test.h"
#include "model/full_sink.h"
#include "test.h"
#include "world_release.h"
#include "dslaunch/common/banned.h"


/* uniform in [-scale, scale), with zeros, negative zeros and denormals sprinkled in */
static void fill(float *x, size_t n, uint64_t seed, float scale)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        float u = (float)(dsl_test_rng(&s) >> 40) * (1.0f / 16777216.0f);
        x[i] = (2.0f * u - 1.0f) * scale;
        if (i % 97 == 5)
            x[i] = 0.0f;
        else if (i % 101 == 7)
            x[i] = -0.0f;
        else if (i % 103 == 9)
            x[i] = (i & 1 ? -1.0f : 1.0f) * 1e-40f;
    }
}

static float *gpu_from(const float *h, size_t n)
{
    float *d = gdev.ops->alloc(&gdev, n * sizeof(float));
    ASSERT(d != NULL);
    ASSERT_OK(gdev.ops->copy(&gdev, d, h, n * sizeof(float), DSL_COPY_H2D));
    return d;
}

static float *host_from(const float *d, size_t n)
{
    float *h = malloc(n ? n * sizeof(float) : 1);
    ASSERT_OK(gdev.ops->copy(&gdev, h, d, n * sizeof(float), DSL_COPY_D2H));
    return h;
}

static void expect_bits(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            DSL_FAIL_("%s: element %zu of %zu is %a on the GPU, %a on the CPU", what, i, n,
                      (double)got[i], (double)want[i]);
}

/* largest |a - b| / max(|b|, floor) */
static double rel_diff(const float *a, const float *b, size_t n, double floor)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double s = fabs((double)b[i]) > floor ? fabs((double)b[i]) : floor;
        if (!(d / s <= worst)) /* NaN counts as a failure */
            worst = isnan(d) ? INFINITY : d / s;
    }
    return worst;
}

static const size_t sizes[] = {0, 1, 255, 256, 257, 4099, 3000017};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

TEST(device_copy_zero_scale_and_add_should_match_the_cpu_bit_for_bit)
{
    struct dsl_device *c = dsl_device_cpu();
    static const float factors[] = {0.5f, 1.0f / 3.0f, -7.25f, 1e-30f};
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = sizes[k];
        float *a = malloc(n * sizeof(float) + 4), *b = malloc(n * sizeof(float) + 4);
        fill(a, n, 11 + n, 3.0f);
        fill(b, n, 12 + n, 0.01f);
        float *da = gpu_from(a, n), *db = gpu_from(b, n);
        float *dc = gdev.ops->alloc(&gdev, n * sizeof(float) + 4);
        ASSERT(dc != NULL);
        /* alloc is zeroed; D2D copy; set_zero */
        float *h = host_from(dc, n);
        for (size_t i = 0; i < n; i++)
            ASSERT(h[i] == 0.0f && !signbit(h[i]));
        free(h);
        ASSERT_OK(gdev.ops->copy(&gdev, dc, da, n * sizeof(float), DSL_COPY_D2D));
        h = host_from(dc, n);
        expect_bits(h, a, n, "copy");
        free(h);
        ASSERT_OK(gdev.ops->set_zero(&gdev, dc, n));
        h = host_from(dc, n);
        for (size_t i = 0; i < n; i++)
            ASSERT(h[i] == 0.0f && !signbit(h[i]));
        free(h);
        for (size_t f = 0; f < sizeof(factors) / sizeof(factors[0]); f++) {
            ASSERT_OK(c->ops->scale(c, a, n, factors[f]));
            ASSERT_OK(gdev.ops->scale(&gdev, da, n, factors[f]));
            h = host_from(da, n);
            expect_bits(h, a, n, "scale");
            free(h);
        }
        ASSERT_OK(c->ops->add(c, b, a, n));
        ASSERT_OK(gdev.ops->add(&gdev, db, da, n));
        h = host_from(db, n);
        expect_bits(h, b, n, "add");
        free(h);
        ASSERT_OK(gdev.ops->synchronize(&gdev));
        gdev.ops->free(&gdev, da);
        gdev.ops->free(&gdev, db);
        gdev.ops->free(&gdev, dc);
        free(a);
        free(b);
    }
    fprintf(stderr, "# copy/set_zero/scale/add: max diff 0 (bit-identical) for %zu sizes\n",
            NSIZES);
}

TEST(device_absmax_and_fixed_point_sum_of_squares_should_match_the_cpu_exactly)
{
    struct dsl_device *c = dsl_device_cpu();
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = sizes[k];
        float *a = malloc(n * sizeof(float) + 4);
        for (int special = 0; special < 3; special++) {
            fill(a, n, 21 + n + (size_t)special, 0.37f);
            if (n > 3 && special == 1)
                a[n / 2] = -INFINITY;
            if (n > 3 && special == 2)
                a[n / 3] = NAN;
            float *da = gpu_from(a, n);
            uint32_t mc = 1, mg = 2;
            ASSERT_OK(c->ops->absmax_bits(c, a, n, &mc));
            ASSERT_OK(gdev.ops->absmax_bits(&gdev, da, n, &mg));
            if (mc != mg)
                DSL_FAIL_("absmax_bits n %zu case %d: GPU %#x CPU %#x", n, special, mg, mc);
            if (special == 0 && n) {
                /* the global norm's k for this maximum, as trainer.c computes it */
                float mx;
                memcpy(&mx, &mc, sizeof(mx));
                double k2 = 68719476736.0 / ((double)mx * (double)mx);
                uint64_t sc = 1, sg = 2;
                ASSERT_OK(c->ops->sumsq_fixed(c, a, n, k2, &sc));
                ASSERT_OK(gdev.ops->sumsq_fixed(&gdev, da, n, k2, &sg));
                if (sc != sg)
                    DSL_FAIL_("sumsq_fixed n %zu: GPU %llu CPU %llu", n,
                              (unsigned long long)sg, (unsigned long long)sc);
            }
            gdev.ops->free(&gdev, da);
        }
        free(a);
    }
    fprintf(stderr, "# absmax_bits/sumsq_fixed: max diff 0 (exact) for %zu sizes\n", NSIZES);
}

TEST(device_optimizer_steps_should_match_optimizer_c_within_1e_6)
{
    struct dsl_device *c = dsl_device_cpu();
    static const struct dsl_optim_hparams hs[] = {
        {DSL_OPTIM_ADAM, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 0.0f}, /* AdamW */
        {DSL_OPTIM_ADAM, 1e-2f, 0.8f, 0.99f, 1e-6f, 0.1f, 0, 0.0f},   /* Adam + L2 */
        {DSL_OPTIM_SGD, 5e-2f, 0, 0, 0, 0.01f, 0, 0.9f},             /* momentum */
        {DSL_OPTIM_SGD, 5e-2f, 0, 0, 0, 0.0f, 0, 0.0f},              /* plain */
    };
    double worst = 0.0;
    size_t exact = 0, total = 0;
    for (size_t hi = 0; hi < sizeof(hs) / sizeof(hs[0]); hi++)
        for (size_t k = 0; k < NSIZES; k++) {
            size_t n = sizes[k];
            float *p = malloc(n * sizeof(float) + 4), *g = malloc(n * sizeof(float) + 4);
            float *m = calloc(n + 1, sizeof(float)), *v = calloc(n + 1, sizeof(float));
            fill(p, n, 31 + n, 0.5f);
            float *dp = gpu_from(p, n), *dg = NULL, *dm = gpu_from(m, n), *dv = gpu_from(v, n);
            for (uint64_t t = 1; t <= 3; t++) {
                float gs = t == 2 ? 1.0f / 384.0f : 1.0f; /* a folded averaging factor */
                fill(g, n, 41 + n + t, 0.1f);
                gdev.ops->free(&gdev, dg);
                dg = gpu_from(g, n);
                ASSERT_OK(c->ops->optim_step(c, &hs[hi], hs[hi].lr, t, gs, p, g, m, v, n));
                ASSERT_OK(gdev.ops->optim_step(&gdev, &hs[hi], hs[hi].lr, t, gs, dp, dg, dm, dv,
                                               n));
            }
            float *rp = host_from(dp, n), *rm = host_from(dm, n), *rv = host_from(dv, n);
            double d = rel_diff(rp, p, n, 1e-30);
            d = fmax(d, rel_diff(rm, m, n, 1e-30));
            d = fmax(d, rel_diff(rv, v, n, 1e-30));
            if (!(d <= 1e-6))
                DSL_FAIL_("optimizer %zu (type %d) n %zu: relative diff %g", hi,
                          (int)hs[hi].type, n, d);
            worst = fmax(worst, d);
            exact += memcmp(rp, p, n * sizeof(float)) == 0 &&
                     memcmp(rm, m, n * sizeof(float)) == 0 &&
                     memcmp(rv, v, n * sizeof(float)) == 0;
            total++;
            free(rp);
            free(rm);
            free(rv);
            gdev.ops->free(&gdev, dp);
            gdev.ops->free(&gdev, dg);
            gdev.ops->free(&gdev, dm);
            gdev.ops->free(&gdev, dv);
            free(p);
            free(g);
            free(m);
            free(v);
        }
    fprintf(stderr, "# optimizer: max relative diff %.3g (%zu of %zu cases bit-identical)\n",
            worst, exact, total);
}

/* ---- the MLP ----------------------------------------------------------------------- */

static void compare_mlp(const struct dsl_model_spec *sp, size_t n, uint64_t seed)
{
    char err[DSL_ERR_LEN];
    struct dsl_model a, b;
    struct dsl_model_spec gsp = *sp;
    gsp.stream = gdev.stream; /* the device's stream: ordered with its ops */
    ASSERT_OK(dsl_model_create(&a, sp, err));
    if (dsl_model_create_cuda(&b, &gsp, err) < 0)
        DSL_FAIL_("dsl_model_create_cuda: %s", err);
    ASSERT(b.on_device && !a.on_device);
    ASSERT_EQ(a.nparams, b.nparams);
    ASSERT_EQ(a.nsegs, b.nsegs);
    for (size_t i = 0; i < a.nsegs; i++)
        ASSERT(a.segs[i].off == b.segs[i].off && a.segs[i].len == b.segs[i].len &&
               a.segs[i].layer == b.segs[i].layer);
    size_t P = a.nparams;
    float *p = malloc(P * sizeof(float)), *dp = gdev.ops->alloc(&gdev, P * sizeof(float));
    ASSERT(dp != NULL);
    ASSERT_OK(a.ops->init_params(&a, p, seed));
    ASSERT_OK(b.ops->init_params(&b, dp, seed));
    float *hp = host_from(dp, P);
    expect_bits(hp, p, P, "initial parameters");
    free(hp);

    float *x = malloc(sp->max_batch * sp->in_dim * sizeof(float));
    int32_t *y = malloc(sp->max_batch * sizeof(int32_t));
    uint64_t s = seed;
    fill(x, sp->max_batch * sp->in_dim, seed + 1, 1.0f);
    for (size_t i = 0; i < sp->max_batch; i++)
        y[i] = (int32_t)(dsl_test_rng(&s) % sp->out_dim);

    float *g = calloc(P, sizeof(float)), *dg = gdev.ops->alloc(&gdev, P * sizeof(float));
    ASSERT(dg != NULL);
    struct need_rec sa = {.fs = {.grads = g, .m = &a, .last_off = P}},
                    sb = {.fs = {.grads = dg, .m = &b, .last_off = P}};
    struct dsl_grad_sink ka = {.dest = fs_dest, .done = fs_done, .need = nr_need, .ctx = &sa};
    struct dsl_grad_sink kb = {.dest = fs_dest, .done = fs_done, .need = nr_need, .ctx = &sb};
    struct dsl_model_stats sta, stb;
    ASSERT_OK(a.ops->forward_backward(&a, p, x, y, n, 1.0f, &ka, &sta));
    if (b.ops->forward_backward(&b, dp, x, y, n, 1.0f, &kb, &stb) < 0)
        DSL_FAIL_("GPU forward_backward: %s", b.err);
    ASSERT_EQ(sb.fs.ndone, b.nsegs);
    /* model.h's need() contract: the same calls in the same order (the first layer
     * block by block, test_train_model checks the CPU's order) */
    nr_expect_same(&sa, &sb);
    float *hg = host_from(dg, P);
    double gmax, diff = grad_maxdiff(g, hg, P, &gmax);
    double ldiff = fabs(stb.loss_sum - sta.loss_sum) / fmax(fabs(sta.loss_sum), 1e-30);
    fprintf(stderr,
            "# mlp %zu params, batch %zu: gradient max diff %.3g (largest gradient %.3g, "
            "ratio %.3g); loss %.9g vs %.9g (rel %.3g); hits %zu vs %zu\n",
            P, n, diff, gmax, diff / fmax(gmax, 1e-30), stb.loss_sum, sta.loss_sum, ldiff,
            stb.correct, sta.correct);
    ASSERT(diff <= 1e-5 * gmax);
    ASSERT(ldiff <= 1e-5);
    ASSERT_EQ(stb.correct, sta.correct);

    /* the fp16 loss scale: 2^10 x loss gives exactly 2^10 x the GPU's own gradient
     * (the same kernels and sgemm shapes, linear in dz), and the same loss */
    float *dg2 = gdev.ops->alloc(&gdev, P * sizeof(float));
    ASSERT(dg2 != NULL);
    struct need_rec sc = {.fs = {.grads = dg2, .m = &b, .last_off = P}};
    struct dsl_grad_sink kc = {.dest = fs_dest, .done = fs_done, .need = nr_need, .ctx = &sc};
    struct dsl_model_stats stc;
    if (b.ops->forward_backward(&b, dp, x, y, n, 1024.0f, &kc, &stc) < 0)
        DSL_FAIL_("GPU forward_backward with a loss scale: %s", b.err);
    float *hg2 = host_from(dg2, P);
    size_t nbad = 0;
    for (size_t i = 0; i < P; i++)
        nbad += hg2[i] != 1024.0f * hg[i];
    fprintf(stderr, "# mlp loss scale 1024: %zu of %zu gradient elements not exactly scaled\n",
            nbad, P);
    ASSERT_EQ(nbad, 0);
    ASSERT(stc.loss_sum == stb.loss_sum);
    free(hg2);
    gdev.ops->free(&gdev, dg2);

    /* evaluation over the full batch */
    ASSERT_OK(a.ops->evaluate(&a, p, x, y, sp->max_batch, &sta));
    if (b.ops->evaluate(&b, dp, x, y, sp->max_batch, &stb) < 0)
        DSL_FAIL_("GPU evaluate: %s", b.err);
    ldiff = fabs(stb.loss_sum - sta.loss_sum) / fmax(fabs(sta.loss_sum), 1e-30);
    fprintf(stderr, "# mlp evaluate: loss rel diff %.3g, hits %zu vs %zu\n", ldiff,
            stb.correct, sta.correct);
    ASSERT(ldiff <= 1e-5);
    ASSERT_EQ(stb.correct, sta.correct);
    /* a label out of range is refused as on the CPU */
    y[0] = (int32_t)sp->out_dim;
    ASSERT_EQ(b.ops->evaluate(&b, dp, x, y, 1, &stb), DSL_EDATA);

    free(hg);
    free(g);
    free(p);
    free(x);
    free(y);
    gdev.ops->free(&gdev, dp);
    gdev.ops->free(&gdev, dg);
    dsl_model_release(&a);
    dsl_model_release(&b);
}

TEST(cuda_mlp_should_match_the_cpu_mlp)
{
    struct dsl_model_spec small = {.type = "mlp", .in_dim = 13, .out_dim = 5, .nhidden = 2,
                                   .hidden = {17, 9}, .max_batch = 11, .seg_max = 40};
    compare_mlp(&small, 11, 3);
    compare_mlp(&small, 7, 4); /* a micro batch below max_batch */
    struct dsl_model_spec wide = {.type = "mlp", .in_dim = 784, .out_dim = 10, .nhidden = 2,
                                  .hidden = {256, 128}, .max_batch = 64, .seg_max = 50000};
    compare_mlp(&wide, 64, 5);
}

/* ---- the trainer at world 1 ------------------------------------------------------- */

struct variant {
    int stage, overlap, deterministic;
    size_t bucket, accum;
    float clip;
    int sgd;
    int ls_pow; /* > 0: fp16 loss scaling from 2^ls_pow, doubling every 2 clean steps */
    enum dsl_dtype dtype; /* GPU compute: fp32 (0), or fp16/bf16 with fp32 master weights */
};

struct run {
    float *params; /* host copy of the final parameters */
    float *state;  /* full optimizer state (nstate x P) */
    double loss[16];
    struct dsl_mem_report mem;
    size_t P, nstate;
    uint64_t skipped;
    double scale; /* the final loss scale */
    uint64_t syncs[16]; /* host synchronisations per step */
};

/* 1: the GPU comm sends every reduce-scatter and all-gather through its padded path of
 * uneven shards (DSLAUNCH_NCCL_PAD_ALWAYS; at world 1 no shard is uneven) */
static int pad_always;

/* A world-1 job on the GPU (nccl) or the CPU (tcp): comm, synthetic data, small MLP. */
struct world1 {
    struct dsl_comm *c;
    struct dsl_dataset tr, te;
    struct dsl_model m;
};

static void world1_open(struct world1 *w, int gpu, enum dsl_dtype dtype)
{
    char err[DSL_ERR_LEN];
    struct dsl_comm_opts co = {.backend = gpu ? "nccl" : "tcp", .deterministic = 1};
    unsetenv("WORLD_SIZE");
    unsetenv("RANK");
    if (gpu && pad_always)
        setenv(DSL_ENV_NCCL_PAD_ALWAYS, "1", 1);
    int rc = dsl_comm_open_env(&w->c, &co, err);
    unsetenv(DSL_ENV_NCCL_PAD_ALWAYS);
    if (rc < 0)
        DSL_FAIL_("comm: %s", err);
    ASSERT_STR_EQ(dsl_comm_backend(w->c), gpu ? "nccl" : "tcp");
    struct dsl_data_opts dopt = {.name = "synthetic", .synth_train = 256, .synth_test = 64,
                                 .synth_dim = 20, .synth_classes = 4, .seed = 5};
    ASSERT_OK(dsl_data_load(&w->tr, &w->te, &dopt, err));
    struct dsl_model_spec sp = {.type = "mlp", .in_dim = 20, .out_dim = 4, .nhidden = 2,
                                .hidden = {16, 12}, .max_batch = 64, .seg_max = 64,
                                .dtype = dtype, .stream = gpu ? gdev.stream : NULL};
    if ((gpu ? dsl_model_create_cuda(&w->m, &sp, err) : dsl_model_create(&w->m, &sp, err)) < 0)
        DSL_FAIL_("model: %s", err);
}

static void world1_close(struct world1 *w)
{
    world_release(&w->m, &w->tr, &w->te, w->c);
}

static void train(int gpu, const struct variant *v, size_t steps, struct run *out)
{
    char err[DSL_ERR_LEN];
    struct world1 w;
    world1_open(&w, gpu, gpu ? v->dtype : DSL_FLOAT32);
    struct dsl_trainer t;
    struct dsl_trainer_opts o = {
        .dtype = gpu ? v->dtype : DSL_FLOAT32,
        .micro_batch = 8, .grad_accum = v->accum, .zero_stage = v->stage,
        .bucket_elems = v->bucket, .overlap_comm = v->overlap,
        .deterministic = v->deterministic, .grad_clip = v->clip, .predivide = 1.0f,
        .seed = 11, .dev = gpu ? &gdev : NULL,
        .optim = {DSL_OPTIM_ADAM, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 0}};
    if (v->sgd)
        o.optim = (struct dsl_optim_hparams){DSL_OPTIM_SGD, 5e-2f, 0, 0, 0, 0.01f, 0, 0.9f};
    if (v->ls_pow > 0) {
        o.loss_scaling = 1;
        dsl_lossscale_init_dynamic(&o.scaler, ldexp(1.0, v->ls_pow), 2, 1.0, 2, 0);
    }
    if (dsl_trainer_init(&t, &o, w.c, &w.m, err) < 0)
        DSL_FAIL_("trainer: %s", err);
    struct dsl_sampler s;
    ASSERT_OK(dsl_sampler_init(&s, w.tr.n, t.G, 3, 1, 0, err));
    for (size_t k = 0; k < steps; k++) {
        struct dsl_step_result res;
        if (dsl_trainer_step(&t, &w.tr, dsl_sampler_step(&s, k / s.steps_per_epoch,
                                                       k % s.steps_per_epoch),
                             0, &res, err) < 0)
            DSL_FAIL_("step %zu: %s", k, err);
        out->loss[k] = res.loss;
        out->syncs[k] = res.host_syncs;
    }
    double acc, tloss;
    ASSERT_OK(dsl_trainer_evaluate(&t, &w.te, &acc, &tloss, err));
    out->skipped = t.ls.skipped;
    dsl_trainer_memory(&t, &out->mem);
    out->scale = t.ls.cur_scale;
    out->P = t.P;
    out->nstate = dsl_optim_state_per_param(&o.optim);
    out->params = malloc(t.P * sizeof(float));
    out->state = malloc((out->nstate ? out->nstate : 1) * t.P * sizeof(float));
    ASSERT_OK(dsl_trainer_params_to_host(&t, out->params, err));
    ASSERT_OK(dsl_trainer_gather_state(&t, out->state, out->nstate, err));
    if (gpu) {
        /* state and parameters through the host and back are unchanged */
        float *again = malloc((out->nstate ? out->nstate : 1) * t.P * sizeof(float));
        float *p2 = malloc(t.P * sizeof(float));
        ASSERT_OK(dsl_trainer_scatter_state(&t, out->state, out->nstate, err));
        ASSERT_OK(dsl_trainer_params_from_host(&t, out->params, err));
        ASSERT_OK(dsl_trainer_gather_state(&t, again, out->nstate, err));
        ASSERT_OK(dsl_trainer_params_to_host(&t, p2, err));
        ASSERT(memcmp(again, out->state, out->nstate * t.P * sizeof(float)) == 0);
        ASSERT(memcmp(p2, out->params, t.P * sizeof(float)) == 0);
        free(again);
        free(p2);
    }
    dsl_sampler_release(&s);
    dsl_trainer_release(&t);
    world1_close(&w);
}

TEST(gpu_trainer_should_match_the_cpu_trainer_at_world_one_for_every_stage)
{
    static const struct variant vs[] = {
        {0, 0, 1, 0, 1, 0.0f, 0, 0, DSL_FLOAT32},    {0, 1, 1, 100, 4, 0.0f, 0, 0, DSL_FLOAT32},
        {1, 0, 0, 0, 2, 0.0f, 0, 0, DSL_FLOAT32},    {1, 1, 1, 100, 3, 0.05f, 0, 0, DSL_FLOAT32},
        {2, 0, 1, 100, 1, 0.0f, 0, 0, DSL_FLOAT32},  {2, 1, 1, 30, 4, 0.05f, 0, 0, DSL_FLOAT32},
        {2, 1, 0, 1000, 2, 0.0f, 1, 0, DSL_FLOAT32}, {2, 1, 1, 100, 2, 0.05f, 0, 8, DSL_FLOAT32},
        {0, 0, 1, 0, 1, 0.0f, 0, 12, DSL_FLOAT32},
    };
    const size_t steps = 6;
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
        struct run rc = {0}, rg = {0};
        train(0, &vs[i], steps, &rc);
        train(1, &vs[i], steps, &rg);
        ASSERT_EQ(rc.P, rg.P);
        /* fp16 loss scaling with scales that do not overflow: the same (none) skipped
         * and the same scale on both */
        ASSERT_EQ(rg.skipped, rc.skipped);
        ASSERT(rg.scale == rc.scale);
        double pmax = 0.0, pd = 0.0, ld = 0.0;
        for (size_t k = 0; k < rc.P; k++) {
            pmax = fmax(pmax, fabs((double)rc.params[k]));
            double d = fabs((double)rg.params[k] - (double)rc.params[k]);
            pd = isnan(d) ? INFINITY : fmax(pd, d);
        }
        for (size_t k = 0; k < steps; k++) {
            double d = fabs(rg.loss[k] - rc.loss[k]) / fabs(rc.loss[k]);
            ld = isnan(d) ? INFINITY : fmax(ld, d);
        }
        fprintf(stderr,
                "# stage %d overlap %d accum %zu clip %g %s: params max diff %.3g (%.3g of "
                "the largest), loss max rel diff %.3g\n",
                vs[i].stage, vs[i].overlap, vs[i].accum, (double)vs[i].clip,
                vs[i].sgd ? "SGD" : "AdamW", pd, pd / pmax, ld);
        if (!(pd <= 1e-4 * pmax) || !(ld <= 1e-4))
            DSL_FAIL_("variant %zu: the GPU trainer differs from the CPU trainer", i);
        free(rc.params);
        free(rc.state);
        free(rg.params);
        free(rg.state);
    }
}

/* The padded path of shards that do not divide (nccl's scratch buffer, reserved at
 * setup) gives the results of the direct path: stages 1 and 2, fp32 and bf16, against
 * the CPU trainer as above. */
TEST(gpu_trainer_padded_shards_should_match_the_cpu_trainer)
{
    static const struct variant vs[] = {
        {1, 0, 0, 0, 2, 0.05f, 0, 0, DSL_FLOAT32},  {1, 1, 1, 100, 1, 0.0f, 0, 0, DSL_FLOAT32},
        {2, 0, 1, 30, 1, 0.05f, 0, 0, DSL_FLOAT32}, {2, 1, 1, 100, 2, 0.0f, 0, 8, DSL_FLOAT32},
    };
    const size_t steps = 5;
    pad_always = 1;
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
        struct run rc = {0}, rg = {0};
        train(0, &vs[i], steps, &rc);
        train(1, &vs[i], steps, &rg);
        double pmax = 0.0, pd = 0.0;
        for (size_t k = 0; k < rc.P; k++) {
            pmax = fmax(pmax, fabs((double)rc.params[k]));
            double d = fabs((double)rg.params[k] - (double)rc.params[k]);
            pd = isnan(d) ? INFINITY : fmax(pd, d);
        }
        fprintf(stderr, "# padded: stage %d overlap %d: params max diff %.3g of the largest\n",
                vs[i].stage, vs[i].overlap, pd / pmax);
        if (!(pd <= 1e-4 * pmax))
            DSL_FAIL_("variant %zu: the padded GPU path differs from the CPU trainer", i);
        free(rc.params);
        free(rc.state);
        free(rg.params);
        free(rg.state);
    }
    pad_always = 0;
}

/* The goal of the GPU step: the host waits for the GPU once per optimizer step (the
 * loss, overflow flag and norm read together), whatever the stage, overlap, clipping,
 * loss scaling or 16-bit compute. Up to two micro steps: with more, an upload may wait
 * for its staging buffer when the GPU is more than a micro step behind the host. */
TEST(gpu_trainer_should_wait_on_the_host_once_per_step)
{
    static const struct variant vs[] = {
        {0, 0, 0, 0, 1, 0.0f, 0, 0, DSL_FLOAT32},     {0, 1, 0, 100, 2, 0.05f, 0, 0, DSL_FLOAT32},
        {1, 0, 0, 0, 2, 0.05f, 0, 12, DSL_FLOAT32},   {1, 1, 0, 100, 1, 0.0f, 0, 0, DSL_BFLOAT16},
        {2, 0, 0, 100, 1, 0.05f, 0, 0, DSL_FLOAT32},  {2, 1, 0, 30, 2, 0.05f, 0, 8, DSL_FLOAT16},
        {2, 1, 0, 1000, 2, 0.0f, 1, 0, DSL_BFLOAT16},
    };
    const size_t steps = 4;
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
        struct run rg = {0};
        train(1, &vs[i], steps, &rg);
        for (size_t k = 0; k < steps; k++) {
            if (rg.syncs[k] != 1)
                DSL_FAIL_("variant %zu step %zu: %llu host synchronisations, expected 1", i, k,
                          (unsigned long long)rg.syncs[k]);
        }
        fprintf(stderr, "# stage %d overlap %d accum %zu: 1 host synchronisation per step\n",
                vs[i].stage, vs[i].overlap, vs[i].accum);
        free(rg.params);
        free(rg.state);
    }
}

static void skip_at_2_127(enum dsl_dtype dtype)
{
    char err[DSL_ERR_LEN];
    struct world1 w;
    world1_open(&w, 1, dtype);
    struct dsl_trainer t;
    struct dsl_trainer_opts o = {
        .dtype = dtype,
        .micro_batch = 32, .grad_accum = 1, .zero_stage = 2, .bucket_elems = 100,
        .overlap_comm = 1, .predivide = 1.0f, .seed = 11, .dev = &gdev, .loss_scaling = 1,
        .optim = {DSL_OPTIM_ADAM, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 0}};
    struct dsl_fp16_config fc = {.enabled = 1, .loss_scale = ldexp(1.0, 127)};
    dsl_lossscale_init(&o.scaler, &fc);
    if (dsl_trainer_init(&t, &o, w.c, &w.m, err) < 0)
        DSL_FAIL_("trainer: %s", err);
    float *p0 = malloc(t.P * sizeof(float)), *p1 = malloc(t.P * sizeof(float));
    ASSERT_OK(dsl_trainer_params_to_host(&t, p0, err));
    struct dsl_sampler s;
    ASSERT_OK(dsl_sampler_init(&s, w.tr.n, t.G, 3, 1, 0, err));
    for (size_t k = 0; k < 3; k++) {
        struct dsl_step_result res;
        if (dsl_trainer_step(&t, &w.tr, dsl_sampler_step(&s, 0, k), 0, &res, err) < 0)
            DSL_FAIL_("step %zu: %s", k, err);
        ASSERT(res.skipped && res.loss_scale == ldexp(1.0, 127));
    }
    ASSERT_OK(dsl_trainer_params_to_host(&t, p1, err));
    ASSERT(memcmp(p0, p1, t.P * sizeof(float)) == 0);
    ASSERT_EQ(t.ls.skipped, 3);
    fprintf(stderr, "# static 2^127 on the GPU (%s): 3 of 3 steps skipped, parameters "
            "unchanged\n", dtype == DSL_FLOAT16 ? "fp16 compute" : "fp32");
    free(p0);
    free(p1);
    dsl_sampler_release(&s);
    dsl_trainer_release(&t);
    world1_close(&w);
}

TEST(gpu_trainer_should_skip_every_step_at_a_static_loss_scale_of_2_127)
{
    skip_at_2_127(DSL_FLOAT32);
    /* fp16 compute: dz x 2^127 is inf in 16 bits already; the overflow check reads the
     * 16-bit gradient */
    skip_at_2_127(DSL_FLOAT16);
}

/*
 * Mixed precision against the CPU's fp32 trainer. The GPU computes forward and backward
 * with 16-bit parameters, activations and gradients (fp32 accumulation inside the
 * GEMMs and kernels), so every gradient element carries a relative error of a few
 * units of the 16-bit rounding: u = 2^-9 for bf16 (8 significand bits), 2^-12 for fp16
 * (11 bits), compounded over the three layers. The fp32 master weights and the Adam
 * update see that error through m / sqrt(v), which is scale-free: an element whose
 * gradient is large moves by about lr per step on both sides, one whose gradient is
 * near zero can move in a different direction. Hence two bounds, both far below what a
 * broken path gives (a wrong factor, a missing unscale or a dropped bucket moves
 * parameters by many lr and the loss by tens of percent):
 *   - every parameter within 2 x lr x K of the CPU's (the most two Adam trajectories
 *     can drift apart in K steps when bias-corrected |m / sqrt(v)| stays near 1), and
 *     the root-mean-square difference within lr x K / 4 (most elements agree closely);
 *   - the loss of every step within 8 u relative (a mean of per-sample losses from
 *     16-bit logits, each off by a few u after three layers, and from parameters that
 *     drifted as above): 1.6% for bf16, 0.2% for fp16.
 * The fp16 variants start the dynamic loss scale low enough that no step overflows in
 * 16 bits, so both runs apply the same steps (skipping is checked above, at 2^127).
 */
TEST(gpu_mixed_precision_should_track_the_cpu_fp32_trainer_and_match_the_formula)
{
    static const struct variant vs[] = {
        {2, 1, 0, 100, 2, 0.0f, 0, 0, DSL_BFLOAT16},  /* the shipped config's shape */
        {0, 0, 0, 0, 1, 0.05f, 0, 0, DSL_BFLOAT16},   /* clipping on the raw 16-bit norm */
        {1, 1, 0, 100, 3, 0.0f, 0, 0, DSL_BFLOAT16},  /* deferred accumulation in fp32 */
        {2, 0, 0, 30, 1, 0.05f, 0, 8, DSL_FLOAT16},   /* dynamic loss scale 2^8.. */
        {1, 0, 0, 100, 2, 0.0f, 0, 4, DSL_FLOAT16},
        {0, 1, 0, 100, 2, 0.0f, 1, 6, DSL_FLOAT16},   /* SGD with momentum */
    };
    const size_t steps = 12;
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
        const struct variant *v = &vs[i];
        struct run rc = {0}, rg = {0};
        train(0, v, steps, &rc);
        train(1, v, steps, &rg);
        ASSERT_EQ(rc.P, rg.P);
        double u = v->dtype == DSL_BFLOAT16 ? ldexp(1.0, -9) : ldexp(1.0, -12);
        double lr = v->sgd ? 5e-2 : 1e-2;
        double pd = 0.0, ss = 0.0, ld = 0.0;
        for (size_t k = 0; k < rc.P; k++) {
            double d = fabs((double)rg.params[k] - (double)rc.params[k]);
            pd = isnan(d) ? INFINITY : fmax(pd, d);
            ss += d * d;
        }
        double rms = sqrt(ss / (double)rc.P);
        for (size_t k = 0; k < steps; k++) {
            double d = fabs(rg.loss[k] - rc.loss[k]) / fabs(rc.loss[k]);
            ld = isnan(d) ? INFINITY : fmax(ld, d);
        }
        /* the model state: 16-bit params and gradients, fp32 master + optimizer state;
         * at world 1 there is no padding, so the formula holds to the byte */
        double f = dsl_zero_state_formula(v->stage, rg.P, 1, rg.nstate, 2);
        uint64_t core = rg.mem.total - rg.mem.buckets - rg.mem.accum;
        double first = (rg.loss[0] + rg.loss[1]) / 2, last = (rg.loss[steps - 2] +
                                                              rg.loss[steps - 1]) / 2;
        fprintf(stderr,
                "# %s stage %d overlap %d accum %zu clip %g %s: params max diff %.3g (bound "
                "%.3g), rms %.3g (bound %.3g); loss max rel diff %.3g (bound %.3g); loss "
                "%.4f -> %.4f; skipped %llu vs %llu; model state %llu bytes, formula %.0f "
                "(+ buckets %llu, accumulation %llu)\n",
                v->dtype == DSL_BFLOAT16 ? "bf16" : "fp16", v->stage, v->overlap, v->accum,
                (double)v->clip, v->sgd ? "SGD" : "AdamW", pd, 2 * lr * (double)steps, rms,
                lr * (double)steps / 4, ld, 8 * u, first, last,
                (unsigned long long)rg.skipped, (unsigned long long)rc.skipped,
                (unsigned long long)core, f, (unsigned long long)rg.mem.buckets,
                (unsigned long long)rg.mem.accum);
        if ((double)core != f)
            DSL_FAIL_("variant %zu: model state %llu bytes, formula %.0f", i,
                      (unsigned long long)core, f);
        ASSERT_EQ(rg.mem.params, 2 * rg.P);
        ASSERT_EQ(rg.skipped, 0);
        ASSERT_EQ(rc.skipped, 0);
        if (!(pd <= 2 * lr * (double)steps) || !(rms <= lr * (double)steps / 4) ||
            !(ld <= 8 * u))
            DSL_FAIL_("variant %zu: mixed precision differs from the fp32 trainer by more "
                      "than half precision explains", i);
        if (!(last < first))
            DSL_FAIL_("variant %zu: the loss did not fall (%g -> %g)", i, first, last);
        free(rc.params);
        free(rc.state);
        free(rg.params);
        free(rg.state);
    }
}

int main(int argc, char **argv)
{
    char err[DSL_ERR_LEN] = "";
    int r = gpu_test_open();
    if (r)
        return r;
    /* the GPU timers on, as in dstrain: every comparison and the one host wait per step
     * hold with them (they record events and never wait) */
    if (dsl_gpuprof_enable(gdev.stream, err) < 0) {
        fprintf(stderr, "gpu timers: %s\n", err);
        return 1;
    }
    r = RUN_TESTS(argc, argv);
    dsl_gpuprof_disable();
    return gpu_test_close(r);
}
