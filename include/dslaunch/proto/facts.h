/*
 * The facts a node agent reports about its node for `dslaunch doctor`: the "facts"
 * member of the probed message (proto.h). The agent collects them (remote/facts.h);
 * the launcher's doctor reads them.
 *
 * Every pointer member is owned by the struct and freed by dsl_facts_release().
 */
#ifndef DSLAUNCH_PROTO_FACTS_H
#define DSLAUNCH_PROTO_FACTS_H

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

#endif
