/*
 * The rank environment of other launchers (srun, mpirun, PMIx), turned into dslaunch's
 * env contract at the start of a worker's main(), so that everything below (the comm,
 * the trainer's device and thread choice) reads one set of names.
 *
 * Theory of operation. Nothing runs concurrently: dsl_rankenv_adopt() is called once,
 * before any thread, and only calls setenv(). It first decides the source: RANK set
 * means dslaunch (or torchrun, or a user by hand) and nothing is touched. Else Open MPI
 * (OMPI_COMM_WORLD_*), then an srun step (SLURM_PROCID and SLURM_STEP_NUM_TASKS; a
 * batch script has SLURM_PROCID=0 and SLURM_NTASKS but no step variables, and a
 * dstrain started there directly must run alone, not wait for three ranks that never
 * come), then bare PMIx (PMIX_RANK). It reads every value it needs and checks it
 * before it sets anything, so a failure leaves the environment as it was.
 *
 * The rendezvous address: MASTER_ADDR when the user set it (srun passes the caller's
 * environment on; mpirun needs -x MASTER_ADDR). Otherwise under srun the first host of
 * the step (SLURM_STEP_NODELIST, which is where task 0 runs: srun places tasks on the
 * step's nodes in list order), and under mpirun 127.0.0.1 when every rank is on this
 * node (OMPI_COMM_WORLD_LOCAL_SIZE equals the world size); a multi-node mpirun without
 * MASTER_ADDR is an error, because no rank can know rank 0's address from Open MPI's
 * environment alone. MASTER_PORT defaults to 29500, under srun shifted by the job and
 * step id so that two steps sharing a first node do not collide.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/hostrange.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/rankenv.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define RANKS_MAX (1 << 20) /* the comm's own limit on WORLD_SIZE */
#define TPN_LEN_MAX 65536

/* ---- Slurm's tasks-per-node lists: "2(x3),1" ---- */

/*
 * One pass over the whole list (every item is checked, also after the wanted node):
 * counts the nodes and, when want_node is one of them, records its task count.
 */
struct tpn_walk {
    int want_node; /* -1: count nodes */
    int nodes;     /* nodes seen so far */
    int tasks;     /* the answer for want_node */
    int found;
    int *all;      /* or every node's answer, into all[0..nall) */
    int nall;
};

/* Returns 0, or -EINVAL with err naming the list and the bad item. */
static int tpn_parse(const char *list, struct tpn_walk *w, char *err)
{
    size_t n = strlen(list), i = 0;
    if (n == 0 || n > TPN_LEN_MAX)
        return dsl_seterr(err, -EINVAL, "bad tasks-per-node list '%.60s': %s", list,
                          n ? "too long" : "empty");
    while (i <= n) {
        size_t end = i;
        while (end < n && list[end] != ',')
            end++;
        /* item: DIGITS or DIGITS(xDIGITS) */
        char num[16], rep[16];
        size_t d = 0, k = i;
        while (k < end && list[k] >= '0' && list[k] <= '9' && d < sizeof(num) - 1)
            num[d++] = list[k++];
        num[d] = '\0';
        int tasks, times = 1;
        if (d == 0 || dsl_parse_int(num, 0, RANKS_MAX, &tasks) < 0)
            goto bad;
        if (k < end) {
            size_t e = 0;
            if (end - k < 4 || list[k] != '(' || list[k + 1] != 'x' || list[end - 1] != ')')
                goto bad;
            for (k += 2; k < end - 1 && e < sizeof(rep) - 1; k++)
                rep[e++] = list[k];
            rep[e] = '\0';
            if (k != end - 1 || e == 0 || strspn(rep, "0123456789") != e ||
                dsl_parse_int(rep, 1, RANKS_MAX, &times) < 0)
                goto bad;
        }
        if (w->nodes > RANKS_MAX - times)
            return dsl_seterr(err, -EINVAL, "bad tasks-per-node list '%.60s': more than %d nodes",
                              list, RANKS_MAX);
        if (!w->found && w->want_node >= w->nodes && w->want_node < w->nodes + times) {
            w->tasks = tasks;
            w->found = 1;
        }
        for (int t = 0; w->all && t < times && w->nodes + t < w->nall; t++)
            w->all[w->nodes + t] = tasks;
        w->nodes += times;
        i = end + 1;
        continue;
    bad:
        return dsl_seterr(err, -EINVAL, "bad tasks-per-node list '%.60s': bad item '%.*s' "
                          "(expected N or N(xK))", list, (int)(end - i > 40 ? 40 : end - i),
                          list + i);
    }
    return 0;
}

int dsl_rankenv_tasks_on_node(const char *list, int node, int *tasks, char *err)
{
    struct tpn_walk w = {.want_node = node};
    int r = tpn_parse(list, &w, err);
    if (r < 0)
        return r;
    if (node < 0 || !w.found)
        return dsl_seterr(err, -EINVAL, "tasks-per-node list '%.60s' has %d nodes, not node %d",
                          list, w.nodes, node);
    *tasks = w.tasks;
    return 0;
}

int dsl_rankenv_tasks_all(const char *list, int *tasks, int n, char *err)
{
    struct tpn_walk w = {.want_node = -1, .all = tasks, .nall = n};
    int r = tpn_parse(list, &w, err);
    if (r < 0)
        return r;
    if (w.nodes != n)
        return dsl_seterr(err, -EINVAL, "tasks-per-node list '%.60s' has %d nodes, not %d",
                          list, w.nodes, n);
    return 0;
}

int dsl_rankenv_tasks_nodes(const char *list, int *nodes, char *err)
{
    struct tpn_walk w = {.want_node = -1};
    int r = tpn_parse(list, &w, err);
    if (r < 0)
        return r;
    *nodes = w.nodes;
    return 0;
}

/* ---- adopting ---- */

/* What will be set; strings are owned (NULL: leave alone). */
struct adopt {
    const char *source;
    char *rank, *world, *local_rank, *local_world, *node_rank, *nnodes;
    char *addr, *port, *run_id;
};

static void adopt_release(struct adopt *a)
{
    free(a->rank);
    free(a->world);
    free(a->local_rank);
    free(a->local_world);
    free(a->node_rank);
    free(a->nnodes);
    free(a->addr);
    free(a->port);
    free(a->run_id);
}

static const char *env(const char *name)
{
    const char *s = getenv(name);
    return s && *s ? s : NULL;
}

/* A required integer variable of the foreign launcher into *out (and its text). */
static int need_int(const char *name, int min, int max, int *out, char **text,
                    const char *who, char *err)
{
    const char *s = env(name);
    if (!s)
        return dsl_seterr(err, DSL_EUSAGE, "started by %s but %s is not set", who, name);
    if (dsl_parse_int(s, min, max, out) < 0)
        return dsl_seterr(err, DSL_EUSAGE, "bad %s '%.40s' (expected %d..%d)", name, s, min,
                          max);
    if (text)
        *text = dsl_xasprintf("%d", *out);
    return 0;
}

static int from_slurm(struct adopt *a, char *err)
{
    int rank, world, local, node, nnodes = 1, local_world = 0, r;
    const char *who = "srun";
    if ((r = need_int("SLURM_STEP_NUM_TASKS", 1, RANKS_MAX, &world, &a->world, who, err)) < 0 ||
        (r = need_int("SLURM_PROCID", 0, world - 1, &rank, &a->rank, who, err)) < 0 ||
        (r = need_int("SLURM_LOCALID", 0, world - 1, &local, &a->local_rank, who, err)) < 0)
        return r;
    const char *nn = env("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES"
                     : env("SLURM_NNODES")         ? "SLURM_NNODES"
                                                   : NULL;
    if (nn && (r = need_int(nn, 1, RANKS_MAX, &nnodes, &a->nnodes, who, err)) < 0)
        return r;
    if ((r = need_int("SLURM_NODEID", 0, nn ? nnodes - 1 : RANKS_MAX, &node, &a->node_rank,
                      who, err)) < 0)
        return r;
    const char *tpn = env("SLURM_STEP_TASKS_PER_NODE");
    if (tpn) {
        char e[DSL_ERR_LEN];
        if ((r = dsl_rankenv_tasks_on_node(tpn, node, &local_world, e)) < 0)
            return dsl_seterr(err, DSL_EUSAGE, "SLURM_STEP_TASKS_PER_NODE: %s", e);
        if (local >= local_world)
            return dsl_seterr(err, DSL_EUSAGE, "SLURM_LOCALID %d is not below the %d task(s) "
                              "SLURM_STEP_TASKS_PER_NODE '%.60s' gives node %d", local,
                              local_world, tpn, node);
        a->local_world = dsl_xasprintf("%d", local_world);
    }
    if (!env(DSL_ENV_MASTER_ADDR)) {
        static const char *const lists[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                            "SLURM_NODELIST"};
        const char *list = NULL, *lname = NULL, *dist = env("SLURM_DISTRIBUTION");
        for (size_t i = 0; !list && i < sizeof(lists) / sizeof(lists[0]); i++)
            if ((list = env(lists[i])))
                lname = lists[i];
        if (!list)
            return dsl_seterr(err, DSL_EUSAGE, "started by srun without MASTER_ADDR, and "
                              "SLURM_STEP_NODELIST is not set to take the first host from");
        /* block, cyclic and plane put task 0 on the step's first node; arbitrary
         * (SLURM_HOSTFILE) may put it anywhere */
        if (dist && !strncmp(dist, "arbitrary", 9))
            return dsl_seterr(err, DSL_EUSAGE, "started by srun with the arbitrary "
                              "distribution, where task 0 need not run on the first node of "
                              "%s: set MASTER_ADDR to task 0's node", lname);
        struct dsl_strvec hosts;
        char e[DSL_ERR_LEN];
        dsl_strvec_init(&hosts);
        if ((r = dsl_hostlist_expand(list, &hosts, e)) < 0)
            return dsl_seterr(err, DSL_EUSAGE, "%s: %s", lname, e);
        a->addr = dsl_xstrdup(hosts.v[0]);
        dsl_strvec_release(&hosts);
    }
    int job = 0, step = 0;
    const char *js = env("SLURM_JOB_ID"), *ss = env("SLURM_STEP_ID");
    if (js && dsl_parse_int(js, 0, 0x7fffffff, &job) < 0)
        return dsl_seterr(err, DSL_EUSAGE, "bad SLURM_JOB_ID '%.40s'", js);
    if (ss && dsl_parse_int(ss, 0, 0x7fffffff, &step) < 0)
        step = 0; /* special steps (batch, extern) have names; only the shift uses it */
    if (!env(DSL_ENV_MASTER_PORT))
        a->port = dsl_xasprintf(
            "%ld", DSL_RANKENV_DEFAULT_PORT +
                       ((long)job * 8 + step) % DSL_RANKENV_SLURM_PORTS);
    if (!env(DSL_ENV_RUN_ID) && js)
        a->run_id = dsl_xasprintf("slurm-%d.%d", job, step);
    a->source = who;
    return 0;
}

/* Open MPI, or bare PMIx (pmix = 1): rank, size, local rank and size. */
static int from_mpi(struct adopt *a, int pmix, char *err)
{
    int rank, world, local = 0, local_world = 0, r;
    const char *who = pmix ? "a PMIx launcher" : "mpirun";
    if (pmix) {
        if (!env(DSL_ENV_WORLD_SIZE) && !env("OMPI_COMM_WORLD_SIZE"))
            return dsl_seterr(err, DSL_EUSAGE, "started by a PMIx launcher (PMIX_RANK is "
                              "set) that gives no world size: set WORLD_SIZE");
        const char *wname = env(DSL_ENV_WORLD_SIZE) ? DSL_ENV_WORLD_SIZE : "OMPI_COMM_WORLD_SIZE";
        if ((r = need_int(wname, 1, RANKS_MAX, &world, &a->world, who, err)) < 0 ||
            (r = need_int("PMIX_RANK", 0, world - 1, &rank, &a->rank, who, err)) < 0)
            return r;
    } else if ((r = need_int("OMPI_COMM_WORLD_SIZE", 1, RANKS_MAX, &world, &a->world, who,
                             err)) < 0 ||
               (r = need_int("OMPI_COMM_WORLD_RANK", 0, world - 1, &rank, &a->rank, who,
                             err)) < 0) {
        return r;
    }
    if (env("OMPI_COMM_WORLD_LOCAL_SIZE") &&
        (r = need_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, world, &local_world, &a->local_world,
                      who, err)) < 0)
        return r;
    if (env("OMPI_COMM_WORLD_LOCAL_RANK") &&
        (r = need_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, local_world ? local_world - 1 : world - 1,
                      &local, &a->local_rank, who, err)) < 0)
        return r;
    if (!env(DSL_ENV_MASTER_ADDR)) {
        if (world > 1 && local_world != world)
            return dsl_seterr(err, DSL_EUSAGE,
                              "started by %s on several nodes (or an unknown number) without "
                              "MASTER_ADDR: set it to an address of rank 0's node that every "
                              "node reaches (mpirun -x MASTER_ADDR=...)", who);
        a->addr = dsl_xstrdup("127.0.0.1");
    }
    if (!env(DSL_ENV_MASTER_PORT))
        a->port = dsl_xasprintf("%d", DSL_RANKENV_DEFAULT_PORT);
    const char *ns = env("PMIX_NAMESPACE");
    if (!env(DSL_ENV_RUN_ID) && ns)
        a->run_id = dsl_xasprintf("mpi-%.60s", ns);
    a->source = pmix ? "pmix" : "mpirun";
    return 0;
}

/* ---- the contract as one struct ---- */

enum { K_INT, K_STR };
enum {
    C_STRICT = 1,   /* out of range is an error, not the default */
    C_RANK_HI = 2,  /* the range ends at WORLD_SIZE - 1 */
    C_PER_RANK = 4, /* written per rank, not per node */
    C_FACT = 8,     /* a node fact: loaded, never exported */
    C_ALIASES = 16, /* read: the first of the names that is set */
};

/* One member: the names it is written under (the first is its own, the others aliases
   written beside it), its place in the struct, its range and default. Loaded in this
   order (WORLD_SIZE before RANK), exported in this order. */
struct contract_row {
    const char *names[4];
    int kind;
    size_t off, text_off; /* text_off: where the text as found goes (0: nowhere) */
    int lo, hi, def;
    unsigned flags;
};

#define E(f) offsetof(struct dsl_rankenv, f)
static const struct contract_row contract[] = {
    {{DSL_ENV_MASTER_ADDR}, K_STR, E(master_addr), 0, 0, 0, 0, 0},
    {{DSL_ENV_MASTER_PORT}, K_INT, E(master_port), E(master_port_text), 1, 65535, 0, 0},
    {{DSL_ENV_WORLD_SIZE}, K_INT, E(world_size), 0, 1, RANKS_MAX, 1, C_STRICT},
    {{DSL_ENV_LOCAL_WORLD_SIZE, DSL_ENV_LOCAL_SIZE}, K_INT, E(local_world_size), 0, 1,
     RANKS_MAX, 1, 0},
    {{DSL_ENV_NODE_RANK, DSL_ENV_GROUP_RANK, DSL_ENV_CROSS_RANK}, K_INT, E(node_rank), 0, 0,
     RANKS_MAX, 0, 0},
    {{DSL_ENV_NNODES, DSL_ENV_CROSS_SIZE}, K_INT, E(nnodes), 0, 1, RANKS_MAX, 1, 0},
    {{DSL_ENV_CUDA_VISIBLE_DEVICES}, K_STR, E(cuda_visible_devices), 0, 0, 0, 0, 0},
    {{DSL_ENV_RUN_ID}, K_STR, E(run_id), 0, 0, 0, 0, 0},
    {{DSL_ENV_RUN_TOKEN}, K_STR, E(run_token), 0, 0, 0, 0, 0},
    {{DSL_ENV_RESTART_COUNT, DSL_ENV_TE_RESTART_COUNT}, K_INT, E(restart_count), 0, 0,
     1 << 30, 0, C_ALIASES},
    {{DSL_ENV_TE_MAX_RESTARTS}, K_INT, E(max_restarts), 0, 0, 1 << 30, 0, 0},
    {{DSL_ENV_RANK}, K_INT, E(rank), 0, 0, RANKS_MAX, 0, C_STRICT | C_RANK_HI | C_PER_RANK},
    {{DSL_ENV_LOCAL_RANK}, K_INT, E(local_rank), 0, 0, RANKS_MAX, 0, C_PER_RANK},
    {{DSL_ENV_OMP_NUM_THREADS}, K_INT, E(omp_threads), 0, 1, 4096, 0, C_FACT},
    {{DSL_ENV_STORE_FD}, K_INT, E(store_fd), E(store_fd_text), 3, 1 << 20, 0, C_FACT},
};
#define NCONTRACT (sizeof(contract) / sizeof(contract[0]))

#define FIELD(e, off, type) ((type *)(void *)((char *)(e) + (off)))
#define CFIELD(e, off, type) ((const type *)(const void *)((const char *)(e) + (off)))

int dsl_rankenv_load(struct dsl_rankenv *e, char *err)
{
    struct dsl_rankenv got = {0};
    for (size_t i = 0; i < NCONTRACT; i++) {
        const struct contract_row *c = &contract[i];
        const char *s = getenv(c->names[0]);
        for (int k = 1; !s && (c->flags & C_ALIASES) && k < 4 && c->names[k]; k++)
            s = getenv(c->names[k]);
        if (c->text_off)
            *FIELD(&got, c->text_off, const char *) = s;
        if (c->kind == K_STR) {
            *FIELD(&got, c->off, const char *) = s;
            continue;
        }
        int hi = (c->flags & C_RANK_HI) ? got.world_size - 1 : c->hi, v = c->def;
        if (s && *s && dsl_parse_int(s, c->lo, hi, &v) < 0) {
            if (c->flags & C_STRICT)
                return dsl_seterr(err, DSL_EUSAGE, "bad %s: allowed %d..%d, got '%s'",
                                  c->names[0], c->lo, hi, s);
            v = c->def;
        }
        *FIELD(&got, c->off, int) = v;
    }
    *e = got;
    return 0;
}

void dsl_rankenv_export(const struct dsl_rankenv *e, unsigned parts, struct dsl_strvec *env)
{
    for (size_t i = 0; i < NCONTRACT; i++) {
        const struct contract_row *c = &contract[i];
        unsigned part = (c->flags & C_PER_RANK) ? DSL_RANKENV_RANK : DSL_RANKENV_NODE;
        if ((c->flags & C_FACT) || !(parts & part))
            continue;
        const char *s = c->kind == K_STR ? *CFIELD(e, c->off, char *) : NULL;
        if (c->kind == K_STR && !s)
            continue;
        for (int k = 0; k < 4 && c->names[k]; k++) {
            if (c->kind == K_STR)
                dsl_strvec_pushf(env, "%s=%s", c->names[k], s);
            else
                dsl_strvec_pushf(env, "%s=%d", c->names[k], *CFIELD(e, c->off, int));
        }
    }
}

int dsl_rankenv_omp_share(long cpus, int local_ranks)
{
    long t = (cpus > 0 ? cpus : 1) / (local_ranks > 0 ? local_ranks : 1);
    return t < 1 ? 1 : t > 1 << 20 ? 1 << 20 : (int)t;
}

/* Set a member of the contract under its name and every alias (value NULL: not at all). */
static void set(const char *name, const char *value)
{
    for (size_t i = 0; value && i < NCONTRACT; i++)
        for (int k = 0; !strcmp(contract[i].names[0], name) && k < 4 && contract[i].names[k]; k++)
            if (setenv(contract[i].names[k], value, 1) != 0)
                DSL_BUG("setenv failed (out of memory)"); /* names are valid: only ENOMEM */
}

int dsl_rankenv_adopt(const char **source, char *err)
{
    struct adopt a = {0};
    int r = 0;
    *source = NULL;
    if (env(DSL_ENV_RANK))
        return 0;
    if (env("OMPI_COMM_WORLD_RANK"))
        r = from_mpi(&a, 0, err);
    else if (env("SLURM_PROCID") && env("SLURM_STEP_NUM_TASKS"))
        r = from_slurm(&a, err);
    else if (env("PMIX_RANK"))
        r = from_mpi(&a, 1, err);
    else
        return 0;
    if (r < 0)
        goto out;
    /* a WORLD_SIZE of the user's that disagrees is a mistake, not a preference */
    const char *ws = env(DSL_ENV_WORLD_SIZE);
    if (ws && strcmp(ws, a.world) != 0) {
        r = dsl_seterr(err, DSL_EUSAGE, "WORLD_SIZE is %.20s but %s started %s ranks", ws,
                       a.source, a.world);
        goto out;
    }
    set(DSL_ENV_RANK, a.rank);
    set(DSL_ENV_WORLD_SIZE, a.world);
    set(DSL_ENV_LOCAL_RANK, a.local_rank);
    set(DSL_ENV_LOCAL_WORLD_SIZE, a.local_world);
    set(DSL_ENV_NODE_RANK, a.node_rank);
    set(DSL_ENV_NNODES, a.nnodes);
    set(DSL_ENV_MASTER_ADDR, a.addr);
    set(DSL_ENV_MASTER_PORT, a.port);
    set(DSL_ENV_RUN_ID, a.run_id);
    *source = a.source;
out:
    adopt_release(&a);
    return r;
}

