/*
 * Reading a native stack capture (eu-stack or gdb output) for the one fact the hang
 * judge needs from it: does one of the process's threads wait inside a collective or
 * a rendezvous of a communication library? Pure function over text, unit-tested with
 * captures of real processes.
 */
#ifndef DSLAUNCH_HANG_STACK_H
#define DSLAUNCH_HANG_STACK_H

enum dsl_hang_wait {
    DSL_HANG_WAIT_UNKNOWN = 0, /* no capture, or one without frames */
    DSL_HANG_WAIT_NO,          /* frames, none of them a collective's wait */
    DSL_HANG_WAIT_IN,          /* a thread waits inside a collective or rendezvous */
};

/**
 * Classify capture text. When it is DSL_HANG_WAIT_IN, *what (if what is not NULL) is
 * set to a static phrase naming the library, for a verdict: "a gloo collective", "an
 * NCCL collective", "a torch.distributed collective", "the torch.distributed rendezvous
 * (TCPStore)", "a dstrain collective", "an MPI call"; else to NULL.
 */
enum dsl_hang_wait dsl_hang_stack_wait(const char *text, const char **what);
/**
 * 1 when the library named by what (a phrase of dsl_hang_stack_wait) waits by spinning
 * (NCCL polls its GPU stream): a rank waiting in it uses CPU time all along.
 */
int dsl_hang_wait_spins(const char *what);

#endif
