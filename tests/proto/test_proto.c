/* Unit tests of the control protocol: round trips and strict rejection. */
#include <signal.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/proto/proto.h"
#include "proto_roundtrip.h"
#include "test.h"

TEST(hello_of_a_no_ssh_node_should_carry_its_slots_and_rank_and_refuse_bad_ones)
{
    struct dsl_msg m, got;
    dsl_msg_init(&m, DSL_MSG_HELLO);
    m.proto = 1;
    m.version = strdup("0.1.0");
    m.host = strdup("node2");
    m.slots = 3;
    m.node_rank = 1;
    m.nnodes = 4;
    msg_roundtrip(&m, &got);
    ASSERT_EQ(got.slots, 3);
    ASSERT_EQ(got.node_rank, 1);
    ASSERT_EQ(got.nnodes, 4);
    dsl_msg_release(&got);
    m.slots = 0; /* an ordinary agent's hello says nothing of it */
    msg_roundtrip(&m, &got);
    ASSERT_EQ(got.slots, 0);
    dsl_msg_release(&got);
    dsl_msg_release(&m);
    static const char *const bad[] = {
        "{\"t\":\"hello\",\"proto\":1,\"version\":\"0\",\"host\":\"n\",\"cpus\":2,"
        "\"gpus\":0,\"pid\":5,\"ifaces\":[],\"slots\":2,\"node_rank\":2,\"nnodes\":2}",
        "{\"t\":\"hello\",\"proto\":1,\"version\":\"0\",\"host\":\"n\",\"cpus\":2,"
        "\"gpus\":0,\"pid\":5,\"ifaces\":[],\"slots\":0,\"node_rank\":0,\"nnodes\":2}",
        "{\"t\":\"hello\",\"proto\":1,\"version\":\"0\",\"host\":\"n\",\"cpus\":2,"
        "\"gpus\":0,\"pid\":5,\"ifaces\":[],\"slots\":2}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[DSL_ERR_LEN];
        ASSERT_EQ(dsl_msg_decode(&got, bad[i], strlen(bad[i]), err), DSL_EPROTO);
    }
}

TEST(start_message_should_round_trip_nasty_argv_and_env)
{
    struct dsl_msg m, got;
    dsl_msg_init(&m, DSL_MSG_START);
    m.node_rank = 3;
    m.host_label = strdup("node3");
    m.cwd = strdup("/work dir/x");
    m.grace = 2.5;
    m.keepalive = 15;
    m.local_rank_arg = 1;
    const char *args[] = {"prog", "I am 6' tall", "$(touch /tmp/pwned)", "a\nb", "", "\"q\"\\",
                          "\xc3\xbcnicode", NULL};
    dsl_strvec_pushv(&m.argv, args);
    dsl_strvec_push(&m.env, "K=v=with=equals");
    dsl_strvec_push(&m.env, "NL=line1\nline2");
    m.ranks = calloc(2, sizeof(*m.ranks));
    m.nranks = 2;
    for (int i = 0; i < 2; i++) {
        m.ranks[i].rank = 12 + i;
        m.ranks[i].local_rank = i;
        dsl_strvec_init(&m.ranks[i].env);
        dsl_strvec_pushf(&m.ranks[i].env, "RANK=%d", 12 + i);
    }
    msg_roundtrip(&m, &got);
    ASSERT_EQ(got.type, DSL_MSG_START);
    ASSERT_EQ(got.node_rank, 3);
    ASSERT_STR_EQ(got.cwd, "/work dir/x");
    ASSERT_EQ(got.argv.nr, 7);
    for (int i = 0; args[i]; i++)
        ASSERT_STR_EQ(got.argv.v[i], args[i]);
    ASSERT_STR_EQ(got.env.v[1], "NL=line1\nline2");
    ASSERT_EQ(got.nranks, 2);
    ASSERT_EQ(got.ranks[1].rank, 13);
    ASSERT_STR_EQ(got.ranks[1].env.v[0], "RANK=13");
    ASSERT_EQ(got.local_rank_arg, 1);
    ASSERT(got.grace == 2.5);
    dsl_msg_release(&m);
    dsl_msg_release(&got);
}

TEST(hello_and_exit_messages_should_round_trip)
{
    struct dsl_msg m, got;
    dsl_msg_init(&m, DSL_MSG_HELLO);
    m.proto = DSL_PROTO_VERSION;
    m.version = strdup("1.2.3");
    m.host = strdup("node1");
    m.cpus = 64;
    m.gpus = 8;
    m.pid = 4242;
    m.ifaces = calloc(1, sizeof(*m.ifaces));
    m.nifaces = 1;
    m.ifaces[0].name = strdup("eth0");
    dsl_strvec_init(&m.ifaces[0].addrs);
    dsl_strvec_push(&m.ifaces[0].addrs, "10.0.0.2");
    msg_roundtrip(&m, &got);
    ASSERT_EQ(got.gpus, 8);
    ASSERT_STR_EQ(got.ifaces[0].addrs.v[0], "10.0.0.2");
    dsl_msg_release(&m);
    dsl_msg_release(&got);

    dsl_msg_init(&m, DSL_MSG_EXIT);
    m.rank = 5;
    m.pid = 99;
    m.code = -1;
    m.sig = 9;
    m.wall = 1.25;
    dsl_strvec_push(&m.tail, "Traceback (most recent call last):");
    msg_roundtrip(&m, &got);
    ASSERT_EQ(got.sig, 9);
    ASSERT_STR_EQ(got.tail.v[0], "Traceback (most recent call last):");
    ASSERT_EQ(got.cause.known, 0); /* not sent: not known */
    dsl_msg_release(&m);
    dsl_msg_release(&got);
}

TEST(out_lines_should_carry_every_byte_and_their_line_end)
{
    static const struct {
        const char *bytes;
        size_t len;
        int end;
    } cases[] = {
        {"plain", 5, DSL_END_LF},
        {"a\0b\0", 4, DSL_END_LF},         /* NULs: sent as base64 */
        {"\0", 1, DSL_END_NONE},
        {"", 0, DSL_END_CR},                /* tqdm's leading "\r" */
        {"50% |###", 8, DSL_END_CR},
        {"dos", 3, DSL_END_CRLF},
        {"\xff\xfe\x80 not utf-8", 13, DSL_END_NONE},
        {"ab\0", 3, DSL_END_CRLF},           /* one and two bytes of base64 padding */
        {"abcd\0", 5, DSL_END_CR},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dsl_msg m, got;
        dsl_msg_init(&m, DSL_MSG_OUT);
        m.rank = 3;
        m.stream = 1 + (int)(i % 2);
        m.end = cases[i].end;
        m.cr = m.end == DSL_END_CR;
        m.line = malloc(cases[i].len + 1);
        memcpy(m.line, cases[i].bytes, cases[i].len);
        m.line[cases[i].len] = '\0';
        m.line_len = cases[i].len;
        msg_roundtrip(&m, &got);
        ASSERT_EQ(got.line_len, cases[i].len);
        ASSERT(memcmp(got.line, cases[i].bytes, cases[i].len) == 0);
        ASSERT_EQ(got.end, cases[i].end);
        ASSERT_EQ(got.cr, m.cr);
        dsl_msg_release(&m);
        dsl_msg_release(&got);
    }
    ASSERT_STR_EQ(dsl_line_end_text(DSL_END_CRLF), "\r\n");
    ASSERT_STR_EQ(dsl_line_end_text(DSL_END_NONE), "");
}

TEST(spawn_error_should_carry_the_exit_code_it_stands_for)
{
    struct dsl_msg m, got;
    dsl_msg_init(&m, DSL_MSG_SPAWNERR);
    m.rank = 2;
    m.error = strdup("1 core(s) cannot be bound to 2 rank(s)");
    m.code = 202;
    msg_roundtrip(&m, &got);
    ASSERT_EQ(got.rank, 2);
    ASSERT_EQ(got.code, 202);
    ASSERT_STR_EQ(got.error, "1 core(s) cannot be bound to 2 rank(s)");
    dsl_msg_release(&m);
    dsl_msg_release(&got);
    /* an older agent's has none: 0, and the launcher falls back to 126/127 */
    char err[DSL_ERR_LEN];
    const char *old = "{\"t\":\"spawnerr\",\"rank\":1,\"error\":\"x\"}";
    ASSERT_OK(dsl_msg_decode(&got, old, strlen(old), err));
    ASSERT_EQ(got.code, 0);
    dsl_msg_release(&got);
    const char *bad = "{\"t\":\"spawnerr\",\"rank\":1,\"error\":\"x\",\"code\":0}";
    ASSERT_EQ(dsl_msg_decode(&got, bad, strlen(bad), err), DSL_EPROTO);
    ASSERT_CONTAINS(err, "bad spawn error code 0");
}

TEST(optional_members_should_round_trip_and_read_as_unknown_when_absent)
{
    struct dsl_msg m, got;
    dsl_msg_init(&m, DSL_MSG_EXIT);
    m.rank = 3;
    m.pid = 4242;
    m.code = -1;
    m.sig = 9;
    m.cause.known = 1;
    m.cause.oom = DSL_OOM_RANK;
    m.cause.oom_src = DSL_OOMSRC_CGROUP;
    m.cause.mem_limit = 52428800;
    m.cause.mem_peak = 52428800;
    m.cause.mem_avail = 1288490188.8;
    msg_roundtrip(&m, &got);
    ASSERT_EQ(got.cause.known, 1);
    ASSERT_EQ(got.cause.oom, DSL_OOM_RANK);
    ASSERT_EQ(got.cause.oom_src, DSL_OOMSRC_CGROUP);
    ASSERT(got.cause.mem_limit == 52428800 && got.cause.mem_avail == 1288490188.8);
    ASSERT_EQ(got.cause.unstopped, 0);
    m.cause.unstopped = 1; /* died before its agent signalled it */
    dsl_msg_release(&got);
    msg_roundtrip(&m, &got);
    ASSERT_EQ(got.cause.unstopped, 1);
    dsl_msg_release(&m);
    dsl_msg_release(&got);

    dsl_msg_init(&m, DSL_MSG_HELLO);
    m.version = strdup("1");
    m.host = strdup("h");
    m.contain = strdup("cgroup v2 (memory, cgroup.kill)");
    m.memcg = 1;
    msg_roundtrip(&m, &got);
    ASSERT_STR_EQ(got.contain, "cgroup v2 (memory, cgroup.kill)");
    ASSERT_EQ(got.memcg, 1);
    dsl_msg_release(&m);
    dsl_msg_release(&got);

    /* an older agent's hello and exit, and an older launcher's start, still decode */
    static const char *const old[] = {
        "{\"t\":\"hello\",\"proto\":1,\"version\":\"0.1.0\",\"host\":\"n1\",\"cpus\":2,"
        "\"gpus\":0,\"pid\":5,\"ifaces\":[]}",
        "{\"t\":\"exit\",\"rank\":0,\"pid\":3,\"code\":1,\"sig\":0,\"wall\":1.5,\"tail\":[]}",
        "{\"t\":\"start\",\"node_rank\":0,\"host_label\":\"h\",\"cwd\":\"\",\"argv\":[\"x\"],"
        "\"env\":[],\"ranks\":[{\"rank\":0,\"local_rank\":0,\"env\":[]}],\"grace\":1,"
        "\"keepalive\":0,\"lra\":0}",
        NULL};
    for (int i = 0; old[i]; i++) {
        char err[DSL_ERR_LEN];
        ASSERT_OK(dsl_msg_decode(&got, old[i], strlen(old[i]), err));
        ASSERT(got.contain == NULL && got.memcg == 0 && got.cause.known == 0 &&
               got.mem_limit == 0);
        dsl_msg_release(&got);
    }
}

TEST(decoder_should_reject_malformed_and_mistyped_messages)
{
    static const char *const bad[] = {
        "",
        "not json",
        "[]",
        "{}",
        "{\"t\": 3}",
        "{\"t\": \"nope\"}",
        "{\"t\": \"stop\"}",
        "{\"t\": \"stop\", \"sig\": \"9\", \"grace\": 1}",
        "{\"t\": \"stop\", \"sig\": 9.5, \"grace\": 1}",
        "{\"t\": \"stop\", \"sig\": 99, \"grace\": 1}",
        "{\"t\": \"stop\", \"sig\": 9, \"grace\": -1}",
        "{\"t\": \"out\", \"rank\": 0, \"s\": 3, \"line\": \"x\", \"cr\": 0}",
        "{\"t\": \"out\", \"rank\": 0, \"s\": 1, \"line\": 5, \"cr\": 0}",
        "{\"t\": \"start\", \"node_rank\": 0, \"host_label\": \"h\", \"cwd\": \"\", \"argv\": [],"
        " \"env\": [], \"ranks\": [{\"rank\": 0, \"local_rank\": 0, \"env\": []}], \"grace\": 1,"
        " \"keepalive\": 0, \"lra\": 0}",
        "{\"t\": \"start\", \"node_rank\": 0, \"host_label\": \"h\", \"cwd\": \"\", \"argv\": [\"x\"],"
        " \"env\": [1], \"ranks\": [], \"grace\": 1, \"keepalive\": 0, \"lra\": 0}",
        "{\"t\": \"probe\", \"port\": 70000, \"pick\": 0, \"cport\": 0, \"connect\": [],"
        " \"program\": \"\", \"cwd\": \"\"}",
        "{\"t\": \"exit\", \"rank\": 1e300, \"pid\": 1, \"code\": 0, \"sig\": 0, \"wall\": 0,"
        " \"tail\": []}",
        /* optional members, when present, must be well-formed */
        "{\"t\": \"exit\", \"rank\": 0, \"pid\": 1, \"code\": 0, \"sig\": 0, \"wall\": 0,"
        " \"tail\": [], \"cause\": 1}",
        "{\"t\": \"exit\", \"rank\": 0, \"pid\": 1, \"code\": 0, \"sig\": 9, \"wall\": 0,"
        " \"tail\": [], \"cause\": {\"oom\": 7, \"src\": 1, \"kills\": 0, \"stop\": 0,"
        " \"limit\": 0, \"peak\": 0, \"avail\": 0}}",
        "{\"t\": \"exit\", \"rank\": 0, \"pid\": 1, \"code\": 0, \"sig\": 9, \"wall\": 0,"
        " \"tail\": [], \"cause\": {\"oom\": 1, \"src\": 1, \"kills\": 0, \"stop\": 0,"
        " \"limit\": -5, \"peak\": 0, \"avail\": 0}}",
        "{\"t\": \"exit\", \"rank\": 0, \"pid\": 1, \"code\": 0, \"sig\": 9, \"wall\": 0,"
        " \"tail\": [], \"cause\": {\"oom\": 1}}",
        "{\"t\": \"exit\", \"rank\": 0, \"pid\": 1, \"code\": 0, \"sig\": 9, \"wall\": 0,"
        " \"tail\": [], \"cause\": {\"oom\": 0, \"src\": 0, \"kills\": 0, \"stop\": 0,"
        " \"unstopped\": 2, \"limit\": 0, \"peak\": 0, \"avail\": 0}}",
        "{\"t\":\"hello\",\"proto\":1,\"version\":\"0\",\"host\":\"n\",\"cpus\":2,\"gpus\":0,"
        "\"pid\":5,\"ifaces\":[],\"contain\":5}",
        "{\"t\":\"start\",\"node_rank\":0,\"host_label\":\"h\",\"cwd\":\"\",\"argv\":[\"x\"],"
        "\"env\":[],\"ranks\":[{\"rank\":0,\"local_rank\":0,\"env\":[]}],\"grace\":1,"
        "\"keepalive\":0,\"lra\":0,\"mem_limit\":-1}",
        "{\"t\":\"signal\",\"sig\":9}",  /* only SIGUSR1/2 pass through, never a kill */
        "{\"t\":\"signal\",\"sig\":15}",
        "{\"t\":\"signal\"}",
        NULL};
    for (int i = 0; bad[i]; i++) {
        struct dsl_msg m;
        char err[DSL_ERR_LEN] = "";
        int r = dsl_msg_decode(&m, bad[i], strlen(bad[i]), err);
        if (r >= 0)
            DSL_FAIL_("accepted bad message: %s", bad[i]);
        ASSERT_EQ(r, DSL_EPROTO);
        ASSERT(err[0] != '\0');
    }
}

TEST(signal_message_should_round_trip_sigusr1)
{
    struct dsl_msg m, got;
    dsl_msg_init(&m, DSL_MSG_SIGNAL);
    m.sig = SIGUSR1;
    msg_roundtrip(&m, &got);
    ASSERT_EQ(got.type, DSL_MSG_SIGNAL);
    ASSERT_EQ(got.sig, SIGUSR1);
    dsl_msg_release(&m);
    dsl_msg_release(&got);
}

TEST(line_buffer_should_split_a_stream_into_messages_across_reads)
{
    const char *stream = "{\"t\":\"ping\"}\n{\"t\":\"stop\",\"sig\":15,\"grace\":2}\n{\"t\":\"by";
    struct dsl_linebuf lb;
    dsl_linebuf_init(&lb);
    struct dsl_msg m;
    char err[DSL_ERR_LEN];
    /* feed byte by byte */
    int got = 0;
    for (size_t i = 0; i < strlen(stream); i++) {
        ASSERT_OK(dsl_linebuf_feed(&lb, stream + i, 1));
        int r;
        while ((r = dsl_msg_next(&lb, &m, err)) == 1) {
            got++;
            if (got == 2) {
                ASSERT_EQ(m.type, DSL_MSG_STOP);
                ASSERT_EQ(m.sig, 15);
            }
            dsl_msg_release(&m);
        }
        ASSERT_OK(r);
    }
    ASSERT_EQ(got, 2);
    ASSERT_OK(dsl_linebuf_feed(&lb, "e\"}\n", 4));
    ASSERT_EQ(dsl_msg_next(&lb, &m, err), 1);
    ASSERT_EQ(m.type, DSL_MSG_BYE);
    dsl_msg_release(&m);
    dsl_linebuf_release(&lb);
}

TEST(line_buffer_should_refuse_an_endless_line)
{
    struct dsl_linebuf lb;
    dsl_linebuf_init(&lb);
    static char chunk[1 << 16];
    memset(chunk, 'x', sizeof(chunk));
    int r = 0;
    for (size_t sent = 0; sent <= DSL_PROTO_MAX_LINE && r == 0; sent += sizeof(chunk))
        r = dsl_linebuf_feed(&lb, chunk, sizeof(chunk));
    ASSERT_ERR(r);
    dsl_linebuf_release(&lb);
}

TEST_MAIN()
