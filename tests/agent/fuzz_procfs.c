/*
 * libFuzzer target: the kernel texts a node agent reads to contain and explain its
 * ranks, several of which quote names users choose (a process's comm in
 * /proc/PID/stat and in the kernel log, mount points in mountinfo). The first byte picks
 * the cgroup hierarchy ("" for v2, memory, pids, freezer); the rest, up to a NUL, is
 * given to each parser: a /proc/PID/stat line (dsl_contain_parse_stat), a /proc/meminfo
 * (dsl_cause_meminfo_available), a kernel log line (dsl_cause_kmsg_oom_pid), and,
 * split at its first "\n\n", a /proc/self/mountinfo and a /proc/self/cgroup
 * (dsl_cgroup_locate).
 *   - a stat line that parses gives a pid the agent may signal (> 0: kill() of 0 or a
 *     negative pid reaches whole groups) and a parent and group that are not negative;
 *   - a MemAvailable that reads is a finite, non-negative size, and prints;
 *   - an OOM victim is 0 (none) or a positive pid;
 *   - a located cgroup directory fits its buffer.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/xalloc.h"
#include "dslaunch/proto/cause.h"
#include "agent/cgroup.h"
#include "agent/contain.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const ctl[] = {"", "memory", "pids", "freezer"};
    if (size < 1)
        return 0;
    char *s = dsl_xstrndup((const char *)data + 1, size - 1);

    struct dsl_procstat st;
    if (dsl_contain_parse_stat(s, &st) == 0 && (st.pid <= 0 || st.ppid < 0 || st.pgid < 0))
        abort();

    double bytes = -1;
    if (dsl_cause_meminfo_available(s, &bytes) == 0) {
        if (!isfinite(bytes) || bytes < 0)
            abort();
        char buf[32];
        dsl_cause_size(bytes, buf, sizeof(buf));
    }

    if (dsl_cause_kmsg_oom_pid(s) < 0)
        abort();

    char *cg = strstr(s, "\n\n"), dir[256];
    const char *self = "";
    if (cg) {
        *cg = '\0';
        self = cg + 2;
    }
    if (dsl_cgroup_locate(s, self, ctl[data[0] & 3], dir, sizeof(dir)) == 0 &&
        strlen(dir) >= sizeof(dir))
        abort();
    free(s);
    return 0;
}
