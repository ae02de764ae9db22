/*
 * The srun command line of the slurm transport (--launcher slurm): one job step that
 * starts one node agent per host, built here (pure: no process, no lookup) so that
 * `--dry-run` shows exactly what a run would execute.
 */
#ifndef DSLAUNCH_SRUN_H
#define DSLAUNCH_SRUN_H

#include <stddef.h>

#include "dslaunch/common/strvec.h"

/**
 * Append to out the argv (executed directly, never by a shell):
 *
 *   srun --nodes=N --ntasks=N --ntasks-per-node=1 --kill-on-bad-exit=1
 *        --nodelist=H0,H1,.. --job-name=dslaunch [--overlap] [LAUNCHER_ARGS..] AGENT_ARGV..
 *        --slurm-nodes H0,H1,.. --connect CONNECT --launcher-key KEY
 *
 * --overlap when this runs inside a job step (SLURM_STEP_ID a step number): that step
 * holds the job's CPUs, and the agents' step would wait for them. srun is $DSLAUNCH_SRUN
 * when set. launcher_args (NULL: none) is split on whitespace
 * only (dsl_launcher_args_split): no quote, `$` or glob means anything. The agent finds its index as the place of
 * its SLURMD_NODENAME in the --slurm-nodes list, so the hosts' order is kept whatever
 * order Slurm gives the step's tasks. A host name that srun's --nodelist would read as
 * a range or list (',', '[', ']', whitespace) or an option is refused: negative with err.
 */
int dsl_srun_argv(struct dsl_strvec *out, const char *launcher_args, char *const *hosts,
                  size_t nhosts, char *const *agent_argv, const char *connect,
                  const char *key, char *err);

#endif
