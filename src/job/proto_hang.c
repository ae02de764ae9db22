/*
 * The control protocol's progress and hang members: typed structs <-> cJSON members.
 *
 * As in proto.c, decoding is strict (every member of a type present, with its JSON
 * type; numbers integral where integers are expected; counts and texts bounded) and
 * copies strings out, so no cJSON object outlives the call. Optional members of start
 * are left at 0 when absent, so an agent from before them still decodes start.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "proto_hang.h"
#include "dslaunch/common/banned.h"

#define MAX_ENTRIES 65536

static int num(const cJSON *o, const char *name, double lo, double hi, double *out, char *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return dsl_seterr(err, DSL_EPROTO, "member '%s' missing or not a number", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return dsl_seterr(err, DSL_EPROTO, "member '%s' out of range", name);
    *out = v->valuedouble;
    return 0;
}

static int integer(const cJSON *o, const char *name, double lo, double hi, double *out,
                   char *err)
{
    int r = num(o, name, lo, hi, out, err);
    if (r == 0 && *out != floor(*out))
        return dsl_seterr(err, DSL_EPROTO, "member '%s' is not an integer", name);
    return r;
}

static int str(const cJSON *o, const char *name, size_t max, const char **out, char *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsString(v) || !v->valuestring)
        return dsl_seterr(err, DSL_EPROTO, "member '%s' missing or not a string", name);
    if (strlen(v->valuestring) > max)
        return dsl_seterr(err, DSL_EPROTO, "member '%s' is too long", name);
    *out = v->valuestring;
    return 0;
}

static const cJSON *array(const cJSON *o, const char *name, int *n, char *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsArray(a)) {
        dsl_seterr(err, DSL_EPROTO, "member '%s' missing or not an array", name);
        return NULL;
    }
    *n = cJSON_GetArraySize(a);
    if (*n > MAX_ENTRIES) {
        dsl_seterr(err, DSL_EPROTO, "member '%s' is too long", name);
        return NULL;
    }
    return a;
}

/* ---- encoding ---- */

static void encode_progress(const struct dsl_rank_progress *p, cJSON *e)
{
    const struct dsl_progress_view *v = &p->view;
    char ps[2] = {p->pstate, '\0'};
    cJSON_AddNumberToObject(e, "rank", p->rank);
    cJSON_AddNumberToObject(e, "adv", p->advanced);
    cJSON_AddNumberToObject(e, "form", v->form);
    cJSON_AddNumberToObject(e, "hs", v->has_step);
    cJSON_AddNumberToObject(e, "step", (double)v->step);
    cJSON_AddNumberToObject(e, "cseq", (double)v->coll_seq);
    cJSON_AddNumberToObject(e, "ckind", v->coll_kind);
    cJSON_AddNumberToObject(e, "in", v->in_coll);
    cJSON_AddStringToObject(e, "text", v->text);
    cJSON_AddStringToObject(e, "ps", ps);
    if (v->phase) /* optional: an older launcher ignores it, an older agent omits it */
        cJSON_AddNumberToObject(e, "ph", v->phase);
    /* new within version 1: an older launcher ignores it; its presence tells a newer
       one that the agent knows the stacks request's probe member */
    cJSON_AddNumberToObject(e, "busy", p->busy > 0);
}

void dsl_proto_hang_encode(const struct dsl_msg *m, cJSON *o)
{
    switch (m->type) {
    case DSL_MSG_START:
        if (m->progress_tick > 0)
            cJSON_AddNumberToObject(o, "progress", m->progress_tick);
        break;
    case DSL_MSG_PROGRESS: {
        cJSON *a = cJSON_AddArrayToObject(o, "ranks");
        for (int i = 0; i < m->nprogress; i++) {
            cJSON *e = cJSON_CreateObject();
            encode_progress(&m->progress[i], e);
            cJSON_AddItemToArray(a, e);
        }
        break;
    }
    case DSL_MSG_STACKS:
        cJSON_AddNumberToObject(o, "timeout", m->stack_timeout);
        if (m->stack_probe)
            cJSON_AddNumberToObject(o, "probe", 1);
        break;
    case DSL_MSG_STACKED: {
        if (m->stack_probe) /* the answer to a probe, not to a capture */
            cJSON_AddNumberToObject(o, "probe", 1);
        cJSON *a = cJSON_AddArrayToObject(o, "stacks");
        for (int i = 0; i < m->nstacks; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "rank", m->stacks[i].rank);
            cJSON_AddNumberToObject(e, "pid", m->stacks[i].pid);
            cJSON_AddStringToObject(e, "tool", m->stacks[i].tool ? m->stacks[i].tool : "");
            cJSON_AddStringToObject(e, "text", m->stacks[i].text ? m->stacks[i].text : "");
            cJSON_AddItemToArray(a, e);
        }
        break;
    }
    default:
        break;
    }
}

/* ---- decoding ---- */

static int decode_progress(const cJSON *e, struct dsl_rank_progress *p, char *err)
{
    struct dsl_progress_view *v = &p->view;
    double d;
    const char *s;
    int r;
    if (!cJSON_IsObject(e))
        return dsl_seterr(err, DSL_EPROTO, "progress entry is not an object");
    if ((r = integer(e, "rank", 0, 1 << 24, &d, err)) < 0)
        return r;
    p->rank = (int)d;
    if ((r = integer(e, "adv", 0, 1, &d, err)) < 0)
        return r;
    p->advanced = (int)d;
    if ((r = integer(e, "form", 0, DSL_PROGRESS_TEXT, &d, err)) < 0)
        return r;
    v->form = (enum dsl_progress_form)(int)d;
    if ((r = integer(e, "hs", 0, 1, &d, err)) < 0)
        return r;
    v->has_step = (int)d;
    if ((r = integer(e, "step", 0, 9007199254740992.0, &d, err)) < 0)
        return r;
    v->step = (uint64_t)d;
    if ((r = integer(e, "cseq", 0, 9007199254740992.0, &d, err)) < 0)
        return r;
    v->coll_seq = (uint64_t)d;
    if ((r = integer(e, "ckind", 0, 127, &d, err)) < 0)
        return r;
    v->coll_kind = (int)d;
    if ((r = integer(e, "in", 0, 1, &d, err)) < 0)
        return r;
    v->in_coll = (int)d;
    if ((r = str(e, "text", sizeof(v->text) - 1, &s, err)) < 0)
        return r;
    memcpy(v->text, s, strlen(s) + 1);
    if ((r = str(e, "ps", 1, &s, err)) < 0)
        return r;
    p->pstate = s[0];
    if (cJSON_GetObjectItemCaseSensitive(e, "ph")) {
        if ((r = integer(e, "ph", 0, DSL_PROGRESS_PHASE_MAX, &d, err)) < 0)
            return r;
        v->phase = (int)d;
    }
    p->busy = -1;
    if (cJSON_GetObjectItemCaseSensitive(e, "busy")) {
        if ((r = integer(e, "busy", 0, 1, &d, err)) < 0)
            return r;
        p->busy = (int)d;
    }
    return 0;
}

int dsl_proto_hang_decode(struct dsl_msg *m, const cJSON *o, char *err)
{
    double d;
    int r, n;
    const cJSON *a, *e;
    switch (m->type) {
    case DSL_MSG_START:
        if (!cJSON_GetObjectItemCaseSensitive(o, "progress"))
            return 0;
        if ((r = num(o, "progress", 0, 3600, &d, err)) < 0)
            return r;
        m->progress_tick = d;
        return 0;
    case DSL_MSG_PROGRESS:
        if (!(a = array(o, "ranks", &n, err)))
            return DSL_EPROTO;
        m->progress = dsl_xcalloc((size_t)n + 1, sizeof(*m->progress));
        cJSON_ArrayForEach(e, a)
        {
            if ((r = decode_progress(e, &m->progress[m->nprogress], err)) < 0)
                return r;
            m->nprogress++;
        }
        return 0;
    case DSL_MSG_STACKS:
        if ((r = num(o, "timeout", 0, 3600, &d, err)) < 0)
            return r;
        m->stack_timeout = d;
        if (cJSON_GetObjectItemCaseSensitive(o, "probe")) {
            if ((r = integer(o, "probe", 0, 1, &d, err)) < 0)
                return r;
            m->stack_probe = (int)d;
        }
        return 0;
    case DSL_MSG_STACKED:
        if (cJSON_GetObjectItemCaseSensitive(o, "probe")) {
            if ((r = integer(o, "probe", 0, 1, &d, err)) < 0)
                return r;
            m->stack_probe = (int)d;
        }
        if (!(a = array(o, "stacks", &n, err)))
            return DSL_EPROTO;
        m->stacks = dsl_xcalloc((size_t)n + 1, sizeof(*m->stacks));
        cJSON_ArrayForEach(e, a)
        {
            struct dsl_rank_stack *st = &m->stacks[m->nstacks];
            const char *tool, *text;
            if (!cJSON_IsObject(e))
                return dsl_seterr(err, DSL_EPROTO, "stack entry is not an object");
            if ((r = integer(e, "rank", 0, 1 << 24, &d, err)) < 0)
                return r;
            st->rank = (int)d;
            if ((r = integer(e, "pid", 0, 2147483647.0, &d, err)) < 0)
                return r;
            st->pid = (int)d;
            if ((r = str(e, "tool", 64, &tool, err)) < 0 ||
                (r = str(e, "text", DSL_PROTO_MAX_STACK, &text, err)) < 0)
                return r;
            st->tool = dsl_xstrdup(tool);
            st->text = dsl_xstrdup(text);
            m->nstacks++;
        }
        return 0;
    default:
        return 0;
    }
}

void dsl_proto_hang_release(struct dsl_msg *m)
{
    free(m->progress);
    for (int i = 0; i < m->nstacks; i++) {
        free(m->stacks[i].tool);
        free(m->stacks[i].text);
    }
    free(m->stacks);
}
