/*
 * Every control message type, through the table-driven coder: each one with all its
 * members set and with only the members it requires is encoded to exactly the bytes of
 * protocol version 1 (golden lines below, written by the field-by-field coder this one
 * replaced), decodes back to a message that encodes the same, and is refused when it is
 * cut short, when a member it needs is taken out, or when a member holds too much.
 *
 * DSL_PROTO_GOLDEN=1 prints the lines the coder writes now instead of checking them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dslaunch/common/error.h"
#include "dslaunch/proto/proto.h"
#include "test.h"

static char *dup_s(const char *s)
{
    char *d = malloc(strlen(s) + 1);
    memcpy(d, s, strlen(s) + 1);
    return d;
}

static void build_hello(struct dsl_msg *m, int full)
{
    m->proto = DSL_PROTO_VERSION;
    m->version = dup_s("0.9.1");
    m->host = dup_s("node-1");
    m->cpus = 64;
    m->gpus = 8;
    m->pid = 4242;
    if (!full)
        return;
    m->ifaces = calloc(2, sizeof(*m->ifaces));
    m->nifaces = 2;
    m->ifaces[0].name = dup_s("eth0");
    dsl_strvec_init(&m->ifaces[0].addrs);
    dsl_strvec_push(&m->ifaces[0].addrs, "10.0.0.2");
    dsl_strvec_push(&m->ifaces[0].addrs, "fe80::1");
    m->ifaces[1].name = dup_s("ib0");
    dsl_strvec_init(&m->ifaces[1].addrs);
    m->contain = dup_s("cgroup v2 (memory, cgroup.kill)");
    m->memcg = 1;
    m->slots = 4;
    m->node_rank = 1;
    m->nnodes = 3;
    m->argv_sha256 = dup_s("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
    m->has_argv = 1;
    dsl_strvec_push(&m->argv, "train.py");
    dsl_strvec_push(&m->argv, "--lr=\"0.1\"\n");
}

static void build_probe(struct dsl_msg *m, int full)
{
    m->port = 29500;
    m->pick = 1;
    m->cport = 29501;
    dsl_strvec_push(&m->connect, "10.0.0.1");
    m->program = dup_s("/usr/bin/python3");
    m->cwd = dup_s("/work dir");
    if (!full)
        return;
    m->script = dup_s("train.py");
    m->diag = 1;
    m->ld_path = dup_s("/opt/lib:/usr/lib");
    m->bind = dup_s("10.0.0.1");
    dsl_strvec_push(&m->env, "A=b");
}

static void build_probed(struct dsl_msg *m, int full)
{
    m->port = 29500;
    m->port_busy = 0;
    m->reach = calloc(3, sizeof(int));
    m->reach[0] = 1;
    m->reach[2] = 1;
    m->nreach = 3;
    m->iface = dup_s("eth0");
    m->src = dup_s("10.0.0.2");
    m->program_ok = 1;
    m->cwd_ok = 1;
    m->detail = dup_s("");
    if (!full)
        return;
    struct dsl_facts *f = calloc(1, sizeof(*f));
    dsl_facts_init(f);
    f->kernel = dup_s("6.1.0");
    f->glibc = dup_s("2.36");
    f->cuda_driver = dup_s("12.4");
    f->cuda_runtime = dup_s("none");
    f->nccl = dup_s("2.20.5");
    f->cudart_path = dup_s("/usr/lib/libcudart.so.12");
    f->nccl_path = dup_s("");
    f->cvd = dup_s("0,1");
    f->cvd_set = 1;
    f->nvml = 1;
    f->ngpu = 2;
    f->gpu_free_mib = calloc(2, sizeof(double));
    f->gpu_total_mib = calloc(2, sizeof(double));
    f->gpu_free_mib[0] = 80000.5;
    f->gpu_free_mib[1] = 1;
    f->gpu_total_mib[0] = 81559;
    f->gpu_total_mib[1] = 81559;
    dsl_strvec_push(&f->ib, "mlx5_0");
    f->p2p = 1;
    f->disk_free = 1.5e12;
    f->t_recv = 1700000000.25;
    f->t_send = 1700000000.5;
    m->facts = f;
}

static void build_start(struct dsl_msg *m, int full)
{
    m->node_rank = 2;
    m->host_label = dup_s("node-2");
    m->cwd = dup_s("/w");
    dsl_strvec_push(&m->argv, "dstrain");
    dsl_strvec_push(&m->env, "K=v=w");
    m->ranks = calloc(2, sizeof(*m->ranks));
    m->nranks = full ? 2 : 1;
    for (int i = 0; i < m->nranks; i++) {
        m->ranks[i].rank = 8 + i;
        m->ranks[i].local_rank = i;
        dsl_strvec_init(&m->ranks[i].env);
        dsl_strvec_pushf(&m->ranks[i].env, "RANK=%d", 8 + i);
    }
    m->grace = 2.5;
    m->keepalive = 15;
    if (!full)
        return;
    m->local_rank_arg = 1;
    m->mem_limit = 1073741824;
    m->cpubind = 1;
    m->core_list = dup_s("0-3,8");
    m->progress_tick = 0.5;
}

static void build_out(struct dsl_msg *m, int full)
{
    m->rank = 3;
    m->stream = 2;
    m->line = full ? malloc(4) : dup_s("loss 0.25");
    if (full)
        memcpy(m->line, "a\0b", 4);
    m->line_len = full ? 3 : strlen(m->line);
    m->end = full ? DSL_END_NONE : DSL_END_LF;
}

static void build_exit(struct dsl_msg *m, int full)
{
    m->rank = 5;
    m->pid = 99;
    m->code = -1;
    m->sig = 9;
    m->wall = 1.25;
    dsl_strvec_push(&m->tail, "Traceback (most recent call last):");
    if (!full)
        return;
    m->cause.known = 1;
    m->cause.oom = DSL_OOM_RANK;
    m->cause.oom_src = DSL_OOMSRC_CGROUP;
    m->cause.oom_kills = 2;
    m->cause.by_stop = 0;
    m->cause.unstopped = 1;
    m->cause.mem_limit = 52428800;
    m->cause.mem_peak = 52428800;
    m->cause.mem_avail = 1288490188.8;
}

static void build_small(struct dsl_msg *m, int full)
{
    switch (m->type) {
    case DSL_MSG_STARTED:
        m->rank = 1;
        m->pid = 77;
        break;
    case DSL_MSG_SPAWNERR:
        m->rank = 1;
        m->error = dup_s("exec 'x': No such file");
        m->code = full ? 127 : 0;
        break;
    case DSL_MSG_STOP:
        m->sig = 15;
        m->grace = 30;
        if (full)
            m->refused = dup_s("the job's program differs");
        break;
    case DSL_MSG_SIGNAL:
        m->sig = 10;
        break;
    case DSL_MSG_STACKS:
        m->stack_timeout = 10;
        m->stack_probe = full;
        break;
    default:
        break;
    }
}

static void build_progress(struct dsl_msg *m, int full)
{
    m->progress = calloc(2, sizeof(*m->progress));
    m->nprogress = full ? 2 : 0;
    if (!full)
        return;
    struct dsl_rank_progress *p = m->progress;
    p[0].rank = 5;
    p[0].advanced = 1;
    p[0].pstate = 'D';
    p[0].busy = 1;
    p[0].view.form = DSL_PROGRESS_RECORD;
    p[0].view.has_step = 1;
    p[0].view.step = 1234567890123ull;
    p[0].view.coll_seq = 1582;
    p[0].view.coll_kind = 3;
    p[0].view.in_coll = 1;
    p[0].view.phase = DSL_PROGRESS_PHASE_SAVING;
    p[1].rank = 6;
    p[1].busy = -1;
    p[1].view.form = DSL_PROGRESS_TEXT;
    strcpy(p[1].view.text, "epoch \"2\"\t");
}

static void build_stacked(struct dsl_msg *m, int full)
{
    m->stack_probe = full;
    m->stacks = calloc(1, sizeof(*m->stacks));
    m->nstacks = full;
    if (!full)
        return;
    m->stacks[0].rank = 4;
    m->stacks[0].pid = 1234;
    m->stacks[0].tool = dup_s("gdb");
    m->stacks[0].text = dup_s("#0 poll ()\n#1 main ()");
}

static void build(struct dsl_msg *m, enum dsl_msg_type t, int full)
{
    dsl_msg_init(m, t);
    switch (t) {
    case DSL_MSG_HELLO: build_hello(m, full); break;
    case DSL_MSG_PROBE: build_probe(m, full); break;
    case DSL_MSG_PROBED: build_probed(m, full); break;
    case DSL_MSG_START: build_start(m, full); break;
    case DSL_MSG_OUT: build_out(m, full); break;
    case DSL_MSG_EXIT: build_exit(m, full); break;
    case DSL_MSG_PROGRESS: build_progress(m, full); break;
    case DSL_MSG_STACKED: build_stacked(m, full); break;
    default: build_small(m, full); break;
    }
}

/* Written by the field-by-field coder of commit c29b512: [type][0 minimal, 1 full]. */
static const char *const golden[DSL_MSG_NTYPES][2] = {
#include "proto_golden.inc"
};

static char *encode(const struct dsl_msg *m)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, DSL_PROTO_MAX_LINE * 2);
    ASSERT_OK(dsl_msg_encode(m, &b));
    ASSERT(b.len > 0 && b.buf[b.len - 1] == '\n');
    b.buf[b.len - 1] = '\0';
    char *s = dup_s(b.buf);
    dsl_dynbuf_release(&b);
    return s;
}

static int refused(const char *line, size_t len)
{
    struct dsl_msg m;
    char err[DSL_ERR_LEN] = "";
    int r = dsl_msg_decode(&m, line, len, err);
    if (r == 0) {
        dsl_msg_release(&m);
        return 0;
    }
    return r == DSL_EPROTO && err[0] != '\0';
}

TEST(every_message_type_should_encode_to_the_bytes_of_protocol_version_1_and_round_trip)
{
    int dump = getenv("DSL_PROTO_GOLDEN") != NULL;
    for (int t = DSL_MSG_HELLO; t < DSL_MSG_NTYPES; t++)
        for (int full = 0; full < 2; full++) {
            struct dsl_msg m, got;
            build(&m, (enum dsl_msg_type)t, full);
            char *line = encode(&m);
            if (dump) {
                printf("[%d][%d] = \"", t, full);
                for (const char *c = line; *c; c++)
                    printf(*c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
                printf("\",\n");
                fflush(stdout);
            } else {
                ASSERT_STR_EQ(line, golden[t][full]);
            }
            char err[DSL_ERR_LEN];
            ASSERT_OK(dsl_msg_decode(&got, line, strlen(line), err));
            ASSERT_EQ((int)got.type, t);
            char *again = encode(&got); /* equal: every member it carries came back */
            ASSERT_STR_EQ(again, line);
            free(again);
            free(line);
            dsl_msg_release(&got);
            dsl_msg_release(&m);
        }
}

TEST(every_message_type_cut_short_should_be_refused)
{
    for (int t = DSL_MSG_HELLO; t < DSL_MSG_NTYPES; t++)
        for (int full = 0; full < 2; full++) {
            const char *line = golden[t][full];
            for (size_t n = 0; n < strlen(line); n++)
                if (!refused(line, n))
                    DSL_FAIL_("accepted %zu bytes of %s", n, line);
        }
}

/* The minimal messages hold only what their type requires: each member taken out, the
 * message is refused. */
TEST(every_message_type_missing_a_required_member_should_be_refused)
{
    for (int t = DSL_MSG_HELLO; t < DSL_MSG_NTYPES; t++) {
        cJSON *o = cJSON_Parse(golden[t][0]);
        ASSERT(o != NULL);
        int n = cJSON_GetArraySize(o);
        for (int i = 1; i < n; i++) { /* member 0 is "t" */
            cJSON *copy = cJSON_Duplicate(o, 1);
            cJSON_DeleteItemFromArray(copy, i);
            char *s = cJSON_PrintUnformatted(copy);
            if (!refused(s, strlen(s)))
                DSL_FAIL_("accepted %s", s);
            cJSON_free(s);
            cJSON_Delete(copy);
        }
        cJSON_Delete(o);
    }
}

static char *with_member(const char *line, const char *name, cJSON *value)
{
    cJSON *o = cJSON_Parse(line);
    ASSERT(o != NULL);
    if (cJSON_GetObjectItemCaseSensitive(o, name))
        cJSON_ReplaceItemInObjectCaseSensitive(o, name, value);
    else
        cJSON_AddItemToObject(o, name, value);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static cJSON *long_array(int n, cJSON *(*item)(int))
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, item(i));
    return a;
}

static cJSON *iface_item(int i)
{
    (void)i;
    return cJSON_Parse("{\"name\":\"e\",\"addrs\":[]}");
}

static cJSON *rank_item(int i)
{
    cJSON *r = cJSON_Parse("{\"local_rank\":0,\"env\":[]}");
    cJSON_AddNumberToObject(r, "rank", i);
    return r;
}

static cJSON *gpu_item(int i)
{
    return cJSON_CreateNumber(i);
}

TEST(members_over_their_bounds_should_be_refused)
{
    char *big = malloc(DSL_PROTO_MAX_STACK + 2);
    memset(big, 'x', DSL_PROTO_MAX_STACK + 1);
    big[DSL_PROTO_MAX_STACK + 1] = '\0';
    char *stk = malloc(strlen(big) + 64);
    snprintf(stk, strlen(big) + 64, "[{\"rank\":0,\"pid\":1,\"tool\":\"gdb\",\"text\":\"%s\"}]",
             big);
    struct {
        int type, full;
        const char *member;
        cJSON *value;
    } cases[] = {
        {DSL_MSG_HELLO, 0, "ifaces", long_array(4097, iface_item)},
        {DSL_MSG_START, 0, "ranks", long_array(65537, rank_item)},
        {DSL_MSG_START, 0, "ranks", cJSON_CreateArray()},
        {DSL_MSG_STACKED, 1, "stacks", cJSON_Parse(stk)},
        {DSL_MSG_PROBE, 0, "cport", cJSON_CreateNumber(65536)},
        {DSL_MSG_PROBE, 0, "port", cJSON_CreateNumber(-1)},
        {DSL_MSG_STARTED, 0, "pid", cJSON_CreateNumber(2147483648.0)},
        {DSL_MSG_STARTED, 0, "rank", cJSON_CreateNumber(0.5)},
        {DSL_MSG_START, 1, "progress", cJSON_CreateNumber(3601)},
        {DSL_MSG_START, 1, "mem_limit", cJSON_CreateNumber(1e19)},
        {DSL_MSG_STACKS, 0, "timeout", cJSON_CreateNumber(3601)},
        {DSL_MSG_OUT, 0, "end", cJSON_CreateNumber(4)},
        {DSL_MSG_OUT, 0, "x", cJSON_CreateString("abc")},
        {DSL_MSG_HELLO, 1, "argv_sha256", cJSON_CreateString("00ff")},
        {DSL_MSG_HELLO, 1, "slots", cJSON_CreateNumber(16777217)},
        {DSL_MSG_SPAWNERR, 0, "code", cJSON_CreateNumber(256)},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ASSERT(cases[i].value != NULL);
        char *s = with_member(golden[cases[i].type][cases[i].full], cases[i].member,
                              cases[i].value);
        if (!refused(s, strlen(s)))
            DSL_FAIL_("accepted '%s' of case %zu", cases[i].member, i);
        cJSON_free(s);
    }
    /* the probed facts' two GPU lists must be as long as each other */
    cJSON *o = cJSON_Parse(golden[DSL_MSG_PROBED][1]);
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "facts"),
                                           "gpu_total", long_array(3, gpu_item));
    char *s = cJSON_PrintUnformatted(o);
    ASSERT(refused(s, strlen(s)));
    cJSON_free(s);
    cJSON_Delete(o);
    free(stk);
    free(big);
}

TEST_MAIN()
