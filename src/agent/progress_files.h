/*
 * The ranks' progress files on a node (private to src/agent): where they live, their
 * names, and their removal when the agent that made them is gone. The agent makes them
 * (agent_progress.c); its clean-up process removes them when the agent was killed
 * (contain.c), so neither a live job's nor a dead agent's files linger.
 */
#ifndef DSLAUNCH_AGENT_PROGRESS_FILES_H
#define DSLAUNCH_AGENT_PROGRESS_FILES_H

#include <sys/types.h>

/** The directory of progress files: /dev/shm, else $TMPDIR, else /tmp. */
const char *dsl_progress_files_dir(void);
/**
 * The path of rank's progress file in run run_id made by agent pid agent:
 * "<dir>/dslaunch-<run_id>-<rank>.<agent>.progress" (run_id cut to 40 characters,
 * "run" when it is empty or holds a '/'). Owned by the caller (free()).
 */
char *dsl_progress_files_path(const char *run_id, int rank, pid_t agent);
/** Remove this user's progress files whose agent is gone (the pid names no process). */
void dsl_progress_files_sweep(void);
/** Remove this user's progress files of run run_id made by agent pid agent. */
void dsl_progress_files_remove(const char *run_id, pid_t agent);

#endif
