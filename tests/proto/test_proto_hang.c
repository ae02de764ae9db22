/* Unit tests of the progress and stack messages of the control protocol. */
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/proto/proto.h"
#include "proto_roundtrip.h"
#include "test.h"

static int decode(const char *line, char *err)
{
    struct dsl_msg m;
    int r = dsl_msg_decode(&m, line, strlen(line), err);
    if (r == 0)
        dsl_msg_release(&m);
    return r;
}

TEST(progress_message_should_round_trip)
{
    struct dsl_msg m, got;
    dsl_msg_init(&m, DSL_MSG_PROGRESS);
    m.progress = calloc(2, sizeof(*m.progress));
    m.nprogress = 2;
    m.progress[0].rank = 5;
    m.progress[0].advanced = 1;
    m.progress[0].pstate = 'T';
    m.progress[0].view.form = DSL_PROGRESS_RECORD;
    m.progress[0].view.has_step = 1;
    m.progress[0].view.step = 1234567890123ull;
    m.progress[0].view.coll_seq = 1582;
    m.progress[0].view.coll_kind = DSL_PROGRESS_ALLGATHER;
    m.progress[0].view.in_coll = 1;
    m.progress[0].view.phase = DSL_PROGRESS_PHASE_SAVING;
    m.progress[0].busy = 1;
    m.progress[1].rank = 6;
    m.progress[1].view.form = DSL_PROGRESS_TEXT;
    strcpy(m.progress[1].view.text, "epoch \"2\"\t");
    msg_roundtrip(&m, &got);
    ASSERT_EQ(got.type, DSL_MSG_PROGRESS);
    ASSERT_EQ(got.nprogress, 2);
    ASSERT_EQ(got.progress[0].rank, 5);
    ASSERT_EQ(got.progress[0].advanced, 1);
    ASSERT_EQ(got.progress[0].pstate, 'T');
    ASSERT_EQ(got.progress[0].view.step, 1234567890123ull);
    ASSERT_EQ(got.progress[0].view.coll_seq, 1582);
    ASSERT_EQ(got.progress[0].view.coll_kind, DSL_PROGRESS_ALLGATHER);
    ASSERT_EQ(got.progress[0].view.in_coll, 1);
    ASSERT_EQ(got.progress[0].view.phase, DSL_PROGRESS_PHASE_SAVING);
    ASSERT_EQ(got.progress[1].view.phase, DSL_PROGRESS_PHASE_NONE); /* none: not sent */
    ASSERT_EQ(got.progress[1].view.form, DSL_PROGRESS_TEXT);
    ASSERT_EQ(got.progress[1].pstate, 0);
    ASSERT_STR_EQ(got.progress[1].view.text, "epoch \"2\"\t");
    ASSERT_EQ(got.progress[0].busy, 1);
    ASSERT_EQ(got.progress[1].busy, 0); /* sent as 0: the agent knows probes */
    dsl_msg_release(&m);
    dsl_msg_release(&got);
}

TEST(stack_messages_should_round_trip)
{
    struct dsl_msg m, got;
    dsl_msg_init(&m, DSL_MSG_STACKS);
    m.stack_timeout = 10;
    msg_roundtrip(&m, &got);
    ASSERT_EQ(got.type, DSL_MSG_STACKS);
    ASSERT_EQ((int)got.stack_timeout, 10);
    ASSERT_EQ(got.stack_probe, 0);
    dsl_msg_release(&got);
    m.stack_probe = 1;
    msg_roundtrip(&m, &got);
    ASSERT_EQ(got.stack_probe, 1);
    dsl_msg_release(&got);

    dsl_msg_init(&m, DSL_MSG_STACKED);
    m.stacks = calloc(1, sizeof(*m.stacks));
    m.nstacks = 1;
    m.stacks[0].rank = 3;
    m.stacks[0].pid = 77;
    m.stacks[0].tool = strdup("gdb+faulthandler");
    m.stacks[0].text = strdup("#0 poll ()\n#1 main ()\n");
    msg_roundtrip(&m, &got);
    ASSERT_EQ(got.nstacks, 1);
    ASSERT_EQ(got.stacks[0].rank, 3);
    ASSERT_EQ(got.stacks[0].pid, 77);
    ASSERT_STR_EQ(got.stacks[0].tool, "gdb+faulthandler");
    ASSERT_STR_EQ(got.stacks[0].text, "#0 poll ()\n#1 main ()\n");
    ASSERT_EQ(got.stack_probe, 0);
    dsl_msg_release(&got);
    m.stack_probe = 1; /* the answer to a probe says so */
    msg_roundtrip(&m, &got);
    ASSERT_EQ(got.stack_probe, 1);
    dsl_msg_release(&m);
    dsl_msg_release(&got);
}

TEST(progress_entries_of_an_agent_without_busy_should_read_as_unknown)
{
    const char *old = "{\"t\":\"progress\",\"ranks\":[{\"rank\":1,\"adv\":1,\"form\":2,"
                      "\"hs\":0,\"step\":0,\"cseq\":0,\"ckind\":0,\"in\":0,\"text\":\"x\","
                      "\"ps\":\"S\"}]}";
    char err[DSL_ERR_LEN];
    struct dsl_msg m;
    ASSERT_OK(dsl_msg_decode(&m, old, strlen(old), err));
    ASSERT_EQ(m.nprogress, 1);
    ASSERT_EQ(m.progress[0].busy, -1);
    dsl_msg_release(&m);
}

TEST(start_progress_member_should_be_optional)
{
    char err[DSL_ERR_LEN];
    const char *old = "{\"t\":\"start\",\"node_rank\":0,\"host_label\":\"h\",\"cwd\":\"\","
                      "\"argv\":[\"p\"],\"env\":[],\"ranks\":[{\"rank\":0,\"local_rank\":0,"
                      "\"env\":[]}],\"grace\":1,\"keepalive\":0,\"lra\":0}";
    struct dsl_msg m;
    ASSERT_OK(dsl_msg_decode(&m, old, strlen(old), err));
    ASSERT_EQ((int)(m.progress_tick * 10), 0);
    dsl_msg_release(&m);

    struct dsl_msg s, got;
    dsl_msg_init(&s, DSL_MSG_START);
    s.host_label = strdup("h");
    s.cwd = strdup("");
    dsl_strvec_push(&s.argv, "p");
    s.ranks = calloc(1, sizeof(*s.ranks));
    s.nranks = 1;
    dsl_strvec_init(&s.ranks[0].env);
    s.progress_tick = 0.5;
    msg_roundtrip(&s, &got);
    ASSERT_EQ((int)(got.progress_tick * 10), 5);
    dsl_msg_release(&s);
    dsl_msg_release(&got);
}

TEST(bad_progress_members_should_be_refused)
{
    char err[DSL_ERR_LEN];
    ASSERT_ERR(decode("{\"t\":\"progress\"}", err));
    ASSERT_CONTAINS(err, "'ranks'");
    ASSERT_ERR(decode("{\"t\":\"progress\",\"ranks\":[{\"rank\":1}]}", err));
    ASSERT_ERR(decode("{\"t\":\"progress\",\"ranks\":[{\"rank\":1,\"adv\":2,\"form\":1,"
                      "\"hs\":1,\"step\":1,\"cseq\":1,\"ckind\":1,\"in\":1,\"text\":\"\","
                      "\"ps\":\"S\"}]}",
                      err));
    ASSERT_CONTAINS(err, "'adv'");
    ASSERT_ERR(decode("{\"t\":\"progress\",\"ranks\":[{\"rank\":1,\"adv\":1,\"form\":1,"
                      "\"hs\":1,\"step\":-1,\"cseq\":1,\"ckind\":1,\"in\":1,\"text\":\"\","
                      "\"ps\":\"S\"}]}",
                      err));
    ASSERT_ERR(decode("{\"t\":\"progress\",\"ranks\":[{\"rank\":1,\"adv\":1,\"form\":1,"
                      "\"hs\":1,\"step\":1,\"cseq\":1,\"ckind\":1,\"in\":1,\"text\":\"\","
                      "\"ps\":\"SS\"}]}",
                      err));
    ASSERT_OK(decode("{\"t\":\"progress\",\"ranks\":[{\"rank\":1,\"adv\":1,\"form\":1,"
                     "\"hs\":1,\"step\":1,\"cseq\":1,\"ckind\":1,\"in\":1,\"text\":\"\","
                     "\"ps\":\"\"}]}",
                     err));
    /* the phase is optional (older agents send none) and bounded */
    ASSERT_ERR(decode("{\"t\":\"progress\",\"ranks\":[{\"rank\":1,\"adv\":1,\"form\":1,"
                      "\"hs\":1,\"step\":1,\"cseq\":1,\"ckind\":1,\"in\":1,\"text\":\"\","
                      "\"ps\":\"S\",\"ph\":3}]}",
                      err));
    ASSERT_CONTAINS(err, "'ph'");
    ASSERT_OK(decode("{\"t\":\"progress\",\"ranks\":[{\"rank\":1,\"adv\":1,\"form\":1,"
                     "\"hs\":1,\"step\":1,\"cseq\":1,\"ckind\":1,\"in\":1,\"text\":\"\","
                     "\"ps\":\"S\",\"ph\":2}]}",
                     err));
    ASSERT_ERR(decode("{\"t\":\"stacks\"}", err));
    ASSERT_ERR(decode("{\"t\":\"stacks\",\"timeout\":-1}", err));
    ASSERT_ERR(decode("{\"t\":\"stacked\",\"stacks\":[{\"rank\":1,\"pid\":2,\"tool\":3,"
                      "\"text\":\"\"}]}",
                      err));
    ASSERT_ERR(decode("{\"t\":\"start\",\"node_rank\":0,\"host_label\":\"h\",\"cwd\":\"\","
                      "\"argv\":[\"p\"],\"env\":[],\"ranks\":[{\"rank\":0,\"local_rank\":0,"
                      "\"env\":[]}],\"grace\":1,\"keepalive\":0,\"lra\":0,\"progress\":-2}",
                      err));
}

TEST_MAIN()
