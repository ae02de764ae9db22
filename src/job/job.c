/*
 * Running a job: the launcher's fan-out and supervision loop.
 *
 * Theory of operation. One thread runs one poll() loop (job_loop.c), so no node's
 * state needs a lock; each pass rebuilds the poll set from the nodes in flight. Per node
 * the state moves
 *
 *   PENDING -> CONNECTING -> HELLO -> READY -> RUNNING -> EXITED
 *                    \           \        \         \--> FAILED
 *
 * with timestamps, so the watchdog is "state x elapsed time -> action": a node stuck in
 * CONNECTING or HELLO past --connect-timeout fails as unreachable; a RUNNING node
 * silent for --keepalive seconds fails as lost, on every transport (a local agent
 * that is stopped or wedged is as silent as a remote one whose host died). At most
 * --fanout nodes are in CONNECTING at once.
 *
 * Phases of the job, in order:
 *   connect   every agent says hello (version, cpus, gpus, interfaces)
 *   preflight versions equal, slots within GPU counts; for multi-node jobs the probe:
 *             node 0 holds the master port (or picks a free one), every other node
 *             test-connects to node 0's addresses, the first address every node reached
 *             becomes MASTER_ADDR, and each node reports the interface that routes there
 *             (NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME unless the user set them); the
 *             program and the working directory are checked on every node
 *   start     each agent gets its ranks' argv and env as data
 *   run       output lines are printed with a rank prefix (and logged), exits recorded
 *   stop      the first failure anywhere (rank exit != 0, killed rank, lost node) or a
 *             signal to the launcher sends "stop" (SIGTERM, or the signal received) to
 *             every agent; agents SIGKILL after the grace; after grace + 5 s the launcher
 *             closes every channel, which makes agents kill whatever is left
 *
 * Signals: SIGINT/SIGTERM/SIGHUP only set a flag. The first forwards that signal to every
 * rank with the normal grace; a second SIGINT kills at once. Such a stop exits 128 + the
 * signal (unless a rank or node had failed first) with a calm summary, whatever the
 * ranks do on the way down. SIGPIPE is ignored: EPIPE on stdout or stderr (the reader
 * went away) stops the job the same way and exits 141. If the launcher itself is
 * SIGKILLed, every agent sees EOF and stops its ranks with the job's grace.
 *
 * Console: from the start of dsl_job_run() to its end, stdout and stderr (rank lines,
 * and the launcher's own messages through the log sink) are queued and written without
 * blocking (output.c), within --output-buffer; what is left is written at the end,
 * waiting for the reader, once every node is done, and lines dropped meanwhile are
 * counted in one warning.
 *
 * This file holds the phases; sending, receiving, the poll pass and the signal flag are
 * job_loop.c's, which the preflight (job_preflight.c) uses as well.
 */
#define _GNU_SOURCE /* pipe2 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/envnames.h"
#include "dslaunch/common/file.h"
#include "dslaunch/job/job.h"
#include "dslaunch/remote/join.h"
#include "dslaunch/proto/cause.h"
#include "errfold.h"
#include "job_hang.h"
#include "job_impl.h"
#include "logdir.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/rankenv.h"
#include "dslaunch/common/spawn.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

/* the agent the nodes on this machine run (dsl_job_set_agent) */
static int (*local_agent)(int in_fd, int out_fd);

void dsl_job_set_agent(int (*agent_main)(int in_fd, int out_fd))
{
    local_agent = agent_main;
}

void dsl_job_init(struct dsl_job *job, struct dsl_plan *p)
{
    memset(job, 0, sizeof(*job));
    job->plan = p;
    job->opts = p->opts;
    job->pl = &p->pl;
    job->failed_rank = -1;
    job->failed_node = -1;
}

void dsl_job_release(struct dsl_job *job)
{
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        if (n->conn.priv && n->conn.ops)
            n->conn.ops->close(&n->conn);
        free(n->conn.host);
        free(n->conn.user);
        dsl_linebuf_release(&n->in);
        dsl_dynbuf_release(&n->outq);
        dsl_msg_release(&n->hello);
        dsl_msg_release(&n->probed);
        free(n->iface);
    }
    free(job->nodes);
    for (int i = 0; i < job->nranks; i++) {
        dsl_strvec_release(&job->ranks[i].tail);
        if (job->ranks[i].log)
            fclose(job->ranks[i].log);
        free(job->ranks[i].log_path);
        free(job->ranks[i].pending_cr);
    }
    free(job->ranks);
    dsl_job_hang_release(job);
    if (job->fold)
        dsl_errfold_release(job->fold);
    free(job->fold);
    job->fold = NULL;
    memset(job, 0, sizeof(*job));
}


static void open_pending(struct dsl_job *job, char *const *remote_argv, char *const *local_argv)
{
    int connecting = 0;
    for (int i = 0; i < job->nnodes; i++)
        connecting += job->nodes[i].state == DSL_NODE_CONNECTING;
    for (int i = 0; i < job->nnodes && connecting < job->opts->fanout; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        if (n->state != DSL_NODE_PENDING)
            continue;
        n->t_start = dsl_now();
        n->last_rx = n->t_start;
        int r = n->conn.ops->open(&n->conn, &job->opts->tr, n->local ? local_argv : remote_argv);
        if (r < 0 || n->conn.state == DSL_CONN_FAILED) {
            n->state = DSL_NODE_FAILED;
            n->err_code = n->conn.err_code ? n->conn.err_code : r;
            snprintf(n->err, sizeof(n->err), "%s", n->conn.err);
            continue;
        }
        n->state = n->conn.state == DSL_CONN_OPEN ? DSL_NODE_HELLO : DSL_NODE_CONNECTING;
        connecting += n->state == DSL_NODE_CONNECTING;
    }
}

static const char *conn_state_name(enum dsl_conn_state s)
{
    switch (s) {
    case DSL_CONN_PENDING: return "pending";
    case DSL_CONN_CONNECTING: return "connecting";
    case DSL_CONN_AUTHENTICATING: return "authenticating";
    case DSL_CONN_STARTING: return "starting agent";
    case DSL_CONN_OPEN: return "waiting for agent";
    case DSL_CONN_CLOSED: return "closed";
    case DSL_CONN_FAILED: return "failed";
    }
    return "?";
}

/* Wait until every node has said hello (or failed). 0, or the exit code. */
static int phase_connect(struct dsl_job *job, int sig_rfd, char *const *remote_argv,
                         char *const *local_argv)
{
    double t0 = dsl_now(), next_progress = t0 + 2.0;
    for (;;) {
        open_pending(job, remote_argv, local_argv);
        dsl_job_handle_signals(job);
        if (job->stopping)
            return job->exit_code ? job->exit_code : 130;
        int waiting = 0, ready = 0;
        double now = dsl_now();
        struct dsl_job_node *slow = NULL;
        for (int i = 0; i < job->nnodes; i++) {
            struct dsl_job_node *n = &job->nodes[i];
            if (n->state == DSL_NODE_READY) {
                ready++;
                continue;
            }
            if (n->state == DSL_NODE_FAILED)
                continue;
            if (n->eof) {
                dsl_job_node_fail(job, n, DSL_EREMOTE,
                                  "node agent on '%s' exited before saying hello%s%s",
                                  n->pn->host, n->conn.err[0] ? ": " : "", n->conn.err);
                continue;
            }
            if (n->state != DSL_NODE_PENDING && now - n->t_start > job->opts->tr.connect_timeout) {
                dsl_job_node_fail(job, n, DSL_ETIMEDOUT,
                                  "cannot reach '%s': no answer within %.0f s (%s)",
                                  n->pn->host, job->opts->tr.connect_timeout,
                                  conn_state_name(n->conn.state));
                if (n->conn.priv)
                    n->conn.ops->close(&n->conn);
                continue;
            }
            waiting++;
            if (!slow || n->t_start < slow->t_start)
                slow = n;
        }
        if (!waiting)
            break;
        if (now >= next_progress && slow && job->opts->verbose) {
            dsl_info("connected %d/%d, waiting on %s (%s, %.1f s)", ready, job->nnodes,
                     slow->pn->host, conn_state_name(slow->conn.state), now - slow->t_start);
            next_progress = now + 2.0;
        }
        dsl_job_pump(job, sig_rfd, 100);
    }
    int failed = 0, code = 0;
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        if (n->state != DSL_NODE_FAILED)
            continue;
        if (!failed)
            dsl_error("cannot start the job: %s unreachable or refused", "some hosts are");
        failed++;
        dsl_job_eprintf(job, "  %-20s %s\n", n->pn->host,
                        n->err[0] ? n->err : dsl_strerror(n->err_code));
        int c = n->err_code == DSL_EAUTH ? DSL_EXIT_AUTH
                : (n->err_code == DSL_ECONNECT || n->err_code == DSL_ETIMEDOUT ||
                   n->err_code == -ECONNREFUSED || n->err_code == -EHOSTUNREACH)
                    ? DSL_EXIT_UNREACHABLE
                : (n->err_code == -ENOENT || n->err_code == -EACCES)
                    ? DSL_EXIT_PREFLIGHT /* no dslaunch on that node: a mismatch */
                    : DSL_EXIT_AGENT;
        if (!code || c == DSL_EXIT_AUTH)
            code = c;
    }
    if (failed)
        dsl_error("nothing was started");
    return code;
}

static void build_start(struct dsl_job *job, struct dsl_job_node *n, struct dsl_msg *m)
{
    const struct dsl_node *pn = n->pn;
    dsl_msg_init(m, DSL_MSG_START);
    m->node_rank = pn->node_rank;
    m->host_label = dsl_xstrdup(pn->host);
    m->cwd = dsl_xstrdup(job->plan->cwd);
    m->grace = job->opts->term_timeout;
    m->keepalive = job->opts->tr.keepalive;
    m->mem_limit = (double)job->opts->rank_memory_limit;
    for (size_t i = 0; i < job->plan->argv.nr; i++)
        dsl_strvec_push(&m->argv, job->plan->argv.v[i]);
    for (size_t i = 0; i < job->plan->exported.nr; i++)
        dsl_strvec_push(&m->env, job->plan->exported.v[i]);
    char devs[4096] = "";
    size_t dl = 0;
    for (int s = 0; s < pn->nslots && dl < sizeof(devs) - 16; s++)
        dl += (size_t)snprintf(devs + dl, sizeof(devs) - dl, "%s%d", s ? "," : "", pn->slots[s]);
    struct dsl_rankenv re = {
        .world_size = job->pl->world_size,
        .local_world_size = pn->nslots,
        .node_rank = pn->node_rank,
        .nnodes = job->pl->nr,
        .master_addr = job->plan->master_addr,
        .master_port = job->plan->master_port,
        .cuda_visible_devices = job->plan->no_devices ? job->plan->no_devices : devs,
        .run_id = job->plan->run_id,
        .run_token = job->plan->token,
        .restart_count = job->restart_count,
        .max_restarts = job->opts->max_restarts,
    };
    dsl_rankenv_export(&re, DSL_RANKENV_NODE, &m->env);
    if (n->iface) {
        if (!dsl_env_get(&job->plan->exported, DSL_ENV_NCCL_SOCKET_IFNAME))
            dsl_strvec_pushf(&m->env, DSL_ENV_NCCL_SOCKET_IFNAME "=%s", n->iface);
        if (!dsl_env_get(&job->plan->exported, DSL_ENV_GLOO_SOCKET_IFNAME))
            dsl_strvec_pushf(&m->env, DSL_ENV_GLOO_SOCKET_IFNAME "=%s", n->iface);
    }
    m->cpubind = job->opts->bind_cores;
    if (job->opts->bind_core_list)
        m->core_list = dsl_xstrdup(job->opts->bind_core_list);
    /* with binding, the agent sets it to each rank's share of the cores */
    if (!dsl_env_get(&job->plan->exported, DSL_ENV_OMP_NUM_THREADS) && !m->cpubind)
        dsl_strvec_pushf(&m->env, DSL_ENV_OMP_NUM_THREADS "=%d",
                         dsl_rankenv_omp_share(n->hello.cpus, pn->nslots));
    m->ranks = dsl_xcalloc((size_t)pn->nslots, sizeof(*m->ranks));
    for (int s = 0; s < pn->nslots; s++) {
        struct dsl_rank_spec *rs = &m->ranks[m->nranks++];
        rs->rank = pn->first_rank + s;
        rs->local_rank = s;
        dsl_strvec_init(&rs->env);
        re.rank = rs->rank;
        re.local_rank = s;
        dsl_rankenv_export(&re, DSL_RANKENV_RANK, &rs->env);
    }
    m->local_rank_arg = job->plan->local_rank_at;
    dsl_job_hang_start_msg(job, m);
}

/* The transport for hosts that are not this machine. */
static const struct dsl_transport_ops *transport_for(enum dsl_launcher_kind k)
{
#ifdef DSL_HAVE_SSH_TRANSPORT
    if (k == DSL_LAUNCHER_AUTO || k == DSL_LAUNCHER_SSH)
        return &dsl_transport_ssh;
#endif
#ifdef DSL_HAVE_PDSH_TRANSPORT
    if (k == DSL_LAUNCHER_PDSH)
        return &dsl_transport_pdsh;
#endif
#ifdef DSL_HAVE_OPENMPI_TRANSPORT
    if (k == DSL_LAUNCHER_OPENMPI)
        return &dsl_transport_openmpi;
#endif
    if (k == DSL_LAUNCHER_SLURM)
        return &dsl_transport_slurm;
    (void)k;
    return NULL;
}

static int all_ranks_done(struct dsl_job *job)
{
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        if (n->state != DSL_NODE_EXITED && n->state != DSL_NODE_FAILED)
            return 0;
    }
    return 1;
}

/*
 * The job is over: write what the console still holds (waiting for its readers, as any
 * program would; a signal now has its default effect), then say what was dropped.
 */
static void close_console(struct dsl_job *job)
{
    struct dsl_output *o = job->out;
    dsl_output_drain(o);
    dsl_log_set_sink(NULL, NULL);
    job->out = NULL;
    for (int i = 0; i < o->ndest; i++)
        if (o->dest[i].dropped)
            dsl_warn("%zu output line%s dropped because %s was not read; %s",
                     o->dest[i].dropped, o->dest[i].dropped == 1 ? " was" : "s were",
                     o->dest[i].name,
                     job->opts->log_dir ? "--log-dir has them all"
                                        : "--log-dir would keep them all");
    dsl_output_close(o);
}

/*
 * An attempt that started no rank (a preflight that failed, --check) leaves no log
 * files: its empty ones are removed, so that the rerun after the fix is not refused as
 * another run's logs (logdir.h). Only a file that is still the one opened and empty.
 */
static void drop_unused_logs(struct dsl_job *job)
{
    for (int i = 0; i < job->nranks; i++) {
        struct dsl_job_rank *r = &job->ranks[i];
        struct stat a, b;
        if (!r->log || !r->log_path)
            continue;
        if (fstat(fileno(r->log), &a) == 0 && a.st_size == 0 &&
            lstat(r->log_path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            unlink(r->log_path);
        fclose(r->log);
        r->log = NULL;
    }
}

/* One entry per rank of the placement, in rank order. */
static void setup_ranks(struct dsl_job *job)
{
    job->nranks = job->pl->world_size;
    job->ranks = dsl_xcalloc((size_t)job->nranks, sizeof(*job->ranks));
    for (int i = 0; i < job->pl->nr; i++)
        for (int s = 0; s < job->pl->nodes[i].nslots; s++) {
            struct dsl_job_rank *r = &job->ranks[job->pl->nodes[i].first_rank + s];
            r->rank = job->pl->nodes[i].first_rank + s;
            r->node = i;
            r->local_rank = s;
            r->device = job->pl->nodes[i].slots[s];
            dsl_strvec_init(&r->tail);
            r->last_cr_shown = -1e9;
        }
    dsl_job_hang_init(job);
}

/* --log-dir: one new file per rank of this attempt. 0 or an exit code. */
static int open_logs(struct dsl_job *job)
{
    if (!job->opts->log_dir)
        return 0;
    /* ours and writable by no one else, so nothing in it was planted
     * (dsl_dir_open_private, file.h); one new file per rank per attempt, and an
     * earlier run's files refused before the first one, or removed with
     * --log-dir-overwrite (logdir.h) */
    char lerr[DSL_ERR_LEN];
    int dfd = dsl_dir_open_private(job->opts->log_dir, lerr);
    int requeue = dsl_logdir_requeue();
    if (dfd >= 0 && job->restart_count == 0) {
        int r = dsl_logdir_claim(dfd, job->opts->log_dir, requeue,
                                 job->opts->log_dir_overwrite, lerr);
        if (r < 0) {
            close(dfd);
            dfd = r;
        }
    }
    if (dfd < 0) {
        dsl_error("--log-dir: %s", lerr);
        return DSL_EXIT_USAGE;
    }
    int code = 0;
    for (int i = 0; i < job->nranks && code == 0; i++) {
        char *name = dsl_logdir_rank_name(i, requeue, job->restart_count);
        char *path = dsl_xasprintf("%s/%s", job->opts->log_dir, name);
        int fd = dsl_file_create(dfd, name, path, 0644, DSL_FILE_FAIL, lerr);
        free(name);
        if (fd >= 0 && !(job->ranks[i].log = fdopen(fd, "a"))) {
            snprintf(lerr, sizeof(lerr), "cannot write log file '%s': %s", path,
                     strerror(errno));
            close(fd);
        }
        if (!job->ranks[i].log) {
            dsl_error("--log-dir: %s", lerr);
            code = DSL_EXIT_USAGE;
            free(path);
        } else {
            job->ranks[i].log_path = path;
        }
    }
    close(dfd);
    return code;
}

/* One entry per node with the transport that reaches its agent. 0 or an exit code. */
static int setup_nodes(struct dsl_job *job)
{
    job->nnodes = job->pl->nr;
    job->nodes = dsl_xcalloc((size_t)job->nnodes, sizeof(*job->nodes));
    /* auto with the hosts of a Slurm allocation: one srun step, this node's agent too */
    enum dsl_launcher_kind kind = job->opts->launcher;
    if (kind == DSL_LAUNCHER_AUTO && !strcmp(dsl_plan_launcher_name(job->plan), "slurm"))
        kind = DSL_LAUNCHER_SLURM;
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        n->pn = &job->pl->nodes[i];
        n->local = kind == DSL_LAUNCHER_LOCAL ||
                   (kind == DSL_LAUNCHER_AUTO && dsl_node_is_local(n->pn));
        if (job->plan->nossh.on) /* no-ssh: node 0 is here, the others dialled in */
            n->local = dsl_join_rank_of(n->pn->host) < 0;
        n->conn.host = dsl_xstrdup(n->pn->host);
        n->conn.user = n->pn->user ? dsl_xstrdup(n->pn->user) : NULL;
        dsl_linebuf_init(&n->in);
        dsl_dynbuf_init(&n->outq, DSL_JOB_OUTQ_MAX);
        dsl_msg_init(&n->hello, 0);
        dsl_msg_init(&n->probed, 0);
        if (n->local) {
            n->conn.ops = &dsl_transport_local;
            if (!local_agent) {
                dsl_error("host '%s' is this machine, and this program cannot run a node "
                          "agent itself", n->pn->host);
                return DSL_EXIT_USAGE;
            }
            n->conn.agent_main = local_agent;
        } else {
            const struct dsl_transport_ops *ops =
                job->plan->nossh.on ? &dsl_transport_joined : transport_for(kind);
            if (!ops) {
                dsl_error("host '%s' is not this machine, and this dslaunch was built without "
                          "the %s transport", n->pn->host,
                          dsl_plan_launcher_name(job->plan));
                return DSL_EXIT_USAGE;
            }
            n->conn.ops = ops;
        }
    }
    return 0;
}

/* Preflight on the connected agents: hellos, then the probe (or, for a job on this
 * machine, the master port's reservation). 0 or an exit code. */
static int preflight(struct dsl_job *job, int sig_rfd)
{
    int code;
    if ((code = dsl_job_check_hellos(job)) != 0)
        return code;
    if (!job->plan->all_local || job->opts->mode == DSL_MODE_CHECK) {
        if ((code = dsl_job_probe(job, sig_rfd)) != 0)
            return code;
    } else if (dsl_plan_rank0_takes_port(job->plan)) {
        if ((code = dsl_job_reserve_port(job, sig_rfd)) != 0)
            return code;
    }
    if (job->opts->mode == DSL_MODE_CHECK || (job->opts->verbose >= 2) ||
        (!job->plan->all_local && job->opts->verbose >= 1))
        dsl_job_print_preflight(job);
    return 0;
}

static void send_starts(struct dsl_job *job)
{
    job->started = 1;
    for (int i = 0; i < job->nnodes; i++) {
        struct dsl_msg m;
        build_start(job, &job->nodes[i], &m);
        dsl_job_node_send(&job->nodes[i], &m);
        dsl_job_node_flush(&job->nodes[i]);
        dsl_msg_release(&m);
        job->nodes[i].state = DSL_NODE_RUNNING;
        job->nodes[i].last_rx = dsl_now();
    }
}

/* Supervise until every rank is done, or a stop outlived its grace. */
static void supervise(struct dsl_job *job, int sig_rfd)
{
    for (;;) {
        dsl_job_check_paused(job, 0); /* before a silent node is blamed for our pause */
        dsl_job_handle_signals(job);
        dsl_job_watch_tick(job);
        double now = dsl_now();
        if (all_ranks_done(job))
            break;
        for (int i = 0; i < job->nnodes; i++) {
            struct dsl_job_node *n = &job->nodes[i];
            /* the local transport too: its agent cannot lose a network, but it can stop
               (SIGSTOP, a debugger, a wedged loop), and then nothing else would tell */
            if (n->state != DSL_NODE_RUNNING)
                continue;
            if (job->opts->tr.keepalive > 0 && now - n->last_tx > job->opts->tr.keepalive / 3) {
                struct dsl_msg m;
                dsl_msg_init(&m, DSL_MSG_PING);
                dsl_job_node_send(n, &m);
            }
            if (job->opts->tr.keepalive > 0 && now - n->last_rx > job->opts->tr.keepalive)
                dsl_job_node_fail(job, n, DSL_ETIMEDOUT,
                                  "no word from '%s' for %.1f s (host down or network lost)",
                                  n->pn->host, now - n->last_rx);
        }
        if (job->stopping && now - job->t_stop > job->opts->term_timeout + 5.0) {
            dsl_warn("some nodes did not confirm the stop within %.0f s; closing their channels",
                     job->opts->term_timeout + 5.0);
            break;
        }
        dsl_job_pump(job, sig_rfd, 200);
    }
}

/* Closing the channels makes every agent kill whatever is left and exit. */
static void close_channels(struct dsl_job *job)
{
    for (int i = 0; job->nodes && i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        if (n->conn.priv && n->conn.state == DSL_CONN_OPEN) {
            if (n->state != DSL_NODE_EXITED && n->state != DSL_NODE_FAILED) {
                struct dsl_msg m;
                dsl_msg_init(&m, DSL_MSG_STOP);
                m.sig = SIGKILL;
                dsl_job_node_send(n, &m);
                dsl_job_node_flush(n);
            }
            n->conn.ops->close_write(&n->conn);
        }
    }
    for (int i = 0; job->nodes && i < job->nnodes; i++) {
        struct dsl_job_node *n = &job->nodes[i];
        if (n->conn.priv)
            n->conn.ops->close(&n->conn);
    }
}

int dsl_job_run(struct dsl_job *job)
{
    int code = 0;
    int sp[2] = {-1, -1};
    struct dsl_strvec remote_argv;
    dsl_strvec_init(&remote_argv);
    job->t_begin = dsl_now();

    if (pipe2(sp, O_CLOEXEC | O_NONBLOCK) < 0) {
        dsl_error("cannot create pipe: %s", strerror(errno));
        return DSL_EXIT_AGENT;
    }
    struct dsl_output console;
    fflush(stdout);
    fflush(stderr);
    dsl_output_open(&console, STDOUT_FILENO, STDERR_FILENO, job->opts->output_buffer);
    job->tty[1] = isatty(STDOUT_FILENO);
    job->tty[2] = isatty(STDERR_FILENO);
    job->out = &console;
    dsl_log_set_sink(dsl_job_log_sink, job);
    dsl_job_signals_catch(sp[1]);

    dsl_strvec_push(&remote_argv,
                    job->opts->remote_dslaunch ? job->opts->remote_dslaunch : job->plan->self_exe);
    dsl_strvec_push(&remote_argv, "--agent");

    setup_ranks(job);
    if ((code = open_logs(job)) != 0 || (code = setup_nodes(job)) != 0)
        goto out;
    dsl_log_mark("plan");
    code = phase_connect(job, sp[0], remote_argv.v, NULL /* local agents run in the forked child */);
    dsl_log_mark("hellos");
    if (job->inspect) {
        code = job->inspect(job, sp[0], code, job->inspect_arg);
        goto out;
    }
    if (code != 0 || (code = preflight(job, sp[0])) != 0)
        goto out;
    if (job->opts->mode == DSL_MODE_CHECK) {
        dsl_job_eprintf(job, "preflight ok: %d node(s), %d rank(s)\n", job->nnodes, job->nranks);
        goto out;
    }
    send_starts(job);
    dsl_log_mark("start sent");
    supervise(job, sp[0]);
    dsl_log_mark("byes");
    dsl_job_summary(job);
    code = job->exit_code;

out:
    close_channels(job);
    dsl_log_mark("channels closed");
    dsl_job_signals_restore();
    close(sp[0]);
    close(sp[1]);
    dsl_strvec_release(&remote_argv);
    if (!job->started)
        drop_unused_logs(job);
    close_console(job);
    return code;
}
