/*
 * The SSH transport: libssh in non-blocking mode, one session and one exec channel per
 * host, all driven from the fan-out loop's single thread.
 *
 * Theory of operation. open() creates the session, applies the ssh_config (the file
 * given with --ssh-config, else ~/.ssh/config and /etc/ssh/ssh_config) for the host
 * alias, then the command-line overrides (--ssh_port, user, known_hosts) -- the config,
 * host-key and authentication rules live in sshsession.c, shared with the blocking
 * operator tools (sync, ssh-setup) -- switches the
 * session to non-blocking and takes the first step. Each later progress() call
 * re-enters the libssh call of the current state, which returns SSH_AGAIN until its
 * packets have arrived:
 *
 *   CONNECTING      ssh_connect: TCP connect, banner, key exchange
 *                   then the host key is checked against known_hosts (local, instant)
 *   AUTHENTICATING  --ssh-identity given: that key only (ssh_userauth_publickey);
 *                   otherwise ssh_userauth_publickey_auto: the ssh-agent, then the
 *                   IdentityFile entries of the config and the default identities
 *   STARTING        ssh_channel_open_session, then ssh_channel_request_exec with the
 *                   fixed command `exec '<dslaunch>' '--agent' ...` (dsl_shell_command)
 *   OPEN            read()/write() move bytes on the channel's stdout/stdin
 *
 * pollfd() hands the loop ssh_get_fd() with the events libssh's own poll handle wants
 * (ssh_get_poll_flags: POLLOUT while the TCP connect or a flush is pending). libssh
 * buffers internally, so data may sit in the channel while the fd is quiet: the loop
 * must call read() on every pass for OPEN ssh connections, not only on POLLIN.
 *
 * Who times out whom: progress() fails the connection with DSL_ETIMEDOUT once
 * --connect-timeout has passed since open(); the loop must also enforce that bound
 * itself, since a silent server never wakes poll. Once connected, TCP keepalive and
 * TCP_USER_TIMEOUT (both from --keepalive) make the kernel fail the socket when the
 * node vanishes, so a read() errors out within about that many seconds even while
 * nothing is being sent; the control protocol's pings cover the agent itself.
 *
 * The channel's stderr is kept (last DSL_SSH_STDERR_MAX bytes) and, when the channel
 * ends, added to err with the exit status, so "bash: /x/dslaunch: No such file or
 * directory" reaches the user instead of a bare "connection closed".
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libssh/libssh.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/remote/connectback.h"
#include "dslaunch/remote/sshsession.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

#define DSL_SSH_STDERR_MAX 4096

struct ssh_priv {
    ssh_session s;
    ssh_channel ch;
    ssh_key key;            /* --ssh-identity, loaded once */
    char *identity;         /* owned copy of --ssh-identity, NULL: auto */
    char *cmd;              /* the remote command line, owned */
    char *agent;            /* the dslaunch it runs there (agent_argv[0]), owned */
    int chan_open;          /* ssh_channel_open_session done */
    int accept_new;
    double connect_timeout, keepalive;
    struct dsl_dynbuf errbuf; /* the channel's stderr, tail only */
    int eof_reported;
    double t_eof;           /* when EOF was first seen (0: not yet) */
};

/* err was filled by an sshsession.c helper */
static int conn_fail_code(struct dsl_conn *c, int code)
{
    c->state = DSL_CONN_FAILED;
    c->err_code = code;
    return code;
}

static int step_connect(struct dsl_conn *c, struct ssh_priv *p)
{
    int rc = ssh_connect(p->s);
    if (rc == SSH_AGAIN)
        return 0;
    if (rc != SSH_OK) {
        char t[600];
        dsl_ssh_target_text(p->s, c->host, t, sizeof(t));
        return dsl_cb_conn_fail(c, DSL_ECONNECT, "cannot connect to %s: %s", t,
                                ssh_get_error(p->s));
    }
    dsl_ssh_set_keepalive(p->s, p->keepalive);
    int r = dsl_ssh_check_host_key(p->s, c->host, p->accept_new, c->err);
    if (r < 0)
        return conn_fail_code(c, r);
    c->state = DSL_CONN_AUTHENTICATING;
    return 1;
}

static int step_auth(struct dsl_conn *c, struct ssh_priv *p)
{
    int r = dsl_ssh_auth_publickey(p->s, c->host, p->identity, &p->key, c->err);
    if (r == 1)
        return 0;
    if (r < 0)
        return conn_fail_code(c, r);
    c->state = DSL_CONN_STARTING;
    return 1;
}

static int step_start(struct dsl_conn *c, struct ssh_priv *p)
{
    int rc;
    if (!p->ch && !(p->ch = ssh_channel_new(p->s)))
        return dsl_cb_conn_fail(c, DSL_ECONNECT, "cannot create a channel to '%s': %s", c->host,
                                ssh_get_error(p->s));
    if (!p->chan_open) {
        rc = ssh_channel_open_session(p->ch);
        if (rc == SSH_AGAIN)
            return 0;
        if (rc != SSH_OK)
            return dsl_cb_conn_fail(c, DSL_EREMOTE, "'%s' refused a session channel: %s", c->host,
                                    ssh_get_error(p->s));
        p->chan_open = 1;
    }
    rc = ssh_channel_request_exec(p->ch, p->cmd);
    if (rc == SSH_AGAIN)
        return 0;
    if (rc != SSH_OK)
        return dsl_cb_conn_fail(c, DSL_EREMOTE, "'%s' refused to run %s: %s", c->host, p->cmd,
                                ssh_get_error(p->s));
    c->state = DSL_CONN_OPEN;
    c->t_open = dsl_now();
    return 1;
}

static int ssh_progress(struct dsl_conn *c)
{
    struct ssh_priv *p = c->priv;
    if (c->state == DSL_CONN_FAILED)
        return c->err_code;
    if (!p || c->state == DSL_CONN_OPEN || c->state == DSL_CONN_CLOSED)
        return 0;
    for (;;) {
        if (p->connect_timeout > 0 && dsl_now() - c->t_start > p->connect_timeout) {
            static const char *const what[] = {
                [DSL_CONN_CONNECTING] = "connecting",
                [DSL_CONN_AUTHENTICATING] = "authenticating",
                [DSL_CONN_STARTING] = "starting the agent",
            };
            const char *doing =
                c->state <= DSL_CONN_STARTING && what[c->state] ? what[c->state] : "?";
            return dsl_cb_conn_fail(c, DSL_ETIMEDOUT,
                                    "cannot reach '%s': timed out after %.1f s (%s)", c->host,
                                    p->connect_timeout, doing);
        }
        int r;
        switch (c->state) {
        case DSL_CONN_PENDING:
        case DSL_CONN_CONNECTING:
            c->state = DSL_CONN_CONNECTING;
            r = step_connect(c, p);
            break;
        case DSL_CONN_AUTHENTICATING:
            r = step_auth(c, p);
            break;
        case DSL_CONN_STARTING:
            r = step_start(c, p);
            break;
        default:
            return 0;
        }
        if (r < 0)
            return r;
        if (r == 0 || c->state == DSL_CONN_OPEN)
            return 0;
    }
}

static int ssh_open(struct dsl_conn *c, const struct dsl_transport_opts *o,
                    char *const *agent_argv)
{
    dsl_cb_conn_begin(c);
    struct ssh_priv *p = dsl_xcalloc(1, sizeof(*p));
    dsl_dynbuf_init(&p->errbuf, DSL_SSH_STDERR_MAX * 2);
    c->priv = p;
    p->cmd = dsl_shell_command(agent_argv);
    p->agent = dsl_xstrdup(agent_argv[0]);
    p->accept_new = o->accept_new;
    p->connect_timeout = o->connect_timeout;
    p->keepalive = o->keepalive;
    if (o->ssh_identity)
        p->identity = dsl_xstrdup(o->ssh_identity);
    /* the hostfile's "user@host" wins over the ssh config's User (as ssh -l does) */
    struct dsl_transport_opts uo = *o;
    if (c->user)
        uo.ssh_user = c->user;
    int r = dsl_ssh_session_new(&p->s, c->host, &uo, c->err);
    if (r < 0)
        return conn_fail_code(c, r);
    ssh_set_blocking(p->s, 0);
    return ssh_progress(c);
}

static int ssh_pollfd(struct dsl_conn *c, short *events)
{
    struct ssh_priv *p = c->priv;
    *events = 0;
    if (!p || !p->s || c->state == DSL_CONN_FAILED)
        return -1;
    int fd = ssh_get_fd(p->s);
    if (fd < 0)
        return -1;
    int fl = ssh_get_poll_flags(p->s);
    *events = POLLIN;
    if (fl & SSH_WRITE_PENDING)
        *events |= POLLOUT;
    return fd;
}

/* Keep the last DSL_SSH_STDERR_MAX bytes of the channel's stderr. */
static void drain_stderr(struct ssh_priv *p)
{
    char buf[1024];
    int n;
    while ((n = ssh_channel_read_nonblocking(p->ch, buf, sizeof(buf), 1)) > 0) {
        size_t keep = DSL_SSH_STDERR_MAX - (size_t)n;
        if (p->errbuf.len > keep)
            dsl_dynbuf_consume(&p->errbuf, p->errbuf.len - keep);
        if (dsl_dynbuf_add(&p->errbuf, buf, (size_t)n) < 0)
            dsl_dynbuf_init(&p->errbuf, DSL_SSH_STDERR_MAX * 2);
    }
}

/* On EOF: "remote command exited with status 127: bash: ...: No such file". */
static void report_end(struct dsl_conn *c, struct ssh_priv *p)
{
    if (p->eof_reported)
        return;
    p->eof_reported = 1;
    drain_stderr(p);
    int st = ssh_channel_get_exit_status(p->ch);
    /* the last line or two of stderr, newlines folded */
    char tail[400];
    const char *e = dsl_dynbuf_str(&p->errbuf);
    size_t len = strlen(e);
    while (len && (e[len - 1] == '\n' || e[len - 1] == '\r'))
        len--;
    size_t from = len > sizeof(tail) - 1 ? len - (sizeof(tail) - 1) : 0;
    size_t o = 0;
    for (size_t i = from; i < len; i++)
        tail[o++] = e[i] == '\n' ? ';' : e[i];
    tail[o] = '\0';
    if (st == 127 || st == 126) {
        /* the remote shell found no dslaunch there (127) or could not run it (126): the
         * most common first multi-node failure, so say what to do */
        c->err_code = st == 127 ? -ENOENT : -EACCES;
        dsl_cb_no_agent_msg(c->err, sizeof(c->err), st == 127, p->agent, c->host, tail);
    } else if (st >= 0 && st != 0)
        snprintf(c->err, sizeof(c->err), "remote command on '%s' exited with status %d%s%s",
                 c->host, st, o ? ": " : "", tail);
    else if (o)
        snprintf(c->err, sizeof(c->err), "remote command on '%s' ended: %s", c->host, tail);
}

static ssize_t ssh_read(struct dsl_conn *c, void *buf, size_t n)
{
    struct ssh_priv *p = c->priv;
    if (!p || !p->ch || c->state != DSL_CONN_OPEN)
        return c->state == DSL_CONN_CLOSED ? 0 : -EIO;
    drain_stderr(p);
    uint32_t want = n > 0x100000 ? 0x100000 : (uint32_t)n;
    int r = ssh_channel_read_nonblocking(p->ch, buf, want, 0);
    if (r > 0)
        return r;
    if (r == SSH_ERROR) {
        snprintf(c->err, sizeof(c->err), "connection to '%s' lost: %s", c->host,
                 ssh_get_error(p->s));
        c->err_code = DSL_ECONNECT;
        return -ECONNRESET;
    }
    if (ssh_channel_is_eof(p->ch) || ssh_channel_is_closed(p->ch)) {
        /*
         * sshd may send EOF before the exit status: wait (bounded) for the status or
         * the channel close that follows it, so a failed start is reported with it
         */
        if (!ssh_channel_is_closed(p->ch) && ssh_channel_get_exit_status(p->ch) < 0) {
            if (p->t_eof == 0)
                p->t_eof = dsl_now();
            if (dsl_now() - p->t_eof < 2.0)
                return -EAGAIN;
        }
        report_end(c, p);
        c->state = DSL_CONN_CLOSED;
        return 0;
    }
    return -EAGAIN;
}

static ssize_t ssh_write(struct dsl_conn *c, const void *buf, size_t n)
{
    struct ssh_priv *p = c->priv;
    if (!p || !p->ch || c->state != DSL_CONN_OPEN)
        return -EPIPE;
    uint32_t want = n > 0x100000 ? 0x100000 : (uint32_t)n;
    int r = ssh_channel_write(p->ch, buf, want);
    if (r > 0)
        return r;
    if (r == 0 || r == SSH_AGAIN)
        return -EAGAIN;
    snprintf(c->err, sizeof(c->err), "cannot write to '%s': %s", c->host, ssh_get_error(p->s));
    c->err_code = DSL_ECONNECT;
    return -EPIPE;
}

static void ssh_close_write(struct dsl_conn *c)
{
    struct ssh_priv *p = c->priv;
    if (p && p->ch && c->state == DSL_CONN_OPEN)
        ssh_channel_send_eof(p->ch);
}

static void ssh_close(struct dsl_conn *c)
{
    struct ssh_priv *p = c->priv;
    if (!p)
        return;
    /* non-blocking to the end: a vanished host must not stall the launcher */
    if (p->ch)
        ssh_channel_free(p->ch);
    if (p->s) {
        if (ssh_is_connected(p->s))
            ssh_disconnect(p->s);
        ssh_free(p->s);
    }
    ssh_key_free(p->key);
    free(p->identity);
    free(p->cmd);
    free(p->agent);
    dsl_dynbuf_release(&p->errbuf);
    free(p);
    c->priv = NULL;
}

const struct dsl_transport_ops dsl_transport_ssh = DSL_TRANSPORT_OPS("ssh", ssh);
