/*
 * The Open MPI transport (--launcher openmpi): mpirun starts the node agents, which
 * connect back to the launcher (connectback.h), for sites where mpirun is the way in.
 *
 * Theory of operation. mpirun starts one program per slot of a host list in one go
 * and forwards stdin to rank 0 only, so the agents dial back, and one mpirun serves a
 * whole batch of hosts: every open() in the same pass of the fan-out loop joins the
 * current batch and gets index i; the batch's first progress() (woken at once by an
 * eventfd that is readable from the batch's creation) forks
 *
 *   mpirun -np N --host h0:1,h1:1,.. --map-by node --mca plm_rsh_no_tree_spawn 1
 *          --mca plm_rsh_agent "ssh OPTS" /bin/sh -c SCRIPT dslaunch --agent ...
 *          --connect A:P,.. --launcher-key L
 *
 * where SCRIPT drops what orted put into the environment (OMPI_*, PMIX_*) and execs
 * the agent with `--connect-index $OMPI_COMM_WORLD_RANK`: rank i runs on host i and
 * prints its public key as "DSLCB2-KEY i A" (connectback.h), which mpirun forwards to
 * our pipe; the connection of host i then expects a hello naming A, and the handshake
 * (L being the batch's key pair) proves both ends. No user data is in the script or
 * its arguments: the plan travels sealed over the socket. OPTS names the user's ssh
 * paths only through links in a private directory (dsl_cb_ssh_files), because
 * plm_rsh_agent reaches a shell; tree spawn is off, so every orted is started from this
 * host, where those links are. Opens in a later pass start another batch (another mpirun).
 *
 * While CONNECTING, pollfd() is a per-connection epoll set of the listener's epoll fd,
 * the batch's epoll fd (the eventfd, mpirun's output pipe and a pidfd of mpirun) and,
 * once whoever drained mpirun's output found the agent's key line, the key's ready fd
 * from the listener, then the socket during the handshake. The fan-out loop calls progress() only for a
 * connection whose fd is readable, and the events are consumed by whichever connection
 * handles them first: a socket that another connection's service() read wakes its
 * owner through the owner's ready fd (connectback.h), and the end of mpirun makes the
 * batch's eventfd readable for good, waking every connection of the batch. If mpirun exits
 * before an agent connected (ssh refused, program missing, a sibling rank failed), every
 * unconnected connection of the batch fails with the reason found in mpirun's output
 * (ssh's error, a missing program; else its last lines). mpirun
 * ends the whole batch when one agent exits non-zero; that is its semantics, not ours.
 * The batch (mpirun's process group) is terminated when its last connection closes.
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
#include "dslaunch/common/banned.h"

#define MPI_OUT_MAX 16384

extern char **environ;

/*
 * The agent launcher script run by mpirun: $0 dslaunch, the rest its arguments. It
 * drops what orted put into the environment (OMPI_*, PMIX_*, PRTE_*, ...) before the
 * agent starts: the agent's environment is the base of every rank's, and those values
 * describe the agents' job, not the ranks' (a rank calling MPI_Init would join it as
 * rank <node index>). Names only ([A-Za-z0-9_]) reach unset; user variables that the
 * export set names travel on the control channel and are set again for the ranks.
 */
static const char agent_script[] =
    "r=${OMPI_COMM_WORLD_RANK:?not started by mpirun}; "
    "for v in $(env | sed -n -e 's/^\\(OMPI_[A-Za-z0-9_]*\\)=.*/\\1/p' "
    "-e 's/^\\(PMIX_[A-Za-z0-9_]*\\)=.*/\\1/p' -e 's/^\\(PRTE_[A-Za-z0-9_]*\\)=.*/\\1/p'); "
    "do unset \"$v\"; done; unset HFI_NO_BACKTRACE IPATH_NO_BACKTRACE; "
    "exec \"$0\" \"$@\" --connect-index \"$r\"";

struct mpi_batch {
    int refs;
    int launched;
    pid_t pid;             /* mpirun, own process group; 0 once reaped */
    int status;
    int outfd, pidfd;
    int evfd;              /* readable: launch me; drained at launch, readable again for
                              good once mpirun ended or could not be started */
    int epfd;              /* {evfd, outfd, pidfd}; in every conn's set */
    unsigned char lpriv[DSL_SEAL_KEY_LEN];
    char lhex[2 * DSL_SEAL_KEY_LEN + 1]; /* the public key, for the agents' --launcher-key */
    struct dsl_strvec hosts, agent_argv;
    struct mpi_priv **conns; /* by index; NULL once closed */
    int aconns;
    struct dsl_cb_keys keys; /* the agents' key lines, by index (from the launch on) */
    char *ssh_agent;       /* plm_rsh_agent value */
    struct dsl_cb_sshfiles files; /* released once every agent connected */
    int nopen;             /* connections of the batch that reached OPEN */
    struct dsl_dynbuf out; /* mpirun's output, tail only */
    int failed_launch;
};

struct mpi_priv {
    struct mpi_batch *b;
    int index;
    int epfd;
    int expecting;          /* its key is registered with the listener */
    struct dsl_cb_stream st; /* fd -1 until taken */
    double connect_timeout;
};

static struct dsl_cb_listener *shared_l; /* while any connection holds a reference */
static struct mpi_batch *open_batch; /* the batch that open() currently adds to */

/* mpirun ended or never started: wake every connection of the batch, for good. */
static void batch_ended(struct mpi_batch *b)
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
 * Read mpirun's output. A key line found here may belong to any connection of the
 * batch: its key is registered at once and its ready fd put into that connection's
 * set, so the owner wakes when its socket is (or was already) there.
 */
static void batch_drain(struct mpi_batch *b)
{
    dsl_cb_drain_tail(&b->outfd, &b->out, MPI_OUT_MAX, b->keys.n ? &b->keys : NULL);
    for (int i = 0; i < b->keys.n; i++) {
        struct mpi_priv *p = b->conns[i];
        if (!p || p->expecting || p->st.fd >= 0 || !b->keys.have[i])
            continue;
        p->expecting = 1;
        int ready = dsl_cb_listener_expect(shared_l, b->keys.key[i]);
        if (p->epfd >= 0)
            epoll_add(p->epfd, ready);
    }
}

/* Lines of mpirun's output that say why a daemon or agent did not start. */
static int out_line_is_reason(const char *e, size_t n)
{
    static const char *const needles[] = {
        "ssh: ", "Permission denied", "Host key verification failed", "HOST IDENTIFICATION",
        "Connection refused", "Connection timed out", "No route to host", "not found",
        "No such file", "Could not resolve", "orted: command not found"};
    for (size_t i = 0; i < sizeof(needles) / sizeof(needles[0]); i++) {
        size_t k = strlen(needles[i]);
        for (size_t j = 0; j + k <= n; j++)
            if (!memcmp(e + j, needles[i], k))
                return 1;
    }
    return 0;
}

/*
 * mpirun's output for a message: banner lines of dashes and blank lines dropped, runs
 * of spaces squeezed, lines joined with "; ", the last len-1 bytes kept. Lines that
 * name a reason (ssh's errors, a missing program) replace the rest when there are any:
 * mpirun follows them with pages of generic advice that would push them out.
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
            size_t dashes = 0, blank = 1;
            for (size_t i = 0; i < n; i++) {
                dashes += e[i] == '-';
                blank &= e[i] == ' ' || e[i] == '\t' || e[i] == '\r';
            }
            if (!blank && dashes != n && out_line_is_reason(e, n) == !pass) {
                if (b.len)
                    dsl_dynbuf_add(&b, "; ", 2);
                for (size_t i = 0; i < n; i++)
                    if (!(e[i] == ' ' && i + 1 < n && e[i + 1] == ' ') && e[i] != '\r')
                        dsl_dynbuf_add(&b, e + i, 1);
            }
            e += n + (e[n] == '\n');
        }
        /* with reasons found, the rest is mpirun's generic advice: leave it out and
           keep the first reasons rather than the last */
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

static int batch_reap(struct mpi_batch *b)
{
    int running = b->pid > 0;
    if (dsl_cb_reap(&b->pid, &b->status, b->outfd, &b->pidfd) && running)
        batch_ended(b);
    return b->launched && b->pid == 0;
}

static void batch_free(struct mpi_batch *b)
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
    dsl_cb_sshfiles_release(&b->files);
    free(b->ssh_agent);
    dsl_dynbuf_release(&b->out);
    free(b);
}

/* "ssh -F cfg -p P ..." for plm_rsh_agent; NULL with err on a bad value. */
static char *rsh_agent(const struct dsl_transport_opts *o, struct dsl_cb_sshfiles *f, char *err)
{
    char *opts = dsl_cb_ssh_options(o, f, err);
    if (!opts)
        return NULL;
    char *s = dsl_xasprintf("ssh %s", opts);
    free(opts);
    return s;
}

static int batch_launch(struct mpi_batch *b, char *err)
{
    b->launched = 1;
    if (b == open_batch)
        open_batch = NULL; /* later opens start a new batch */
    struct dsl_strvec argv, env;
    dsl_strvec_init(&argv);
    dsl_strvec_init(&env);
    struct dsl_dynbuf hostlist;
    dsl_dynbuf_init(&hostlist, 1 << 20);
    for (size_t i = 0; i < b->hosts.nr; i++)
        dsl_dynbuf_addf(&hostlist, "%s%s:1", i ? "," : "", b->hosts.v[i]);
    const char *mpirun = getenv("DSLAUNCH_MPIRUN");
    dsl_strvec_push(&argv, mpirun && mpirun[0] ? mpirun : "mpirun");
    if (geteuid() == 0)
        dsl_strvec_push(&argv, "--allow-run-as-root");
    dsl_strvec_pushf(&argv, "-np");
    dsl_strvec_pushf(&argv, "%zu", b->hosts.nr);
    dsl_strvec_pushv(&argv, (const char *const[]){"--host", dsl_dynbuf_str(&hostlist),
                                                  "--map-by", "node", "--mca",
                                                  "plm_rsh_no_tree_spawn", "1", "--mca",
                                                  "plm_rsh_agent", b->ssh_agent, "/bin/sh",
                                                  "-c", agent_script, NULL});
    for (size_t i = 0; i < b->agent_argv.nr; i++)
        dsl_strvec_push(&argv, b->agent_argv.v[i]);
    dsl_strvec_push(&argv, "--connect");
    dsl_strvec_push(&argv, dsl_cb_listener_connect_arg(shared_l));
    dsl_strvec_push(&argv, "--launcher-key");
    dsl_strvec_push(&argv, b->lhex);
    dsl_cb_keys_init(&b->keys, (int)b->hosts.nr);
    for (char **e = environ; *e; e++)
        dsl_strvec_push(&env, *e);
    dsl_dynbuf_release(&hostlist);

    int r = dsl_cb_spawn(argv.v, env.v, &b->pid, &b->outfd, &b->pidfd, err);
    if (r == 0) {
        epoll_add(b->epfd, b->outfd);
        epoll_add(b->epfd, b->pidfd);
    }
    dsl_strvec_release(&env);
    dsl_strvec_release(&argv);
    return r;
}

static int mpi_open(struct dsl_conn *c, const struct dsl_transport_opts *o,
                    char *const *agent_argv)
{
    c->t_start = dsl_now();
    c->state = DSL_CONN_CONNECTING;
    c->err_code = 0;
    c->err[0] = '\0';
    struct mpi_priv *p = dsl_xcalloc(1, sizeof(*p));
    p->epfd = p->st.fd = -1;
    p->connect_timeout = o->connect_timeout;
    c->priv = p;
    if (strpbrk(c->host, ", \t\n:") || !c->host[0])
        return dsl_cb_conn_fail(c, DSL_EUSAGE, "host name '%s' cannot be passed to mpirun --host",
                                c->host);
    char err[DSL_ERR_LEN];
    struct dsl_cb_sshfiles files;
    dsl_cb_sshfiles_init(&files);
    char *agent = open_batch ? NULL : rsh_agent(o, &files, err);
    if (!open_batch && !agent) {
        dsl_cb_sshfiles_release(&files);
        return dsl_cb_conn_fail(c, DSL_EUSAGE, "%s", err);
    }
    shared_l = dsl_cb_shared_get(o->connect_back_addr, err);
    if (!shared_l) {
        free(agent);
        dsl_cb_sshfiles_release(&files);
        return dsl_cb_conn_fail(c, DSL_ECONNECT, "%s", err);
    }
    if (!open_batch) {
        struct mpi_batch *b = dsl_xcalloc(1, sizeof(*b));
        b->outfd = b->pidfd = b->epfd = -1;
        b->ssh_agent = agent;
        b->files = files;
        dsl_strvec_init(&b->hosts);
        dsl_strvec_init(&b->agent_argv);
        dsl_dynbuf_init(&b->out, MPI_OUT_MAX * 2);
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
            return dsl_cb_conn_fail(c, r < 0 ? r : -errno, "cannot set up an mpirun batch");
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

static int mpi_progress(struct dsl_conn *c)
{
    struct mpi_priv *p = c->priv;
    if (c->state == DSL_CONN_FAILED)
        return c->err_code;
    if (!p || !p->b || c->state != DSL_CONN_CONNECTING)
        return 0;
    struct mpi_batch *b = p->b;
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
        return dsl_cb_conn_fail(c, DSL_ESPAWN, "mpirun could not be started for '%s'", c->host);
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
            /* once every orted is up, ssh needs the links no more: none left behind
               even if we are SIGKILLed later */
            if (++b->nopen == (int)b->hosts.nr)
                dsl_cb_sshfiles_release(&b->files);
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
            return dsl_cb_conn_fail(c, DSL_ESPAWN, "cannot run mpirun for '%s' (not installed?)",
                                    c->host);
        int cls = strstr(tail, "Permission denied (") || strstr(tail, "Host key verification")
                      ? DSL_EAUTH
                      : strstr(tail, "No such file") || strstr(tail, "not found") ||
                                strstr(tail, "Exit code: 127")
                            ? DSL_EREMOTE
                            : DSL_ECONNECT;
        const char *advice = strstr(tail, "Host key verification failed")
                                 ? " (unknown host key: rerun with --ssh-accept-new, or run "
                                   "ssh once to accept it)"
                                 : "";
        return dsl_cb_conn_fail(c, cls, "mpirun for '%s' ended (exit %d) before its agent "
                                "connected back%s%s%s", c->host, code, tail[0] ? ": " : "",
                                tail, advice);
    }
    if (p->connect_timeout > 0 && dsl_now() - c->t_start > p->connect_timeout)
        return dsl_cb_conn_fail(c, DSL_ETIMEDOUT, "cannot reach '%s' through mpirun: no "
                                "connect-back within %.1f s", c->host, p->connect_timeout);
    return 0;
}

static int mpi_pollfd(struct dsl_conn *c, short *events)
{
    struct mpi_priv *p = c->priv;
    return dsl_cb_conn_pollfd(c, p ? &p->st : NULL, p ? p->epfd : -1, events);
}

static ssize_t mpi_read(struct dsl_conn *c, void *buf, size_t n)
{
    struct mpi_priv *p = c->priv;
    if (p && p->st.fd >= 0)
        batch_drain(p->b);
    return dsl_cb_conn_read(c, p ? &p->st : NULL, buf, n);
}

static ssize_t mpi_write(struct dsl_conn *c, const void *buf, size_t n)
{
    struct mpi_priv *p = c->priv;
    return dsl_cb_conn_write(p ? &p->st : NULL, buf, n);
}

static void mpi_close_write(struct dsl_conn *c)
{
    struct mpi_priv *p = c->priv;
    dsl_cb_conn_close_write(p ? &p->st : NULL);
}

static void mpi_close(struct dsl_conn *c)
{
    struct mpi_priv *p = c->priv;
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
            /* agents see EOF and exit, then mpirun ends; give it a moment first */
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

const struct dsl_transport_ops dsl_transport_openmpi = {
    .name = "openmpi",
    .open = mpi_open,
    .progress = mpi_progress,
    .pollfd = mpi_pollfd,
    .read = mpi_read,
    .write = mpi_write,
    .close_write = mpi_close_write,
    .close = mpi_close,
};
