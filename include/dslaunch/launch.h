/*
 * dslaunch's top level: options -> hostfile -> placement -> export set -> program ->
 * (dry run | job). Reading dsl_launch_main() top to bottom is reading the data flow of
 * docs/design.md.
 */
#ifndef DSLAUNCH_LAUNCH_H
#define DSLAUNCH_LAUNCH_H

/** The whole dslaunch command. Returns the process exit code (docs/exit-codes.md). */
int dsl_launch_main(int argc, char **argv);

/**
 * Resolve the program name a user gave: "train" means the dstrain beside this dslaunch,
 * and the bundled names dstrain/dsbench are found beside it when not in PATH. Any other
 * name is returned as given. self_dir is the directory of this dslaunch. malloc'd.
 */
char *dsl_launch_program_name(const char *prog, const char *self_dir);

#endif
