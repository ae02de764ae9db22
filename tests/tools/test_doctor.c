/* Unit tests of doctor's pure pieces: the report, NCCL_SOCKET_IFNAME matching, the
 * majority value, the clock offset, dsbench's summary line, and the diag members of the
 * control protocol. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/tools/doctor.h"
#include "dslaunch/common/error.h"
#include "dslaunch/remote/facts.h"
#include "dslaunch/proto/proto.h"
#include "test.h"

static const char *names_a[] = {"lo", "dsl0", NULL};
static const char *names_b[] = {"lo", "ens9", "docker0", NULL};

TEST(ifname_should_follow_nccl_prefix_exclude_and_exact_rules)
{
    static const struct {
        const char *spec;
        const char **names;
        int n, want;
    } cases[] = {
        {"dsl0", names_a, 2, 1},        {"dsl0", names_b, 3, 0},
        {"dsl", names_a, 2, 1},         {"en,dsl", names_b, 3, 1},
        {"=dsl", names_a, 2, 0},        {"=dsl0", names_a, 2, 1},
        {"^docker,lo", names_b, 3, 1},  {"^dsl", names_a, 2, 0},
        {"^=dsl0", names_a, 2, 0},      {"^=dsl", names_a, 2, 1},
        {"eth", names_b, 3, 0},         {"", names_b, 3, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int got = dsl_doctor_ifname_matches(cases[i].spec, cases[i].names, cases[i].n);
        if (got != cases[i].want)
            fprintf(stderr, "case %zu: spec '%s'\n", i, cases[i].spec);
        ASSERT_EQ(got, cases[i].want);
    }
}

TEST(majority_should_pick_the_most_common_value_and_the_earliest_on_ties)
{
    const char *v1[] = {"2.20.5", "2.18.1", "2.20.5"};
    ASSERT_EQ(dsl_doctor_majority(v1, 3), 0);
    const char *v2[] = {"a", "b"};
    ASSERT_EQ(dsl_doctor_majority(v2, 2), 0);
    const char *v3[] = {"a", "b", "b"};
    ASSERT_EQ(dsl_doctor_majority(v3, 3), 1);
    ASSERT_EQ(dsl_doctor_majority(v3, 0), -1);
}

TEST(clock_offset_should_cancel_symmetric_delay_and_node_work)
{
    double off, bound;
    /* node 5 s ahead, 10 ms each way, 300 ms of work on the node */
    dsl_doctor_clock_offset(100.0, 105.010, 105.310, 100.320, &off, &bound);
    ASSERT(off > 4.999 && off < 5.001);
    ASSERT(bound > 0.0099 && bound < 0.0101);
    /* node behind, no delay */
    dsl_doctor_clock_offset(50.0, 48.0, 48.0, 50.0, &off, &bound);
    ASSERT(off > -2.0001 && off < -1.9999);
    ASSERT_EQ(bound, 0.0);
}

TEST(busbw_line_should_parse_only_dsbench_summary)
{
    double g = -1;
    ASSERT_EQ(dsl_doctor_parse_busbw("# avg busbw (sizes >= 1 MiB): 0.516 GB/s", &g), 1);
    ASSERT(g > 0.5159 && g < 0.5161);
    ASSERT_EQ(dsl_doctor_parse_busbw("       1048576  float  2199.6  0.477  0.477  0", &g), 0);
    ASSERT_EQ(dsl_doctor_parse_busbw("# avg busbw (sizes >= 1 MiB): n/a", &g), 0);
    ASSERT_EQ(dsl_doctor_parse_busbw("avg busbw (x): 3 GB/s", &g), 0);
    /* found by fuzz_tooltext: these came back as a bandwidth of inf, nan and -1 GB/s */
    ASSERT_EQ(dsl_doctor_parse_busbw("# avg busbw (x): 1e999 GB/s", &g), 0);
    ASSERT_EQ(dsl_doctor_parse_busbw("# avg busbw (x): nan GB/s", &g), 0);
    ASSERT_EQ(dsl_doctor_parse_busbw("# avg busbw (x): -1 GB/s", &g), 0);
}

TEST(report_should_count_failures_and_print_remedies_under_their_rows)
{
    struct dsl_doctor_report r;
    dsl_doctor_report_init(&r);
    dsl_doctor_report_add(&r, "node1", "dslaunch", DSL_DOCTOR_OK, NULL, "%s", "0.1.0");
    dsl_doctor_report_add(&r, "node1", "kernel", DSL_DOCTOR_OK, NULL, "6.1");
    dsl_doctor_report_add(&r, "node2", "dslaunch", DSL_DOCTOR_FAIL, "install 0.1.0 on node2",
                          "%s (protocol %d)", "9.9.9", 1);
    dsl_doctor_report_add(&r, "node2", "infiniband", DSL_DOCTOR_NOTE, "NCCL_IB_DISABLE=1",
                          "none");
    ASSERT_EQ(dsl_doctor_report_count(&r, DSL_DOCTOR_FAIL), 1);
    ASSERT_EQ(dsl_doctor_report_count(&r, DSL_DOCTOR_NOTE), 1);
    ASSERT_EQ(dsl_doctor_report_count(&r, DSL_DOCTOR_OK), 2);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    dsl_doctor_report_print(&r, f);
    fclose(f);
    /* grouped by check: both dslaunch rows before the kernel row */
    char *n2 = strstr(buf, "node2     dslaunch           FAIL   9.9.9 (protocol 1)\n");
    char *k = strstr(buf, "kernel");
    ASSERT(n2 != NULL && k != NULL && n2 < k);
    ASSERT_CONTAINS(n2, "fix: install 0.1.0 on node2\n");
    ASSERT_CONTAINS(buf, "note: NCCL_IB_DISABLE=1\n");
    ASSERT(strstr(buf, "fix:") == strstr(buf, "fix: install")); /* no remedy on ok rows */
    free(buf);
    dsl_doctor_report_release(&r);
}

TEST(diag_members_should_round_trip_and_stay_optional)
{
    struct dsl_msg m, got;
    struct dsl_dynbuf b;
    char err[DSL_ERR_LEN];
    dsl_msg_init(&m, DSL_MSG_PROBED);
    m.iface = strdup("ens9");
    m.src = strdup("10.0.0.3");
    m.detail = strdup("");
    m.program_ok = m.cwd_ok = 1;
    m.facts = malloc(sizeof(*m.facts));
    dsl_facts_init(m.facts);
    dsl_facts_collect(m.facts, "/", "/nonexistent/lib:");
    m.facts->t_recv = 1700000000.25;
    m.facts->t_send = 1700000000.5;
    dsl_dynbuf_init(&b, 1 << 20);
    ASSERT_OK(dsl_msg_encode(&m, &b));
    ASSERT_OK(dsl_msg_decode(&got, b.buf, b.len - 1, err));
    ASSERT(got.facts != NULL);
    ASSERT_STR_EQ(got.facts->kernel, m.facts->kernel);
    ASSERT_STR_EQ(got.facts->glibc, m.facts->glibc);
    ASSERT_STR_EQ(got.facts->nccl, m.facts->nccl);
    ASSERT_STR_EQ(got.facts->nccl_path, m.facts->nccl_path);
    ASSERT_EQ(strcmp(m.facts->nccl, "none") == 0, m.facts->nccl_path[0] == '\0');
    ASSERT_EQ(got.facts->ngpu, m.facts->ngpu);
    ASSERT_EQ(got.facts->t_send, 1700000000.5);
    ASSERT(got.facts->disk_free > 0);
    dsl_msg_release(&got);
    dsl_msg_release(&m);
    /* an answer without facts (an agent that was not asked) decodes with facts NULL */
    const char *plain = "{\"t\":\"probed\",\"port\":0,\"port_busy\":0,\"reach\":[],\"iface\":"
                        "\"\",\"src\":\"\",\"program_ok\":1,\"cwd_ok\":1,\"detail\":\"\"}";
    ASSERT_OK(dsl_msg_decode(&got, plain, strlen(plain), err));
    ASSERT(got.facts == NULL);
    dsl_msg_release(&got);
    /* a probe without diag is an ordinary probe; a mistyped one is rejected */
    const char *probe = "{\"t\":\"probe\",\"port\":0,\"pick\":0,\"cport\":0,\"connect\":[],"
                        "\"program\":\"\",\"cwd\":\"\"}";
    ASSERT_OK(dsl_msg_decode(&got, probe, strlen(probe), err));
    ASSERT_EQ(got.diag, 0);
    dsl_msg_release(&got);
    const char *bad = "{\"t\":\"probed\",\"port\":0,\"port_busy\":0,\"reach\":[],\"iface\":"
                      "\"\",\"src\":\"\",\"program_ok\":1,\"cwd_ok\":1,\"detail\":\"\","
                      "\"facts\":{\"kernel\":\"x\"}}";
    ASSERT_ERR(dsl_msg_decode(&got, bad, strlen(bad), err));
    dsl_dynbuf_release(&b);
}

TEST(version_codes_should_format_like_their_libraries)
{
    static const struct {
        int nccl, code; /* nccl: NCCL's code, else CUDA's */
        const char *want;
    } cases[] = {
        {0, 12040, "12.4"},
        {0, 13000, "13.0"},
        {1, 22809, "2.28.9"},
        {1, 2708, "2.7.8"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[32];
        if (cases[i].nccl)
            dsl_facts_nccl_version(cases[i].code, buf, sizeof(buf));
        else
            dsl_facts_cuda_version(cases[i].code, buf, sizeof(buf));
        ASSERT_STR_EQ(buf, cases[i].want);
    }
}

TEST_MAIN()
