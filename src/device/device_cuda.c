/*
 * The CUDA device (device.h): model state in GPU memory, the trainer's buffer loops as
 * kernels (device_kernels.cu).
 *
 * Theory of operation. Everything is issued on the device's own stream (d->stream, made
 * non-blocking so that nothing on the legacy default stream serialises with it), in
 * the calling thread, in call order: async copies and memsets, the kernels, and (in
 * the CUDA MLP, which runs on the same stream) cuBLAS. The nccl comm orders its
 * collectives after this stream with an event recorded on it at each call, and
 * dsl_comm_wait() makes this stream wait for a collective's event, so ordering between
 * compute and communication never needs the host. The elementwise calls return as soon
 * as the kernel is queued. The host waits only where a result must reach it: a copy to
 * the host, absmax_bits and sumsq_fixed (their 4 or 8 bytes), synchronize(); each goes
 * through d->wait when the trainer set it (the comm's bounded wait: a stream waiting
 * for a collective of a dead peer never hangs the host) and counts one host
 * synchronisation (common/hostsync.h). The *_acc ops and scalars_finish keep their
 * results in device memory for the trainer's single wait per step.
 *
 * Mixed precision (the half_* ops): the same kernels templated on a 16-bit element
 * type, widening to fp32 for the arithmetic and rounding to nearest even on the way
 * back; the optimizer writes the fp32 master piece and its 16-bit copy in one pass.
 *
 * Errors: a CUDA error becomes a negative code (out of memory: -ENOMEM; no device or
 * driver: DSL_ENOTSUP; anything else: DSL_EREMOTE, as the nccl backend reports CUDA
 * failures) with cudaGetErrorString's text in d->err, and sticks: a kernel fault
 * leaves the CUDA context unusable anyway. Every launch is checked right after it and
 * the message names the kernel (dsl_k_*); a fault of the asynchronous kind (an illegal
 * address, a failed launch) surfaces at whatever call comes next, so its message says
 * that an earlier kernel on the stream may have caused it. An allocation failure
 * writes its text into d->err without sticking (alloc returns NULL; the caller reports
 * the size). Nothing here exits: the caller, dstrain, decides.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/device/device.h"
#include "dslaunch/device/cuda_kernels.h"
#include "dslaunch/common/gpuprof.h"
#include "dslaunch/common/hostsync.h"
#include "dslaunch/common/banned.h"

struct cuda_dev {
    cudaStream_t stream;
    void *scratch; /* 16 bytes of results: uint32 max, uint64 sum */
    void *hscratch; /* their page-locked host copy */
};

static cudaStream_t st(const struct dsl_device *d)
{
    return (cudaStream_t)d->stream;
}

/* errors that a kernel leaves behind asynchronously: reported by the next call */
static int async_fault(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout: return 1;
    default: return 0;
    }
}

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
    snprintf(d->err, sizeof(d->err), "cuda: %s failed on device %d: %s%s", what, d->id,
             cudaGetErrorString(e),
             async_fault(e) ? " (an asynchronous fault: an earlier kernel on the stream may "
                              "have caused it)"
                            : "");
    return d->failed;
}

static int check(struct dsl_device *d, const char *what, cudaError_t e)
{
    dsl_gpuprof_launch(what); /* counts "launching ..." (gpuprof.h) */
    if (d->failed)
        return d->failed;
    return e == cudaSuccess ? 0 : fail(d, what, e);
}

/* wait on the host for everything queued so far: the trainer's bounded wait when set */
static int host_wait(struct dsl_device *d, const char *what)
{
    if (d->failed)
        return d->failed;
    if (d->wait) {
        int r = d->wait(d->wait_ctx, d->stream);
        if (r < 0 && !d->failed) { /* the waiter normally left its own text */
            d->failed = r;
            snprintf(d->err, sizeof(d->err), "cuda: waiting for %s on device %d failed",
                     what, d->id);
        }
        if (r < 0)
            return r;
    } else {
        dsl_hostsync_note();
        int r = check(d, what, cudaStreamSynchronize(st(d)));
        if (r < 0)
            return r;
    }
    /* a launch error that no call has reported yet */
    return check(d, "a kernel", cudaGetLastError());
}

static void *cu_alloc(struct dsl_device *d, size_t bytes)
{
    void *p = NULL;
    cudaError_t e;
    if (d->failed)
        return NULL;
    if ((e = cudaMalloc(&p, bytes ? bytes : 1)) != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky in CUDA */
        snprintf(d->err, sizeof(d->err), "cuda: cannot allocate %zu bytes on device %d: %s",
                 bytes, d->id, cudaGetErrorString(e));
        if (e != cudaErrorMemoryAllocation)
            d->failed = cuda_code(e);
        return NULL;
    }
    if ((e = cudaMemsetAsync(p, 0, bytes ? bytes : 1, st(d))) != cudaSuccess) {
        fail(d, "cudaMemsetAsync of a new buffer", e);
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

static void *cu_host_alloc(struct dsl_device *d, size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(d->err, sizeof(d->err),
                 "cuda: cannot allocate %zu bytes of page-locked host memory: %s", bytes,
                 cudaGetErrorString(e));
        return NULL;
    }
    memset(p, 0, bytes ? bytes : 1);
    return p;
}

static void cu_host_free(struct dsl_device *d, void *p)
{
    (void)d;
    if (p)
        cudaFreeHost(p);
}

static int cu_copy(struct dsl_device *d, void *dst, const void *src, size_t bytes,
                   enum dsl_copy_dir dir)
{
    static const enum cudaMemcpyKind kind[] = {cudaMemcpyHostToDevice,
                                               cudaMemcpyDeviceToHost,
                                               cudaMemcpyDeviceToDevice};
    int r;
    if (d->failed)
        return d->failed;
    if (!bytes)
        return 0;
    /* on the stream, after every kernel issued before it. From the host: the data is
     * taken (staged) before the call returns; to the host: the call waits */
    if ((r = check(d, "cudaMemcpyAsync", cudaMemcpyAsync(dst, src, bytes, kind[dir], st(d)))) < 0)
        return r;
    return dir == DSL_COPY_D2H ? host_wait(d, "a copy to the host") : 0;
}

static int cu_set_zero(struct dsl_device *d, float *p, size_t n)
{
    if (d->failed || !n)
        return d->failed;
    return check(d, "cudaMemsetAsync",
                 cudaMemsetAsync(p, 0, n * sizeof(float), st(d)));
}

static int cu_scale(struct dsl_device *d, float *p, size_t n, float f)
{
    return d->failed ? d->failed
                     : check(d, "launching dsl_k_scale", dsl_cuda_scale(st(d), p, n, f));
}

static int cu_add(struct dsl_device *d, float *dst, const float *src, size_t n)
{
    return d->failed ? d->failed
                     : check(d, "launching dsl_k_add", dsl_cuda_add(st(d), dst, src, n));
}

/* The value-returning ops: zero a word of the device scratch, launch the kernel that
 * accumulates into it, copy the word back to page-locked memory and wait (bounded). */
static int scratch_zero(struct dsl_device *d, void *word, size_t bytes)
{
    return check(d, "cudaMemsetAsync", cudaMemsetAsync(word, 0, bytes, st(d)));
}

static int scratch_read(struct dsl_device *d, void *host, const void *word, size_t bytes)
{
    struct cuda_dev *c = d->impl;
    int r = check(d, "cudaMemcpyAsync",
                  cudaMemcpyAsync(c->hscratch, word, bytes, cudaMemcpyDeviceToHost, st(d)));
    if (r < 0 || (r = host_wait(d, "a result")) < 0)
        return r;
    memcpy(host, c->hscratch, bytes);
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
        return check(d, "launching dsl_k_sgd",
                     dsl_cuda_sgd_step(st(d), lr, h->weight_decay, h->momentum, t <= 1, gscale, p,
                                       g, m, len));
    struct dsl_cuda_adam a = adam_consts(h, lr, t, gscale);
    return check(d, a.adam_w_mode ? "launching dsl_k_adamw" : "launching dsl_k_adam_l2",
                 dsl_cuda_adam_step(st(d), &a, p, g, m, v, len));
}

/* ---- mixed precision: the same shapes on 16-bit buffers ---- */

static int cu_to_half(struct dsl_device *d, enum dsl_dtype ht, void *dst, const float *src,
                      size_t n)
{
    return d->failed ? d->failed
                     : check(d, "launching dsl_k_to_half",
                             dsl_cuda_to_half(st(d), ht == DSL_BFLOAT16, dst, src, n));
}

static int cu_half_add(struct dsl_device *d, enum dsl_dtype ht, void *dst, const void *src,
                       size_t n)
{
    return d->failed ? d->failed
                     : check(d, "launching dsl_k_half_add",
                             dsl_cuda_half_add(st(d), ht == DSL_BFLOAT16, dst, src, n));
}

static int cu_widen(struct dsl_device *d, enum dsl_dtype ht, float *dst, const void *src,
                    size_t n)
{
    return d->failed ? d->failed
                     : check(d, "launching dsl_k_widen",
                             dsl_cuda_widen(st(d), ht == DSL_BFLOAT16, dst, src, n, 0));
}

static int cu_widen_add(struct dsl_device *d, enum dsl_dtype ht, float *dst, const void *src,
                        size_t n)
{
    return d->failed ? d->failed
                     : check(d, "launching dsl_k_widen (add)",
                             dsl_cuda_widen(st(d), ht == DSL_BFLOAT16, dst, src, n, 1));
}

static int cu_half_add_f32(struct dsl_device *d, enum dsl_dtype ht, void *dst, const float *src,
                           size_t n)
{
    return d->failed ? d->failed
                     : check(d, "launching dsl_k_half_add_f32",
                             dsl_cuda_half_add_f32(st(d), ht == DSL_BFLOAT16, dst, src, n));
}

static int cu_half_scale(struct dsl_device *d, enum dsl_dtype ht, void *p, size_t n, float f)
{
    return d->failed ? d->failed
                     : check(d, "launching dsl_k_half_scale",
                             dsl_cuda_half_scale(st(d), ht == DSL_BFLOAT16, p, n, f));
}

static int cu_half_optim_step(struct dsl_device *d, const struct dsl_optim_hparams *h,
                              float lr, uint64_t t, enum dsl_dtype ht, float ga, float gscale,
                              float *p, void *hp, const void *g, float *m, float *v, size_t len)
{
    int bf16 = ht == DSL_BFLOAT16;
    if (d->failed || !len)
        return d->failed;
    if (h->type == DSL_OPTIM_SGD)
        return check(d, "launching dsl_k_half_sgd",
                     dsl_cuda_half_sgd_step(st(d), bf16, lr, h->weight_decay, h->momentum, t <= 1,
                                            ga, gscale, p, hp, g, m, len));
    struct dsl_cuda_adam a = adam_consts(h, lr, t, gscale);
    return check(d, "launching dsl_k_half_adam",
                 dsl_cuda_half_adam_step(st(d), bf16, &a, ga, p, hp, g, m, v, len));
}

/* ---- results kept on the device ---- */

static int cu_absmax_bits_acc(struct dsl_device *d, enum dsl_dtype ht, const void *p, size_t n,
                              uint32_t *dword)
{
    if (d->failed || !n)
        return d->failed;
    if (ht == DSL_FLOAT32)
        return check(d, "launching dsl_k_absmax_bits",
                     dsl_cuda_absmax_bits(st(d), p, n, (unsigned int *)dword));
    return check(d, "launching dsl_k_absmax_bits (16-bit)",
                 dsl_cuda_half_absmax_bits(st(d), ht == DSL_BFLOAT16, p, n,
                                           (unsigned int *)dword));
}

static int cu_sumsq_fixed_acc(struct dsl_device *d, enum dsl_dtype ht, const void *p, size_t n,
                              const uint32_t *dmax, double frac, uint64_t *dsum)
{
    if (d->failed || !n)
        return d->failed;
    int type = ht == DSL_BFLOAT16 ? 2 : ht == DSL_FLOAT16 ? 1 : 0;
    return check(d, "launching dsl_k_sumsq_fixed_dev",
                 dsl_cuda_sumsq_fixed_dev(st(d), type, p, n, (const unsigned int *)dmax, frac,
                                          (unsigned long long *)dsum));
}

static int cu_scalars_finish(struct dsl_device *d, const uint64_t *dsum, int32_t *limb,
                             const uint32_t *dmax, float *flag)
{
    if (d->failed)
        return d->failed;
    return check(d, "launching dsl_k_scalars_finish",
                 dsl_cuda_scalars_finish(st(d), (const unsigned long long *)dsum, limb,
                                         (const unsigned int *)dmax, flag));
}

static int cu_synchronize(struct dsl_device *d)
{
    return host_wait(d, "the stream");
}

/* ---- results read back to the host: the scratch word, then a bounded wait ---- */

/* The absolute maximum's bits of p's n elements, of type t (fp32, or 16-bit). */
static int absmax_bits(struct dsl_device *d, enum dsl_dtype t, const void *p, size_t n,
                       uint32_t *out)
{
    struct cuda_dev *c = d->impl;
    uint32_t *dmax = c->scratch, h = 0;
    int r;
    *out = 0;
    if (d->failed || !n)
        return d->failed;
    if ((r = scratch_zero(d, dmax, sizeof(*dmax))) < 0 ||
        (r = cu_absmax_bits_acc(d, t, p, n, dmax)) < 0 ||
        (r = scratch_read(d, &h, dmax, sizeof(h))) < 0)
        return r;
    *out = h;
    return 0;
}

/* The exact limb sum of (k p[i])^2 over p's n elements, of type t (fp32, or 16-bit). */
static int sumsq_fixed(struct dsl_device *d, enum dsl_dtype t, const void *p, size_t n,
                       double k, uint64_t *out)
{
    struct cuda_dev *c = d->impl;
    unsigned long long *dsum = (unsigned long long *)((char *)c->scratch + 8), h = 0;
    int r;
    *out = 0;
    if (d->failed || !n)
        return d->failed;
    if ((r = scratch_zero(d, dsum, sizeof(*dsum))) < 0)
        return r;
    if (t == DSL_FLOAT32)
        r = check(d, "launching dsl_k_sumsq_fixed", dsl_cuda_sumsq_fixed(st(d), p, n, k, dsum));
    else
        r = check(d, "launching dsl_k_sumsq_fixed (16-bit)",
                  dsl_cuda_half_sumsq_fixed(st(d), t == DSL_BFLOAT16, p, n, k, dsum));
    if (r < 0 || (r = scratch_read(d, &h, dsum, sizeof(h))) < 0)
        return r;
    *out = (uint64_t)h;
    return 0;
}

static int cu_absmax_bits(struct dsl_device *d, const float *p, size_t n, uint32_t *out)
{
    return absmax_bits(d, DSL_FLOAT32, p, n, out);
}

static int cu_sumsq_fixed(struct dsl_device *d, const float *p, size_t n, double k,
                          uint64_t *out)
{
    return sumsq_fixed(d, DSL_FLOAT32, p, n, k, out);
}

static int cu_half_absmax_bits(struct dsl_device *d, enum dsl_dtype ht, const void *p,
                               size_t n, uint32_t *out)
{
    return absmax_bits(d, ht, p, n, out);
}

static int cu_half_sumsq_fixed(struct dsl_device *d, enum dsl_dtype ht, const void *p,
                               size_t n, double k, uint64_t *out)
{
    return sumsq_fixed(d, ht, p, n, k, out);
}

static void cu_release(struct dsl_device *d)
{
    struct cuda_dev *c = d->impl;
    if (!c)
        return;
    cudaFree(c->scratch);
    if (c->hscratch)
        cudaFreeHost(c->hscratch);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
    d->impl = NULL;
    d->stream = NULL;
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
    .widen = cu_widen,
    .widen_add = cu_widen_add,
    .half_add_f32 = cu_half_add_f32,
    .half_scale = cu_half_scale,
    .half_absmax_bits = cu_half_absmax_bits,
    .half_sumsq_fixed = cu_half_sumsq_fixed,
    .half_optim_step = cu_half_optim_step,
    .absmax_bits_acc = cu_absmax_bits_acc,
    .sumsq_fixed_acc = cu_sumsq_fixed_acc,
    .scalars_finish = cu_scalars_finish,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
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
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        c->stream = NULL;
        r = dsl_seterr(err, cuda_code(e), "cuda: cannot create a stream on device %d: %s",
                       device_id, cudaGetErrorString(e));
        goto fail;
    }
    d->stream = c->stream;
    if ((e = cudaMalloc(&c->scratch, 16)) != cudaSuccess ||
        (e = cudaMallocHost(&c->hscratch, 16)) != cudaSuccess) {
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
