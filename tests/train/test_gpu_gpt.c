/*
 * The CUDA GPT (model_gpt_cuda.c) against the CPU GPT (model_gpt.c), its oracle (label
 * gpu), on a tiny GPT-2 (2 layers, width 32, 2 heads, context 16, byte vocabulary 256)
 * and an odd one (3 heads of 16, context 40, vocabulary 1000), and for the fused
 * attention's tiles of 32 (model_gpt_attention.cu) one block at head size 64 with
 * context 70 (three query and key tiles, the last partial), one at head size 48
 * (zero-padded columns) with context 37, and at head sizes 128 and 80 (96 columns, 16
 * zero-padded) with context 37, whose kernels take dynamic shared memory above 48 KiB:
 *   - the same segment list and initial parameters (bit for bit: one layout code);
 *   - fp32: the loss within 1e-4 relative and, per tensor, every gradient element
 *     within 1e-3 of that tensor's largest CPU gradient magnitude, the same hits, the
 *     sink's need() calls and segment order as the CPU's; loss scale 2^10 gives exactly
 *     2^10 times the gradient; evaluation agrees as forward_backward does;
 *   - bf16 and fp16 compute against the CPU model on the same 16-bit parameters
 *     (dstrain.cpu_half: fp32 arithmetic): loss within 5e-3 relative, per tensor the
 *     RMS difference within 2.5e-2 of the tensor's RMS gradient and the largest within
 *     5e-2 of its largest (16-bit activations: about 3x what a CPU emulation of these
 *     kernels and cuBLAS measured, 8.5e-3 and 9e-3 in bf16);
 *   - determinism: the same micro batch twice, on the same model object and on a
 *     second one, gives the same gradient and loss bits (fp32; bf16 and fp16 twice on one);
 *   - the attention on tensor cores (WMMA; bf16 and fp16 take it by default where the
 *     device has it, so the 16-bit comparisons above run it too), forced with
 *     DSL_GPT_ATTENTION=tensor at head sizes 64 (context 70), 128, 80 and 20 (context 37),
 *     bf16 and fp16, within the same 16-bit bounds and twice alike, the scalar kernels'
 *     16-bit path forced with =scalar, and =tensor refused in fp32;
 *   - a micro batch below max_batch and with repeated tokens (the embedding scatter);
 *   - vocabularies of 259 and 7, whose logits' rows the GPU pads to 320 and 64: fp32,
 *     bf16 and fp16 as above, evaluation's loss (and in fp32 its hits), every GEMM
 *     operand 16-byte aligned under the emulator (EMU_GEMM_ALIGN);
 *   - 16-bit runs the MLP's bias, GELU and GELU gradient as cuBLASLt epilogues; an odd
 *     width (33), or a heuristic without an algorithm the model takes, keeps the
 *     separate kernels, within the same bounds;
 *   - a head size above the attention's 128 is refused with its size, and head size 128
 *     on a device whose shared memory opt-in limit is below its kernels' need (sm_75)
 *     with both byte counts;
 *   - ZeRO stage 3: the layers asked for through the sink's layer()/unlayer() in the CPU
 *     GPT's order (forward_backward and evaluate_src, fp32 and bf16), each in a window of
 *     its own, give the gradient and loss bits of the whole buffer;
 *   - a few AdamW steps of the trainer at world 1 on the nccl backend against the CPU
 *     trainer on the same text: losses within 1e-3 relative (fp32; bf16 with fp32
 *     master weights within 3e-2), falling, and one host wait per step.
 * The tolerances are stated before any run on hardware: fp32 GEMMs in another order
 * and CUDA's expf/logf explain ~1e-6 relative (a CPU emulation of the kernels and
 * cuBLAS measured up to 1.1e-6), so 1e-3 leaves room while a wrong
 * kernel (a transposed operand, a missed mask, a lost bias) is off by O(1). Every
 * comparison prints its worst figure ("# ..."). Exits 77 (skip) without a CUDA device.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/common/dtype.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/halfvec.h"
#include "dslaunch/model/data.h"
#include "dslaunch/device/device.h"
#include "dslaunch/model/model.h"
#include "dslaunch/train/trainer.h"
#include "gpu_test.h"
#include "test.h"
#include "world_release.h"
#include "dslaunch/common/banned.h"


struct shape {
    size_t L, C, NH, T, V, B; /* blocks, width, heads, context, vocabulary, micro batch */
};
/* the tiny GPT; and an odd one: 3 heads of 16, context 40 (a full attention tile of 32
 * and a partial one), vocabulary 1000 (more than a classifier block's threads); the
 * attention at head size 64 over 70 positions (tiles 32 + 32 + 6) and at head size 48
 * (64 columns with 16 zero-padded) over 37 */
static const struct shape tiny_shape = {2, 32, 2, 16, 256, 4};
static const struct shape odd_shape = {2, 48, 3, 40, 1000, 3};
static const struct shape head64_shape = {1, 128, 2, 70, 256, 2};
static const struct shape head48_shape = {1, 96, 2, 37, 256, 2};
/* head size 128 over 37 positions (tiles 32 + 5), with 2 heads and (for bf16, whose
 * rounding grows with the width) 1; head size 80 (padded to 96) likewise */
static const struct shape head128_shape = {1, 256, 2, 37, 256, 2};
static const struct shape head128x1_shape = {1, 128, 1, 37, 256, 2};
static const struct shape head80_shape = {1, 160, 2, 37, 256, 2};
/* head size 20: the tensor-core kernels' element-by-element staging (not 8 | hs) */
static const struct shape head20_shape = {1, 40, 2, 37, 256, 2};

/* a vocabulary of 259 (not a multiple of 8: the logits' rows are padded to 320 on the
 * GPU; more classes than a classifier block's threads) and one of 7 (padded to 64,
 * fewer than a warp; 8 samples, so that some last positions are hits and evaluation's
 * argmax is compared on hits, not only on misses), at width 32 */
static const struct shape vocab259_shape = {1, 32, 2, 16, 259, 3};
static const struct shape vocab7_shape = {1, 32, 2, 16, 7, 8};

/* the gradient segments' bound (elements); the vocabulary test picks one whose row
 * blocks start at multiples of 8 rows, so that every GEMM is 16-byte aligned */
static size_t seg_max = 700;

static struct dsl_model_spec spec_of(const struct shape *h, enum dsl_dtype dt, int gpu)
{
    struct dsl_model_spec sp = {.type = "gpt", .in_dim = h->T + 1, .out_dim = h->V,
                                .max_batch = h->B, .seg_max = seg_max, .dtype = dt,
                                .stream = gpu ? gdev.stream : NULL,
                                .gpt = {.layers = h->L, .dim = h->C, .heads = h->NH,
                                        .context = h->T}};
    return sp;
}

/* ---- a sink over a whole gradient buffer, checking the order ---- */

struct order_sink {
    char *base; /* full gradient buffer (host or device) */
    size_t esz;
    const struct dsl_model *m;
    size_t ndone, last_off, needed;
};

static float *os_dest(void *ctx, size_t seg)
{
    struct order_sink *s = ctx;
    return (float *)(void *)(s->base + s->m->segs[seg].off * s->esz);
}

static void os_done(void *ctx, size_t seg)
{
    struct order_sink *s = ctx;
    ASSERT_EQ(seg, s->ndone);
    ASSERT(s->m->segs[seg].off + s->m->segs[seg].len == s->last_off);
    s->last_off = s->m->segs[seg].off;
    s->ndone++;
}

static void os_need(void *ctx, size_t off, size_t len)
{
    struct order_sink *s = ctx;
    ASSERT_EQ(off, s->needed); /* in flat order, all of it */
    s->needed = off + len;
}

/* ---- helpers ---- */

static void *dev_alloc(size_t bytes)
{
    void *d = NULL;
    ASSERT(cudaMalloc(&d, bytes ? bytes : 1) == cudaSuccess);
    return d;
}

static void to_dev(void *d, const void *h, size_t bytes)
{
    ASSERT(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, gdev.stream) == cudaSuccess);
    ASSERT(cudaStreamSynchronize(gdev.stream) == cudaSuccess);
}

static void to_host(void *h, const void *d, size_t bytes)
{
    ASSERT(cudaStreamSynchronize(gdev.stream) == cudaSuccess);
    ASSERT(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
}

/* token windows with repeats (every id appears several times in a batch) */
static float *make_tokens(const struct shape *h, uint64_t seed)
{
    size_t n = h->B * (h->T + 1);
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(dsl_test_rng(&seed) % (i % 3 ? h->V : 7));
    return x;
}

/* GPT-2's init, then larger values so that every path carries signal (as the CPU
 * model's gradient check does) */
static void make_params(struct dsl_model *m, float *p)
{
    ASSERT_OK(m->ops->init_params(m, p, 5));
    uint64_t s = 77;
    for (size_t i = 0; i < m->nparams; i++)
        p[i] += (float)((double)(dsl_test_rng(&s) >> 11) / 9007199254740992.0 - 0.5) * 0.3f;
}

/* one forward_backward into a full fp32 gradient (host), with its stats */
struct result {
    float *g;
    struct dsl_model_stats st;
    size_t nneed;
};

/* r's gradient in fp32 from the model's own gradient g (fp32, bf16 or fp16), which is
 * freed */
static void widen_grads(const struct dsl_model *m, char *g, struct result *r)
{
    size_t P = m->nparams;
    r->g = malloc(P * sizeof(float));
    if (m->dtype != DSL_FLOAT32)
        dsl_hv_widen(m->dtype == DSL_BFLOAT16, r->g, (const uint16_t *)(void *)g, P);
    else
        memcpy(r->g, g, P * sizeof(float));
    free(g);
}

static void run_cpu(struct dsl_model *m, const void *params, const float *x, size_t n,
                    float scale, struct result *r)
{
    int half = m->dtype != DSL_FLOAT32;
    size_t P = m->nparams, esz = half ? 2 : 4;
    char *g = calloc(P, esz);
    struct order_sink s = {g, esz, m, 0, P, 0};
    struct dsl_grad_sink k = {.dest = os_dest, .done = os_done, .need = os_need, .ctx = &s};
    ASSERT_OK(m->ops->forward_backward(m, params, x, NULL, n, scale, &k, &r->st));
    ASSERT_EQ(s.ndone, m->nsegs);
    ASSERT_EQ(s.needed, P);
    widen_grads(m, g, r);
}

static void run_gpu(struct dsl_model *m, const void *dparams, const float *x, size_t n,
                    float scale, struct result *r)
{
    int half = m->dtype != DSL_FLOAT32;
    size_t P = m->nparams, esz = half ? 2 : 4;
    char *dg = dev_alloc(P * esz);
    ASSERT(cudaMemset(dg, 0xff, P * esz) == cudaSuccess); /* NaN: every element written */
    struct order_sink s = {dg, esz, m, 0, P, 0};
    struct dsl_grad_sink k = {.dest = os_dest, .done = os_done, .need = os_need, .ctx = &s};
    if (m->ops->forward_backward(m, dparams, x, NULL, n, scale, &k, &r->st) < 0)
        DSL_FAIL_("GPU forward_backward: %s", m->err);
    ASSERT_EQ(s.ndone, m->nsegs);
    ASSERT_EQ(s.needed, P);
    char *g = malloc(P * esz);
    to_host(g, dg, P * esz);
    cudaFree(dg);
    widen_grads(m, g, r);
}

/* The end of a comparison: the CPU model a and the CUDA one b, the tokens x, the fp32
 * parameters p, their host copy hp and their device copy dp. */
static void release_pair(struct dsl_model *a, struct dsl_model *b, float *x, float *p,
                         void *hp, void *dp)
{
    free(x);
    free(p);
    free(hp);
    cudaFree(dp);
    dsl_model_release(a);
    dsl_model_release(b);
}

/* per tensor: the largest |gpu - cpu| over the tensor's largest |cpu|, and the RMS
 * difference over its RMS; the worst of each over the tensors */
static void compare_grads(const struct dsl_model_spec *sp, const float *gg, const float *gc,
                          double *worst_max, double *worst_rms, const char *what)
{
    struct dsl_model_tensor tl[DSL_MODEL_MAX_TENSORS];
    size_t nt = dsl_model_tensor_list(sp, tl, DSL_MODEL_MAX_TENSORS);
    ASSERT(nt == 4 + 12 * sp->gpt.layers);
    *worst_max = *worst_rms = 0.0;
    for (size_t t = 0; t < nt; t++) {
        double gmax = 0.0, dmax = 0.0, ss = 0.0, sd = 0.0;
        for (size_t i = tl[t].off; i < tl[t].off + tl[t].len; i++) {
            double c = gc[i], d = fabs((double)gg[i] - c);
            if (isnan(d))
                d = INFINITY;
            gmax = fmax(gmax, fabs(c));
            dmax = fmax(dmax, d);
            ss += c * c;
            sd += d * d;
        }
        double rmax = dmax / fmax(gmax, 1e-30), rrms = sqrt(sd / fmax(ss, 1e-60));
        if (gmax == 0.0 && dmax == 0.0)
            rmax = rrms = 0.0;
        /* the worst so far, and always the qkv weight (its gradient is the attention's) */
        if (rmax > *worst_max || rrms > *worst_rms || strstr(tl[t].name, "c_attn.weight"))
            fprintf(stderr, "# %s %s: max diff %.3g of its largest %.3g, rms ratio %.3g\n",
                    what, tl[t].name, rmax, gmax, rrms);
        *worst_max = fmax(*worst_max, rmax);
        *worst_rms = fmax(*worst_rms, rrms);
        ASSERT(gmax > 0.0); /* every tensor carries a gradient in this batch */
    }
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* ---- fp32 ---- */

static void compare_fp32(const struct shape *h)
{
    char err[DSL_ERR_LEN];
    struct dsl_model_spec cs = spec_of(h, DSL_FLOAT32, 0), gs = spec_of(h, DSL_FLOAT32, 1);
    struct dsl_model a, b;
    ASSERT_OK(dsl_model_create(&a, &cs, err));
    if (dsl_model_create_cuda(&b, &gs, err) < 0)
        DSL_FAIL_("dsl_model_create_cuda: %s", err);
    ASSERT(b.on_device && !a.on_device);
    ASSERT_EQ(a.nparams, b.nparams);
    ASSERT_EQ(a.nsegs, b.nsegs);
    ASSERT(a.nsegs > 4 + 12 * h->L); /* weights cut into row blocks */
    for (size_t i = 0; i < a.nsegs; i++)
        ASSERT(a.segs[i].off == b.segs[i].off && a.segs[i].len == b.segs[i].len &&
               a.segs[i].layer == b.segs[i].layer);
    ASSERT_EQ(a.flops_per_sample, b.flops_per_sample);
    size_t P = a.nparams;
    /* the same initial bits */
    float *p = malloc(P * sizeof(float)), *hp = malloc(P * sizeof(float));
    float *dp = dev_alloc(P * sizeof(float));
    ASSERT_OK(a.ops->init_params(&a, p, 9));
    if (b.ops->init_params(&b, dp, 9) < 0)
        DSL_FAIL_("GPU init_params: %s", b.err);
    to_host(hp, dp, P * sizeof(float));
    ASSERT(same_bits(hp, p, P));
    make_params(&a, p);
    to_dev(dp, p, P * sizeof(float));

    float *x = make_tokens(h, 3);
    size_t ns[] = {h->B, h->B - 1};
    for (size_t k = 0; k < 2; k++) {
        size_t n = ns[k];
        struct result rc, rg, rg2;
        run_cpu(&a, p, x, n, 1.0f, &rc);
        run_gpu(&b, dp, x, n, 1.0f, &rg);
        double wmax, wrms;
        compare_grads(&cs, rg.g, rc.g, &wmax, &wrms, "fp32");
        double ld = fabs(rg.st.loss_sum - rc.st.loss_sum) / fabs(rc.st.loss_sum);
        fprintf(stderr,
                "# fp32 batch %zu: loss %.9g vs %.9g (rel %.3g); worst tensor max diff %.3g "
                "(bound 1e-3), rms %.3g; hits %zu vs %zu\n",
                n, rg.st.loss_sum, rc.st.loss_sum, ld, wmax, wrms, rg.st.correct,
                rc.st.correct);
        ASSERT(!rg.st.deferred);
        ASSERT(ld <= 1e-4);
        ASSERT(wmax <= 1e-3);
        ASSERT_EQ(rg.st.correct, rc.st.correct);
        /* determinism: again on the same object */
        run_gpu(&b, dp, x, n, 1.0f, &rg2);
        ASSERT(same_bits(rg2.g, rg.g, P));
        ASSERT(rg2.st.loss_sum == rg.st.loss_sum);
        free(rg2.g);
        if (k == 0) {
            /* loss scale 2^10: exactly 2^10 x the gradient, the same loss */
            run_gpu(&b, dp, x, n, 1024.0f, &rg2);
            size_t nbad = 0;
            for (size_t i = 0; i < P; i++)
                nbad += rg2.g[i] != 1024.0f * rg.g[i];
            fprintf(stderr, "# fp32 loss scale 1024: %zu of %zu elements not exactly scaled\n",
                    nbad, P);
            ASSERT_EQ(nbad, 0);
            ASSERT(rg2.st.loss_sum == rg.st.loss_sum);
            free(rg2.g);
            /* a second model object gives the same bits */
            struct dsl_model b2;
            if (dsl_model_create_cuda(&b2, &gs, err) < 0)
                DSL_FAIL_("dsl_model_create_cuda: %s", err);
            run_gpu(&b2, dp, x, n, 1.0f, &rg2);
            ASSERT(same_bits(rg2.g, rg.g, P));
            free(rg2.g);
            dsl_model_release(&b2);
        }
        free(rc.g);
        free(rg.g);
    }
    /* evaluation */
    struct dsl_model_stats sa, sb;
    ASSERT_OK(a.ops->evaluate(&a, p, x, NULL, h->B, &sa));
    if (b.ops->evaluate(&b, dp, x, NULL, h->B, &sb) < 0)
        DSL_FAIL_("GPU evaluate: %s", b.err);
    double ld = fabs(sb.loss_sum - sa.loss_sum) / fabs(sa.loss_sum);
    fprintf(stderr, "# fp32 evaluate: loss rel diff %.3g, hits %zu vs %zu\n", ld, sb.correct,
            sa.correct);
    ASSERT(ld <= 1e-4);
    ASSERT_EQ(sb.correct, sa.correct);
    /* a token id out of range is refused as on the CPU */
    x[5] = (float)h->V;
    ASSERT_EQ(b.ops->evaluate(&b, dp, x, NULL, 1, &sb), DSL_EDATA);
    ASSERT_EQ(a.ops->evaluate(&a, p, x, NULL, 1, &sa), DSL_EDATA);
    release_pair(&a, &b, x, p, hp, dp);
}

TEST(cuda_gpt_should_match_the_cpu_gpt_in_fp32)
{
    compare_fp32(&tiny_shape);
    compare_fp32(&odd_shape);
}

/* ---- 16-bit compute ---- */

static void compare_half(const struct shape *h, enum dsl_dtype dt)
{
    const char *name = dt == DSL_BFLOAT16 ? "bf16" : "fp16";
    int bf = dt == DSL_BFLOAT16;
    char err[DSL_ERR_LEN];
    struct dsl_model_spec cs = spec_of(h, dt, 0), gs = spec_of(h, dt, 1);
    struct dsl_model a, b;
    ASSERT_OK(dsl_model_create(&a, &cs, err));
    if (dsl_model_create_cuda(&b, &gs, err) < 0)
        DSL_FAIL_("dsl_model_create_cuda (%s): %s", name, err);
    ASSERT(b.dtype == dt);
    size_t P = a.nparams;
    float *p = malloc(P * sizeof(float));
    make_params(&a, p);
    /* both models get the same 16-bit parameters */
    uint16_t *hp = malloc(P * 2);
    dsl_hv_narrow(bf, hp, p, P);
    void *dp = dev_alloc(P * 2);
    to_dev(dp, hp, P * 2);
    float *x = make_tokens(h, 4);
    struct result rc, rg, rg2;
    run_cpu(&a, hp, x, h->B, 1.0f, &rc);
    run_gpu(&b, dp, x, h->B, 1.0f, &rg);
    double wmax, wrms;
    compare_grads(&cs, rg.g, rc.g, &wmax, &wrms, name);
    double ld = fabs(rg.st.loss_sum - rc.st.loss_sum) / fabs(rc.st.loss_sum);
    fprintf(stderr,
            "# %s: loss %.6g vs %.6g (rel %.3g, bound 5e-3); worst tensor max diff %.3g "
            "(bound 5e-2), rms ratio %.3g (bound 2.5e-2)\n",
            name, rg.st.loss_sum, rc.st.loss_sum, ld, wmax, wrms);
    ASSERT(ld <= 5e-3);
    ASSERT(wmax <= 5e-2);
    ASSERT(wrms <= 2.5e-2);
    run_gpu(&b, dp, x, h->B, 1.0f, &rg2);
    ASSERT(same_bits(rg2.g, rg.g, P));
    ASSERT(rg2.st.loss_sum == rg.st.loss_sum);
    /* evaluation's loss as forward_backward's */
    struct dsl_model_stats sa, sb;
    ASSERT_OK(a.ops->evaluate(&a, (const float *)(const void *)hp, x, NULL, h->B, &sa));
    if (b.ops->evaluate(&b, dp, x, NULL, h->B, &sb) < 0)
        DSL_FAIL_("GPU evaluate (%s): %s", name, b.err);
    ld = fabs(sb.loss_sum - sa.loss_sum) / fabs(sa.loss_sum);
    fprintf(stderr, "# %s evaluate: loss rel diff %.3g, hits %zu vs %zu\n", name, ld,
            sb.correct, sa.correct);
    ASSERT(ld <= 5e-3);
    ASSERT(sb.loss_sum == rg.st.loss_sum);
    free(rg2.g);
    free(rc.g);
    free(rg.g);
    release_pair(&a, &b, x, p, hp, dp);
}

TEST(cuda_gpt_in_bf16_and_fp16_should_track_the_cpu_gpt_on_the_same_16_bit_parameters)
{
    compare_half(&tiny_shape, DSL_BFLOAT16);
    compare_half(&tiny_shape, DSL_FLOAT16);
    compare_half(&odd_shape, DSL_BFLOAT16);
}

/* ---- ZeRO stage 3: the layers from the sink ---- */

/* A sink whose layer() copies the layer's flat range out of a whole parameter buffer
 * into a window of its own (NaN beyond it), one held at a time, logging every call */
struct layer_src {
    struct order_sink os;
    const char *params; /* the whole buffer: host (CPU model) or device (CUDA model) */
    char *win;          /* P elements, host or device */
    int gpu, held;
    int log[64][3]; /* layer (1) or unlayer (0), the layer, next */
    size_t nlog;
    struct dsl_model_stats st; /* evaluate_src's */
};

/* layer l's flat range [lo, hi) from the segment list */
static void layer_range(const struct dsl_model *m, int l, size_t *lo, size_t *hi)
{
    *lo = m->nparams;
    *hi = 0;
    for (size_t i = 0; i < m->nsegs; i++)
        if (m->segs[i].layer == l) {
            *lo = m->segs[i].off < *lo ? m->segs[i].off : *lo;
            size_t e = m->segs[i].off + m->segs[i].len;
            *hi = e > *hi ? e : *hi;
        }
}

static const float *ls_layer(void *ctx, int l, int next)
{
    struct layer_src *s = ctx;
    size_t lo, hi, esz = s->os.esz, P = s->os.m->nparams;
    ASSERT_EQ(s->held, -1);
    ASSERT(s->nlog < 64);
    s->log[s->nlog][0] = 1;
    s->log[s->nlog][1] = l;
    s->log[s->nlog++][2] = next;
    layer_range(s->os.m, l, &lo, &hi);
    ASSERT(lo < hi);
    if (s->gpu) { /* the kernels still queued may read the window: after them */
        ASSERT(cudaStreamSynchronize(gdev.stream) == cudaSuccess);
        ASSERT(cudaMemset(s->win, 0xff, P * esz) == cudaSuccess);
        ASSERT(cudaMemcpy(s->win, s->params + lo * esz, (hi - lo) * esz,
                          cudaMemcpyDeviceToDevice) == cudaSuccess);
    } else {
        memset(s->win, 0xff, P * esz);
        memcpy(s->win, s->params + lo * esz, (hi - lo) * esz);
    }
    s->held = l;
    return (const float *)(void *)s->win;
}

static void ls_unlayer(void *ctx, int l)
{
    struct layer_src *s = ctx;
    ASSERT_EQ(s->held, l);
    ASSERT(s->nlog < 64);
    s->log[s->nlog][0] = 0;
    s->log[s->nlog][1] = l;
    s->log[s->nlog++][2] = 0;
    s->held = -1;
}

/* forward_backward (or evaluate_src, g NULL) of m with its layers from params through
 * a layer_src: the gradient (host, fp32), the stats and the call log in s */
static void run_layers(struct dsl_model *m, const void *params, const float *x, size_t n,
                       struct layer_src *s, struct result *r)
{
    size_t P = m->nparams, esz = m->dtype != DSL_FLOAT32 ? 2 : 4;
    int gpu = m->on_device, rc;
    char *g = gpu ? dev_alloc(P * esz) : calloc(P, esz);
    *s = (struct layer_src){.os = {g, esz, m, 0, P, 0}, .params = params, .gpu = gpu,
                            .held = -1};
    s->win = gpu ? dev_alloc(P * esz) : malloc(P * esz);
    struct dsl_grad_sink k = {.dest = os_dest, .done = os_done, .layer = ls_layer,
                              .unlayer = ls_unlayer, .ctx = s};
    if (r) {
        if ((rc = m->ops->forward_backward(m, NULL, x, NULL, n, 1.0f, &k, &r->st)) < 0)
            DSL_FAIL_("forward_backward with layers: %s", m->err);
        ASSERT_EQ(s->os.ndone, m->nsegs);
    } else {
        ASSERT(m->ops->evaluate_src);
        if ((rc = m->ops->evaluate_src(m, &k, x, NULL, n, &s->st)) < 0)
            DSL_FAIL_("evaluate_src: %s", m->err);
    }
    ASSERT_EQ(s->held, -1);
    if (gpu) {
        char *h = malloc(P * esz);
        to_host(h, g, P * esz);
        cudaFree(g);
        cudaFree(s->win);
        g = h;
    } else {
        free(s->win);
    }
    if (r)
        widen_grads(m, g, r);
    else
        free(g);
}

/* The CUDA GPT asks for the CPU GPT's layers in the CPU GPT's order (forward_backward
 * and evaluation), and computes with a layer in a window of its own exactly what it
 * computes with the whole buffer: the same gradient and loss bits */
static void compare_layers(const struct shape *h, enum dsl_dtype dt)
{
    char err[DSL_ERR_LEN];
    struct dsl_model_spec cs = spec_of(h, dt, 0), gs = spec_of(h, dt, 1);
    struct dsl_model a, b;
    ASSERT_OK(dsl_model_create(&a, &cs, err));
    if (dsl_model_create_cuda(&b, &gs, err) < 0)
        DSL_FAIL_("dsl_model_create_cuda: %s", err);
    size_t P = a.nparams, esz = dt != DSL_FLOAT32 ? 2 : 4;
    float *p = malloc(P * sizeof(float));
    make_params(&a, p);
    void *hp = malloc(P * esz);
    if (dt != DSL_FLOAT32)
        dsl_hv_narrow(dt == DSL_BFLOAT16, hp, p, P);
    else
        memcpy(hp, p, P * esz);
    void *dp = dev_alloc(P * esz);
    to_dev(dp, hp, P * esz);
    float *x = make_tokens(h, 4);
    struct layer_src sc, sg;
    struct result rc, rg, rw;
    run_layers(&a, hp, x, h->B, &sc, &rc);
    run_layers(&b, dp, x, h->B, &sg, &rg);
    run_gpu(&b, dp, x, h->B, 1.0f, &rw);
    ASSERT_EQ(sg.nlog, sc.nlog);
    ASSERT(sc.nlog == 2 * (2 * h->L + 4)); /* forward L + 2 and the head, backward L + 1 */
    ASSERT(memcmp(sg.log, sc.log, sc.nlog * sizeof(sc.log[0])) == 0);
    size_t nfb = sc.nlog;
    ASSERT(same_bits(rg.g, rw.g, P));
    ASSERT(rg.st.loss_sum == rw.st.loss_sum && rg.st.correct == rw.st.correct);
    struct dsl_model_stats st;
    ASSERT_OK(b.ops->evaluate(&b, dp, x, NULL, h->B, &st));
    run_layers(&a, hp, x, h->B, &sc, NULL);
    run_layers(&b, dp, x, h->B, &sg, NULL);
    ASSERT(sc.nlog == 2 * (h->L + 3) && sg.nlog == sc.nlog);
    ASSERT(memcmp(sg.log, sc.log, sc.nlog * sizeof(sc.log[0])) == 0);
    ASSERT(sg.st.loss_sum == st.loss_sum && sg.st.correct == st.correct);
    fprintf(stderr, "# stage 3 layers (%s): %zu calls in forward_backward and %zu in "
            "evaluation as the CPU's, gradient and loss bits as with the whole buffer\n",
            dt == DSL_FLOAT32 ? "fp32" : "bf16", nfb, sc.nlog);
    free(rc.g);
    free(rg.g);
    free(rw.g);
    release_pair(&a, &b, x, p, hp, dp);
}

TEST(cuda_gpt_at_zero_stage_three_should_take_the_cpu_gpts_layers_in_its_order)
{
    compare_layers(&tiny_shape, DSL_FLOAT32);
    compare_layers(&tiny_shape, DSL_BFLOAT16);
}

/* ---- the MLP's epilogues ---- */

/* In 16-bit the MLP's input projection, bias and GELU are one cuBLASLt GEMM with the
 * GELU_AUX_BIAS epilogue, its GELU gradient and input bias gradient the DGELU_BGRAD
 * epilogue of the next GEMM back and every other projection's bias a BIAS epilogue
 * (over the residual where there is one), which need the aux matrix's leading dimension
 * 4C to be a multiple of 8 (model_gpt_cuda.c): the tests above run that path; an odd
 * width (33, 3 heads of 11) keeps the separate bias and GELU kernels, which must track
 * the CPU as well, and so must the tiny GPT when the heuristic offers only algorithms
 * that reduce split-K partial products in 16 bits, which the model refuses (under the
 * emulator EMU_LT_16BIT_REDUCTIONS_ONLY makes its heuristic do that, and its matmul
 * aborts on such an algorithm; a GPU ignores the variable), or when DSL_GPT_EPILOGUES
 * is off. */
TEST(cuda_gpt_in_16_bit_without_the_epilogues_should_track_the_cpu_gpt)
{
    const struct shape h = {1, 33, 3, 16, 256, 2};
    compare_half(&h, DSL_BFLOAT16);
    compare_half(&h, DSL_FLOAT16);
    setenv("EMU_LT_16BIT_REDUCTIONS_ONLY", "1", 1);
    compare_half(&tiny_shape, DSL_BFLOAT16);
    unsetenv("EMU_LT_16BIT_REDUCTIONS_ONLY");
    /* and when asked not to take them (a GPU session's A/B) */
    setenv("DSL_GPT_EPILOGUES", "off", 1);
    compare_half(&tiny_shape, DSL_FLOAT16);
    unsetenv("DSL_GPT_EPILOGUES");
}

/* ---- the vocabulary's padding ---- */

/* The logits' rows lie Vp = V rounded up to 64 apart on the GPU (model_gpt_cuda.c's
 * alignment rule): loss, gradients, evaluation's loss and hits and the bits of a second
 * run must be those of the unpadded CPU model. Under the emulator the padding columns
 * hold cudaMalloc's 0x7f filler (about 3.4e38), so a classifier that took one for a
 * class would be off by far more than the bounds, and EMU_GEMM_ALIGN=16 (set here,
 * ignored on a GPU) aborts on any GEMM operand that is not 16-byte aligned; seg_max 96 C
 * cuts the weights into blocks of 96, 32 or 24 rows, all multiples of 8. */
TEST(cuda_gpt_should_pad_the_logits_of_a_vocabulary_not_a_multiple_of_8_and_never_count_the_padding_as_a_class)
{
    const struct shape *hs[] = {&vocab259_shape, &vocab7_shape};
    setenv("EMU_GEMM_ALIGN", "16", 1);
    for (size_t i = 0; i < 2; i++) {
        seg_max = 96 * hs[i]->C;
        compare_fp32(hs[i]);
        compare_half(hs[i], DSL_BFLOAT16);
        compare_half(hs[i], DSL_FLOAT16);
    }
    seg_max = 700;
    unsetenv("EMU_GEMM_ALIGN");
}

/* ---- the fused attention's tiles and head sizes ---- */

/* compare_fp32 and compare_half run each micro batch twice (and compare_fp32 once more
 * on a second model object) and require the same gradient and loss bits */
TEST(cuda_gpt_attention_should_match_the_cpu_on_partial_tiles_at_head_sizes_64_and_48_twice_alike)
{
    compare_fp32(&head64_shape);
    compare_half(&head64_shape, DSL_BFLOAT16);
    compare_half(&head64_shape, DSL_FLOAT16);
    compare_fp32(&head48_shape);
}

/* The dk/dv kernel at head size 128 takes 74,240 bytes of shared memory per block
 * (model_gpt_attention.cu), above the 48 KiB that needs no opt-in: a device that allows
 * it (sm_80 and later) must match the CPU, one that does not (sm_75's 64 KiB) must
 * refuse the model and say both figures. */
TEST(cuda_gpt_attention_should_match_the_cpu_at_head_sizes_128_and_80_on_a_partial_tile_or_name_the_missing_shared_memory)
{
    int dev = -1, avail = 0;
    ASSERT(cudaGetDevice(&dev) == cudaSuccess);
    ASSERT(cudaDeviceGetAttribute(&avail, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) ==
           cudaSuccess);
    fprintf(stderr, "# device %d: %d bytes of shared memory per block with the opt-in\n", dev,
            avail);
    if (avail < 74240) {
        struct dsl_model_spec gs = spec_of(&head128_shape, DSL_FLOAT32, 1);
        struct dsl_model b;
        char err[DSL_ERR_LEN] = "", want[DSL_ERR_LEN];
        ASSERT_EQ(dsl_model_create_cuda(&b, &gs, err), DSL_ECONFIG);
        fprintf(stderr, "# %s\n", err);
        snprintf(want, sizeof(want), "head size 128 (dim 256 / 2 heads) needs 74240 bytes of "
                 "shared memory per block for the GPU attention; device %d allows %d", dev,
                 avail);
        ASSERT_CONTAINS(err, want);
        return;
    }
    compare_fp32(&head128_shape);
    compare_half(&head128x1_shape, DSL_BFLOAT16);
    compare_fp32(&head80_shape);
}

/* ---- the attention on tensor cores (bf16, fp16) ----
 *
 * DSL_GPT_ATTENTION=tensor makes the model take the tensor-core kernels or refuse, so a
 * pass below is theirs (bf16 on a device before sm_80 is refused and skipped with its
 * message); =scalar keeps the scalar kernels' 16-bit path covered. compare_half bounds
 * every gradient against the CPU GPT and runs the micro batch twice for the same bits;
 * the tensor-core kernels round P and dS to the 16-bit type on top of the scalar ones. */
static void with_attention(const char *kind, const struct shape *h, enum dsl_dtype dt)
{
    char err[DSL_ERR_LEN] = "";
    ASSERT(setenv("DSL_GPT_ATTENTION", kind, 1) == 0);
    struct dsl_model_spec gs = spec_of(h, dt, 1);
    struct dsl_model b;
    if (dsl_model_create_cuda(&b, &gs, err) < 0) {
        ASSERT(strcmp(kind, "tensor") == 0 && dt == DSL_BFLOAT16);
        ASSERT_CONTAINS(err, "tensor-core attention needs bf16 (sm_80+) or fp16 (sm_70+), "
                             "not bf16 on this device");
        fprintf(stderr, "# skipped: %s\n", err);
        ASSERT(unsetenv("DSL_GPT_ATTENTION") == 0);
        return;
    }
    dsl_model_release(&b);
    fprintf(stderr, "# attention kernels: %s, %s, head size %zu, context %zu\n", kind,
            dt == DSL_BFLOAT16 ? "bf16" : "fp16", h->C / h->NH, h->T);
    compare_half(h, dt);
    ASSERT(unsetenv("DSL_GPT_ATTENTION") == 0);
}

TEST(cuda_gpt_attention_on_tensor_cores_should_match_the_cpu_at_head_size_64_on_partial_tiles_twice_alike)
{
    with_attention("tensor", &head64_shape, DSL_BFLOAT16);
    with_attention("tensor", &head64_shape, DSL_FLOAT16);
    with_attention("scalar", &head64_shape, DSL_BFLOAT16);
}

TEST(cuda_gpt_attention_on_tensor_cores_should_match_the_cpu_at_head_sizes_128_80_and_20_twice_alike)
{
    with_attention("tensor", &head128x1_shape, DSL_BFLOAT16);
    with_attention("tensor", &head128x1_shape, DSL_FLOAT16);
    with_attention("tensor", &head80_shape, DSL_BFLOAT16);
    with_attention("tensor", &head20_shape, DSL_FLOAT16);
}

TEST(cuda_gpt_should_refuse_tensor_core_attention_in_fp32_and_an_unknown_attention_kind)
{
    char err[DSL_ERR_LEN] = "";
    struct dsl_model_spec gs = spec_of(&tiny_shape, DSL_FLOAT32, 1);
    struct dsl_model b;
    ASSERT(setenv("DSL_GPT_ATTENTION", "tensor", 1) == 0);
    ASSERT_EQ(dsl_model_create_cuda(&b, &gs, err), DSL_ECONFIG);
    fprintf(stderr, "# %s\n", err);
    ASSERT_CONTAINS(err, "DSL_GPT_ATTENTION=tensor: the tensor-core attention needs bf16 "
                         "(sm_80+) or fp16 (sm_70+), not fp32 on this device");
    ASSERT(setenv("DSL_GPT_ATTENTION", "fast", 1) == 0);
    ASSERT_EQ(dsl_model_create_cuda(&b, &gs, err), DSL_ECONFIG);
    ASSERT_CONTAINS(err, "gpt: DSL_GPT_ATTENTION 'fast' is none of auto, scalar, tensor");
    ASSERT(unsetenv("DSL_GPT_ATTENTION") == 0);
}

TEST(cuda_gpt_should_refuse_a_head_size_above_the_attention_kernels_128)
{
    const struct shape h = {1, 384, 2, 16, 256, 2}; /* head size 192 */
    struct dsl_model_spec gs = spec_of(&h, DSL_FLOAT32, 1);
    struct dsl_model b;
    char err[DSL_ERR_LEN] = "";
    ASSERT_EQ(dsl_model_create_cuda(&b, &gs, err), DSL_ECONFIG);
    fprintf(stderr, "# %s\n", err);
    ASSERT_CONTAINS(err, "head size 192 (dim 384 / 2 heads) is above the GPU attention's 128");
}

/* ---- the trainer at world 1 ---- */

static char text_path[64];

static void write_text(void)
{
    snprintf(text_path, sizeof(text_path), "/tmp/dsl_gpu_gpt_%d.txt", (int)getpid());
    FILE *f = fopen(text_path, "w");
    ASSERT(f != NULL);
    for (int i = 0; i < 400; i++)
        fprintf(f, "the quick brown fox %d jumps over the lazy dog. ", i % 17);
    ASSERT(fclose(f) == 0);
}

static void train(int gpu, enum dsl_dtype dt, size_t steps, double *loss, uint64_t *syncs)
{
    char err[DSL_ERR_LEN];
    struct dsl_comm *c;
    struct dsl_comm_opts co = {.backend = gpu ? "nccl" : "tcp", .deterministic = 1};
    unsetenv("WORLD_SIZE");
    unsetenv("RANK");
    if (dsl_comm_open_env(&c, &co, err) < 0)
        DSL_FAIL_("comm: %s", err);
    struct dsl_dataset tr, te;
    struct dsl_data_opts dopt = {.name = "text", .path = text_path, .context = tiny_shape.T,
                                 .vocab = tiny_shape.V, .val_fraction = 0.1, .seed = 5};
    if (dsl_data_load(&tr, &te, &dopt, err) < 0)
        DSL_FAIL_("data: %s", err);
    struct dsl_model_spec sp = spec_of(&tiny_shape, dt, gpu);
    sp.max_batch = 8;
    sp.seg_max = 2000;
    struct dsl_model m;
    if ((gpu ? dsl_model_create_cuda(&m, &sp, err) : dsl_model_create(&m, &sp, err)) < 0)
        DSL_FAIL_("model: %s", err);
    struct dsl_trainer t;
    struct dsl_trainer_opts o = {
        .dtype = dt, .micro_batch = 8, .grad_accum = 2, .zero_stage = 2,
        .bucket_elems = 3000, .overlap_comm = 1, .deterministic = 1, .grad_clip = 1.0f,
        .predivide = 1.0f, .seed = 11, .dev = gpu ? &gdev : NULL,
        .optim = {DSL_OPTIM_ADAM, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1, 0}};
    if (dsl_trainer_init(&t, &o, c, &m, err) < 0)
        DSL_FAIL_("trainer: %s", err);
    struct dsl_sampler s;
    ASSERT_OK(dsl_sampler_init(&s, tr.n, t.G, 3, 1, 0, err));
    for (size_t k = 0; k < steps; k++) {
        struct dsl_step_result res;
        if (dsl_trainer_step(&t, &tr, dsl_sampler_step(&s, k / s.steps_per_epoch,
                                                       k % s.steps_per_epoch),
                             0, &res, err) < 0)
            DSL_FAIL_("step %zu: %s", k, err);
        loss[k] = res.loss;
        syncs[k] = res.host_syncs;
    }
    double acc, tloss;
    ASSERT_OK(dsl_trainer_evaluate(&t, &te, &acc, &tloss, err));
    loss[steps] = tloss;
    dsl_sampler_release(&s);
    dsl_trainer_release(&t);
    world_release(&m, &tr, &te, c);
}

TEST(gpu_gpt_training_at_world_one_should_match_the_cpu_trainer_and_lower_the_loss)
{
    enum { STEPS = 12 };
    double lc[STEPS + 1], lg[STEPS + 1], lb[STEPS + 1];
    uint64_t sc[STEPS], sg[STEPS], sb[STEPS];
    write_text();
    train(0, DSL_FLOAT32, STEPS, lc, sc);
    train(1, DSL_FLOAT32, STEPS, lg, sg);
    train(1, DSL_BFLOAT16, STEPS, lb, sb);
    unlink(text_path);
    /* the loss stays on the device: one host wait per step (the trainer's) */
    for (size_t k = 0; k < STEPS; k++)
        if (sg[k] != 1 || sb[k] != 1)
            DSL_FAIL_("step %zu: %llu (fp32) and %llu (bf16) host synchronisations, expected 1",
                      k, (unsigned long long)sg[k], (unsigned long long)sb[k]);
    double ld = 0.0;
    for (size_t k = 0; k <= STEPS; k++) {
        double d = fabs(lg[k] - lc[k]) / fabs(lc[k]);
        ld = isnan(d) ? INFINITY : fmax(ld, d);
    }
    fprintf(stderr,
            "# trainer: loss %.4f -> %.4f on the GPU, %.4f -> %.4f on the CPU (max rel diff "
            "%.3g, bound 1e-3); validation %.4f vs %.4f\n",
            lg[0], lg[STEPS - 1], lc[0], lc[STEPS - 1], ld, lg[STEPS], lc[STEPS]);
    ASSERT(ld <= 1e-3);
    ASSERT(lg[STEPS - 1] < lg[0] - 0.5);
    /* bf16 compute with fp32 master weights: the CPU's fp32 losses within 3e-2 */
    double bd = 0.0;
    for (size_t k = 0; k <= STEPS; k++) {
        double d = fabs(lb[k] - lc[k]) / fabs(lc[k]);
        bd = isnan(d) ? INFINITY : fmax(bd, d);
    }
    fprintf(stderr, "# trainer bf16: loss %.4f -> %.4f (max rel diff to the CPU's fp32 %.3g, "
            "bound 3e-2)\n", lb[0], lb[STEPS - 1], bd);
    ASSERT(bd <= 3e-2);
    ASSERT(lb[STEPS - 1] < lb[0] - 0.5);
}

int main(int argc, char **argv)
{
    int r = gpu_test_open();
    return r ? r : gpu_test_close(RUN_TESTS(argc, argv));
}
