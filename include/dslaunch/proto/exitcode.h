/*
 * The exit codes a launcher, and a no-ssh node's agent as its node's launcher, exit
 * with (docs/exit-codes.md); a spawnerr message carries one for a rank that could not
 * start. Shared by the job and the agent, so they live with the protocol.
 */
#ifndef DSLAUNCH_PROTO_EXITCODE_H
#define DSLAUNCH_PROTO_EXITCODE_H

/** Fixed exit codes of the launcher (docs/exit-codes.md). */
enum dsl_exit_code {
    DSL_EXIT_OK = 0,
    DSL_EXIT_USAGE = 2,
    DSL_EXIT_NOEXEC = 126,
    DSL_EXIT_NOTFOUND = 127,
    DSL_EXIT_UNREACHABLE = 200,
    DSL_EXIT_AUTH = 201,
    DSL_EXIT_PREFLIGHT = 202,
    DSL_EXIT_TIMEOUT = 203,
    DSL_EXIT_AGENT = 204,
    DSL_EXIT_HANG = 205,        /* a hang was detected (--hang-timeout) */
    DSL_EXIT_JOB_TIMEOUT = 206, /* --job-timeout ran out */
    DSL_EXIT_LOGS = 207,        /* every rank exited 0, but --log-dir files are incomplete */
};

/** Exit code of a node whose job the coordinator refused before it started (a node
 *  differs: program and arguments, dslaunch version, --nnodes). */
#define DSL_NOSSH_EXIT_REFUSED 202

#endif
