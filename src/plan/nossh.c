/*
 * No-ssh mode's settings (nossh.h): options, then the scheduler's variables, then
 * defaults, each value remembering its source. Pure apart from reading the secret file
 * and, for the slots, the local devices; nothing is connected here.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/plan/hostfile.h"
#include "dslaunch/plan/nossh.h"
#include "dslaunch/plan/placement.h"
#include "dslaunch/common/banned.h"

#define SECRET_MAX 4096

/* memset that the compiler may not drop (no libcrypto in this library) */
static void wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--)
        *v++ = 0;
}

void dsl_nossh_init(struct dsl_nossh *ns)
{
    memset(ns, 0, sizeof(*ns));
}

void dsl_nossh_release(struct dsl_nossh *ns)
{
    free(ns->master_addr);
    if (ns->secret) {
        wipe(ns->secret, ns->secret_len);
        free(ns->secret);
    }
    dsl_nossh_init(ns);
}

static const char *env_get(char *const *env, const char *name)
{
    size_t n = strlen(name);
    for (; env && *env; env++)
        if (!strncmp(*env, name, n) && (*env)[n] == '=')
            return *env + n + 1;
    return NULL;
}

/* An env value as an int in lo..hi; "N:N" too for PET_NNODES (torchrun's min:max). */
static int env_int(const char *name, const char *v, int lo, int hi, int range_ok, int *out,
                   char *err)
{
    const char *colon = range_ok ? strchr(v, ':') : NULL;
    int a, b;
    if (colon) {
        char *first = dsl_xstrndup(v, (size_t)(colon - v));
        int r1 = dsl_parse_int(first, lo, hi, &a), r2 = dsl_parse_int(colon + 1, lo, hi, &b);
        free(first);
        if (r1 < 0 || r2 < 0)
            return dsl_seterr(err, DSL_EUSAGE, "%s='%s' is not a node count", name, v);
        if (a != b)
            return dsl_seterr(err, DSL_EUSAGE, "%s='%s' is an elastic range; no-ssh mode "
                              "needs a fixed node count (min = max)", name, v);
        *out = a;
        return 0;
    }
    if (dsl_parse_int(v, lo, hi, out) < 0)
        return dsl_seterr(err, DSL_EUSAGE, "%s='%s' is not an integer from %d to %d", name, v,
                          lo, hi);
    return 0;
}

static int read_secret(struct dsl_nossh *ns, const char *path, char *err)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, SECRET_MAX);
    int r = dsl_dynbuf_load_file(&b, path);
    if (r < 0) {
        dsl_dynbuf_release(&b);
        return dsl_seterr(err, DSL_EUSAGE, "--job_secret_file '%s': %s", path,
                          r == -ENOBUFS || r == -EFBIG ? "larger than 4 KiB" : dsl_strerror(r));
    }
    size_t n = b.len;
    while (n && (b.buf[n - 1] == '\n' || b.buf[n - 1] == '\r'))
        n--; /* `echo secret >file` and Kubernetes secrets both end so, or not */
    ns->secret = dsl_xmalloc(n + 1);
    memcpy(ns->secret, b.buf, n);
    ns->secret_len = n;
    wipe(b.buf, b.len);
    dsl_dynbuf_release(&b);
    snprintf(ns->from_secret, sizeof(ns->from_secret), "--job_secret_file '%.200s'", path);
    return 0;
}

int dsl_nossh_resolve(struct dsl_nossh *ns, const struct dsl_launch_opts *o, char *const *env,
                      char *err)
{
    dsl_nossh_release(ns);
    const char *pet_nnodes = env_get(env, "PET_NNODES");
    int explicit = o->no_ssh || o->node_rank >= 0 || o->nnodes > 0;
    if (!explicit && !(pet_nnodes && pet_nnodes[0] && !o->hostfile &&
                       o->launcher == DSL_LAUNCHER_AUTO))
        return 0;
    ns->on = 1;
    if (o->hostfile)
        return dsl_seterr(err, DSL_EUSAGE, "no-ssh mode (--no_ssh, --node_rank, --nnodes) "
                          "takes its nodes from the nodes that dial in: leave out --hostfile");
    if (o->launcher != DSL_LAUNCHER_AUTO)
        return dsl_seterr(err, DSL_EUSAGE, "no-ssh mode starts no agents: leave out "
                          "--launcher (every node runs dslaunch itself)");
    if (o->include || o->exclude || o->num_nodes > 0)
        return dsl_seterr(err, DSL_EUSAGE, "--include, --exclude and --num_nodes choose among "
                          "a hostfile's hosts; in no-ssh mode every node that runs dslaunch "
                          "is in the job (use --nproc_per_node or --num_gpus per node)");
    int r;
    /* nodes */
    if (o->nnodes > 0) {
        ns->nnodes = o->nnodes;
        snprintf(ns->from_nnodes, sizeof(ns->from_nnodes), "--nnodes");
    } else if (pet_nnodes && pet_nnodes[0]) {
        if ((r = env_int("PET_NNODES", pet_nnodes, 1, 1 << 20, 1, &ns->nnodes, err)) < 0)
            return r;
        snprintf(ns->from_nnodes, sizeof(ns->from_nnodes), "PET_NNODES");
    } else {
        return dsl_seterr(err, DSL_EUSAGE, "no-ssh mode needs the number of nodes: --nnodes N "
                          "(or PET_NNODES)");
    }
    /* this node's rank */
    static const char *const rank_vars[] = {"PET_NODE_RANK", "JOB_COMPLETION_INDEX"};
    if (o->node_rank >= 0) {
        ns->node_rank = o->node_rank;
        snprintf(ns->from_node_rank, sizeof(ns->from_node_rank), "--node_rank");
    } else {
        ns->node_rank = -1;
        for (size_t i = 0; i < 2 && ns->node_rank < 0; i++) {
            const char *v = env_get(env, rank_vars[i]);
            if (!v || !v[0])
                continue;
            if ((r = env_int(rank_vars[i], v, 0, (1 << 20) - 1, 0, &ns->node_rank, err)) < 0)
                return r;
            snprintf(ns->from_node_rank, sizeof(ns->from_node_rank), "%s", rank_vars[i]);
        }
        if (ns->node_rank < 0 && ns->nnodes == 1) {
            /* torchrun's one-node habit (`--nnodes 1 --nproc_per_node N`): the only node
             * is node 0, as torchrun itself assumes */
            ns->node_rank = 0;
            snprintf(ns->from_node_rank, sizeof(ns->from_node_rank), "the only node");
        }
        if (ns->node_rank < 0)
            return dsl_seterr(err, DSL_EUSAGE, "no-ssh mode needs this node's rank: --node_rank "
                              "K (or PET_NODE_RANK, or JOB_COMPLETION_INDEX of an indexed Job)");
    }
    if (ns->node_rank >= ns->nnodes)
        return dsl_seterr(err, DSL_EUSAGE, "node rank %d (from %s) is not below the node count "
                          "%d (from %s)", ns->node_rank, ns->from_node_rank, ns->nnodes,
                          ns->from_nnodes);
    /* the coordinator */
    const char *pet_addr = env_get(env, "PET_MASTER_ADDR");
    if (o->master_addr) {
        ns->master_addr = dsl_xstrdup(o->master_addr);
        snprintf(ns->from_master_addr, sizeof(ns->from_master_addr), "--master_addr");
    } else if (pet_addr && pet_addr[0]) {
        ns->master_addr = dsl_xstrdup(pet_addr);
        snprintf(ns->from_master_addr, sizeof(ns->from_master_addr), "PET_MASTER_ADDR");
    } else if (ns->node_rank > 0) {
        return dsl_seterr(err, DSL_EUSAGE, "node rank %d needs node 0's address: --master_addr "
                          "ADDR (or PET_MASTER_ADDR)", ns->node_rank);
    } else {
        snprintf(ns->from_master_addr, sizeof(ns->from_master_addr), "chosen by the probe");
    }
    /* every node dials it (and dialled a word like 'bad host!' until --join_timeout);
     * the coordinator listens on IPv4 only (common/net.c), so an IPv6 literal could
     * never be reached: name both now */
    if (ns->master_addr && strchr(ns->master_addr, ':'))
        return dsl_seterr(err, DSL_EUSAGE, "%s '%.80s': no-ssh mode reaches node 0 over IPv4 "
                          "only; give node 0's IPv4 address or a name that resolves to one",
                          ns->from_master_addr, ns->master_addr);
    if (ns->master_addr && !dsl_host_name_valid(ns->master_addr))
        return dsl_seterr(err, DSL_EUSAGE, "%s '%.80s' is not a host name or IPv4 address "
                          "(letters, digits, '.', '-' and '_')", ns->from_master_addr,
                          ns->master_addr);
    const char *pet_port = env_get(env, "PET_MASTER_PORT");
    if (o->master_port_given) {
        ns->master_port = o->master_port;
        snprintf(ns->from_master_port, sizeof(ns->from_master_port), "--master_port");
    } else if (pet_port && pet_port[0]) {
        if ((r = env_int("PET_MASTER_PORT", pet_port, 1, 65535, 0, &ns->master_port, err)) < 0)
            return r;
        snprintf(ns->from_master_port, sizeof(ns->from_master_port), "PET_MASTER_PORT");
    } else {
        ns->master_port = o->master_port;
        snprintf(ns->from_master_port, sizeof(ns->from_master_port), "default");
    }
    if (o->control_port > 0) {
        ns->control_port = o->control_port;
        snprintf(ns->from_control_port, sizeof(ns->from_control_port), "--control_port");
    } else {
        ns->control_port = ns->master_port < 65535 ? ns->master_port + 1 : ns->master_port - 1;
        snprintf(ns->from_control_port, sizeof(ns->from_control_port), "master port %s 1",
                 ns->master_port < 65535 ? "+" : "-");
    }
    if (ns->control_port == ns->master_port)
        return dsl_seterr(err, DSL_EUSAGE, "--control_port %d is the master port: the "
                          "coordinator's control channel needs a port of its own",
                          ns->control_port);
    /* the shared secret: not needed by a job of one node */
    if (ns->nnodes > 1) {
        const char *sv = env_get(env, DSL_ENV_JOB_SECRET);
        if (o->job_secret_file) {
            if ((r = read_secret(ns, o->job_secret_file, err)) < 0)
                return r;
        } else if (sv && sv[0]) {
            ns->secret_len = strlen(sv);
            ns->secret = (unsigned char *)dsl_xstrdup(sv);
            snprintf(ns->from_secret, sizeof(ns->from_secret), DSL_ENV_JOB_SECRET);
        } else {
            return dsl_seterr(err, DSL_EUSAGE, "no-ssh mode needs the job's shared secret, the "
                              "same on every node: --job_secret_file FILE or "
                              DSL_ENV_JOB_SECRET " (e.g. from a Kubernetes Secret); nodes "
                              "are never accepted without it");
        }
        if (ns->secret_len < DSL_NOSSH_SECRET_MIN)
            return dsl_seterr(err, DSL_EUSAGE, "the job secret from %s is %zu bytes; it needs "
                              "at least %d (e.g. `openssl rand -hex 32`)", ns->from_secret,
                              ns->secret_len, DSL_NOSSH_SECRET_MIN);
    } else {
        snprintf(ns->from_secret, sizeof(ns->from_secret), "not needed (one node)");
    }
    return 0;
}

int dsl_nossh_resolve_slots(struct dsl_nossh *ns, const struct dsl_launch_opts *o, char *err)
{
    if (o->nproc_per_node > 0) {
        ns->slots = o->nproc_per_node;
        snprintf(ns->from_slots, sizeof(ns->from_slots), "--nproc_per_node");
        return 0;
    }
    if (o->num_gpus > 0) {
        ns->slots = o->num_gpus;
        snprintf(ns->from_slots, sizeof(ns->from_slots), "--num_gpus");
        return 0;
    }
    int r = dsl_local_slots(&ns->slots, 0, err);
    if (r < 0)
        return r;
    snprintf(ns->from_slots, sizeof(ns->from_slots), "this node's devices (or CPUs)");
    return 0;
}
