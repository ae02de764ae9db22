/*
 * The CUDA device (device.h): model state in GPU memory, the trainer's buffer loops as
 * kernels (device_kernels.cu).
 *
 * Theory of operation. Everything is issued on the legacy default stream, in the
 * calling thread, in call order: cudaMemcpy/cudaMemsetAsync, the kernels, and (in the
 * CUDA MLP) cuBLAS. The nccl comm records an event on that stream before each
 * collective and runs it on its own stream, and its blocking calls and waits block
 * the host until the collective is done; so a buffer written here is complete when a
 * collective reads it, and work issued here after a wait sees the collective's result.
 * The elementwise calls return as soon as the kernel is queued; absmax_bits and
 * sumsq_fixed copy their 4 or 8 byte result back, which waits for everything before
 * them; synchronize() waits for the stream (not for the comm's stream, so all-gathers
 * left running by ZeRO stages 1/2 keep running).
 *
 * Mixed precision (the half_* ops): the same kernels templated on a 16-bit element
 * type, widening to fp32 for the arithmetic and rounding to nearest even on the way
 * back; the optimizer writes the fp32 master piece and its 16-bit copy in one pass.
 *
 * Errors: a CUDA error becomes a negative code (out of memory: -ENOMEM; no device or
 * driver: DSL_ENOTSUP; anything else: DSL_EREMOTE, as the nccl backend reports CUDA
 * failures) with cudaGetErrorString's text in d->err, and sticks: a kernel fault
 * leaves the CUDA context unusable anyway. Nothing here exits: the caller, dstrain,
 * decides.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/model/device.h"
#include "cuda_kernels.h"
#include "dslaunch/common/banned.h"

struct cuda_dev {
    void *scratch; /* 16 bytes of results: uint32 max, uint64 sum */
};

static int cuda_code(cudaError_t e)
{
    switch (e) {
    case cudaErrorMemoryAllocation: return -ENOMEM;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice: return DSL_ENOTSUP;
    default: return DSL_EREMOTE;
    }
}

/* record the first failure; later ones keep the first text */
static int fail(struct dsl_device *d, const char *what, cudaError_t e)
{
    if (d->failed)
        return d->failed;
    d->failed = cuda_code(e);
    snprintf(d->err, sizeof(d->err), "cuda: %s failed on device %d: %s", what, d->id,
             cudaGetErrorString(e));
    return d->failed;
}

static int check(struct dsl_device *d, const char *what, cudaError_t e)
{
    if (d->failed)
        return d->failed;
    return e == cudaSuccess ? 0 : fail(d, what, e);
}

static void *cu_alloc(struct dsl_device *d, size_t bytes)
{
    void *p = NULL;
    if (d->failed || cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky in CUDA */
        return NULL;
    }
    if (cudaMemsetAsync(p, 0, bytes ? bytes : 1, cudaStreamLegacy) != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cu_free(struct dsl_device *d, void *p)
{
    (void)d;
    if (p)
        cudaFree(p);
}

static int cu_copy(struct dsl_device *d, void *dst, const void *src, size_t bytes,
                   enum dsl_copy_dir dir)
{
    static const enum cudaMemcpyKind kind[] = {cudaMemcpyHostToDevice,
                                               cudaMemcpyDeviceToHost,
                                               cudaMemcpyDeviceToDevice};
    if (d->failed)
        return d->failed;
    if (!bytes)
        return 0;
    /* cudaMemcpy runs on the legacy default stream: after every kernel issued before
     * it; a copy to the host returns when the data is there */
    return check(d, "cudaMemcpy", cudaMemcpy(dst, src, bytes, kind[dir]));
}

static int cu_set_zero(struct dsl_device *d, float *p, size_t n)
{
    if (d->failed || !n)
        return d->failed;
    return check(d, "cudaMemsetAsync",
                 cudaMemsetAsync(p, 0, n * sizeof(float), cudaStreamLegacy));
}

static int cu_scale(struct dsl_device *d, float *p, size_t n, float f)
{
    return d->failed ? d->failed : check(d, "scale kernel", dsl_cuda_scale(p, n, f));
}

static int cu_add(struct dsl_device *d, float *dst, const float *src, size_t n)
{
    return d->failed ? d->failed : check(d, "add kernel", dsl_cuda_add(dst, src, n));
}

/* The value-returning ops: zero a word of the device scratch, launch the kernel that
 * accumulates into it, copy the word back (which waits for the kernel). */
static int scratch_zero(struct dsl_device *d, void *word, size_t bytes)
{
    return check(d, "cudaMemsetAsync", cudaMemsetAsync(word, 0, bytes, cudaStreamLegacy));
}

static int scratch_read(struct dsl_device *d, void *host, const void *word, size_t bytes)
{
    return check(d, "cudaMemcpy", cudaMemcpy(host, word, bytes, cudaMemcpyDeviceToHost));
}

static int cu_absmax_bits(struct dsl_device *d, const float *p, size_t n, uint32_t *out)
{
    struct cuda_dev *c = d->impl;
    unsigned int *dmax = c->scratch, h = 0;
    int r;
    *out = 0;
    if (d->failed || !n)
        return d->failed;
    if ((r = scratch_zero(d, dmax, sizeof(*dmax))) < 0 ||
        (r = check(d, "absmax kernel", dsl_cuda_absmax_bits(p, n, dmax))) < 0 ||
        (r = scratch_read(d, &h, dmax, sizeof(h))) < 0)
        return r;
    *out = h;
    return 0;
}

static int cu_sumsq_fixed(struct dsl_device *d, const float *p, size_t n, double k,
                          uint64_t *out)
{
    struct cuda_dev *c = d->impl;
    unsigned long long *dsum = (unsigned long long *)((char *)c->scratch + 8), h = 0;
    int r;
    *out = 0;
    if (d->failed || !n)
        return d->failed;
    if ((r = scratch_zero(d, dsum, sizeof(*dsum))) < 0 ||
        (r = check(d, "sum-of-squares kernel", dsl_cuda_sumsq_fixed(p, n, k, dsum))) < 0 ||
        (r = scratch_read(d, &h, dsum, sizeof(h))) < 0)
        return r;
    *out = (uint64_t)h;
    return 0;
}

/* the per-step constants exactly as dsl_optim_step() computes them */
static struct dsl_cuda_adam adam_consts(const struct dsl_optim_hparams *h, float lr, uint64_t t,
                                        float gscale)
{
    struct dsl_cuda_adam a = {.lr = lr, .b1 = h->beta1, .b2 = h->beta2, .eps = h->eps,
                              .wd = h->weight_decay, .gscale = gscale,
                              .adam_w_mode = h->adam_w_mode};
    float bc1 = 1.0f - (float)pow((double)a.b1, (double)t);
    float bc2 = 1.0f - (float)pow((double)a.b2, (double)t);
    a.step = lr / bc1;
    a.bc2s = sqrtf(bc2);
    return a;
}

static int cu_optim_step(struct dsl_device *d, const struct dsl_optim_hparams *h, float lr,
                         uint64_t t, float gscale, float *p, const float *g, float *m,
                         float *v, size_t len)
{
    if (d->failed || !len)
        return d->failed;
    if (h->type == DSL_OPTIM_SGD)
        return check(d, "SGD kernel",
                     dsl_cuda_sgd_step(lr, h->weight_decay, h->momentum, t <= 1, gscale, p,
                                       g, m, len));
    struct dsl_cuda_adam a = adam_consts(h, lr, t, gscale);
    return check(d, "Adam kernel", dsl_cuda_adam_step(&a, p, g, m, v, len));
}

/* ---- mixed precision: the same shapes on 16-bit buffers ---- */

static int cu_to_half(struct dsl_device *d, enum dsl_dtype ht, void *dst, const float *src,
                      size_t n)
{
    return d->failed ? d->failed
                     : check(d, "fp32 to 16-bit kernel",
                             dsl_cuda_to_half(ht == DSL_BFLOAT16, dst, src, n));
}

static int cu_half_add(struct dsl_device *d, enum dsl_dtype ht, void *dst, const void *src,
                       size_t n)
{
    return d->failed ? d->failed
                     : check(d, "16-bit add kernel",
                             dsl_cuda_half_add(ht == DSL_BFLOAT16, dst, src, n));
}

static int cu_half_scale(struct dsl_device *d, enum dsl_dtype ht, void *p, size_t n, float f)
{
    return d->failed ? d->failed
                     : check(d, "16-bit scale kernel",
                             dsl_cuda_half_scale(ht == DSL_BFLOAT16, p, n, f));
}

static int cu_half_absmax_bits(struct dsl_device *d, enum dsl_dtype ht, const void *p,
                               size_t n, uint32_t *out)
{
    struct cuda_dev *c = d->impl;
    unsigned int *dmax = c->scratch, h = 0;
    int r;
    *out = 0;
    if (d->failed || !n)
        return d->failed;
    if ((r = scratch_zero(d, dmax, sizeof(*dmax))) < 0 ||
        (r = check(d, "16-bit absmax kernel",
                   dsl_cuda_half_absmax_bits(ht == DSL_BFLOAT16, p, n, dmax))) < 0 ||
        (r = scratch_read(d, &h, dmax, sizeof(h))) < 0)
        return r;
    *out = h;
    return 0;
}

static int cu_half_sumsq_fixed(struct dsl_device *d, enum dsl_dtype ht, const void *p,
                               size_t n, double k, uint64_t *out)
{
    struct cuda_dev *c = d->impl;
    unsigned long long *dsum = (unsigned long long *)((char *)c->scratch + 8), h = 0;
    int r;
    *out = 0;
    if (d->failed || !n)
        return d->failed;
    if ((r = scratch_zero(d, dsum, sizeof(*dsum))) < 0 ||
        (r = check(d, "16-bit sum-of-squares kernel",
                   dsl_cuda_half_sumsq_fixed(ht == DSL_BFLOAT16, p, n, k, dsum))) < 0 ||
        (r = scratch_read(d, &h, dsum, sizeof(h))) < 0)
        return r;
    *out = (uint64_t)h;
    return 0;
}

static int cu_half_optim_step(struct dsl_device *d, const struct dsl_optim_hparams *h,
                              float lr, uint64_t t, enum dsl_dtype ht, float ga, float gscale,
                              float *p, void *hp, const void *g, float *m, float *v, size_t len)
{
    int bf16 = ht == DSL_BFLOAT16;
    if (d->failed || !len)
        return d->failed;
    if (h->type == DSL_OPTIM_SGD)
        return check(d, "16-bit SGD kernel",
                     dsl_cuda_half_sgd_step(bf16, lr, h->weight_decay, h->momentum, t <= 1, ga,
                                            gscale, p, hp, g, m, len));
    struct dsl_cuda_adam a = adam_consts(h, lr, t, gscale);
    return check(d, "16-bit Adam kernel", dsl_cuda_half_adam_step(bf16, &a, ga, p, hp, g, m, v,
                                                                  len));
}

static int cu_synchronize(struct dsl_device *d)
{
    if (d->failed)
        return d->failed;
    int r = check(d, "cudaStreamSynchronize", cudaStreamSynchronize(cudaStreamLegacy));
    if (r < 0)
        return r;
    /* a launch error that no call has reported yet */
    return check(d, "kernel", cudaGetLastError());
}

static void cu_release(struct dsl_device *d)
{
    struct cuda_dev *c = d->impl;
    if (!c)
        return;
    cudaFree(c->scratch);
    free(c);
    d->impl = NULL;
}

static const struct dsl_device_ops cuda_ops = {
    .name = "cuda",
    .alloc = cu_alloc,
    .free = cu_free,
    .copy = cu_copy,
    .set_zero = cu_set_zero,
    .scale = cu_scale,
    .add = cu_add,
    .absmax_bits = cu_absmax_bits,
    .sumsq_fixed = cu_sumsq_fixed,
    .optim_step = cu_optim_step,
    .to_half = cu_to_half,
    .half_add = cu_half_add,
    .half_scale = cu_half_scale,
    .half_absmax_bits = cu_half_absmax_bits,
    .half_sumsq_fixed = cu_half_sumsq_fixed,
    .half_optim_step = cu_half_optim_step,
    .synchronize = cu_synchronize,
    .release = cu_release,
};

int dsl_device_cuda_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

int dsl_device_cuda_open(struct dsl_device *d, int device_id, char *err)
{
    struct cudaDeviceProp prop;
    cudaError_t e;
    int n = 0, r;

    memset(d, 0, sizeof(*d));
    d->ops = &cuda_ops;
    d->id = device_id;
    if ((e = cudaGetDeviceCount(&n)) != cudaSuccess || n == 0) {
        r = e != cudaSuccess ? cuda_code(e) : DSL_ENOTSUP;
        dsl_seterr(err, r, "cuda: no usable GPU: %s",
                   e != cudaSuccess ? cudaGetErrorString(e) : "no device");
        goto fail;
    }
    if (device_id < 0 || device_id >= n) {
        r = dsl_seterr(err, DSL_ENOTSUP,
                       "cuda: device %d does not exist (%d visible; LOCAL_RANK selects "
                       "one of CUDA_VISIBLE_DEVICES)",
                       device_id, n);
        goto fail;
    }
    if ((e = cudaSetDevice(device_id)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, device_id)) != cudaSuccess) {
        r = dsl_seterr(err, cuda_code(e), "cuda: cannot use device %d: %s", device_id,
                       cudaGetErrorString(e));
        goto fail;
    }
    struct cuda_dev *c = calloc(1, sizeof(*c));
    if (!c) {
        r = dsl_seterr(err, -ENOMEM, "out of memory");
        goto fail;
    }
    d->impl = c;
    if ((e = cudaMalloc(&c->scratch, 16)) != cudaSuccess) {
        r = dsl_seterr(err, cuda_code(e), "cuda: cannot allocate on device %d: %s",
                       device_id, cudaGetErrorString(e));
        goto fail;
    }
    snprintf(d->name, sizeof(d->name), "cuda:%d (%.64s)", device_id, prop.name);
    return 0;
fail:
    (void)cudaGetLastError();
    cu_release(d);
    memset(d, 0, sizeof(*d));
    return r;
}
