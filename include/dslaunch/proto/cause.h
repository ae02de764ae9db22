/*
 * Why a rank died, the exit message's cause: reading the node's evidence (the agent)
 * and saying it in the launcher's summary (the job). Pure functions over text, so the parsing and
 * the wording are unit-tested without a kernel to provoke.
 */
#ifndef DSLAUNCH_PROTO_CAUSE_H
#define DSLAUNCH_PROTO_CAUSE_H

#include <stddef.h>

#include "dslaunch/proto/proto.h"

/** MemAvailable of a /proc/meminfo text, in bytes. 0, or -ENOENT when it has none. */
int dsl_cause_meminfo_available(const char *meminfo, double *bytes);
/**
 * The pid a kernel log line says the OOM killer killed: "Out of memory: Killed process
 * 42 (x) ...", "Memory cgroup out of memory: Killed process 42 ...", "oom-kill:...,
 * pid=42,uid=0" or "oom_reaper: reaped process 42 ...", with or without /dev/kmsg's
 * "prio,seq,usec,flags;" prefix. 0 when the line is about something else.
 */
int dsl_cause_kmsg_oom_pid(const char *line);
/** "512 B", "12.0 KiB", "50.0 MiB", "1.2 GiB" (binary units). */
void dsl_cause_size(double bytes, char *buf, size_t n);
/**
 * The explanation the launcher's summary appends to a rank's end (sig: the signal that
 * killed it, 0 when it exited): " (not sent by dslaunch; node had 1.2 GiB available)",
 * " (SIGKILL; memory limit 50.0 MiB of its cgroup, peak 50.0 MiB; node had ...)", or ""
 * when nothing is known beyond the code. Always NUL-terminated.
 */
void dsl_cause_describe(const struct dsl_exit_cause *c, int sig, char *buf, size_t n);

#endif
