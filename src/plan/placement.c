/*
 * Placement: which slots of which hosts run ranks, and in what order.
 *
 * Theory of operation: every hostfile host gets a selection, "the first lim slots"
 * (lim = 0 is none, lim = slots is all) or, once a filter names single slots, a byte
 * map. --include starts from nothing and adds, --exclude starts from everything and
 * removes; a NODE_SPEC is HOST or HOST:SLOT[,SLOT...] and the specs are joined by '@'
 * (DeepSpeed's syntax; HOST may also be a pdsh range such as node[1-4]; it matches the
 * hostfile line spelling it in any ASCII case, as DNS and the hostfile's duplicate check
 * do, and the line's spelling is kept). --num_nodes
 * keeps the first N hosts, --num_gpus the first N slots of each. The nodes are then
 * read off in hostfile order, slots ascending, skipping hosts left empty, and numbered:
 * node_rank by position, first_rank by the running slot count.
 *
 * Every check DeepSpeed skips is an error here (see docs/placement.md): unknown hosts
 * and slots, malformed specs, filters that leave nothing, --num_gpus above a host's
 * slots, --num_nodes above the host count. Errors read
 * "--include 'worker-0:7': host 'worker-0' has no slot 7 (it has slots 0-3)".
 */
#include <dirent.h>
#include <errno.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/net.h"
#include "dslaunch/plan/hostfile.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/plan/placement.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

struct selection {
    int lim;             /* slots [0, lim) when bits is NULL */
    unsigned char *bits; /* per-slot map (host's slots bytes) once single slots are named */
};

static int sel_has(const struct selection *s, int slot)
{
    return s->bits ? s->bits[slot] : slot < s->lim;
}

/* Switch s to a byte map of n slots holding the same selection. */
static void sel_to_bits(struct selection *s, int n)
{
    if (s->bits)
        return;
    s->bits = dsl_xcalloc((size_t)n, 1);
    for (int i = 0; i < s->lim && i < n; i++)
        s->bits[i] = 1;
}

int dsl_node_is_local(const struct dsl_node *n)
{
    if (!dsl_host_is_local(n->host))
        return 0;
    if (!n->user)
        return 1;
    struct passwd *pw = getpwuid(geteuid());
    return pw && pw->pw_name && strcmp(pw->pw_name, n->user) == 0;
}

void dsl_placement_init(struct dsl_placement *pl)
{
    memset(pl, 0, sizeof(*pl));
}

void dsl_placement_release(struct dsl_placement *pl)
{
    for (int i = 0; i < pl->nr; i++) {
        free(pl->nodes[i].host);
        free(pl->nodes[i].user);
        free(pl->nodes[i].slots);
    }
    free(pl->nodes);
    dsl_placement_init(pl);
}

int dsl_placement_drop(struct dsl_placement *pl, const unsigned char *drop)
{
    int kept = 0;
    pl->world_size = 0;
    for (int i = 0; i < pl->nr; i++) {
        struct dsl_node n = pl->nodes[i];
        if (drop && drop[i]) {
            free(n.host);
            free(n.user);
            free(n.slots);
            continue;
        }
        n.node_rank = kept;
        n.first_rank = pl->world_size;
        pl->world_size += n.nslots;
        pl->nodes[kept++] = n;
    }
    pl->nr = kept;
    return kept;
}

/* "known hosts: a, b, c, d, ..." for an unknown-host message. */
static void known_hosts(const struct dsl_hostfile *hf, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < hf->nr && o + 1 < cap; i++) {
        int n = snprintf(buf + o, cap - o, "%s%s", i ? ", " : "",
                         i == 4 ? "..." : hf->hosts[i].name);
        if (n < 0)
            break;
        o += (size_t)n;
        if (i == 4)
            break;
    }
}

/* The hostfile line a filter's host name means, ASCII case ignored as the hostfile's
 * duplicate check and DNS ignore it ('-i Worker-0' is the line 'worker-0'); -1 if none. */
static long host_index(const struct dsl_hostfile *hf, const char *name)
{
    const struct dsl_host *h = dsl_hostfile_find(hf, name);
    return h ? (long)(h - hf->hosts) : -1;
}

/* Parse one slot id text[0..n) (digits only). Returns the id, or -1. */
static long parse_slot(const char *t, size_t n)
{
    long v = 0;
    if (n == 0 || n > 9)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < '0' || t[i] > '9')
            return -1;
        v = v * 10 + (t[i] - '0');
    }
    return v;
}

/* "worker-0,worker-1": a comma list whose every item is a known host (the user meant
 * '@'; DeepSpeed's ',' separates slots). */
static int comma_joined_hosts(const struct dsl_hostfile *hf, const char *name)
{
    if (!strchr(name, ','))
        return 0;
    char *copy = dsl_xstrdup(name), *save = NULL;
    int all = 1;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        all &= host_index(hf, t) >= 0;
    free(copy);
    return all;
}

/* "alice" of "-i alice@node1": the login user of a hostfile line, typed as part of a
 * filter, where '@' separates hosts. */
static int is_a_user(const struct dsl_hostfile *hf, const char *name)
{
    for (size_t i = 0; i < hf->nr; i++)
        if (hf->hosts[i].user && strcmp(hf->hosts[i].user, name) == 0)
            return 1;
    return 0;
}

/*
 * Apply one NODE_SPEC seg[0..n) of a filter to sel (what names the filter in messages:
 * "--include 'SPEC'"). include: add; otherwise remove.
 */
static int apply_spec(const struct dsl_hostfile *hf, struct selection *sel, int include,
                      const char *what, const char *seg, size_t n, char *err)
{
    const char *colon = memchr(seg, ':', n);
    size_t hn = colon ? (size_t)(colon - seg) : n;
    struct dsl_strvec names;
    char rerr[DSL_ERR_LEN], known[128];
    int r;

    if (n == 0)
        return dsl_seterr(err, DSL_EPLACEMENT,
                          "%s: empty node spec (expected HOST[:SLOT[,SLOT...]] joined by '@')",
                          what);
    if (colon && memchr(colon + 1, ':', n - hn - 1))
        return dsl_seterr(err, DSL_EPLACEMENT,
                          "%s: bad node spec '%.*s' (expected HOST[:SLOT[,SLOT...]])", what,
                          (int)n, seg);
    if (hn == 0)
        return dsl_seterr(err, DSL_EPLACEMENT, "%s: missing host name in '%.*s'", what,
                          (int)n, seg);
    if (colon && hn + 1 == n)
        return dsl_seterr(err, DSL_EPLACEMENT, "%s: empty slot list in '%.*s'", what,
                          (int)n, seg);

    char *host = dsl_xstrndup(seg, hn);
    dsl_strvec_init(&names);
    if (dsl_hostrange_expand(host, &names, rerr) < 0) {
        r = dsl_seterr(err, DSL_EPLACEMENT, "%s: %s", what, rerr);
        goto out;
    }
    for (size_t k = 0; k < names.nr; k++) {
        long hi = host_index(hf, names.v[k]);
        if (hi < 0) {
            known_hosts(hf, known, sizeof(known));
            r = dsl_seterr(err, DSL_EPLACEMENT, "%s: unknown host '%s' (known hosts: %s)%s",
                           what, names.v[k], known,
                           comma_joined_hosts(hf, names.v[k])
                               ? "; hosts are joined with '@', e.g. 'worker-0@worker-1' "
                                 "(',' separates slots: 'worker-0:0,1')"
                           : is_a_user(hf, names.v[k])
                               ? "; that is a login user of the hostfile: filters name "
                                 "hosts alone ('@' joins hosts), e.g. 'node1' for "
                                 "'user@node1'"
                               : "");
            goto out;
        }
        const struct dsl_host *h = &hf->hosts[hi];
        struct selection *s = &sel[hi];
        if (!colon) {
            free(s->bits);
            s->bits = NULL;
            s->lim = include ? h->slots : 0;
            continue;
        }
        const char *p = colon + 1, *end = seg + n;
        while (p <= end) {
            const char *comma = memchr(p, ',', (size_t)(end - p));
            size_t len = comma ? (size_t)(comma - p) : (size_t)(end - p);
            long slot = parse_slot(p, len);
            if (slot < 0) {
                r = dsl_seterr(err, DSL_EPLACEMENT, "%s: bad slot '%.*s' for host '%s'", what
                               , (int)len, p, h->name);
                goto out;
            }
            if (slot >= h->slots) {
                char has[32] = "slot 0";
                if (h->slots > 1)
                    snprintf(has, sizeof(has), "slots 0-%d", h->slots - 1);
                r = dsl_seterr(err, DSL_EPLACEMENT, "%s: host '%s' has no slot %ld (it has %s)",
                               what, h->name, slot, has);
                goto out;
            }
            sel_to_bits(s, h->slots);
            s->bits[slot] = (unsigned char)include;
            p += len + 1;
        }
    }
    r = 0;
out:
    dsl_strvec_release(&names);
    free(host);
    return r;
}

/* what names the filter in messages: "--include 'SPEC'", or how the caller came by it */
static int apply_filter(const struct dsl_hostfile *hf, struct selection *sel, int include,
                        const char *spec, const char *as, char *err)
{
    char *what = as ? dsl_xstrdup(as)
                    : dsl_xasprintf("%s '%s'", include ? "--include" : "--exclude", spec);
    const char *p = spec, *end = spec + strlen(spec);
    int r = 0;
    for (size_t i = 0; i < hf->nr; i++)
        sel[i].lim = include ? 0 : hf->hosts[i].slots;
    while (p <= end && r == 0) {
        const char *at = memchr(p, '@', (size_t)(end - p));
        size_t len = at ? (size_t)(at - p) : (size_t)(end - p);
        r = apply_spec(hf, sel, include, what, p, len, err);
        p += len + 1;
    }
    free(what);
    return r;
}

static int check_count(const char *opt, int v, char *err)
{
    if (v != -1 && v < 1)
        return dsl_seterr(err, DSL_EPLACEMENT, "%s must be at least 1, not %d", opt, v);
    return 0;
}

int dsl_placement_build(struct dsl_placement *pl, const struct dsl_hostfile *hf,
                        const struct dsl_placement_opts *o, char *err)
{
    int inc = o->include && *o->include, exc = o->exclude && *o->exclude;
    struct selection *sel = NULL;
    int r;

    dsl_placement_init(pl);
    /* an empty filter would select every host (or none): a script's unset variable,
       never what was meant */
    if ((o->include && !*o->include) || (o->exclude && !*o->exclude))
        return dsl_seterr(err, DSL_EPLACEMENT,
                          "%s '' is empty (name hosts and slots, e.g. 'worker-0:0,1@worker-1')",
                          o->include && !*o->include ? "--include" : "--exclude");
    if (inc && exc)
        return dsl_seterr(err, DSL_EPLACEMENT, "--include and --exclude cannot be used together");
    if ((r = check_count("--num_nodes", o->num_nodes, err)) < 0 ||
        (r = check_count("--num_gpus", o->num_gpus, err)) < 0)
        return r;
    if ((inc || exc) && (o->num_nodes != -1 || o->num_gpus != -1))
        return dsl_seterr(err, DSL_EPLACEMENT, "%s cannot be combined with %s",
                          o->num_nodes != -1 ? "--num_nodes" : "--num_gpus",
                          inc ? "--include" : "--exclude");
    if (hf->nr == 0)
        return dsl_seterr(err, DSL_EPLACEMENT, "no hosts to place ranks on");

    sel = dsl_xcalloc(hf->nr, sizeof(*sel));
    for (size_t i = 0; i < hf->nr; i++)
        sel[i].lim = hf->hosts[i].slots;
    if (inc && (r = apply_filter(hf, sel, 1, o->include, o->include_as, err)) < 0)
        goto out;
    if (exc && (r = apply_filter(hf, sel, 0, o->exclude, NULL, err)) < 0)
        goto out;
    if (o->num_nodes != -1) {
        if ((size_t)o->num_nodes > hf->nr) {
            r = dsl_seterr(err, DSL_EPLACEMENT, "--num_nodes %d but there %s only %zu host%s",
                           o->num_nodes, hf->nr == 1 ? "is" : "are", hf->nr,
                           hf->nr == 1 ? "" : "s");
            goto out;
        }
        for (size_t i = (size_t)o->num_nodes; i < hf->nr; i++)
            sel[i].lim = 0;
    }
    if (o->num_gpus != -1) {
        for (size_t i = 0; i < hf->nr; i++) {
            if (sel[i].lim == 0)
                continue;
            if (o->num_gpus > hf->hosts[i].slots) {
                r = dsl_seterr(err, DSL_EPLACEMENT, "--num_gpus %d but host '%s' has only %d "
                               "slot%s (a filter selects among a host's slots and cannot add "
                               "any: docs/placement.md)", o->num_gpus, hf->hosts[i].name,
                               hf->hosts[i].slots, hf->hosts[i].slots == 1 ? "" : "s");
                goto out;
            }
            sel[i].lim = o->num_gpus;
        }
    }

    /* read off the nodes in hostfile order */
    pl->nodes = dsl_xcalloc(hf->nr, sizeof(*pl->nodes));
    for (size_t i = 0; i < hf->nr; i++) {
        const struct dsl_host *h = &hf->hosts[i];
        int n = 0;
        for (int s = 0; s < h->slots; s++)
            n += sel_has(&sel[i], s);
        if (n == 0)
            continue;
        struct dsl_node *node = &pl->nodes[pl->nr];
        node->host = dsl_xstrdup(h->name);
        node->user = h->user ? dsl_xstrdup(h->user) : NULL;
        node->node_rank = pl->nr;
        node->slots = dsl_xcalloc((size_t)n, sizeof(int));
        for (int s = 0; s < h->slots; s++)
            if (sel_has(&sel[i], s))
                node->slots[node->nslots++] = s;
        node->first_rank = pl->world_size;
        pl->world_size += n;
        pl->nr++;
    }
    if (pl->nr == 0) {
        r = dsl_seterr(err, DSL_EPLACEMENT, "--exclude '%s' leaves no slots to run on",
                       o->exclude);
        goto out;
    }
    r = 0;
out:
    for (size_t i = 0; i < hf->nr && sel; i++)
        free(sel[i].bits);
    free(sel);
    if (r < 0)
        dsl_placement_release(pl);
    return r;
}

int dsl_placement_cuda_visible(const char *cvd, const struct dsl_placement_opts *o,
                               char **include, char *err)
{
    *include = NULL;
    if (!cvd || !*cvd)
        return 0;
    if (cvd[0] == '-' && cvd[1] >= '0' && cvd[1] <= '9')
        return 3;
    if ((o->include && *o->include) || (o->exclude && *o->exclude) || o->num_nodes != -1 ||
        o->num_gpus != -1)
        return 2;
    const char *p = cvd;
    for (;;) {
        const char *q = p;
        while (*q >= '0' && *q <= '9')
            q++;
        if (q == p || q - p > 9 || (*q && *q != ','))
            return dsl_seterr(err, DSL_EPLACEMENT,
                              DSL_ENV_CUDA_VISIBLE_DEVICES "='%s' is not a list of device numbers "
                              "(select devices with --include localhost:0,1 instead)",
                              cvd);
        if (!*q)
            break;
        p = q + 1;
    }
    *include = dsl_xasprintf("localhost:%s", cvd);
    return 1;
}

/* A JSON string as Python's json.dumps writes it (ensure_ascii: \uXXXX beyond ASCII). */
static void json_string(struct dsl_dynbuf *b, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    dsl_dynbuf_add(b, "\"", 1);
    while (*u) {
        uint32_t cp = *u;
        int extra = 0;
        if (cp >= 0x80) {
            extra = cp >= 0xf0 ? 3 : cp >= 0xe0 ? 2 : cp >= 0xc0 ? 1 : -1;
            cp &= extra == 3 ? 0x07u : extra == 2 ? 0x0fu : 0x1fu;
            for (int k = 1; extra > 0 && k <= extra; k++) {
                if ((u[k] & 0xc0) != 0x80) {
                    extra = -1;
                    break;
                }
                cp = (cp << 6) | (u[k] & 0x3fu);
            }
            if (extra < 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
                cp = 0xfffd; /* invalid UTF-8: one replacement character per byte */
                extra = 0;
            }
        }
        u += 1 + extra;
        switch (cp) {
        case '"': dsl_dynbuf_addstr(b, "\\\""); continue;
        case '\\': dsl_dynbuf_addstr(b, "\\\\"); continue;
        case '\n': dsl_dynbuf_addstr(b, "\\n"); continue;
        case '\r': dsl_dynbuf_addstr(b, "\\r"); continue;
        case '\t': dsl_dynbuf_addstr(b, "\\t"); continue;
        case '\b': dsl_dynbuf_addstr(b, "\\b"); continue;
        case '\f': dsl_dynbuf_addstr(b, "\\f"); continue;
        default: break;
        }
        if (cp < 0x20 || (cp >= 0x7f && cp < 0x10000)) {
            dsl_dynbuf_addf(b, "\\u%04x", (unsigned)cp);
        } else if (cp >= 0x10000) {
            cp -= 0x10000;
            dsl_dynbuf_addf(b, "\\u%04x\\u%04x", 0xd800u + (cp >> 10), 0xdc00u + (cp & 0x3ffu));
        } else {
            char c = (char)cp;
            dsl_dynbuf_add(b, &c, 1);
        }
    }
    dsl_dynbuf_add(b, "\"", 1);
}

char *dsl_placement_world_info_json(const struct dsl_placement *pl)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, SIZE_MAX / 2);
    dsl_dynbuf_add(&b, "{", 1);
    for (int i = 0; i < pl->nr; i++) {
        if (i)
            dsl_dynbuf_addstr(&b, ", ");
        json_string(&b, pl->nodes[i].host);
        dsl_dynbuf_addstr(&b, ": [");
        for (int s = 0; s < pl->nodes[i].nslots; s++)
            dsl_dynbuf_addf(&b, "%s%d", s ? ", " : "", pl->nodes[i].slots[s]);
        dsl_dynbuf_add(&b, "]", 1);
    }
    dsl_dynbuf_add(&b, "}", 1);
    char *out = dsl_xstrdup(dsl_dynbuf_str(&b));
    dsl_dynbuf_release(&b);
    return out;
}

char *dsl_base64url(const void *data, size_t n)
{
    static const char abc[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const unsigned char *d = data;
    char *out = dsl_xmalloc((n + 2) / 3 * 4 + 1), *o = out;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)d[i + 1] << 8;
        if (i + 2 < n)
            v |= d[i + 2];
        *o++ = abc[(v >> 18) & 63];
        *o++ = abc[(v >> 12) & 63];
        *o++ = i + 1 < n ? abc[(v >> 6) & 63] : '=';
        *o++ = i + 2 < n ? abc[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

char *dsl_placement_world_info_b64(const struct dsl_placement *pl)
{
    char *json = dsl_placement_world_info_json(pl);
    char *out = dsl_base64url(json, strlen(json));
    free(json);
    return out;
}

/* GPUs the NVIDIA driver knows: one directory per GPU under /proc/driver/nvidia/gpus. */
static int nvidia_gpu_count(void)
{
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    int n = 0;
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

int dsl_local_slots(int *slots, int cpus_only, char *err)
{
    const char *env = getenv("DSLAUNCH_LOCAL_SLOTS");
    if (env) {
        int r = dsl_parse_int(env, 1, DSL_HOSTFILE_MAX_SLOTS, slots);
        if (r == -ERANGE)
            return dsl_seterr(err, DSL_EUSAGE,
                              "DSLAUNCH_LOCAL_SLOTS out of range: allowed 1..%d, got '%s'",
                              DSL_HOSTFILE_MAX_SLOTS, env);
        if (r < 0)
            return dsl_seterr(err, DSL_EUSAGE,
                              "DSLAUNCH_LOCAL_SLOTS='%s' is not a slot count (1 to %d)", env,
                              DSL_HOSTFILE_MAX_SLOTS);
        return 0;
    }
    int n = cpus_only ? 0 : nvidia_gpu_count();
    if (n <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        n = cpus < 1 ? 1 : cpus > DSL_HOSTFILE_MAX_SLOTS ? DSL_HOSTFILE_MAX_SLOTS : (int)cpus;
    }
    *slots = n;
    return 0;
}

int dsl_local_slots_for(int want, const char *flag, int oversubscribe, int cpus_only,
                        int *slots, char *err)
{
    int found, r;
    if ((r = dsl_local_slots(&found, cpus_only, err)) < 0)
        return r;
    if (want < 1 || want <= found) {
        *slots = found;
        return 0;
    }
    const char *set = getenv("DSLAUNCH_LOCAL_SLOTS");
    int gpus = !set && !cpus_only ? nvidia_gpu_count() : 0;
    if (gpus > 0)
        return dsl_seterr(err, DSL_EUSAGE, "%s asks for %d ranks on this node, but it has %d "
                          "GPU%s, and a rank per GPU is the most (a rank beyond would get a "
                          "device that is not there): ask for at most %d; for CPU ranks, hide "
                          "the GPUs with CUDA_VISIBLE_DEVICES=-1 and add --oversubscribe", flag,
                          want, gpus, gpus == 1 ? "" : "s", gpus);
    if (!oversubscribe)
        return dsl_seterr(err, DSL_EUSAGE, "%s asks for %d ranks on this node, but it has %d "
                          "%s: add --oversubscribe to run more ranks than that (they share "
                          "the CPUs), or ask for at most %d (docs/placement.md)", flag, want,
                          found, set ? "slots (DSLAUNCH_LOCAL_SLOTS)"
                                     : found == 1 ? "CPU" : "CPUs", found);
    *slots = want;
    return 0;
}
