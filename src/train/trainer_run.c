/*
 * The training loop of dstrain: steps, progress lines, evaluation, metrics,
 * checkpoint hooks and the signal stop.
 *
 * Theory of operation. Every rank runs the same loop over global steps; the data
 * position is the optimizer step count (epoch = step / steps_per_epoch), so a run
 * resumed from a checkpoint at step k sees exactly the batches an uninterrupted run
 * would. A signal only sets a flag; the flag travels with the per-step loss reduction
 * (dsl_trainer_step), so all ranks agree on the step after which they stop, save (with
 * save_on_signal) and exit with DSL_ECANCELED. Evaluation and saving are collective
 * and happen at step counts every rank computes alike. Rank 0 alone prints (stdout)
 * and writes the metrics file; other ranks print only errors.
 *
 * fp16 loss scaling: a step skipped on gradient overflow is still a step of the loop
 * (its batch is consumed, it is printed, evaluation and checkpoints count it), as in
 * DeepSpeed, whose global step advances on a skipped step; rank 0 reports each skip
 * with the old and new scale, progress lines and metrics carry "loss_scale" (the scale
 * the step ran with) and "skipped" (skipped steps so far), and the summary the total.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/comm/comm.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/dtype.h"
#include "dslaunch/common/gpuprof.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/progress.h"
#include "dslaunch/device/blascore.h"
#include "dslaunch/common/log.h"
#include "dslaunch/train/trainer.h"
#include "gputime.h"
#include "monitor.h"
#include "dslaunch/common/banned.h"

int dsl_trainer_report_memory(struct dsl_trainer *t, FILE *metrics, char *err)
{
    enum { NV = 8 };
    const struct dsl_mem_report *m = &t->mem;
    uint64_t mine[NV] = {m->params, m->grads,       m->optim,         m->buckets,
                         m->accum,  m->shard_elems, m->padding_elems, m->gathered};
    size_t W = (size_t)t->world;
    int32_t *all = calloc(2 * NV * W, sizeof(int32_t));
    if (!all)
        return dsl_seterr(err, -ENOMEM, "out of memory");
    int32_t *me = all + (size_t)t->rank * 2 * NV;
    for (int i = 0; i < NV; i++) {
        me[2 * i] = (int32_t)(mine[i] >> 32);
        me[2 * i + 1] = (int32_t)(uint32_t)mine[i];
    }
    int r = dsl_trainer_allgather_host(t, all, 2 * NV * W, DSL_INT32);
    if (r < 0) {
        free(all);
        return dsl_seterr(err, r, "memory report: %s", dsl_trainer_last_error(t));
    }
    if (t->rank == 0) {
        double f = dsl_zero_state_formula(t->o.zero_stage, t->P, t->world,
                                          dsl_optim_state_per_param(&t->o.optim), t->esz);
        printf("%s: model %zu params, ZeRO stage %d, %d ranks, %zu buckets; %s model-state "
               "formula %.0f bytes + buckets + accumulation%s\n",
               "dstrain", t->P, t->o.zero_stage, t->world, t->nbk,
               t->gtype == DSL_FLOAT16    ? "fp16 with fp32 master weights"
               : t->gtype == DSL_BFLOAT16 ? "bf16 with fp32 master weights"
                                          : "fp32",
               f, t->o.zero_stage == 3 ? " + gathered layers" : "");
        for (size_t k = 0; k < W; k++) {
            uint64_t v[NV];
            for (int i = 0; i < NV; i++)
                v[i] = (uint64_t)(uint32_t)all[k * 2 * NV + 2 * (size_t)i] << 32 |
                       (uint32_t)all[k * 2 * NV + 2 * (size_t)i + 1];
            uint64_t tot = v[0] + v[1] + v[2] + v[3] + v[4] + v[7];
            char gath[48] = "";
            if (t->o.zero_stage == 3)
                snprintf(gath, sizeof(gath), " gathered %" PRIu64, v[7]);
            printf("dstrain: rank %zu model-state bytes %" PRIu64 " (params %" PRIu64
                   " grads %" PRIu64 " optimizer %" PRIu64 " buckets %" PRIu64
                   " accumulation %" PRIu64 "%s; shard %" PRIu64 " elements, padding %" PRIu64
                   ")\n",
                   k, tot, v[0], v[1], v[2], v[3], v[4], gath, v[5], v[6]);
            if (metrics)
                fprintf(metrics,
                        "{\"type\":\"memory\",\"rank\":%zu,\"stage\":%d,\"world\":%d,"
                        "\"nparams\":%zu,\"total\":%" PRIu64 ",\"params\":%" PRIu64
                        ",\"grads\":%" PRIu64 ",\"optimizer\":%" PRIu64
                        ",\"buckets\":%" PRIu64 ",\"accumulation\":%" PRIu64
                        ",\"shard_elems\":%" PRIu64 ",\"padding_elems\":%" PRIu64
                        ",\"gathered\":%" PRIu64 "}\n",
                        k, t->o.zero_stage, t->world, t->P, tot, v[0], v[1], v[2], v[3],
                        v[4], v[5], v[6], v[7]);
        }
        fflush(stdout);
    }
    free(all);
    return 0;
}

/* the final fp32 parameters, raw (--save-params), written by rank 0. Every rank calls
 * this: with mixed precision at ZeRO 1/2 the fp32 master is sharded, and fetching it
 * (dsl_trainer_params_to_host) is an all-gather. */
static int write_params(struct dsl_trainer *t, const char *path, char *err)
{
    float *p = malloc(t->P ? t->P * sizeof(float) : 1);
    if (!p)
        return dsl_seterr(err, -ENOMEM, "cannot allocate %zu bytes for the parameters",
                          t->P * sizeof(float));
    int r = dsl_trainer_params_to_host(t, p, err);
    if (r < 0 || t->rank != 0) {
        free(p);
        return r;
    }
    FILE *pf = fopen(path, "wb");
    int bad = !pf || fwrite(p, sizeof(float), t->P, pf) != t->P;
    if (pf && fclose(pf) != 0)
        bad = 1;
    free(p);
    if (bad)
        return dsl_seterr(err, -EIO, "cannot write parameters to '%s'", path);
    return 0;
}

/*
 * Bytes per step: the comm's counter over the whole run, less what evaluation and
 * checkpoints sent, divided by the steps. A step's own delta is no good for that: the
 * parameter all-gathers of stages 1/2 are issued at its end and sent by the comm's
 * progress thread afterwards, partly inside the next step and partly not. So every
 * piece of comm work between steps first waits for the steps' collectives
 * (dsl_trainer_sync, which it would do anyway) and is then counted apart, in *other.
 */
static int between_steps(struct dsl_trainer *t, uint64_t *mark, char *err)
{
    int r = dsl_trainer_sync(t, err);
    *mark = dsl_comm_bytes_sent(t->comm);
    return r;
}

static int save_ckpt(struct dsl_trainer *t, const struct dsl_run_opts *ro, uint64_t *other,
                     char *err)
{
    char tag[64];
    uint64_t c0;
    int r = between_steps(t, &c0, err);
    if (r < 0)
        return r;
    snprintf(tag, sizeof(tag), "global_step%" PRIu64, t->step);
    r = ro->save(ro->save_ctx, t, tag, err);
    *other += dsl_comm_bytes_sent(t->comm) - c0;
    return r;
}

/* Seconds as "M:SS" or "H:MM:SS", for the progress line. */
static void fmt_hms(double sec, char *out, size_t len)
{
    if (!(sec >= 0.0) || sec > 3.6e8)
        sec = 0.0;
    unsigned long s = (unsigned long)(sec + 0.5);
    if (s >= 3600)
        snprintf(out, len, "%lu:%02lu:%02lu", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(out, len, "%lu:%02lu", s / 60, s % 60);
}

/* x for the metrics file: JSON has no NaN or infinity, so those are null */
static const char *jnum(char *buf, size_t len, double x)
{
    if (isfinite(x))
        snprintf(buf, len, "%.6g", x);
    else
        snprintf(buf, len, "null");
    return buf;
}

/* the evaluation at the current step, its line (rank 0) and its metrics record */
static int eval_report(struct dsl_trainer *t, const struct dsl_dataset *test, FILE *mf,
                       uint64_t spe, const char *unit, size_t limit, double *acc,
                       double *tloss, uint64_t *bytes_other, char *err)
{
    uint64_t c0;
    int r;
    if ((r = between_steps(t, &c0, err)) < 0 ||
        (r = dsl_trainer_evaluate_n(t, test, limit, acc, tloss, err)) < 0)
        return r;
    *bytes_other += dsl_comm_bytes_sent(t->comm) - c0;
    if (t->rank == 0 && t->model->tokens_per_sample) /* per token: in nats and bits */
        printf("eval step %" PRIu64 " epoch %.2f val_loss %.4f nats/%s %.4f bits/%s "
               "last-position accuracy %.4f\n",
               t->step, (double)t->step / (double)spe, *tloss, unit, *tloss / log(2.0), unit,
               *acc);
    else if (t->rank == 0)
        printf("eval step %" PRIu64 " epoch %.2f test_acc %.4f test_loss %.4f\n", t->step,
               (double)t->step / (double)spe, *acc, *tloss);
    if (t->rank == 0) {
        char a[32], l[32];
        if (mf)
            fprintf(mf, "{\"type\":\"eval\",\"step\":%" PRIu64 ",\"test_acc\":%s,"
                    "\"test_loss\":%s}\n",
                    t->step, jnum(a, sizeof(a), *acc), jnum(l, sizeof(l), *tloss));
        fflush(stdout);
    }
    return 0;
}

/* One scalar to DeepSpeed's monitors at x = the samples trained so far. Rank 0 alone
 * writes, so a failure cannot stop rank 0 alone (the others would wait for it in the
 * next collective): it is a warning naming the file, and the monitors stop. */
static void monitor_put(struct dsl_monitor *mon, const struct dsl_trainer *t, const char *tag,
                        double v)
{
    char e[DSL_ERR_LEN];
    if ((mon->csv_dir || mon->tb) && isfinite(v) &&
        dsl_monitor_scalar(mon, tag, v, t->step * t->G, e) < 0) {
        dsl_warn("%s; the monitors stop, training goes on", e);
        dsl_monitor_close(mon);
    }
}

/* What the loop carries from step to step (dsl_trainer_run) */
struct run {
    struct dsl_trainer *t;
    const struct dsl_run_opts *ro;
    const struct dsl_dataset *train, *test;
    struct dsl_run_summary *sum;
    struct dsl_sampler smp;
    struct dsl_monitor mon;
    FILE *mf; /* the metrics file (rank 0), or NULL */
    uint64_t spe, total, eval_every; /* steps per epoch, in all, between evaluations */
    uint64_t first, saved_at;         /* the step the run started at, and last saved */
    uint64_t bytes0, bytes_other;     /* the comm's counter at the start; sent between steps */
    double t_start, t_eval, t_save, t_print, last_save;
    uint64_t print_step; /* the step of the last progress line */
    double brk[5];       /* step-time split since the last progress line */
    double acc, tloss;   /* the last evaluation */
    size_t tpsample;     /* a language model's tokens per sample, else 0 */
    const char *unit;
    size_t eval_n; /* eval_iters: the test samples each evaluation reads; 0: all */
};

static int run_eval(struct run *u, char *err)
{
    return eval_report(u->t, u->test, u->mf, u->spe, u->unit, u->eval_n, &u->acc, &u->tloss,
                       &u->bytes_other, err);
}

/* the metrics file, the memory report and the monitors */
static int run_open(struct run *u, char *err)
{
    struct dsl_trainer *t = u->t;
    const struct dsl_run_opts *ro = u->ro;
    int r;
    if (ro->metrics_path && t->rank == 0) {
        u->mf = fopen(ro->metrics_path, t->step ? "a" : "w");
        if (!u->mf)
            return dsl_seterr(err, -errno, "cannot write metrics '%s': %s", ro->metrics_path,
                              strerror(errno));
        /* a record per write: a run killed mid-training leaves whole lines, and a
           reader following the file sees each step as it ends */
        setvbuf(u->mf, NULL, _IOLBF, 0);
    }
    if ((r = dsl_trainer_report_memory(t, u->mf, err)) < 0)
        return r;
    if (t->rank == 0 && (ro->csv_monitor || ro->tensorboard)) {
        char e[DSL_ERR_LEN];
        if (dsl_monitor_open(&u->mon, ro->csv_monitor, ro->tensorboard, e) < 0)
            dsl_warn("%s; no monitor writes, training goes on", e);
    }
    return 0;
}

/* the run's length and evaluation size, said on rank 0; a checkpoint at or past the end */
static int run_plan(struct run *u, char *err)
{
    struct dsl_trainer *t = u->t;
    const struct dsl_run_opts *ro = u->ro;
    u->spe = u->smp.steps_per_epoch;
    u->total = ro->steps ? ro->steps : ro->epochs * u->spe;
    u->eval_every = ro->eval_interval ? ro->eval_interval : u->spe;
    u->first = t->step;
    u->saved_at = UINT64_MAX;
    u->bytes0 = dsl_comm_bytes_sent(t->comm);
    u->t_start = u->t_print = dsl_now();
    u->print_step = t->step;
    u->acc = u->tloss = NAN;
    u->tpsample = t->model->tokens_per_sample;
    u->unit = ro->token_unit ? ro->token_unit : "token";
    if (t->rank == 0)
        printf("dstrain: %" PRIu64 " steps (%" PRIu64 " per epoch), global batch %zu = "
               "micro %zu x accumulation %zu x %d ranks, starting at step %" PRIu64 "\n",
               u->total, u->spe, t->G, t->o.micro_batch, t->o.grad_accum, t->world, t->step);
    /* eval_iters: a bounded evaluation, the same first samples every time (so that
       evaluations compare), eval_iters global batches of them */
    if (ro->eval_iters && u->test->n && ro->eval_iters <= SIZE_MAX / t->G &&
        ro->eval_iters * t->G < u->test->n) {
        u->eval_n = (size_t)ro->eval_iters * t->G;
        if (t->rank == 0)
            printf("dstrain: each evaluation on the first %zu of %zu test samples "
                   "(dstrain.eval_iters %" PRIu64 " x global batch %zu)\n",
                   u->eval_n, u->test->n, ro->eval_iters, t->G);
    }
    /* save_interval_minutes: rank 0's clock asks, the step's reduction tells every rank */
    u->last_save = dsl_now();
    if (t->step > u->total)
        /* resumed past the end: the steps were lowered by mistake, or the wrong
           checkpoint_dir; training back to an earlier step cannot be done */
        return dsl_seterr(err, DSL_ECONFIG,
                          "the checkpoint is at step %" PRIu64 " but the run ends at step "
                          "%" PRIu64 " (%s): it is past the end; raise the steps above %" PRIu64
                          " to go on, or resume an earlier checkpoint (--resume TAG)",
                          t->step, u->total, ro->steps ? "dstrain.steps" : "dstrain.epochs",
                          t->step);
    if (t->step == u->total) {
        /* resumed exactly at the end (a finished run started again, e.g. a restart):
           nothing to do; say so, and evaluate the checkpoint so that the summary's
           validation figures are its own; the summary has no training loss (no nan) */
        if (t->rank == 0)
            printf("dstrain: the checkpoint is at step %" PRIu64 " and the run ends at step "
                   "%" PRIu64 " (%s): nothing to train; raise the steps to go on\n",
                   t->step, u->total, ro->steps ? "dstrain.steps" : "dstrain.epochs");
        double e0 = dsl_now();
        int r = run_eval(u, err);
        if (r < 0)
            return r;
        u->t_eval += dsl_now() - e0;
    }
    return 0;
}

/* the step's times into the progress line's split and the summary; its scalars to the
 * monitors, and a skipped step said (rank 0) */
static void run_account(struct run *u, const struct dsl_step_result *res)
{
    struct dsl_trainer *t = u->t;
    struct dsl_run_summary *sum = u->sum;
    u->brk[0] += res->t_compute;
    u->brk[1] += res->t_reduce;
    u->brk[2] += res->t_small;
    u->brk[3] += res->t_optim;
    u->brk[4] += res->t_gather;
    sum->t_compute += res->t_compute;
    sum->t_reduce += res->t_reduce;
    sum->t_small += res->t_small;
    sum->t_optim += res->t_optim;
    sum->t_gather += res->t_gather;
    sum->final_loss = res->loss;
    if (t->rank == 0) { /* DeepSpeed's automatically monitored scalars */
        monitor_put(&u->mon, t, "Train/Samples/train_loss", res->loss);
        monitor_put(&u->mon, t, "Train/Samples/lr", (double)res->lr);
        if (t->o.loss_scaling)
            monitor_put(&u->mon, t, "Train/Samples/loss_scale", res->loss_scale);
    }
    if (res->skipped && t->rank == 0) {
        printf("dstrain: step %" PRIu64 ": gradient overflow, step skipped; loss scale "
               "%g -> %g\n",
               t->step, res->loss_scale, res->next_scale);
        fflush(stdout);
    }
}

/* rank 0: the progress line every steps_per_print steps, and the step's metrics record */
static void run_print(struct run *u, const struct dsl_step_result *res, uint64_t epoch)
{
    struct dsl_trainer *t = u->t;
    const struct dsl_run_opts *ro = u->ro;
    double now = dsl_now();
    int print = ro->steps_per_print && t->step % ro->steps_per_print == 0;
    if (t->rank != 0 || !(print || u->mf))
        return;
    double sps = (double)((t->step - u->print_step) * t->G) / (now - u->t_print);
    char fp16[96] = "", fp16j[96] = "";
    if (t->o.loss_scaling) {
        snprintf(fp16, sizeof(fp16), " loss_scale %g skipped %" PRIu64, res->loss_scale,
                 t->ls.skipped);
        snprintf(fp16j, sizeof(fp16j), ",\"loss_scale\":%.17g,\"skipped\":%" PRIu64,
                 res->loss_scale, t->ls.skipped);
    }
    if (!t->dev->host_memory) { /* GPU: the host waits of this step (goal: 1) */
        size_t l = strlen(fp16), lj = strlen(fp16j);
        snprintf(fp16 + l, sizeof(fp16) - l, " host_syncs %" PRIu64, res->host_syncs);
        snprintf(fp16j + lj, sizeof(fp16j) - lj, ",\"host_syncs\":%" PRIu64, res->host_syncs);
    }
    if (print) {
        /* the ETA from the mean time per step so far, evaluations included */
        char el[32], eta[32];
        double spent = now - u->t_start;
        double left = spent / (double)(t->step - u->first) * (double)(u->total - t->step);
        fmt_hms(spent, el, sizeof(el));
        fmt_hms(left, eta, sizeof(eta));
        char tps[48] = ""; /* a language model: its throughput in tokens */
        if (u->tpsample)
            snprintf(tps, sizeof(tps), " tokens/s %.0f", sps * (double)u->tpsample);
        printf("step %" PRIu64 "/%" PRIu64 " epoch %" PRIu64 " loss %.4f lr %.4e%s "
               "samples/s %.1f%s elapsed %s eta %s\n",
               t->step, u->total, epoch + 1, res->loss, (double)res->lr, fp16, sps, tps, el,
               eta);
    }
    if (u->mf) {
        char jl[32], ja[32], jr[32], jg[32];
        fprintf(u->mf,
                "{\"type\":\"step\",\"step\":%" PRIu64 ",\"epoch\":%" PRIu64
                ",\"loss\":%s,\"train_acc\":%s,\"lr\":%s,\"grad_norm\":%s%s,"
                "\"bytes_sent\":%" PRIu64 ",\"time\":%.6f}\n",
                t->step, epoch + 1, jnum(jl, sizeof(jl), res->loss),
                jnum(ja, sizeof(ja), res->accuracy), jnum(jr, sizeof(jr), res->lr),
                jnum(jg, sizeof(jg), res->grad_norm), fp16j, res->bytes_sent,
                now - u->t_start);
    }
    if (print && ro->wall_clock_breakdown) {
        double k = 1e3 / (double)(t->step - u->print_step);
        printf("time per step (ms): forward+backward %.2f reduce-wait %.2f "
               "small-reductions %.2f optimizer %.2f all-gather %.2f\n",
               u->brk[0] * k, u->brk[1] * k, u->brk[2] * k, u->brk[3] * k, u->brk[4] * k);
    }
    if (print) /* GPU time per phase from CUDA events (GPU timers on) */
        dsl_gputime_report(u->mf, t->step, 0);
    if (print) {
        for (int i = 0; i < 5; i++)
            u->brk[i] = 0.0;
        u->t_print = now;
        u->print_step = t->step;
        fflush(stdout);
    }
}

static int run_save(struct run *u, char *err)
{
    double s0 = dsl_now();
    int r = save_ckpt(u->t, u->ro, &u->bytes_other, err);
    if (r < 0)
        return r;
    u->saved_at = u->t->step;
    u->t_save += dsl_now() - s0;
    return 0;
}

/* One step of the loop with what follows it: progress, evaluation, checkpoints; 1 when
 * the ranks agreed to stop */
static int run_step(struct run *u, struct dsl_progress_rec *prog, char *err)
{
    struct dsl_trainer *t = u->t;
    const struct dsl_run_opts *ro = u->ro;
    struct dsl_step_result res = {0};
    uint64_t epoch = t->step / u->spe;
    const size_t *idx = dsl_sampler_step(&u->smp, epoch, (size_t)(t->step % u->spe));
    int want_stop = ro->stop_flag && *ro->stop_flag ? DSL_STEP_STOP : 0, r;
    if (t->rank == 0 && ro->save && ro->save_minutes > 0 &&
        dsl_now() - u->last_save >= ro->save_minutes * 60.0)
        want_stop |= DSL_STEP_SAVE;
    if ((r = dsl_trainer_step(t, u->train, idx, want_stop, &res, err)) < 0)
        return r;
    dsl_progress_step(prog, t->step);
    if (t->rank == 0)
        dsl_gputime_step(t->step); /* DSTRAIN_COUNT_LAUNCHES=1 */
    run_account(u, &res);
    run_print(u, &res, epoch);
    if (t->step % u->eval_every == 0 || t->step == u->total) {
        double e0 = dsl_now();
        if ((r = run_eval(u, err)) < 0)
            return r;
        u->t_eval += dsl_now() - e0;
        u->t_print += dsl_now() - e0;
        if (t->rank == 0)
            monitor_put(&u->mon, t, "Eval/Samples/test_loss", u->tloss);
    }
    if (ro->save && ((ro->save_interval && t->step % ro->save_interval == 0) || res.save)) {
        if ((r = run_save(u, err)) < 0)
            return r;
        u->last_save = dsl_now();
    }
    if (!res.stop)
        return 0;
    u->sum->stopped = 1;
    if (ro->save_on_signal && ro->save && u->saved_at != t->step && (r = run_save(u, err)) < 0)
        return r;
    return 1;
}

/* the summary's numbers once the loop is over */
static void run_sum(struct run *u, uint64_t bytes)
{
    struct dsl_trainer *t = u->t;
    struct dsl_run_summary *sum = u->sum;
    const struct dsl_run_opts *ro = u->ro;
    sum->steps = t->step;
    sum->skipped = t->ls.skipped;
    sum->wall_s = dsl_now() - u->t_start;
    sum->train_s = sum->wall_s - u->t_eval - u->t_save;
    sum->eval_s = u->t_eval;
    sum->save_s = u->t_save;
    sum->setup_s =
        ro->t_process > 0 && ro->t_process < u->t_start ? u->t_start - ro->t_process : 0.0;
    sum->samples_per_s =
        sum->train_s > 0 ? (double)((t->step - u->first) * t->G) / sum->train_s : 0.0;
    sum->test_acc = u->acc;
    sum->test_loss = u->tloss;
    sum->tokens_per_s = sum->samples_per_s * (double)u->tpsample;
    sum->bytes_per_step = t->step > u->first ? bytes / (t->step - u->first) : 0;
    if (t->step > u->first) {
        double k = 1e3 / (double)(t->step - u->first); /* ms per step */
        sum->t_compute *= k;
        sum->t_reduce *= k;
        sum->t_small *= k;
        sum->t_optim *= k;
        sum->t_gather *= k;
    }
}

/* rank 0: the summary's metrics record and lines */
static void run_report(const struct run *u)
{
    struct dsl_trainer *t = u->t;
    const struct dsl_run_summary *sum = u->sum;
    /* GPU timers: every step's events complete (one host wait, at the end of the run),
     * so the final report covers the whole run */
    if (dsl_gpuprof_enabled() && !t->dev->host_memory)
        (void)t->dev->ops->synchronize(t->dev);
    dsl_gputime_report(u->mf, sum->steps, 1);
    char fp16[96] = "", fp16j[96] = "";
    if (t->o.loss_scaling) {
        snprintf(fp16, sizeof(fp16), " skipped %" PRIu64 " loss_scale %g", sum->skipped,
                 t->ls.cur_scale);
        snprintf(fp16j, sizeof(fp16j), ",\"skipped\":%" PRIu64 ",\"loss_scale\":%.17g",
                 sum->skipped, t->ls.cur_scale);
    }
    char jl[32], ja[32], jt[32];
    if (u->mf)
        fprintf(u->mf,
                "{\"type\":\"summary\",\"steps\":%" PRIu64 ",\"wall_s\":%.3f,"
                "\"samples_per_s\":%.1f,\"tokens_per_s\":%.1f,\"final_loss\":%s,"
                "\"test_acc\":%s,\"test_loss\":%s,"
                "\"bytes_per_step\":%" PRIu64 ",\"stopped\":%d%s,\"ms_compute\":%.3f,"
                "\"ms_reduce_wait\":%.3f,\"ms_small\":%.3f,\"ms_optim\":%.3f,"
                "\"ms_gather\":%.3f,\"setup_s\":%.3f,\"train_s\":%.3f,\"eval_s\":%.3f,"
                "\"save_s\":%.3f,\"blas\":\"%s\"}\n",
                sum->steps, sum->wall_s, sum->samples_per_s, sum->tokens_per_s,
                jnum(jl, sizeof(jl), sum->final_loss), jnum(ja, sizeof(ja), sum->test_acc),
                jnum(jt, sizeof(jt), sum->test_loss), sum->bytes_per_step, sum->stopped,
                fp16j, sum->t_compute, sum->t_reduce, sum->t_small, sum->t_optim,
                sum->t_gather, sum->setup_s, sum->train_s, sum->eval_s, sum->save_s,
                dsl_blas_core());
    printf("dstrain: comm bytes sent per step (rank 0): %" PRIu64 "\n", sum->bytes_per_step);
    printf("dstrain: ms per step (rank 0): forward+backward %.2f, gradient reduction "
           "wait %.2f, loss/norm reduction %.2f, optimizer %.2f, parameter all-gather "
           "%.2f\n",
           sum->t_compute, sum->t_reduce, sum->t_small, sum->t_optim, sum->t_gather);
    printf("dstrain: wall time by phase (rank 0): setup %.2f s, training %.2f s, "
           "evaluation %.2f s, checkpoints %.2f s\n",
           sum->setup_s, sum->train_s, sum->eval_s, sum->save_s);
    /* no step ran (a finished run resumed): no training loss to show */
    char fl[48] = "";
    if (t->step > u->first)
        snprintf(fl, sizeof(fl), " final_loss %.4f", sum->final_loss);
    if (u->tpsample)
        printf("summary: steps %" PRIu64 " wall %.2f s tokens/s %.0f%s val_loss %.4f "
               "nats/%s %.4f bits/%s%s%s\n",
               sum->steps, sum->wall_s, sum->tokens_per_s, fl, u->tloss, u->unit,
               u->tloss / log(2.0), u->unit, fp16, sum->stopped ? " (stopped by signal)" : "");
    else
        printf("summary: steps %" PRIu64 " wall %.2f s samples/s %.1f%s test_acc "
               "%.4f%s%s\n",
               sum->steps, sum->wall_s, sum->samples_per_s, fl, sum->test_acc, fp16,
               sum->stopped ? " (stopped by signal)" : "");
    fflush(stdout);
}

/* after the loop: the final checkpoint, the parameters (--save-params), the summary */
static int run_finish(struct run *u, char *err)
{
    struct dsl_trainer *t = u->t;
    const struct dsl_run_opts *ro = u->ro;
    int r;
    if (!u->sum->stopped && ro->save && u->saved_at != t->step && t->step > u->first) {
        double s0 = dsl_now();
        if ((r = save_ckpt(t, ro, &u->bytes_other, err)) < 0)
            return r;
        u->t_save += dsl_now() - s0;
    }
    if ((r = dsl_trainer_sync(t, err)) < 0)
        return r;
    uint64_t bytes = dsl_comm_bytes_sent(t->comm) - u->bytes0 - u->bytes_other;
    if (ro->params_out && (r = write_params(t, ro->params_out, err)) < 0)
        return r;
    run_sum(u, bytes);
    if (t->rank == 0)
        run_report(u);
    return u->sum->stopped ? DSL_ECANCELED : 0;
}

int dsl_trainer_run(struct dsl_trainer *t, const struct dsl_run_opts *ro,
                    const struct dsl_dataset *train, const struct dsl_dataset *test,
                    struct dsl_run_summary *sum, char *err)
{
    struct run u = {.t = t, .ro = ro, .train = train, .test = test, .sum = sum};
    int r = dsl_sampler_init(&u.smp, train->n, t->G, ro->seed, ro->shuffle, ro->drop_last,
                             err);
    if (r < 0)
        return r;
    memset(sum, 0, sizeof(*sum));
    sum->final_loss = NAN; /* no step run (a finished run resumed): no training loss */
    if ((r = run_open(&u, err)) < 0 || (r = run_plan(&u, err)) < 0)
        goto out;
    /* the step in the progress record (common/progress.h): one store per step */
    struct dsl_progress_rec *prog = dsl_progress_self(NULL);
    dsl_progress_step(prog, t->step);
    while (t->step < u.total && (r = run_step(&u, prog, err)) == 0)
        ;
    if (r >= 0)
        r = run_finish(&u, err);
out:
    dsl_monitor_close(&u.mon);
    if (u.mf)
        fclose(u.mf);
    dsl_sampler_release(&u.smp);
    return r;
}
