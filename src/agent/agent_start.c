/*
 * What the launcher asks of a waiting node (state WAITING of agent.c): a probe, and
 * the start of the node's ranks.
 *
 * Theory of operation. A probe holds (or picks) the master port, test-connects to the
 * addresses it names, finds the route to the first one reached, and checks the
 * program and working directory as a rank's exec would see them; with diag it also
 * collects the node's facts. A port still held when "start" arrives is rank 0's: its
 * store serves on that very socket (DSLAUNCH_STORE_FD). A start contains the ranks
 * (contain.c), shares the cores between them (--bind_cores_to_rank) and maps their
 * devices into the step's GPUs under srun (devmap.c); then every rank is forked
 * before any exec is awaited, so the children set up side by side. A rank that cannot
 * start stops the node: the ones after it never run.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_SET */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_impl.h"
#include "devmap.h"
#include "dslaunch/common/cpubind.h"
#include "dslaunch/common/envnames.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/proto/exitcode.h"
#include "dslaunch/remote/facts.h"
#include "dslaunch/remote/netinfo.h"
#include "dslaunch/common/banned.h"

extern char **environ;

/* Apply "K=V" (set) and "K" (unset) entries of add onto env. */
static void apply_env(struct dsl_strvec *env, const struct dsl_strvec *add)
{
    for (size_t k = 0; k < add->nr; k++) {
        const char *kv = add->v[k];
        const char *eq = strchr(kv, '=');
        char *key = dsl_xstrndup(kv, eq ? (size_t)(eq - kv) : strlen(kv));
        if (eq)
            dsl_env_set(env, key, eq + 1);
        else
            dsl_env_unset(env, key);
        free(key);
    }
}

/* The value of key in a list of "K=V" entries, or NULL. */
static const char *env_value(const struct dsl_strvec *env, const char *key)
{
    return dsl_env_lookup(env->v, key, strlen(key));
}

/*
 * --bind_cores_to_rank: the cores this agent may use (its own affinity: a Slurm or
 * container cpuset stays respected), narrowed to --bind_core_list, split evenly between
 * this node's ranks in NUMA order (common/cpubind.h). *bind holds nranks x *per cores.
 */
static int plan_binding(const struct dsl_msg *sm, int **bind, int *per, char *err)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) < 0)
        return dsl_seterr(err, -errno, "cannot read this node's usable cores: %s",
                          strerror(errno));
    int *allowed = dsl_xmalloc(DSL_CPUBIND_MAX * sizeof(int)), *cores = allowed;
    int *want = NULL, *node_of = NULL, r = 0;
    size_t n = 0;
    for (int c = 0; c < CPU_SETSIZE && c < DSL_CPUBIND_MAX; c++)
        if (CPU_ISSET((size_t)c, &set))
            allowed[n++] = c;
    if (sm->core_list) {
        want = dsl_xmalloc(DSL_CPUBIND_MAX * sizeof(int));
        int nw = dsl_cpubind_parse(sm->core_list, want, DSL_CPUBIND_MAX, err);
        if (nw < 0) {
            r = nw;
            goto out;
        }
        for (int k = 0; k < nw; k++) {
            if (want[k] >= CPU_SETSIZE || !CPU_ISSET((size_t)want[k], &set)) {
                char have[512];
                dsl_cpubind_format(allowed, n, have, sizeof(have));
                r = dsl_seterr(err, DSL_EUSAGE, "core %d of --bind_core_list '%s' is not one "
                               "this node lets dslaunch use (%s)", want[k], sm->core_list, have);
                goto out;
            }
        }
        cores = want;
        n = (size_t)nw;
    }
    node_of = dsl_xmalloc(DSL_CPUBIND_MAX * sizeof(int));
    dsl_cpubind_numa("/sys/devices/system/node", node_of, DSL_CPUBIND_MAX);
    *bind = dsl_xmalloc(n * sizeof(int) + 1);
    if ((r = dsl_cpubind_split(cores, n, node_of, sm->nranks, *bind, per, err)) < 0) {
        free(*bind);
        *bind = NULL;
    }
out:
    free(allowed);
    free(want);
    free(node_of);
    return r;
}

/* the GPUs Slurm gave the agent's step on this node (dsl_agent_set_node_devices) */
static char *node_devices;

void dsl_agent_set_node_devices(const char *list)
{
    free(node_devices);
    node_devices = list && list[0] ? dsl_xstrdup(list) : NULL;
}

/* The exit code a failed dsl_spawn() stands for, as a shell reports it: 127 for a
 * program that is not there, 126 for one that cannot be executed, 202 for a node that
 * could not set the rank up (its cgroup: DSL_ESPAWN, a pipe, a fork). */
static int spawn_exit_code(int rc)
{
    if (rc == -ENOENT || rc == -ENOTDIR || rc == -ELOOP || rc == -ENAMETOOLONG)
        return DSL_EXIT_NOTFOUND;
    if (rc == -EACCES || rc == -EPERM || rc == -ENOEXEC || rc == -EISDIR || rc == -ETXTBSY)
        return DSL_EXIT_NOEXEC;
    return DSL_EXIT_PREFLIGHT;
}

/* What a start prepares for all of the node's ranks. */
struct start_plan {
    int store_fd;  /* the master port's socket, for rank 0; -1 none */
    int *bind;     /* --bind_cores_to_rank: nranks x per cores; NULL none */
    int per;
    char *devices; /* under srun: the ranks' CUDA_VISIBLE_DEVICES; NULL as planned */
};

/* The first rank that could not start, and why. */
struct start_fail {
    int at, rc;
    char err[DSL_ERR_LEN];
};

/*
 * A master port still held now is rank 0's: its store serves on this very socket
 * (DSLAUNCH_STORE_FD), so no other job can take the port in between. Without rank 0
 * here it is released.
 */
static int take_store_fd(struct dsl_agent *a, const struct dsl_msg *sm)
{
    int store_fd = a->probe_lfd;
    a->probe_lfd = -1;
    int hosts_rank0 = 0;
    for (int i = 0; i < sm->nranks; i++)
        hosts_rank0 |= sm->ranks[i].rank == 0;
    if (store_fd >= 0 && !hosts_rank0) {
        close(store_fd);
        store_fd = -1;
    }
    return store_fd;
}

static void setup_ranks(struct dsl_agent *a, const struct dsl_msg *sm)
{
    a->grace = sm->grace;
    a->keepalive = sm->keepalive;
    a->nranks = sm->nranks;
    a->ranks = dsl_xcalloc((size_t)sm->nranks, sizeof(*a->ranks));
    a->state = AG_RUNNING;
    dsl_agent_progress_setup(&a->prog, sm->progress_tick, sm->nranks);
    for (int i = 0; i < sm->nranks; i++) {
        struct dsl_agent_rank *r = &a->ranks[i];
        r->rank = sm->ranks[i].rank;
        r->local_rank = sm->ranks[i].local_rank;
        r->fd[0] = r->fd[1] = r->fd[2] = -1;
        for (int s = 0; s < 3; s++)
            dsl_dynbuf_init(&r->part[s], LINE_MAX_BYTES * 2);
        r->reported = 0;
    }
}

/* The node's side of the ranks: their cgroups, their cores, their devices. */
static int prepare_node(struct dsl_agent *a, const struct dsl_msg *sm, struct start_plan *st,
                        char *err)
{
    int *ids = dsl_xcalloc((size_t)sm->nranks, sizeof(int));
    for (int i = 0; i < sm->nranks; i++)
        ids[i] = sm->ranks[i].rank;
    /* a stopped or wedged agent is fenced by its clean-up process (contain.c) when the
       launcher calls the node lost */
    dsl_contain_set_fence(&a->contain, a->keepalive, a->grace);
    int crc = dsl_contain_start(&a->contain, env_value(&sm->env, DSL_ENV_RUN_ID), ids,
                                sm->nranks, (unsigned long long)sm->mem_limit, err);
    dsl_log_mark("contained");
    free(ids);
    if (crc >= 0 && sm->cpubind)
        crc = plan_binding(sm, &st->bind, &st->per, err);
    /* under srun: the plan's device ids are places in the step's own GPU list */
    const char *plan_devices = env_value(&sm->env, DSL_ENV_CUDA_VISIBLE_DEVICES);
    if (crc >= 0 && node_devices && plan_devices)
        crc = dsl_devmap_apply(plan_devices, node_devices, &st->devices, err);
    return crc;
}

/* Ranks from..nranks cannot start: one spawnerr for the first, and every one of them
 * counts as exited with code; the node stops. */
static void fail_ranks(struct dsl_agent *a, int from, int code, const char *error)
{
    struct dsl_msg m;
    dsl_msg_init(&m, DSL_MSG_SPAWNERR);
    m.rank = a->ranks[from].rank;
    m.error = dsl_xstrdup(error);
    m.code = code;
    dsl_agent_send(a, &m);
    dsl_msg_release(&m);
    for (int j = from; j < a->nranks; j++) {
        a->ranks[j].exited = 1;
        a->ranks[j].code = code;
        a->ranks[j].reported = 1;
    }
    dsl_agent_begin_stop(a, SIGTERM, a->grace);
}

/* Rank i's environment: the agent's, the job's and the rank's entries, its devices,
 * its progress file, rank 0's store socket, its share of the cores' threads. */
static void rank_env(struct dsl_agent *a, const struct dsl_msg *sm, int i,
                     const struct start_plan *st, struct dsl_strvec *env)
{
    struct dsl_agent_rank *r = &a->ranks[i];
    dsl_strvec_pushv(env, (const char *const *)environ);
    apply_env(env, &sm->env);
    apply_env(env, &sm->ranks[i].env);
    if (st->devices)
        dsl_env_set(env, DSL_ENV_CUDA_VISIBLE_DEVICES, st->devices);
    dsl_agent_progress_rank(&a->prog, i, r->rank, env);
    if (r->rank == 0 && st->store_fd >= 0)
        dsl_strvec_pushf(env, DSL_ENV_STORE_FD "=%d", st->store_fd);
    if (st->bind && !env_value(&sm->env, DSL_ENV_OMP_NUM_THREADS)) {
        char t[16];
        snprintf(t, sizeof(t), "%d", st->per);
        dsl_env_set(env, DSL_ENV_OMP_NUM_THREADS, t);
    }
}

/* Fork every rank (their execs are awaited by await_execs); returns how many forked. */
static int fork_ranks(struct dsl_agent *a, const struct dsl_msg *sm, struct start_plan *st,
                      struct dsl_proc *procs, struct start_fail *f)
{
    for (int i = 0; i < sm->nranks; i++) {
        struct dsl_agent_rank *r = &a->ranks[i];
        struct dsl_strvec env, argv;
        dsl_strvec_init(&env);
        rank_env(a, sm, i, st, &env);
        cpu_set_t cores;
        CPU_ZERO(&cores);
        for (int k = 0; st->bind && k < st->per; k++)
            CPU_SET((size_t)st->bind[i * st->per + k], &cores);
        dsl_strvec_init(&argv);
        /* "--local_rank=N" goes before argv[local_rank_arg] (0: nowhere) */
        for (size_t k = 0; k <= sm->argv.nr; k++) {
            if (sm->local_rank_arg > 0 && (size_t)sm->local_rank_arg == k)
                dsl_strvec_pushf(&argv, "--local_rank=%d", r->local_rank);
            if (k < sm->argv.nr)
                dsl_strvec_push(&argv, sm->argv.v[k]);
        }
        struct dsl_spawn_opts so = {
            .argv = argv.v,
            .env = env.v,
            .cwd = sm->cwd[0] ? sm->cwd : NULL,
            .stdin_null = 1,
            .new_pgroup = 1,
            .pdeathsig = SIGKILL,
            .cgroup_procs = dsl_contain_procs(&a->contain, i),
            .keep_fd = r->rank == 0 && st->store_fd >= 0 ? st->store_fd : 0,
            .affinity = st->bind ? &cores : NULL,
            .affinity_size = sizeof(cores),
        };
        so.cgroup_fd = dsl_contain_cgroup_fd(&a->contain, i, &so.cgroup_fd_procs);
        r->t_start = dsl_now();
        int rc = dsl_spawn_begin(&procs[i], &so, f->err);
        dsl_strvec_release(&env);
        dsl_strvec_release(&argv);
        if (r->rank == 0 && st->store_fd >= 0) {
            close(st->store_fd); /* rank 0 has it now (or failed to start) */
            st->store_fd = -1;
        }
        if (rc < 0) {
            f->at = i;
            f->rc = rc;
            return i;
        }
    }
    return sm->nranks;
}

/* Every rank is forked: now their execs, which ran side by side, in rank order. */
static void await_execs(struct dsl_agent *a, const struct dsl_msg *sm, struct dsl_proc *procs,
                        int forked, struct start_fail *f)
{
    for (int i = 0; i < forked; i++) {
        struct dsl_agent_rank *r = &a->ranks[i];
        char err[DSL_ERR_LEN];
        int rc = dsl_spawn_end(&procs[i], sm->argv.v[0], err);
        if (rc < 0 && (f->at < 0 || i < f->at)) {
            f->at = i;
            f->rc = rc;
            memcpy(f->err, err, sizeof(f->err));
        }
        if (f->at >= 0 && i > f->at) {
            /* after a rank that could not start: as when they were started one by one,
               this one never runs (it is reaped as the subreaper's, unreported) */
            if (rc == 0) {
                kill(-procs[i].pid, SIGKILL);
                kill(procs[i].pid, SIGKILL);
                close(procs[i].out_fd);
                close(procs[i].err_fd);
            }
            continue;
        }
        if (rc < 0)
            continue;
        r->pid = procs[i].pid;
        dsl_contain_started(&a->contain, i, r->pid);
        dsl_agent_progress_started(&a->prog, i, r->pid);
        r->fd[1] = procs[i].out_fd;
        r->fd[2] = procs[i].err_fd;
        struct dsl_msg m;
        dsl_msg_init(&m, DSL_MSG_STARTED);
        m.rank = r->rank;
        m.pid = (int)r->pid;
        dsl_agent_send(a, &m);
        dsl_msg_release(&m);
    }
}

void dsl_agent_handle_start(struct dsl_agent *a, const struct dsl_msg *sm)
{
    dsl_log_mark("start");
    struct start_plan st = {.store_fd = take_store_fd(a, sm)};
    setup_ranks(a, sm);
    char cerr[DSL_ERR_LEN];
    int started = prepare_node(a, sm, &st, cerr) >= 0;
    if (!started) {
        /* the node could not set its ranks up (cgroups, core binding, devices): not a
         * missing program (127), a node that does not match the plan */
        fail_ranks(a, 0, DSL_EXIT_PREFLIGHT, cerr);
    } else {
        /* each rank forked first, then the execs awaited (dsl_spawn_begin/_end): the
           children set up and exec side by side, not one wait for the scheduler each */
        struct dsl_proc *procs = dsl_xcalloc((size_t)sm->nranks, sizeof(*procs));
        struct start_fail f = {.at = -1};
        int forked = fork_ranks(a, sm, &st, procs, &f);
        await_execs(a, sm, procs, forked, &f);
        free(procs);
        if (f.at >= 0)
            fail_ranks(a, f.at, spawn_exit_code(f.rc), f.err);
    }
    if (st.store_fd >= 0)
        close(st.store_fd);
    free(st.bind);
    free(st.devices);
    if (started)
        dsl_log_mark("ranks started");
}

/* ---- probe: hold or pick the master port, test reachability, find the route ---- */


void dsl_agent_handle_probe(struct dsl_agent *a, const struct dsl_msg *pm)
{
    struct dsl_msg m;
    dsl_msg_init(&m, DSL_MSG_PROBED);
    double t_recv = dsl_facts_realtime();
    char err[DSL_ERR_LEN] = "";
    if (a->probe_lfd >= 0) {
        close(a->probe_lfd);
        a->probe_lfd = -1;
    }
    if (pm->port > 0) {
        /* backlog as the store's: ranks may queue here before rank 0 takes it over */
        const char *bind = pm->bind;
        int fd = dsl_net_listen(bind, pm->port, 1024, err);
        if (fd == -EADDRNOTAVAIL || fd == -EINVAL) { /* not an address of this node */
            bind = NULL;
            fd = dsl_net_listen(NULL, pm->port, 1024, err);
        }
        if (fd < 0 && pm->pick) {
            m.port_busy = 1;
            fd = dsl_net_listen(bind, 0, 1024, err);
        } else if (fd < 0) {
            m.port_busy = 1;
        }
        if (fd >= 0) {
            a->probe_lfd = fd;
            m.port = dsl_net_local_port(fd);
        }
    }
    m.nreach = (int)pm->connect.nr;
    m.reach = dsl_xcalloc(pm->connect.nr + 1, sizeof(int));
    int first = -1;
    for (size_t i = 0; i < pm->connect.nr; i++) {
        int fd = dsl_net_connect(pm->connect.v[i], pm->cport, 3.0, err);
        if (fd >= 0) {
            close(fd);
            m.reach[i] = 1;
            if (first < 0)
                first = (int)i;
        }
    }
    char ifname[64] = "", src[64] = "";
    if (pm->connect.nr) {
        const char *dest = pm->connect.v[first >= 0 ? first : 0];
        dsl_netinfo_route(dest, ifname, sizeof(ifname), src, sizeof(src), err);
    }
    m.iface = dsl_xstrdup(ifname);
    m.src = dsl_xstrdup(src);
    struct stat st;
    m.cwd_ok = pm->cwd[0] == '\0' || (stat(pm->cwd, &st) == 0 && S_ISDIR(st.st_mode));
    m.program_ok = 1;
    m.detail = dsl_xstrdup("");
    if (pm->program[0]) {
        /* as the rank's exec will: this environment with the export set applied */
        struct dsl_strvec env;
        dsl_strvec_init(&env);
        dsl_strvec_pushv(&env, (const char *const *)environ);
        apply_env(&env, &pm->env);
        int code;
        char *path = dsl_spawn_resolve(pm->program, env.v,
                                       m.cwd_ok && pm->cwd[0] ? pm->cwd : NULL, &code, err);
        dsl_strvec_release(&env);
        if (!path) {
            m.program_ok = 0;
            free(m.detail);
            m.detail = dsl_xstrdup(err);
        } else if (pm->script && m.cwd_ok &&
                   dsl_spawn_check_script(pm->script, pm->cwd[0] ? pm->cwd : NULL, err) < 0) {
            m.program_ok = 0; /* python3 is there, the script it would run is not */
            free(m.detail);
            m.detail = dsl_xstrdup(err);
        } else {
            free(m.detail); /* found: the path, for the launcher's comparison (a venv) */
            m.detail = path;
            path = NULL;
        }
        free(path);
    }
    if (!m.cwd_ok) {
        free(m.detail);
        m.detail = dsl_xasprintf("working directory '%s' does not exist", pm->cwd);
    }
    if (pm->diag) {
        /* dslaunch doctor: facts and this node's clock at request and reply */
        m.facts = dsl_xmalloc(sizeof(*m.facts));
        dsl_facts_init(m.facts);
        dsl_facts_collect(m.facts, m.cwd_ok ? pm->cwd : NULL, pm->ld_path);
        m.facts->t_recv = t_recv;
        m.facts->t_send = dsl_facts_realtime();
    }
    dsl_agent_send(a, &m);
    dsl_msg_release(&m);
}
