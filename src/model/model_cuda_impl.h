/*
 * What the CUDA models (model_mlp_cuda.c, model_gpt_cuda.c) share on the host: their
 * buffers' allocation, their CUDA and cuBLAS errors as model errors, and the one bounded
 * host wait on a model's stream. Private to the model folder; implemented in model_cuda_host.c.
 */
#ifndef DSL_MODEL_CUDA_IMPL_H
#define DSL_MODEL_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "dslaunch/common/gpuprof.h"
#include "dslaunch/model/model.h"

/* m->err set to "cuda: WHAT failed: ..."; -ENOMEM for an allocation, else DSL_EREMOTE */
int dsl_model_cuda_err(struct dsl_model *m, const char *what, cudaError_t e);

/* m->err set to "cublas: WHAT failed: ..."; -ENOMEM for an allocation, else DSL_EREMOTE */
int dsl_model_blas_err(struct dsl_model *m, const char *what, cublasStatus_t s);

/* cudaMalloc (dsl_model_cuda_host_alloc: cudaMallocHost) of bytes, at least 1, added to
 * *total either way so a failure can say what the whole model needed; NULL and *fail set
 * when it fails, and nothing is allocated once *fail is set (the caller frees the rest) */
void *dsl_model_cuda_alloc(size_t bytes, size_t *total, int *fail);
void *dsl_model_cuda_host_alloc(size_t bytes, size_t *total, int *fail);

/* the host buffer (malloc'd) the initial parameters are made in; NULL with m->err set */
float *dsl_model_cuda_params_host(struct dsl_model *m);

/* copy the initial parameters h, made on the host, to params on stream, and free h */
int dsl_model_cuda_params_put(struct dsl_model *m, float *params, float *h, cudaStream_t stream);

/* wait on the host for stream (bounded through m->wait when set): one host sync */
int dsl_model_cuda_wait(struct dsl_model *m, cudaStream_t stream);

/* return the model error of a failed CUDA call from the enclosing function; a call
 * whose text starts with "launching" counts as a kernel launch (gpuprof.h) */
#define CU(m, what, expr)                                                      \
    do {                                                                       \
        dsl_gpuprof_launch(what);                                              \
        cudaError_t cu_e_ = (expr);                                            \
        if (cu_e_ != cudaSuccess)                                              \
            return dsl_model_cuda_err((m), (what), cu_e_);                     \
    } while (0)

/* the GPU timers' kernel class from here on (gpuprof.h): MARK(FWD_MATMUL) */
#define MARK(cls) dsl_gpuprof_mark(DSL_PROF_##cls)

#endif
