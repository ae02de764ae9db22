/*
 * OpenBLAS's kernel choice, checked against the CPU (src/model/blascore.c).
 */
#ifndef DSLAUNCH_BLASCORE_H
#define DSLAUNCH_BLASCORE_H

/** The kernel family OpenBLAS uses ("SkylakeX", "Haswell", "Prescott", ...). */
const char *dsl_blas_core(void);

/** The best kernel family this CPU supports (x86-64: "SkylakeX", "Haswell",
 *  "Sandybridge"), or NULL when there is nothing to say. */
const char *dsl_blas_best_core(void);

/**
 * Call first thing in main(). If OpenBLAS fell back to old kernels on a CPU that
 * supports better ones and OPENBLAS_CORETYPE is not set, re-executes the program with
 * OPENBLAS_CORETYPE set (does not return). After such a re-exec it returns a note for
 * the user (static storage); otherwise NULL.
 */
const char *dsl_blas_check_core(char **argv);

#endif
