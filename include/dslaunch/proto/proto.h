/*
 * The launcher <-> node agent control protocol.
 *
 * A byte stream (the agent's stdin/stdout: a local socketpair, an SSH exec channel, a
 * pdsh pipe) carries messages framed as single lines of JSON, one object per line, with
 * a "t" member naming the type. JSON string escaping guarantees that no payload byte
 * (a newline inside an argument, say) can end a frame early. Lines are bounded
 * (DSL_PROTO_MAX_LINE); a longer line, bad JSON or a message with missing or mistyped
 * members is a protocol error that ends the connection.
 *
 * Messages (direction, members):
 *   hello   a->l  proto, version, host, cpus, gpus, pid, ifaces [{name, addrs[]}],
 *                 contain (optional: how the node contains a rank's processes, e.g.
 *                 "cgroup v2 (memory, cgroup.kill)" or "process tracking"), memcg
 *                 (optional, 1: a rank's memory can be limited and its OOM kills seen),
 *                 slots, node_rank, nnodes (optional, together: an agent of no-ssh mode
 *                 that dialled in says how many ranks its node runs and which node it is),
 *                 argv_sha256 (optional, no-ssh: the digest of the PROGRAM and arguments
 *                 that node was started with, dsl_nossh_argv_digest; "" for none), argv
 *                 (optional, with argv_sha256 when under 64 KiB: those words, to show)
 *   probe   l->a  port (master port to hold, 0 = none), pick (1 = choose a free port if
 *                 busy), connect [addr...] (addresses to test), cport, program, cwd,
 *                 diag (optional, 1 = also collect facts for `dslaunch doctor`),
 *                 ld_path (optional, the ranks' LD_LIBRARY_PATH for those facts),
 *                 bind (optional: the address to hold port on), script (optional: the
 *                 .py file python3 will run, checked in cwd). A port still held when
 *                 "start" arrives is handed to rank 0 (DSLAUNCH_STORE_FD)
 *   probed  a->l  port (held port, 0 if none), port_busy, reach [0|1 per connect addr],
 *                 iface, src (the interface and source address routing to the first
 *                 reached address), program_ok, cwd_ok, detail (what failed; the
 *                 program's path where it was found), facts (only when
 *                 the probe had diag = 1: {kernel, glibc, cuda_driver, cuda_runtime, nccl,
 *                 cudart_path, nccl_path (optional), cvd, cvd_set, nvml, gpu_free[], gpu_total[] (MiB), ib[], p2p,
 *                 disk_free, t_recv, t_send}, see facts.h)
 *   start   l->a  node_rank, host_label, cwd, argv[], env[] ("K=V" for all ranks),
 *                 ranks [{rank, local_rank, env[]}], grace, keepalive, lra (1: append
 *                 --local_rank=N to each rank's argv), mem_limit (optional: bytes of
 *                 memory each rank's cgroup may use; absent or 0: no limit), progress
 *                 (optional: seconds between reads of the ranks' progress files; absent
 *                 or 0: no files)
 *   started a->l  rank, pid
 *   out     a->l  rank, s (1 stdout, 2 stderr), line, cr (1 if ended by '\r')
 *   exit    a->l  rank, pid, code (-1 if signalled), sig, wall, tail[] (last stderr lines),
 *                 cause (optional: {oom, src, kills, stop, limit, peak, avail}, why
 *                 the rank ended as far as its node can tell; see struct dsl_exit_cause)
 *   spawnerr a->l rank, error
 *   stop    l->a  sig (signal to send first), grace (seconds before SIGKILL), refused
 *                 (optional, no-ssh: why the coordinator refuses the job before it starts;
 *                 the node prints it and exits 202)
 *   ping    both  (keepalive; any message counts as a sign of life)
 *   bye     a->l  (every rank has exited and been reported)
 *   progress a->l ranks [{rank, adv (1: the file's content changed), form, step, cseq,
 *                 ckind, in, text, ps (process state letter), optional ph (phase) and
 *                 busy (1: CPU time advancing, 0: not)}]: the ranks whose progress file,
 *                 process state or busyness changed since the last report; an exit is
 *                 preceded by its rank's final progress, if that changed
 *   stacks  l->a  timeout: capture a stack of every live rank (seconds per process);
 *                 optional probe (1: native stacks only, no Python dump: the ranks go on)
 *   stacked a->l  stacks [{rank, pid, tool, text}]: the answer, one entry per rank;
 *                 optional probe (1: the answer to a probe)
 *
 * Optional members were added within protocol version 1: a peer that does not know
 * one ignores it, and a missing one reads as "not known" (no containment reported, no
 * memory limit, no cause), so launchers and agents of neighbouring versions still work
 * together; a member that is present must be well-formed. The progress, stacks and
 * stacked messages are new types within version 1 too, so each is sent only to a peer
 * that showed it knows them: an agent sends progress only when start asked for it,
 * and the launcher asks for stacks only agents that have sent progress.
 */
#ifndef DSLAUNCH_PROTO_H
#define DSLAUNCH_PROTO_H

#include <stddef.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/progress.h"
#include "dslaunch/proto/facts.h"
#include "dslaunch/common/strvec.h"

#define DSL_PROTO_VERSION 1
#define DSL_PROTO_MAX_LINE (8u << 20)
#define DSL_PROTO_MAX_TAIL 20
#define DSL_PROTO_MAX_STACK (256u << 10) /* bytes of one rank's stack text */

enum dsl_msg_type {
    DSL_MSG_HELLO = 1,
    DSL_MSG_PROBE,
    DSL_MSG_PROBED,
    DSL_MSG_START,
    DSL_MSG_STARTED,
    DSL_MSG_OUT,
    DSL_MSG_EXIT,
    DSL_MSG_SPAWNERR,
    DSL_MSG_STOP,
    DSL_MSG_PING,
    DSL_MSG_BYE,
    DSL_MSG_PROGRESS,
    DSL_MSG_STACKS,
    DSL_MSG_STACKED,
    DSL_MSG_SIGNAL, /* launcher -> agent: pass sig to every running rank (SIGUSR1) */
    DSL_MSG_NTYPES /* not a type: one past the last */
};

struct dsl_iface {
    char *name;
    struct dsl_strvec addrs;
};

struct dsl_rank_spec {
    int rank, local_rank;
    struct dsl_strvec env;
};

/* Whether the OOM killer ended a rank, or another process of the rank's cgroup. */
enum dsl_oom_kind { DSL_OOM_NONE = 0, DSL_OOM_RANK = 1, DSL_OOM_OTHER = 2 };
/* How the agent knows: the rank cgroup's OOM counter, or the kernel log. */
enum dsl_oom_source { DSL_OOMSRC_NONE = 0, DSL_OOMSRC_CGROUP = 1, DSL_OOMSRC_KMSG = 2 };

/*
 * Why a rank ended, as far as its node can tell (the exit message's "cause"). The
 * memory figures are bytes; 0 means none or not known. mem_avail is the node's
 * MemAvailable read when the rank was reaped, i.e. after the kernel took back what the
 * rank held; the agent reads it for SIGKILL deaths and OOM kills only.
 */
struct dsl_exit_cause {
    int known;        /* 1: the agent sent a cause; 0: an older agent, nothing known */
    int oom;          /* enum dsl_oom_kind */
    int oom_src;      /* enum dsl_oom_source */
    int oom_kills;    /* processes the OOM killer ended in the rank's cgroup */
    int by_stop;      /* 1: the signal that ended the rank came from dslaunch's stop */
    int unstopped;    /* 1: the rank ended before its agent had signalled it at all */
    double mem_limit; /* the rank cgroup's memory limit */
    double mem_peak;  /* the most memory the rank's cgroup used */
    double mem_avail; /* the node's available memory */
};

/* One rank's news in a progress message (view.hash does not travel). */
struct dsl_rank_progress {
    int rank;
    int advanced;                 /* the progress file's content changed */
    char pstate;                  /* /proc state letter (R, S, D, T, t, Z), 0 unknown */
    int busy;                     /* 1: its processes used CPU time (a tenth of a core
                                     or more) over the last look, 0: not, -1: unknown (an
                                     agent from before busy, which knows no probe) */
    struct dsl_progress_view view;
};

/* One rank's stack in a stacked message; strings owned by the message. */
struct dsl_rank_stack {
    int rank, pid;
    char *tool;                   /* "gdb", "eu-stack", "gdb+faulthandler", "none" */
    char *text;
};

/*
 * A decoded message. Only the members of its type are meaningful; every pointer member
 * is owned by the message and freed by dsl_msg_release().
 */
struct dsl_msg {
    enum dsl_msg_type type;
    /* hello */
    int proto, cpus, gpus, pid;
    char *version, *host;
    struct dsl_iface *ifaces;
    int nifaces;
    char *contain;             /* optional (NULL: not sent) */
    int memcg;                 /* optional (0: not sent) */
    int slots, nnodes;         /* optional, with node_rank (slots 0: not sent; no-ssh) */
    char *argv_sha256;         /* optional (NULL: not sent; "": no program); the words
                                  themselves, when sent, are in argv (has_argv = 1) */
    int has_argv;
    char *refused;             /* stop, optional: the coordinator refuses the job */
    /* probe / probed */
    int port, pick, cport, port_busy, program_ok, cwd_ok;
    struct dsl_strvec connect; /* probe: addresses to test */
    int *reach;                /* probed: one flag per probe address */
    int nreach;
    char *iface, *src, *detail, *program;
    char *script;              /* probe: a Python SCRIPT to find in cwd (optional, owned;
                                  absent: none) */
    int diag;                  /* probe: also collect facts (optional member) */
    char *ld_path;             /* probe: the ranks' LD_LIBRARY_PATH (optional, owned) */
    char *bind;                /* probe: the IPv4 address to hold port on (optional,
                                  owned; absent: every address) */
    struct dsl_facts *facts;   /* probed: NULL unless the probe asked (owned) */
    /* start */
    int node_rank;
    char *host_label, *cwd;
    struct dsl_strvec argv, env;
    struct dsl_rank_spec *ranks;
    int nranks;
    double grace, keepalive;
    int local_rank_arg;  /* "--local_rank=N" goes before argv[local_rank_arg]; 0: none */
    double mem_limit;          /* optional (0: none) */
    int cpubind;               /* start, optional: bind the ranks to shares of the cores */
    char *core_list;           /* start, optional: the cores to share (NULL: all allowed) */
    /* started / out / exit / spawnerr */
    int rank, stream, cr, code, sig;
    char *line, *error;
    size_t line_len;           /* out: the bytes of line (it may hold NULs; NUL-terminated) */
    int end;                   /* out: what ended it, DSL_END_* (optional; cr says "\r") */
    double wall;
    struct dsl_strvec tail;
    struct dsl_exit_cause cause; /* exit: optional (cause.known = 0: not sent) */
    /* start (optional) / stacks */
    double progress_tick;      /* start: seconds between progress reads, 0 = none */
    double stack_timeout;      /* stacks: seconds each capture may take */
    int stack_probe;           /* stacks: native stacks only, the ranks left as they are;
                                  stacked: the answer to such a probe */
    /* progress / stacked (owned) */
    struct dsl_rank_progress *progress;
    int nprogress;
    struct dsl_rank_stack *stacks;
    int nstacks;
};

void dsl_msg_init(struct dsl_msg *m, enum dsl_msg_type type);
void dsl_msg_release(struct dsl_msg *m);

/** Encode m as one JSON line ending in '\n', appended to out. */
int dsl_msg_encode(const struct dsl_msg *m, struct dsl_dynbuf *out);
/** Decode one line (without its '\n'). On error m is released and err says why. */
int dsl_msg_decode(struct dsl_msg *m, const char *line, size_t len, char *err);

/**
 * The digest a no-ssh node's hello carries of the PROGRAM and arguments it was started
 * with (argv[0..n)): SHA-256 of each word as an 8-byte big-endian length and its bytes,
 * in lowercase hex; "" when n is 0 (no PROGRAM: the node runs node 0's).
 */
void dsl_nossh_argv_digest(char *const *argv, size_t n, char hex[65]);

/* How a rank's output line ended (out messages): the bytes that follow line. */
enum dsl_line_end {
    DSL_END_NONE = 0, /* a piece of a longer line, or the last bytes before EOF */
    DSL_END_LF = 1,   /* "\n" */
    DSL_END_CR = 2,   /* "\r": a progress bar redrawing itself */
    DSL_END_CRLF = 3, /* "\r\n" */
};
/** The bytes of an ending: "", "\n", "\r" or "\r\n". */
const char *dsl_line_end_text(int end);

/**
 * Split a stream into lines: feed bytes with dsl_linebuf_feed, then take complete
 * messages with dsl_msg_next until it returns 0.
 */
struct dsl_linebuf {
    struct dsl_dynbuf buf;
};
void dsl_linebuf_init(struct dsl_linebuf *lb);
int dsl_linebuf_feed(struct dsl_linebuf *lb, const void *data, size_t n);
/** 1 and *m filled if a full message was available, 0 if more bytes are needed, <0 on error. */
int dsl_msg_next(struct dsl_linebuf *lb, struct dsl_msg *m, char *err);
void dsl_linebuf_release(struct dsl_linebuf *lb);

#endif
