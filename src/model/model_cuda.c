/*
 * The GPU half of the model registry: dsl_model_create_cuda() picks the CUDA
 * implementation by spec->type ("mlp": model_mlp_cuda.c, "gpt": model_gpt_cuda.c), as
 * dsl_model_create() (model.c) does for the CPU.
 */
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/model/model.h"
#include "model_gpt_impl.h"
#include "model_mlp_impl.h"
#include "dslaunch/common/banned.h"

int dsl_model_create_cuda(struct dsl_model *m, const struct dsl_model_spec *spec, char *err)
{
    if (spec->dtype != DSL_FLOAT32 && spec->dtype != DSL_FLOAT16 &&
        spec->dtype != DSL_BFLOAT16) {
        memset(m, 0, sizeof(*m));
        return dsl_seterr(err, DSL_ECONFIG, "unsupported model dtype %d", (int)spec->dtype);
    }
    if (spec->type && !strcmp(spec->type, "gpt"))
        return dsl_gpt_create_cuda(m, spec, err);
    if (spec->type && !strcmp(spec->type, "mlp"))
        return dsl_mlp_create_cuda(m, spec, err);
    memset(m, 0, sizeof(*m));
    return dsl_seterr(err, DSL_ECONFIG, "unknown model type '%s' (known: mlp, gpt)",
                      spec->type ? spec->type : "");
}
