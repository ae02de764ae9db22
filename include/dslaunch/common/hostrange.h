/*
 * Host ranges and host lists, as pdsh and Slurm write them: "node[01-04,7]" and
 * "n[1-2],gpu7,r[1-2]n[1-2]". Pure string expansion, no name lookups, so both the
 * launch side (hostfiles, allocations) and the ranks (the first host of an srun step
 * is their rendezvous address) use the same code.
 */
#ifndef DSLAUNCH_COMMON_HOSTRANGE_H
#define DSLAUNCH_COMMON_HOSTRANGE_H

/** More names than this from one range or list is an error. */
#define DSL_HOSTRANGE_MAX_HOSTS 65536

struct dsl_strvec;

/**
 * Expand a pdsh-style host range "pre[01-04,7]post" into out (appends copies, in
 * order; several bracket groups expand left to right, the leftmost varying slowest).
 * A lower bound with a leading zero sets the width ("[08-10]" gives 08 09 10).
 * A name without brackets appends itself. Names are not checked for validity.
 * Returns 0, or -EINVAL with err describing the problem (malformed, reversed, more
 * than DSL_HOSTRANGE_MAX_HOSTS names) and out unchanged.
 */
int dsl_hostrange_expand(const char *spec, struct dsl_strvec *out, char *err);

/**
 * Expand a Slurm host list (SLURM_JOB_NODELIST, SLURM_STEP_NODELIST): host ranges
 * separated by commas outside brackets, "n[1-3,5],gpu7" giving n1 n2 n3 n5 gpu7, in
 * order. Empty items are errors. Returns 0 with the names appended to out, or -EINVAL
 * with err naming the list and out unchanged.
 */
int dsl_hostlist_expand(const char *list, struct dsl_strvec *out, char *err);

#endif
