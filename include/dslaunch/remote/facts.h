/*
 * Facts a node agent collects for `dslaunch doctor` (the "diag" probe, docs/doctor.md):
 * kernel and glibc versions, the CUDA driver, CUDA runtime and NCCL versions of the
 * libraries this node can actually load (dlopen, no link dependency), free GPU memory
 * (NVML), CUDA_VISIBLE_DEVICES, InfiniBand devices, peer-to-peer access between GPUs,
 * free disk in the working directory, and the agent's clock for the skew estimate.
 *
 * Every pointer member is owned by the struct and freed by dsl_facts_release().
 */
#ifndef DSLAUNCH_FACTS_H
#define DSLAUNCH_FACTS_H

#include <stddef.h>

#include "dslaunch/common/strvec.h"

struct dsl_facts {
    char *kernel;       /* uname -r */
    char *glibc;        /* gnu_get_libc_version() */
    char *cuda_driver;  /* "12.4" from libcuda.so.1, or "none" */
    char *cuda_runtime; /* "12.4" from libcudart, or "none" */
    char *nccl;         /* "2.20.5" from libnccl.so.2, or "none" */
    char *cudart_path;  /* the file the runtime was loaded from, "" if none */
    char *nccl_path;    /* the file NCCL was loaded from, "" if none */
    char *cvd;          /* the agent's CUDA_VISIBLE_DEVICES, "" when unset */
    int cvd_set;
    int nvml;           /* 1: NVML answered, gpu_free/gpu_total hold ngpu entries */
    int ngpu;
    double *gpu_free_mib, *gpu_total_mib;
    struct dsl_strvec ib; /* entries of /sys/class/infiniband */
    int p2p;            /* 1 every GPU pair has peer access, 0 some pair lacks it, -1 n/a */
    double disk_free;   /* bytes available in the working directory, -1 unknown */
    double t_recv;      /* CLOCK_REALTIME (s) when the request arrived */
    double t_send;      /* CLOCK_REALTIME (s) when the reply was made */
};

void dsl_facts_init(struct dsl_facts *f);
void dsl_facts_release(struct dsl_facts *f);

/**
 * Collect this machine's facts into f (initialised by the caller). cwd is the job's
 * working directory (for free disk; "" or NULL: the current one). ld_path is the
 * LD_LIBRARY_PATH the job's ranks will get (colon-separated; "" or NULL: none): its
 * directories are searched for the libraries before the agent's own search path, as the
 * ranks' dynamic loader would. t_recv and t_send are left for the caller. Never fails:
 * what cannot be learned reads "none", "", -1 or 0.
 */
void dsl_facts_collect(struct dsl_facts *f, const char *cwd, const char *ld_path);

/** CLOCK_REALTIME in seconds. */
double dsl_facts_realtime(void);

/** CUDA's version code (12040) as "12.4"; NCCL's (22005, or 2708 before 2.9) as "2.20.5". */
void dsl_facts_cuda_version(int code, char *out, size_t n);
void dsl_facts_nccl_version(int code, char *out, size_t n);

#endif
