/*
 * The CPU GPT's backward pass (model_gpt.c has the theory of operation): the tensors in
 * the reverse of the flat order, each finished tensor's segments handed to the sink;
 * every sum over rows in row order per column, so any thread count gives the same bits.
 * The weights come layer by layer through gpt_layer() (stage 3: held one at a time).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/halfvec.h"
#include "model_gpt_cpu.h"
#include "dslaunch/common/banned.h"

/* ---- backward pieces -------------------------------------------------------------- */

/* o (the gradient of gelu's output, in place) *= gelu'(x) */
VEC_CLONES static void gelu_back_range(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    for (size_t i = lo; i < hi; i++) {
        float x = j->x[i];
        float u = GELU_S * (x + 0.044715f * x * x * x);
        float th = fast_tanh(u);
        float sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) + x * 0.5f * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
        j->o[i] *= g;
    }
}

/* column sums of dY [N, n] in row order */
struct colsum_job {
    float *db;
    const float *dy;
    size_t N, n;
};

VEC_CLONES static void colsum_cols(void *arg, size_t lo, size_t hi)
{
    const struct colsum_job *j = arg;
    float *db = j->db;
    memset(db + lo, 0, (hi - lo) * sizeof(float));
    for (size_t i = 0; i < j->N; i++) {
        const float *r = j->dy + i * j->n;
        for (size_t c = lo; c < hi; c++)
            db[c] += r[c];
    }
}

static void colsum(float *db, const float *dy, size_t N, size_t n)
{
    struct colsum_job j = {db, dy, N, n};
    par_cols(n, colsum_cols, &j);
}

/* dres (+)= the LayerNorm input's gradient per row */
VEC_CLONES static void ln_back_rows(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    size_t C = j->C;
    for (size_t i = lo; i < hi; i++) {
        const float *x = j->x + i * C, *dy = j->y + i * C;
        float m = j->b[i], s = j->o2[i];
        float la[LANES] = {0}, lb[LANES] = {0};
        size_t c0 = 0;
        for (; c0 + LANES <= C; c0 += LANES)
            for (size_t l = 0; l < LANES; l++) {
                size_t c = c0 + l;
                float dn = j->w[c] * dy[c];
                la[l] += dn;
                lb[l] += dn * (x[c] - m) * s;
            }
        for (size_t l = 0; c0 < C; c0++, l++) {
            float dn = j->w[c0] * dy[c0];
            la[l] += dn;
            lb[l] += dn * (x[c0] - m) * s;
        }
        float a = lanes_fold(la) / (float)C, bb = lanes_fold(lb) / (float)C;
        float *dx = j->o + i * C;
        for (size_t c = 0; c < C; c++) {
            float dn = j->w[c] * dy[c];
            dx[c] += (dn - a - (x[c] - m) * s * bb) * s;
        }
    }
}

/* LayerNorm's parameter gradients: per column a sum over the rows in row order (x: the
 * input, w: dy, b: mean, y: rstd, o: gw, o2: gb), columns lo..hi */
VEC_CLONES static void ln_params_cols(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    size_t C = j->C;
    float *gw = j->o, *gb = j->o2;
    memset(gw + lo, 0, (hi - lo) * sizeof(float));
    memset(gb + lo, 0, (hi - lo) * sizeof(float));
    for (size_t i = 0; i < j->T; i++) {
        const float *xi = j->x + i * C, *di = j->w + i * C;
        float m = j->b[i], s = j->y[i];
        for (size_t c = lo; c < hi; c++) {
            gw[c] += (xi[c] - m) * s * di[c];
            gb[c] += di[c];
        }
    }
}

/* LayerNorm backward: gw, gb (by columns, each in row order) and dx += (by rows) */
static void ln_backward(struct gpt *p, float *dx, float *gw, float *gb, const float *dy,
                        const float *x, const float *w, const float *mean, const float *rstd,
                        size_t N)
{
    size_t C = p->L.C;
    struct job jp = {.p = p, .x = x, .w = dy, .b = mean, .y = rstd, .o = gw, .o2 = gb, .C = C,
                     .T = N};
    par_cols(C, ln_params_cols, &jp);
    struct job j = {.p = p, .x = x, .y = dy, .w = w, .b = mean, .o = dx, .o2 = (float *)(uintptr_t)rstd, .C = C};
    par(N, ln_back_rows, &j);
}

/* attention backward of one (sample, head) pair per index: datty -> dqkv, in the
 * forward's row tiles; dK and dV by column tiles [u0, u1), whose rows t >= u0 are the
 * only ones with unmasked entries there */
VEC_CLONES static void attn_bwd_pairs(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    const struct gpt *p = j->p;
    size_t T = p->L.T, C = p->L.C, NH = p->L.NH, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    int iT = (int)T, ihs = (int)hs, i3C = (int)(3 * C), iC = (int)C;
    for (size_t bh = lo; bh < hi; bh++) {
        size_t b = bh / NH, h = bh % NH;
        const float *q = j->x + b * T * 3 * C + h * hs, *k = q + C, *v = q + 2 * C;
        const float *P = j->w + bh * T * T, *dy = j->y + b * T * C + h * hs;
        float *dP = j->o2 + bh * T * T;
        float *dq = j->o + b * T * 3 * C + h * hs, *dk = dq + C, *dv = dq + 2 * C;
        for (size_t r0 = 0; r0 < T; r0 += ATT_TILE) {
            size_t r1 = r0 + ATT_TILE < T ? r0 + ATT_TILE : T;
            int m = (int)(r1 - r0), n = (int)r1, kk = (int)(T - r0);
            /* dV rows r0..r1 from P's columns r0..r1 over rows r0..T */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, ihs, kk, 1.0f,
                        P + r0 * T + r0, iT, dy + r0 * C, iC, 0.0f, dv + r0 * 3 * C, i3C);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, ihs, 1.0f, dy + r0 * C,
                        iC, v, i3C, 0.0f, dP + r0 * T, iT);
            for (size_t t = r0; t < r1; t++) {
                const float *pr = P + t * T;
                float *dr = dP + t * T, dot = lanes_dot(pr, dr, 0.0f, t + 1);
                for (size_t u = 0; u <= t; u++)
                    dr[u] = pr[u] * (dr[u] - dot);
                for (size_t u = t + 1; u < r1; u++)
                    dr[u] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, ihs, n, scale,
                        dP + r0 * T, iT, k, i3C, 0.0f, dq + r0 * 3 * C, i3C);
        }
        /* dK needs every row tile's dS first */
        for (size_t r0 = 0; r0 < T; r0 += ATT_TILE) {
            size_t r1 = r0 + ATT_TILE < T ? r0 + ATT_TILE : T;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(r1 - r0), ihs,
                        (int)(T - r0), scale, dP + r0 * T + r0, iT, q + r0 * 3 * C, i3C, 0.0f,
                        dk + r0 * 3 * C, i3C);
        }
    }
}

/* hand tensor ti's gradient, whole in src, to the sink segment by segment */
static void deliver(struct gpt *p, const struct dsl_grad_sink *sink, size_t ti,
                    const float *src)
{
    const struct dsl_gpt_tensor *t = &p->L.t[ti];
    for (size_t s = t->seg0; s < t->seg0 + t->nseg; s++) {
        const struct dsl_model_seg *sg = &p->m->segs[s];
        float *dst = sink->dest(sink->ctx, s);
        const float *from = src + (sg->off - t->off);
        if (p->s.g32)
            dsl_hv_narrow(p->dtype == DSL_BFLOAT16, (uint16_t *)(void *)dst, from, sg->len);
        else
            memcpy(dst, from, sg->len * sizeof(float));
        sink->done(sink->ctx, s);
    }
}

/* a projection's weight gradient A^T dY ([rows, cols]) straight into the sink, row
 * block by row block (A: N x rows activations, dY: N x cols) */
static void deliver_weight(struct gpt *p, const struct dsl_grad_sink *sink, size_t ti,
                           const float *A, const float *dY, size_t N)
{
    const struct dsl_gpt_tensor *t = &p->L.t[ti];
    dsl_gemm_carry_reset(&p->s.carry);
    for (size_t s = t->seg0; s < t->seg0 + t->nseg; s++) {
        const struct dsl_model_seg *sg = &p->m->segs[s];
        size_t r0 = (sg->off - t->off) / t->cols, nr = sg->len / t->cols;
        float *dst = sink->dest(sink->ctx, s);
        float *c = p->s.g32 ? p->s.g32 : dst;
        /* rows r0.. of the whole gradient's product (cpugemm.h): the same bits
         * whatever the segment size */
        struct dsl_gemm g = {.ta = CblasTrans, .tb = CblasNoTrans, .m = t->rows,
                             .n = t->cols, .k = N, .a = A, .lda = t->rows, .b = dY,
                             .ldb = t->cols, .alpha = 1.0f, .beta = 0.0f, .by_rows = 1,
                             .bf16 = p->s.b16};
        dsl_gemm_rows(&g, r0, nr, c, t->cols, &p->s.carry);
        if (p->s.g32)
            dsl_hv_narrow(p->dtype == DSL_BFLOAT16, (uint16_t *)(void *)dst, c, sg->len);
        sink->done(sink->ctx, s);
    }
}

/* the embeddings' gradients, columns lo..hi: dres's rows (j->T of them) into their
 * position's and token's rows of dwpe (zeroed first) and dwte (holding the head's
 * part), in row order per column */
VEC_CLONES static void embed_back_cols(void *arg, size_t lo, size_t hi)
{
    const struct job *j = arg;
    struct gpt *p = j->p;
    size_t C = j->C, T = p->L.T;
    for (size_t t = 0; t < T; t++)
        memset(p->dwpe + t * C + lo, 0, (hi - lo) * sizeof(float));
    for (size_t i = 0; i < j->T; i++) {
        const float *d = p->dres + i * C;
        float *pe = p->dwpe + (i % T) * C, *te = p->dwte + (size_t)p->inp[i] * C;
        for (size_t c = lo; c < hi; c++) {
            pe[c] += d[c];
            te[c] += d[c];
        }
    }
}

void dsl_gpt_cpu_backward(struct gpt *p, const float *wp, size_t B,
                          const struct dsl_grad_sink *sink)
{
    const struct dsl_gpt_layout *L = &p->L;
    size_t T = L->T, C = L->C, N = B * T, nL = L->L;
    float *gw = p->gsmall, *gb = p->gsmall2;
    /* ln_f: dC holds d lnf from the head. At stage 3 each layer is taken again for
     * its weights, from ln_f down to block 0, each naming the one below as next; the
     * embeddings' gradients need no parameter */
    memset(p->dres, 0, N * C * sizeof(float));
    const float *last = nL ? p->h[nL - 1].res3 : p->enc;
    size_t lf = GPT_LAYER_LNF(nL);
    const float *wf = gpt_layer(p, wp, sink, lf, GPT_LAYER_BLOCK((int)nL - 1));
    ln_backward(p, p->dres, gw, gb, p->dC, last, GPT_AT(p, wf, lf, GPT_LNF_W(nL)), p->lnfm,
                p->lnfr, N);
    gpt_unlayer(sink, lf);
    deliver(p, sink, GPT_LNF_B(nL), gb);
    deliver(p, sink, GPT_LNF_W(nL), gw);
    for (size_t l = nL; l-- > 0;) {
        struct gpt_block *h = &p->h[l];
        const float *res = l ? p->h[l - 1].res3 : p->enc;
        size_t ly = GPT_LAYER_BLOCK(l);
        const float *wl = gpt_layer(p, wp, sink, ly, l ? (int)ly - 1 : -1);
#define W(k) GPT_AT(p, wl, ly, GPT_BLOCK(l, k))
#define TI(k) GPT_BLOCK(l, k)
        /* the MLP's output projection: dres is the gradient of res3 */
        colsum(gb, p->dres, N, C);
        deliver(p, sink, TI(GPT_FCPROJ_B), gb);
        deliver_weight(p, sink, TI(GPT_FCPROJ_W), h->fchg, p->dres, N);
        gemm(p, CblasNoTrans, CblasTrans, N, 4 * C, C, 1.0f, p->dres, C, W(GPT_FCPROJ_W), C, 0.0f,
             p->d4C, 4 * C, NULL, 0);
        struct job jg = {.p = p, .x = h->fch, .o = p->d4C};
        par(N * 4 * C, gelu_back_range, &jg);
        /* the MLP's input projection */
        colsum(gb, p->d4C, N, 4 * C);
        deliver(p, sink, TI(GPT_FC_B), gb);
        deliver_weight(p, sink, TI(GPT_FC_W), h->ln2, p->d4C, N);
        gemm(p, CblasNoTrans, CblasTrans, N, C, 4 * C, 1.0f, p->d4C, 4 * C, W(GPT_FC_W), 4 * C,
             0.0f, p->dC, C, NULL, 0);
        ln_backward(p, p->dres, gw, gb, p->dC, h->res2, W(GPT_LN2_W), h->ln2m, h->ln2r, N);
        deliver(p, sink, TI(GPT_LN2_B), gb);
        deliver(p, sink, TI(GPT_LN2_W), gw);
        /* attention's output projection: dres is now the gradient of res2 */
        colsum(gb, p->dres, N, C);
        deliver(p, sink, TI(GPT_PROJ_B), gb);
        deliver_weight(p, sink, TI(GPT_PROJ_W), h->atty, p->dres, N);
        gemm(p, CblasNoTrans, CblasTrans, N, C, C, 1.0f, p->dres, C, W(GPT_PROJ_W), C, 0.0f, p->dC,
             C, NULL, 0);
        struct job ja = {.p = p, .x = h->qkv, .w = h->att, .y = p->dC, .o = p->d3C,
                         .o2 = p->datt};
        dsl_cpupool_for(B * L->NH, 1, attn_bwd_pairs, &ja);
        colsum(gb, p->d3C, N, 3 * C);
        deliver(p, sink, TI(GPT_QKV_B), gb);
        deliver_weight(p, sink, TI(GPT_QKV_W), h->ln1, p->d3C, N);
        gemm(p, CblasNoTrans, CblasTrans, N, C, 3 * C, 1.0f, p->d3C, 3 * C, W(GPT_QKV_W), 3 * C,
             0.0f, p->dC, C, NULL, 0);
        ln_backward(p, p->dres, gw, gb, p->dC, res, W(GPT_LN1_W), h->ln1m, h->ln1r, N);
        gpt_unlayer(sink, ly);
        deliver(p, sink, TI(GPT_LN1_B), gb);
        deliver(p, sink, TI(GPT_LN1_W), gw);
#undef W
#undef TI
    }
    /* the embeddings: position rows summed over the samples, token rows scattered into
     * the head's part of wte's gradient, both in row order */
    struct job je = {.p = p, .C = C, .T = N};
    par_cols(C, embed_back_cols, &je);
    deliver(p, sink, GPT_WPE, p->dwpe);
    deliver(p, sink, GPT_WTE, p->dwte);
}

