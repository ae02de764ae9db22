/*
 * dslaunch's top level: options -> hostfile -> placement -> export set -> program ->
 * (dry run | job). Reading dsl_launch_main() top to bottom is reading the data flow of
 * docs/design.md.
 */
#ifndef DSLAUNCH_LAUNCH_H
#define DSLAUNCH_LAUNCH_H

struct dsl_job;
struct dsl_hostfile;
struct dsl_placement;

/**
 * Turn the parsed options (job->opts) into a plan: the hostfile (--hostfile,
 * /job/hostfile, or localhost with its local slots and DeepSpeed's CUDA_VISIBLE_DEVICES
 * rule), the placement, the export set, this dslaunch's path, the ranks' working
 * directory, the resolved program (job->argv) and a first MASTER_ADDR and MASTER_PORT.
 * job must have been initialised with dsl_job_init(job, opts, pl). Everything filled in
 * is owned by job, hf and pl. Used by the launch itself and by `dslaunch doctor`.
 */
int dsl_launch_plan(struct dsl_job *job, struct dsl_hostfile *hf, struct dsl_placement *pl,
                    char *err);

/** The whole dslaunch command. Returns the process exit code (docs/exit-codes.md). */
int dsl_launch_main(int argc, char **argv);

/**
 * Resolve the program name a user gave: "train" means the dstrain beside this dslaunch,
 * and the bundled names dstrain/dsbench are found beside it when not in PATH. Any other
 * name is returned as given. self_dir is the directory of this dslaunch. malloc'd.
 */
char *dsl_launch_program_name(const char *prog, const char *self_dir);

#endif
