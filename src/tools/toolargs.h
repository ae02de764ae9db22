/*
 * The command line of a tool (doctor, sync, ssh-setup): its own table parsed, --help
 * answered, an error reported with the tool's name. Private to the tools folder.
 */
#ifndef DSLAUNCH_TOOLARGS_H
#define DSLAUNCH_TOOLARGS_H

#include <stdio.h>

#include "dslaunch/common/opt.h"
#include "dslaunch/common/strvec.h"

/** What dsl_tool_args_parse() shows: usage(f) writes the tool's usage and options. */
struct dsl_tool_usage {
    const char *name;         /* for errors: "sync: ..." */
    void (*usage)(FILE *f);
    int on_error;             /* 1: the usage follows an error on stderr */
};

/**
 * dsl_opt_parse() of argv into args (rest as there); help points at args' --help flag.
 * Returns 1 to go on, or 0 when the tool is done: with --help the usage shown on stdout
 * and *code set to 0, after an error that error logged (*code untouched).
 */
int dsl_tool_args_parse(const struct dsl_opt_parser *p, const struct dsl_tool_usage *u,
                        void *args, const int *help, int argc, char **argv,
                        struct dsl_strvec *rest, int *code);

#endif
