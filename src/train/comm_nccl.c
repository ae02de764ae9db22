/* Placeholder until the nccl backend lands. */
#include <stddef.h>

#include "train/comm_impl.h"
#include "common/banned.h"

int dsl_comm_nccl_available(void)
{
    return 0;
}

int dsl_comm_nccl_open(struct dsl_comm *c)
{
    return dsl_seterr(c->err, DSL_ENOTSUP, "the nccl backend is not built yet");
}

void *dsl_comm_stream(struct dsl_comm *c)
{
    (void)c;
    return NULL;
}
