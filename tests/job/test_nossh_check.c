/* Unit tests of no-ssh mode's check that a node that dialled in runs node 0's job. */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/job/nossh_node.h"
#include "dslaunch/proto/proto.h"
#include "proto_roundtrip.h"
#include "test.h"

/* node rank k's hello as its agent sends it, started with argv[0..n), round-tripped */
static void hello_of(struct dsl_msg *got, int k, int nnodes, char *const *argv, size_t n,
                     int show)
{
    struct dsl_msg m;
    dsl_msg_init(&m, DSL_MSG_HELLO);
    m.proto = DSL_PROTO_VERSION;
    m.version = strdup(DSL_VERSION);
    m.host = strdup("pod-1");
    m.slots = 2;
    m.node_rank = k;
    m.nnodes = nnodes;
    char hex[65];
    dsl_nossh_argv_digest(argv, n, hex);
    m.argv_sha256 = strdup(hex);
    if (show) {
        m.has_argv = 1;
        for (size_t i = 0; i < n; i++)
            dsl_strvec_push(&m.argv, argv[i]);
    }
    msg_roundtrip(&m, got);
    dsl_msg_release(&m);
}

/* a command line from string literals (NULL-terminated), as its argv: owned by sv */
static char *const *W(struct dsl_strvec *sv, const char *const *lit)
{
    dsl_strvec_init(sv);
    dsl_strvec_pushv(sv, lit);
    return sv->v;
}

static const char *const node0_lit[] = {"train", "--config", "ds.json", NULL};
static struct dsl_strvec node0_sv;
static char *const *node0_words(void)
{
    dsl_strvec_release(&node0_sv);
    return W(&node0_sv, node0_lit);
}
#define node0 node0_words()

/* h, of node rank k of nnodes, is refused against node 0's command line, for a reason
 * that holds want (NULL: any reason) */
static void expect_refused(const struct dsl_msg *h, int k, int nnodes, const char *want)
{
    char *why = NULL;
    ASSERT_EQ(dsl_nossh_hello_check(h, k, nnodes, node0, 3, &why), DSL_EPROTO);
    if (want)
        ASSERT_CONTAINS(why, want);
    free(why);
}

TEST(argv_digest_should_tell_word_boundaries_apart_and_be_empty_without_a_program)
{
    char a[65], b[65], c[65], d[65];
    struct dsl_strvec s1, s2, s3;
    char *const *ab = W(&s1, (const char *const[]){"a b", NULL});
    char *const *a_b = W(&s2, (const char *const[]){"a", "b", NULL});
    char *const *a_b_e = W(&s3, (const char *const[]){"a", "b", "", NULL});
    dsl_nossh_argv_digest(ab, 1, a);
    dsl_nossh_argv_digest(a_b, 2, b);
    dsl_nossh_argv_digest(a_b_e, 3, c);
    ASSERT_EQ(strlen(a), 64);
    ASSERT(strcmp(a, b) != 0);
    ASSERT(strcmp(b, c) != 0);
    dsl_nossh_argv_digest(a_b, 2, d);
    ASSERT_STR_EQ(b, d);
    dsl_nossh_argv_digest(NULL, 0, d);
    ASSERT_STR_EQ(d, "");
    dsl_strvec_release(&s1);
    dsl_strvec_release(&s2);
    dsl_strvec_release(&s3);
}

TEST(a_node_with_the_same_program_or_none_should_be_accepted)
{
    struct dsl_msg h;
    char *why = NULL;
    hello_of(&h, 1, 4, node0, 3, 1);
    ASSERT_EQ(dsl_nossh_hello_check(&h, 1, 4, node0, 3, &why), 0);
    ASSERT(why == NULL);
    dsl_msg_release(&h);
    hello_of(&h, 3, 4, NULL, 0, 0); /* `dslaunch --node_rank 3 --nnodes 4 ...` alone */
    ASSERT_EQ(dsl_nossh_hello_check(&h, 3, 4, node0, 3, &why), 0);
    dsl_msg_release(&h);
}

TEST(a_node_with_other_arguments_should_be_refused_showing_both_command_lines_quoted)
{
    struct dsl_msg h;
    char *why = NULL;
    struct dsl_strvec so, ss;
    char *const *other = W(&so, (const char *const[]){"train", "--config",
                                                        "old.json\n\x1b[2J", NULL});
    hello_of(&h, 2, 4, other, 3, 1);
    ASSERT_EQ(dsl_nossh_hello_check(&h, 2, 4, node0, 3, &why), DSL_EPROTO);
    ASSERT_STR_EQ(why, "node rank 2 ('pod-1') was started with another program or arguments "
                      "than node 0; node rank 2: 'train' '--config' 'old.json\\n\\x1b[2J'; "
                      "node 0: 'train' '--config' 'ds.json' (start every node with the same "
                      "PROGRAM and arguments, or the other nodes with none)");
    free(why);
    dsl_msg_release(&h);
    /* a command line too long to send is compared by its digest alone */
    hello_of(&h, 2, 4, other, 3, 0);
    expect_refused(&h, 2, 4, "node rank 2: (too long to show); node 0: 'train'");
    dsl_msg_release(&h);
    /* one word split in two is another command line */
    char *const *split = W(&ss, (const char *const[]){"train", "--config", "ds", ".json",
                                                        NULL});
    hello_of(&h, 1, 4, split, 4, 1);
    expect_refused(&h, 1, 4, NULL);
    dsl_msg_release(&h);
    dsl_strvec_release(&so);
    dsl_strvec_release(&ss);
}

TEST(a_node_with_another_version_protocol_or_count_should_be_refused_by_name)
{
    struct dsl_msg h;
    hello_of(&h, 1, 2, node0, 3, 1);
    free(h.version);
    h.version = strdup("0.0.1-stale");
    expect_refused(&h, 1, 2, "node rank 1 ('pod-1') runs dslaunch 0.0.1-stale, node 0 runs ");
    h.proto = DSL_PROTO_VERSION + 1;
    expect_refused(&h, 1, 2, "speaks control protocol");
    dsl_msg_release(&h);
    hello_of(&h, 1, 3, node0, 3, 1);
    expect_refused(&h, 1, 2, "started with --nnodes 3 (node rank 1), node 0 with --nnodes 2");
    free(h.argv_sha256); /* an agent that does not say what it was started with */
    h.argv_sha256 = NULL;
    h.nnodes = 2;
    expect_refused(&h, 1, 2, "did not say which program");
    dsl_msg_release(&h);
}

TEST(a_long_command_line_should_be_cut_in_the_message)
{
    struct dsl_msg h;
    char *why = NULL;
    struct dsl_strvec sw;
    dsl_strvec_init(&sw);
    for (int i = 0; i < 400; i++)
        dsl_strvec_push(&sw, "--some-option=value");
    hello_of(&h, 1, 2, sw.v, 400, 1);
    ASSERT_EQ(dsl_nossh_hello_check(&h, 1, 2, node0, 3, &why), DSL_EPROTO);
    ASSERT_CONTAINS(why, "... (400 words); node 0: 'train'");
    ASSERT(strlen(why) < 4000);
    free(why);
    dsl_msg_release(&h);
    dsl_strvec_release(&sw);
}

TEST(a_refusal_should_travel_in_a_stop_message)
{
    struct dsl_msg m, got;
    dsl_msg_init(&m, DSL_MSG_STOP);
    m.sig = 15;
    m.refused = strdup("node rank 1 differs");
    msg_roundtrip(&m, &got);
    ASSERT_STR_EQ(got.refused, "node rank 1 differs");
    dsl_msg_release(&got);
    dsl_msg_release(&m);
    const char *bad = "{\"t\":\"hello\",\"proto\":1,\"version\":\"1\",\"host\":\"h\",\"cpus\":1,"
                      "\"gpus\":0,\"pid\":1,\"ifaces\":[],\"argv_sha256\":\"XYZ\"}";
    char err[DSL_ERR_LEN];
    ASSERT_EQ(dsl_msg_decode(&got, bad, strlen(bad), err), DSL_EPROTO);
}

int main(int argc, char **argv)
{
    int r = RUN_TESTS(argc, argv);
    dsl_strvec_release(&node0_sv);
    return r;
}
