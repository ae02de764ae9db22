/*
 * What the multi-rank GPU trainer test (tests/train/test_gpu_worlds.c) needs beyond
 * rt.cpp under the CPU emulation: the CUDA runtime calls of device_cuda.c (device and
 * stream setup), of comm_cudahost.c and of common/gpuprof.c (timed events, the
 * profiler window), and the nccl backend's entry points that comm.c names in
 * a CUDA build, which the test never takes (cuda-tcp stages through tcp). Device memory
 * is host memory, streams complete at once, so cudaMemcpyDefault is a memmove.
 */
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dslaunch/common/error.h"

struct dsl_comm;

cudaError_t cudaSetDevice(int d)
{
    (void)d;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    (void)d;
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "CPU emulation");
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;
    p->totalGlobalMem = (size_t)1 << 34;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f)
{
    (void)f;
    *s = (cudaStream_t)malloc(1);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    free(s);
    return cudaSuccess;
}

/* Events hold the host clock of their record: the emulated stream has finished
 * everything queued before by then, so elapsed times are the emulation's own (slow)
 * times per class, enough to check the GPU timers' bookkeeping. Linked before rt.o,
 * whose one-byte events these replace. */
static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    *e = (cudaEvent_t)calloc(1, sizeof(double));
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int f)
{
    (void)f;
    return cudaEventCreate(e);
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    (void)s;
    double t = now_ms();
    memcpy(e, &t, sizeof(t));
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    double x, y;
    memcpy(&x, a, sizeof(x));
    memcpy(&y, b, sizeof(y));
    *ms = (float)(y - x);
    return cudaSuccess;
}

cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
cudaError_t cudaProfilerStop(void) { return cudaSuccess; }

int dsl_comm_nccl_open(struct dsl_comm *c)
{
    (void)c;
    return DSL_ENOTSUP;
}

int dsl_comm_nccl_available(void) { return 0; }

void *dsl_comm_stream(struct dsl_comm *c)
{
    (void)c;
    return NULL;
}

int dsl_cudalib_load(unsigned which, char *err)
{
    (void)which;
    return dsl_seterr(err, DSL_ENOTSUP, "no NCCL under the emulation");
}
