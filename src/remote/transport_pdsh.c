/*
 * The pdsh transport (--launcher pdsh): for sites that standardise on pdsh.
 *
 * Theory of operation. pdsh never feeds a remote command's stdin (its rcmd modules
 * leave it an idle pipe), so the control channel cannot be the agent's stdin as with
 * ssh. Instead every agent connects back (connectback.h): one pdsh process per host
 * runs `pdsh -R ssh -w HOST "exec '<dslaunch>' '--agent' '--connect' 'A:P,..'
 * '--launcher-key' 'L'"` with L the public half of a key pair made for this connection;
 * the agent prints its own public key through pdsh's ssh (the key line of
 * connectback.h), dials the launcher's listener, and the socket becomes this
 * connection's sealed byte stream once both ends proved their keys (cbstream.c). One
 * listener serves every connect-back connection of the process (dsl_cb_shared_get).
 *
 * States: CONNECTING from fork until the handshake is done, then OPEN. While
 * CONNECTING, pollfd() is a per-connection epoll set holding the shared listener's
 * epoll fd, the pipe carrying pdsh's stdout+stderr, a pidfd of pdsh, then (once the key
 * line was read) the key's ready fd (readable once this agent's socket arrived,
 * whichever connection's progress() read it) and (once taken) the socket itself, so a
 * connecting agent or pdsh dying (wrong key, unknown host, refused) wakes the loop.
 * progress() accepts, collects pdsh's output (last PDSH_OUT_MAX bytes, key lines taken
 * out), runs the handshake, and when pdsh exits before its agent connected, classifies
 * its output into DSL_EAUTH / DSL_ECONNECT / DSL_EREMOTE. Once OPEN, read() also drains
 * pdsh's pipe so a chatty agent stderr never blocks it.
 *
 * The hostfile's login user goes into -w as "user@host"; --launcher_args words go in
 * after -w, before the command (as DeepSpeed's pdsh runner places them).
 *
 * ssh options reach pdsh's ssh through PDSH_SSH_ARGS_APPEND (split on spaces by pdsh);
 * the user's paths are links in a private directory (dsl_cb_ssh_files), so no path
 * is split or interpreted. close() closes the socket (the agent sees EOF
 * and stops its ranks), then SIGTERMs pdsh's process group and reaps it, SIGKILL after
 * two seconds. pdsh gets PR_SET_PDEATHSIG, so a SIGKILLed launcher takes it along.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dslaunch/remote/connectback.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/plan/launcherargs.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define PDSH_OUT_MAX 4096

extern char **environ;

struct pdsh_priv {
    pid_t pid;             /* pdsh, leader of its own process group; 0 once reaped */
    int status;            /* its wait status once reaped */
    int outfd;             /* pdsh stdout+stderr, non-blocking; -1 at EOF */
    int pidfd;             /* readable when pdsh exits (pidfd_open), -1 if unsupported */
    int epfd;              /* CONNECTING: {listener, outfd, pidfd, ready fd, socket} */
    int expecting;         /* the agent's key is registered with the listener */
    struct dsl_cb_stream st; /* the agent's socket (fd -1 until taken) */
    unsigned char lpriv[DSL_SEAL_KEY_LEN];
    struct dsl_cb_keys keys; /* the agent's key line */
    struct dsl_cb_sshfiles files; /* the user's ssh paths, passed safely */
    struct dsl_cb_listener *l; /* a reference on the shared listener, or NULL */
    double connect_timeout;
    struct dsl_dynbuf out; /* pdsh's output, tail only */
    char *agent;           /* the dslaunch it runs on the node (agent_argv[0]), owned */
};

/*
 * Read pdsh's output. The agent's key line, whenever a drain finds it, registers the
 * key at once (its hello may be parked already; the ready fd then wakes us): a key
 * read by the drain at the end of one progress() must not wait for a wake-up that
 * never comes.
 */
static void drain_out(struct pdsh_priv *p)
{
    dsl_cb_drain_tail(&p->outfd, &p->out, PDSH_OUT_MAX, &p->keys);
    if (!p->expecting && p->st.fd < 0 && p->keys.have[0] && p->l) {
        p->expecting = 1;
        int ready = dsl_cb_listener_expect(p->l, p->keys.key[0]);
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = ready};
        if (ready >= 0 && p->epfd >= 0)
            epoll_ctl(p->epfd, EPOLL_CTL_ADD, ready, &ev);
    }
}

static int reap(struct pdsh_priv *p)
{
    return dsl_cb_reap(&p->pid, &p->status, p->outfd, &p->pidfd);
}

/* The last lines of pdsh's output on one line, for messages. */
static void out_tail(struct pdsh_priv *p, char *tail, size_t len)
{
    const char *e = dsl_dynbuf_str(&p->out);
    size_t n = strlen(e);
    while (n && (e[n - 1] == '\n' || e[n - 1] == '\r'))
        n--;
    size_t from = n > len - 1 ? n - (len - 1) : 0, o = 0;
    for (size_t i = from; i < n; i++)
        tail[o++] = e[i] == '\n' ? ';' : e[i];
    tail[o] = '\0';
}

static int classify(const char *text)
{
    static const char *const auth[] = {"Permission denied (", "Host key verification failed",
                                       "HOST IDENTIFICATION HAS CHANGED", "host key is known",
                                       "Too many authentication failures"};
    for (size_t i = 0; i < sizeof(auth) / sizeof(auth[0]); i++)
        if (strstr(text, auth[i]))
            return DSL_EAUTH;
    if (strstr(text, "No such file or directory") || strstr(text, "not found") ||
        strstr(text, "Permission denied"))
        return DSL_EREMOTE;
    return DSL_ECONNECT;
}

static int pdsh_open(struct dsl_conn *c, const struct dsl_transport_opts *o,
                     char *const *agent_argv)
{
    dsl_cb_conn_begin(c);
    struct pdsh_priv *p = dsl_xcalloc(1, sizeof(*p));
    p->outfd = p->epfd = p->st.fd = p->pidfd = -1;
    p->connect_timeout = o->connect_timeout;
    dsl_dynbuf_init(&p->out, PDSH_OUT_MAX * 2);
    p->agent = dsl_xstrdup(agent_argv[0]);
    dsl_cb_keys_init(&p->keys, 1);
    dsl_cb_sshfiles_init(&p->files);
    c->priv = p;
    if (strpbrk(c->host, ",[] \t\n") || c->host[0] == '-' || c->host[0] == '^')
        return dsl_cb_conn_fail(c, DSL_EUSAGE, "host name '%s' cannot be passed to pdsh -w",
                                c->host);
    char err[DSL_ERR_LEN];
    p->l = dsl_cb_shared_get(o->connect_back_addr, err);
    if (!p->l)
        return dsl_cb_conn_fail(c, DSL_ECONNECT, "%s", err);
    unsigned char lpub[DSL_SEAL_KEY_LEN];
    char lhex[2 * DSL_SEAL_KEY_LEN + 1];
    int r = dsl_seal_keypair(p->lpriv, lpub, err);
    if (r < 0)
        return dsl_cb_conn_fail(c, r, "%s", err);
    dsl_seal_key_hex(lpub, lhex);

    char *sshargs = dsl_cb_ssh_options(o, &p->files, err);
    if (!sshargs)
        return dsl_cb_conn_fail(c, DSL_EUSAGE, "%s", err);
    struct dsl_strvec remote, argv, env;
    dsl_strvec_init(&remote);
    dsl_strvec_init(&argv);
    dsl_strvec_init(&env);
    for (size_t i = 0; agent_argv[i]; i++)
        dsl_strvec_push(&remote, agent_argv[i]);
    dsl_strvec_push(&remote, "--connect");
    dsl_strvec_push(&remote, dsl_cb_listener_connect_arg(p->l));
    dsl_strvec_push(&remote, "--launcher-key");
    dsl_strvec_push(&remote, lhex);
    char *cmd = dsl_shell_command(remote.v);
    const char *pdsh = getenv("DSLAUNCH_PDSH");
    dsl_strvec_push(&argv, pdsh && pdsh[0] ? pdsh : "pdsh");
    /* pdsh's own "user@host" form: its ssh module then runs ssh -l user (the hostfile
       checked the name: [A-Za-z0-9._-], so pdsh reads nothing else into it) */
    char *target = c->user ? dsl_xasprintf("%s@%s", c->user, c->host) : dsl_xstrdup(c->host);
    dsl_strvec_pushv(&argv, (const char *const[]){"-R", "ssh", "-S", "-w", target, NULL});
    free(target);
    /* --launcher_args: after -w, before the command, where DeepSpeed's pdsh runner puts
       them; split on whitespace only, never by a shell */
    dsl_launcher_args_split(&argv, o->launcher_args);
    dsl_strvec_push(&argv, cmd);
    for (char **e = environ; *e; e++)
        dsl_strvec_push(&env, *e);
    dsl_env_set(&env, "PDSH_RCMD_TYPE", "ssh");
    dsl_env_set(&env, "PDSH_SSH_ARGS_APPEND", sshargs);
    free(sshargs);
    free(cmd);

    if ((r = dsl_cb_spawn(argv.v, env.v, &p->pid, &p->outfd, &p->pidfd, err)) < 0) {
        dsl_cb_conn_fail(c, r, "%s", err);
        goto out;
    }
    /* pdsh exiting must wake the loop even after its output pipe is gone: the pidfd */
    const int fds[] = {p->outfd, dsl_cb_listener_pollfd(p->l), p->pidfd};
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]) && p->epfd >= 0; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
        if (fds[i] >= 0 && epoll_ctl(p->epfd, EPOLL_CTL_ADD, fds[i], &ev) < 0) {
            r = dsl_cb_conn_fail(c, -errno, "cannot create an epoll set: %s", strerror(errno));
            goto out;
        }
    }
    if (p->epfd < 0) {
        r = dsl_cb_conn_fail(c, -errno, "cannot create an epoll set: %s", strerror(errno));
        goto out;
    }
    r = 0;
out:
    dsl_strvec_release(&env);
    dsl_strvec_release(&argv);
    dsl_strvec_release(&remote);
    return r;
}

static int pdsh_progress(struct dsl_conn *c)
{
    struct pdsh_priv *p = c->priv;
    if (c->state == DSL_CONN_FAILED)
        return c->err_code;
    if (!p || c->state != DSL_CONN_CONNECTING)
        return 0;
    drain_out(p);
    dsl_cb_listener_service(p->l);
    int h = dsl_cb_conn_accept(c, p->l, &p->expecting, &p->st, p->lpriv, p->keys.key[0],
                               p->epfd);
    if (h < 0)
        return h;
    if (h == 1) {
        if (p->epfd >= 0) {
            close(p->epfd);
            p->epfd = -1;
        }
        /* ssh has read its files long ago: no link left even if we are SIGKILLed */
        dsl_cb_sshfiles_release(&p->files);
        c->state = DSL_CONN_OPEN;
        c->t_open = dsl_now();
        return 0;
    }
    drain_out(p);
    if (reap(p)) {
        drain_out(p);
        char tail[400];
        out_tail(p, tail, sizeof(tail));
        int code, r = dsl_cb_conn_ended(c, "pdsh", p->status, p->agent, tail, &code);
        if (r < 0)
            return r;
        return dsl_cb_conn_fail(c, classify(tail), "pdsh to '%s' ended (exit %d) before its agent "
                                "connected back%s%s", c->host, code, tail[0] ? ": " : "", tail);
    }
    if (p->connect_timeout > 0 && dsl_now() - c->t_start > p->connect_timeout) {
        char tail[300];
        out_tail(p, tail, sizeof(tail));
        return dsl_cb_conn_fail(c, DSL_ETIMEDOUT, "cannot reach '%s' through pdsh: no connect-back "
                                "within %.1f s%s%s", c->host, p->connect_timeout,
                                tail[0] ? ": " : "", tail);
    }
    return 0;
}

static int pdsh_pollfd(struct dsl_conn *c, short *events)
{
    struct pdsh_priv *p = c->priv;
    return dsl_cb_conn_pollfd(c, p ? &p->st : NULL, p ? p->epfd : -1, events);
}

static ssize_t pdsh_read(struct dsl_conn *c, void *buf, size_t n)
{
    struct pdsh_priv *p = c->priv;
    if (p && p->st.fd >= 0)
        drain_out(p);
    ssize_t r = dsl_cb_conn_read(c, p ? &p->st : NULL, buf, n);
    if (r == 0) {
        char tail[300];
        drain_out(p);
        out_tail(p, tail, sizeof(tail));
        if (tail[0])
            snprintf(c->err, sizeof(c->err), "agent on '%s' closed its connection: %s", c->host,
                     tail);
    }
    return r;
}

static ssize_t pdsh_write(struct dsl_conn *c, const void *buf, size_t n)
{
    struct pdsh_priv *p = c->priv;
    return dsl_cb_conn_write(p ? &p->st : NULL, buf, n);
}

static void pdsh_close_write(struct dsl_conn *c)
{
    struct pdsh_priv *p = c->priv;
    dsl_cb_conn_close_write(p ? &p->st : NULL);
}

static void pdsh_close(struct dsl_conn *c)
{
    struct pdsh_priv *p = c->priv;
    if (!p)
        return;
    dsl_cb_stream_close(&p->st);
    /* pdsh's ssh ends when the agent exits on EOF; give it a moment, then make sure */
    dsl_cb_stop(&p->pid, &p->status, p->outfd, &p->pidfd, 0.5, 2.0);
    if (p->outfd >= 0)
        close(p->outfd);
    if (p->pidfd >= 0)
        close(p->pidfd);
    if (p->epfd >= 0)
        close(p->epfd);
    if (p->l) {
        if (p->expecting)
            dsl_cb_listener_cancel(p->l, p->keys.key[0]);
        dsl_cb_shared_put();
    }
    memset(p->lpriv, 0, sizeof(p->lpriv));
    dsl_cb_keys_release(&p->keys);
    free(p->agent);
    dsl_cb_sshfiles_release(&p->files);
    dsl_dynbuf_release(&p->out);
    free(p);
    c->priv = NULL;
}

const struct dsl_transport_ops dsl_transport_pdsh = DSL_TRANSPORT_OPS("pdsh", pdsh);
