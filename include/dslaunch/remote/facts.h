/*
 * Facts a node agent collects for `dslaunch doctor` (the "diag" probe, docs/doctor.md):
 * kernel and glibc versions, the CUDA driver, CUDA runtime and NCCL versions of the
 * libraries this node can actually load (dlopen, no link dependency), free GPU memory
 * (NVML), CUDA_VISIBLE_DEVICES, InfiniBand devices, peer-to-peer access between GPUs,
 * free disk in the working directory, and the agent's clock for the skew estimate.
 *
 * The facts themselves are the probed message's datum (proto/facts.h).
 */
#ifndef DSLAUNCH_FACTS_H
#define DSLAUNCH_FACTS_H

#include <stddef.h>

#include "dslaunch/proto/facts.h"

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
