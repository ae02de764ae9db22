/*
 * The model registry of dstrain: dsl_model_create() picks the CPU implementation by
 * spec->type ("mlp": model_mlp.c, "gpt": model_gpt.c), dsl_model_tensor_list() the
 * names of its tensors, and the calls every model shares (release, threads).
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/device/cpupool.h"
#include "dslaunch/device/cpugemm.h"
#include "dslaunch/model/model.h"
#include "model_gpt_impl.h"
#include "model_mlp_impl.h"
#include "dslaunch/common/banned.h"

int dsl_model_create(struct dsl_model *m, const struct dsl_model_spec *spec, char *err)
{
    if (spec->dtype != DSL_FLOAT32 && spec->dtype != DSL_FLOAT16 &&
        spec->dtype != DSL_BFLOAT16)
        return dsl_seterr(err, DSL_ECONFIG, "unsupported model dtype %d", (int)spec->dtype);
    char why[200];
    if (spec->gemm_bf16 && !dsl_gemm_bf16_supported(why, sizeof(why))) {
        memset(m, 0, sizeof(*m));
        return dsl_seterr(err, DSL_ENOTSUP, "no bf16 products on the CPU: %s", why);
    }
    if (spec->type && !strcmp(spec->type, "gpt"))
        return dsl_gpt_create(m, spec, err);
    if (spec->type && !strcmp(spec->type, "mlp"))
        return dsl_mlp_create(m, spec, err);
    memset(m, 0, sizeof(*m));
    return dsl_seterr(err, DSL_ECONFIG, "unknown model type '%s' (known: mlp, gpt)",
                      spec->type ? spec->type : "");
}

size_t dsl_model_tensor_list(const struct dsl_model_spec *spec, struct dsl_model_tensor *t,
                             size_t max)
{
    if (spec->type && !strcmp(spec->type, "gpt"))
        return dsl_gpt_tensors(spec, t, max);
    return dsl_mlp_tensors(spec, t, max);
}

int dsl_model_next_logits(struct dsl_model *m, const float *params, const int32_t *tokens,
                          size_t n, float *logits)
{
    if (!m->ops || strcmp(m->ops->name, "gpt") != 0 || m->on_device)
        return dsl_seterr(m->err, DSL_ENOTSUP, "model '%s' is not a language model on the CPU",
                          m->ops ? m->ops->name : "");
    return dsl_gpt_next_logits(m, params, tokens, n, logits);
}

void dsl_model_release(struct dsl_model *m)
{
    if (m->ops && m->ops->release)
        m->ops->release(m);
    free(m->segs);
    memset(m, 0, sizeof(*m));
}

int dsl_blas_set_threads(int n)
{
    if (n < 1)
        n = 1;
    /* the rank's threads are the pool's: cpugemm.c cuts each product over them and
     * runs OpenBLAS on one thread per piece, and the optimizer's loop uses them too
     * (device_cpu.c) */
    openblas_set_num_threads(1);
    return dsl_cpupool_set_threads(n);
}

int dsl_model_gemm_bf16_supported(char *why, size_t len)
{
    return dsl_gemm_bf16_supported(why, len);
}
