/*
 * A tool's command line (toolargs.h): the table-driven parse every tool does first, with
 * the two ways it ends the tool at once (--help, a bad option) said one way.
 */
#include "dslaunch/common/error.h"
#include "dslaunch/common/log.h"
#include "toolargs.h"
#include "dslaunch/common/banned.h"

int dsl_tool_args_parse(const struct dsl_opt_parser *p, const struct dsl_tool_usage *u,
                        void *args, const int *help, int argc, char **argv,
                        struct dsl_strvec *rest, int *code)
{
    char err[DSL_ERR_LEN];
    if (dsl_opt_parse(p, args, argc, argv, rest, err) < 0) {
        dsl_error("%s: %s", u->name, err);
        if (u->on_error)
            u->usage(stderr);
        return 0;
    }
    if (*help) {
        u->usage(stdout);
        *code = 0;
        return 0;
    }
    return 1;
}
