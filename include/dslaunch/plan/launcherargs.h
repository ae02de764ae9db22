/*
 * --launcher_args: words that the pdsh, openmpi and slurm transports put into their
 * launcher's command line (pdsh, mpirun, srun), as DeepSpeed passes them. One splitter
 * for all three, so that `--dry-run` and a run agree on the words.
 */
#ifndef DSLAUNCH_LAUNCHERARGS_H
#define DSLAUNCH_LAUNCHERARGS_H

#include "dslaunch/common/strvec.h"

/**
 * Append the words of args (NULL: none) to out, split on whitespace (space, tab,
 * newline, CR, VT, FF) only: no quote, backslash, `$` or glob means anything, because
 * no shell ever sees them ("-p 'a b'" is the three words -p 'a b').
 */
void dsl_launcher_args_split(struct dsl_strvec *out, const char *args);

#endif
