/*
 * The OpenBLAS kernel check (blascore.h): on a CPU whose model OpenBLAS does not know
 * it falls back to its oldest kernels, and dsl_blas_check_core re-executes the program
 * with OPENBLAS_CORETYPE naming what the CPU supports. The test binary re-executes
 * itself as the program ("helper-core" prints the kernels it ended up with).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/device/blascore.h"
#include "test.h"

static const char *self_path;

/* Run this binary as "helper-core" with OPENBLAS_CORETYPE set to coretype (NULL:
 * unset); out gets its output ("<core> <note or ->"). Returns its exit status. */
static int run_helper(const char *coretype, char *out, size_t n)
{
    int fd[2];
    if (pipe(fd) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        if (coretype)
            setenv("OPENBLAS_CORETYPE", coretype, 1);
        else
            unsetenv("OPENBLAS_CORETYPE");
        unsetenv("DSL_BLAS_CORE_FROM");
        execl(self_path, self_path, "helper-core", (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < n && (k = read(fd[0], out + got, n - 1 - got)) > 0)
        got += (size_t)k;
    out[got] = '\0';
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

TEST(blas_check_should_leave_kernels_the_cpu_cannot_beat_or_the_user_chose)
{
    char out[512];
    /* a user's choice is never overridden, even a poor one */
    ASSERT_EQ(run_helper("Prescott", out, sizeof(out)), 0);
    printf("# OPENBLAS_CORETYPE=Prescott: %s", out);
    ASSERT(strncmp(out, "Prescott -", 10) == 0);
}

TEST(blas_check_should_give_the_best_kernels_the_cpu_supports)
{
    char out[512];
    const char *best = dsl_blas_best_core();
    ASSERT_EQ(run_helper(NULL, out, sizeof(out)), 0);
    printf("# CPU supports %s; OpenBLAS here (after the check): %s", best ? best : "(none)",
           out);
    /* what OpenBLAS picks by itself is whatever it picks, unless it is a fallback: then
     * the check must have replaced it with the best, and said so */
    static const char *const old[] = {"Prescott", "Core2", "Penryn", "Nehalem", "Atom"};
    for (size_t i = 0; best && i < sizeof(old) / sizeof(old[0]); i++)
        ASSERT(strncmp(out, old[i], strlen(old[i])) != 0 || out[strlen(old[i])] != ' ');
    if (strstr(out, "OpenBLAS chose"))
        ASSERT(best && strncmp(out, best, strlen(best)) == 0);
}

/* tests/blascore_run.sh asks before it runs a test under OPENBLAS_CORETYPE=core: 0 when
 * this CPU can run core's kernels and this OpenBLAS has them (run under that variable
 * by the script, so dsl_blas_core() is what OpenBLAS took), else 77 with why */
static int runnable(const char *core)
{
    char why[160];
    if (!dsl_blas_core_runnable(core, why, sizeof(why))) {
        printf("this CPU cannot run OpenBLAS's %s kernels: %s\n", core, why);
        return 77;
    }
    if (strcasecmp(dsl_blas_core(), core)) {
        printf("this OpenBLAS has no %s kernels (OPENBLAS_CORETYPE=%s gives %s)\n", core,
               core, dsl_blas_core());
        return 77;
    }
    return 0;
}

TEST(blas_check_should_refuse_kernels_the_cpu_cannot_run)
{
    char out[512];
    const char *all[] = {"SkylakeX", "Cooperlake", "Haswell", "Zen", "Sandybridge"};
    int refused = 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        int runs = dsl_blas_core_runnable(all[i], NULL, 0);
        int st = run_helper(all[i], out, sizeof(out));
        printf("# OPENBLAS_CORETYPE=%s: %s", all[i], out);
        if (runs) {
            ASSERT_EQ(st, 0);
        } else {
            /* a clear error naming the variable, not a SIGILL */
            ASSERT_EQ(st, 2);
            ASSERT_CONTAINS(out, "OPENBLAS_CORETYPE=");
            ASSERT_CONTAINS(out, "cannot run");
            refused++;
        }
    }
    printf("# %d of 5 families refused on this CPU\n", refused);
    /* the refusal on any CPU: one that lacks AVX-512 (as far as the check is told) */
    setenv("DSL_TEST_CPU_LACKS", "avx512f", 1);
    ASSERT_EQ(run_helper("SkylakeX", out, sizeof(out)), 2);
    printf("# OPENBLAS_CORETYPE=SkylakeX without avx512f: %s", out);
    ASSERT_CONTAINS(out, "OPENBLAS_CORETYPE='SkylakeX'");
    ASSERT_CONTAINS(out, "need avx512f, which this CPU lacks");
    ASSERT_CONTAINS(out, "Haswell");
    unsetenv("DSL_TEST_CPU_LACKS");
    /* the fallback family runs on every x86-64 CPU */
    ASSERT(dsl_blas_core_runnable("Prescott", NULL, 0));
    char why[160];
    ASSERT(!dsl_blas_core_runnable("NoSuchCore", why, sizeof(why)));
    ASSERT_CONTAINS(why, "no x86-64 kernel family");
}

TEST(blas_check_should_list_the_families_the_cpu_runs)
{
    const char *cores[8];
    size_t n = dsl_blas_runnable_cores(cores, 8);
    ASSERT(n >= 1);
    ASSERT_STR_EQ(cores[0], "Prescott");
    for (size_t i = 0; i < n; i++) {
        printf("# runs %s\n", cores[i]);
        ASSERT(dsl_blas_core_runnable(cores[i], NULL, 0));
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "helper-core")) {
        const char *note;
        char err[DSL_ERR_LEN];
        if (dsl_blas_check_core(argv, &note, err) < 0) {
            printf("error %s\n", err);
            return 2;
        }
        printf("%s %s\n", dsl_blas_core(), note ? note : "-");
        return 0;
    }
    if (argc > 2 && !strcmp(argv[1], "runnable"))
        return runnable(argv[2]);
    self_path = "/proc/self/exe";
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n > 0) {
        buf[n] = '\0';
        self_path = strdup(buf);
    }
    return RUN_TESTS(argc, argv);
}
