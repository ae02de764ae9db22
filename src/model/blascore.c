/*
 * OpenBLAS's kernel choice, checked against what this CPU can do.
 *
 * OpenBLAS (Debian's is built with DYNAMIC_ARCH) picks its kernels at load time from
 * the CPU's family and model numbers. A CPU model it does not know, which is what
 * some hypervisors show, makes it fall back to its oldest x86-64 kernels ("Prescott",
 * SSE3), whatever the CPU supports: measured on a 2-core VM of this project with an
 * AVX-512 Xeon, sgemm ran at 29 GFLOP/s per core instead of 125. The choice can only
 * be changed before the library initialises, through OPENBLAS_CORETYPE, so when the
 * kernels are a fallback and the variable is not set, dstrain re-executes itself with
 * it set (same pid, same arguments and environment otherwise), once.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/model/blascore.h"
#include "dslaunch/common/banned.h"

/* Kernel families OpenBLAS falls back to for an unknown x86-64 CPU. */
static int is_fallback(const char *core)
{
    static const char *const old[] = {"Prescott", "Core2",  "Penryn", "Dunnington",
                                      "Nehalem",  "Atom",   "Katmai", "Coppermine",
                                      "Northwood", "Banias", "Barcelona", "Opteron"};
    for (size_t i = 0; i < sizeof(old) / sizeof(old[0]); i++)
        if (core && !strcmp(core, old[i]))
            return 1;
    return 0;
}

const char *dsl_blas_core(void)
{
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
}

const char *dsl_blas_best_core(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    if (__builtin_cpu_supports("avx"))
        return "Sandybridge";
#endif
    return NULL;
}

const char *dsl_blas_check_core(char **argv)
{
    static char note[160];
    const char *from = getenv("DSL_BLAS_CORE_FROM");
    if (from) { /* we re-executed: say what was corrected */
        snprintf(note, sizeof(note),
                 "OpenBLAS chose its '%s' kernels for this CPU; using '%s' "
                 "(OPENBLAS_CORETYPE)",
                 from, dsl_blas_core());
        unsetenv("DSL_BLAS_CORE_FROM");
        return note;
    }
    const char *core = dsl_blas_core(), *best = dsl_blas_best_core();
    if (getenv("OPENBLAS_CORETYPE") || !best || !is_fallback(core) || !argv)
        return NULL;
    setenv("OPENBLAS_CORETYPE", best, 1);
    setenv("DSL_BLAS_CORE_FROM", core, 1);
    execv("/proc/self/exe", argv);
    /* the exec failed: go on with the slow kernels */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("DSL_BLAS_CORE_FROM");
    return NULL;
}
