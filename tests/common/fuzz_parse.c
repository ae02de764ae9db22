/* libFuzzer target: the checked number parsers (common/parse.h) that every option, every
 * environment knob and every env value of the rank contract goes through, and the core
 * lists of --bind_core_list and of sysfs' nodeN/cpulist (common/cpubind.h). The first
 * byte is a capacity for the core list parser (1..256 cores, or every core); the rest,
 * up to its first NUL, is the text.
 *   - a number that parses is within its range and what strtol/strtod read;
 *   - a size that parses formats (dsl_opt_format_size) and parses back to itself;
 *   - a core list that parses is ascending, unique, below DSL_CPUBIND_MAX, at most the
 *     capacity, formats and parses back to itself, and splits between any rank count
 *     it can feed;
 *   - the same text as node0's cpulist of a sysfs copy, read with a table of that
 *     capacity, never writes outside the table. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/cpubind.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char root[64], node[96], cpulist[128];

static void remove_tree(void)
{
    unlink(cpulist);
    rmdir(node);
    rmdir(root);
}

static void numbers(const char *s)
{
    long l;
    int i;
    if (dsl_parse_long(s, -1000, 1000, &l) == 0 && (l < -1000 || l > 1000 || l != strtol(s, NULL, 10)))
        abort();
    if (dsl_parse_int(s, INT_MIN, INT_MAX, &i) == 0 && i != (int)strtol(s, NULL, 10))
        abort();
    size_t z;
    int r = dsl_parse_size(s, &z);
    if (r == 0) {
        char buf[32];
        size_t back;
        dsl_opt_format_size(buf, sizeof(buf), z);
        if (dsl_parse_size(buf, &back) != 0 || back != z)
            abort();
    } else if (r != -EINVAL && r != -ERANGE) {
        abort();
    }
    double d;
    if (dsl_parse_double(s, &d) == 0 && !isfinite(d))
        abort();
    if (dsl_parse_seconds(s, &d) == 0 && (!isfinite(d) || d < 0))
        abort();
}

static void cores(const char *s, size_t cap)
{
    static int out[DSL_CPUBIND_MAX], again[DSL_CPUBIND_MAX], split[DSL_CPUBIND_MAX];
    static char text[DSL_CPUBIND_MAX * 6];
    char err[DSL_ERR_LEN] = "";
    int n = dsl_cpubind_parse(s, out, cap, err);
    if (n < 0) {
        if (n != DSL_EUSAGE || !err[0])
            abort();
        return;
    }
    if (n < 1 || (size_t)n > cap)
        abort();
    for (int k = 0; k < n; k++)
        if (out[k] < 0 || out[k] >= DSL_CPUBIND_MAX || (k && out[k] <= out[k - 1]))
            abort();
    dsl_cpubind_format(out, (size_t)n, text, sizeof(text));
    if (dsl_cpubind_parse(text, again, DSL_CPUBIND_MAX, err) != n ||
        memcmp(out, again, (size_t)n * sizeof(int)) != 0)
        abort();
    int nranks = 1 + (int)(s[0] % 8), per = 0;
    if (dsl_cpubind_split(out, (size_t)n, NULL, nranks, split, &per, err) == 0) {
        if (per < 1 || (size_t)per * (size_t)nranks > (size_t)n)
            abort();
    } else if (n >= nranks) {
        abort();
    }
}

/* node0/cpulist of a sysfs copy holds s; read it with a table of cap cores */
static void numa(const char *s, size_t cap)
{
    if (!root[0]) {
        snprintf(root, sizeof(root), "/tmp/dsl_fuzz_numa.%ld", (long)getpid());
        snprintf(node, sizeof(node), "%s/node0", root);
        snprintf(cpulist, sizeof(cpulist), "%s/cpulist", node);
        if ((mkdir(root, 0700) != 0 && errno != EEXIST) || (mkdir(node, 0700) != 0 && errno != EEXIST))
            abort();
        atexit(remove_tree);
    }
    FILE *f = fopen(cpulist, "w");
    if (!f || fputs(s, f) < 0 || fclose(f) != 0)
        abort();
    int *node_of = dsl_xmalloc(cap * sizeof(int)); /* exactly cap, so ASan sees a stray write */
    int nodes = dsl_cpubind_numa(root, node_of, cap);
    if (nodes < 0 || nodes > 1)
        abort();
    for (size_t c = 0; c < cap; c++)
        if (node_of[c] != -1 && node_of[c] != 0)
            abort();
    free(node_of);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t cap = data[0] == 255 ? DSL_CPUBIND_MAX : (size_t)data[0] + 1;
    char *s = dsl_xstrndup((const char *)data + 1, size - 1);
    numbers(s);
    cores(s, cap);
    numa(s, cap);
    free(s);
    return 0;
}
