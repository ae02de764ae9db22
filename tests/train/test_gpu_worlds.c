/*
 * The GPU trainer's multi-rank logic on one GPU (label gpu): NCCL refuses two ranks on
 * one device, so this test forks world 2 and 4 ranks that all train on CUDA device 0
 * through the cuda-tcp backend (comm_cudahost.c: device buffers staged through host
 * memory into the tcp collectives), and each rank then trains the same job on the CPU
 * through tcp at the same world size: the CPU oracle. Per variant every rank compares
 * the final parameters (gathered) and the per-step losses within the tolerances of
 * tests/train/test_gpu_trainer.c (fp32: 1e-4 of the largest parameter and 1e-4
 * relative loss; bf16 against the CPU's fp32: the half-precision bounds there), and the
 * verdict is the exit status. What it covers: gradient buckets (several per segment,
 * one per model), ZeRO stages 0, 1 and 2, shards that world does not divide (the
 * trainer's padding, and the comm's padded form with DSLAUNCH_NCCL_PAD_ALWAYS=1),
 * overlap_comm, accumulation, clipping and fp16 loss scaling; ZeRO stage 3 (the CUDA MLP
 * taking its layers from the trainer's layer(), persistence thresholds 0, 100 and the
 * default, prefetch on and off, fp32 and bf16) also against the CPU at stage 0, and after
 * a reload of its parameters its evaluation, its gathered-layer memory and the state it
 * reads back; and, in one variant, that the
 * GPU timers (common/gpuprof.h) change no result and read every step, with launches in
 * the classes the MLP and the trainer mark.
 *
 * The parent never touches CUDA (a CUDA context does not survive fork): a probe child
 * asks for the device count, and the test exits 77 (skip) without a device.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/gpuprof.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/model/data.h"
#include "dslaunch/device/device.h"
#include "dslaunch/model/model.h"
#include "dslaunch/train/lossscale.h"
#include "dslaunch/train/trainer.h"
#include "test.h"
#include "dslaunch/common/banned.h"

struct variant {
    int stage, overlap;
    size_t bucket, accum;
    float clip;
    int ls_pow; /* > 0: fp16 loss scaling from 2^ls_pow */
    int pad_always;
    enum dsl_dtype dtype;
    int timers; /* the GPU timers on (common/gpuprof.h): their totals are checked */
    size_t persist; /* stage 3: stage3_param_persistence_threshold */
    int noprefetch; /* stage 3: one window, no prefetch */
    int gpt;        /* the tiny GPT on a text instead of the MLP (stage 3) */
};

#define STEPS 6

struct run {
    float *params;
    double loss[STEPS];
    size_t P;
    uint64_t skipped;
    double eval_acc, eval_loss; /* stage 3: the test set after a reload */
    uint64_t gathered;          /* stage 3: the memory report's gathered layers */
    uint64_t state, S;          /* its params + grads + optimizer bytes; shard elements */
};

/* Stage 3 after training: the parameters loaded back from the host (the shards and the
 * gathered layers replaced), evaluated with the layers gathered again, and both the
 * parameters and the optimizer state read back the same bits */
static int reload_and_evaluate(struct dsl_trainer *t, const struct dsl_dataset *te,
                               struct run *out, char *err)
{
    size_t n2 = 2 * t->P;
    float *p2 = malloc(t->P * sizeof(float)), *st = malloc(n2 * sizeof(float)),
          *st2 = malloc(n2 * sizeof(float));
    int r = 0;
    if (!p2 || !st || !st2)
        r = dsl_seterr(err, -ENOMEM, "out of memory");
    if (r >= 0 && (r = dsl_trainer_params_from_host(t, out->params, err)) >= 0 &&
        (r = dsl_trainer_evaluate_n(t, te, 64, &out->eval_acc, &out->eval_loss, err)) >= 0 &&
        (r = dsl_trainer_params_to_host(t, p2, err)) >= 0 &&
        memcmp(p2, out->params, t->P * sizeof(float)) != 0)
        r = dsl_seterr(err, -EINVAL, "stage 3: the parameters read back differ from those "
                       "loaded");
    if (r >= 0 && (r = dsl_trainer_gather_state(t, st, 2, err)) >= 0 &&
        (r = dsl_trainer_scatter_state(t, st, 2, err)) >= 0 &&
        (r = dsl_trainer_gather_state(t, st2, 2, err)) >= 0 &&
        memcmp(st, st2, n2 * sizeof(float)) != 0)
        r = dsl_seterr(err, -EINVAL, "stage 3: the optimizer state read back differs from "
                       "that scattered");
    free(p2);
    free(st);
    free(st2);
    return r;
}

static struct dsl_device gdev;

static int free_port(void)
{
    int fd = dsl_net_listen("127.0.0.1", 0, 1, NULL);
    int port = dsl_net_local_port(fd);
    close(fd);
    return port;
}

/* the GPT's text (the same on every rank), in a file of this rank's */
static int gpt_text(char *path, size_t len, char *err)
{
    snprintf(path, len, "/tmp/dsl_gpu_worlds_%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f)
        return dsl_seterr(err, -errno, "cannot write '%s'", path);
    for (int i = 0; i < 60; i++)
        fprintf(f, "the quick brown fox %d jumps over the lazy dog. ", i % 17);
    return fclose(f) == 0 ? 0 : dsl_seterr(err, -EIO, "cannot write '%s'", path);
}

/* the model and its data: the MLP on synthetic samples, or a GPT of 2 blocks of width
 * 32 (2 heads, context 16, byte vocabulary) on a text */
static int model_data(int gpu, const struct variant *v, struct dsl_model *m,
                      struct dsl_dataset *tr, struct dsl_dataset *te, char *err)
{
    char path[64];
    struct dsl_data_opts dopt = {.name = "synthetic", .synth_train = 256, .synth_test = 64,
                                 .synth_dim = 20, .synth_classes = 4, .seed = 5};
    enum dsl_dtype dt = gpu ? v->dtype : DSL_FLOAT32;
    struct dsl_model_spec sp = {.type = "mlp", .in_dim = 20, .out_dim = 4, .nhidden = 2,
                                .hidden = {16, 12}, .max_batch = 64, .seg_max = 64,
                                .dtype = dt, .stream = gpu ? gdev.stream : NULL};
    int r;
    if (v->gpt) {
        if ((r = gpt_text(path, sizeof(path), err)) < 0)
            return r;
        dopt = (struct dsl_data_opts){.name = "text", .path = path, .context = 16,
                                      .vocab = 256, .val_fraction = 0.1, .seed = 5};
        sp = (struct dsl_model_spec){.type = "gpt", .in_dim = 17, .out_dim = 256,
                                     .max_batch = 8, .seg_max = 2000, .dtype = dt,
                                     .stream = sp.stream,
                                     .gpt = {.layers = 2, .dim = 32, .heads = 2,
                                             .context = 16}};
    }
    r = dsl_data_load(tr, te, &dopt, err);
    if (v->gpt)
        unlink(path);
    if (r < 0)
        return r;
    r = gpu ? dsl_model_create_cuda(m, &sp, err) : dsl_model_create(m, &sp, err);
    if (r < 0) {
        dsl_dataset_release(tr);
        dsl_dataset_release(te);
    }
    return r;
}

/* one job at this rank's env: on the GPU through cuda-tcp, or on the CPU through tcp */
static int train(int gpu, const struct variant *v, int port, struct run *out, char *err)
{
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    setenv("MASTER_PORT", ps, 1);
    if (gpu && v->pad_always)
        setenv(DSL_ENV_NCCL_PAD_ALWAYS, "1", 1);
    struct dsl_comm_opts co = {.backend = gpu ? "cuda-tcp" : "tcp", .deterministic = 1};
    struct dsl_comm *c = NULL;
    int r = dsl_comm_open_env(&c, &co, err);
    unsetenv(DSL_ENV_NCCL_PAD_ALWAYS);
    if (r < 0)
        return r;
    if (strcmp(dsl_comm_backend(c), gpu ? "cuda-tcp" : "tcp") != 0) {
        dsl_comm_close(c);
        return dsl_seterr(err, -EINVAL, "backend %s", dsl_comm_backend(c));
    }
    struct dsl_dataset tr, te;
    struct dsl_model m;
    enum dsl_dtype dt = gpu ? v->dtype : DSL_FLOAT32;
    if ((r = model_data(gpu, v, &m, &tr, &te, err)) < 0) {
        dsl_comm_close(c);
        return r;
    }
    struct dsl_trainer t;
    struct dsl_trainer_opts o = {
        .dtype = dt, .micro_batch = 8, .grad_accum = v->accum, .zero_stage = v->stage,
        .bucket_elems = v->bucket, .overlap_comm = v->overlap, .deterministic = 1,
        .grad_clip = v->clip, .predivide = 1.0f, .seed = 11, .dev = gpu ? &gdev : NULL,
        .z3_prefetch = v->noprefetch ? 0 : 50000000, .z3_max_live = 1000000000,
        .z3_persist = v->persist,
        .optim = {DSL_OPTIM_ADAM, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 0}};
    if (v->ls_pow > 0) {
        o.loss_scaling = 1;
        dsl_lossscale_init_dynamic(&o.scaler, ldexp(1.0, v->ls_pow), 2, 1.0, 2, 0);
    }
    struct dsl_sampler s;
    int tinit = 0, sinit = 0;
    if (gpu && v->timers && (r = dsl_gpuprof_enable(gdev.stream, err)) < 0)
        goto out;
    if ((r = dsl_trainer_init(&t, &o, c, &m, err)) < 0)
        goto out;
    tinit = 1;
    if ((r = dsl_sampler_init(&s, tr.n, t.G, 3, 1, 0, err)) < 0)
        goto out;
    sinit = 1;
    for (size_t k = 0; k < STEPS; k++) {
        struct dsl_step_result res;
        if ((r = dsl_trainer_step(&t, &tr, dsl_sampler_step(&s, k / s.steps_per_epoch,
                                                          k % s.steps_per_epoch),
                                  0, &res, err)) < 0)
            goto out;
        out->loss[k] = res.loss;
    }
    out->P = t.P;
    out->skipped = t.ls.skipped;
    out->params = malloc(t.P * sizeof(float));
    if (!out->params) {
        r = dsl_seterr(err, -ENOMEM, "out of memory");
        goto out;
    }
    r = dsl_trainer_params_to_host(&t, out->params, err);
    out->gathered = t.mem.gathered;
    out->state = t.mem.params + t.mem.grads + t.mem.optim;
    out->S = t.S;
    if (r == 0 && (v->stage == 3 || v->gpt))
        r = reload_and_evaluate(&t, &te, out, err);
    if (r == 0 && gpu && v->timers) {
        /* every step read once the stream is done; the classes the MLP and the trainer
         * mark have launches; the segments add up to some time */
        struct dsl_gpuprof_totals g;
        double ms = 0.0;
        if ((r = gdev.ops->synchronize(&gdev)) < 0)
            goto out;
        dsl_gpuprof_collect();
        dsl_gpuprof_take(&g, 1);
        for (int k = 0; k < DSL_PROF_NCLASS; k++)
            ms += g.ms[k];
        fprintf(stderr, "# gpu timers: %llu steps read, %.3f ms, launches fwd_matmul %llu "
                "lm_head_loss %llu bwd_matmul %llu optimizer %llu\n",
                (unsigned long long)g.steps, ms,
                (unsigned long long)g.launches[DSL_PROF_FWD_MATMUL],
                (unsigned long long)g.launches[DSL_PROF_HEAD],
                (unsigned long long)g.launches[DSL_PROF_BWD_MATMUL],
                (unsigned long long)g.launches[DSL_PROF_OPTIM]);
        if (g.steps != STEPS || !(ms > 0.0) || !g.launches[DSL_PROF_FWD_MATMUL] ||
            !g.launches[DSL_PROF_HEAD] || !g.launches[DSL_PROF_BWD_MATMUL] ||
            !g.launches[DSL_PROF_OPTIM])
            r = dsl_seterr(err, -EINVAL, "gpu timers: %llu steps read of %d, %g ms, or a "
                           "class without launches", (unsigned long long)g.steps, STEPS, ms);
    }
out:
    if (gpu && v->timers)
        dsl_gpuprof_disable();
    if (sinit)
        dsl_sampler_release(&s);
    if (tinit)
        dsl_trainer_release(&t);
    dsl_model_release(&m);
    dsl_dataset_release(&tr);
    dsl_dataset_release(&te);
    dsl_comm_close(c);
    return r;
}

/* does the GPU run g agree with the CPU run c within the tolerances (top of the file)?
 * *pd, *pmax, *ld: the largest parameter difference, parameter, relative loss difference */
static int agrees(const struct variant *v, const struct run *g, const struct run *c,
                  double *pd, double *pmax, double *ld)
{
    double ss = 0.0;
    *pd = *pmax = *ld = 0.0;
    for (size_t k = 0; k < c->P && c->P == g->P; k++) {
        *pmax = fmax(*pmax, fabs((double)c->params[k]));
        double d = fabs((double)g->params[k] - (double)c->params[k]);
        *pd = isnan(d) ? INFINITY : fmax(*pd, d);
        ss += d * d;
    }
    for (size_t k = 0; k < STEPS; k++) {
        double d = fabs(g->loss[k] - c->loss[k]) / fabs(c->loss[k]);
        *ld = isnan(d) ? INFINITY : fmax(*ld, d);
    }
    if (v->dtype == DSL_FLOAT32)
        return c->P == g->P && *pd <= 1e-4 * *pmax && *ld <= 1e-4 && g->skipped == c->skipped;
    /* test_gpu_trainer.c's half-precision bounds (lr 1e-2) */
    double u = v->dtype == DSL_BFLOAT16 ? ldexp(1.0, -9) : ldexp(1.0, -12);
    double rms = c->P ? sqrt(ss / (double)c->P) : 0.0;
    return c->P == g->P && *pd <= 2e-2 * STEPS && rms <= 1e-2 * STEPS / 4 && *ld <= 8 * u;
}

/* Stage 3: the evaluation after the reload within the loss bound of the variant's
 * precision (accuracy within one test sample, two in 16 bits), the gathered layers'
 * memory as on the CPU (16-bit elements: half of it), and the model state (2 + 2 + 12)
 * or 16 bytes per shard element with Adam */
static int agrees_z3(const struct variant *v, const struct run *g, const struct run *c)
{
    int half = v->dtype != DSL_FLOAT32;
    double u = v->dtype == DSL_BFLOAT16 ? ldexp(1.0, -9) : ldexp(1.0, -12);
    double el = fabs(g->eval_loss - c->eval_loss) / fabs(c->eval_loss);
    double ea = fabs(g->eval_acc - c->eval_acc) * 64.0; /* synth_test */
    int ok = (v->gpt || (el <= (half ? 8 * u : 1e-4) && ea <= (half ? 2.0 : 1.0) + 1e-9)) &&
             g->gathered == (half ? c->gathered / 2 : c->gathered) && g->gathered > 0 &&
             g->state == 16 * g->S && g->S == c->S;
    fprintf(stderr, "#   stage 3: eval loss rel diff %.3g, accuracy %.4f vs %.4f, gathered "
            "%llu vs %llu bytes, model state %llu bytes for %llu shard elements%s\n", el,
            g->eval_acc, c->eval_acc, (unsigned long long)g->gathered,
            (unsigned long long)c->gathered, (unsigned long long)g->state,
            (unsigned long long)g->S, ok ? "" : ": MISMATCH");
    return ok;
}

/* The GPT at stage 3 on the GPU: against the GPU at stage 0 (the same kernels on the
 * same values: parameters, losses and evaluation within the fp32 bounds, in bf16
 * too), and its losses against the CPU's within test_gpu_gpt.c's trainer bounds (1e-3
 * relative, bf16 3e-2); *pd and *pmax are against the GPU's stage 0, *ld the CPU's */
static int gpt_agrees(const struct variant *v, const struct run *g, const struct run *c,
                      const struct run *g0, double *pd, double *pmax, double *ld)
{
    struct variant strict = *v;
    double ld0;
    strict.dtype = DSL_FLOAT32;
    int ok = agrees(&strict, g, g0, pd, pmax, &ld0);
    double el = fabs(g->eval_loss - g0->eval_loss) / fabs(g0->eval_loss);
    *ld = 0.0;
    for (size_t k = 0; k < STEPS; k++) {
        double d = fabs(g->loss[k] - c->loss[k]) / fabs(c->loss[k]);
        *ld = isnan(d) ? INFINITY : fmax(*ld, d);
    }
    ok = ok && el <= 1e-4 && *ld <= (v->dtype == DSL_FLOAT32 ? 1e-3 : 3e-2);
    fprintf(stderr, "#   gpt stage 3 against the GPU's stage 0: params max diff %.3g, loss "
            "max rel diff %.3g, eval loss rel diff %.3g; losses against the CPU's %.3g%s\n",
            *pd, ld0, el, *ld, ok ? "" : ": MISMATCH");
    return ok;
}

/* one rank: every variant on the GPU and on the CPU (stage 3: also at stage 0); 0 if
 * all agree */
static int rank_main(int rank, int world, const struct variant *vs, size_t nv,
                     const int *ports)
{
    char err[DSL_ERR_LEN] = "";
    if (dsl_device_cuda_open(&gdev, 0, err) < 0) {
        fprintf(stderr, "rank %d: cuda device: %s\n", rank, err);
        return 1;
    }
    int bad = 0;
    for (size_t i = 0; i < nv && !bad; i++) {
        const struct variant *v = &vs[i];
        struct run rg = {0}, rc = {0}, r0 = {0};
        struct variant v0 = *v;
        v0.stage = 0;
        if (train(1, v, ports[3 * i], &rg, err) < 0) {
            fprintf(stderr, "rank %d variant %zu: gpu: %s\n", rank, i, err);
            bad = 1;
            break;
        }
        /* the GPT's stage 0 reference is the GPU's own (its kernels, not the CPU's) */
        if ((v->gpt && train(1, &v0, ports[3 * i + 2], &r0, err) < 0) ||
            train(0, v, ports[3 * i + 1], &rc, err) < 0 ||
            (v->stage == 3 && !v->gpt && train(0, &v0, ports[3 * i + 2], &r0, err) < 0)) {
            fprintf(stderr, "rank %d variant %zu: cpu: %s\n", rank, i, err);
            free(rg.params);
            free(rc.params);
            bad = 1;
            break;
        }
        double pmax, pd, ld, pmax0, pd0, ld0;
        int ok = v->gpt ? gpt_agrees(v, &rg, &rc, &r0, &pd, &pmax, &ld)
                        : agrees(v, &rg, &rc, &pd, &pmax, &ld);
        if (v->gpt) {
            ok = agrees_z3(v, &rg, &rc) && ok;
        } else if (v->stage == 3) {
            int ok0 = agrees(v, &rg, &r0, &pd0, &pmax0, &ld0);
            fprintf(stderr, "#   rank %d stage 3 against the CPU's stage 0: params max diff "
                    "%.3g, loss max rel diff %.3g%s\n", rank, pd0, ld0,
                    ok0 ? "" : ": MISMATCH");
            ok = agrees_z3(v, &rg, &rc) && ok && ok0;
        }
        if (rank == 0 || !ok)
            fprintf(stderr,
                    "# rank %d world %d stage %d overlap %d bucket %zu accum %zu clip %g "
                    "fp16-scale %d pad %d %s: params max diff %.3g (%.3g of the largest), "
                    "loss max rel diff %.3g%s\n",
                    rank, world, v->stage, v->overlap, v->bucket, v->accum, (double)v->clip,
                    v->ls_pow, v->pad_always, v->dtype == DSL_BFLOAT16 ? "bf16" : v->dtype == DSL_FLOAT16 ? "fp16" : "fp32", pd,
                    pmax > 0 ? pd / pmax : 0.0, ld, ok ? "" : ": MISMATCH");
        bad = !ok;
        free(rg.params);
        free(rc.params);
        free(r0.params);
    }
    if (gdev.failed) {
        fprintf(stderr, "rank %d: device error: %s\n", rank, gdev.err);
        bad = 1;
    }
    dsl_device_release(&gdev);
    return bad;
}

/* fork world ranks over the variants; 0 if every rank agreed with its oracle */
static int run_world(int world, const struct variant *vs, size_t nv)
{
    int *ports = calloc(3 * nv, sizeof(int));
    pid_t pids[8];
    char ws[16];
    if (!ports)
        return 1;
    for (size_t i = 0; i < 3 * nv; i++)
        ports[i] = free_port();
    snprintf(ws, sizeof(ws), "%d", world);
    fflush(stderr);
    for (int r = 0; r < world; r++) {
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0) {
            char rs[16];
            snprintf(rs, sizeof(rs), "%d", r);
            setenv("RANK", rs, 1);
            setenv("LOCAL_RANK", rs, 1);
            setenv("WORLD_SIZE", ws, 1);
            setenv("LOCAL_WORLD_SIZE", ws, 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            setenv("DSLAUNCH_RUN_ID", "gpu-worlds", 1);
            setenv("DSLAUNCH_RUN_TOKEN", "gpu-worlds-token", 1);
            setenv("DSLAUNCH_COMM_TIMEOUT", "120", 1);
            setenv("DSLAUNCH_STORE_TIMEOUT", "60", 1);
            /* a hang is a failure, not a stuck CI job (GPU_WORLDS_ALARM_S: longer, for
             * the CPU emulation of CUDA, scripts/cuda-emu/run.sh) */
            const char *al = getenv("GPU_WORLDS_ALARM_S");
            int secs = 400;
            if (al && *al && dsl_parse_int(al, 1, 86400, &secs) < 0)
                secs = 400;
            alarm((unsigned)secs);
            _exit(rank_main(r, world, vs, nv, ports));
        }
        pids[r] = pid;
    }
    int bad = 0;
    for (int r = 0; r < world; r++) {
        int st = 0;
        if (waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "world %d rank %d: %s %d\n", world, r,
                    WIFSIGNALED(st) ? "killed by signal" : "exit status",
                    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            bad = 1;
        }
    }
    free(ports);
    return bad;
}

/* MLP 20-16-12-4: 592 parameters in segments of at most 64 */
static const struct variant variants[] = {
    /* stage overlap bucket accum clip ls pad dtype timers persist noprefetch gpt */
    {0, 0, 0, 1, 0.0f, 0, 0, DSL_FLOAT32, 0, 0, 0, 0},    /* one bucket per segment */
    {0, 1, 100, 2, 0.05f, 0, 0, DSL_FLOAT32, 0, 0, 0, 0}, /* overlap, accumulation, clipping */
    {1, 0, 30, 2, 0.0f, 0, 0, DSL_FLOAT32, 0, 0, 0, 0},   /* shards that 4 (and 2) do not divide */
    {1, 1, 100, 1, 0.05f, 8, 0, DSL_FLOAT32, 0, 0, 0, 0}, /* fp16 loss scaling */
    {2, 0, 1000, 1, 0.0f, 0, 0, DSL_FLOAT32, 0, 0, 0, 0}, /* one bucket for the whole model */
    {2, 1, 30, 3, 0.05f, 0, 0, DSL_FLOAT32, 0, 0, 0, 0},
    {1, 1, 100, 2, 0.0f, 0, 1, DSL_FLOAT32, 0, 0, 0, 0},  /* the comm's padded form, every call */
    {2, 1, 30, 1, 0.05f, 0, 1, DSL_FLOAT32, 0, 0, 0, 0},
    {2, 1, 100, 2, 0.0f, 0, 0, DSL_BFLOAT16, 0, 0, 0, 0}, /* the shipped config's shape */
    {2, 1, 30, 2, 0.05f, 0, 0, DSL_FLOAT32, 1, 0, 0, 0}, /* with the GPU timers on */
    /* stage 3 (layers 336, 204 and 52 parameters) against the CPU's stage 3 and 0:
     * persistence threshold 0 (every layer gathered into the windows), the default
     * (every layer kept whole) and 100 (the last one kept); prefetch on and off */
    {3, 0, 0, 1, 0.0f, 0, 0, DSL_FLOAT32, 0, 0, 0, 0},
    {3, 1, 100, 2, 0.05f, 0, 0, DSL_FLOAT32, 0, 0, 0, 0},
    {3, 1, 30, 1, 0.0f, 0, 1, DSL_FLOAT32, 0, 100000, 0, 0},
    {3, 1, 30, 2, 0.05f, 0, 0, DSL_FLOAT32, 0, 100, 1, 0},
    {3, 0, 100, 1, 0.05f, 8, 0, DSL_FLOAT32, 0, 100, 0, 0}, /* fp16 loss scaling */
    {3, 1, 100, 2, 0.0f, 0, 0, DSL_BFLOAT16, 0, 0, 0, 0},
    {3, 0, 30, 1, 0.05f, 0, 0, DSL_BFLOAT16, 0, 100000, 0, 0},
    {3, 1, 30, 2, 0.0f, 0, 0, DSL_BFLOAT16, 0, 100, 1, 0},
    /* the GPT (embeddings, 2 blocks, ln_f: 4 layers, the tied wte asked for twice) */
    {3, 1, 3000, 1, 1.0f, 0, 0, DSL_FLOAT32, 0, 0, 0, 1},
    {3, 1, 3000, 1, 1.0f, 0, 0, DSL_BFLOAT16, 0, 2000, 0, 1},
};
#define NV (sizeof(variants) / sizeof(variants[0]))

/* every variant, or with GPU_WORLDS_STAGES (e.g. "3", for the CPU emulation of CUDA,
 * scripts/cuda-emu/run.sh) the MLP's of the stages it lists and, with "g", the GPT's */
static int run_variants(int world)
{
    const char *only = getenv("GPU_WORLDS_STAGES");
    struct variant sel[NV];
    size_t n = 0;
    for (size_t i = 0; i < NV; i++)
        if (!only || !*only || strchr(only, variants[i].gpt ? 'g' : '0' + variants[i].stage))
            sel[n++] = variants[i];
    if (!n) {
        fprintf(stderr, "GPU_WORLDS_STAGES '%s' selects no variant\n", only);
        return 1;
    }
    return run_world(world, sel, n);
}

TEST(gpu_trainer_at_world_two_on_one_gpu_should_match_the_cpu_oracle)
{
    ASSERT_EQ(run_variants(2), 0);
}

TEST(gpu_trainer_at_world_four_on_one_gpu_should_match_the_cpu_oracle)
{
    ASSERT_EQ(run_variants(4), 0);
}

int main(int argc, char **argv)
{
    /* the device count from a child: the parent forks the ranks and must not hold a
     * CUDA context */
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int n = 0;
        _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 77);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "# no CUDA device: skipped\n");
        return 77;
    }
    return RUN_TESTS(argc, argv);
}
