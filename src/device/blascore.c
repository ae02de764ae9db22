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
#include <strings.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/device/blascore.h"
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

/* What each x86-64 kernel family of OpenBLAS executes, beyond SSE2: the CPU needs all
 * of it (OpenBLAS's own detection requires the same; a family forced on a CPU without
 * it dies of SIGILL in the first product). */
static const struct {
    const char *core;
    const char *needs[8];
} families[] = {
    {"Prescott", {"sse3"}},
    {"Core2", {"sse3", "ssse3"}},
    {"Penryn", {"sse3", "ssse3", "sse4.1"}},
    {"Dunnington", {"sse3", "ssse3", "sse4.1"}},
    {"Nehalem", {"sse3", "ssse3", "sse4.1", "sse4.2"}},
    {"Atom", {"sse3", "ssse3"}},
    {"Barcelona", {"sse3", "sse4a"}},
    {"Opteron", {"sse3"}},
    {"Sandybridge", {"sse3", "ssse3", "sse4.2", "avx"}},
    {"Bulldozer", {"sse3", "avx", "fma4"}},
    {"Piledriver", {"sse3", "avx", "fma"}},
    {"Steamroller", {"sse3", "avx", "fma"}},
    {"Excavator", {"sse3", "avx", "fma"}},
    {"Haswell", {"sse3", "avx", "avx2", "fma"}},
    {"Zen", {"sse3", "avx", "avx2", "fma"}},
    {"SkylakeX", {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"}},
    {"Cooperlake",
     {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512bf16"}},
    {"SapphireRapids",
     {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512bf16"}},
};

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define DSL_X86 1
static int cpu_has(const char *f)
{
    /* a test seam: features to treat as missing, so the refusal is tested on any CPU */
    const char *lacks = getenv("DSL_TEST_CPU_LACKS"); /* comma-separated */
    for (size_t n = strlen(f); lacks && *lacks; lacks += strcspn(lacks, ","),
                lacks += *lacks == ',')
        if (!strncmp(lacks, f, n) && (lacks[n] == ',' || !lacks[n]))
            return 0;
    __builtin_cpu_init();
    /* __builtin_cpu_supports takes string literals only */
#define HAS(name)                                                                      \
    if (!strcmp(f, name))                                                              \
        return __builtin_cpu_supports(name);
    HAS("sse3") HAS("ssse3") HAS("sse4.1") HAS("sse4.2") HAS("sse4a") HAS("avx")
    HAS("avx2") HAS("fma") HAS("fma4") HAS("avx512f") HAS("avx512bw") HAS("avx512vl")
    HAS("avx512dq") HAS("avx512cd")
#undef HAS
#if defined(__clang__) || __GNUC__ >= 12
    if (!strcmp(f, "avx512bf16"))
        return __builtin_cpu_supports("avx512bf16");
#endif
    return 0;
}
#endif

int dsl_blas_core_runnable(const char *core, char *why, size_t len)
{
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        if (strcasecmp(core, families[i].core))
            continue;
#ifdef DSL_X86
        for (size_t k = 0; k < 8 && families[i].needs[k]; k++)
            if (!cpu_has(families[i].needs[k])) {
                if (why && len)
                    snprintf(why, len, "its kernels need %s, which this CPU lacks",
                             families[i].needs[k]);
                return 0;
            }
        return 1;
#else
        if (why && len)
            snprintf(why, len, "it is an x86-64 kernel family");
        return 0;
#endif
    }
    if (why && len)
        snprintf(why, len, "it is no x86-64 kernel family that dstrain knows");
    return 0;
}

size_t dsl_blas_runnable_cores(const char **out, size_t max)
{
    size_t n = 0;
    static const char *const tested[] = {"Prescott", "Sandybridge", "Haswell", "Zen",
                                         "SkylakeX", "Cooperlake"};
    for (size_t i = 0; i < sizeof(tested) / sizeof(tested[0]) && n < max; i++)
        if (dsl_blas_core_runnable(tested[i], NULL, 0))
            out[n++] = tested[i];
    return n;
}

const char *dsl_blas_best_core(void)
{
    static const char *const best_first[] = {"SkylakeX", "Haswell", "Sandybridge"};
    for (size_t i = 0; i < sizeof(best_first) / sizeof(best_first[0]); i++)
        if (dsl_blas_core_runnable(best_first[i], NULL, 0))
            return best_first[i];
    return NULL;
}

int dsl_blas_check_core(char **argv, const char **note, char *err)
{
    static char text[256];
    *note = NULL;
    const char *from = getenv("DSL_BLAS_CORE_FROM");
    if (from) { /* we re-executed: say what was corrected */
        snprintf(text, sizeof(text),
                 "OpenBLAS chose its '%s' kernels for this CPU; using '%s' "
                 "(OPENBLAS_CORETYPE)",
                 from, dsl_blas_core());
        unsetenv("DSL_BLAS_CORE_FROM");
        *note = text;
        return 0;
    }
    const char *core = dsl_blas_core(), *best = dsl_blas_best_core();
    const char *asked = getenv("OPENBLAS_CORETYPE");
    if (asked) {
        /* the user's choice stands, but not one that would die of SIGILL */
        char why[120];
        if (!dsl_blas_core_runnable(core, why, sizeof(why))) {
            const char *ok[8];
            size_t n = dsl_blas_runnable_cores(ok, 8);
            char list[120] = "";
            for (size_t i = 0; i < n; i++)
                snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
                         i ? ", " : "", ok[i]);
            return dsl_seterr(err, DSL_ECONFIG,
                              "OPENBLAS_CORETYPE='%s' makes OpenBLAS use its '%s' kernels, "
                              "which this CPU cannot run (%s); unset it or name one of: %s",
                              asked, core, why, n ? list : "(none known)");
        }
        if (strcasecmp(asked, core)) {
            snprintf(text, sizeof(text),
                     "OPENBLAS_CORETYPE='%s' was not taken (no such kernel family in "
                     "this OpenBLAS, or not for this CPU): it uses '%s'",
                     asked, core);
            *note = text;
        }
        return 0;
    }
    if (!best || !is_fallback(core) || !argv)
        return 0;
    setenv("OPENBLAS_CORETYPE", best, 1);
    setenv("DSL_BLAS_CORE_FROM", core, 1);
    execv("/proc/self/exe", argv);
    /* the exec failed: go on with the slow kernels */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("DSL_BLAS_CORE_FROM");
    return 0;
}
