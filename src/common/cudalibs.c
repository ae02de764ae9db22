/*
 * The GPU's libraries on first use (cudalibs.h): one table of function pointers per
 * library, filled by dlsym, and the forwarders that src/model and src/comm call by the
 * libraries' own names.
 *
 * Theory of operation. Four libraries (the driver, cuBLASLt, cuBLAS, NCCL), each in a
 * state: untried, loaded (handle and every function found) or missing (the loader's
 * text kept). A library is tried at most once per process, under one mutex, either
 * when a program asks for it (dsl_cudalib_load(), at startup, for a clear error) or
 * by the first forwarder called; a loaded state is read without the mutex (an acquire
 * load), so a forwarder on the hot path (ncclAllReduce, cublasGemmEx) costs one load
 * and one indirect call. cuBLAS needs cuBLASLt (its NEEDED entry) and is tried after
 * it, so that a cuBLASLt found in $CUDA_HOME/lib64 serves it too. Nothing is unloaded.
 *
 * The functions listed below are the ones the code calls; calling another one of these
 * libraries is a link error until it is listed here. The prototypes are the headers':
 * a forwarder that does not match its declaration does not compile.
 *
 * Our forwarders are not exported (an executable exports only what a library it links
 * needs), so a library we open resolves its own calls to itself, never to them.
 */
#include <cuda.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/cudalibs.h"
#include "gpupick.h"
#include "dslaunch/common/banned.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* X(return type, name, (parameters), (arguments), value when the library is missing) */
#define DRIVER_FNS(X)                                                                   \
    X(CUresult, cuInit, (unsigned int flags), (flags), CUDA_ERROR_NOT_INITIALIZED)       \
    X(CUresult, cuDriverGetVersion, (int *v), (v), CUDA_ERROR_NOT_INITIALIZED)           \
    X(CUresult, cuDeviceGetCount, (int *n), (n), CUDA_ERROR_NOT_INITIALIZED)             \
    X(CUresult, cuGetErrorName, (CUresult e, const char **s), (e, s), CUDA_ERROR_NOT_INITIALIZED)

#define LT_FNS(X)                                                                        \
    X(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * h), (h), NOLIB_BLAS)            \
    X(cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t h), (h), NOLIB_BLAS)             \
    X(cublasStatus_t, cublasLtMatmul,                                                    \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,      \
       cublasLtMatrixLayout_t Ad, const void *B, cublasLtMatrixLayout_t Bd,               \
       const void *beta, const void *C, cublasLtMatrixLayout_t Cd, void *D,               \
       cublasLtMatrixLayout_t Dd, const cublasLtMatmulAlgo_t *algo, void *ws,             \
       size_t wsbytes, cudaStream_t s),                                                   \
      (h, d, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, ws, wsbytes, s), NOLIB_BLAS)  \
    X(cublasStatus_t, cublasLtMatmulDescCreate,                                          \
      (cublasLtMatmulDesc_t * d, cublasComputeType_t c, cudaDataType_t t), (d, c, t),     \
      NOLIB_BLAS)                                                                        \
    X(cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t d), (d), NOLIB_BLAS) \
    X(cublasStatus_t, cublasLtMatmulDescSetAttribute,                                    \
      (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,         \
       size_t n),                                                                        \
      (d, a, buf, n), NOLIB_BLAS)                                                        \
    X(cublasStatus_t, cublasLtMatrixLayoutCreate,                                        \
      (cublasLtMatrixLayout_t * l, cudaDataType t, uint64_t rows, uint64_t cols,          \
       int64_t ld),                                                                      \
      (l, t, rows, cols, ld), NOLIB_BLAS)                                                \
    X(cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t l), (l),       \
      NOLIB_BLAS)                                                                        \
    X(cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * p),   \
      (p), NOLIB_BLAS)                                                                   \
    X(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t p),    \
      (p), NOLIB_BLAS)                                                                   \
    X(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,                              \
      (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a,              \
       const void *buf, size_t n),                                                       \
      (p, a, buf, n), NOLIB_BLAS)                                                        \
    X(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,                                    \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,              \
       cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,      \
       cublasLtMatmulPreference_t p, int want, cublasLtMatmulHeuristicResult_t res[],     \
       int *got),                                                                        \
      (h, d, A, B, C, D, p, want, res, got), NOLIB_BLAS)                                 \
    X(cublasStatus_t, cublasLtMatmulAlgoConfigGetAttribute,                              \
      (const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t a, void *buf, \
       size_t n, size_t *written),                                                       \
      (algo, a, buf, n, written), NOLIB_BLAS)

#define BLAS_FNS(X)                                                                      \
    X(cublasStatus_t, cublasCreate_v2, (cublasHandle_t * h), (h), NOLIB_BLAS)             \
    X(cublasStatus_t, cublasDestroy_v2, (cublasHandle_t h), (h), NOLIB_BLAS)              \
    X(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t h, cudaStream_t s), (h, s),     \
      NOLIB_BLAS)                                                                        \
    X(cublasStatus_t, cublasSetMathMode, (cublasHandle_t h, cublasMath_t m), (h, m),      \
      NOLIB_BLAS)                                                                        \
    X(const char *, cublasGetStatusString, (cublasStatus_t s), (s), nolib_text(LIB_BLAS))  \
    X(cublasStatus_t, cublasSgemm_v2,                                                    \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, \
       const float *alpha, const float *A, int lda, const float *B, int ldb,              \
       const float *beta, float *C, int ldc),                                            \
      (h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc), NOLIB_BLAS)             \
    X(cublasStatus_t, cublasGemmEx,                                                      \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, \
       const void *alpha, const void *A, cudaDataType At, int lda, const void *B,         \
       cudaDataType Bt, int ldb, const void *beta, void *C, cudaDataType Ct, int ldc,     \
       cublasComputeType_t ct, cublasGemmAlgo_t algo),                                   \
      (h, ta, tb, m, n, k, alpha, A, At, lda, B, Bt, ldb, beta, C, Ct, ldc, ct, algo),    \
      NOLIB_BLAS)

#define NCCL_FNS(X)                                                                      \
    X(const char *, ncclGetErrorString, (ncclResult_t r), (r), nolib_text(LIB_NCCL))      \
    X(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * id), (id), ncclSystemError)          \
    X(ncclResult_t, ncclCommInitRankConfig,                                              \
      (ncclComm_t * c, int n, ncclUniqueId id, int rank, ncclConfig_t *cfg),              \
      (c, n, id, rank, cfg), ncclSystemError)                                            \
    X(ncclResult_t, ncclCommFinalize, (ncclComm_t c), (c), ncclSystemError)               \
    X(ncclResult_t, ncclCommDestroy, (ncclComm_t c), (c), ncclSystemError)                \
    X(ncclResult_t, ncclCommAbort, (ncclComm_t c), (c), ncclSystemError)                  \
    X(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t c, ncclResult_t * e), (c, e),      \
      ncclSystemError)                                                                   \
    X(ncclResult_t, ncclBroadcast,                                                       \
      (const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c,        \
       cudaStream_t st),                                                                 \
      (s, r, n, t, root, c, st), ncclSystemError)                                        \
    X(ncclResult_t, ncclAllReduce,                                                       \
      (const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,  \
       cudaStream_t st),                                                                 \
      (s, r, n, t, op, c, st), ncclSystemError)                                          \
    X(ncclResult_t, ncclReduceScatter,                                                   \
      (const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,  \
       cudaStream_t st),                                                                 \
      (s, r, n, t, op, c, st), ncclSystemError)                                          \
    X(ncclResult_t, ncclAllGather,                                                       \
      (const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st), \
      (s, r, n, t, c, st), ncclSystemError)

#define NOLIB_BLAS CUBLAS_STATUS_NOT_INITIALIZED

enum { LIB_DRIVER, LIB_LT, LIB_BLAS, LIB_NCCL, NLIB };
enum { UNTRIED, LOADED, MISSING };

static struct lib {
    const char *soname, *what;
    int fallback; /* also $CUDA_HOME/lib64 */
    void *handle;
    _Atomic int state;
    char err[320]; /* the loader's text when missing */
} libs[NLIB] = {
    [LIB_DRIVER] = {"libcuda.so.1", "the NVIDIA driver", 0, NULL, UNTRIED, ""},
    [LIB_LT] = {"libcublasLt.so." STR(CUBLAS_VER_MAJOR), "cuBLASLt", 1, NULL, UNTRIED, ""},
    [LIB_BLAS] = {"libcublas.so." STR(CUBLAS_VER_MAJOR), "cuBLAS", 1, NULL, UNTRIED, ""},
    [LIB_NCCL] = {"libnccl.so." STR(NCCL_MAJOR), "NCCL", 1, NULL, UNTRIED, ""},
};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* the tables: one pointer per function, named after it */
#define FIELD(ret, name, params, args, fail) ret(*name) params;
static struct drv_fns {
    DRIVER_FNS(FIELD)
} drv;
static struct lt_fns {
    LT_FNS(FIELD)
} lt;
static struct blas_fns {
    BLAS_FNS(FIELD)
} blas;
static struct nccl_fns {
    NCCL_FNS(FIELD)
} nccl;
#undef FIELD

/* dlopen by soname, then (fallback) in $CUDA_HOME/lib64; NULL with the first text */
static void *open_lib(struct lib *l)
{
    void *h = dlopen(l->soname, RTLD_NOW | RTLD_LOCAL);
    if (h)
        return h;
    const char *e = dlerror();
    snprintf(l->err, sizeof(l->err), "%s", e ? e : "cannot be loaded");
    if (!l->fallback)
        return NULL;
    const char *home = getenv("CUDA_HOME");
    char dir[4096], path[4200];
    snprintf(dir, sizeof(dir), "%s/lib64", home && *home ? home : "/usr/local/cuda");
    snprintf(path, sizeof(path), "%s/%s", dir, l->soname);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        size_t len = strlen(l->err);
        snprintf(l->err + len, sizeof(l->err) - len, " (nor in '%s')", dir);
    }
    return h;
}

/* one function of a table from h, into its pointer; ok set to 0 and the text in
 * l->err when missing */
#define SYM(ret, name, params, args, fail)                                               \
    if (ok) {                                                                            \
        void *sym = dlsym(h, #name);                                                     \
        if (sym) {                                                                       \
            memcpy(&tab->name, &sym, sizeof(sym));                                       \
        } else {                                                                         \
            snprintf(l->err, sizeof(l->err), "%s has no %s (too old)", l->soname, #name); \
            ok = 0;                                                                      \
        }                                                                                \
    }
static int fill_driver(struct lib *l, void *h, struct drv_fns *tab)
{
    int ok = 1;
    DRIVER_FNS(SYM)
    return ok;
}
static int fill_lt(struct lib *l, void *h, struct lt_fns *tab)
{
    int ok = 1;
    LT_FNS(SYM)
    return ok;
}
static int fill_blas(struct lib *l, void *h, struct blas_fns *tab)
{
    int ok = 1;
    BLAS_FNS(SYM)
    return ok;
}
static int fill_nccl(struct lib *l, void *h, struct nccl_fns *tab)
{
    int ok = 1;
    NCCL_FNS(SYM)
    return ok;
}
#undef SYM
/* a pointer to a function and one to an object have the same size (POSIX dlsym) */
_Static_assert(sizeof(void *) == sizeof(drv.cuInit), "function pointers are not void *");

/* try library i once; its state (LOADED or MISSING) */
static int load_one(int i)
{
    struct lib *l = &libs[i];
    int st = atomic_load_explicit(&l->state, memory_order_acquire);
    if (st != UNTRIED)
        return st;
    /* cuBLAS needs cuBLASLt: the same folder serves both */
    if (i == LIB_BLAS && load_one(LIB_LT) != LOADED) {
        pthread_mutex_lock(&lock);
        if (atomic_load_explicit(&l->state, memory_order_relaxed) == UNTRIED) {
            snprintf(l->err, sizeof(l->err), "needs %s", libs[LIB_LT].soname);
            atomic_store_explicit(&l->state, MISSING, memory_order_release);
        }
        pthread_mutex_unlock(&lock);
        return MISSING;
    }
    pthread_mutex_lock(&lock);
    st = atomic_load_explicit(&l->state, memory_order_relaxed);
    if (st == UNTRIED) {
        void *h = open_lib(l);
        int ok = h != NULL;
        if (ok) {
            switch (i) {
            case LIB_DRIVER: ok = fill_driver(l, h, &drv); break;
            case LIB_LT: ok = fill_lt(l, h, &lt); break;
            case LIB_BLAS: ok = fill_blas(l, h, &blas); break;
            default: ok = fill_nccl(l, h, &nccl); break;
            }
        }
        if (ok) {
            l->handle = h;
            st = LOADED;
        } else {
            if (h)
                dlclose(h);
            st = MISSING;
        }
        atomic_store_explicit(&l->state, st, memory_order_release);
    }
    pthread_mutex_unlock(&lock);
    return st;
}

/* a forwarder's error text when its library is missing */
static const char *nolib_text(int i)
{
    load_one(i);
    return libs[i].err[0] ? libs[i].err : "not loaded";
}

/* the forwarders: the libraries' own names and prototypes (cublas_v2.h maps
 * cublasCreate and friends to their _v2 names, which are the ones defined here) */
#define FWD_LT(ret, name, params, args, fail)                                            \
    ret name params                                                                      \
    {                                                                                    \
        return load_one(LIB_LT) == LOADED ? lt.name args : fail;                         \
    }
#define FWD_BLAS(ret, name, params, args, fail)                                          \
    ret name params                                                                      \
    {                                                                                    \
        return load_one(LIB_BLAS) == LOADED ? blas.name args : fail;                     \
    }
#define FWD_NCCL(ret, name, params, args, fail)                                          \
    ret name params                                                                      \
    {                                                                                    \
        return load_one(LIB_NCCL) == LOADED ? nccl.name args : fail;                     \
    }
LT_FNS(FWD_LT)
BLAS_FNS(FWD_BLAS)
NCCL_FNS(FWD_NCCL)
#undef FWD_LT
#undef FWD_BLAS
#undef FWD_NCCL

const char *dsl_cudalib_soname(unsigned lib)
{
    switch (lib) {
    case DSL_CUDALIB_DRIVER: return libs[LIB_DRIVER].soname;
    case DSL_CUDALIB_CUBLAS: return libs[LIB_BLAS].soname;
    case DSL_CUDALIB_NCCL: return libs[LIB_NCCL].soname;
    default: return "";
    }
}

int dsl_cudalib_load(unsigned which, char *err)
{
    static const struct {
        unsigned bit;
        int lib;
    } order[] = {{DSL_CUDALIB_DRIVER, LIB_DRIVER}, {DSL_CUDALIB_CUBLAS, LIB_LT},
                 {DSL_CUDALIB_CUBLAS, LIB_BLAS}, {DSL_CUDALIB_NCCL, LIB_NCCL}};
    char names[512] = "";
    size_t len = 0;
    int first = -1;
    for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
        int i = order[k].lib;
        if (!(which & order[k].bit) || load_one(i) == LOADED)
            continue;
        /* cuBLAS untried for want of cuBLASLt: cuBLASLt is named already */
        if (i == LIB_BLAS && load_one(LIB_LT) != LOADED)
            continue;
        if (first < 0)
            first = i;
        int n = snprintf(names + len, sizeof(names) - len, "%s%s (%s)", len ? ", " : "",
                         libs[i].soname, libs[i].what);
        if (n > 0 && (size_t)n < sizeof(names) - len)
            len += (size_t)n;
    }
    if (first < 0)
        return 0;
    return dsl_seterr(err, DSL_ENOGPU, "missing %s: %s", names, libs[first].err);
}

/* a driver error as its name ("CUDA_ERROR_NO_DEVICE") */
static const char *cu_name(CUresult e)
{
    const char *s = NULL;
    return drv.cuGetErrorName(e, &s) == CUDA_SUCCESS && s ? s : "an unknown error";
}

int dsl_cudalib_device_count(int *n, char *err)
{
    int r = dsl_cudalib_load(DSL_CUDALIB_DRIVER, err);
    if (r < 0)
        return r;
    int v = 0;
    CUresult e = drv.cuDriverGetVersion(&v);
    if (e != CUDA_SUCCESS)
        return dsl_seterr(err, DSL_ENOGPU, "the NVIDIA driver: cuDriverGetVersion failed: %s",
                          cu_name(e));
    /* the runtime in this binary needs a driver of its major version or later */
    if (v / 1000 < CUDA_VERSION / 1000)
        return dsl_seterr(err, DSL_ENOGPU,
                          "the NVIDIA driver supports CUDA %d.%d and this program was built "
                          "with CUDA %d.%d: a newer driver is needed",
                          v / 1000, v % 1000 / 10, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
    e = drv.cuInit(0);
    if (e == CUDA_ERROR_NO_DEVICE) {
        *n = 0;
        return 0;
    }
    int count = 0;
    if (e == CUDA_SUCCESS)
        e = drv.cuDeviceGetCount(&count);
    if (e != CUDA_SUCCESS)
        return dsl_seterr(err, DSL_ENOGPU, "the NVIDIA driver cannot start: %s", cu_name(e));
    *n = count;
    return 0;
}

int dsl_cudalib_place(unsigned which, const struct dsl_rankenv *env, int *device, char *err)
{
    int n = 0, r = dsl_cudalib_load(which | DSL_CUDALIB_DRIVER, err);
    if (r == 0)
        r = dsl_cudalib_device_count(&n, err);
    if (r == 0)
        r = dsl_gpu_pick_env(n, env, device, err);
    return r;
}
