/*
 * Whether the Slurm cluster of this login node has GPUs at all, for `--emit sbatch`:
 * a script that asks a CPU cluster for --gpus-per-node is rejected by sbatch ("Invalid
 * generic resource (gres) specification").
 */
#ifndef DSLAUNCH_REMOTE_SLURMGPUS_H
#define DSLAUNCH_REMOTE_SLURMGPUS_H

#include <stddef.h>

/**
 * Ask `sinfo -h -o %G` (DSLAUNCH_SINFO names another sinfo) for the generic resources of
 * the cluster's nodes: 1 when a node has GPUs (a "gpu" gres), 0 when none has, -1 when
 * it cannot be told (no sinfo, sinfo failed or said nothing within 10 s), with why
 * saying so in words for a comment. The one program --emit runs; it reads nothing else.
 */
int dsl_slurm_cluster_has_gpus(char *why, size_t cap);

#endif
