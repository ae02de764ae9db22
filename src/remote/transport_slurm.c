/*
 * The Slurm transport (--launcher slurm, and auto for the hosts of a Slurm allocation):
 * one srun job step starts one node agent per host, and the agents connect back to the
 * launcher on the sealed channel of connectback.h, as with pdsh and mpirun.
 *
 * Theory of operation. Every open() in the same pass of the fan-out loop joins the
 * current batch (as in transport_openmpi.c, whose structure this follows); the batch's
 * first progress() forks the srun line of srun.h:
 *
 *   srun --nodes=N --ntasks=N --ntasks-per-node=1 --kill-on-bad-exit=1
 *        --nodelist=H0,..,Hn-1 --job-name=dslaunch [--launcher_args words]
 *        dslaunch --agent --slurm-nodes H0,..,Hn-1 --connect A:P,.. --launcher-key L
 *
 * srun execs that argv on every node (no shell anywhere: no user path or value is ever
 * split or interpreted). Slurm orders a step's tasks by its own node order, not by
 * --nodelist, so the agent takes its index from its SLURMD_NODENAME's place in
 * --slurm-nodes (dsl_slurm_agent_prepare), prints "DSLCB2-KEY i A" on its stdout, which
 * srun forwards to our pipe, and dials back; connection i then expects A, and the
 * handshake (L being the batch's key pair) proves both ends. The plan, env and argv
 * travel sealed over the socket, never on srun's command line. The agent also drops the
 * step's own SLURM_* variables (task id, step id, tasks per node of the step), which
 * describe the agents' step and would mislead the ranks.
 *
 * Wake-ups, failure before connect-back (srun's "error:" lines are the reason) and
 * close are as in transport_openmpi.c. --kill-on-bad-exit ends the step when one agent
 * fails; a SIGTERM to srun is forwarded by srun to every agent, which stops its ranks.
 * srun is the leader of its own process group and gets SIGTERM if the launcher dies.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/remote/connectback.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/plan/srun.h"
#include "dslaunch/common/banned.h"

#define SRUN_OUT_MAX 16384

extern char **environ;

struct srun_batch {
    int refs;
    int launched;
    pid_t pid;             /* srun, own process group; 0 once reaped */
    int status;
    int outfd, pidfd;
    int evfd;              /* readable: launch me; drained at launch, readable again for
                              good once srun ended or could not be started */
    int epfd;              /* {evfd, outfd, pidfd}; in every conn's set */
    unsigned char lpriv[DSL_SEAL_KEY_LEN];
    char lhex[2 * DSL_SEAL_KEY_LEN + 1]; /* the public key, for the agents' --launcher-key */
    struct dsl_strvec hosts, agent_argv;
    struct srun_priv **conns; /* by index; NULL once closed */
    int aconns;
    struct dsl_cb_keys keys; /* the agents' key lines, by index (from the launch on) */
    char *launcher_args;   /* --launcher_args, or NULL */
    struct dsl_dynbuf out; /* srun's output, tail only */
    int failed_launch;
};

struct srun_priv {
    struct srun_batch *b;
    int index;
    int epfd;
    int expecting;          /* its key is registered with the listener */
    struct dsl_cb_stream st; /* fd -1 until taken */
    double connect_timeout;
};

static struct dsl_cb_listener *shared_l; /* while any connection holds a reference */
static struct srun_batch *open_batch; /* the batch that open() currently adds to */

/* srun ended or never started: wake every connection of the batch, for good. */
static void batch_ended(struct srun_batch *b)
{
    if (b->evfd >= 0)
        (void)eventfd_write(b->evfd, 1);
}

static void epoll_add(int epfd, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (fd >= 0)
        epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

/*
 * Read srun's output. A key line found here may belong to any connection of the
 * batch: its key is registered at once and its ready fd put into that connection's
 * set, so the owner wakes when its socket is (or was already) there.
 */
static void batch_drain(struct srun_batch *b)
{
    dsl_cb_drain_tail(&b->outfd, &b->out, SRUN_OUT_MAX, b->keys.n ? &b->keys : NULL);
    for (int i = 0; i < b->keys.n; i++) {
        struct srun_priv *p = b->conns[i];
        if (!p || p->expecting || p->st.fd >= 0 || !b->keys.have[i])
            continue;
        p->expecting = 1;
        int ready = dsl_cb_listener_expect(shared_l, b->keys.key[i]);
        if (p->epfd >= 0)
            epoll_add(p->epfd, ready);
    }
}

/* Lines of srun's output that say why the step or an agent did not start. */
static int out_line_is_reason(const char *e, size_t n)
{
    static const char *const needles[] = {"error:", "fatal:", "not found", "No such file",
                                          "Permission denied", "Unable to"};
    for (size_t i = 0; i < sizeof(needles) / sizeof(needles[0]); i++) {
        size_t k = strlen(needles[i]);
        for (size_t j = 0; j + k <= n; j++)
            if (!memcmp(e + j, needles[i], k))
                return 1;
    }
    return 0;
}

/*
 * srun's output for a message: blank lines dropped, lines joined with "; ", the reason
 * lines (srun's and the agents' errors) alone when there are any, the first ones kept;
 * else the last len-1 bytes.
 */
static void out_summary(const char *text, char *tail, size_t len)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 1 << 16);
    int reasons = 0;
    for (int pass = 0; pass < 2; pass++) {
        const char *e = text;
        while (*e) {
            size_t n = strcspn(e, "\n");
            size_t blank = 1;
            for (size_t i = 0; i < n; i++)
                blank &= e[i] == ' ' || e[i] == '\t' || e[i] == '\r';
            if (!blank && out_line_is_reason(e, n) == !pass) {
                if (b.len)
                    dsl_dynbuf_add(&b, "; ", 2);
                for (size_t i = 0; i < n; i++)
                    if (e[i] != '\r')
                        dsl_dynbuf_add(&b, e + i, 1);
            }
            e += n + (e[n] == '\n');
        }
        if (pass == 0 && b.len) {
            reasons = 1;
            break;
        }
    }
    const char *t = dsl_dynbuf_str(&b);
    size_t tl = strlen(t);
    if (reasons)
        snprintf(tail, len, "%s", t);
    else
        snprintf(tail, len, "%s", tl > len - 1 ? t + (tl - (len - 1)) : t);
    dsl_dynbuf_release(&b);
}

static int batch_reap(struct srun_batch *b)
{
    int running = b->pid > 0;
    if (dsl_cb_reap(&b->pid, &b->status, b->outfd, &b->pidfd) && running)
        batch_ended(b);
    return b->launched && b->pid == 0;
}

static void batch_free(struct srun_batch *b)
{
    if (b == open_batch)
        open_batch = NULL;
    if (b->pid > 0) {
        kill(-b->pid, SIGTERM);
        double deadline = dsl_now() + 3.0;
        while (b->pid > 0 && waitpid(b->pid, &b->status, WNOHANG) == 0) {
            if (dsl_now() > deadline) {
                kill(-b->pid, SIGKILL);
                waitpid(b->pid, &b->status, 0);
                break;
            }
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (b->outfd >= 0)
        close(b->outfd);
    if (b->pidfd >= 0)
        close(b->pidfd);
    if (b->evfd >= 0)
        close(b->evfd);
    if (b->epfd >= 0)
        close(b->epfd);
    dsl_strvec_release(&b->hosts);
    dsl_strvec_release(&b->agent_argv);
    free(b->conns);
    dsl_cb_keys_release(&b->keys);
    memset(b->lpriv, 0, sizeof(b->lpriv));
    free(b->launcher_args);
    dsl_dynbuf_release(&b->out);
    free(b);
}

static int batch_launch(struct srun_batch *b, char *err)
{
    b->launched = 1;
    if (b == open_batch)
        open_batch = NULL; /* later opens start a new batch */
    struct dsl_strvec argv, env;
    dsl_strvec_init(&argv);
    dsl_strvec_init(&env);
    int r = dsl_srun_argv(&argv, b->launcher_args, b->hosts.v, b->hosts.nr, b->agent_argv.v,
                          dsl_cb_listener_connect_arg(shared_l), b->lhex, err);
    if (r == 0) {
        dsl_cb_keys_init(&b->keys, (int)b->hosts.nr);
        for (char **e = environ; *e; e++)
            dsl_strvec_push(&env, *e);
        r = dsl_cb_spawn(argv.v, env.v, &b->pid, &b->outfd, &b->pidfd, err);
    }
    if (r == 0) {
        epoll_add(b->epfd, b->outfd);
        epoll_add(b->epfd, b->pidfd);
    }
    dsl_strvec_release(&env);
    dsl_strvec_release(&argv);
    return r;
}

static int slurm_open(struct dsl_conn *c, const struct dsl_transport_opts *o,
                      char *const *agent_argv)
{
    c->t_start = dsl_now();
    c->state = DSL_CONN_CONNECTING;
    c->err_code = 0;
    c->err[0] = '\0';
    struct srun_priv *p = dsl_xcalloc(1, sizeof(*p));
    p->epfd = p->st.fd = -1;
    p->connect_timeout = o->connect_timeout;
    c->priv = p;
    if (strpbrk(c->host, ",[] \t\n") || !c->host[0] || c->host[0] == '-')
        return dsl_cb_conn_fail(c, DSL_EUSAGE, "host name '%s' cannot be passed to srun "
                                "--nodelist", c->host);
    char err[DSL_ERR_LEN];
    shared_l = dsl_cb_shared_get(o->connect_back_addr, err);
    if (!shared_l)
        return dsl_cb_conn_fail(c, DSL_ECONNECT, "%s", err);
    if (!open_batch) {
        struct srun_batch *b = dsl_xcalloc(1, sizeof(*b));
        b->outfd = b->pidfd = b->epfd = -1;
        b->launcher_args = o->launcher_args ? dsl_xstrdup(o->launcher_args) : NULL;
        dsl_strvec_init(&b->hosts);
        dsl_strvec_init(&b->agent_argv);
        dsl_dynbuf_init(&b->out, SRUN_OUT_MAX * 2);
        for (size_t i = 0; agent_argv[i]; i++)
            dsl_strvec_push(&b->agent_argv, agent_argv[i]);
        unsigned char lpub[DSL_SEAL_KEY_LEN];
        int r = dsl_seal_keypair(b->lpriv, lpub, err);
        dsl_seal_key_hex(lpub, b->lhex);
        b->evfd = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK); /* readable: launch me */
        b->epfd = epoll_create1(EPOLL_CLOEXEC);
        epoll_add(b->epfd, b->evfd);
        if (r < 0 || b->evfd < 0 || b->epfd < 0) {
            batch_free(b);
            dsl_cb_shared_put();
            return dsl_cb_conn_fail(c, r < 0 ? r : -errno, "cannot set up an srun step");
        }
        open_batch = b;
    }
    p->b = open_batch;
    p->b->refs++;
    p->index = (int)p->b->hosts.nr;
    dsl_strvec_push(&p->b->hosts, c->host);
    DSL_ALLOC_GROW(p->b->conns, p->index, p->b->aconns);
    p->b->conns[p->index] = p;
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (p->epfd < 0)
        return dsl_cb_conn_fail(c, -errno, "cannot create an epoll set: %s", strerror(errno));
    epoll_add(p->epfd, dsl_cb_listener_pollfd(shared_l));
    epoll_add(p->epfd, p->b->epfd);
    return 0;
}

static int slurm_progress(struct dsl_conn *c)
{
    struct srun_priv *p = c->priv;
    if (c->state == DSL_CONN_FAILED)
        return c->err_code;
    if (!p || !p->b || c->state != DSL_CONN_CONNECTING)
        return 0;
    struct srun_batch *b = p->b;
    if (!b->launched) {
        char err[DSL_ERR_LEN];
        eventfd_t v;
        (void)eventfd_read(b->evfd, &v); /* launched: no longer wakes the batch */
        if (batch_launch(b, err) < 0) {
            b->failed_launch = 1;
            batch_ended(b);
            return dsl_cb_conn_fail(c, DSL_ESPAWN, "%s", err);
        }
    }
    if (b->failed_launch)
        return dsl_cb_conn_fail(c, DSL_ESPAWN, "srun could not be started for '%s'", c->host);
    batch_drain(b);
    dsl_cb_listener_service(shared_l);
    if (p->expecting && p->st.fd < 0) {
        int fd = dsl_cb_listener_take(shared_l, b->keys.key[p->index]);
        if (fd >= 0) {
            p->expecting = 0;
            dsl_cb_stream_init(&p->st, fd, b->lpriv, b->keys.key[p->index]);
            epoll_add(p->epfd, fd);
        }
    }
    if (p->st.fd >= 0) {
        char err[DSL_ERR_LEN];
        int h = dsl_cb_stream_handshake(&p->st, c->host, err);
        if (h < 0)
            return dsl_cb_conn_fail(c, h, "%s", err);
        if (h == 1) {
            close(p->epfd);
            p->epfd = -1;
            c->state = DSL_CONN_OPEN;
            c->t_open = dsl_now();
            return 0;
        }
    }
    batch_drain(b);
    if (batch_reap(b)) {
        batch_drain(b);
        char tail[400];
        out_summary(dsl_dynbuf_str(&b->out), tail, sizeof(tail));
        int code = WIFEXITED(b->status) ? WEXITSTATUS(b->status) : 128 + WTERMSIG(b->status);
        if (code == 127 && !tail[0])
            return dsl_cb_conn_fail(c, DSL_ESPAWN, "cannot run srun for '%s' (not installed?)",
                                    c->host);
        int cls = strstr(tail, "No such file") || strstr(tail, "not found") ||
                          strstr(tail, "execve")
                      ? DSL_EREMOTE
                      : DSL_ECONNECT;
        return dsl_cb_conn_fail(c, cls, "srun for '%s' ended (exit %d) before its agent "
                                "connected back%s%s", c->host, code, tail[0] ? ": " : "", tail);
    }
    if (p->connect_timeout > 0 && dsl_now() - c->t_start > p->connect_timeout)
        return dsl_cb_conn_fail(c, DSL_ETIMEDOUT, "cannot reach '%s' through srun: no "
                                "connect-back within %.1f s (waiting for an allocation? "
                                "raise --connect-timeout)", c->host, p->connect_timeout);
    return 0;
}

static int slurm_pollfd(struct dsl_conn *c, short *events)
{
    struct srun_priv *p = c->priv;
    return dsl_cb_conn_pollfd(c, p ? &p->st : NULL, p ? p->epfd : -1, events);
}

static ssize_t slurm_read(struct dsl_conn *c, void *buf, size_t n)
{
    struct srun_priv *p = c->priv;
    if (p && p->st.fd >= 0)
        batch_drain(p->b);
    return dsl_cb_conn_read(c, p ? &p->st : NULL, buf, n);
}

static ssize_t slurm_write(struct dsl_conn *c, const void *buf, size_t n)
{
    struct srun_priv *p = c->priv;
    return dsl_cb_conn_write(p ? &p->st : NULL, buf, n);
}

static void slurm_close_write(struct dsl_conn *c)
{
    struct srun_priv *p = c->priv;
    dsl_cb_conn_close_write(p ? &p->st : NULL);
}

static void slurm_close(struct dsl_conn *c)
{
    struct srun_priv *p = c->priv;
    if (!p)
        return;
    dsl_cb_stream_close(&p->st);
    if (p->epfd >= 0)
        close(p->epfd);
    if (p->b) {
        p->b->conns[p->index] = NULL;
        if (p->expecting)
            dsl_cb_listener_cancel(shared_l, p->b->keys.key[p->index]);
        if (--p->b->refs == 0) {
            /* agents see EOF and exit, then srun ends; give it a moment first */
            double deadline = dsl_now() + 2.0;
            while (p->b->launched && p->b->pid > 0 && dsl_now() < deadline) {
                batch_drain(p->b);
                if (waitpid(p->b->pid, &p->b->status, WNOHANG) == p->b->pid)
                    p->b->pid = 0;
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
            batch_free(p->b);
        }
        dsl_cb_shared_put();
    }
    free(p);
    c->priv = NULL;
}

const struct dsl_transport_ops dsl_transport_slurm = {
    .name = "slurm",
    .open = slurm_open,
    .progress = slurm_progress,
    .pollfd = slurm_pollfd,
    .read = slurm_read,
    .write = slurm_write,
    .close_write = slurm_close_write,
    .close = slurm_close,
};

/* the step's and task's own variables: they describe the agents' step, not the ranks */
static int step_variable(const char *name, size_t n)
{
    static const char *const exact[] = {
        "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS",
        "SLURM_GTIDS", "SLURM_TASK_PID", "SLURM_STEPID", "SLURM_TASKS_PER_NODE",
        "SLURM_NTASKS_PER_NODE", "SLURM_DISTRIBUTION", "SLURM_LAUNCH_NODE_IPADDR",
        "SLURM_KILL_BAD_EXIT", "SLURM_LABELIO", "SLURM_UMASK", "SLURM_PRIO_PROCESS",
        "SLURM_NODELIST", "SLURM_NNODES", "SLURM_CPUS_PER_TASK"};
    static const char *const prefix[] = {"SLURM_STEP_", "SLURM_SRUN_COMM_", "SLURM_CPU_BIND"};
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
        if (strlen(exact[i]) == n && !memcmp(name, exact[i], n))
            return 1;
    for (size_t i = 0; i < sizeof(prefix) / sizeof(prefix[0]); i++)
        if (n >= strlen(prefix[i]) && !memcmp(name, prefix[i], strlen(prefix[i])))
            return 1;
    return 0;
}

int dsl_slurm_agent_prepare(const char *nodes, int *index, char *err)
{
    const char *me = getenv("SLURMD_NODENAME");
    if (!me || !me[0])
        return dsl_seterr(err, DSL_EUSAGE, "--slurm-nodes: SLURMD_NODENAME is not set (this "
                          "agent was not started by srun)");
    int found = -1, i = 0;
    for (const char *s = nodes; found < 0; i++) {
        size_t n = strcspn(s, ",");
        if (n == strlen(me) && !memcmp(s, me, n))
            found = i;
        if (!s[n])
            break;
        s += n + 1;
    }
    if (found < 0)
        return dsl_seterr(err, DSL_EUSAGE, "srun started this agent on node '%.100s', which is "
                          "not one of the plan's nodes '%.200s' (the hostfile must name Slurm's "
                          "node names)", me, nodes);
    if (found > 99999)
        return dsl_seterr(err, DSL_EUSAGE, "--slurm-nodes: more than 100000 nodes");
    /* collect the names first: unsetenv changes environ under the loop */
    struct dsl_strvec names;
    dsl_strvec_init(&names);
    for (char **e = environ; *e; e++) {
        size_t n = strcspn(*e, "=");
        if (step_variable(*e, n))
            dsl_strvec_pushf(&names, "%.*s", (int)n, *e);
    }
    for (size_t k = 0; k < names.nr; k++)
        unsetenv(names.v[k]);
    dsl_strvec_release(&names);
    *index = found;
    return 0;
}
