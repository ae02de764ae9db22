/*
 * `dslaunch ssh-setup --hostfile H [--mesh]`: passwordless SSH to (and with --mesh,
 * between) every host of a hostfile, for hosts the user can already reach with a
 * password or an existing key. docs/ssh-setup.md has the whole story.
 */
#ifndef DSLAUNCH_SSHSETUP_H
#define DSLAUNCH_SSHSETUP_H

/**
 * Run the subcommand; argv[0] is "ssh-setup". Returns the process exit status: 0 when
 * every host's row succeeded, 1 when some row failed, 2 for a usage error.
 */
int dsl_sshsetup_main(int argc, char **argv);

#endif
