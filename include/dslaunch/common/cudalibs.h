/*
 * The GPU's shared libraries, loaded on first use (dlopen), so that one build of
 * dstrain and dsbench runs `--backend tcp` on a node without them and says which are
 * missing when the GPU is asked for (docs/trainer.md, "One binary for CPU and GPU
 * nodes"). Only in a build with CUDA (DSL_HAVE_CUDA).
 *
 * The CUDA runtime is linked statically (cudart_static, in the binary) and itself
 * opens the driver, libcuda.so.1, at its first call; cuBLASLt, cuBLAS and NCCL are
 * opened here, and their functions that src/model and src/comm call are defined here
 * with their own names and prototypes, forwarding through a table filled by dlsym,
 * so those files call cublasGemmEx or ncclAllReduce as before and no program has a
 * NEEDED entry for a CUDA, cuBLAS or NCCL library. A forwarder whose library cannot be
 * loaded returns CUBLAS_STATUS_NOT_INITIALIZED or ncclSystemError (its error-string
 * function the reason).
 *
 * Where a library is looked for: by its soname on the dynamic loader's path
 * (LD_LIBRARY_PATH, ld.so.conf, the system folders), then in $CUDA_HOME/lib64
 * (CUDA_HOME defaults to /usr/local/cuda). The driver only on the loader's path, as
 * the CUDA runtime looks for it. Each library is tried once per process; the answer,
 * loaded or not, is kept. Thread-safe.
 */
#ifndef DSLAUNCH_CUDALIBS_H
#define DSLAUNCH_CUDALIBS_H

#include "dslaunch/common/error.h"

/* what dsl_cudalib_load() loads: bits */
#define DSL_CUDALIB_DRIVER 1u /* libcuda.so.1, the NVIDIA driver */
#define DSL_CUDALIB_CUBLAS 2u /* libcublasLt.so.N and libcublas.so.N */
#define DSL_CUDALIB_NCCL 4u   /* libnccl.so.2 */
#define DSL_CUDALIB_ALL 7u

/**
 * Load the libraries in which (DSL_CUDALIB_* bits). 0, or DSL_ENOGPU with every one
 * that cannot be loaded named in err, and the loader's text for the first:
 * "missing libcuda.so.1 (the NVIDIA driver), libnccl.so.2 (NCCL): libcuda.so.1: cannot
 * open shared object file: No such file or directory".
 */
int dsl_cudalib_load(unsigned which, char *err);

/**
 * The devices the driver shows this process (CUDA_VISIBLE_DEVICES applied): loads the
 * driver, initialises it (cuInit) and counts (cuDeviceGetCount). 0 with *n (0 when the
 * driver finds no device), or DSL_ENOGPU with the reason in err: no driver, a driver
 * older than this build's CUDA, or cuInit's error.
 */
int dsl_cudalib_device_count(int *n, char *err);

struct dsl_rankenv;

/**
 * The device this rank trains on: loads which (the driver always), counts the devices
 * and applies the rule of gpupick.h to the LOCAL_RANK, LOCAL_WORLD_SIZE and
 * CUDA_VISIBLE_DEVICES of env (the rank contract the worker loaded). 0 with *device,
 * or DSL_ENOGPU with the reason in err.
 */
int dsl_cudalib_place(unsigned which, const struct dsl_rankenv *env, int *device, char *err);

/** The soname tried for one DSL_CUDALIB_* bit (DSL_CUDALIB_CUBLAS: cuBLAS's). */
const char *dsl_cudalib_soname(unsigned lib);

#endif
