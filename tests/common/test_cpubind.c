/* Unit tests of the core binding (cpubind.c): core lists, NUMA topology, the split. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/cpubind.h"
#include "dslaunch/common/error.h"
#include "test.h"

static char *fmt(const int *c, size_t n)
{
    static char buf[256];
    dsl_cpubind_format(c, n, buf, sizeof(buf));
    return buf;
}

TEST(cpubind_parse_should_read_ranges_sorted_without_duplicates)
{
    int c[64];
    char err[DSL_ERR_LEN];
    ASSERT_EQ(dsl_cpubind_parse("8-11,0-3,2", c, 64, err), 8);
    ASSERT_STR_EQ(fmt(c, 8), "0-3,8-11");
    ASSERT_EQ(dsl_cpubind_parse("5", c, 64, err), 1);
    ASSERT_EQ(c[0], 5);
    static const char *const bad[] = {"", "x", "1-", "-1", "3-1", "1,,2", "1,", "1 2", "4096",
                                      "0-99999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ASSERT_EQ(dsl_cpubind_parse(bad[i], c, 64, err), DSL_EUSAGE);
        ASSERT(strlen(err) > 0);
    }
    ASSERT_EQ(dsl_cpubind_parse("0-99", c, 64, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "too many cores");
    ASSERT_EQ(dsl_cpubind_parse("1,x", c, 64, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "'x'");
}

TEST(cpubind_split_should_keep_each_rank_inside_one_numa_node_when_it_can)
{
    /* two nodes with interleaved numbering: even cores on node 0, odd on node 1 */
    int node_of[DSL_CPUBIND_MAX], cores[8], out[8], per;
    char err[DSL_ERR_LEN];
    for (int c = 0; c < 8; c++) {
        cores[c] = c;
        node_of[c] = c % 2;
    }
    ASSERT_OK(dsl_cpubind_split(cores, 8, node_of, 2, out, &per, err));
    ASSERT_EQ(per, 4);
    ASSERT_STR_EQ(fmt(out, 4), "0,2,4,6");
    ASSERT_STR_EQ(fmt(out + 4, 4), "1,3,5,7");
    ASSERT_OK(dsl_cpubind_split(cores, 8, node_of, 4, out, &per, err));
    ASSERT_EQ(per, 2);
    ASSERT_STR_EQ(fmt(out + 2, 2), "4,6");
    ASSERT_STR_EQ(fmt(out + 6, 2), "5,7");
    /* no NUMA information: consecutive runs; the remainder stays unused */
    ASSERT_OK(dsl_cpubind_split(cores, 7, NULL, 3, out, &per, err));
    ASSERT_EQ(per, 2);
    ASSERT_STR_EQ(fmt(out, 6), "0-5");
    ASSERT_EQ(dsl_cpubind_split(cores, 3, NULL, 4, out, &per, err), DSL_EUSAGE);
    ASSERT_CONTAINS(err, "3 core(s) cannot be bound to 4 rank(s)");
}

TEST(cpubind_numa_should_read_every_node_cpulist)
{
    char root[] = "/tmp/cpubind-test.XXXXXX";
    ASSERT(mkdtemp(root) != NULL);
    char path[512];
    const char *lists[] = {"0-1,4-5\n", "2-3,6-7\n"};
    for (int n = 0; n < 2; n++) {
        snprintf(path, sizeof(path), "%s/node%d", root, n);
        ASSERT_EQ(mkdir(path, 0755), 0);
        snprintf(path, sizeof(path), "%s/node%d/cpulist", root, n);
        FILE *f = fopen(path, "w");
        ASSERT(f != NULL);
        fputs(lists[n], f);
        fclose(f);
    }
    snprintf(path, sizeof(path), "%s/has_cpu", root); /* not a node directory */
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    fclose(f);
    int node_of[16];
    ASSERT_EQ(dsl_cpubind_numa(root, node_of, 16), 2);
    ASSERT_EQ(node_of[0], 0);
    ASSERT_EQ(node_of[5], 0);
    ASSERT_EQ(node_of[2], 1);
    ASSERT_EQ(node_of[7], 1);
    ASSERT_EQ(node_of[8], -1);
    for (int n = 0; n < 2; n++) {
        snprintf(path, sizeof(path), "%s/node%d/cpulist", root, n);
        unlink(path);
        snprintf(path, sizeof(path), "%s/node%d", root, n);
        rmdir(path);
    }
    snprintf(path, sizeof(path), "%s/has_cpu", root);
    unlink(path);
    rmdir(root);
    ASSERT_EQ(dsl_cpubind_numa("/nonexistent/dslaunch", node_of, 16), 0);
    ASSERT_EQ(node_of[3], -1);
}

TEST(cpubind_numa_should_leave_out_cores_beyond_its_table)
{
    /* found by fuzz_parse: a cpulist naming core 20 wrote node_of[20] of a table of 16 */
    char root[] = "/tmp/cpubind-test.XXXXXX";
    ASSERT(mkdtemp(root) != NULL);
    char node[600], path[700];
    snprintf(node, sizeof(node), "%s/node1", root);
    ASSERT_EQ(mkdir(node, 0755), 0);
    snprintf(path, sizeof(path), "%s/cpulist", node);
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    fputs("3,15-20,4095\n", f);
    fclose(f);
    int *node_of = malloc(16 * sizeof(int)); /* exactly 16, so ASan sees a stray write */
    ASSERT(node_of != NULL);
    ASSERT_EQ(dsl_cpubind_numa(root, node_of, 16), 1);
    ASSERT_EQ(node_of[3], 1);
    ASSERT_EQ(node_of[15], 1);
    ASSERT_EQ(node_of[14], -1);
    free(node_of);
    unlink(path);
    rmdir(node);
    rmdir(root);
}

TEST_MAIN()
