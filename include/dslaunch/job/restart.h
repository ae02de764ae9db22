/*
 * Restarts (--max-restarts, --exclude-failed-nodes, --min-nodes): a job that failed is
 * torn down and run again, as torchrun's elastic agent does, each attempt with its
 * own preflight, rendezvous and run id. docs/reliability.md says what the user sees.
 */
#ifndef DSLAUNCH_JOB_RESTART_H
#define DSLAUNCH_JOB_RESTART_H

#include "dslaunch/plan/plan.h"

/**
 * Run the job of plan p (dsl_job_run()) and, after a rank failed or a node was lost,
 * again, up to p->opts->max_restarts times; with exclude_failed_nodes each further
 * attempt leaves out the nodes that failed, and none starts on fewer than min_nodes.
 * p must have its ids (dsl_plan_new_ids()); it is changed between attempts (placement,
 * rendezvous, ids: dsl_plan_restart()). When there was more than one attempt, a list
 * of them and their causes goes to stderr. Returns the last attempt's exit code
 * (docs/exit-codes.md).
 */
int dsl_restart_run(struct dsl_plan *p);

#endif
