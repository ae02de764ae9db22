/*
 * The bridge from the config module to dstrain's settings (trainer_config.h).
 */
#include "dslaunch/error.h"
#include "trainer_config.h"
#include "common/banned.h"

int dsl_trainer_config_apply(struct dsl_train_settings *s, const char *path, char *err)
{
    (void)s;
    return dsl_seterr(err, DSL_ENOTSUP, "cannot read '%s': config support is not built",
                      path);
}

void dsl_trainer_config_drop_scheduler(struct dsl_train_settings *s)
{
    s->to.lr_fn = NULL;
}

void dsl_trainer_config_release(struct dsl_train_settings *s)
{
    (void)s;
}

int dsl_train_resume(struct dsl_train_settings *s, struct dsl_trainer *t, char *err)
{
    (void)t;
    if (!s->resume)
        return 0;
    return dsl_seterr(err, DSL_ENOTSUP, "checkpoints are not built");
}

int dsl_train_consolidate_main(int argc, char **argv, char *err)
{
    (void)argc;
    (void)argv;
    return dsl_seterr(err, DSL_ENOTSUP, "checkpoints are not built");
}
