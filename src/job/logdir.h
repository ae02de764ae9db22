/*
 * The --log-dir files of a run (docs/reliability.md, "Logs of every run and attempt"):
 * one file per rank per attempt, and an earlier run's files never replaced unless
 * --log-dir-overwrite says so.
 */
#ifndef DSLAUNCH_JOB_LOGDIR_H
#define DSLAUNCH_JOB_LOGDIR_H

/**
 * The name of rank's log in the attempt after `restart` restarts of a start that Slurm
 * requeued `requeue` times (SLURM_RESTART_COUNT; 0 for any job that was not requeued):
 * "rank<N>.log", "rank<N>.restart<J>.log", "rank<N>.requeue<K>.log",
 * "rank<N>.requeue<K>.restart<J>.log". malloc'd, the caller's.
 */
char *dsl_logdir_rank_name(int rank, int requeue, int restart);

/**
 * This start's Slurm requeue count: SLURM_RESTART_COUNT inside a Slurm job
 * (SLURM_JOB_ID set), 0 otherwise or when it is not a number.
 */
int dsl_logdir_requeue(void);

/**
 * Before the first attempt writes into the log directory dirfd (shown as dir): the rank
 * logs of an earlier run there (names of dsl_logdir_rank_name, for a requeued start only
 * those of its own requeue count: the earlier starts of the same job are its history)
 * are an error (DSL_EUSAGE, err naming the first one and the way out), or with overwrite
 * are removed, every one (a larger earlier run leaves no stale rank7.log). 0 when the
 * directory is free for this run; -errno when it cannot be read or a file removed.
 */
int dsl_logdir_claim(int dirfd, const char *dir, int requeue, int overwrite, char *err);

#endif
