/*
 * Unit tests of rank containment and death causes: the cgroup path logic, the parsing
 * of /proc/meminfo, kernel log lines and /proc/<pid>/stat, the descendant walk, and
 * the summary's wording; plus one real rank cgroup where this machine allows it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/proto/cause.h"
#include "agent/cgroup.h"
#include "agent/contain.h"
#include "test.h"

/* A hybrid machine: v1 controllers (cpu,cpuacct together) and an empty v2 tree. */
static const char hybrid_mountinfo[] =
    "25 30 0:23 / /sys rw,nosuid - sysfs sysfs rw\n"
    "31 25 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
static const char hybrid_cgroup[] = "9:name=systemd:/user.slice/session-1.scope\n"
                                    "8:pids:/\n"
                                    "4:memory:/process_api/453e\n"
                                    "2:cpu,cpuacct:/\n"
                                    "0::/\n";

TEST(cgroup_locate_should_join_mount_point_and_own_path_per_hierarchy)
{
    char d[4096];
    ASSERT_OK(dsl_cgroup_locate(hybrid_mountinfo, hybrid_cgroup, "memory", d, sizeof(d)));
    ASSERT_STR_EQ(d, "/sys/fs/cgroup/memory/process_api/453e");
    ASSERT_OK(dsl_cgroup_locate(hybrid_mountinfo, hybrid_cgroup, "pids", d, sizeof(d)));
    ASSERT_STR_EQ(d, "/sys/fs/cgroup/pids"); /* the root: no trailing slash */
    ASSERT_OK(dsl_cgroup_locate(hybrid_mountinfo, hybrid_cgroup, "cpuacct", d, sizeof(d)));
    ASSERT_STR_EQ(d, "/sys/fs/cgroup/cpu,cpuacct");
    ASSERT_OK(dsl_cgroup_locate(hybrid_mountinfo, hybrid_cgroup, "", d, sizeof(d)));
    ASSERT_STR_EQ(d, "/sys/fs/cgroup/unified");
    ASSERT_EQ(dsl_cgroup_locate(hybrid_mountinfo, hybrid_cgroup, "freezer", d, sizeof(d)),
              -ENOENT); /* not mounted */
    ASSERT_EQ(dsl_cgroup_locate(hybrid_mountinfo, hybrid_cgroup, "memory", d, 10), -ENAMETOOLONG);
}

TEST(cgroup_locate_should_handle_pure_v2_escapes_and_mount_roots)
{
    static const char mi[] =
        "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
    static const char cg[] = "0::/user.slice/user-0.slice/session-3.scope\n";
    char d[4096];
    ASSERT_OK(dsl_cgroup_locate(mi, cg, "", d, sizeof(d)));
    ASSERT_STR_EQ(d, "/sys/fs/cgroup/user.slice/user-0.slice/session-3.scope");
    ASSERT_EQ(dsl_cgroup_locate(mi, cg, "memory", d, sizeof(d)), -ENOENT); /* no v1 memory */

    /* a mount point with a space (\040), and a container whose mount shows only its
       own subtree: the path below the mount's root is what is appended */
    static const char mi2[] =
        "50 40 0:30 /kubepods/pod1 /my\\040cg rw - cgroup cgroup rw,memory\n";
    static const char cg2[] = "5:memory:/kubepods/pod1/c1\n";
    ASSERT_OK(dsl_cgroup_locate(mi2, cg2, "memory", d, sizeof(d)));
    ASSERT_STR_EQ(d, "/my cg/c1");
    /* this process outside the mounted subtree: not usable */
    static const char cg3[] = "5:memory:/elsewhere\n";
    ASSERT_EQ(dsl_cgroup_locate(mi2, cg3, "memory", d, sizeof(d)), -ENOENT);
    /* a prefix that is not a path component does not count */
    static const char cg4[] = "5:memory:/kubepods/pod10\n";
    ASSERT_EQ(dsl_cgroup_locate(mi2, cg4, "memory", d, sizeof(d)), -ENOENT);
}

TEST(cgroup_kernel_at_least_should_compare_major_then_minor)
{
    ASSERT(dsl_cgroup_kernel_at_least("6.18.44-fc-v669", 5, 14));
    ASSERT(dsl_cgroup_kernel_at_least("5.14.0-362.el9.x86_64", 5, 14));
    ASSERT(!dsl_cgroup_kernel_at_least("5.4.0-150-generic", 5, 14));
    ASSERT(dsl_cgroup_kernel_at_least("5.4.0-150-generic", 5, 2));
    ASSERT(!dsl_cgroup_kernel_at_least("4.19.0", 5, 2));
    ASSERT(!dsl_cgroup_kernel_at_least("", 5, 2));
    ASSERT(!dsl_cgroup_kernel_at_least("6", 5, 2)); /* not a release: no guess */
    ASSERT(!dsl_cgroup_kernel_at_least("x.y", 5, 2));
}

TEST(cgroup_has_word_should_match_whole_words_only)
{
    ASSERT(dsl_cgroup_has_word("cpu memory pids\n", "memory", ' '));
    ASSERT(dsl_cgroup_has_word("cpu memory pids\n", "pids", ' '));
    ASSERT(!dsl_cgroup_has_word("cpu memory_x pids", "memory", ' '));
    ASSERT(!dsl_cgroup_has_word("", "memory", ' '));
    ASSERT(dsl_cgroup_has_word("rw,memory", "memory", ','));
}

TEST(meminfo_should_give_mem_available_in_bytes)
{
    double b = 0;
    ASSERT_OK(dsl_cause_meminfo_available("MemTotal:       24683520 kB\n"
                                          "MemFree:        24445260 kB\n"
                                          "MemAvailable:   24379112 kB\n"
                                          "Buffers:            2108 kB\n",
                                          &b));
    ASSERT(b == 24379112.0 * 1024);
    ASSERT_EQ(dsl_cause_meminfo_available("MemTotal: 1 kB\nMemFree: 1 kB\n", &b), -ENOENT);
    ASSERT_EQ(dsl_cause_meminfo_available("MemAvailable: x kB\n", &b), -ENOENT);
    /* found by fuzz_procfs: a number past a double read as infinity bytes */
    ASSERT_EQ(dsl_cause_meminfo_available("MemAvailable:   2e24799939999 kB\n", &b), -ENOENT);
    ASSERT_EQ(dsl_cause_meminfo_available("MemAvailable: nan kB\n", &b), -ENOENT);
    ASSERT_EQ(dsl_cause_meminfo_available("MemAvailable: inf kB\n", &b), -ENOENT);
}

TEST(kmsg_lines_should_name_the_oom_victim)
{
    /* /dev/kmsg records as this kernel writes them */
    ASSERT_EQ(dsl_cause_kmsg_oom_pid("3,4007,2536676307,-;Memory cgroup out of memory: Killed "
                                     "process 29253 (python3) total-vm:221368kB, anon-rss:50816kB"),
              29253);
    ASSERT_EQ(dsl_cause_kmsg_oom_pid("6,4006,2536676273,-;oom-kill:constraint=CONSTRAINT_MEMCG,"
                                     "nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a/t1,"
                                     "task_memcg=/a/t1,task=python3,pid=29253,uid=0"),
              29253);
    /* global OOM, dmesg text without the record prefix, the reaper */
    ASSERT_EQ(dsl_cause_kmsg_oom_pid("Out of memory: Killed process 812 (java) total-vm:9kB"), 812);
    ASSERT_EQ(dsl_cause_kmsg_oom_pid("6,1,2,-;oom_reaper: reaped process 812 (java), now "
                                     "anon-rss:0kB"),
              812);
    /* not OOM reports */
    ASSERT_EQ(dsl_cause_kmsg_oom_pid("6,5,6,-;Killed process 77 by the watchdog"), 0);
    ASSERT_EQ(dsl_cause_kmsg_oom_pid("6,5,6,-;python3 invoked oom-killer: gfp_mask=0xcc0"), 0);
    ASSERT_EQ(dsl_cause_kmsg_oom_pid("6,5,6,-;Out of memory: Killed process x"), 0);
    ASSERT_EQ(dsl_cause_kmsg_oom_pid(""), 0);
}

TEST(sizes_should_use_binary_units)
{
    static const struct {
        double bytes;
        const char *want;
    } cases[] = {
        {512, "512 B"},
        {52428800, "50.0 MiB"},
        {1288490188.8, "1.2 GiB"},
        {12 * 1024, "12.0 KiB"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char b[32];
        dsl_cause_size(cases[i].bytes, b, sizeof(b));
        ASSERT_STR_EQ(b, cases[i].want);
    }
}

TEST(describe_should_say_who_ended_the_rank)
{
    static const struct {
        struct dsl_exit_cause c;
        int sig;
        const char *want;
    } cases[] = {
        {{0}, SIGKILL, ""}, /* an older agent: nothing to add */
        {{.known = 1, .mem_avail = 1288490188.8}, SIGKILL,
         " (not sent by dslaunch; node had 1.2 GiB available)"},
        {{.known = 1, .by_stop = 1}, SIGTERM, " (sent by dslaunch's stop)"},
        {{.known = 1, .by_stop = 1}, 0, ""}, /* an exit code says it all */
        {{.known = 1, .oom = DSL_OOM_RANK, .oom_src = DSL_OOMSRC_CGROUP, .mem_limit = 52428800,
          .mem_peak = 52428800, .mem_avail = 1288490188.8},
         SIGKILL, " (SIGKILL; memory limit 50.0 MiB of its cgroup, peak 50.0 MiB; node had "
                  "1.2 GiB available)"},
        {{.known = 1, .oom = DSL_OOM_RANK, .oom_src = DSL_OOMSRC_CGROUP,
          .mem_peak = 3.0 * 1024 * 1024 * 1024, .mem_avail = 1288490188.8},
         SIGKILL, " (SIGKILL; no memory limit on its cgroup, peak 3.0 GiB; node had 1.2 GiB "
                  "available)"},
        {{.known = 1, .oom = DSL_OOM_RANK, .oom_src = DSL_OOMSRC_KMSG}, SIGKILL,
         " (SIGKILL, named in the kernel log)"},
        /* a worker of the rank was OOM-killed; the rank itself then exited 1 */
        {{.known = 1, .oom = DSL_OOM_OTHER, .oom_src = DSL_OOMSRC_CGROUP, .oom_kills = 2,
          .mem_limit = 52428800},
         0, " (the OOM killer ended 2 other processes of its cgroup; memory limit 50.0 MiB of "
            "its cgroup)"},
    };
    size_t n = sizeof(cases) / sizeof(cases[0]);
    for (size_t i = 0; i < n; i++) {
        char b[512];
        dsl_cause_describe(&cases[i].c, cases[i].sig, b, sizeof(b));
        ASSERT_STR_EQ(b, cases[i].want);
    }

    /* a small buffer is cut, never overrun */
    char small[20];
    struct dsl_exit_cause c = cases[n - 1].c;
    c.mem_avail = 1e9;
    dsl_cause_describe(&c, 0, small, sizeof(small));
    ASSERT(strlen(small) < sizeof(small));
}

TEST(proc_stat_should_parse_names_with_spaces_and_parens)
{
    struct dsl_procstat st;
    ASSERT_OK(dsl_contain_parse_stat("4242 (my (odd) name) S 17 4242 4242 0 -1 4194560 100 0 0 "
                                     "0 1 2 0 0 20 0 1 0 987654 12345 67 18446744073709551615",
                                     &st));
    ASSERT_EQ(st.pid, 4242);
    ASSERT_EQ(st.ppid, 17);
    ASSERT_EQ(st.pgid, 4242);
    ASSERT_EQ(st.state, 'S');
    ASSERT_EQ(st.start, 987654);
    ASSERT_EQ(st.cpu, 3); /* utime 1 + stime 2 */
    ASSERT_OK(dsl_contain_parse_stat("7 (z) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 -100 0 1 0 55", &st));
    ASSERT_EQ(st.state, 'Z');
    ASSERT_EQ(st.start, 55);
    ASSERT_EQ(dsl_contain_parse_stat("7 (z) Z 1 7", &st), -EINVAL); /* cut short */
    ASSERT_EQ(dsl_contain_parse_stat("garbage", &st), -EINVAL);
}

TEST(proc_stat_should_refuse_pids_that_do_not_fit)
{
    /* found by fuzz_procfs: 4294967295 passed as a pid and became -1, and kill(-1, sig)
       signals every process the agent may signal */
    struct dsl_procstat st;
    ASSERT_EQ(dsl_contain_parse_stat("4294967295 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5",
                                     &st), -EINVAL);
    ASSERT_EQ(dsl_contain_parse_stat("2147483648 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5",
                                     &st), -EINVAL);
    ASSERT_EQ(dsl_contain_parse_stat("5 (x) S -1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5", &st),
              -EINVAL); /* a parent of -1 */
    ASSERT_EQ(dsl_contain_parse_stat("5 (x) S 1 4294967296 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5",
                                     &st), -EINVAL); /* a group past pid_t */
    ASSERT_OK(dsl_contain_parse_stat("2147483647 (x) S 0 0 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5",
                                     &st));
    ASSERT_EQ(st.pid, 2147483647);
    ASSERT_EQ(st.ppid, 0);
}

TEST(descendants_should_follow_parent_links_in_any_order)
{
    /* 100 is the agent: 200 its rank, 300 the rank's child, 400 an orphan reparented
       to the agent (a daemon), 500 a process elsewhere, 600 the child of 500 */
    struct dsl_procstat p[] = {
        {600, 500, 600, 'S', 0, 0}, {300, 200, 200, 'S', 0, 0}, {1, 0, 1, 'S', 0, 0},
        {400, 100, 400, 'S', 0, 0}, {100, 1, 100, 'S', 0, 0},   {500, 1, 500, 'S', 0, 0},
        {200, 100, 200, 'S', 0, 0},
    };
    char mark[7];
    ASSERT_EQ(dsl_contain_descendants(p, 7, 100, mark), 3);
    ASSERT(mark[1] && mark[3] && mark[6]);
    ASSERT(!mark[0] && !mark[2] && !mark[4] && !mark[5]); /* nor the agent itself */
    /* a loop of parent links (pids reused during a scan) ends, unmarked */
    struct dsl_procstat loop[] = {{10, 11, 10, 'S', 0, 0}, {11, 10, 11, 'S', 0, 0}};
    ASSERT_EQ(dsl_contain_descendants(loop, 2, 100, mark), 0);
    ASSERT_EQ(dsl_contain_descendants(p, 0, 100, mark), 0);
}

static void nap_ms(long ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* A rank's cgroup in a job of this test's own, on this host. */
struct rank_cg {
    struct dsl_cghost h;
    struct dsl_cgrank r;
    char job[64];
};

/* Rank `rank`'s cgroup into g: 1, or 0 where this machine lets the test make none (v2:
 * none of cgroup v2), and then the test is skipped and g holds nothing. */
static int rank_cgroup(struct rank_cg *g, int v2, int rank)
{
    char err[DSL_ERR_LEN];
    dsl_cghost_detect(&g->h, DSL_CG_WANT_V1 | DSL_CG_WANT_V2);
    if (v2 ? !g->h.own[DSL_CG_V2] : !dsl_cghost_usable(&g->h)) {
        if (v2)
            fprintf(stderr, "  (skipped: no cgroup v2 directory can be made here: %s)\n",
                    g->h.mode);
        else
            fprintf(stderr, "  (skipped: %s)\n", g->h.mode);
        dsl_cghost_release(&g->h);
        return 0;
    }
    snprintf(g->job, sizeof(g->job), "dslaunch-unittest%d", (int)getpid());
    ASSERT_OK(dsl_cgrank_create(&g->r, &g->h, g->job, rank, 0, err));
    return 1;
}

/* The options of a child born in g's cgroup (or put there at once): its stdin and stdout
 * /dev/null, what it runs the caller's. */
static struct dsl_child_opts in_cgroup(const struct rank_cg *g)
{
    return (struct dsl_child_opts){
        .fd_in = DSL_SPAWN_DEVNULL,
        .fd_out = DSL_SPAWN_DEVNULL,
        .fd_err = DSL_SPAWN_KEEP,
        .cgroup_procs = (const char *const *)g->r.procs,
        .cgroup_fd = g->r.fd > 0 ? g->r.fd : 0,
        .cgroup_fd_procs = g->r.fd_procs,
        .report_errors = 1,
    };
}

/* The child of o, started. */
static pid_t spawn_ok(const struct dsl_child_opts *o)
{
    pid_t pid;
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_spawn_child(o, &pid, err));
    return pid;
}

/* Kill the cgroup's processes: pid, its child, dies of SIGKILL and the cgroup empties. */
static void kill_all(struct rank_cg *g, pid_t pid)
{
    dsl_cgrank_kill(&g->r, &g->h);
    int status;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    int n = 1;
    for (int i = 0; i < 500 && (n = dsl_cgrank_count(&g->r)) > 0; i++)
        nap_ms(10);
    ASSERT_EQ(n, 0);
}

/* The cgroup and its job's directory removed, what g holds released. */
static void rank_cgroup_remove(struct rank_cg *g)
{
    ASSERT_OK(dsl_cgrank_remove(&g->r));
    dsl_cgrank_release(&g->r);
    dsl_cghost_remove_job(&g->h, g->job);
    dsl_cghost_release(&g->h);
}

/* The real thing, where this machine lets this test make cgroups (root on CI). */
TEST(a_rank_cgroup_should_hold_a_setsid_grandchild_and_kill_it)
{
    struct rank_cg g;
    if (!rank_cgroup(&g, 0, 7))
        return;
    ASSERT(g.r.nprocs > 0);
    ASSERT_EQ(dsl_cgrank_count(&g.r), 0);
    char sh[] = "sh", c[] = "-c", cmd[] = "setsid sleep 600 & sleep 600; true"; /* 3 processes in any sh */
    char *argv[] = {sh, c, cmd, NULL};
    struct dsl_child_opts o = in_cgroup(&g);
    o.argv = argv;
    o.new_pgroup = 1;
    pid_t pid = spawn_ok(&o);
    int n = 0;
    for (int i = 0; i < 500 && (n = dsl_cgrank_count(&g.r)) < 3; i++)
        nap_ms(10);
    ASSERT_EQ(n, 3); /* sh, its sleep, and the setsid sleep */
    kill_all(&g, pid); /* the setsid sleep too: it was in the cgroup */
    struct dsl_cgmem m;
    dsl_cgrank_memory(&g.r, &m);
    if (dsl_cghost_memory(&g.h))
        ASSERT(m.oom_kills == 0 || m.oom_kills == -1);
    rank_cgroup_remove(&g);
}

static int sleep_long(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return 0;
}

/* A child that is not born in the v2 cgroup (here: one that runs a function, which the
   raw clone3 is not for) joins it through cgroup.procs: the kernel's fallback path. */
TEST(a_child_that_cannot_be_born_in_its_v2_cgroup_should_join_it_before_it_runs)
{
    struct rank_cg g;
    if (!rank_cgroup(&g, 1, 8))
        return;
    ASSERT(g.r.fd > 0);
    struct dsl_child_opts o = in_cgroup(&g); /* g.r.fd > 0 here */
    o.run = sleep_long;
    o.close_fds = 1;
    pid_t pid = spawn_ok(&o);
    ASSERT_EQ(dsl_cgrank_count(&g.r), 1); /* in before run() started: no wait needed */
    kill_all(&g, pid);
    rank_cgroup_remove(&g);
}

TEST_MAIN()
