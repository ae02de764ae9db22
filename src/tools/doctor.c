/*
 * `dslaunch doctor`: check every node of a job before training does (docs/doctor.md).
 *
 * Theory of operation. doctor builds the same plan a launch would (options, hostfile,
 * placement, export set) and runs it with the job machinery of job.c in inspect mode:
 * dsl_job_run() connects to an agent on every node and, instead of starting ranks,
 * calls doctor_inspect() once every node has said hello or failed. There:
 *   1. the normal multi-node probe runs (node 0 holds the master port, every other node
 *      test-connects to it); each node's reachability, interface and source address to
 *      the master are saved, since the next round replaces the probe results;
 *   2. a "diag" probe goes to every live node; the agent answers with its facts
 *      (facts.c: kernel, glibc, CUDA/NCCL versions, GPU memory, InfiniBand, free disk,
 *      its clock at receipt and reply) and checks the program and the cwd again. The
 *      launcher stamps send and receipt with its own clock for the skew estimate.
 * dsl_job_run() then closes every channel (the agents exit and node 0 frees the port).
 * If nothing so far blocks a job, doctor runs the bundled dsbench all-reduce as a normal
 * job: a child `dslaunch` with the same options, whose stdout is captured and whose
 * "# avg busbw" line is the bandwidth (doctor_bench.c). Finally the rows (doctor_report.c)
 * are printed as one table, or as one JSON object with --json (doctor_output.c). ^C during the agents'
 * phase stops like a launch does; during the all-reduce it reaches the child too.
 *
 * Exit: 0 when no row failed, 1 when some did, 2 for usage errors.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/tools/doctor.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/plan/envexport.h"
#include "dslaunch/common/error.h"
#include "dslaunch/remote/facts.h"
#include "dslaunch/plan/hostfile.h"
#include "dslaunch/job/job.h"
#include "dslaunch/plan/plan.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/plan/options.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/plan/placement.h"
#include "dslaunch/common/xalloc.h"
#include "doctor_impl.h"
#include "toolargs.h"
#include "dslaunch/common/banned.h"

extern char **environ;

#define DEFAULT_HOSTFILE "/job/hostfile"
#define DIAG_EXTRA 30.0          /* s beyond --connect-timeout for the diag answers */
#define SKEW_FAIL 1.0            /* s of clock offset (beyond the error bound) that fail */
#define DISK_FAIL (1024.0 * 1024 * 1024) /* bytes free below which a node fails */
#define GPU_FREE_NOTE 0.5        /* fraction of a GPU's memory free below which: note */

static void doc_release(struct doctor *d, int nnodes)
{
    for (int i = 0; d->dn && i < nnodes; i++) {
        free(d->dn[i].iface);
        free(d->dn[i].src);
    }
    free(d->dn);
    dsl_strvec_release(&d->fwd);
    dsl_doctor_bench_release(&d->bench);
    dsl_doctor_report_release(&d->rep);
}

/* ---- the agents' phase (called by dsl_job_run) ---- */

static void save_probe(struct doctor *d, struct dsl_job *job)
{
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        struct doc_node *dn = &d->dn[i];
        if (!n->have_probed)
            continue;
        dn->probed = 1;
        if (i == 0) {
            dn->reached = n->probed.port > 0;
            dn->iface = dsl_xstrdup(n->iface ? n->iface : "");
            dn->src = dsl_xstrdup(job->plan->master_addr ? job->plan->master_addr : "");
        } else {
            for (int k = 0; k < n->probed.nreach; k++)
                dn->reached |= n->probed.reach[k];
            dn->iface = dsl_xstrdup(n->probed.iface ? n->probed.iface : "");
            dn->src = dsl_xstrdup(n->probed.src ? n->probed.src : "");
        }
    }
}

static int diag_round(struct doctor *d, struct dsl_job *job, int sig_rfd)
{
    struct dsl_msg m;
    dsl_msg_init(&m, DSL_MSG_PROBE);
    m.program = dsl_xstrdup(job->plan->argv.nr ? job->plan->argv.v[0] : "");
    m.cwd = dsl_xstrdup(job->plan->cwd);
    m.diag = 1;
    const char *ld = dsl_env_get(&job->plan->exported, "LD_LIBRARY_PATH");
    if (ld)
        m.ld_path = dsl_xstrdup(ld);
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        if (n->state != DSL_NODE_READY)
            continue;
        n->have_probed = 0;
        d->dn[i].asked = 1;
        d->dn[i].t0 = dsl_facts_realtime();
        dsl_job_send(n, &m);
    }
    dsl_msg_release(&m);
    double t_end = dsl_now() + job->opts->tr.connect_timeout + DIAG_EXTRA;
    for (;;) {
        int waiting = 0;
        double t = dsl_facts_realtime();
        for (int i = 0; i < job->nnodes; i++) {
            struct dsl_job_node *n = &job->nodes[i];
            struct doc_node *dn = &d->dn[i];
            if (!dn->asked || dn->answered)
                continue;
            if (n->have_probed) {
                dn->answered = 1;
                dn->t3 = t;
            } else if (n->state != DSL_NODE_FAILED) {
                waiting++;
            }
        }
        if (!waiting || dsl_now() > t_end)
            break;
        int r = dsl_job_step(job, sig_rfd, 100);
        if (r != 0) {
            d->interrupted = 1;
            return r;
        }
    }
    return 0;
}

static int doctor_inspect(struct dsl_job *job, int sig_rfd, int connect_code, void *arg)
{
    struct doctor *d = arg;
    d->connect_code = connect_code;
    d->dn = dsl_xcalloc((size_t)job->nnodes, sizeof(*d->dn));
    if (job->stopping) {
        d->interrupted = 1;
        return 130;
    }
    if (job->nodes[0].state == DSL_NODE_READY) {
        d->probe_ran = 1;
        d->probe_code = dsl_job_probe(job, sig_rfd);
        save_probe(d, job);
        if (job->stopping) {
            d->interrupted = 1;
            return 130;
        }
    }
    return diag_round(d, job, sig_rfd);
}

/* ---- the report ---- */

static void put(struct doctor *d, const char *host, const char *check, enum dsl_doctor_status st,
                char *remedy, char *value)
{
    dsl_doctor_report_add(&d->rep, host, check, st, remedy, "%s", value);
    free(remedy);
    free(value);
}

/* One version check across nodes: flag the nodes that differ from the majority. */
static void check_versions(struct doctor *d, struct dsl_job *job, const char *check,
                           size_t member, size_t path_member, enum dsl_doctor_status mismatch,
                           const char *why)
{
    const char **vals = dsl_xcalloc((size_t)job->nnodes + 1, sizeof(char *));
    int *idx = dsl_xcalloc((size_t)job->nnodes + 1, sizeof(int));
    int nv = 0;
    for (int i = 0; i < job->nnodes; i++) {
        const struct dsl_facts *f = dsl_doctor_facts_of(&job->nodes[i]);
        if (!f)
            continue;
        char *const *field = (char *const *)(const void *)((const char *)f + member);
        vals[nv] = *field ? *field : "?";
        idx[nv++] = i;
    }
    int maj = dsl_doctor_majority(vals, nv);
    for (int k = 0; k < nv; k++) {
        const char *host = job->nodes[idx[k]].pn->host;
        const char *path = "";
        if (path_member) {
            const struct dsl_facts *f = dsl_doctor_facts_of(&job->nodes[idx[k]]);
            char *const *pf = (char *const *)(const void *)((const char *)f + path_member);
            path = *pf ? *pf : "";
        }
        int same = !strcmp(vals[k], vals[maj]);
        put(d, host, check, same ? DSL_DOCTOR_OK : mismatch,
            same ? NULL
                 : dsl_xasprintf("%s differs from the other nodes ('%s' on %s): %s", check,
                                 vals[maj], job->nodes[idx[maj]].pn->host, why),
            dsl_xasprintf("%s%s%s%s%s", vals[k], path[0] ? " (" : "", path, path[0] ? ")" : "",
                          same ? "" : " (differs)"));
    }
    free((void *)vals);
    free(idx);
}

static void check_reach(struct doctor *d, struct dsl_job *job)
{
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        const char *host = n->pn->host;
        if (n->state != DSL_NODE_FAILED) {
            put(d, host, "agent", DSL_DOCTOR_OK, NULL,
                dsl_xasprintf("%s, %d CPU(s), pid %d", n->hello.host, n->hello.cpus,
                              n->hello.pid));
            continue;
        }
        const char *fix =
            n->err_code == DSL_EAUTH
                ? "set up keys and host keys: dslaunch ssh-setup --hostfile H (or check "
                  "--ssh-identity, --ssh-config, known_hosts)"
                : "check that the host is up and reachable: `ssh HOST true` with the same "
                  "--ssh-config/--ssh_port, and that dslaunch is installed at the same path "
                  "there (or pass --remote-dslaunch)";
        put(d, host, "agent", DSL_DOCTOR_FAIL, dsl_xstrdup(fix),
            dsl_xstrdup(n->err[0] ? n->err : dsl_strerror(n->err_code)));
    }
}

static void check_dslaunch(struct doctor *d, struct dsl_job *job)
{
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        if (n->state == DSL_NODE_FAILED || !n->have_hello)
            continue;
        const char *host = n->pn->host;
        int bad = n->hello.proto != DSL_PROTO_VERSION || strcmp(n->hello.version, DSL_VERSION);
        put(d, host, "dslaunch", bad ? DSL_DOCTOR_FAIL : DSL_DOCTOR_OK,
            bad ? dsl_xasprintf("install dslaunch %s (protocol %d) on %s, the version of this "
                                "launcher (`dslaunch sync` copies a build to every node), or "
                                "point --remote-dslaunch at it",
                                DSL_VERSION, DSL_PROTO_VERSION, host)
                : NULL,
            dsl_xasprintf("%s (protocol %d)", n->hello.version, n->hello.proto));
    }
}

static void check_gpus(struct doctor *d, struct dsl_job *job)
{
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        const struct dsl_facts *f = dsl_doctor_facts_of(n);
        if (!f)
            continue;
        const char *host = n->pn->host;
        const struct dsl_node *pn = n->pn;
        int maxslot = pn->slots[pn->nslots - 1];
        char cvd[256];
        snprintf(cvd, sizeof(cvd), "%s%s", f->cvd_set ? DSL_ENV_CUDA_VISIBLE_DEVICES "=" : "",
                 f->cvd_set ? f->cvd : "CUDA_VISIBLE_DEVICES unset");
        if (n->hello.gpus > 0 && !strcmp(f->cuda_driver, "none")) {
            put(d, host, "gpus", DSL_DOCTOR_FAIL,
                dsl_xasprintf("%s has NVIDIA GPUs but libcuda.so.1 cannot be loaded: install "
                              "the driver's user-space libraries matching its kernel module "
                              "(nvidia-smi must work there)",
                              host),
                dsl_xasprintf("%d GPU(s), no usable CUDA driver", n->hello.gpus));
        } else if (n->hello.gpus == 0) {
            put(d, host, "gpus", DSL_DOCTOR_OK, NULL,
                dsl_xasprintf("none, %d CPU rank(s); %s", pn->nslots, cvd));
        } else if (maxslot >= n->hello.gpus) {
            put(d, host, "gpus", DSL_DOCTOR_FAIL,
                dsl_xasprintf("the hostfile gives %s slots up to device %d: lower slots= to at "
                              "most %d, or select devices with --include",
                              host, maxslot, n->hello.gpus),
                dsl_xasprintf("%d GPU(s), %d slot(s) up to device %d; %s", n->hello.gpus,
                              pn->nslots, maxslot, cvd));
        } else {
            put(d, host, "gpus", DSL_DOCTOR_OK, NULL,
                dsl_xasprintf("%d GPU(s), %d slot(s) used; %s (dslaunch sets it per rank)",
                              n->hello.gpus, pn->nslots, cvd));
        }
        if (!f->nvml) {
            if (n->hello.gpus > 0)
                put(d, host, "gpu memory", DSL_DOCTOR_OK, NULL,
                    dsl_xstrdup("n/a (no libnvidia-ml.so.1)"));
            continue;
        }
        int worst = -1;
        for (int g = 0; g < f->ngpu; g++)
            if (f->gpu_total_mib[g] > 0 &&
                (worst < 0 || f->gpu_free_mib[g] / f->gpu_total_mib[g] <
                                  f->gpu_free_mib[worst] / f->gpu_total_mib[worst]))
                worst = g;
        if (worst < 0) {
            put(d, host, "gpu memory", DSL_DOCTOR_OK, NULL, dsl_xstrdup("n/a"));
            continue;
        }
        double fr = f->gpu_free_mib[worst] / f->gpu_total_mib[worst];
        put(d, host, "gpu memory", fr < GPU_FREE_NOTE ? DSL_DOCTOR_NOTE : DSL_DOCTOR_OK,
            fr < GPU_FREE_NOTE
                ? dsl_xasprintf("GPU %d on %s has only %.1f GiB free: another process holds "
                                "its memory (nvidia-smi shows which)",
                                worst, host, f->gpu_free_mib[worst] / 1024)
                : NULL,
            dsl_xasprintf("least free: GPU %d %.1f of %.1f GiB (%d GPU(s))", worst,
                          f->gpu_free_mib[worst] / 1024, f->gpu_total_mib[worst] / 1024,
                          f->ngpu));
        if (f->p2p == 0)
            put(d, host, "peer-to-peer", DSL_DOCTOR_NOTE,
                dsl_xstrdup("some GPU pairs lack peer access (IOMMU/ACS, PCIe topology): if "
                            "NCCL hangs or crawls on this node, --export NCCL_P2P_DISABLE=1"),
                dsl_xstrdup("not between every GPU pair"));
        else if (f->p2p == 1)
            put(d, host, "peer-to-peer", DSL_DOCTOR_OK, NULL,
                dsl_xstrdup("every GPU pair has peer access"));
    }
}

/* The address the probe chose, or else the first one it tried (for the failing rows). */
static const char *master_shown(const struct dsl_job *job)
{
    const struct dsl_msg *h = &job->nodes[0].hello;
    if (job->opts->master_addr || strcmp(job->plan->master_addr, job->nodes[0].pn->host) != 0)
        return job->plan->master_addr;
    for (int i = 0; i < h->nifaces; i++)
        for (size_t k = 0; k < h->ifaces[i].addrs.nr; k++) {
            const char *a = h->ifaces[i].addrs.v[k];
            if (strncmp(a, "127.", 4) != 0 && !strchr(a, ':'))
                return a;
        }
    return job->plan->master_addr;
}

/*
 * A user-given NCCL_SOCKET_IFNAME must select some interface of node i (NCCL's rules); a
 * GLOO_SOCKET_IFNAME (gloo: exact names, comma-separated) must name only interfaces the
 * node has.
 */
static void check_ifname(struct doctor *d, struct dsl_job *job, int i, const char *var, int gloo)
{
    struct dsl_job_node *n = &job->nodes[i];
    const char *spec = dsl_env_get(&job->plan->exported, var);
    const char *here = d->dn[i].iface && d->dn[i].iface[0] ? d->dn[i].iface : NULL;
    if (!spec)
        return;
    const char **names = dsl_xcalloc((size_t)n->hello.nifaces + 1, sizeof(char *));
    struct dsl_dynbuf all;
    dsl_dynbuf_init(&all, 4096);
    for (int k = 0; k < n->hello.nifaces; k++) {
        names[k] = n->hello.ifaces[k].name;
        dsl_dynbuf_addf(&all, "%s%s", k ? ", " : "", names[k]);
    }
    /* the interfaces that route to the master, on every node: a list that works */
    struct dsl_dynbuf routes;
    dsl_dynbuf_init(&routes, 4096);
    for (int k = 0; k < job->nnodes; k++) {
        const char *r = d->dn[k].iface;
        int seen = !r || !r[0];
        for (int j = 0; j < k && !seen; j++)
            seen = d->dn[j].iface && !strcmp(d->dn[j].iface, r);
        if (!seen)
            dsl_dynbuf_addf(&routes, "%s%s", routes.len ? "," : "", r);
    }
    int ok = 1;
    if (!gloo) {
        ok = dsl_doctor_ifname_matches(spec, names, n->hello.nifaces);
    } else {
        char *copy = dsl_xstrdup(spec), *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *exact = dsl_xasprintf("=%s", t);
            ok &= dsl_doctor_ifname_matches(exact, names, n->hello.nifaces);
            free(exact);
        }
        free(copy);
    }
    put(d, n->pn->host, var, ok ? DSL_DOCTOR_OK : DSL_DOCTOR_FAIL,
        ok ? NULL
           : dsl_xasprintf("%s has no interface %s %s=%s (it has %s): unset it (dslaunch sets "
                           "it per node to the interface that reaches the master%s%s) or %s%s",
                           n->pn->host, gloo ? "named by" : "matching", var, spec,
                           all.len ? all.buf : "none", here ? ", here " : "", here ? here : "",
                           gloo ? "name an interface that exists on every node"
                                : "list a prefix for every node, e.g. NCCL_SOCKET_IFNAME=",
                           gloo ? "" : routes.len ? routes.buf : "<name>,<name>"),
        dsl_xasprintf("%s %s", spec, ok ? "matches" : "matches no interface"));
    dsl_dynbuf_release(&all);
    dsl_dynbuf_release(&routes);
    free((void *)names);
}

static void check_network(struct doctor *d, struct dsl_job *job)
{
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        struct doc_node *dn = &d->dn[i];
        const char *host = n->pn->host;
        if (n->state == DSL_NODE_FAILED)
            continue;
        /* the route to the master and the port */
        if (!d->probe_ran || !dn->probed) {
            put(d, host, "master port", DSL_DOCTOR_FAIL,
                dsl_xstrdup("the probe did not complete (see the agent row)"),
                dsl_xstrdup("not tested"));
        } else if (i == 0) {
            put(d, host, "master port", dn->reached ? DSL_DOCTOR_OK : DSL_DOCTOR_FAIL,
                dn->reached ? NULL
                            : dsl_xasprintf("port %d is in use on %s: choose another with "
                                            "--master_port",
                                            job->plan->master_port, host),
                dn->reached ? dsl_xasprintf("listening on %d (MASTER_ADDR %s, interface %s)",
                                            job->plan->master_port, job->plan->master_addr,
                                            dn->iface[0] ? dn->iface : "?")
                            : dsl_xasprintf("%d busy", job->plan->master_port));
        } else {
            put(d, host, "master port", dn->reached ? DSL_DOCTOR_OK : DSL_DOCTOR_FAIL,
                dn->reached ? NULL
                            : dsl_xasprintf("open TCP port %d from %s to %s (and the ports "
                                            "NCCL/Gloo use): a firewall on either node drops "
                                            "it (iptables -L, nft list ruleset), or choose an "
                                            "allowed port with --master_port",
                                            job->plan->master_port, host, job->nodes[0].pn->host),
                dsl_xasprintf("%s %s:%d via %s (%s)", dn->reached ? "reached" : "cannot connect to",
                              master_shown(job), job->plan->master_port,
                              dn->iface[0] ? dn->iface : "?", dn->src[0] ? dn->src : "?"));
        }
        /* user-given socket interfaces must exist on every node */
        if (n->have_hello) {
            check_ifname(d, job, i, DSL_ENV_NCCL_SOCKET_IFNAME, 0);
            check_ifname(d, job, i, DSL_ENV_GLOO_SOCKET_IFNAME, 1);
        }
        /* InfiniBand */
        const struct dsl_facts *f = dsl_doctor_facts_of(n);
        if (!f)
            continue;
        if (f->ib.nr) {
            struct dsl_dynbuf b;
            dsl_dynbuf_init(&b, 4096);
            for (size_t k = 0; k < f->ib.nr; k++)
                dsl_dynbuf_addf(&b, "%s%s", k ? ", " : "", f->ib.v[k]);
            put(d, host, "infiniband", DSL_DOCTOR_OK, NULL, dsl_xstrdup(b.buf ? b.buf : ""));
            dsl_dynbuf_release(&b);
        } else if (n->hello.gpus > 0 && !dsl_env_get(&job->plan->exported, "NCCL_IB_DISABLE")) {
            put(d, host, "infiniband", DSL_DOCTOR_NOTE,
                dsl_xstrdup("no InfiniBand here: --export NCCL_IB_DISABLE=1 so NCCL uses "
                            "sockets without probing for IB"),
                dsl_xstrdup("none"));
        } else {
            put(d, host, "infiniband", DSL_DOCTOR_OK, NULL,
                dsl_xstrdup(n->hello.gpus > 0 ? "none (NCCL_IB_DISABLE set)"
                                              : "none (not needed by the tcp backend)"));
        }
    }
}

static void check_node_misc(struct doctor *d, struct dsl_job *job)
{
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        struct doc_node *dn = &d->dn[i];
        const char *host = n->pn->host;
        if (n->state == DSL_NODE_FAILED && !dn->answered)
            continue;
        const struct dsl_facts *f = dsl_doctor_facts_of(n);
        if (!f) {
            put(d, host, "facts", DSL_DOCTOR_FAIL,
                dsl_xasprintf("the agent on %s did not answer the diag probe: install dslaunch "
                              "%s there",
                              host, DSL_VERSION),
                dsl_xstrdup(dn->answered ? "none in the answer (older agent)" : "no answer"));
            continue;
        }
        dsl_doctor_clock_offset(dn->t0, f->t_recv, f->t_send, dn->t3, &dn->offset, &dn->bound);
        int skew = fabs(dn->offset) - dn->bound > SKEW_FAIL;
        put(d, host, "clock", skew ? DSL_DOCTOR_FAIL : DSL_DOCTOR_OK,
            skew ? dsl_xasprintf("the clock of %s is %.1f s off: run chrony/NTP on every node "
                                 "(logs, timeouts and certificates assume agreeing clocks)",
                                 host, dn->offset)
                 : NULL,
            dsl_xasprintf("%+.3f s against this host (+-%.3f)", dn->offset, dn->bound));
        int low = f->disk_free >= 0 && f->disk_free < DISK_FAIL;
        put(d, host, "disk", low ? DSL_DOCTOR_FAIL : DSL_DOCTOR_OK,
            low ? dsl_xasprintf("free space in %s on %s (checkpoints and logs go there), or "
                                "work elsewhere with --remote-cwd",
                                job->plan->cwd, host)
                : NULL,
            f->disk_free < 0 ? dsl_xasprintf("unknown for %s", job->plan->cwd)
                             : dsl_xasprintf("%.1f GiB free in %s", f->disk_free / 1073741824.0,
                                             job->plan->cwd));
        const struct dsl_msg *p = &n->probed;
        put(d, host, "cwd", p->cwd_ok ? DSL_DOCTOR_OK : DSL_DOCTOR_FAIL,
            p->cwd_ok ? NULL
                      : dsl_xasprintf("create %s on %s (`dslaunch sync` copies a tree to every "
                                      "node), or choose the directory with --remote-cwd",
                                      job->plan->cwd, host),
            dsl_xasprintf("%s %s", job->plan->cwd, p->cwd_ok ? "exists" : "missing"));
        if (job->plan->argv.nr)
            put(d, host, "program", p->program_ok ? DSL_DOCTOR_OK : DSL_DOCTOR_FAIL,
                p->program_ok
                    ? NULL
                    : dsl_xasprintf("install %s on %s at the same path, or copy it with "
                                    "`dslaunch sync PATH --hostfile H`",
                                    job->plan->argv.v[0], host),
                p->program_ok ? dsl_xasprintf("%s found", job->plan->argv.v[0])
                              : dsl_xstrdup(p->detail && p->detail[0] ? p->detail : "missing"));
    }
}

/* ---- the all-reduce ---- */

static void run_bench(struct doctor *d, struct dsl_job *job)
{
    int gpus = 1;
    for (int i = 0; i < job->nnodes; i++) {
        const struct dsl_facts *f = dsl_doctor_facts_of(&job->nodes[i]);
        if (job->nodes[i].hello.gpus <= 0 || !f || !strcmp(f->nccl, "none"))
            gpus = 0;
    }
    dsl_doctor_bench_release(&d->bench);
    dsl_doctor_bench_run(&d->bench, job->plan->self_exe, d->fwd.v, gpus ? "nccl" : "tcp");
}

static void check_bench(struct doctor *d, struct dsl_job *job)
{
    struct dsl_doctor_bench *b = &d->bench;
    if (!d->allreduce)
        return;
    if (dsl_doctor_report_count(&d->rep, DSL_DOCTOR_FAIL) > 0) {
        put(d, "cluster", "allreduce", DSL_DOCTOR_NOTE,
            dsl_xstrdup("fix the problems above, then run doctor again"),
            dsl_xstrdup("skipped"));
        return;
    }
    run_bench(d, job);
    if (!b->ok) {
        /* one more try: a failure that does not repeat is a note, not a verdict */
        char *first = dsl_xstrdup(b->tail.nr ? b->tail.v[b->tail.nr - 1] : "no output");
        run_bench(d, job);
        if (b->ok)
            put(d, "cluster", "allreduce", DSL_DOCTOR_NOTE,
                dsl_xasprintf("the first try failed (%s); if that recurs, run it by hand: %s",
                              first, b->cmdline),
                dsl_xasprintf("busbw %.3f GB/s (%s backend, %d rank(s), 1M..16M), second try",
                              b->busbw, b->backend, job->pl->world_size));
        free(first);
        if (b->ok)
            return;
    } else {
        put(d, "cluster", "allreduce", DSL_DOCTOR_OK, NULL,
            dsl_xasprintf("busbw %.3f GB/s (%s backend, %d rank(s), 1M..16M)", b->busbw,
                          b->backend, job->pl->world_size));
        return;
    }
    const char *last = b->tail.nr ? b->tail.v[b->tail.nr - 1] : "no output";
    put(d, "cluster", "allreduce", DSL_DOCTOR_FAIL,
        dsl_xasprintf("%srun it by hand to see everything: %s%s",
                      b->code == 127 || b->code == 126
                          ? "install dsbench (built with dslaunch) beside dslaunch on every "
                            "node; "
                          : "",
                      b->cmdline,
                      strcmp(b->backend, "nccl") == 0
                          ? " (with NCCL_DEBUG=INFO; NCCL_P2P_DISABLE=1 or NCCL_IB_DISABLE=1 "
                            "often cure hangs)"
                          : ""),
        dsl_xasprintf("failed (exit %d, %s backend): %s", b->code, b->backend, last));
}

/* ---- the command ---- */

/* doctor's own flags; every other word goes on to the launcher's parser */
struct doctor_args {
    int json, no_allreduce, help;
};

#define DOFF(f) offsetof(struct doctor_args, f)
static const struct dsl_opt doctor_opts[] = {
    {"json", 0, DSL_OPT_FLAG, DOFF(json), NULL, "print one JSON object instead of the table",
     NULL, 0, 0, NULL, 0, NULL},
    {"no_allreduce", 0, DSL_OPT_FLAG, DOFF(no_allreduce), NULL, "skip the all-reduce", NULL, 0,
     0, NULL, 0, NULL},
    {"help", 'h', DSL_OPT_FLAG, DOFF(help), NULL, "show this help", NULL, 0, 0, NULL, 0, NULL},
};
static const struct dsl_opt_parser doctor_parser = {
    .prog = "dslaunch doctor",
    .opts = doctor_opts,
    .nopts = sizeof(doctor_opts) / sizeof(doctor_opts[0]),
    .flags = DSL_OPT_KEEP_UNKNOWN,
};

static void usage(FILE *f)
{
    fputs("usage: dslaunch doctor [--json] [--no-allreduce] [launcher options] [program]\n"
          "  checks every node of the hostfile (versions, GPUs, network, master port,\n"
          "  InfiniBand, clock, disk, cwd, program) and runs an all-reduce with dsbench;\n"
          "  exit 0 when every check passed, 1 when some failed (docs/doctor.md)\n", f);
    dsl_opt_help(&doctor_parser, f);
    fputs("launcher options as for dslaunch (--hostfile, --ssh-config, --master_port, ...)\n", f);
}

int dsl_doctor_main(int argc, char **argv)
{
    struct doctor d;
    struct dsl_launch_opts opts;
    struct dsl_plan plan;
    struct dsl_job job;
    struct dsl_strvec args;
    char err[DSL_ERR_LEN] = "";
    int code = DSL_EXIT_USAGE, r;

    memset(&d, 0, sizeof(d));
    d.allreduce = 1;
    dsl_strvec_init(&d.fwd);
    dsl_doctor_bench_init(&d.bench);
    dsl_doctor_report_init(&d.rep);
    dsl_launch_opts_init(&opts);
    dsl_plan_init(&plan, &opts);
    dsl_job_init(&job, &plan);
    dsl_strvec_init(&args);

    /* doctor's own flags come before the program; the rest is the launcher's */
    struct doctor_args da = {0};
    dsl_strvec_push(&args, "dslaunch");
    static const struct dsl_tool_usage tu = {"doctor", usage, 1};
    if (!dsl_tool_args_parse(&doctor_parser, &tu, &da, &da.help, argc, argv, &args, &code))
        goto out;
    d.json = da.json;
    d.allreduce = !da.no_allreduce;
    /* parsed as --check, which makes the program optional */
    struct dsl_strvec pargs;
    dsl_strvec_init(&pargs);
    dsl_strvec_push(&pargs, "dslaunch");
    dsl_strvec_push(&pargs, "--check");
    for (size_t k = 1; k < args.nr; k++)
        dsl_strvec_push(&pargs, args.v[k]);
    r = dsl_launch_opts_parse(&opts, (int)pargs.nr, pargs.v, err);
    dsl_strvec_release(&pargs);
    if (r < 0) {
        dsl_error("doctor: %s", err);
        usage(stderr);
        goto out;
    }
    if (opts.mode != DSL_MODE_CHECK) {
        dsl_error("doctor: --dry-run, --agent, --help and --version do not combine with doctor");
        goto out;
    }
    dsl_log_set_level(opts.verbose);
    for (size_t k = 1; k + opts.argv.nr < args.nr; k++)
        dsl_strvec_push(&d.fwd, args.v[k]);

    if ((r = dsl_plan_build(&plan, err)) < 0) {
        dsl_error("%s", err);
        goto out;
    }
    /* the probe picks MASTER_ADDR among node 0's addresses, also for a single node */
    free(plan.master_addr);
    plan.master_addr = dsl_xstrdup(opts.master_addr ? opts.master_addr : plan.pl.nodes[0].host);
    job.inspect = doctor_inspect;
    job.inspect_arg = &d;

    r = dsl_job_run(&job);
    if (d.interrupted || (!d.dn && r == 130)) {
        code = r ? r : 130;
        goto out;
    }
    if (!d.dn) { /* inspect never ran (setup error, already reported) */
        code = r ? r : DSL_EXIT_AGENT;
        goto out;
    }
    check_reach(&d, &job);
    check_dslaunch(&d, &job);
    check_versions(&d, &job, "kernel", offsetof(struct dsl_facts, kernel), 0, DSL_DOCTOR_NOTE,
                   "fine for CPU jobs; GPU drivers are built per kernel, so align them if "
                   "NCCL misbehaves only across nodes");
    check_versions(&d, &job, "glibc", offsetof(struct dsl_facts, glibc), 0, DSL_DOCTOR_NOTE,
                   "a program built on a newer glibc may not start on the older nodes");
    check_versions(&d, &job, "cuda driver", offsetof(struct dsl_facts, cuda_driver), 0,
                   DSL_DOCTOR_FAIL, "install the same NVIDIA driver on every node");
    check_versions(&d, &job, "cuda runtime", offsetof(struct dsl_facts, cuda_runtime),
                   offsetof(struct dsl_facts, cudart_path), DSL_DOCTOR_FAIL,
                   "install the same CUDA toolkit (libcudart) on every node");
    check_versions(&d, &job, "nccl", offsetof(struct dsl_facts, nccl),
                   offsetof(struct dsl_facts, nccl_path), DSL_DOCTOR_FAIL,
                   "NCCL versions must match across nodes: install the same libnccl.so.2 "
                   "everywhere");
    check_gpus(&d, &job);
    check_network(&d, &job);
    check_node_misc(&d, &job);
    check_bench(&d, &job);
    if (d.json)
        dsl_doctor_print_json(&d, &job);
    else
        dsl_doctor_print_table(&d, &job);
    code = dsl_doctor_report_count(&d.rep, DSL_DOCTOR_FAIL) ? 1 : 0;

out:
    doc_release(&d, job.nnodes);
    dsl_job_release(&job);
    dsl_plan_release(&plan);
    dsl_launch_opts_release(&opts);
    dsl_strvec_release(&args);
    return code;
}
