/*
 * Internal interface among the files of the node agent, private to src/agent: the
 * agent's state, and the calls between its parts. The calls go one way: agent.c (the
 * loop, the control input) uses the others; agent_start.c (probe and start) uses
 * agent_ranks.c (the ranks' output, exits and stop) and agent_io.c (the control
 * output); agent_ranks.c uses agent_io.c; agent_dial.c calls only the entry points.
 */
#ifndef DSLAUNCH_AGENT_IMPL_H
#define DSLAUNCH_AGENT_IMPL_H

#include <stddef.h>
#include <sys/types.h>

#include "agent_progress.h"
#include "contain.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/proto/proto.h"

struct dsl_seal;
struct dsl_agent_join;

#define OUTQ_MAX (64u << 20)     /* hard bound on queued control output */
#define OUTQ_PAUSE (4u << 20)    /* stop reading rank pipes above this */
#define LINE_MAX_BYTES (1u << 20) /* a longer line is forwarded in pieces */

enum dsl_agent_state { AG_WAITING, AG_RUNNING, AG_STOPPING, AG_CLEANING, AG_DONE };

#define CLEAN_PATIENCE 5.0 /* seconds past the SIGKILL before leftovers go to the keeper */

struct dsl_agent_rank {
    int rank, local_rank;
    pid_t pid;
    int fd[3];                    /* [1] stdout, [2] stderr; -1 when closed */
    struct dsl_dynbuf part[3];    /* partial line per stream */
    char *tail[DSL_PROTO_MAX_TAIL]; /* ring of the last stderr lines */
    int tail_pos, ntail;
    double t_start;
    int exited, reported, code, sig;
    double wall;
    unsigned long long sent_sigs; /* bit n: this agent sent signal n to the rank's group */
    struct dsl_exit_cause cause;  /* read when the rank was reaped */
};

struct dsl_agent {
    int in_fd, out_fd;
    struct dsl_seal *seal;        /* connect-back: frames on in_fd == out_fd; else NULL */
    int in_eof, eof_acted;
    int usr1_pending; /* SIGUSR1 came before the ranks started: passed on when they do */
    struct dsl_linebuf in;
    struct dsl_dynbuf outq;
    enum dsl_agent_state state;
    struct dsl_agent_rank *ranks;
    int nranks;
    double grace, keepalive;
    double kill_at, last_rx, last_ping;
    int stop_sig;                 /* the signal the stop sent to the ranks */
    double give_up_at;            /* CLEANING: leave what will not die to the keeper */
    int probe_lfd;
    int sigpipe[2];
    struct dsl_contain contain;   /* the ranks' cgroups or process tracking */
    struct dsl_agent_progress prog; /* progress files, stack captures */
    struct dsl_agent_join *join; /* no-ssh mode: this node, for the hello; or NULL */
    /* the node's outcome, for an agent that is its node's launcher (no-ssh mode) */
    int first_fail;               /* first rank exit that was not 0 before any stop:
                                     its code or 128 + signal; 0 none */
    int stop_cause;               /* what stopped the node first: STOP_* */
    int stop_signo;               /* STOP_SIGNAL: the signal */
};

/* what stopped the node first (the outcome of a no-ssh node) */
enum { STOP_NONE = 0, STOP_ASKED, STOP_LOST, STOP_SIGNAL, STOP_REFUSED };

/* ---- agent_io.c: the control output ---- */

/** Queue m for the launcher (encoded now); dropped once the launcher is gone. */
void dsl_agent_send(struct dsl_agent *a, const struct dsl_msg *m);
/** 1 when bytes wait for the control output. */
int dsl_agent_want_write(struct dsl_agent *a);
/** Write what the control output takes now; with block, wait up to 2 s for it. */
void dsl_agent_flush(struct dsl_agent *a, int block);

/* ---- agent_ranks.c: the ranks' output, exits, stop and clean-up ---- */

/** Read rank r's stream s (1 stdout, 2 stderr) and forward its complete lines. */
void dsl_agent_read_pipe(struct dsl_agent *a, struct dsl_agent_rank *r, int s);
/** Reap the ranks that exited and report them, the ones killed by a signal first. */
void dsl_agent_reap(struct dsl_agent *a);
/** sig to every live rank's process group and to the ranks' other processes. */
void dsl_agent_signal_ranks(struct dsl_agent *a, int sig);
/** A warning (SIGUSR1) to every live rank's own process, not its group. */
void dsl_agent_warn_ranks(struct dsl_agent *a, int sig);
/** SIGUSR1 sent to the agent itself: to this node's running ranks, once. */
void dsl_agent_pass_usr1(struct dsl_agent *a);
/** Stop every rank with sig, SIGKILL after grace. */
void dsl_agent_begin_stop(struct dsl_agent *a, int sig, double grace);
/** Every rank has been reported: from now on only what they left behind is killed. */
void dsl_agent_begin_cleaning(struct dsl_agent *a);
/** One step of CLEANING: done when nothing is left, SIGKILL once the deadline passed. */
void dsl_agent_clean_step(struct dsl_agent *a, double now);
int dsl_agent_all_reported(const struct dsl_agent *a);

/* ---- agent_start.c: what the launcher asks of a waiting node ---- */

/** Hold or pick the master port, test reachability, find the route; answer probed. */
void dsl_agent_handle_probe(struct dsl_agent *a, const struct dsl_msg *pm);
/** Contain, bind and start the node's ranks; answer started or spawnerr. */
void dsl_agent_handle_start(struct dsl_agent *a, const struct dsl_msg *sm);

/* ---- agent.c: the entry points (agent_dial.c) ---- */

/**
 * The agent on a connect-back socket fd whose handshake is done (seal OPEN, the
 * caller's): every byte in and out goes through the seal's frames. A frame that fails
 * authentication is treated as EOF from the launcher (the ranks are stopped).
 */
int dsl_agent_main_sealed(int fd, struct dsl_seal *seal);

/* No-ssh mode (remote/join.h): what the agent's hello says about its node. */
struct dsl_agent_join {
    int node_rank, nnodes, slots;
    char *const *argv;         /* the PROGRAM and arguments this node was started with */
    size_t argc;               /* (0: none), whose digest the hello carries */
    int signalled;             /* out: the signal to this process that stopped it, or 0 */
    int refused;               /* out: 1 when the coordinator refused the job */
};
#define DSL_AGENT_EXIT_LOST 200 /* the coordinator went away (DSL_EXIT_UNREACHABLE) */
/**
 * The same for the agent of a no-ssh node, which is its node's launcher: the hello
 * carries join's slots and node rank, and the return value is the node's exit code:
 * 0 when every rank exited 0 and nothing stopped the job; else the first failing rank's
 * code (or 128 + signal), 128 + signal for a signal to this process, 1 when the
 * coordinator stopped the job, 200 when the coordinator went away, 202 when it refused
 * the job before it started (a node differs; a line on stderr says which).
 */
int dsl_agent_main_joined(int fd, struct dsl_seal *seal, struct dsl_agent_join *join);

/**
 * An agent started by srun (the slurm transport): list is its step's
 * CUDA_VISIBLE_DEVICES, the GPUs Slurm gave this job on this node ("2,3"). The plan's
 * device ids for the node are then places in that list, and each rank gets the
 * list's items (docs/slurm.md, "GPUs"). NULL or "": the ids are used as they are.
 * Call before dsl_agent_main*; the copy lives as long as the process.
 */
void dsl_agent_set_node_devices(const char *list);

#endif
