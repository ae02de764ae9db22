/*
 * Checkpoint glue of dstrain: the save hook of the training loop, resume, and the
 * `dstrain consolidate` subcommand, over the config module's checkpoint.h.
 *
 * Theory of operation. Saving is collective. Rank 0 prepares <dir>/<tag>.partial;
 * at stages 0-2 every rank gathers the full, unpadded optimizer state (ZeRO shards are
 * per-bucket pieces in memory, so an all-gather per bucket rebuilds the flat vectors)
 * and writes its dsl_ckpt_slice() of them; rank 0 also writes the parameters. At
 * stage 3 nothing is gathered: every rank writes the pieces it holds, parameters and
 * optimizer state, with where they go (a model too large for one rank never passes
 * through one; on a GPU the rank's fp32 shards are copied to the host first); with
 * stage3_gather_16bit_weights_on_model_save rank 0 then streams the shards, one
 * tensor at a time, into a 16-bit model file beside them. An all-reduce of
 * the failure flags then decides, on every rank alike, whether rank 0 commits (rename
 * + latest) or everyone reports the failure; a second one spreads the commit's
 * result. A failed save never touches the checkpoint `latest` names.
 *
 * The data position is the global step count, stored as "step"; the loss scaler's
 * state (lossscale.h, in every file's metadata as "lossscale") adds the number of
 * steps skipped on fp16 overflow, and step - skipped is the optimizer's step count
 * (Adam's bias correction) and the scheduler's position. Resume loads the full state
 * on every rank and re-cuts it for the current world size and stage, so a checkpoint
 * resumes at any world size; with the scaler restored too, a resumed fp16 run skips
 * and rescales exactly where the uninterrupted one would. A checkpoint without
 * "lossscale" (fp32, or written before loss scaling) resumes with none skipped and
 * the configured initial scale. Every file carries step, seed and lossscale; the loader
 * refuses files that fail their checksums or disagree on them (checkpoint.h), files
 * without any checksum unless dstrain.allow_unverified_checkpoint (then with a
 * warning), and values that are not finite always; a checkpoint of an older dstrain,
 * with only a crc32 of its data, resumes with a warning. A save that fails is given up
 * by every rank together, and rank 0 removes its partial directory.
 *
 * Which checkpoint: "latest" (what <dir>/latest names), a tag, or "auto": latest when
 * <dir>/latest exists, else a fresh start without a word. A launcher's restart
 * (DSLAUNCH_RESTART_COUNT or TORCHELASTIC_RESTART_COUNT above 0) with a checkpoint_dir
 * and no resume setting means "auto", so a restarted job goes on where it was. A rank
 * killed in the middle of a save leaves at most <tag>.partial (or a committed tag that
 * `latest` does not name yet): `latest` changes only after a complete, validated
 * checkpoint is in place, and the load validates it again, so "auto" never takes a
 * half-written one. Every rank must see the same answer (one shared directory).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "dslaunch/comm/comm.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/progress.h"
#include "dslaunch/device/device.h"
#include "dslaunch/common/xalloc.h"
#include "trainer_config.h"
#include "dslaunch/common/banned.h"

#define MAX_VIEWS DSL_MODEL_MAX_TENSORS

static const char *const adam_names[] = {"exp_avg", "exp_avg_sq"};
static const char *const sgd_names[] = {"momentum_buffer"};

/* named views of the model's flat buffer (dsl_model_tensor_list: PyTorch's names) */
static size_t make_views(const struct dsl_model_spec *sp, size_t in, size_t out,
                         struct dsl_ckpt_param *v, struct dsl_model_tensor *tl)
{
    struct dsl_model_spec s = *sp;
    s.in_dim = in;
    s.out_dim = out;
    size_t n = dsl_model_tensor_list(&s, tl, MAX_VIEWS);
    for (size_t k = 0; k < n; k++) {
        v[k].name = tl[k].name;
        v[k].offset = tl[k].off;
        v[k].ndim = tl[k].ndim;
        v[k].shape[0] = tl[k].shape[0];
        v[k].shape[1] = tl[k].shape[1];
    }
    return n;
}

static const char *const *state_names(const struct dsl_trainer *t, size_t *n)
{
    *n = dsl_optim_state_per_param(&t->o.optim);
    return t->o.optim.type == DSL_OPTIM_SGD ? sgd_names : adam_names;
}

/* all ranks agree on "did anyone fail" (MAX of the flags) */
static int agree(struct dsl_trainer *t, int failed)
{
    int32_t f = failed ? 1 : 0;
    int r = dsl_trainer_allreduce_host(t, &f, 1, DSL_INT32, DSL_MAX);
    return r < 0 ? r : f;
}

/* The checkpoint's own keys, the same in every file of the save. */
static void save_meta(const struct dsl_train_settings *s, const struct dsl_trainer *t,
                      struct dsl_strvec *meta)
{
    dsl_strvec_pushf(meta, "step=%" PRIu64, t->step);
    dsl_strvec_pushf(meta, "global_batch=%zu", t->G);
    dsl_strvec_pushf(meta, "zero_stage=%d", t->o.zero_stage);
    dsl_strvec_pushf(meta, "seed=%" PRIu64, t->o.seed);
    if (s->model.type && !strcmp(s->model.type, "gpt")) /* what `dstrain sample` builds */
        dsl_strvec_pushf(meta, "gpt=%zu,%zu,%zu,%zu,%zu", s->model.gpt.layers,
                         s->model.gpt.dim, s->model.gpt.heads, s->model.gpt.context,
                         t->model->out_dim);
    if (s->model.type && !strcmp(s->model.type, "gpt") && s->ro.token_unit &&
        !strcmp(s->ro.token_unit, "byte")) /* tokens are bytes, whatever the vocab */
        dsl_strvec_pushf(meta, "gpt_tokens=bytes");
    char ls[160];
    dsl_lossscale_format(&t->ls, ls, sizeof(ls));
    dsl_strvec_pushf(meta, "lossscale=%s", ls);
}

/* Stages 0-2: the full optimizer state and parameters gathered on every rank; rank 0
 * writes the model file, every rank its slice of the state. */
static int save_gathered(struct dsl_trainer *t, const char *dir, const char *tag,
                         const struct dsl_ckpt_param *views, size_t nv,
                         const struct dsl_strvec *meta, char *myerr)
{
    size_t nstate;
    const char *const *sn = state_names(t, &nstate);
    float *full = nstate ? malloc(nstate * t->P * sizeof(float)) : NULL, *params = NULL;
    int r;
    if (nstate && !full) {
        r = dsl_seterr(myerr, -ENOMEM, "checkpoint: cannot allocate the optimizer state");
    } else if ((r = dsl_trainer_gather_state(t, full, nstate, myerr)) >= 0) {
        /* the parameters in host memory (a copy: they may live on a GPU), fetched by
         * every rank: with mixed precision at ZeRO 1/2 the fp32 master is sharded and
         * fetching it is an all-gather; rank 0 writes them */
        params = malloc(t->P ? t->P * sizeof(float) : 1);
        if (!params)
            r = dsl_seterr(myerr, -ENOMEM, "checkpoint: cannot allocate the parameters");
        else if ((r = dsl_trainer_params_to_host(t, params, myerr)) >= 0 && t->rank == 0)
            r = dsl_ckpt_write_model(dir, tag, t->world, views, nv, params, t->P, meta, myerr);
        if (r >= 0) {
            size_t off, len;
            const float *slices[DSL_CKPT_MAX_STATE];
            dsl_ckpt_slice(t->P, t->rank, t->world, &off, &len);
            for (size_t i = 0; i < nstate; i++)
                slices[i] = full + i * t->P + off;
            r = dsl_ckpt_write_optim(dir, tag, t->rank, t->world, sn, slices, nstate, off,
                                     len, t->P, meta, myerr);
        }
    }
    free(full);
    free(params);
    return r;
}

/* Stage 3: every rank writes the pieces it holds (its parameter shard and optimizer
 * state, per bucket), nothing gathered from any other rank. */
static int save_zero3(struct dsl_trainer *t, const char *dir, const char *tag,
                      const struct dsl_ckpt_param *views, size_t nv,
                      const struct dsl_strvec *meta, char *myerr)
{
    size_t nstate, n = 0;
    const char *const *sn = state_names(t, &nstate);
    const float *slices[2] = {t->m, t->v};
    int r = dsl_trainer_sync(t, myerr);
    if (r < 0)
        return r;
    /* the pieces in shard order (bk[j].soff grows with j), as params, m and v hold them */
    size_t (*rg)[2] = dsl_xcalloc(t->nbk ? t->nbk : 1, sizeof(*rg));
    for (size_t j = 0; j < t->nbk; j++) {
        if (t->bk[j].plen == 0)
            continue;
        rg[n][0] = t->bk[j].lo + t->bk[j].poff;
        rg[n][1] = t->bk[j].plen;
        n++;
    }
    const float *params = t->master ? t->master : (const float *)t->params;
    float *host = NULL; /* GPU: the fp32 shards copied out, parameters then state */
    if (!t->dev->host_memory) {
        struct dsl_device *d = t->dev;
        const float *dev[3] = {params, t->m, t->v};
        size_t S = t->S ? t->S : 1;
        host = malloc((1 + nstate) * S * sizeof(float));
        if (!host)
            r = dsl_seterr(myerr, -ENOMEM, "cannot allocate %zu bytes to save the shard",
                           (1 + nstate) * S * sizeof(float));
        for (size_t i = 0; host && r >= 0 && i <= nstate && i < 3; i++)
            if ((r = d->ops->copy(d, host + i * S, dev[i], t->S * sizeof(float),
                                  DSL_COPY_D2H)) < 0)
                dsl_seterr(myerr, r, "copying the shard to the host: %s", d->err);
        params = host;
        for (size_t i = 0; host && i < nstate && i < 2; i++)
            slices[i] = host + (i + 1) * S;
    }
    if (r >= 0)
        r = dsl_ckpt_write_zero3(dir, tag, t->rank, t->world, views, nv, t->P,
                                 (const size_t(*)[2])rg, n, params, sn, slices, nstate, meta,
                                 myerr);
    free(host);
    free(rg);
    return r;
}

/* Stage 3 with stage3_gather_16bit_weights_on_model_save, rank 0, once every rank's
 * shards are in the partial directory: the 16-bit weights streamed from them (one
 * tensor at a time, never the whole model) into <tag>/model_16bit.safetensors. */
static int save_16bit(const struct dsl_train_settings *s, const char *dir, const char *tag,
                      char *myerr)
{
    struct dsl_ckpt c;
    char *part = dsl_xasprintf("%s/%s.partial", dir, tag);
    char *out = dsl_xasprintf("%s/" DSL_CKPT_16BIT_FILE, part);
    int r = dsl_ckpt_consolidate_zero3(&c, part, tag, out,
                                       s->cfg.fp16.enabled ? DSL_ST_F16 : DSL_ST_BF16, 0, myerr);
    dsl_ckpt_release(&c);
    free(out);
    free(part);
    return r;
}

static int save(void *ctx, struct dsl_trainer *t, const char *tag, char *err)
{
    struct dsl_train_settings *s = ctx;
    const char *dir = s->cfg.dstrain.checkpoint_dir;
    struct dsl_ckpt_param views[MAX_VIEWS];
    struct dsl_model_tensor names[MAX_VIEWS];
    size_t nv = make_views(&s->model, t->model->in_dim, t->model->out_dim, views, names);
    char myerr[DSL_ERR_LEN] = "";
    int r = 0, f, z3 = t->o.zero_stage == 3;
    struct dsl_strvec meta;
    dsl_strvec_init(&meta);

    if (t->rank == 0)
        r = dsl_ckpt_prepare(dir, tag, myerr);
    if ((f = agree(t, r < 0)) != 0)
        goto fail;
    save_meta(s, t, &meta);
    r = z3 ? save_zero3(t, dir, tag, views, nv, &meta, myerr)
           : save_gathered(t, dir, tag, views, nv, &meta, myerr);
    if ((f = agree(t, r < 0)) != 0)
        goto fail;
    if (z3 && s->cfg.zero.stage3_gather_16bit_weights_on_model_save && t->rank == 0)
        r = save_16bit(s, dir, tag, myerr);
    if (z3 && (f = agree(t, r < 0)) != 0)
        goto fail;
    if (t->rank == 0)
        r = dsl_ckpt_commit(dir, tag, t->world, myerr);
    if ((f = agree(t, r < 0)) != 0)
        goto fail;
    if (t->rank == 0)
        printf("dstrain: saved checkpoint '%s/%s'\n", dir, tag);
    dsl_strvec_release(&meta);
    return 0;
fail:
    /* every rank has given the save up (f > 0: all agreed), so nothing writes into the
     * partial directory any more: rank 0 removes it, rather than leave it to the next
     * save (when the agreement itself failed, a rank may still write: left alone) */
    if (f > 0 && t->rank == 0)
        dsl_ckpt_abort(dir, tag);
    dsl_strvec_release(&meta);
    if (f < 0)
        return dsl_seterr(err, f, "checkpoint '%s/%s': %s", dir, tag,
                          dsl_trainer_last_error(t));
    if (*myerr)
        return dsl_seterr(err, r < 0 ? r : DSL_ECHECKPOINT, "%s", myerr);
    return dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint '%s/%s' failed on another rank", dir,
                      tag);
}

/* What the load could not check (dsl_ckpt_caveat), said once: by rank 0 on resume,
 * by consolidate. */
static void warn_caveat(const struct dsl_ckpt *c)
{
    char why[DSL_ERR_LEN];
    if (dsl_ckpt_caveat(c, why, sizeof(why)))
        dsl_warn("%s", why);
}

/* The save in the progress record's phase: a save longer than the hang timeout is
   progress while it moves bytes, not a hang (common/progress.h). */
int dsl_train_save_hook(void *ctx, struct dsl_trainer *t, const char *tag, char *err)
{
    struct dsl_progress_rec *prog = dsl_progress_self(NULL);
    dsl_progress_set_phase(prog, DSL_PROGRESS_PHASE_SAVING);
    int r = save(ctx, t, tag, err);
    dsl_progress_set_phase(prog, DSL_PROGRESS_PHASE_NONE);
    return r;
}

/*
 * The scaler from the checkpoint's "lossscale" (absent: nothing to restore). A dynamic
 * scaler takes all of it (scale, hysteresis, window position, skipped), as DeepSpeed
 * loads its loss scaler; a static one, or none (fp32), keeps its scale and takes the
 * counters, so that step - skipped stays the optimizer's step count.
 */
static int restore_lossscale(struct dsl_trainer *t, const struct dsl_ckpt *c, char *err)
{
    const char *v = dsl_ckpt_meta(c, "lossscale");
    struct dsl_lossscale ls = t->ls;
    char why[DSL_ERR_LEN];
    if (!v)
        return 0;
    if (dsl_lossscale_restore(&ls, v, why) < 0)
        return dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint '%s': %s", c->path, why);
    if (ls.skipped > t->step)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "checkpoint '%s': %" PRIu64 " skipped steps of %" PRIu64, c->path,
                          ls.skipped, t->step);
    if (t->ls.dynamic) {
        t->ls = ls;
    } else {
        t->ls.cur_iter = ls.cur_iter;
        t->ls.last_overflow_iter = ls.last_overflow_iter;
        t->ls.skipped = ls.skipped;
    }
    return 0;
}

/*
 * resume "auto": 1 when <dir>/latest names a checkpoint, 0 when there is none yet.
 * Collective: every rank looks, and all must see the same (a checkpoint_dir that is
 * not shared between the nodes would make ranks resume from different states).
 */
static int auto_has_latest(struct dsl_trainer *t, const char *dir, char *err)
{
    char myerr[DSL_ERR_LEN] = "";
    int have = dsl_ckpt_has_latest(dir, myerr);
    /* MAX of (failed, have, -have): anyone failed, anyone has, everyone has */
    int32_t f[3] = {have < 0, have > 0, -(have > 0)};
    int r = dsl_trainer_allreduce_host(t, f, 3, DSL_INT32, DSL_MAX);
    if (r < 0)
        return dsl_seterr(err, r, "resume 'auto': %s", dsl_trainer_last_error(t));
    if (have < 0)
        return dsl_seterr(err, have, "resume 'auto': %s", myerr);
    if (f[0])
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "resume 'auto': another rank cannot read checkpoint_dir '%s'", dir);
    if (f[1] != -f[2])
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "resume 'auto': '%s/latest' exists for some ranks only; the "
                          "checkpoint_dir must be one directory every rank sees", dir);
    return f[1];
}

/*
 * Before the first save or load: is checkpoint_dir one directory every rank sees? Rank
 * 0 writes a probe file with a random name, every rank reads it back, and all agree.
 * On storage the nodes do not share, the job stops now, naming the directory and the
 * host that cannot see rank 0's file, instead of at the first save with a bare ENOENT
 * from some rank. Collective.
 */
static int check_shared_dir(struct dsl_trainer *t, const char *dir, char *err)
{
    char myerr[DSL_ERR_LEN] = "", hex[17];
    int32_t v[3] = {0, INT32_MIN, INT32_MIN}; /* rank 0 failed; its nonce (MAX wins) */
    if (t->rank == 0) {
        uint32_t raw[2] = {0, 0};
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
            raw[0] = (uint32_t)getpid(), raw[1] = (uint32_t)time(NULL);
        v[1] = (int32_t)(raw[0] & 0x7fffffffu);
        v[2] = (int32_t)(raw[1] & 0x7fffffffu);
        snprintf(hex, sizeof(hex), "%08" PRIx32 "%08" PRIx32, (uint32_t)v[1], (uint32_t)v[2]);
        v[0] = dsl_ckpt_probe_write(dir, hex, myerr) < 0;
    }
    int r = dsl_trainer_allreduce_host(t, v, 3, DSL_INT32, DSL_MAX);
    if (r < 0)
        return dsl_seterr(err, r, "checkpoint_dir '%s': %s", dir, dsl_trainer_last_error(t));
    if (v[0])
        return t->rank == 0 ? dsl_seterr(err, DSL_ECHECKPOINT, "%s", myerr)
                            : dsl_seterr(err, DSL_ECHECKPOINT,
                                         "rank 0 cannot write to checkpoint_dir '%s'", dir);
    snprintf(hex, sizeof(hex), "%08" PRIx32 "%08" PRIx32, (uint32_t)v[1], (uint32_t)v[2]);
    int sees = dsl_ckpt_probe_sees(dir, hex, myerr);
    int32_t w[1] = {sees == 1 ? -1 : t->rank}; /* the highest rank that does not see it */
    r = dsl_trainer_allreduce_host(t, w, 1, DSL_INT32, DSL_MAX);
    if (t->rank == 0)
        dsl_ckpt_probe_remove(dir, hex);
    if (r < 0)
        return dsl_seterr(err, r, "checkpoint_dir '%s': %s", dir, dsl_trainer_last_error(t));
    if (w[0] < 0)
        return 0;
    /* Every rank is about to fail, and the first to exit has the launcher stop the
     * others; rank 0 may finish the allreduce last, and stopped before the remove it
     * would leave its probe behind. So no rank returns before rank 0 removed it. */
    int32_t gate[1] = {0};
    r = dsl_trainer_allreduce_host(t, gate, 1, DSL_INT32, DSL_MAX);
    if (r < 0)
        return dsl_seterr(err, r, "checkpoint_dir '%s': %s", dir, dsl_trainer_last_error(t));
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    if (sees != 1)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "checkpoint_dir '%s' is not shared: this rank (host '%s') does not "
                          "see the file rank 0 wrote there%s%s; every node must see the same "
                          "directory, on a filesystem they share (docs/trainer.md)",
                          dir, host, sees < 0 ? ": " : "", sees < 0 ? myerr : "");
    return dsl_seterr(err, DSL_ECHECKPOINT,
                      "checkpoint_dir '%s' is not shared: rank %d does not see the file rank 0 "
                      "wrote there; every node must see the same directory, on a filesystem "
                      "they share (docs/trainer.md)",
                      dir, (int)w[0]);
}

/* "2 layers, dim 32, 4 heads, context 40, vocab 256" from the "gpt" metadata's
   layers, dim, heads, context, vocab */
static void gpt_shape(const size_t g[5], char *out, size_t len)
{
    snprintf(out, len, "%zu layers, dim %zu, %zu heads, context %zu, vocab %zu", g[0], g[1],
             g[2], g[3], g[4]);
}

/* the checkpoint holds the model being resumed: a GPT's shape is in its metadata, and
   shapes of equal parameter counts (other heads, context and vocab traded) would load */
static int check_model(const struct dsl_train_settings *s, const struct dsl_trainer *t,
                       const struct dsl_ckpt *c, char *err)
{
    const char *g = dsl_ckpt_meta(c, "gpt");
    int gpt = s->model.type && !strcmp(s->model.type, "gpt");
    size_t saved[5], mine[5] = {s->model.gpt.layers, s->model.gpt.dim, s->model.gpt.heads,
                                s->model.gpt.context, t->model->out_dim};
    char have[128], want[128];
    if (!g && !gpt)
        return 0;
    /* the metadata as written: the numbers, or as it is when it does not parse */
    int parsed = g && dsl_ckpt_meta_sizes(c, "gpt", saved, 5, NULL) == 0;
    if (parsed)
        gpt_shape(saved, have, sizeof(have));
    else if (g)
        snprintf(have, sizeof(have), "shape '%s'", g);
    if (!gpt)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "checkpoint '%s' holds a GPT of %s; the model is an MLP: resume "
                          "with 'dstrain.model.type' \"gpt\" and the checkpoint's shape",
                          c->path, have);
    gpt_shape(mine, want, sizeof(want));
    if (!g)
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "checkpoint '%s' holds no GPT (no \"gpt\" metadata: an MLP's "
                          "parameters); the model is a GPT of %s",
                          c->path, want);
    if (!parsed || memcmp(saved, mine, sizeof(mine)))
        return dsl_seterr(err, DSL_ECHECKPOINT,
                          "checkpoint '%s' holds a GPT of %s; the model is one of %s: resume "
                          "with the checkpoint's shape ('dstrain.model')",
                          c->path, have, want);
    return 0;
}

/* The checkpoint's whole state, re-cut for this trainer's stage and world. */
static int apply_whole(struct dsl_trainer *t, const struct dsl_ckpt *c, char *err)
{
    size_t nstate;
    const char *const *sn = state_names(t, &nstate);
    float *state = nstate ? dsl_xmalloc(nstate * t->P * sizeof(float)) : NULL;
    int r = 0;
    for (size_t i = 0; i < nstate && r == 0; i++) {
        const float *v = dsl_ckpt_state(c, sn[i]);
        if (!v)
            r = dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint '%s' has no optimizer state '%s'",
                           c->path, sn[i]);
        else
            memcpy(state + i * t->P, v, t->P * sizeof(float));
    }
    if (r == 0 && (r = dsl_trainer_params_from_host(t, c->params, err)) >= 0)
        r = dsl_trainer_scatter_state(t, state, nstate, err);
    free(state);
    return r;
}

/* Does the rank's saved shard hold exactly the pieces this trainer's shard holds? */
static int same_pieces(const struct dsl_trainer *t, const struct dsl_ckpt *c)
{
    size_t n = 0;
    if (c->shard_len != t->S)
        return 0;
    for (size_t j = 0; j < t->nbk; j++) {
        const struct dsl_bucket *b = &t->bk[j];
        if (b->plen == 0)
            continue;
        if (n >= c->nranges || c->ranges[n][0] != b->lo + b->poff || c->ranges[n][1] != b->plen)
            return 0;
        n++;
    }
    return n == c->nranges;
}

/* Stage 3 at the save's world, with the same pieces: the rank's own shard, as it is. */
static int apply_own(struct dsl_trainer *t, const struct dsl_ckpt *c, char *err)
{
    size_t nstate;
    const char *const *sn = state_names(t, &nstate);
    float *vecs[2] = {t->m, t->v};
    int r = dsl_trainer_sync(t, err);
    for (size_t i = 0; r >= 0 && i < nstate && i < 2; i++) {
        const float *v = dsl_ckpt_state(c, sn[i]);
        if (!v)
            return dsl_seterr(err, DSL_ECHECKPOINT, "checkpoint '%s' has no optimizer state "
                              "'%s'", c->path, sn[i]);
        memcpy(vecs[i], v, t->S * sizeof(float));
    }
    if (r < 0)
        return r;
    memcpy(t->params, c->params, t->S * sizeof(float));
    /* the gathered layers held the old parameters */
    return dsl_z3_invalidate(t);
}

/*
 * The checkpoint to resume. A stage 3 checkpoint at this world size, resumed at stage 3
 * in fp32 with the same bucket pieces, is read rank by rank: each rank only its own
 * files (dsl_ckpt_load_rank), all agreeing that every rank could; anything else is
 * loaded whole on every rank and re-cut.
 */
static int load_for_resume(struct dsl_trainer *t, struct dsl_ckpt *c, const char *dir,
                           const char *tag, unsigned flags, char *err)
{
    if (t->o.zero_stage == 3 && !t->master && t->dev->host_memory) {
        int r = dsl_ckpt_load_rank(c, dir, tag, t->rank, t->world, flags, t->P, err);
        int mine = r == 0 && same_pieces(t, c), f = agree(t, r < 0);
        /* every rank the same way: own shards only when each rank's are its pieces */
        int all = f == 0 ? agree(t, !mine) : 1;
        if (f < 0 || all < 0)
            return dsl_seterr(err, f < 0 ? f : all, "resume: %s", dsl_trainer_last_error(t));
        if (r < 0)
            return r;
        if (f > 0)
            return dsl_seterr(err, DSL_ECHECKPOINT,
                              "resume: another rank could not load its shard of the "
                              "checkpoint (its error says which file)");
        if (all == 0)
            return 0;
        dsl_ckpt_release(c);
    }
    return dsl_ckpt_load_for(c, dir, tag, flags, t->P, err);
}

static int resume(struct dsl_train_settings *s, struct dsl_trainer *t, char *err)
{
    const char *dir = s->cfg.dstrain.checkpoint_dir, *which = s->cfg.dstrain.resume;
    if (dir && *dir) {
        int r = check_shared_dir(t, dir, err);
        if (r < 0)
            return r;
        s->ro.save = dsl_train_save_hook;
        s->ro.save_ctx = s;
    }
    /* restarted by the launcher after a failure: go on from the last checkpoint */
    if (!which && dir && *dir && s->env.restart_count > 0)
        which = "auto";
    if (!which)
        return 0;
    if (!dir || !*dir)
        return dsl_seterr(err, DSL_ECONFIG, "resume '%s' needs a checkpoint_dir", which);
    if (!strcmp(which, "auto")) {
        int have = auto_has_latest(t, dir, err);
        if (have <= 0)
            return have; /* none yet: a fresh start */
        which = "latest";
    }
    struct dsl_ckpt c;
    struct dsl_ckpt_param views[MAX_VIEWS];
    struct dsl_model_tensor names[MAX_VIEWS];
    size_t nv = make_views(&s->model, t->model->in_dim, t->model->out_dim, views, names);
    unsigned flags = s->cfg.dstrain.allow_unverified_checkpoint ? DSL_CKPT_ALLOW_UNVERIFIED : 0;
    int r = load_for_resume(t, &c, dir, strcmp(which, "latest") ? which : NULL, flags, err);
    if (r < 0)
        goto out;
    if (t->rank == 0)
        warn_caveat(&c);
    if ((r = check_model(s, t, &c, err)) < 0 ||
        (r = dsl_ckpt_check_params(&c, views, nv, t->P, err)) < 0)
        goto out;
    uint64_t step, gb;
    if ((r = dsl_ckpt_meta_u64(&c, "step", &step, err)) < 0)
        goto out;
    if ((r = c.ranges ? apply_own(t, &c, err) : apply_whole(t, &c, err)) < 0)
        goto out;
    t->step = step;
    if ((r = restore_lossscale(t, &c, err)) < 0)
        goto out;
    if (dsl_ckpt_meta_u64(&c, "global_batch", &gb, NULL) == 0 && gb != t->G && t->rank == 0)
        dsl_warn("checkpoint '%s' was trained with global batch %" PRIu64 ", now %zu: the "
                 "data order continues by step, not by sample",
                 c.path, gb, t->G);
    if (t->rank == 0 && t->o.loss_scaling)
        printf("dstrain: resumed from '%s' at step %" PRIu64 " (saved at world size %d), "
               "loss scale %g, %" PRIu64 " steps skipped so far\n",
               c.path, step, c.saved_world, t->ls.cur_scale, t->ls.skipped);
    else if (t->rank == 0)
        printf("dstrain: resumed from '%s' at step %" PRIu64 " (saved at world size %d%s)\n",
               c.path, step, c.saved_world, c.ranges ? "; each rank read its own shard" : "");
    r = 0;
out:
    dsl_ckpt_release(&c);
    return r;
}

/*
 * Before the trainer is built: the global batch of the checkpoint the run will resume
 * (as resume() picks it), kept at this world size (dsl_train_config_keep_batch). Every
 * rank reads the same model file and decides alike; a checkpoint that does not load is
 * left for resume() to report, with the collective checks.
 */
int dsl_train_resume_batch(struct dsl_train_settings *s, int rank, char *err)
{
    const char *dir = s->cfg.dstrain.checkpoint_dir, *which = s->cfg.dstrain.resume;
    /* s->env: loaded by dsl_train_settings_verify() (its _place()) before this */
    if (!which && dir && *dir && s->env.restart_count > 0)
        which = "auto";
    if (!which || !dir || !*dir || s->cfg.given.train > 0)
        return 0;
    if (!strcmp(which, "auto")) {
        char e2[DSL_ERR_LEN];
        if (dsl_ckpt_has_latest(dir, e2) != 1)
            return 0;
        which = "latest";
    }
    struct dsl_ckpt c;
    char e3[DSL_ERR_LEN], note[512];
    unsigned flags = s->cfg.dstrain.allow_unverified_checkpoint ? DSL_CKPT_ALLOW_UNVERIFIED : 0;
    uint64_t gb;
    int r = 0;
    /* (a stage 3 checkpoint's header says it: no rank reads every shard for it) */
    if (dsl_ckpt_load_params(&c, dir, strcmp(which, "latest") ? which : NULL,
                             flags | DSL_CKPT_HEAD_ONLY, e3) < 0 ||
        dsl_ckpt_meta_u64(&c, "global_batch", &gb, NULL) < 0 || gb > DSL_CFG_MAX_BATCH)
        goto out;
    r = dsl_train_config_keep_batch(&s->cfg, (long)gb, c.saved_world, c.path, note,
                                    sizeof(note), err);
    if (r > 0) {
        s->to.grad_accum = (size_t)s->cfg.gradient_accumulation_steps;
        if (rank == 0)
            printf("dstrain: %s\n", note);
        r = 0;
    }
out:
    dsl_ckpt_release(&c);
    return r;
}

/* Loading, in the progress record's phase like a save. */
int dsl_train_resume(struct dsl_train_settings *s, struct dsl_trainer *t, char *err)
{
    struct dsl_progress_rec *prog = dsl_progress_self(NULL);
    dsl_progress_set_phase(prog, DSL_PROGRESS_PHASE_LOADING);
    int r = resume(s, t, err);
    dsl_progress_set_phase(prog, DSL_PROGRESS_PHASE_NONE);
    return r;
}

struct consolidate_args {
    char *tag, *out;
    int allow_unverified;
};

static const struct dsl_opt consolidate_opts[] = {
    {"tag", 0, DSL_OPT_STRING, offsetof(struct consolidate_args, tag), "TAG",
     "the checkpoint to read", "latest", 0, 0, NULL, 0, NULL},
    {"out", 0, DSL_OPT_STRING, offsetof(struct consolidate_args, out), "FILE",
     "the file to write", "<dir>/model.safetensors", 0, 0, NULL, 0, NULL},
    {"allow_unverified_checkpoint", 0, DSL_OPT_FLAG,
     offsetof(struct consolidate_args, allow_unverified), NULL,
     "read a checkpoint whose files carry no checksums", NULL, 0, 0, NULL, 0, NULL},
};
static const struct dsl_opt_parser consolidate_parser = {
    .prog = "dstrain consolidate",
    .opts = consolidate_opts,
    .nopts = sizeof(consolidate_opts) / sizeof(consolidate_opts[0]),
};

int dsl_train_consolidate_main(int argc, char **argv, char *err)
{
    struct consolidate_args a = {NULL, NULL, 0};
    struct dsl_strvec dirs;
    dsl_strvec_init(&dirs);
    static const char usage[] = "usage: dstrain consolidate <checkpoint dir> [--tag TAG] "
                                "[--out FILE] [--allow-unverified-checkpoint]";
    if (dsl_opt_help_if_asked(&consolidate_parser, usage, argc, argv, stdout))
        return 0;
    int r = dsl_opt_parse(&consolidate_parser, &a, argc, argv, &dirs, err);
    if (r == 0 && dirs.nr != 1)
        r = dsl_seterr(err, DSL_EUSAGE, "%s", usage);
    if (r == 0) {
        const char *dir = dirs.v[0], *tag = a.tag, *out = a.out;
        char *def = out ? NULL : dsl_xasprintf("%s/model.safetensors", dir);
        struct dsl_ckpt c;
        r = dsl_ckpt_consolidate(&c, dir, tag, out ? out : def,
                                 (a.allow_unverified ? DSL_CKPT_ALLOW_UNVERIFIED : 0) |
                                     DSL_CKPT_STEP_DIR,
                                 err);
        if (r >= 0) {
            warn_caveat(&c);
            printf("dstrain: wrote '%s'\n", out ? out : def);
        }
        dsl_ckpt_release(&c);
        free(def);
    }
    free(a.tag);
    free(a.out);
    dsl_strvec_release(&dirs);
    return r;
}
