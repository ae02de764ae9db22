/*
 * Evaluation: the test set's loss and accuracy over every rank, with the parameters
 * the last step left (dsl_trainer_sync() first finishes its updates and all-gathers).
 * Each rank evaluates its dsl_shard_of() piece of the first `limit` samples in batches
 * of the model's max_batch, and one allreduce sums the counts, so every rank returns
 * the same numbers. At stage 3 the layers come whole from the shards, as in a step;
 * their all-gathers are collectives, so every rank makes as many passes as rank 0 (the
 * largest piece): a rank whose piece ran out first passes sample 0 again for the
 * gathers alone and counts nothing of it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/progress.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/train/trainer.h"
#include "dslaunch/common/banned.h"

int dsl_trainer_evaluate(struct dsl_trainer *t, const struct dsl_dataset *d, double *acc,
                         double *loss, char *err)
{
    return dsl_trainer_evaluate_n(t, d, 0, acc, loss, err);
}

int dsl_trainer_evaluate_n(struct dsl_trainer *t, const struct dsl_dataset *d, size_t limit,
                           double *acc, double *loss, char *err)
{
    struct dsl_model *m = t->model;
    size_t off, len, bs = m->max_batch;
    size_t total = limit && limit < d->n ? limit : d->n;
    int r0 = dsl_trainer_sync(t, err);
    if (r0 < 0)
        return r0;
    dsl_shard_of(total, t->rank, t->world, &off, &len);
    size_t off0, len0; /* rank 0's piece, the largest */
    dsl_shard_of(total, 0, t->world, &off0, &len0);
    size_t passes = ((t->o.zero_stage == 3 ? len0 : len) + bs - 1) / bs;
    /* a lazy split (token data read from its runs, data.h) is gathered a chunk at a
     * time into scratch; the chunks are the same as over rows, so are the bits */
    float *xs = NULL;
    int32_t *ys = NULL;
    size_t *ix = NULL;
    if (!d->x && passes) {
        xs = malloc(bs * d->dim * sizeof(float));
        if (!xs)
            return dsl_seterr(err, -ENOMEM, "evaluation: cannot allocate %zu windows of %zu",
                              bs, d->dim);
        ys = dsl_xcalloc(bs, sizeof(int32_t));
        ix = dsl_xmalloc(bs * sizeof(size_t));
    }
    double correct = 0.0, lsum = 0.0;
    int r = 0;
    for (size_t k = 0; k < passes; k++) {
        size_t i = k * bs;
        /* past this rank's piece (stage 3 only): sample 0 again, for the gathers */
        int idle = i >= len;
        size_t n = idle ? 1 : len - i < bs ? len - i : bs, first = idle ? 0 : off + i;
        const float *x = d->x ? d->x + first * d->dim : xs;
        const int32_t *y = d->x ? d->y + first : ys;
        if (!d->x) {
            for (size_t j = 0; j < n; j++)
                ix[j] = first + j;
            dsl_dataset_gather(d, ix, n, xs, ys);
        }
        struct dsl_model_stats st = {0}; /* a model that knows nothing of deferred leaves it 0 */
        if (t->o.zero_stage == 3) {
            struct dsl_grad_sink src = {.layer = dsl_z3_layer, .unlayer = dsl_z3_unlayer,
                                        .ctx = t};
            r = m->ops->evaluate_src(m, &src, x, y, n, &st);
            if (r >= 0 && t->comm_err) {
                r = dsl_trainer_comm_fail(t, t->comm_err, "evaluation's parameter all-gather", err);
                break;
            }
        } else {
            r = m->ops->evaluate(m, (const float *)t->params, x, y, n, &st);
        }
        if (r < 0) {
            dsl_seterr(err, r, "evaluation failed%s%s", *m->err ? ": " : "", m->err);
            break;
        }
        if (!idle) {
            correct += (double)st.correct;
            lsum += st.loss_sum;
        }
        dsl_progress_beat(dsl_progress_self(NULL)); /* a long evaluation is progress too */
    }
    free(xs);
    free(ys);
    free(ix);
    if (r < 0)
        return r;
    float v[2] = {(float)correct, (float)lsum};
    r = dsl_trainer_allreduce_host(t, v, 2, DSL_FLOAT32, DSL_SUM);
    if (r < 0)
        return dsl_trainer_comm_fail(t, r, "evaluation reduction", err);
    *acc = (double)v[0] / (double)total;
    *loss = (double)v[1] / (double)total;
    return 0;
}
