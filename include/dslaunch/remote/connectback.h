/*
 * Connect-back: the control channel for transports that cannot carry a per-host stdin
 * (pdsh, whose remote stdin is never fed; mpirun, which forwards stdin to rank 0 only).
 *
 * The launcher opens one TCP listener and starts every agent as
 * `dslaunch --agent --connect ADDR:PORT[,...] --launcher-key L [--connect-index I]`,
 * L being the public half of an X25519 key pair the launcher made for that connection
 * (or mpirun batch; I is then the agent's rank in the batch). Nothing on that command
 * line is a secret. The agent makes its own key pair, prints the public half A on its
 * stdout as the line "DSLCB2-KEY I A" (pdsh and mpirun carry it back to the launcher,
 * which reads their output), connects to the first address that answers and starts the
 * handshake of seal.h with a hello naming A. The listener hands each accepted socket to
 * the connection that expects its A; the connection completes the handshake (both ends
 * prove their keys) and from then on the socket carries AES-GCM frames, in which the
 * bytes travel that stdin/stdout would have carried. A hello naming no expected key is
 * held until its key is read (at most CB_PENDING_TIMEOUT) and then closed; anything
 * that is not a hello is closed at once; a key is used once.
 */
#ifndef DSLAUNCH_CONNECTBACK_H
#define DSLAUNCH_CONNECTBACK_H

#include <stddef.h>
#include <sys/types.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/remote/seal.h"

#define DSL_CB_KEY_LINE "DSLCB2-KEY " /* the agent's stdout line: "DSLCB2-KEY I A\n" */

/* ---- agent side ---- */

/**
 * Dial the launcher: hostports is "ADDR:PORT" or a comma-separated list of them
 * ("[v6addr]:PORT" for IPv6), all tried at once; the first that connects wins, within
 * timeout_s seconds. launcher_key is L in hex, index the agent's I (0..99999). Makes
 * the agent's key pair, writes its key line to key_fd (the agent's stdout) before it
 * connects, and sends the hello; seal (caller's, released by the caller in every case)
 * is then waiting for the launcher's reply. *fd_out is a blocking socket owned by the
 * caller. Negative code with err set otherwise.
 */
int dsl_agent_cb_dial(const char *hostports, const char *launcher_key, int index,
                      double timeout_s, int key_fd, int *fd_out, struct dsl_seal *seal,
                      char *err);
/**
 * The same with a key pair the caller has (no-ssh mode: both derived from the job
 * secret, seal.h) and no key line: dial by deadline (dsl_now() clock); with retry,
 * addresses that refuse or do not answer are tried again until then (the coordinator
 * may start later than its agents).
 */
int dsl_agent_cb_dial_keyed(const char *hostports, const unsigned char apriv[DSL_SEAL_KEY_LEN],
                            const unsigned char lpub[DSL_SEAL_KEY_LEN], double deadline,
                            int retry, int *fd_out, struct dsl_seal *seal, char *err);
/**
 * Finish the agent's handshake on fd (from dial) by deadline (dsl_now() clock): read the
 * launcher's reply, check it, send the confirm. 0 (seal OPEN) or negative with err
 * (DSL_EAUTH: whoever answered does not hold the launcher's key).
 */
int dsl_agent_cb_handshake(int fd, struct dsl_seal *seal, double deadline, char *err);

/* ---- launcher side ---- */

struct dsl_cb_listener; /* opaque: sockets, pending connections, expected keys */

/**
 * Listen on bind_addr (NULL: every IPv4 address) on an ephemeral port. The listener is
 * owned by the caller and freed with dsl_cb_listener_free().
 */
int dsl_cb_listener_open(struct dsl_cb_listener **out, const char *bind_addr, char *err);
/** The same on a given port (0: ephemeral); no-ssh mode's coordinator listens so. */
int dsl_cb_listener_open_at(struct dsl_cb_listener **out, const char *bind_addr, int port,
                            char *err);
void dsl_cb_listener_free(struct dsl_cb_listener *l);
/**
 * Strict mode, for a listener whose every key is expected from the start (no-ssh mode):
 * a hello naming no expected key, or one whose key's socket already arrived, is closed
 * at once and counted instead of parked. refused() is that count; *from (if given) the
 * numeric address of the last one, owned by the listener.
 */
void dsl_cb_listener_strict(struct dsl_cb_listener *l);
int dsl_cb_listener_refused(const struct dsl_cb_listener *l, const char **from);
/**
 * The --connect argument for agents: bind_addr:PORT, or every IPv4 address of this host
 * that is up, non-loopback ones first. Owned by the listener.
 */
const char *dsl_cb_listener_connect_arg(const struct dsl_cb_listener *l);
/** An fd to poll for POLLIN (an epoll set): readable when service() has work. */
int dsl_cb_listener_pollfd(const struct dsl_cb_listener *l);
/**
 * Register an agent key to wait for (a copy is kept). Returns its ready fd: an eventfd
 * owned by the listener that becomes readable (POLLIN) once a connection whose hello
 * names the key has arrived, whichever caller's service() read it (a hello that came
 * before its key was registered counts), and is closed by take() or cancel(). Put it
 * into the owner's poll set next to dsl_cb_listener_pollfd(). -errno if none could be
 * made (the key is still expected; the owner then learns of it by polling take()).
 */
int dsl_cb_listener_expect(struct dsl_cb_listener *l, const unsigned char key[DSL_SEAL_KEY_LEN]);
/** Forget a key (its socket, if it arrived and was not taken, is closed). */
void dsl_cb_listener_cancel(struct dsl_cb_listener *l, const unsigned char key[DSL_SEAL_KEY_LEN]);
/** Accept new connections and look at their hellos; never blocks. */
void dsl_cb_listener_service(struct dsl_cb_listener *l);
/**
 * The socket (non-blocking, owned by the caller from now on, its hello still unread)
 * whose hello named key, or -EAGAIN while it has not arrived. The key is then forgotten.
 */
int dsl_cb_listener_take(struct dsl_cb_listener *l, const unsigned char key[DSL_SEAL_KEY_LEN]);

/*
 * The listener shared by every connect-back connection of this process, reference
 * counted: get() opens it on first use (bind_addr of later calls is ignored) and takes
 * a reference, NULL with err set on failure; put() drops one, the last frees it.
 */
struct dsl_cb_listener *dsl_cb_shared_get(const char *bind_addr, char *err);
void dsl_cb_shared_put(void);

/* ---- helpers of the connect-back transports (pdsh, openmpi) ---- */

struct dsl_transport_opts;
struct dsl_dynbuf;
struct dsl_conn;

/*
 * The user's ssh paths (--ssh-config, --ssh-identity, --known-hosts) as symbolic links
 * in a private directory (mkdtemp, 0700, a name of [A-Za-z0-9/._-] only), made on first
 * use and removed by release(). Owned by the caller.
 */
struct dsl_cb_sshfiles {
    char *dir; /* NULL until a link was needed */
};
void dsl_cb_sshfiles_init(struct dsl_cb_sshfiles *f);
void dsl_cb_sshfiles_release(struct dsl_cb_sshfiles *f);
/**
 * The ssh options of o as one space-separated string ("-o BatchMode=yes -F cfg ..."),
 * for programs that split it on spaces and may hand it to a shell (PDSH_SSH_ARGS_APPEND,
 * plm_rsh_agent). Every user path in it is a link in f's directory, so no space, quote,
 * newline or `$(...)` of the user's path is split or interpreted anywhere; a user name
 * outside [A-Za-z0-9._-] is refused (NULL with err). Owned by the caller.
 */
char *dsl_cb_ssh_options(const struct dsl_transport_opts *o, struct dsl_cb_sshfiles *f,
                         char *err);
/**
 * Fork and exec argv with env as the leader of its own process group, stdin /dev/null,
 * stdout and stderr into *outfd (non-blocking read end), SIGTERM when this process
 * dies. *pidfd is a pidfd of the child or -1 where unsupported. All owned by the
 * caller. Negative code with err set when it could not fork (an exec failure is exit
 * 127 of the child).
 */
int dsl_cb_spawn(char *const *argv, char *const *env, pid_t *pid, int *outfd, int *pidfd,
                 char *err);
/**
 * Reap the spawned *pid if it has exited (then *pid = 0, *status its wait status, and
 * *pidfd closed, which also takes it out of every epoll set). With neither outfd nor
 * *pidfd left to wake the caller, it is exiting: wait for it, at most a second.
 * 1 once reaped.
 */
int dsl_cb_reap(pid_t *pid, int *status, int outfd, int *pidfd);
/**
 * End the spawned *pid and its process group: reap it (dsl_cb_reap) as soon as it has
 * exited; SIGTERM to the group once term_after seconds have passed, SIGKILL (and a
 * blocking wait) after kill_after. *pid is 0 afterwards.
 */
void dsl_cb_stop(pid_t *pid, int *status, int outfd, int *pidfd, double term_after,
                 double kill_after);
/** Set c CONNECTING from now, with no error: the start of every transport's open(). */
void dsl_cb_conn_begin(struct dsl_conn *c);
/** Set c FAILED with err_code code and the message; returns code. */
int dsl_cb_conn_fail(struct dsl_conn *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/**
 * The message for no dslaunch (missing: 1) or an unrunnable one (0) at the agent path
 * on host, with the remote shell's words (tail) and what to do: every transport says
 * it the same way.
 */
void dsl_cb_no_agent_msg(char *buf, size_t n, int missing, const char *agent,
                         const char *host, const char *tail);
/**
 * When the output tail of a launcher that ended before c's agent connected back says
 * that the agent program (its path) was not found or could not be run on the node,
 * fail c with -ENOENT or -EACCES and what to do (the ssh transport's wording) and
 * return that; else 0.
 */
int dsl_cb_conn_no_agent(struct dsl_conn *c, const char *agent, const char *tail);
/**
 * The launcher program prog (pdsh, srun, ...) ended with waitpid status before c's agent
 * connected back, its output ending in tail: *code is its exit code (128 + signal).
 * Fails c (negative) when prog could not run or the agent is missing or unrunnable
 * (dsl_cb_conn_no_agent); 0 leaves the verdict to the transport.
 */
int dsl_cb_conn_ended(struct dsl_conn *c, const char *prog, int status, const char *agent,
                      const char *tail, int *code);

/*
 * Key lines ("DSLCB2-KEY I A", see above) in pdsh's or mpirun's output: the first
 * line for each index 0..n-1 wins. Owned by the caller; dsl_cb_keys_release() frees.
 */
struct dsl_cb_keys {
    int n;
    unsigned char (*key)[DSL_SEAL_KEY_LEN];
    unsigned char *have; /* have[i]: key[i] was read */
    char line[160];      /* the line being assembled */
    size_t len;
    int skipping;        /* the line being read is too long to be a key line */
};
void dsl_cb_keys_init(struct dsl_cb_keys *k, int n);
void dsl_cb_keys_release(struct dsl_cb_keys *k);

/**
 * Read what *fd has without blocking. With keys, key lines are taken out into keys;
 * all other output is kept in out, its last max bytes (max > 2048). At EOF closes *fd
 * and sets it to -1.
 */
void dsl_cb_drain_tail(int *fd, struct dsl_dynbuf *out, size_t max, struct dsl_cb_keys *keys);

/*
 * The launcher's end of an agent's socket (cbstream.c): the handshake and then a
 * dsl_conn's read()/write() over sealed frames. The fd is owned by the stream.
 */
struct dsl_cb_stream {
    int fd;
    struct dsl_seal seal;
};
/** Take over fd (from dsl_cb_listener_take) for the agent whose key is apub. */
int dsl_cb_stream_init(struct dsl_cb_stream *st, int fd,
                       const unsigned char lpriv[DSL_SEAL_KEY_LEN],
                       const unsigned char apub[DSL_SEAL_KEY_LEN]);
/**
 * Advance the handshake without blocking: 1 once both ends proved their keys, 0 while
 * waiting, or a negative code with err naming host (DSL_EAUTH: a forged agent).
 */
int dsl_cb_stream_handshake(struct dsl_cb_stream *st, const char *host, char *err);
/**
 * Plaintext read()/write() as a dsl_conn reports them: bytes, 0 at EOF (read), -EAGAIN
 * when it would block, else negative (DSL_EAUTH / DSL_EPROTO from the seal, whose err
 * says why, or -errno). write() takes at most one frame per call and never raises
 * SIGPIPE; sealed bytes the socket did not take are sent by later calls of either.
 */
ssize_t dsl_cb_stream_read(struct dsl_cb_stream *st, void *buf, size_t n);
ssize_t dsl_cb_stream_write(struct dsl_cb_stream *st, const void *buf, size_t n);
/** 1 while sealed bytes wait for the socket (poll it for POLLOUT too). */
int dsl_cb_stream_want_write(const struct dsl_cb_stream *st);
/** Send what waits (at most 2 s), then EOF to the agent. */
void dsl_cb_stream_shutdown(struct dsl_cb_stream *st);
/** Close the socket and wipe the keys (also for a stream never initialised: fd -1). */
void dsl_cb_stream_close(struct dsl_cb_stream *st);

/*
 * A connect-back transport's dsl_conn operations over its stream (pdsh, openmpi,
 * slurm): st may be NULL (the connection has no state). pollfd returns wait_fd (the
 * transport's own) until the connection is open, then the stream's socket, POLLOUT
 * while sealed bytes wait; read names the sealed channel in c->err when the seal
 * failed and marks the connection closed at EOF.
 */
struct dsl_conn;
/**
 * Bring c's stream up: once the listener l holds the connection for key (while
 * *expecting), take it into st (cleared *expecting) and add it to epfd; then advance the
 * handshake. 1: open; 0: not yet; negative: c FAILED with the reason in c->err.
 */
int dsl_cb_conn_accept(struct dsl_conn *c, struct dsl_cb_listener *l, int *expecting,
                       struct dsl_cb_stream *st, const unsigned char lpriv[DSL_SEAL_KEY_LEN],
                       const unsigned char key[DSL_SEAL_KEY_LEN], int epfd);
int dsl_cb_conn_pollfd(const struct dsl_conn *c, const struct dsl_cb_stream *st, int wait_fd,
                       short *events);
ssize_t dsl_cb_conn_read(struct dsl_conn *c, struct dsl_cb_stream *st, void *buf, size_t n);
ssize_t dsl_cb_conn_write(struct dsl_cb_stream *st, const void *buf, size_t n);
void dsl_cb_conn_close_write(struct dsl_cb_stream *st);

#endif
