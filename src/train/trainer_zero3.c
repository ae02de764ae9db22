/*
 * ZeRO stage 3's gathered layers (trainer.h): each rank keeps only its shard of the
 * parameters (t->params, S elements in shard order, as the gradient shard and the
 * optimizer state), and the model gets each layer whole through the sink's
 * layer()/unlayer() (model.h) just before it computes with it.
 *
 * Theory of operation. At stage 3 no bucket spans two layers (trainer_setup.c cuts
 * them at layer boundaries), so a layer is a run of whole buckets, and gathering it is
 * the stage 1/2 all-gather of those buckets: each bucket's piece is copied from the
 * shard to its place in a window and all-gathered in place. A gather is exact, so the
 * model computes with the bits every other stage has in its full parameter buffer;
 * the gradient goes the way of stage 2 (staging buckets reduce-scattered into the
 * shard), so every element is summed in the same order as at stages 0-2.
 *
 * Windows: two of the largest non-persistent layer's size (one when prefetch is off,
 * or when two would exceed stage3_max_live_parameters). layer(l, next) finds l in a
 * window (it was prefetched, or is still there from forward: a window's contents
 * stay valid until the parameters change), or gathers it into one that the model does
 * not hold; waits for it; then, with two windows, issues the gather of `next` into
 * the other one, where it runs on the comm's progress thread while l computes.
 * unlayer() only marks the window free: its contents are reused if the same layer is
 * asked for again before the next optimizer step (backward's first layer is
 * forward's last). A layer of at most stage3_param_persistence_threshold elements has
 * a whole copy of its own, gathered at its first use after each optimizer step.
 * Every rank asks for the same layers in the same order (the model's sequence is
 * fixed), so every rank issues the same collectives in the same order, interleaved
 * with the gradient reduce-scatters as backward issues them.
 *
 * Memory: t->mem.gathered counts the windows and the persistent copies: the live
 * working set on top of the (2 + 2 + 12) P/N (mixed precision) or 16 P/N (fp32)
 * model state.
 *
 * On a GPU the shard, the windows and the persistent copies are device memory, and
 * nothing here waits on the host: the piece's copy into a window is a device op on the
 * compute stream, the all-gather is ordered after that stream by the comm, and
 * dsl_comm_wait() makes the compute stream wait for it (nccl), so the model's kernels
 * queued after layer() read the gathered layer. A window is refilled only after
 * unlayer(): the gather that overwrites it is issued after the kernels that read it
 * were queued, and the comm orders it after them. The cuda-tcp test backend runs each
 * call to completion after a host wait for the compute stream, which is the same order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/device/device.h"
#include "dslaunch/train/trainer.h"
#include "trainer_mixed.h"
#include "dslaunch/common/banned.h"

int dsl_z3_setup(struct dsl_trainer *t, char *err)
{
    const struct dsl_model *m = t->model;
    int nl = 0;
    for (size_t i = 0; i < m->nsegs; i++)
        nl = m->segs[i].layer + 1 > nl ? m->segs[i].layer + 1 : nl;
    t->nzl = (size_t)nl;
    t->zl = dsl_xcalloc(t->nzl ? t->nzl : 1, sizeof(*t->zl));
    for (size_t l = 0; l < t->nzl; l++)
        t->zl[l].lo = (size_t)-1;
    for (size_t j = 0; j < t->nbk; j++) {
        const struct dsl_bucket *b = &t->bk[j];
        int ly = m->segs[b->seg_first].layer;
        if (ly < 0 || m->segs[b->seg_last].layer != ly)
            return dsl_seterr(err, DSL_ECONFIG, "ZeRO stage 3: bucket %zu spans layers", j);
        struct dsl_z3_layer *z = &t->zl[ly];
        if (z->lo == (size_t)-1) {
            z->bfirst = j;
            z->lo = b->lo;
            z->len = 0;
        }
        z->blast = j;
        z->lo = b->lo < z->lo ? b->lo : z->lo;
        z->len += b->len;
    }
    size_t loose = 0;
    t->win_elems = 0;
    for (size_t l = 0; l < t->nzl; l++) {
        struct dsl_z3_layer *z = &t->zl[l];
        if (z->lo == (size_t)-1)
            return dsl_seterr(err, DSL_ECONFIG, "ZeRO stage 3: layer %zu has no parameters", l);
        if (z->len <= t->o.z3_persist) {
            z->keep = dsl_trainer_coll_alloc(t, z->len * t->esz);
            if (!z->keep)
                return dsl_seterr(err, -ENOMEM, "cannot allocate %zu bytes for layer %zu",
                                  z->len * t->esz, l);
            t->mem.gathered += z->len * t->esz;
            continue;
        }
        if (z->len > t->o.z3_max_live)
            return dsl_seterr(err, DSL_ECONFIG,
                              "'zero_optimization.stage3_max_live_parameters' is %zu but layer "
                              "%zu has %zu parameters, and a layer is gathered whole: raise it "
                              "to at least %zu",
                              t->o.z3_max_live, l, z->len, z->len);
        loose++;
        t->win_elems = z->len > t->win_elems ? z->len : t->win_elems;
    }
    t->nwin = !loose ? 0
              : loose > 1 && t->o.z3_prefetch > 0 && 2 * t->win_elems <= t->o.z3_max_live
                  ? 2
                  : 1;
    for (int s = 0; s < 2; s++) {
        t->win_layer[s] = -1;
        t->win_req[s] = -1;
        t->win_held[s] = 0;
    }
    for (int s = 0; s < t->nwin; s++) {
        t->win[s] = dsl_trainer_coll_alloc(t, t->win_elems * t->esz);
        if (!t->win[s])
            return dsl_seterr(err, -ENOMEM, "cannot allocate %zu bytes for a gathered layer",
                              t->win_elems * t->esz);
        t->mem.gathered += t->win_elems * t->esz;
    }
    return 0;
}

void dsl_z3_release(struct dsl_trainer *t)
{
    for (int s = 0; s < 2; s++) {
        /* (a trainer of another stage, or one that failed before dsl_z3_setup, has
         * no windows, and its win_req is memset's 0, not -1) */
        if (t->win[s] && t->win_req[s] >= 0 && t->comm)
            (void)dsl_comm_wait(t->comm, t->win_req[s]);
        if (t->win[s])
            dsl_trainer_coll_free(t, t->win[s]);
        t->win[s] = NULL;
    }
    for (size_t l = 0; t->zl && l < t->nzl; l++)
        if (t->zl[l].keep)
            dsl_trainer_coll_free(t, t->zl[l].keep);
    free(t->zl);
    t->zl = NULL;
    t->nzl = 0;
}

/* Issue the all-gathers of layer l into dst (its whole range); *req: the last one */
static int gather_layer(struct dsl_trainer *t, size_t l, void *dst, int *req)
{
    const struct dsl_z3_layer *z = &t->zl[l];
    int r = 0;
    for (size_t j = z->bfirst; j <= z->blast && r >= 0; j++) {
        const struct dsl_bucket *b = &t->bk[j];
        void *at = dsl_mixed_el(t, dst, b->lo - z->lo);
        void *mine = dsl_mixed_el(t, at, b->poff);
        if ((r = dsl_mixed_copy(t, mine, dsl_mixed_el(t, t->params, b->soff), b->plen)) >= 0)
            r = dsl_comm_iallgather(t->comm, mine, at, b->len, t->gtype, req);
    }
    return r;
}

static int wait_req(struct dsl_trainer *t, int *req)
{
    if (*req < 0)
        return 0;
    double w0 = dsl_now();
    int r = dsl_comm_wait(t->comm, *req);
    t->gather_wait += dsl_now() - w0;
    *req = -1;
    return r;
}

static int slot_of_layer(const struct dsl_trainer *t, int l)
{
    for (int s = 0; s < t->nwin; s++)
        if (t->win_layer[s] == l)
            return s;
    return -1;
}

/* start gathering layer l into window s (waiting for whatever it was still receiving) */
static int fill_slot(struct dsl_trainer *t, int s, int l)
{
    int r = wait_req(t, &t->win_req[s]);
    t->win_layer[s] = -1;
    if (r >= 0 && (r = gather_layer(t, (size_t)l, t->win[s], &t->win_req[s])) >= 0)
        t->win_layer[s] = l;
    return r;
}

const float *dsl_z3_layer(void *ctx, int l, int next)
{
    struct dsl_trainer *t = ctx;
    struct dsl_z3_layer *z = &t->zl[l];
    void *out = z->keep ? z->keep : t->win[0];
    int r = 0, s = -1;
    if (t->comm_err)
        return out;
    if (z->keep) {
        int req = -1;
        if (!z->fresh && (r = gather_layer(t, (size_t)l, z->keep, &req)) >= 0 &&
            (r = wait_req(t, &req)) >= 0)
            z->fresh = 1;
    } else {
        s = slot_of_layer(t, l);
        if (s < 0) {
            /* a window the model does not hold, and rather not the one with `next` */
            s = t->nwin > 1 && (t->win_held[0] || t->win_layer[0] == next) ? 1 : 0;
            r = fill_slot(t, s, l);
        }
        if (r >= 0 && (r = wait_req(t, &t->win_req[s])) >= 0) {
            t->win_held[s] = 1;
            out = t->win[s];
        }
    }
    /* prefetch: the next layer into the other window while this one computes */
    if (r >= 0 && t->nwin > 1 && next >= 0 && next != l && !t->zl[next].keep &&
        slot_of_layer(t, next) < 0) {
        int o = s >= 0 ? 1 - s : t->win_held[0] ? 1 : 0;
        if (!t->win_held[o])
            r = fill_slot(t, o, next);
    }
    if (r < 0)
        t->comm_err = r;
    return out;
}

void dsl_z3_unlayer(void *ctx, int l)
{
    struct dsl_trainer *t = ctx;
    int s = slot_of_layer(t, l);
    if (s >= 0)
        t->win_held[s] = 0;
}

int dsl_z3_invalidate(struct dsl_trainer *t)
{
    int r = 0;
    for (int s = 0; s < t->nwin; s++) {
        int rs = wait_req(t, &t->win_req[s]);
        r = r < 0 ? r : rs;
        t->win_layer[s] = -1;
        t->win_held[s] = 0;
    }
    for (size_t l = 0; l < t->nzl; l++)
        t->zl[l].fresh = 0;
    return r;
}
