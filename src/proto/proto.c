/*
 * The control protocol: typed messages <-> single JSON lines.
 *
 * Every message type is a table of member rows (name, kind, offset in struct dsl_msg,
 * bounds, flags), walked by common/schema.c for encoding and decoding; what no kind
 * describes (an output line's base64 form, the line end "cr" implies) is a custom row,
 * and the rules between members a check function. Decoding is strict: every member a
 * message type needs must be present with the right JSON type, numbers must be integral
 * where integers are expected and within bounds, and strings are copied out so the cJSON
 * tree never outlives this file. Unknown members are ignored, so a newer peer can add
 * information without breaking an older one of the same protocol version. The member
 * order of a line is the table's: the bytes are those of protocol version 1
 * (tests/proto/test_proto_types.c holds them).
 */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/schema.h"
#include "dslaunch/proto/proto.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

void dsl_msg_init(struct dsl_msg *m, enum dsl_msg_type type)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
    dsl_strvec_init(&m->connect);
    dsl_strvec_init(&m->argv);
    dsl_strvec_init(&m->env);
    dsl_strvec_init(&m->tail);
}

void dsl_msg_release(struct dsl_msg *m)
{
    free(m->version);
    free(m->host);
    free(m->contain);
    for (int i = 0; i < m->nifaces; i++) {
        free(m->ifaces[i].name);
        dsl_strvec_release(&m->ifaces[i].addrs);
    }
    free(m->ifaces);
    dsl_strvec_release(&m->connect);
    free(m->reach);
    free(m->iface);
    free(m->src);
    free(m->detail);
    free(m->program);
    free(m->script);
    free(m->ld_path);
    free(m->bind);
    free(m->core_list);
    if (m->facts) {
        dsl_facts_release(m->facts);
        free(m->facts);
    }
    free(m->host_label);
    free(m->cwd);
    dsl_strvec_release(&m->argv);
    dsl_strvec_release(&m->env);
    for (int i = 0; i < m->nranks; i++)
        dsl_strvec_release(&m->ranks[i].env);
    free(m->ranks);
    free(m->line);
    free(m->error);
    free(m->argv_sha256);
    free(m->refused);
    dsl_strvec_release(&m->tail);
    free(m->progress);
    for (int i = 0; i < m->nstacks; i++) {
        free(m->stacks[i].tool);
        free(m->stacks[i].text);
    }
    free(m->stacks);
    dsl_msg_init(m, 0);
}

/* ---- the member tables: one row a member, in the order a message writes them ---- */

#define F(n, k, o) .name = (n), .kind = DSL_SK_##k, .off = (o)
#define M(f) offsetof(struct dsl_msg, f)
#define NROWS(rows) (int)(sizeof(rows) / sizeof((rows)[0]))
#define SCHEMA(n, rows, check) {(n), (rows), NROWS(rows), (check)}
#define MAX_BYTES 9223372036854775807.0 /* a byte count: up to 2^63 */
#define MAX_ENTRIES 65536               /* progress and stack entries */

static const struct dsl_schema_row iface_rows[] = {
    {F("name", STR, offsetof(struct dsl_iface, name))},
    {F("addrs", STRVEC, offsetof(struct dsl_iface, addrs))},
};
static const struct dsl_schema iface_schema = SCHEMA("interface", iface_rows, NULL);

static int check_hello(const void *obj, char *err)
{
    const struct dsl_msg *m = obj;
    if (m->slots && m->node_rank >= m->nnodes)
        return dsl_seterr(err, DSL_EPROTO, "bad slots, node_rank or nnodes");
    size_t dn = m->argv_sha256 ? strlen(m->argv_sha256) : 0;
    if ((dn != 0 && dn != 64) || (m->argv_sha256 && strspn(m->argv_sha256, "0123456789abcdef") != dn))
        return dsl_seterr(err, DSL_EPROTO, "bad argv_sha256");
    return 0;
}

static const struct dsl_schema_row hello_rows[] = {
    {F("proto", INT, M(proto))},
    {F("version", STR, M(version))},
    {F("host", STR, M(host))},
    {F("cpus", INT, M(cpus))},
    {F("gpus", INT, M(gpus))},
    {F("pid", INT, M(pid))},
    {F("ifaces", ARRAY, M(ifaces)), .hi = 4096, .aux = M(nifaces),
     .size = sizeof(struct dsl_iface), .sub = &iface_schema},
    {F("contain", STR, M(contain)), .flags = DSL_SF_OPT},
    {F("memcg", INT, M(memcg)), .flags = DSL_SF_OPT},
    /* a no-ssh node's slots, node_rank and nnodes travel together */
    {F("slots", INT, M(slots)), .lo = 1, .hi = 1 << 24, .flags = DSL_SF_OPT | DSL_SF_POSITIVE},
    {F("node_rank", INT, M(node_rank)), .lo = 0, .hi = INT_MAX, .flags = DSL_SF_WITH_PREV},
    {F("nnodes", INT, M(nnodes)), .lo = 1, .hi = INT_MAX, .flags = DSL_SF_WITH_PREV},
    {F("argv_sha256", STR, M(argv_sha256)), .flags = DSL_SF_OPT},
    {F("argv", STRVEC, M(argv)), .flags = DSL_SF_OPT | DSL_SF_FLAGGED, .aux = M(has_argv)},
};

static const struct dsl_schema_row probe_rows[] = {
    {F("port", INT, M(port)), .lo = 0, .hi = 65535},
    {F("pick", INT, M(pick))},
    {F("cport", INT, M(cport)), .lo = 0, .hi = 65535},
    {F("connect", STRVEC, M(connect))},
    {F("program", STR, M(program))},
    {F("cwd", STR, M(cwd))},
    {F("script", STR, M(script)), .flags = DSL_SF_OPT},
    {F("diag", INT, M(diag)), .flags = DSL_SF_OPT},
    {F("ld_path", STR, M(ld_path)), .flags = DSL_SF_OPT},
    {F("bind", STR, M(bind)), .flags = DSL_SF_OPT},
    {F("env", STRVEC, M(env)), .flags = DSL_SF_OPT},
};

#define FA(f) offsetof(struct dsl_facts, f)
static const struct dsl_schema_row facts_rows[] = {
    {F("kernel", STR, FA(kernel))},
    {F("glibc", STR, FA(glibc))},
    {F("cuda_driver", STR, FA(cuda_driver))},
    {F("cuda_runtime", STR, FA(cuda_runtime))},
    {F("nccl", STR, FA(nccl))},
    {F("cudart_path", STR, FA(cudart_path)), .flags = DSL_SF_OPTIONAL},
    {F("nccl_path", STR, FA(nccl_path)), .flags = DSL_SF_OPTIONAL},
    {F("cvd", STR, FA(cvd))},
    {F("cvd_set", INT, FA(cvd_set))},
    {F("nvml", INT, FA(nvml))},
    {F("gpu_free", DOUBLES, FA(gpu_free_mib)), .hi = 4096, .aux = FA(ngpu)},
    {F("gpu_total", DOUBLES, FA(gpu_total_mib)), .hi = 4096, .aux = FA(ngpu),
     .flags = DSL_SF_SAME_COUNT},
    {F("ib", STRVEC, FA(ib))},
    {F("p2p", INT, FA(p2p))},
    {F("disk_free", DOUBLE, FA(disk_free))},
    {F("t_recv", DOUBLE, FA(t_recv))},
    {F("t_send", DOUBLE, FA(t_send))},
};
static const struct dsl_schema facts_schema = SCHEMA("facts", facts_rows, NULL);

static const struct dsl_schema_row probed_rows[] = {
    {F("port", INT, M(port))},
    {F("port_busy", INT, M(port_busy))},
    {F("reach", FLAGS, M(reach)), .aux = M(nreach)},
    {F("iface", STR, M(iface))},
    {F("src", STR, M(src))},
    {F("program_ok", INT, M(program_ok))},
    {F("cwd_ok", INT, M(cwd_ok))},
    {F("detail", STR, M(detail))},
    {F("facts", OBJPTR, M(facts)), .flags = DSL_SF_OPT, .size = sizeof(struct dsl_facts),
     .sub = &facts_schema},
};

#define RS(f) offsetof(struct dsl_rank_spec, f)
static const struct dsl_schema_row rank_rows[] = {
    {F("rank", INT, RS(rank)), .lo = 0, .hi = INT_MAX},
    {F("local_rank", INT, RS(local_rank)), .lo = 0, .hi = INT_MAX},
    {F("env", STRVEC, RS(env))},
};
static const struct dsl_schema rank_schema = SCHEMA("rank", rank_rows, NULL);

static const struct dsl_schema_row start_rows[] = {
    {F("node_rank", INT, M(node_rank))},
    {F("host_label", STR, M(host_label))},
    {F("cwd", STR, M(cwd))},
    {F("argv", STRVEC, M(argv)), .lo = 1, .hi = INT_MAX},
    {F("env", STRVEC, M(env))},
    {F("ranks", ARRAY, M(ranks)), .lo = 1, .hi = 65536, .aux = M(nranks),
     .size = sizeof(struct dsl_rank_spec), .sub = &rank_schema},
    {F("grace", DOUBLE, M(grace)), .lo = 0, .hi = DBL_MAX},
    {F("keepalive", DOUBLE, M(keepalive)), .lo = 0, .hi = DBL_MAX},
    {F("lra", INT, M(local_rank_arg))},
    {F("mem_limit", DOUBLE, M(mem_limit)), .lo = 0, .hi = MAX_BYTES,
     .flags = DSL_SF_OPT | DSL_SF_POSITIVE},
    {F("cpubind", INT, M(cpubind)), .flags = DSL_SF_OPT},
    {F("cores", STR, M(core_list)), .flags = DSL_SF_OPT},
    {F("progress", DOUBLE, M(progress_tick)), .lo = 0, .hi = 3600,
     .flags = DSL_SF_OPT | DSL_SF_POSITIVE},
};

static const struct dsl_schema_row started_rows[] = {
    {F("rank", INT, M(rank))},
    {F("pid", INT, M(pid))},
};

/* An out line holding a NUL travels as base64 in "x" (a JSON string cannot carry a NUL
   through cJSON), with "line" empty. */
static void encode_line(const void *obj, cJSON *o)
{
    const struct dsl_msg *m = obj;
    size_t len = m->line ? (m->line_len ? m->line_len : strlen(m->line)) : 0;
    if (m->line && memchr(m->line, '\0', len)) {
        char *b64 = dsl_xmalloc(4 * ((len + 2) / 3) + 1);
        EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)m->line, (int)len);
        cJSON_AddStringToObject(o, "line", "");
        cJSON_AddStringToObject(o, "x", b64);
        free(b64);
    } else {
        cJSON_AddStringToObject(o, "line", m->line ? m->line : "");
    }
}

static int decode_line(void *obj, const cJSON *o, char *err)
{
    struct dsl_msg *m = obj;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "line");
    if (!cJSON_IsString(v) || !v->valuestring)
        return dsl_seterr(err, DSL_EPROTO, "member 'line' missing or not a string");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "x");
    if (!x) {
        m->line = dsl_xstrdup(v->valuestring);
        m->line_len = strlen(m->line);
        return 0;
    }
    if (!cJSON_IsString(x) || !x->valuestring)
        return dsl_seterr(err, DSL_EPROTO, "member 'x' missing or not a string");
    const char *b64 = x->valuestring;
    size_t bl = strlen(b64);
    unsigned char *raw = bl % 4 == 0 ? dsl_xmalloc(bl / 4 * 3 + 1) : NULL;
    int n = raw ? EVP_DecodeBlock(raw, (const unsigned char *)b64, (int)bl) : -1;
    /* EVP_DecodeBlock counts the bytes of '=' padding as zeros */
    for (size_t k = bl; n > 0 && k > 0 && b64[k - 1] == '=' && k + 2 > bl; k--)
        n--;
    if (n < 0) {
        free(raw);
        return dsl_seterr(err, DSL_EPROTO, "bad base64 in an output line");
    }
    raw[n] = '\0';
    m->line = (char *)raw;
    m->line_len = (size_t)n;
    return 0;
}

/* "end" is written only when it is not the one "cr" implies. */
static void encode_end(const void *obj, cJSON *o)
{
    const struct dsl_msg *m = obj;
    if (m->end != (m->cr ? DSL_END_CR : DSL_END_LF))
        cJSON_AddNumberToObject(o, "end", m->end);
}

static const struct dsl_schema_row end_rows[] = {
    {F("end", INT, M(end)), .lo = DSL_END_NONE, .hi = DSL_END_CRLF, .bad = "line end"},
};
static const struct dsl_schema end_schema = SCHEMA("end", end_rows, NULL);

static int decode_end(void *obj, const cJSON *o, char *err)
{
    struct dsl_msg *m = obj;
    m->end = m->cr ? DSL_END_CR : DSL_END_LF;
    if (!cJSON_GetObjectItemCaseSensitive(o, "end"))
        return 0;
    return dsl_schema_decode(&end_schema, m, o, err);
}

static const struct dsl_schema_custom line_member = {encode_line, decode_line};
static const struct dsl_schema_custom end_member = {encode_end, decode_end};

static const struct dsl_schema_row out_rows[] = {
    {F("rank", INT, M(rank))},
    {F("s", INT, M(stream)), .lo = 1, .hi = 2, .bad = "stream"},
    {F("line", CUSTOM, 0), .custom = &line_member}, /* and "x" */
    {F("cr", INT, M(cr))},
    {F("end", CUSTOM, 0), .custom = &end_member},
};

#define EC(f) offsetof(struct dsl_exit_cause, f)
static const struct dsl_schema_row cause_rows[] = {
    {F("oom", INT, EC(oom)), .lo = DSL_OOM_NONE, .hi = DSL_OOM_OTHER},
    {F("src", INT, EC(oom_src)), .lo = DSL_OOMSRC_NONE, .hi = DSL_OOMSRC_KMSG},
    {F("kills", INT, EC(oom_kills)), .lo = 0, .hi = INT_MAX},
    {F("stop", INT, EC(by_stop)), .lo = 0, .hi = 1},
    /* absent from older agents: "not known to be" */
    {F("unstopped", BOOL, EC(unstopped)), .lo = 0, .hi = 1, .flags = DSL_SF_OPT},
    {F("limit", DOUBLE, EC(mem_limit)), .lo = 0, .hi = MAX_BYTES},
    {F("peak", DOUBLE, EC(mem_peak)), .lo = 0, .hi = MAX_BYTES},
    {F("avail", DOUBLE, EC(mem_avail)), .lo = 0, .hi = MAX_BYTES},
};
static const struct dsl_schema cause_schema = SCHEMA("cause", cause_rows, NULL);

static const struct dsl_schema_row exit_rows[] = {
    {F("rank", INT, M(rank))},
    {F("pid", INT, M(pid))},
    {F("code", INT, M(code))},
    {F("sig", INT, M(sig))},
    {F("wall", DOUBLE, M(wall))},
    {F("tail", STRVEC, M(tail))},
    {F("cause", OBJECT, M(cause)), .flags = DSL_SF_OPT | DSL_SF_FLAGGED, .aux = M(cause.known),
     .sub = &cause_schema},
};

static const struct dsl_schema_row spawnerr_rows[] = {
    {F("rank", INT, M(rank))},
    {F("error", STR, M(error))},
    /* the exit code it stands for; absent from older agents */
    {F("code", INT, M(code)), .lo = 1, .hi = 255, .flags = DSL_SF_OPT, .bad = "spawn error code"},
};

static const struct dsl_schema_row stop_rows[] = {
    {F("sig", INT, M(sig)), .lo = 0, .hi = 64},
    {F("grace", DOUBLE, M(grace)), .lo = 0, .hi = DBL_MAX},
    {F("refused", STR, M(refused)), .flags = DSL_SF_OPT},
};

/* Only SIGUSR1 and SIGUSR2 pass through to the ranks, never a kill. */
static int check_signal(const void *obj, char *err)
{
    const struct dsl_msg *m = obj;
    if (m->sig != SIGUSR1 && m->sig != SIGUSR2)
        return dsl_seterr(err, DSL_EPROTO, "bad signal request %d", m->sig);
    return 0;
}

static const struct dsl_schema_row signal_rows[] = {
    {F("sig", INT, M(sig))},
};

#define RP(f) offsetof(struct dsl_rank_progress, f)
static const struct dsl_schema_row progress_entry_rows[] = {
    {F("rank", INT, RP(rank)), .lo = 0, .hi = 1 << 24},
    {F("adv", INT, RP(advanced)), .lo = 0, .hi = 1},
    {F("form", INT, RP(view.form)), .lo = 0, .hi = DSL_PROGRESS_TEXT},
    {F("hs", INT, RP(view.has_step)), .lo = 0, .hi = 1},
    {F("step", U64, RP(view.step))},
    {F("cseq", U64, RP(view.coll_seq))},
    {F("ckind", INT, RP(view.coll_kind)), .lo = 0, .hi = 127},
    {F("in", INT, RP(view.in_coll)), .lo = 0, .hi = 1},
    {F("text", TEXT, RP(view.text)), .size = sizeof(((struct dsl_progress_view *)0)->text)},
    {F("ps", CHAR, RP(pstate))},
    /* optional: an older launcher ignores it, an older agent omits it */
    {F("ph", INT, RP(view.phase)), .lo = 0, .hi = DSL_PROGRESS_PHASE_MAX, .flags = DSL_SF_OPT},
    /* new within version 1: its presence tells a newer launcher that the agent knows
       the stacks request's probe member; absent, busy reads -1 (unknown) */
    {F("busy", BOOL, RP(busy)), .lo = 0, .hi = 1, .def = -1, .flags = DSL_SF_OPTIONAL},
};
static const struct dsl_schema progress_entry_schema =
    SCHEMA("progress", progress_entry_rows, NULL);

static const struct dsl_schema_row progress_rows[] = {
    {F("ranks", ARRAY, M(progress)), .hi = MAX_ENTRIES, .aux = M(nprogress),
     .size = sizeof(struct dsl_rank_progress), .sub = &progress_entry_schema},
};

static const struct dsl_schema_row stacks_rows[] = {
    {F("timeout", DOUBLE, M(stack_timeout)), .lo = 0, .hi = 3600},
    {F("probe", BOOL, M(stack_probe)), .lo = 0, .hi = 1, .flags = DSL_SF_OPT},
};

#define RK(f) offsetof(struct dsl_rank_stack, f)
static const struct dsl_schema_row stack_entry_rows[] = {
    {F("rank", INT, RK(rank)), .lo = 0, .hi = 1 << 24},
    {F("pid", INT, RK(pid)), .lo = 0, .hi = INT_MAX},
    {F("tool", STR, RK(tool)), .hi = 64},
    {F("text", STR, RK(text)), .hi = DSL_PROTO_MAX_STACK},
};
static const struct dsl_schema stack_entry_schema = SCHEMA("stack", stack_entry_rows, NULL);

static const struct dsl_schema_row stacked_rows[] = {
    /* the answer to a probe, not to a capture */
    {F("probe", BOOL, M(stack_probe)), .lo = 0, .hi = 1, .flags = DSL_SF_OPT},
    {F("stacks", ARRAY, M(stacks)), .hi = MAX_ENTRIES, .aux = M(nstacks),
     .size = sizeof(struct dsl_rank_stack), .sub = &stack_entry_schema},
};

/* The messages by type: the schema's name is the "t" member. */
static const struct dsl_schema messages[DSL_MSG_NTYPES] = {
    [DSL_MSG_HELLO] = SCHEMA("hello", hello_rows, check_hello),
    [DSL_MSG_PROBE] = SCHEMA("probe", probe_rows, NULL),
    [DSL_MSG_PROBED] = SCHEMA("probed", probed_rows, NULL),
    [DSL_MSG_START] = SCHEMA("start", start_rows, NULL),
    [DSL_MSG_STARTED] = SCHEMA("started", started_rows, NULL),
    [DSL_MSG_OUT] = SCHEMA("out", out_rows, NULL),
    [DSL_MSG_EXIT] = SCHEMA("exit", exit_rows, NULL),
    [DSL_MSG_SPAWNERR] = SCHEMA("spawnerr", spawnerr_rows, NULL),
    [DSL_MSG_STOP] = SCHEMA("stop", stop_rows, NULL),
    [DSL_MSG_PING] = {"ping", NULL, 0, NULL},
    [DSL_MSG_BYE] = {"bye", NULL, 0, NULL},
    [DSL_MSG_PROGRESS] = SCHEMA("progress", progress_rows, NULL),
    [DSL_MSG_STACKS] = SCHEMA("stacks", stacks_rows, NULL),
    [DSL_MSG_STACKED] = SCHEMA("stacked", stacked_rows, NULL),
    [DSL_MSG_SIGNAL] = SCHEMA("signal", signal_rows, check_signal),
};

/* ---- the coder ---- */

int dsl_msg_encode(const struct dsl_msg *m, struct dsl_dynbuf *out)
{
    if (m->type < DSL_MSG_HELLO || m->type >= DSL_MSG_NTYPES)
        return -EINVAL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "t", messages[m->type].name);
    dsl_schema_encode(&messages[m->type], m, o);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s)
        return -ENOMEM;
    int r = dsl_dynbuf_addstr(out, s);
    if (r == 0)
        r = dsl_dynbuf_add(out, "\n", 1);
    cJSON_free(s);
    return r;
}

int dsl_msg_decode(struct dsl_msg *m, const char *line, size_t len, char *err)
{
    dsl_msg_init(m, 0);
    cJSON *o = cJSON_ParseWithLength(line, len);
    if (!o)
        return dsl_seterr(err, DSL_EPROTO, "malformed control message");
    int r = DSL_EPROTO;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "t");
    if (!cJSON_IsObject(o) || !cJSON_IsString(t) || !t->valuestring) {
        dsl_seterr(err, r, "control message without a type");
        goto out;
    }
    for (int i = DSL_MSG_HELLO; i < DSL_MSG_NTYPES; i++)
        if (!strcmp(t->valuestring, messages[i].name))
            m->type = (enum dsl_msg_type)i;
    if (!m->type) {
        dsl_seterr(err, r, "unknown control message '%.40s'", t->valuestring);
        goto out;
    }
    r = dsl_schema_decode(&messages[m->type], m, o, err);
out:
    cJSON_Delete(o);
    if (r < 0)
        dsl_msg_release(m);
    return r;
}

void dsl_linebuf_init(struct dsl_linebuf *lb)
{
    dsl_dynbuf_init(&lb->buf, DSL_PROTO_MAX_LINE);
}

int dsl_linebuf_feed(struct dsl_linebuf *lb, const void *data, size_t n)
{
    return dsl_dynbuf_add(&lb->buf, data, n);
}

int dsl_msg_next(struct dsl_linebuf *lb, struct dsl_msg *m, char *err)
{
    if (!lb->buf.len)
        return 0;
    char *nl = memchr(lb->buf.buf, '\n', lb->buf.len);
    if (!nl)
        return 0;
    size_t len = (size_t)(nl - lb->buf.buf);
    int r = dsl_msg_decode(m, lb->buf.buf, len, err);
    dsl_dynbuf_consume(&lb->buf, len + 1);
    return r < 0 ? r : 1;
}

void dsl_linebuf_release(struct dsl_linebuf *lb)
{
    dsl_dynbuf_release(&lb->buf);
}

const char *dsl_line_end_text(int end)
{
    switch (end) {
    case DSL_END_LF: return "\n";
    case DSL_END_CR: return "\r";
    case DSL_END_CRLF: return "\r\n";
    default: return "";
    }
}
