/*
 * OpenBLAS's kernel choice, checked against the CPU (src/device/blascore.c).
 */
#ifndef DSLAUNCH_BLASCORE_H
#define DSLAUNCH_BLASCORE_H

#include <stddef.h>

/** The kernel family OpenBLAS uses ("SkylakeX", "Haswell", "Prescott", ...). */
const char *dsl_blas_core(void);

/** The best kernel family this CPU supports (x86-64: "SkylakeX", "Haswell",
 *  "Sandybridge"), or NULL when there is nothing to say. */
const char *dsl_blas_best_core(void);

/** 1 when this CPU can execute OpenBLAS's kernel family `core` (case-insensitive:
 *  "Haswell", "SkylakeX", ...); else 0, with the reason in why (may be NULL). */
int dsl_blas_core_runnable(const char *core, char *why, size_t len);

/** The kernel families the tests run under that this CPU can execute, of
 *  Prescott, Sandybridge, Haswell, Zen, SkylakeX, Cooperlake: up to max names (static
 *  strings) into out; returns the count. */
size_t dsl_blas_runnable_cores(const char **out, size_t max);

/**
 * Call first thing in main(), before any product. If OpenBLAS fell back to old kernels
 * on a CPU that supports better ones and OPENBLAS_CORETYPE is not set, re-executes the
 * program with OPENBLAS_CORETYPE set (does not return). If OPENBLAS_CORETYPE makes
 * OpenBLAS use kernels this CPU cannot execute, returns DSL_ECONFIG with the reason in
 * err (no product has run: nothing died of SIGILL). Otherwise returns 0, with *note a
 * line for the user (static storage: after such a re-exec, or when OPENBLAS_CORETYPE
 * names no family OpenBLAS has) or NULL.
 */
int dsl_blas_check_core(char **argv, const char **note, char *err);

#endif
