/*
 * Where the trainer's model state lives and the few buffer operations the trainer runs
 * on it, behind a small ops table: "cpu" (host memory, plain loops: src/device/
 * device_cpu.c) and "cuda" (device memory, kernels on the device's own stream:
 * src/device/device_cuda.c, src/device/device_kernels.cu). The trainer touches
 * parameters, gradients, shards, staging buckets, accumulation levels and optimizer
 * state only through these calls, so ZeRO stages 0/1/2 are the same code on both.
 *
 * Every buffer argument is in the device's memory unless the call says otherwise, and
 * lengths count floats unless they say bytes. Calls are ordered with each other (on a
 * GPU: all on the device's own non-blocking stream, d->stream, which the model's
 * cuBLAS work and kernels use too and which the nccl comm orders its collectives
 * after), but may return before the work is done; synchronize() waits.
 * Value-returning calls (absmax_bits, sumsq_fixed) and copies to the host wait for
 * their result; on a GPU the *_acc calls keep theirs in device memory instead, so that
 * a step can gather every scalar it needs and wait once (trainer.c). Every host wait
 * goes through d->wait when it is set (the comm's bounded wait, which a dead peer
 * cannot hang) and counts one host synchronisation (common/hostsync.h).
 *
 * Errors: every int call returns 0 or a negative DSL_E* / -errno code with the text in
 * d->err. The first failure is sticky, as a CUDA context's is: every later call returns
 * it again. The CPU device never fails (its alloc returns NULL when memory is short).
 */
#ifndef DSLAUNCH_DEVICE_H
#define DSLAUNCH_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "dslaunch/common/dtype.h"
#include "dslaunch/common/error.h"
#include "dslaunch/device/optimizer.h"

enum dsl_copy_dir {
    DSL_COPY_H2D = 0, /* host -> device */
    DSL_COPY_D2H = 1, /* device -> host */
    DSL_COPY_D2D = 2, /* device -> device */
};

struct dsl_device;

struct dsl_device_ops {
    const char *name; /* "cpu" or "cuda" */
    /** bytes of zeroed memory, or NULL when they cannot be had (the CPU device gives no
     *  text; the CUDA device writes cudaGetErrorString's into d->err, sticky only for
     *  errors other than out-of-memory) */
    void *(*alloc)(struct dsl_device *d, size_t bytes);
    /** p from alloc, or NULL */
    void (*free)(struct dsl_device *d, void *p);
    int (*copy)(struct dsl_device *d, void *dst, const void *src, size_t bytes,
                enum dsl_copy_dir dir);
    int (*set_zero)(struct dsl_device *d, float *p, size_t n);
    /** p[i] *= f */
    int (*scale)(struct dsl_device *d, float *p, size_t n, float f);
    /** dst[i] += src[i] */
    int (*add)(struct dsl_device *d, float *dst, const float *src, size_t n);
    /** *out = max over i of the bit pattern of |p[i]| as uint32 (the numeric maximum for
     *  finite values; NaN sorts above inf). 0 for n == 0. */
    int (*absmax_bits)(struct dsl_device *d, const float *p, size_t n, uint32_t *out);
    /** *out = sum over i of (uint64_t)(int64_t)((double)p[i] * p[i] * k + 0.5), the
     *  products and the rounding in double exactly so, the sum in wrapping uint64
     *  arithmetic (order-independent; see global_norm in trainer.c). */
    int (*sumsq_fixed)(struct dsl_device *d, const float *p, size_t n, double k,
                       uint64_t *out);
    /** dsl_optim_step() (optimizer.h) on len elements of the device's buffers; the
     *  same float operations in the same order. */
    int (*optim_step)(struct dsl_device *d, const struct dsl_optim_hparams *h, float lr,
                      uint64_t t, float gscale, float *p, const float *g, float *m, float *v,
                      size_t len);
    /* ---- mixed precision (trainer.h): 16-bit buffers of type ht, DSL_FLOAT16 or
     * DSL_BFLOAT16, n 2-byte elements. NULL on a device without them. Both devices
     * have them (the CPU's serve dstrain.cpu_half; the same bits as the CUDA ones).
     * Every conversion to 16 bits rounds to nearest even (the host reference is
     * halfprec.h); arithmetic is fp32 on the converted values. */
    /** dst[i] = half(src[i]) */
    int (*to_half)(struct dsl_device *d, enum dsl_dtype ht, void *dst, const float *src,
                   size_t n);
    /** dst[i] = half(float(dst[i]) + float(src[i])) */
    int (*half_add)(struct dsl_device *d, enum dsl_dtype ht, void *dst, const void *src,
                    size_t n);
    /** p[i] = half(float(p[i]) * f) */
    int (*half_scale)(struct dsl_device *d, enum dsl_dtype ht, void *p, size_t n, float f);
    /** fp32 accumulation of 16-bit gradients: dst[i] = float(src[i]) (widen),
     *  dst[i] += float(src[i]) (widen_add; one fp32 addition), and
     *  dst[i] = half(float(dst[i]) + src[i]) (half_add_f32; dst 16-bit, src fp32) */
    int (*widen)(struct dsl_device *d, enum dsl_dtype ht, float *dst, const void *src,
                 size_t n);
    int (*widen_add)(struct dsl_device *d, enum dsl_dtype ht, float *dst, const void *src,
                     size_t n);
    int (*half_add_f32)(struct dsl_device *d, enum dsl_dtype ht, void *dst, const float *src,
                        size_t n);
    /** absmax_bits of float(p[i]): inf and NaN in the half buffer show as they are */
    int (*half_absmax_bits)(struct dsl_device *d, enum dsl_dtype ht, const void *p, size_t n,
                            uint32_t *out);
    /** sumsq_fixed of float(p[i]) */
    int (*half_sumsq_fixed)(struct dsl_device *d, enum dsl_dtype ht, const void *p, size_t n,
                            double k, uint64_t *out);
    /** optim_step on the fp32 master weights p with the fp32 gradient
     *  (float(g[i]) * ga) * gscale (unscaling and averaging happen here, in fp32, never
     *  on the 16-bit gradient), then hp[i] = half(p[i]): the new 16-bit parameters. */
    int (*half_optim_step)(struct dsl_device *d, const struct dsl_optim_hparams *h, float lr,
                           uint64_t t, enum dsl_dtype ht, float ga, float gscale, float *p,
                           void *hp, const void *g, float *m, float *v, size_t len);
    /* ---- results kept in device memory (GPU; NULL on the CPU device, whose results
     * are in host memory anyway). ht: DSL_FLOAT32 (p is float) or the 16-bit type. */
    /** *dword = max(*dword, absmax_bits of p); dword (device memory) set by the caller */
    int (*absmax_bits_acc)(struct dsl_device *d, enum dsl_dtype ht, const void *p, size_t n,
                           uint32_t *dword);
    /** *dsum += sumsq_fixed of p with k = frac / (m x m) in double, m the float whose
     *  bits are *dmax (device memory, the agreed maximum); adds nothing when m is 0, inf
     *  or NaN. Both pointers in device memory. */
    int (*sumsq_fixed_acc)(struct dsl_device *d, enum dsl_dtype ht, const void *p, size_t n,
                           const uint32_t *dmax, double frac, uint64_t *dsum);
    /** limb[0..DSL_FIXEDSUM_LIMBS) = dsl_fixedsum_split(*dsum) (common/fixedsum.h), and,
     *  when flag is not NULL, *flag = 1.0f if the bits *dmax are those of inf or NaN,
     *  else 0.0f. All in device memory. */
    int (*scalars_finish)(struct dsl_device *d, const uint64_t *dsum, int32_t *limb,
                          const uint32_t *dmax, float *flag);
    /** page-locked host memory for asynchronous copies (GPU), NULL on failure; the CPU
     *  device has none (NULL op) */
    void *(*host_alloc)(struct dsl_device *d, size_t bytes);
    void (*host_free)(struct dsl_device *d, void *p);
    /** wait until every call issued so far has finished */
    int (*synchronize)(struct dsl_device *d);
    /** free the implementation's state (d->impl) */
    void (*release)(struct dsl_device *d);
};

struct dsl_device {
    const struct dsl_device_ops *ops;
    char name[96];      /* "cpu", "cuda:0 (NVIDIA H100 80GB HBM3)" */
    int host_memory;    /* buffers are host memory: the comm and memcpy may use them */
    int id;             /* CUDA device number; -1 for the CPU */
    int failed;         /* first failure (sticky), 0 if none */
    char err[DSL_ERR_LEN]; /* its text */
    void *stream;       /* GPU: the cudaStream_t every call runs on; NULL on the CPU */
    /* How to wait on the host for the stream: set by the trainer to the comm's bounded
     * wait (dsl_comm_stream_wait_host); NULL: cudaStreamSynchronize. */
    int (*wait)(void *ctx, void *stream);
    void *wait_ctx;
    void *impl;         /* owned by the implementation */
};

/** The CPU device: a process-wide object that is never released (release is a
 *  no-op). Its operations are the loops the trainer always ran, bit for bit. */
struct dsl_device *dsl_device_cpu(void);

/** Release what the device owns (not the struct). Safe on the CPU device. */
void dsl_device_release(struct dsl_device *d);

#ifdef DSL_HAVE_CUDA
/** Number of CUDA devices this process can use: 0 without a driver or a GPU. */
int dsl_device_cuda_count(void);
/**
 * Open CUDA device device_id (a CUDA_VISIBLE_DEVICES index) for the calling thread:
 * cudaSetDevice, its own non-blocking stream (d->stream), a small result scratch buffer.
 * Returns 0, or a negative code with err
 * set (no device, bad id, driver too old, out of memory). The struct is the caller's;
 * release with dsl_device_release().
 */
int dsl_device_cuda_open(struct dsl_device *d, int device_id, char *err);
#endif

#endif
