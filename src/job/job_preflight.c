/*
 * The launcher's preflight: what it checks once every agent has said hello and before
 * anything starts (see the theory of operation in job.c).
 *
 * check_hellos compares protocol and dslaunch versions and the GPU counts against the
 * slots used. The probe, for multi-node jobs and --check, runs in two rounds:
 *   1. node 0's agent binds the master port and holds it (or, when the port was not
 *      given and is busy, binds a free one), and checks the program and the cwd;
 *   2. every other agent test-connects to each of node 0's non-loopback IPv4 addresses
 *      (or --master_addr) on that port, reports which it reached, the interface its
 *      kernel routes through to the first one, and checks the program and the cwd.
 * The first address every node reached becomes MASTER_ADDR; node 0's interface is the
 * one that holds it. When rank 0 is dstrain or dsbench (dsl_plan_rank0_takes_port),
 * node 0's agent keeps the socket and hands it to rank 0, whose store serves on it: the
 * port is never free between the probe and the store, and a rank that connects early
 * waits in the listener's backlog. For any other program a third round (an empty probe)
 * makes node 0 release the port before anything starts, so that program can bind it and
 * no rank can reach a listener that is about to close.
 *
 * Jobs on this machine alone skip the probe, but for dstrain and dsbench the agent
 * still reserves the port (round 1 without checks, dsl_job_reserve_port): two jobs
 * started at once then never both choose 29500.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/envnames.h"
#include "dslaunch/job/job.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "job_impl.h"
#include "dslaunch/common/banned.h"

extern char **environ;

/* Does the node have an interface that a socket-interface variable the user exported
 * lets the library use? NCCL_SOCKET_IFNAME is a comma list of name prefixes, of exact
 * names when it starts with '=', of names to avoid when it starts with '^' (then any
 * other interface will do); GLOO_SOCKET_IFNAME is a comma list of exact names, each of
 * which Gloo opens. */
static int ifname_usable(const char *spec, int gloo, const struct dsl_msg *hello)
{
    int exact = gloo, avoid = 0;
    if (!gloo && *spec == '^')
        avoid = 1, spec++;
    if (!gloo && *spec == '=')
        exact = 1, spec++;
    struct dsl_strvec items;
    dsl_strvec_init(&items);
    for (const char *p = spec; *p;) {
        size_t n = strcspn(p, ",");
        if (n)
            dsl_strvec_push_nodup(&items, dsl_xstrndup(p, n));
        p += n + (p[n] == ',');
    }
    int ok = gloo ? items.nr > 0 : 0;
    if (avoid) { /* any interface but loopback and the avoided ones */
        for (int i = 0; i < hello->nifaces && !ok; i++) {
            const char *name = hello->ifaces[i].name;
            int hit = !strcmp(name, "lo");
            for (size_t k = 0; k < items.nr && !hit; k++)
                hit = exact ? !strcmp(name, items.v[k])
                            : !strncmp(name, items.v[k], strlen(items.v[k]));
            ok = !hit;
        }
    } else {
        for (size_t k = 0; k < items.nr; k++) {
            int found = 0;
            for (int i = 0; i < hello->nifaces && !found; i++)
                found = exact ? !strcmp(hello->ifaces[i].name, items.v[k])
                              : !strncmp(hello->ifaces[i].name, items.v[k], strlen(items.v[k]));
            ok = gloo ? ok && found : ok || found;
        }
    }
    dsl_strvec_release(&items);
    return ok;
}

/* The node's interfaces, "lo, eth0, ib0", for an error. */
static void iface_list(const struct dsl_msg *hello, char *out, size_t len)
{
    size_t k = 0;
    out[0] = '\0';
    for (int i = 0; i < hello->nifaces && k + 1 < len; i++)
        k += (size_t)snprintf(out + k, len - k, "%s%s", i ? ", " : "", hello->ifaces[i].name);
    if (!hello->nifaces)
        snprintf(out, len, "none");
}

/* Check hellos: versions, GPU counts, exported interface names. 0 or DSL_EXIT_PREFLIGHT. */
int dsl_job_check_hellos(struct dsl_job *job)
{
    int bad = 0;
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        const struct dsl_msg *h = &n->hello;
        if (h->proto != DSL_PROTO_VERSION) {
            dsl_error("'%s' speaks control protocol %d, this dslaunch speaks %d", n->pn->host,
                      h->proto, DSL_PROTO_VERSION);
            bad = 1;
        } else if (strcmp(h->version, DSL_VERSION) != 0) {
            dsl_error("'%s' runs dslaunch %s, this is %s: install the same version everywhere",
                      n->pn->host, h->version, DSL_VERSION);
            bad = 1;
        }
        if (job->opts->rank_memory_limit && !h->memcg) {
            dsl_error("'%s' cannot limit a rank's memory (--rank-memory-limit): %s",
                      n->pn->host,
                      h->contain ? "it has no memory cgroup for ranks" : "its dslaunch is older");
            bad = 1;
        }
        static const char *const ifvars[] = {DSL_ENV_NCCL_SOCKET_IFNAME,
                                             DSL_ENV_GLOO_SOCKET_IFNAME};
        for (int v = 0; v < 2; v++) {
            const char *spec = dsl_env_get(&job->plan->exported, ifvars[v]);
            if (!spec || !*spec || ifname_usable(spec, v == 1, h))
                continue;
            char names[512];
            iface_list(h, names, sizeof(names));
            dsl_error("'%s' has no interface that %s='%s' allows (its interfaces: %s); "
                      "export a value every node satisfies, or unset it and let dslaunch "
                      "choose per node", n->pn->host, ifvars[v], spec, names);
            bad = 1;
        }
        int maxslot = n->pn->slots[n->pn->nslots - 1];
        if (h->gpus > 0 && maxslot >= h->gpus) {
            dsl_error("'%s' has %d GPU(s) but the placement uses device %d there", n->pn->host,
                      h->gpus, maxslot);
            bad = 1;
        }
    }
    return bad ? DSL_EXIT_PREFLIGHT : 0;
}

static int wait_probed(struct dsl_job *job, int sig_rfd, int first, int last)
{
    double t0 = dsl_now();
    for (;;) {
        int waiting = 0;
        for (int i = first; i < last; i++) {
            struct dsl_job_node *n = &job->nodes[i];
            if (!n->have_probed && n->state != DSL_NODE_FAILED)
                waiting++;
        }
        if (!waiting)
            break;
        dsl_job_handle_signals(job);
        if (job->stopping)
            return job->exit_code ? job->exit_code : 130;
        if (dsl_now() - t0 > job->opts->tr.connect_timeout + 10) {
            dsl_error("preflight: no answer to the probe within %.0f s",
                      job->opts->tr.connect_timeout + 10);
            return DSL_EXIT_TIMEOUT;
        }
        dsl_job_pump(job, sig_rfd, 100);
    }
    for (int i = first; i < last; i++)
        if (job->nodes[i].state == DSL_NODE_FAILED) {
            dsl_error("preflight: %s", job->nodes[i].err);
            return DSL_EXIT_AGENT;
        }
    return 0;
}

static int is_loopback(const char *a)
{
    return !strncmp(a, "127.", 4) || !strcmp(a, "::1");
}

/*
 * Round 1: node 0's agent binds the master port and holds it, or, when the port was not
 * given and is busy, binds a free one. It listens on --master_addr (or 127.0.0.1 for a
 * job on this machine) when that is known now, else on every address. Sets the plan's
 * master_port. 0 or an exit code.
 */
/*
 * An activated Python environment here (docs/env.md, "A Python environment on every
 * node"): a venv (VIRTUAL_ENV) or a conda env (CONDA_PREFIX, a directory with
 * conda-meta/) whose bin holds the program, looked up in this PATH ($PREFIX/bin/python3
 * for a .py script). Local ranks inherit it; remote ranks would run their login PATH's
 * python3 without a word. So the probe asks every node to look the program up with this
 * PATH and the env's variable: where every node finds it inside the same prefix, they
 * join the export set; where one does not, the preflight says which and how to fix it.
 * A venv is checked before a conda env: one made inside a conda env is what runs.
 */
struct pyenv {
    char *prefix;      /* owned; NULL: nothing to check */
    char *here;        /* the program's path here; owned */
    const char *kind;  /* "venv" or "conda env" */
    const char *var;   /* VIRTUAL_ENV or CONDA_PREFIX */
    int conda;
};

static void pyenv_release(struct pyenv *pe)
{
    free(pe->prefix);
    free(pe->here);
    memset(pe, 0, sizeof(*pe));
}

/* The length of prefix without trailing slashes when path is inside it, else 0. */
static size_t inside(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    while (n > 1 && prefix[n - 1] == '/')
        n--;
    return prefix[0] == '/' && !strncmp(path, prefix, n) && path[n] == '/' ? n : 0;
}

static void pyenv_here(const struct dsl_job *job, const char *prog, struct pyenv *pe)
{
    memset(pe, 0, sizeof(*pe));
    const char *venv = getenv("VIRTUAL_ENV"), *conda = getenv("CONDA_PREFIX");
    if ((!venv && !conda) || !prog[0] || strchr(prog, '/'))
        return;
    int code;
    char err[DSL_ERR_LEN];
    char *path = dsl_spawn_resolve(prog, environ, job->plan->cwd, &code, err);
    size_t n;
    if (path && venv && (n = inside(path, venv))) {
        pe->prefix = dsl_xstrndup(venv, n);
        pe->kind = "venv";
        pe->var = "VIRTUAL_ENV";
    } else if (path && conda && (n = inside(path, conda))) {
        char *meta = dsl_xasprintf("%.*s/conda-meta", (int)n, conda);
        struct stat st;
        if (stat(meta, &st) == 0 && S_ISDIR(st.st_mode)) {
            pe->prefix = dsl_xstrndup(conda, n);
            pe->kind = "conda env";
            pe->var = "CONDA_PREFIX";
            pe->conda = 1;
        }
        free(meta);
    }
    if (pe->prefix)
        pe->here = path;
    else
        free(path);
}

/* The export set travels with the probe: the agent looks the program up in the PATH the
 * rank will have, not in its own login environment; with an activated Python
 * environment, in this PATH (pyenv_here). */
static void probe_env(struct dsl_job *job, struct dsl_msg *m, const struct pyenv *pe)
{
    for (size_t i = 0; i < job->plan->exported.nr; i++)
        dsl_strvec_push(&m->env, job->plan->exported.v[i]);
    if (pe && pe->prefix) {
        const char *path = getenv("PATH");
        dsl_env_set(&m->env, "PATH", path ? path : "");
        dsl_env_set(&m->env, pe->var, pe->prefix);
    }
}

/* The variables of an activated env that go to every rank: PATH, the env's own, and
 * for conda its name (CONDA_DEFAULT_ENV) where set. 1 when one was not there yet. */
static int pyenv_export(struct dsl_job *job, const struct pyenv *pe)
{
    struct dsl_strvec *ex = &job->plan->exported;
    const char *path = getenv("PATH"), *name = pe->conda ? getenv("CONDA_DEFAULT_ENV") : NULL;
    int added = !dsl_env_get(ex, "PATH") || !dsl_env_get(ex, pe->var) ||
                (name && !dsl_env_get(ex, "CONDA_DEFAULT_ENV"));
    dsl_env_set(ex, "PATH", path ? path : "");
    dsl_env_set(ex, pe->var, pe->prefix);
    if (name)
        dsl_env_set(ex, "CONDA_DEFAULT_ENV", name);
    return added;
}

/*
 * After the probe, with an activated env here: every node found the program inside it
 * (the agent's detail is the path it resolved) and its variables join the export set,
 * or the nodes that did not are named with what they found and how to fix it.
 * Nodes whose agent reports no path (an older dslaunch) are not counted either way.
 * 0 or DSL_EXIT_PREFLIGHT.
 */
static int pyenv_check(struct dsl_job *job, const char *prog, const struct pyenv *pe)
{
    struct dsl_dynbuf bad;
    dsl_dynbuf_init(&bad, 1u << 16);
    int nbad = 0, seen = 0;
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *nd = &job->nodes[i];
        const char *p = nd->probed.detail;
        if (!nd->probed.program_ok || !p || p[0] != '/')
            continue;
        seen++;
        if (inside(p, pe->prefix))
            continue;
        dsl_dynbuf_addf(&bad, "%s'%s' on %s", nbad++ ? ", " : "", p, nd->pn->host);
    }
    int r = 0;
    if (nbad) {
        dsl_error("preflight: '%s' is '%s' here, in the activated %s '%s', but %s: the "
                  "ranks there would run another Python. Make the %s at the same path on "
                  "every node (e.g. dslaunch sync %s with the same --hostfile%s), or "
                  "deactivate it here%s to run each node's own '%s'",
                  prog, pe->here, pe->kind, pe->prefix, dsl_dynbuf_str(&bad), pe->kind,
                  pe->prefix, pe->conda ? ", or conda create -p PREFIX on each node" : "",
                  pe->conda ? " (conda deactivate)" : "", prog);
        r = DSL_EXIT_PREFLIGHT;
    } else if (seen && pyenv_export(job, pe) && job->restart_count == 0) {
        if (pe->conda)
            dsl_info("the activated conda env '%s' is at the same path on every node: its "
                     "PATH, CONDA_PREFIX%s go to every rank, which runs '%s'", pe->prefix,
                     getenv("CONDA_DEFAULT_ENV") ? " and CONDA_DEFAULT_ENV" : "", pe->here);
        else
            dsl_info("the activated venv '%s' is at the same path on every node: its PATH "
                     "and VIRTUAL_ENV go to every rank, which runs '%s'", pe->prefix,
                     pe->here);
    }
    dsl_dynbuf_release(&bad);
    return r;
}

static int hold_port(struct dsl_job *job, int sig_rfd, const char *prog, const char *cwd,
                     const struct pyenv *pe)
{
    struct dsl_job_node *n0 = &job->nodes[0];
    struct dsl_msg m;
    struct in_addr ia;
    int r;
    dsl_msg_init(&m, DSL_MSG_PROBE);
    m.port = job->plan->master_port;
    m.pick = !job->opts->master_port_given;
    m.program = dsl_xstrdup(prog);
    m.cwd = dsl_xstrdup(cwd);
    if (prog[0] && job->plan->script)
        m.script = dsl_xstrdup(job->plan->script);
    probe_env(job, &m, pe);
    const char *bind = job->opts->master_addr ? job->opts->master_addr
                       : job->plan->all_local ? "127.0.0.1"
                                              : NULL;
    if (bind && inet_pton(AF_INET, bind, &ia) == 1)
        m.bind = dsl_xstrdup(bind);
    n0->have_probed = 0;
    dsl_job_node_send(n0, &m);
    dsl_job_node_flush(n0);
    dsl_msg_release(&m);
    if ((r = wait_probed(job, sig_rfd, 0, 1)) != 0)
        return r;
    if (!n0->probed.port) {
        dsl_error("preflight: master port %d is busy on '%s'%s; nothing was started",
                  job->plan->master_port, n0->pn->host,
                  job->opts->master_port_given ? "; choose another with --master_port" : "");
        return DSL_EXIT_PREFLIGHT;
    }
    if (n0->probed.port_busy)
        dsl_info("master port %d is busy on '%s'; using %d", job->plan->master_port, n0->pn->host,
                 n0->probed.port);
    job->plan->master_port = n0->probed.port;
    return 0;
}

int dsl_job_reserve_port(struct dsl_job *job, int sig_rfd)
{
    return hold_port(job, sig_rfd, "", "", NULL);
}

/* Round 2's addresses: --master_addr, loopback for a job on this machine, else node
 * 0's IPv4 addresses other than loopback (loopback when it has none). */
static void master_candidates(struct dsl_job *job, struct dsl_strvec *cand)
{
    struct dsl_job_node *n0 = &job->nodes[0];
    if (job->opts->master_addr) {
        dsl_strvec_push(cand, job->opts->master_addr);
    } else if (job->plan->all_local) {
        /* every node is this machine: loopback, as the plan without a preflight says */
        dsl_strvec_push(cand, "127.0.0.1");
    } else {
        for (int i = 0; i < n0->hello.nifaces; i++)
            for (size_t k = 0; k < n0->hello.ifaces[i].addrs.nr; k++) {
                const char *a = n0->hello.ifaces[i].addrs.v[k];
                if (!is_loopback(a) && !strchr(a, ':'))
                    dsl_strvec_push(cand, a);
            }
        if (cand->nr == 0)
            dsl_strvec_push(cand, "127.0.0.1");
    }
}

/* MASTER_ADDR: the first candidate every node reached. 0, or 1 with the reachability
 * table printed. */
static int choose_master(struct dsl_job *job, const struct dsl_strvec *cand)
{
    struct dsl_job_node *n0 = &job->nodes[0];
    int chosen = -1;
    for (size_t k = 0; k < cand->nr && chosen < 0; k++) {
        int all = 1;
        for (int i = 1; i < job->nnodes; i++)
            if ((int)k >= job->nodes[i].probed.nreach || !job->nodes[i].probed.reach[k])
                all = 0;
        if (all)
            chosen = (int)k;
    }
    if (chosen < 0) {
        dsl_error("preflight: no address of '%s' is reachable on port %d from every node",
                  n0->pn->host, job->plan->master_port);
        for (int i = 1; i < job->nnodes; i++)
            for (size_t k = 0; k < cand->nr; k++)
                dsl_job_eprintf(job, "  %-20s -> %s:%d %s\n", job->nodes[i].pn->host,
                                cand->v[k], job->plan->master_port,
                                (int)k < job->nodes[i].probed.nreach &&
                                        job->nodes[i].probed.reach[k]
                                    ? "ok"
                                    : "unreachable");
        return 1;
    }
    free(job->plan->master_addr);
    job->plan->master_addr = dsl_xstrdup(cand->v[chosen]);
    return 0;
}

/*
 * Round 3, for a rank 0 that binds the port itself: node 0 lets go of the master port
 * before any rank starts anywhere. Were it released only when node 0 gets "start", a
 * rank of a faster node could connect to the probe listener first and be reset when it
 * closes.
 */
static int release_port(struct dsl_job *job, int sig_rfd)
{
    struct dsl_job_node *n0 = &job->nodes[0];
    struct dsl_msg m;
    int r;
    dsl_msg_init(&m, DSL_MSG_PROBE);
    m.program = dsl_xstrdup("");
    m.cwd = dsl_xstrdup("");
    struct dsl_msg held = n0->probed; /* keep round 1's answer for the callers */
    dsl_msg_init(&n0->probed, 0);
    n0->have_probed = 0;
    dsl_job_node_send(n0, &m);
    dsl_job_node_flush(n0);
    dsl_msg_release(&m);
    r = wait_probed(job, sig_rfd, 0, 1);
    dsl_msg_release(&n0->probed);
    n0->probed = held;
    n0->have_probed = 1;
    return r;
}

/*
 * The multi-node probe (see the theory above). Fills master_addr, master_port and
 * every node's iface. Returns 0 or an exit code.
 */
int dsl_job_probe(struct dsl_job *job, int sig_rfd)
{
    struct dsl_job_node *n0 = &job->nodes[0];
    struct dsl_msg m;
    int r;
    const char *prog = job->plan->argv.nr ? job->plan->argv.v[0] : "";
    struct pyenv pe;
    pyenv_here(job, prog, &pe);
    /* round 1: node 0 holds the port */
    if ((r = hold_port(job, sig_rfd, prog, job->plan->cwd, &pe)) != 0) {
        pyenv_release(&pe);
        return r;
    }

    /* round 2: everyone else test-connects to node 0's candidate addresses */
    struct dsl_strvec cand;
    dsl_strvec_init(&cand);
    master_candidates(job, &cand);
    dsl_msg_init(&m, DSL_MSG_PROBE);
    m.port = 0;
    m.cport = job->plan->master_port;
    for (size_t k = 0; k < cand.nr; k++)
        dsl_strvec_push(&m.connect, cand.v[k]);
    m.program = dsl_xstrdup(prog);
    m.cwd = dsl_xstrdup(job->plan->cwd);
    if (job->plan->script)
        m.script = dsl_xstrdup(job->plan->script);
    probe_env(job, &m, &pe);
    for (int i = 1; i < job->nnodes; i++) {
        job->nodes[i].have_probed = 0;
        dsl_job_node_send(&job->nodes[i], &m);
        dsl_job_node_flush(&job->nodes[i]);
    }
    dsl_msg_release(&m);
    if ((r = wait_probed(job, sig_rfd, 1, job->nnodes)) != 0) {
        dsl_strvec_release(&cand);
        pyenv_release(&pe);
        return r;
    }
    int bad = choose_master(job, &cand);
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        if (!n->probed.program_ok || !n->probed.cwd_ok) {
            dsl_error("preflight: '%s': %s", n->pn->host, n->probed.detail);
            bad = 1;
        }
        free(n->iface);
        n->iface = NULL;
        if (i > 0 && n->probed.iface && n->probed.iface[0])
            n->iface = dsl_xstrdup(n->probed.iface);
    }
    /* node 0: the interface that holds MASTER_ADDR */
    if (job->plan->master_addr)
        for (int i = 0; i < n0->hello.nifaces && !n0->iface; i++)
            for (size_t k = 0; k < n0->hello.ifaces[i].addrs.nr; k++)
                if (!strcmp(n0->hello.ifaces[i].addrs.v[k], job->plan->master_addr))
                    n0->iface = dsl_xstrdup(n0->hello.ifaces[i].name);
    dsl_strvec_release(&cand);
    if (!bad && pe.prefix && pyenv_check(job, prog, &pe) != 0)
        bad = 1;
    pyenv_release(&pe);
    if (bad)
        return DSL_EXIT_PREFLIGHT;
    if (dsl_plan_rank0_takes_port(job->plan))
        return 0; /* node 0's agent hands the held socket to rank 0's store */
    return release_port(job, sig_rfd);
}

void dsl_job_print_preflight(struct dsl_job *job)
{
    dsl_job_eprintf(job, "%-4s %-20s %-20s %-8s %4s %4s %5s  %-10s %s\n", "node", "host",
                    "hostname", "version", "cpus", "gpus", "ranks", "iface", "first rank");
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        dsl_job_eprintf(job, "%-4d %-20s %-20s %-8s %4d %4d %5d  %-10s %d\n", i, n->pn->host,
                        n->hello.host ? n->hello.host : "?",
                        n->hello.version ? n->hello.version : "?", n->hello.cpus,
                        n->hello.gpus, n->pn->nslots, n->iface ? n->iface : "-",
                        n->pn->first_rank);
    }
    for (int i = 0; i < job->nnodes; i++) {
        const struct dsl_msg *h = &job->nodes[i].hello;
        dsl_job_eprintf(job, "node %d ranks contained by: %s%s\n", i,
                h->contain ? h->contain : "process groups (an older dslaunch)",
                h->memcg ? "; memory limit and OOM kills per rank" : "");
    }
    dsl_job_eprintf(job, DSL_ENV_MASTER_ADDR "=%s " DSL_ENV_MASTER_PORT "=%d\n",
                    job->plan->master_addr, job->plan->master_port);
}

