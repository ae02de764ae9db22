/* Placeholder until the store lands: every multi-rank open fails clearly. */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/error.h"
#include "dslaunch/store.h"
#include "common/banned.h"

int dsl_store_opts_from_env(struct dsl_store_opts *o, char *err)
{
    memset(o, 0, sizeof(*o));
    (void)err;
    return 0;
}

int dsl_store_open(struct dsl_store **out, const struct dsl_store_opts *o, char *err)
{
    (void)o;
    *out = NULL;
    return dsl_seterr(err, DSL_ENOTSUP, "the rendezvous store is not built yet");
}

void dsl_store_free(struct dsl_store *st)
{
    (void)st;
}
