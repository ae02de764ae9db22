/*
 * Facts about this node for `dslaunch doctor`, collected by the agent when a probe asks
 * for them (diag = 1).
 *
 * Theory of operation. Everything is read at the moment of the request, in the agent's
 * process, with the agent's environment (so LD_LIBRARY_PATH is the one a non-interactive
 * login on that node gets): uname and glibc directly; the CUDA driver (libcuda.so.1),
 * the CUDA runtime (libcudart.so*) and NCCL (libnccl.so.2) are dlopen'ed and asked for
 * their version only if present, so dslaunch has no CUDA link dependency and a node
 * without them reads "none"; NVML (libnvidia-ml.so.1) gives per-GPU free and total
 * memory (asked first, before anything of ours could hold GPU memory); with two or more
 * GPUs the runtime is asked whether every pair has peer access. Every library is closed
 * again before returning, except a CUDA runtime that initialised the driver (its
 * threads keep running library code). Nothing here prints; a
 * library that is missing or fails is simply "none" / "n/a".
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <time.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/remote/facts.h"
#include "dslaunch/remote/netinfo.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define IB_DIR "/sys/class/infiniband"

double dsl_facts_realtime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void dsl_facts_cuda_version(int code, char *out, size_t n)
{
    snprintf(out, n, "%d.%d", code / 1000, (code % 1000) / 10);
}

void dsl_facts_nccl_version(int code, char *out, size_t n)
{
    if (code >= 20900) /* NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9 */
        snprintf(out, n, "%d.%d.%d", code / 10000, (code % 10000) / 100, code % 100);
    else /* X*1000 + Y*100 + Z before */
        snprintf(out, n, "%d.%d.%d", code / 1000, (code % 1000) / 100, code % 100);
}

/* dlsym into a function pointer without the object-to-function cast ISO C forbids. */
static int sym(void *lib, const char *name, void *fnptr, size_t size)
{
    void *p = lib ? dlsym(lib, name) : NULL;
    if (!p || size != sizeof(p))
        return 0;
    memcpy(fnptr, &p, size);
    return 1;
}

/* dlopen the first of names found, in ld_path's directories first, then as the loader
 * would; *path gets the file it came from (malloc'd, "" if none). */
static void *open_first(const char *const *names, const char *ld_path, char **path)
{
    void *h = NULL;
    for (const char *p = ld_path ? ld_path : ""; *p && !h;) {
        const char *e = strchr(p, ':');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        for (const char *const *n = names; len && *n && !h; n++) {
            char *file = dsl_xasprintf("%.*s/%s", (int)len, p, *n);
            h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
            free(file);
        }
        p += len + (e != NULL);
    }
    for (const char *const *n = names; *n && !h; n++)
        h = dlopen(*n, RTLD_NOW | RTLD_LOCAL);
    char buf[PATH_MAX] = "";
    struct link_map *lm = NULL;
    if (h && path && dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
        snprintf(buf, sizeof(buf), "%s", lm->l_name);
    if (path)
        *path = dsl_xstrdup(h ? buf : "");
    return h;
}

/* Ask lib's fn(int *) for a version code; "none" when absent or failing. */
static char *lib_version(void *lib, const char *fn, int nccl)
{
    int (*get)(int *) = NULL;
    int code = 0;
    char buf[32];
    if (!sym(lib, fn, &get, sizeof(get)) || get(&code) != 0 || code <= 0)
        return dsl_xstrdup("none");
    if (nccl)
        dsl_facts_nccl_version(code, buf, sizeof(buf));
    else
        dsl_facts_cuda_version(code, buf, sizeof(buf));
    return dsl_xstrdup(buf);
}

struct nvml_memory {
    unsigned long long total, free, used;
};

static void collect_nvml(struct dsl_facts *f)
{
    static const char *const names[] = {"libnvidia-ml.so.1", "libnvidia-ml.so", NULL};
    void *lib = open_first(names, NULL, NULL);
    int (*init)(void) = NULL, (*shutdown)(void) = NULL;
    int (*count)(unsigned int *) = NULL;
    int (*handle)(unsigned int, void **) = NULL;
    int (*meminfo)(void *, struct nvml_memory *) = NULL;
    unsigned int n = 0;
    if (!sym(lib, "nvmlInit_v2", &init, sizeof(init)) ||
        !sym(lib, "nvmlShutdown", &shutdown, sizeof(shutdown)) ||
        !sym(lib, "nvmlDeviceGetCount_v2", &count, sizeof(count)) ||
        !sym(lib, "nvmlDeviceGetHandleByIndex_v2", &handle, sizeof(handle)) ||
        !sym(lib, "nvmlDeviceGetMemoryInfo", &meminfo, sizeof(meminfo)))
        goto out;
    if (init() != 0)
        goto out;
    if (count(&n) == 0 && n > 0 && n <= 1024) {
        f->gpu_free_mib = dsl_xcalloc(n, sizeof(double));
        f->gpu_total_mib = dsl_xcalloc(n, sizeof(double));
        for (unsigned int i = 0; i < n; i++) {
            void *dev = NULL;
            struct nvml_memory mem = {0, 0, 0};
            if (handle(i, &dev) == 0 && meminfo(dev, &mem) == 0) {
                f->gpu_free_mib[i] = (double)mem.free / 1048576.0;
                f->gpu_total_mib[i] = (double)mem.total / 1048576.0;
            } else {
                f->gpu_free_mib[i] = f->gpu_total_mib[i] = -1;
            }
        }
        f->ngpu = (int)n;
        f->nvml = 1;
    }
    shutdown();
out:
    if (lib)
        dlclose(lib);
}

static void collect_cuda(struct dsl_facts *f, const char *ld_path)
{
    static const char *const driver[] = {"libcuda.so.1", "libcuda.so", NULL};
    static const char *const runtime[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                          "libcudart.so.11.0", NULL};
    static const char *const nccl[] = {"libnccl.so.2", "libnccl.so", NULL};
    void *lib = open_first(driver, NULL, NULL); /* the driver comes with the kernel module */
    f->cuda_driver = lib_version(lib, "cuDriverGetVersion", 0);
    if (lib)
        dlclose(lib);
    lib = open_first(runtime, ld_path, &f->cudart_path);
    f->cuda_runtime = lib_version(lib, "cudaRuntimeGetVersion", 0);
    /* peer access between every pair of GPUs (what NCCL's P2P transport needs); only
     * with two or more GPUs, since it initialises the driver */
    int (*devcount)(int *) = NULL, (*canpeer)(int *, int, int) = NULL;
    int ndev = 0, inited = 0;
    if (strcmp(f->cuda_driver, "none") != 0 && dsl_netinfo_gpus(NULL) >= 2 &&
        sym(lib, "cudaGetDeviceCount", &devcount, sizeof(devcount)) &&
        sym(lib, "cudaDeviceCanAccessPeer", &canpeer, sizeof(canpeer))) {
        inited = 1;
        if (devcount(&ndev) == 0 && ndev >= 2) {
            f->p2p = 1;
            for (int a = 0; a < ndev && a < 64; a++)
                for (int b = 0; b < ndev && b < 64; b++) {
                    int ok = 0;
                    if (a != b && (canpeer(&ok, a, b) != 0 || !ok))
                        f->p2p = 0;
                }
        }
    }
    /* once the runtime has initialised the driver, its threads run code of both
     * libraries: they stay loaded for the rest of this (short-lived) agent */
    if (lib && !inited)
        dlclose(lib);
    lib = open_first(nccl, ld_path, &f->nccl_path);
    f->nccl = lib_version(lib, "ncclGetVersion", 1);
    if (lib)
        dlclose(lib);
}

void dsl_facts_collect(struct dsl_facts *f, const char *cwd, const char *ld_path)
{
    struct utsname u;
    f->kernel = dsl_xstrdup(uname(&u) == 0 ? u.release : "unknown");
    f->glibc = dsl_xstrdup(gnu_get_libc_version());
    const char *cvd = getenv(DSL_ENV_CUDA_VISIBLE_DEVICES);
    f->cvd_set = cvd != NULL;
    f->cvd = dsl_xstrdup(cvd ? cvd : "");
    collect_nvml(f); /* first: nothing of ours holds GPU memory yet */
    collect_cuda(f, ld_path);
    DIR *d = opendir(IB_DIR);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.')
                dsl_strvec_push(&f->ib, e->d_name);
        closedir(d);
    }
    struct statvfs sv;
    if (statvfs(cwd && cwd[0] ? cwd : ".", &sv) == 0)
        f->disk_free = (double)sv.f_bavail * (double)sv.f_frsize;
}
