/*
 * The batch transports' common part (batch.h): one launcher process (mpirun, srun)
 * per batch of hosts, whose agents connect back to the launcher (connectback.h).
 *
 * Theory of operation. Every open() in the same pass of the fan-out loop joins the
 * kind's current batch and gets index i (with group_by_user, a host of another login
 * user starts a new batch instead); the batch's first progress() (woken at once by an
 * eventfd that is readable from the batch's creation) forks the command line that the
 * kind's argv hook builds. Each agent prints its public key as "DSLCB2-KEY i A"
 * (connectback.h), which the launcher forwards to our pipe; connection i then expects
 * a hello naming A, and the handshake (the batch's key pair on our side) proves both
 * ends. Opens in a later pass start another batch (another launcher process).
 *
 * While CONNECTING, pollfd() is a per-connection epoll set of the listener's epoll fd,
 * the batch's epoll fd (the eventfd, the launcher's output pipe and a pidfd of it) and,
 * once whoever drained the launcher's output found the agent's key line, the key's
 * ready fd from the listener, then the socket during the handshake. The fan-out loop
 * calls progress() only for a connection whose fd is readable, and the events are
 * consumed by whichever connection handles them first: a socket that another
 * connection's service() read wakes its owner through the owner's ready fd
 * (connectback.h), and the end of the launcher makes the batch's eventfd readable for
 * good, waking every connection of the batch. If the launcher exits before an agent
 * connected, every unconnected connection of the batch fails with the reason found in
 * its output (the kind's line handler picks the lines that say why; else its last
 * lines), worded by the kind's ended hook. The batch (the launcher's process group) is
 * terminated when its last connection closes, after up to 2 s for it to end by itself
 * (the agents see EOF and exit first).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "batch.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

extern char **environ;

struct dsl_batch_conn {
    struct dsl_batch *b;
    int index;
    int epfd;
    int expecting;          /* its key is registered with the listener */
    struct dsl_cb_stream st; /* fd -1 until taken */
    double connect_timeout;
};

static struct dsl_cb_listener *shared_l; /* while any connection holds a reference */

const char *dsl_batch_connect_arg(void)
{
    return dsl_cb_listener_connect_arg(shared_l);
}

/* The launcher ended or never started: wake every connection of the batch, for good. */
static void batch_ended(struct dsl_batch *b)
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
 * Read the launcher's output. A key line found here may belong to any connection of
 * the batch: its key is registered at once and its ready fd put into that
 * connection's set, so the owner wakes when its socket is (or was already) there.
 */
static void batch_drain(struct dsl_batch *b)
{
    dsl_cb_drain_tail(&b->outfd, &b->out, b->kind->out_max, b->keys.n ? &b->keys : NULL);
    for (int i = 0; i < b->keys.n; i++) {
        struct dsl_batch_conn *p = b->conns[i];
        if (!p || p->expecting || p->st.fd >= 0 || !b->keys.have[i])
            continue;
        p->expecting = 1;
        int ready = dsl_cb_listener_expect(shared_l, b->keys.key[i]);
        if (p->epfd >= 0)
            epoll_add(p->epfd, ready);
    }
}

/* The line handler: does the output line e[0..n) hold one of the kind's reasons? */
static int line_is_reason(const struct dsl_batch_kind *k, const char *e, size_t n)
{
    for (size_t i = 0; k->reasons[i]; i++) {
        size_t w = strlen(k->reasons[i]);
        for (size_t j = 0; j + w <= n; j++)
            if (!memcmp(e + j, k->reasons[i], w))
                return 1;
    }
    return 0;
}

/*
 * The launcher's output for a message: blank lines dropped (and, for a squeezing kind,
 * banner lines of dashes and runs of spaces), lines joined with "; ", the last len-1
 * bytes kept. Lines that name a reason replace the rest when there are any, the first
 * ones kept: launchers follow them with pages of generic advice that would push them
 * out.
 */
static void out_summary(const struct dsl_batch_kind *k, const char *text, char *tail,
                        size_t len)
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
            if (!blank && !(k->squeeze && dashes == n) && line_is_reason(k, e, n) == !pass) {
                if (b.len)
                    dsl_dynbuf_add(&b, "; ", 2);
                for (size_t i = 0; i < n; i++)
                    if (!(k->squeeze && e[i] == ' ' && i + 1 < n && e[i + 1] == ' ') &&
                        e[i] != '\r')
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

static int batch_reap(struct dsl_batch *b)
{
    int running = b->pid > 0;
    if (dsl_cb_reap(&b->pid, &b->status, b->outfd, &b->pidfd) && running)
        batch_ended(b);
    return b->launched && b->pid == 0;
}

static void batch_free(struct dsl_batch *b)
{
    if (b == b->kind->open)
        b->kind->open = NULL;
    dsl_cb_stop(&b->pid, &b->status, b->outfd, &b->pidfd, 0, 3.0);
    if (b->lpid > 0 && b->kind->killed && WIFSIGNALED(b->status) &&
        WTERMSIG(b->status) == SIGKILL)
        b->kind->killed(b->lpid);
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
    if (b->kind->release)
        b->kind->release(b->extra);
    free(b->user);
    free(b->launcher_args);
    dsl_dynbuf_release(&b->out);
    free(b);
}

static int batch_launch(struct dsl_batch *b, char *err)
{
    b->launched = 1;
    if (b == b->kind->open)
        b->kind->open = NULL; /* later opens start a new batch */
    struct dsl_strvec argv, env;
    dsl_strvec_init(&argv);
    dsl_strvec_init(&env);
    int r = b->kind->argv(b, &argv, err);
    if (r == 0) {
        dsl_cb_keys_init(&b->keys, (int)b->hosts.nr);
        for (char **e = environ; *e; e++)
            dsl_strvec_push(&env, *e);
        r = dsl_cb_spawn(argv.v, env.v, &b->pid, &b->outfd, &b->pidfd, err);
        b->lpid = r == 0 ? b->pid : 0;
    }
    if (r == 0) {
        epoll_add(b->epfd, b->outfd);
        epoll_add(b->epfd, b->pidfd);
    }
    dsl_strvec_release(&env);
    dsl_strvec_release(&argv);
    return r;
}

static int same_user(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

int dsl_batch_open(struct dsl_batch_kind *k, struct dsl_conn *c,
                   const struct dsl_transport_opts *o, char *const *agent_argv)
{
    dsl_cb_conn_begin(c);
    struct dsl_batch_conn *p = dsl_xcalloc(1, sizeof(*p));
    p->epfd = p->st.fd = -1;
    p->connect_timeout = o->connect_timeout;
    c->priv = p;
    int r = k->check_host(c);
    if (r < 0)
        return r;
    const char *user = k->group_by_user ? c->user : NULL;
    if (k->open && !same_user(k->open->user, user))
        k->open = NULL; /* it stays to be launched by its own connections */
    char err[DSL_ERR_LEN];
    void *extra = NULL;
    if (!k->open && k->prepare) {
        /* the hostfile's "user@host" wins over the ssh config's User */
        struct dsl_transport_opts uo = *o;
        if (c->user)
            uo.ssh_user = c->user;
        if (k->prepare(&uo, c, &extra, err) < 0)
            return dsl_cb_conn_fail(c, DSL_EUSAGE, "%s", err);
    }
    shared_l = dsl_cb_shared_get(o->connect_back_addr, err);
    if (!shared_l) {
        if (k->release)
            k->release(extra);
        return dsl_cb_conn_fail(c, DSL_ECONNECT, "%s", err);
    }
    if (!k->open) {
        struct dsl_batch *b = dsl_xcalloc(1, sizeof(*b));
        b->kind = k;
        b->outfd = b->pidfd = b->epfd = -1;
        b->extra = extra;
        b->user = user ? dsl_xstrdup(user) : NULL;
        b->launcher_args = o->launcher_args ? dsl_xstrdup(o->launcher_args) : NULL;
        dsl_strvec_init(&b->hosts);
        dsl_strvec_init(&b->agent_argv);
        dsl_dynbuf_init(&b->out, k->out_max * 2);
        for (size_t i = 0; agent_argv[i]; i++)
            dsl_strvec_push(&b->agent_argv, agent_argv[i]);
        unsigned char lpub[DSL_SEAL_KEY_LEN];
        r = dsl_seal_keypair(b->lpriv, lpub, err);
        dsl_seal_key_hex(lpub, b->lhex);
        b->evfd = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK); /* readable: launch me */
        b->epfd = epoll_create1(EPOLL_CLOEXEC);
        epoll_add(b->epfd, b->evfd);
        if (r < 0 || b->evfd < 0 || b->epfd < 0) {
            batch_free(b);
            dsl_cb_shared_put();
            return dsl_cb_conn_fail(c, r < 0 ? r : -errno, "cannot set up %s", k->setup_what);
        }
        k->open = b;
    }
    p->b = k->open;
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

int dsl_batch_progress(struct dsl_conn *c)
{
    struct dsl_batch_conn *p = c->priv;
    if (c->state == DSL_CONN_FAILED)
        return c->err_code;
    if (!p || !p->b || c->state != DSL_CONN_CONNECTING)
        return 0;
    struct dsl_batch *b = p->b;
    const struct dsl_batch_kind *k = b->kind;
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
        return dsl_cb_conn_fail(c, DSL_ESPAWN, "%s could not be started for '%s'", k->prog,
                                c->host);
    batch_drain(b);
    dsl_cb_listener_service(shared_l);
    int h = dsl_cb_conn_accept(c, shared_l, &p->expecting, &p->st, b->lpriv,
                               b->keys.key[p->index], p->epfd);
    if (h < 0)
        return h;
    if (h == 1) {
        close(p->epfd);
        p->epfd = -1;
        if (++b->nopen == (int)b->hosts.nr && k->all_open)
            k->all_open(b);
        c->state = DSL_CONN_OPEN;
        c->t_open = dsl_now();
        return 0;
    }
    batch_drain(b);
    if (batch_reap(b)) {
        batch_drain(b);
        char tail[400];
        out_summary(k, dsl_dynbuf_str(&b->out), tail, sizeof(tail));
        int code, r = dsl_cb_conn_ended(c, k->prog, b->status,
                                        b->agent_argv.nr ? b->agent_argv.v[0] : NULL, tail,
                                        &code);
        if (r < 0)
            return r;
        return k->ended(c, code, tail);
    }
    if (p->connect_timeout > 0 && dsl_now() - c->t_start > p->connect_timeout)
        return dsl_cb_conn_fail(c, DSL_ETIMEDOUT, "cannot reach '%s' through %s: no "
                                "connect-back within %.1f s%s", c->host, k->prog,
                                p->connect_timeout, k->timeout_hint);
    return 0;
}

int dsl_batch_pollfd(struct dsl_conn *c, short *events)
{
    struct dsl_batch_conn *p = c->priv;
    return dsl_cb_conn_pollfd(c, p ? &p->st : NULL, p ? p->epfd : -1, events);
}

ssize_t dsl_batch_read(struct dsl_conn *c, void *buf, size_t n)
{
    struct dsl_batch_conn *p = c->priv;
    if (p && p->st.fd >= 0)
        batch_drain(p->b);
    return dsl_cb_conn_read(c, p ? &p->st : NULL, buf, n);
}

ssize_t dsl_batch_write(struct dsl_conn *c, const void *buf, size_t n)
{
    struct dsl_batch_conn *p = c->priv;
    return dsl_cb_conn_write(p ? &p->st : NULL, buf, n);
}

void dsl_batch_close_write(struct dsl_conn *c)
{
    struct dsl_batch_conn *p = c->priv;
    dsl_cb_conn_close_write(p ? &p->st : NULL);
}

void dsl_batch_close(struct dsl_conn *c)
{
    struct dsl_batch_conn *p = c->priv;
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
            /* agents see EOF and exit, then the launcher ends; give it a moment first */
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
