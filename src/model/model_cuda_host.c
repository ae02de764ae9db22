/*
 * What both CUDA models share on the host (model_cuda_impl.h): their buffers'
 * allocation, CUDA and cuBLAS errors as model errors, and the one bounded host wait on
 * a model's stream.
 */
#include <errno.h>
#include <stdlib.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/hostsync.h"
#include "dslaunch/model/model.h"
#include "model_cuda_impl.h"
#include "dslaunch/common/banned.h"

static void *cuda_alloc(int host, size_t bytes, size_t *total, int *fail)
{
    void *v = NULL;
    *total += bytes;
    if (*fail)
        return NULL;
    size_t n = bytes ? bytes : 1;
    cudaError_t e = host ? cudaMallocHost(&v, n) : cudaMalloc(&v, n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *fail = 1;
        return NULL;
    }
    return v;
}

void *dsl_model_cuda_alloc(size_t bytes, size_t *total, int *fail)
{
    return cuda_alloc(0, bytes, total, fail);
}

void *dsl_model_cuda_host_alloc(size_t bytes, size_t *total, int *fail)
{
    return cuda_alloc(1, bytes, total, fail);
}

float *dsl_model_cuda_params_host(struct dsl_model *m)
{
    float *h = malloc(m->nparams * sizeof(float));
    if (!h)
        dsl_seterr(m->err, -ENOMEM, "cannot allocate %zu bytes for the initial parameters",
                   m->nparams * sizeof(float));
    return h;
}

int dsl_model_cuda_params_put(struct dsl_model *m, float *params, float *h, cudaStream_t stream)
{
    /* from pageable memory the data is staged before the call returns: h may go */
    cudaError_t e = cudaMemcpyAsync(params, h, m->nparams * sizeof(float),
                                    cudaMemcpyHostToDevice, stream);
    free(h);
    CU(m, "copying the initial parameters", e);
    return 0;
}

int dsl_model_cuda_err(struct dsl_model *m, const char *what, cudaError_t e)
{
    int code = e == cudaErrorMemoryAllocation ? -ENOMEM : DSL_EREMOTE;
    return dsl_seterr(m->err, code, "cuda: %s failed: %s", what, cudaGetErrorString(e));
}

int dsl_model_blas_err(struct dsl_model *m, const char *what, cublasStatus_t s)
{
    int code = s == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : DSL_EREMOTE;
    return dsl_seterr(m->err, code, "cublas: %s failed: %s", what, cublasGetStatusString(s));
}

int dsl_model_cuda_wait(struct dsl_model *m, cudaStream_t stream)
{
    if (m->wait) {
        m->err[0] = '\0';
        int r = m->wait(m->wait_ctx, stream);
        if (r < 0 && !m->err[0])
            dsl_seterr(m->err, r, "waiting for the GPU failed");
        return r < 0 ? r : 0;
    }
    dsl_hostsync_note();
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess)
        return dsl_model_cuda_err(m, "waiting for the stream", e);
    return 0;
}
