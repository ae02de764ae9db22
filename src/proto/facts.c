/* The facts datum's life (proto/facts.h); collecting them is remote/facts.c. */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/proto/facts.h"
#include "dslaunch/common/banned.h"

void dsl_facts_init(struct dsl_facts *f)
{
    memset(f, 0, sizeof(*f));
    dsl_strvec_init(&f->ib);
    f->p2p = -1;
    f->disk_free = -1;
}

void dsl_facts_release(struct dsl_facts *f)
{
    free(f->kernel);
    free(f->glibc);
    free(f->cuda_driver);
    free(f->cuda_runtime);
    free(f->nccl);
    free(f->cudart_path);
    free(f->nccl_path);
    free(f->cvd);
    free(f->gpu_free_mib);
    free(f->gpu_total_mib);
    dsl_strvec_release(&f->ib);
    dsl_facts_init(f);
}
