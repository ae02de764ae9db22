/* Placeholder until the tcp backend lands. */
#include "train/comm_impl.h"
#include "common/banned.h"

int dsl_comm_tcp_open(struct dsl_comm *c)
{
    return dsl_seterr(c->err, DSL_ENOTSUP, "the tcp backend is not built yet");
}
