/*
 * The control protocol: typed messages <-> single JSON lines.
 *
 * Decoding is strict: every member a message type needs must be present with the right
 * JSON type, numbers must be integral where integers are expected, and strings are
 * copied out so the cJSON tree never outlives this file. Unknown members are ignored, so
 * a newer peer can add information without breaking an older one of the same protocol
 * version.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>

#include "dslaunch/common/error.h"
#include "dslaunch/job/proto.h"
#include "dslaunch/common/xalloc.h"
#include "proto_hang.h"
#include "dslaunch/common/banned.h"

static const char *const type_names[] = {
    [DSL_MSG_HELLO] = "hello",     [DSL_MSG_PROBE] = "probe",  [DSL_MSG_PROBED] = "probed",
    [DSL_MSG_START] = "start",     [DSL_MSG_STARTED] = "started", [DSL_MSG_OUT] = "out",
    [DSL_MSG_EXIT] = "exit",       [DSL_MSG_SPAWNERR] = "spawnerr", [DSL_MSG_STOP] = "stop",
    [DSL_MSG_PING] = "ping",       [DSL_MSG_BYE] = "bye",
    [DSL_MSG_PROGRESS] = "progress", [DSL_MSG_STACKS] = "stacks", [DSL_MSG_STACKED] = "stacked",
    [DSL_MSG_SIGNAL] = "signal",
};

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
    dsl_proto_hang_release(m);
    dsl_msg_init(m, 0);
}

/* ---- encoding ---- */

static void add_strvec(cJSON *o, const char *name, const struct dsl_strvec *sv)
{
    cJSON *a = cJSON_AddArrayToObject(o, name);
    for (size_t i = 0; i < sv->nr; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(sv->v[i]));
}

static void add_str(cJSON *o, const char *name, const char *s)
{
    cJSON_AddStringToObject(o, name, s ? s : "");
}

static void add_facts(cJSON *o, const struct dsl_facts *f)
{
    cJSON *x = cJSON_AddObjectToObject(o, "facts");
    add_str(x, "kernel", f->kernel);
    add_str(x, "glibc", f->glibc);
    add_str(x, "cuda_driver", f->cuda_driver);
    add_str(x, "cuda_runtime", f->cuda_runtime);
    add_str(x, "nccl", f->nccl);
    add_str(x, "cudart_path", f->cudart_path);
    add_str(x, "nccl_path", f->nccl_path);
    add_str(x, "cvd", f->cvd);
    cJSON_AddNumberToObject(x, "cvd_set", f->cvd_set);
    cJSON_AddNumberToObject(x, "nvml", f->nvml);
    cJSON *fr = cJSON_AddArrayToObject(x, "gpu_free");
    cJSON *to = cJSON_AddArrayToObject(x, "gpu_total");
    for (int i = 0; i < f->ngpu; i++) {
        cJSON_AddItemToArray(fr, cJSON_CreateNumber(f->gpu_free_mib[i]));
        cJSON_AddItemToArray(to, cJSON_CreateNumber(f->gpu_total_mib[i]));
    }
    add_strvec(x, "ib", &f->ib);
    cJSON_AddNumberToObject(x, "p2p", f->p2p);
    cJSON_AddNumberToObject(x, "disk_free", f->disk_free);
    cJSON_AddNumberToObject(x, "t_recv", f->t_recv);
    cJSON_AddNumberToObject(x, "t_send", f->t_send);
}

int dsl_msg_encode(const struct dsl_msg *m, struct dsl_dynbuf *out)
{
    if (m->type < DSL_MSG_HELLO || m->type >= DSL_MSG_NTYPES)
        return -EINVAL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "t", type_names[m->type]);
    switch (m->type) {
    case DSL_MSG_HELLO: {
        cJSON_AddNumberToObject(o, "proto", m->proto);
        add_str(o, "version", m->version);
        add_str(o, "host", m->host);
        cJSON_AddNumberToObject(o, "cpus", m->cpus);
        cJSON_AddNumberToObject(o, "gpus", m->gpus);
        cJSON_AddNumberToObject(o, "pid", m->pid);
        cJSON *a = cJSON_AddArrayToObject(o, "ifaces");
        for (int i = 0; i < m->nifaces; i++) {
            cJSON *f = cJSON_CreateObject();
            add_str(f, "name", m->ifaces[i].name);
            add_strvec(f, "addrs", &m->ifaces[i].addrs);
            cJSON_AddItemToArray(a, f);
        }
        if (m->contain)
            add_str(o, "contain", m->contain);
        if (m->memcg)
            cJSON_AddNumberToObject(o, "memcg", m->memcg);
        if (m->slots > 0) {
            cJSON_AddNumberToObject(o, "slots", m->slots);
            cJSON_AddNumberToObject(o, "node_rank", m->node_rank);
            cJSON_AddNumberToObject(o, "nnodes", m->nnodes);
        }
        if (m->argv_sha256)
            add_str(o, "argv_sha256", m->argv_sha256);
        if (m->has_argv)
            add_strvec(o, "argv", &m->argv);
        break;
    }
    case DSL_MSG_PROBE:
        cJSON_AddNumberToObject(o, "port", m->port);
        cJSON_AddNumberToObject(o, "pick", m->pick);
        cJSON_AddNumberToObject(o, "cport", m->cport);
        add_strvec(o, "connect", &m->connect);
        add_str(o, "program", m->program);
        add_str(o, "cwd", m->cwd);
        if (m->script)
            add_str(o, "script", m->script);
        if (m->diag)
            cJSON_AddNumberToObject(o, "diag", m->diag);
        if (m->ld_path)
            add_str(o, "ld_path", m->ld_path);
        if (m->bind)
            add_str(o, "bind", m->bind);
        if (m->env.nr)
            add_strvec(o, "env", &m->env);
        break;
    case DSL_MSG_PROBED: {
        cJSON_AddNumberToObject(o, "port", m->port);
        cJSON_AddNumberToObject(o, "port_busy", m->port_busy);
        cJSON *a = cJSON_AddArrayToObject(o, "reach");
        for (int i = 0; i < m->nreach; i++)
            cJSON_AddItemToArray(a, cJSON_CreateNumber(m->reach[i]));
        add_str(o, "iface", m->iface);
        add_str(o, "src", m->src);
        cJSON_AddNumberToObject(o, "program_ok", m->program_ok);
        cJSON_AddNumberToObject(o, "cwd_ok", m->cwd_ok);
        add_str(o, "detail", m->detail);
        if (m->facts)
            add_facts(o, m->facts);
        break;
    }
    case DSL_MSG_START: {
        cJSON_AddNumberToObject(o, "node_rank", m->node_rank);
        add_str(o, "host_label", m->host_label);
        add_str(o, "cwd", m->cwd);
        add_strvec(o, "argv", &m->argv);
        add_strvec(o, "env", &m->env);
        cJSON *a = cJSON_AddArrayToObject(o, "ranks");
        for (int i = 0; i < m->nranks; i++) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddNumberToObject(r, "rank", m->ranks[i].rank);
            cJSON_AddNumberToObject(r, "local_rank", m->ranks[i].local_rank);
            add_strvec(r, "env", &m->ranks[i].env);
            cJSON_AddItemToArray(a, r);
        }
        cJSON_AddNumberToObject(o, "grace", m->grace);
        cJSON_AddNumberToObject(o, "keepalive", m->keepalive);
        cJSON_AddNumberToObject(o, "lra", m->local_rank_arg);
        if (m->mem_limit > 0)
            cJSON_AddNumberToObject(o, "mem_limit", m->mem_limit);
        if (m->cpubind)
            cJSON_AddNumberToObject(o, "cpubind", m->cpubind);
        if (m->core_list)
            add_str(o, "cores", m->core_list);
        dsl_proto_hang_encode(m, o);
        break;
    }
    case DSL_MSG_STARTED:
        cJSON_AddNumberToObject(o, "rank", m->rank);
        cJSON_AddNumberToObject(o, "pid", m->pid);
        break;
    case DSL_MSG_OUT: {
        cJSON_AddNumberToObject(o, "rank", m->rank);
        cJSON_AddNumberToObject(o, "s", m->stream);
        size_t len = m->line ? (m->line_len ? m->line_len : strlen(m->line)) : 0;
        if (m->line && memchr(m->line, '\0', len)) {
            /* a JSON string cannot carry a NUL through cJSON: the bytes as base64 */
            char *b64 = dsl_xmalloc(4 * ((len + 2) / 3) + 1);
            EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)m->line, (int)len);
            add_str(o, "line", "");
            add_str(o, "x", b64);
            free(b64);
        } else {
            add_str(o, "line", m->line);
        }
        cJSON_AddNumberToObject(o, "cr", m->cr);
        if (m->end != (m->cr ? DSL_END_CR : DSL_END_LF)) /* the usual end is implied */
            cJSON_AddNumberToObject(o, "end", m->end);
        break;
    }
    case DSL_MSG_EXIT:
        cJSON_AddNumberToObject(o, "rank", m->rank);
        cJSON_AddNumberToObject(o, "pid", m->pid);
        cJSON_AddNumberToObject(o, "code", m->code);
        cJSON_AddNumberToObject(o, "sig", m->sig);
        cJSON_AddNumberToObject(o, "wall", m->wall);
        add_strvec(o, "tail", &m->tail);
        if (m->cause.known) {
            cJSON *c = cJSON_AddObjectToObject(o, "cause");
            cJSON_AddNumberToObject(c, "oom", m->cause.oom);
            cJSON_AddNumberToObject(c, "src", m->cause.oom_src);
            cJSON_AddNumberToObject(c, "kills", m->cause.oom_kills);
            cJSON_AddNumberToObject(c, "stop", m->cause.by_stop);
            if (m->cause.unstopped) /* absent from older agents: "not known to be" */
                cJSON_AddNumberToObject(c, "unstopped", 1);
            cJSON_AddNumberToObject(c, "limit", m->cause.mem_limit);
            cJSON_AddNumberToObject(c, "peak", m->cause.mem_peak);
            cJSON_AddNumberToObject(c, "avail", m->cause.mem_avail);
        }
        break;
    case DSL_MSG_SPAWNERR:
        cJSON_AddNumberToObject(o, "rank", m->rank);
        add_str(o, "error", m->error);
        if (m->code) /* the exit code it stands for; absent from older agents */
            cJSON_AddNumberToObject(o, "code", m->code);
        break;
    case DSL_MSG_STOP:
        cJSON_AddNumberToObject(o, "sig", m->sig);
        cJSON_AddNumberToObject(o, "grace", m->grace);
        if (m->refused)
            add_str(o, "refused", m->refused);
        break;
    case DSL_MSG_SIGNAL:
        cJSON_AddNumberToObject(o, "sig", m->sig);
        break;
    case DSL_MSG_PING:
    case DSL_MSG_BYE:
        break;
    case DSL_MSG_PROGRESS:
    case DSL_MSG_STACKS:
    case DSL_MSG_STACKED:
    case DSL_MSG_NTYPES:
        dsl_proto_hang_encode(m, o);
        break;
    }
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

/* ---- decoding ---- */

static int get_int(const cJSON *o, const char *name, int *out, char *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v))
        return dsl_seterr(err, DSL_EPROTO, "member '%s' missing or not a number", name);
    double d = v->valuedouble;
    if (!(d >= -2147483648.0 && d <= 2147483647.0) || d != floor(d))
        return dsl_seterr(err, DSL_EPROTO, "member '%s' is not an integer", name);
    *out = (int)d;
    return 0;
}

static int get_double(const cJSON *o, const char *name, double *out, char *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return dsl_seterr(err, DSL_EPROTO, "member '%s' missing or not a number", name);
    *out = v->valuedouble;
    return 0;
}

static int get_str(const cJSON *o, const char *name, char **out, char *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsString(v) || !v->valuestring)
        return dsl_seterr(err, DSL_EPROTO, "member '%s' missing or not a string", name);
    *out = dsl_xstrdup(v->valuestring);
    return 0;
}

static int get_strvec(const cJSON *o, const char *name, struct dsl_strvec *out, char *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsArray(a))
        return dsl_seterr(err, DSL_EPROTO, "member '%s' missing or not an array", name);
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        if (!cJSON_IsString(e) || !e->valuestring)
            return dsl_seterr(err, DSL_EPROTO, "member '%s' holds a non-string", name);
        dsl_strvec_push(out, e->valuestring);
    }
    return 0;
}

static int get_doubles(const cJSON *o, const char *name, double **out, int *n, char *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsArray(a))
        return dsl_seterr(err, DSL_EPROTO, "member '%s' missing or not an array", name);
    int cnt = cJSON_GetArraySize(a);
    if (cnt > 4096)
        return dsl_seterr(err, DSL_EPROTO, "member '%s' is too long", name);
    *out = dsl_xcalloc((size_t)cnt + 1, sizeof(double));
    *n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble))
            return dsl_seterr(err, DSL_EPROTO, "member '%s' holds a non-number", name);
        (*out)[(*n)++] = e->valuedouble;
    }
    return 0;
}

static int get_facts(const cJSON *o, struct dsl_facts *f, char *err)
{
    int r, nf = 0, nt = 0;
    if ((r = get_str(o, "kernel", &f->kernel, err)) < 0 ||
        (r = get_str(o, "glibc", &f->glibc, err)) < 0 ||
        (r = get_str(o, "cuda_driver", &f->cuda_driver, err)) < 0 ||
        (r = get_str(o, "cuda_runtime", &f->cuda_runtime, err)) < 0 ||
        (r = get_str(o, "nccl", &f->nccl, err)) < 0 || (r = get_str(o, "cvd", &f->cvd, err)) < 0 ||
        (r = get_int(o, "cvd_set", &f->cvd_set, err)) < 0 ||
        (r = get_int(o, "nvml", &f->nvml, err)) < 0 ||
        (r = get_doubles(o, "gpu_free", &f->gpu_free_mib, &nf, err)) < 0 ||
        (r = get_doubles(o, "gpu_total", &f->gpu_total_mib, &nt, err)) < 0 ||
        (r = get_strvec(o, "ib", &f->ib, err)) < 0 || (r = get_int(o, "p2p", &f->p2p, err)) < 0 ||
        (r = get_double(o, "disk_free", &f->disk_free, err)) < 0 ||
        (r = get_double(o, "t_recv", &f->t_recv, err)) < 0 ||
        (r = get_double(o, "t_send", &f->t_send, err)) < 0)
        return r;
    if (nf != nt)
        return dsl_seterr(err, DSL_EPROTO, "members 'gpu_free' and 'gpu_total' differ in length");
    if (cJSON_GetObjectItemCaseSensitive(o, "cudart_path") &&
        (r = get_str(o, "cudart_path", &f->cudart_path, err)) < 0)
        return r;
    if (cJSON_GetObjectItemCaseSensitive(o, "nccl_path") &&
        (r = get_str(o, "nccl_path", &f->nccl_path, err)) < 0)
        return r;
    f->ngpu = nf;
    return 0;
}

/* A byte count: a finite number from 0 to 2^63. */
static int get_bytes(const cJSON *o, const char *name, double *out, char *err)
{
    int r = get_double(o, name, out, err);
    if (r == 0 && !(*out >= 0 && *out <= 9223372036854775807.0))
        return dsl_seterr(err, DSL_EPROTO, "member '%s' is not a byte count", name);
    return r;
}

static int get_cause(const cJSON *o, struct dsl_exit_cause *c, char *err)
{
    int r;
    if (!cJSON_IsObject(o))
        return dsl_seterr(err, DSL_EPROTO, "member 'cause' is not an object");
    if ((r = get_int(o, "oom", &c->oom, err)) < 0 || (r = get_int(o, "src", &c->oom_src, err)) < 0 ||
        (r = get_int(o, "kills", &c->oom_kills, err)) < 0 ||
        (r = get_int(o, "stop", &c->by_stop, err)) < 0 ||
        (r = get_bytes(o, "limit", &c->mem_limit, err)) < 0 ||
        (r = get_bytes(o, "peak", &c->mem_peak, err)) < 0 ||
        (r = get_bytes(o, "avail", &c->mem_avail, err)) < 0)
        return r;
    c->unstopped = 0;
    if (cJSON_GetObjectItemCaseSensitive(o, "unstopped") &&
        (r = get_int(o, "unstopped", &c->unstopped, err)) < 0)
        return r;
    if (c->oom < DSL_OOM_NONE || c->oom > DSL_OOM_OTHER || c->oom_src < DSL_OOMSRC_NONE ||
        c->oom_src > DSL_OOMSRC_KMSG || c->oom_kills < 0 || (c->by_stop != 0 && c->by_stop != 1) ||
        (c->unstopped != 0 && c->unstopped != 1))
        return dsl_seterr(err, DSL_EPROTO, "member 'cause' out of range");
    c->known = 1;
    return 0;
}

static int decode_body(struct dsl_msg *m, const cJSON *o, char *err)
{
    int r = 0;
#define TRY(x)                                                                 \
    do {                                                                       \
        if ((r = (x)) < 0)                                                     \
            return r;                                                          \
    } while (0)
    switch (m->type) {
    case DSL_MSG_HELLO: {
        TRY(get_int(o, "proto", &m->proto, err));
        TRY(get_str(o, "version", &m->version, err));
        TRY(get_str(o, "host", &m->host, err));
        TRY(get_int(o, "cpus", &m->cpus, err));
        TRY(get_int(o, "gpus", &m->gpus, err));
        TRY(get_int(o, "pid", &m->pid, err));
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "ifaces");
        if (!cJSON_IsArray(a))
            return dsl_seterr(err, DSL_EPROTO, "member 'ifaces' missing or not an array");
        int n = cJSON_GetArraySize(a);
        if (n > 4096)
            return dsl_seterr(err, DSL_EPROTO, "too many interfaces");
        m->ifaces = dsl_xcalloc((size_t)n + 1, sizeof(*m->ifaces));
        const cJSON *f;
        cJSON_ArrayForEach(f, a)
        {
            struct dsl_iface *ifc = &m->ifaces[m->nifaces++];
            dsl_strvec_init(&ifc->addrs);
            if (!cJSON_IsObject(f))
                return dsl_seterr(err, DSL_EPROTO, "interface is not an object");
            TRY(get_str(f, "name", &ifc->name, err));
            TRY(get_strvec(f, "addrs", &ifc->addrs, err));
        }
        if (cJSON_GetObjectItemCaseSensitive(o, "contain"))
            TRY(get_str(o, "contain", &m->contain, err));
        if (cJSON_GetObjectItemCaseSensitive(o, "memcg"))
            TRY(get_int(o, "memcg", &m->memcg, err));
        if (cJSON_GetObjectItemCaseSensitive(o, "slots")) {
            TRY(get_int(o, "slots", &m->slots, err));
            TRY(get_int(o, "node_rank", &m->node_rank, err));
            TRY(get_int(o, "nnodes", &m->nnodes, err));
            if (m->slots < 1 || m->slots > (1 << 24) || m->node_rank < 0 || m->nnodes < 1 ||
                m->node_rank >= m->nnodes)
                return dsl_seterr(err, DSL_EPROTO, "bad slots, node_rank or nnodes");
        }
        if (cJSON_GetObjectItemCaseSensitive(o, "argv_sha256")) {
            TRY(get_str(o, "argv_sha256", &m->argv_sha256, err));
            size_t dn = strlen(m->argv_sha256);
            if ((dn != 0 && dn != 64) || strspn(m->argv_sha256, "0123456789abcdef") != dn)
                return dsl_seterr(err, DSL_EPROTO, "bad argv_sha256");
        }
        if (cJSON_GetObjectItemCaseSensitive(o, "argv")) {
            TRY(get_strvec(o, "argv", &m->argv, err));
            m->has_argv = 1;
        }
        break;
    }
    case DSL_MSG_PROBE:
        TRY(get_int(o, "port", &m->port, err));
        TRY(get_int(o, "pick", &m->pick, err));
        TRY(get_int(o, "cport", &m->cport, err));
        TRY(get_strvec(o, "connect", &m->connect, err));
        TRY(get_str(o, "program", &m->program, err));
        TRY(get_str(o, "cwd", &m->cwd, err));
        if (cJSON_GetObjectItemCaseSensitive(o, "script"))
            TRY(get_str(o, "script", &m->script, err));
        if (cJSON_GetObjectItemCaseSensitive(o, "diag"))
            TRY(get_int(o, "diag", &m->diag, err));
        if (cJSON_GetObjectItemCaseSensitive(o, "ld_path"))
            TRY(get_str(o, "ld_path", &m->ld_path, err));
        if (cJSON_GetObjectItemCaseSensitive(o, "bind"))
            TRY(get_str(o, "bind", &m->bind, err));
        if (cJSON_GetObjectItemCaseSensitive(o, "env"))
            TRY(get_strvec(o, "env", &m->env, err));
        if (m->port < 0 || m->port > 65535 || m->cport < 0 || m->cport > 65535)
            return dsl_seterr(err, DSL_EPROTO, "port out of range");
        break;
    case DSL_MSG_PROBED: {
        TRY(get_int(o, "port", &m->port, err));
        TRY(get_int(o, "port_busy", &m->port_busy, err));
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "reach");
        if (!cJSON_IsArray(a))
            return dsl_seterr(err, DSL_EPROTO, "member 'reach' missing or not an array");
        int n = cJSON_GetArraySize(a);
        m->reach = dsl_xcalloc((size_t)n + 1, sizeof(int));
        const cJSON *e;
        cJSON_ArrayForEach(e, a)
        {
            if (!cJSON_IsNumber(e))
                return dsl_seterr(err, DSL_EPROTO, "member 'reach' holds a non-number");
            m->reach[m->nreach++] = e->valuedouble != 0;
        }
        TRY(get_str(o, "iface", &m->iface, err));
        TRY(get_str(o, "src", &m->src, err));
        TRY(get_int(o, "program_ok", &m->program_ok, err));
        TRY(get_int(o, "cwd_ok", &m->cwd_ok, err));
        TRY(get_str(o, "detail", &m->detail, err));
        const cJSON *fo = cJSON_GetObjectItemCaseSensitive(o, "facts");
        if (fo) {
            if (!cJSON_IsObject(fo))
                return dsl_seterr(err, DSL_EPROTO, "member 'facts' is not an object");
            m->facts = dsl_xmalloc(sizeof(*m->facts));
            dsl_facts_init(m->facts);
            TRY(get_facts(fo, m->facts, err));
        }
        break;
    }
    case DSL_MSG_START: {
        TRY(get_int(o, "node_rank", &m->node_rank, err));
        TRY(get_str(o, "host_label", &m->host_label, err));
        TRY(get_str(o, "cwd", &m->cwd, err));
        TRY(get_strvec(o, "argv", &m->argv, err));
        TRY(get_strvec(o, "env", &m->env, err));
        TRY(get_double(o, "grace", &m->grace, err));
        TRY(get_double(o, "keepalive", &m->keepalive, err));
        TRY(get_int(o, "lra", &m->local_rank_arg, err));
        if (cJSON_GetObjectItemCaseSensitive(o, "mem_limit"))
            TRY(get_bytes(o, "mem_limit", &m->mem_limit, err));
        if (cJSON_GetObjectItemCaseSensitive(o, "cpubind"))
            TRY(get_int(o, "cpubind", &m->cpubind, err));
        if (cJSON_GetObjectItemCaseSensitive(o, "cores"))
            TRY(get_str(o, "cores", &m->core_list, err));
        if (m->argv.nr == 0)
            return dsl_seterr(err, DSL_EPROTO, "empty argv");
        if (m->grace < 0 || m->keepalive < 0)
            return dsl_seterr(err, DSL_EPROTO, "negative grace or keepalive");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "ranks");
        if (!cJSON_IsArray(a))
            return dsl_seterr(err, DSL_EPROTO, "member 'ranks' missing or not an array");
        int n = cJSON_GetArraySize(a);
        if (n < 1 || n > 65536)
            return dsl_seterr(err, DSL_EPROTO, "bad rank count %d", n);
        m->ranks = dsl_xcalloc((size_t)n, sizeof(*m->ranks));
        const cJSON *rk;
        cJSON_ArrayForEach(rk, a)
        {
            struct dsl_rank_spec *s = &m->ranks[m->nranks++];
            dsl_strvec_init(&s->env);
            if (!cJSON_IsObject(rk))
                return dsl_seterr(err, DSL_EPROTO, "rank is not an object");
            TRY(get_int(rk, "rank", &s->rank, err));
            TRY(get_int(rk, "local_rank", &s->local_rank, err));
            TRY(get_strvec(rk, "env", &s->env, err));
            if (s->rank < 0 || s->local_rank < 0)
                return dsl_seterr(err, DSL_EPROTO, "negative rank");
        }
        TRY(dsl_proto_hang_decode(m, o, err));
        break;
    }
    case DSL_MSG_STARTED:
        TRY(get_int(o, "rank", &m->rank, err));
        TRY(get_int(o, "pid", &m->pid, err));
        break;
    case DSL_MSG_OUT:
        TRY(get_int(o, "rank", &m->rank, err));
        TRY(get_int(o, "s", &m->stream, err));
        TRY(get_str(o, "line", &m->line, err));
        m->line_len = strlen(m->line);
        TRY(get_int(o, "cr", &m->cr, err));
        m->end = m->cr ? DSL_END_CR : DSL_END_LF;
        if (cJSON_GetObjectItemCaseSensitive(o, "end")) {
            TRY(get_int(o, "end", &m->end, err));
            if (m->end < DSL_END_NONE || m->end > DSL_END_CRLF)
                return dsl_seterr(err, DSL_EPROTO, "bad line end %d", m->end);
        }
        if (cJSON_GetObjectItemCaseSensitive(o, "x")) {
            char *b64 = NULL;
            TRY(get_str(o, "x", &b64, err));
            size_t bl = strlen(b64);
            unsigned char *raw = bl % 4 == 0 ? dsl_xmalloc(bl / 4 * 3 + 1) : NULL;
            int n = raw ? EVP_DecodeBlock(raw, (const unsigned char *)b64, (int)bl) : -1;
            /* EVP_DecodeBlock counts the bytes of '=' padding as zeros */
            for (size_t k = bl; n > 0 && k > 0 && b64[k - 1] == '=' && k + 2 > bl; k--)
                n--;
            free(b64);
            if (n < 0) {
                free(raw);
                return dsl_seterr(err, DSL_EPROTO, "bad base64 in an output line");
            }
            raw[n] = '\0';
            free(m->line);
            m->line = (char *)raw;
            m->line_len = (size_t)n;
        }
        if (m->stream != 1 && m->stream != 2)
            return dsl_seterr(err, DSL_EPROTO, "bad stream %d", m->stream);
        break;
    case DSL_MSG_EXIT:
        TRY(get_int(o, "rank", &m->rank, err));
        TRY(get_int(o, "pid", &m->pid, err));
        TRY(get_int(o, "code", &m->code, err));
        TRY(get_int(o, "sig", &m->sig, err));
        TRY(get_double(o, "wall", &m->wall, err));
        TRY(get_strvec(o, "tail", &m->tail, err));
        if (cJSON_GetObjectItemCaseSensitive(o, "cause"))
            TRY(get_cause(cJSON_GetObjectItemCaseSensitive(o, "cause"), &m->cause, err));
        break;
    case DSL_MSG_SPAWNERR:
        TRY(get_int(o, "rank", &m->rank, err));
        TRY(get_str(o, "error", &m->error, err));
        if (cJSON_GetObjectItemCaseSensitive(o, "code")) {
            TRY(get_int(o, "code", &m->code, err));
            if (m->code < 1 || m->code > 255)
                return dsl_seterr(err, DSL_EPROTO, "bad spawn error code %d", m->code);
        }
        break;
    case DSL_MSG_STOP:
        TRY(get_int(o, "sig", &m->sig, err));
        TRY(get_double(o, "grace", &m->grace, err));
        if (m->sig < 0 || m->sig > 64 || m->grace < 0)
            return dsl_seterr(err, DSL_EPROTO, "bad stop request");
        if (cJSON_GetObjectItemCaseSensitive(o, "refused"))
            TRY(get_str(o, "refused", &m->refused, err));
        break;
    case DSL_MSG_SIGNAL:
        TRY(get_int(o, "sig", &m->sig, err));
        if (m->sig != SIGUSR1 && m->sig != SIGUSR2)
            return dsl_seterr(err, DSL_EPROTO, "bad signal request %d", m->sig);
        break;
    case DSL_MSG_PING:
    case DSL_MSG_BYE:
        break;
    case DSL_MSG_PROGRESS:
    case DSL_MSG_STACKS:
    case DSL_MSG_STACKED:
    case DSL_MSG_NTYPES:
        TRY(dsl_proto_hang_decode(m, o, err));
        break;
    }
#undef TRY
    return 0;
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
        if (!strcmp(t->valuestring, type_names[i]))
            m->type = (enum dsl_msg_type)i;
    if (!m->type) {
        dsl_seterr(err, r, "unknown control message '%.40s'", t->valuestring);
        goto out;
    }
    r = decode_body(m, o, err);
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
