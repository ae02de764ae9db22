/*
 * libFuzzer target: dslaunch's whole command line, parse only. The input is split at
 * NUL bytes into words; a word that starts with '@' is an environment entry ("@K=V")
 * for no-ssh mode's resolution, the others are argv[1..] after "dslaunch". Nothing is
 * launched: the words go through dsl_launch_opts_parse() and, when it accepts them,
 * dsl_launch_opts_forward() (what --emit sbatch passes on), dsl_nossh_resolve() (no-ssh
 * mode's settings from the options and that environment) and the --launcher_args
 * splitter. Inputs with a '/' are skipped and the parsing runs in an empty directory of
 * its own (entered and left around it, so libFuzzer's relative paths keep working), so
 * no option can name a file that exists (no device, no FIFO, nothing of the tree): a
 * crash inside the parser leaves its artifact in /tmp/dsl_fuzz_options.*. Every failure explains itself; what is forwarded are words of the command
 * line, at most all of them; resolved no-ssh settings are consistent; split words are
 * non-empty and hold no white space; nothing leaks.
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/plan/launcherargs.h"
#include "dslaunch/plan/nossh.h"
#include "dslaunch/plan/options.h"
#include "fuzz_argv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int in_argv(const char *w, int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(w, argv[i]))
            return 1;
    return 0;
}

static void after_parse(struct dsl_launch_opts *o, int argc, char **argv, char **env)
{
    static const char *const drop[] = {"num_nodes", "include", NULL};
    struct dsl_strvec fwd;
    dsl_strvec_init(&fwd);
    dsl_launch_opts_forward(argc, argv, drop, &fwd);
    if (fwd.nr > (size_t)argc - 1)
        abort();
    for (size_t i = 0; i < fwd.nr; i++)
        if (!in_argv(fwd.v[i], argc, argv))
            abort();
    dsl_strvec_release(&fwd);

    struct dsl_nossh ns;
    char err[DSL_ERR_LEN] = "";
    dsl_nossh_init(&ns);
    fuzz_enter_empty_dir("options");
    int r = fuzz_left(dsl_nossh_resolve(&ns, o, env, err), err);
    if (r == 0 && ns.on) {
        if (ns.nnodes < 1 || ns.node_rank < 0 || ns.node_rank >= ns.nnodes ||
            (ns.master_addr && strchr(ns.master_addr, ':')) ||
            ns.control_port == ns.master_port || ns.master_port < 1 ||
            ns.master_port > 65535 || ns.control_port < 1 || ns.control_port > 65535 ||
            (ns.nnodes > 1 && ns.secret_len < DSL_NOSSH_SECRET_MIN) ||
            (ns.node_rank > 0 && !ns.master_addr))
            abort();
    }
    dsl_nossh_release(&ns);

    struct dsl_strvec words;
    dsl_strvec_init(&words);
    dsl_launcher_args_split(&words, o->tr.launcher_args);
    for (size_t i = 0; i < words.nr; i++)
        if (!words.v[i][0] || strpbrk(words.v[i], " \t\n\r\v\f"))
            abort();
    dsl_strvec_release(&words);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_words w;
    if (!fuzz_words(data, size, &w))
        return 0;
    char **argv = dsl_xcalloc(w.n + 2, sizeof(char *));
    char **env = dsl_xcalloc(w.n + 1, sizeof(char *));
    int argc = 0, nenv = 0;
    argv[argc++] = (char *)"dslaunch";
    for (size_t i = 1; i <= w.n; i++) {
        if (w.v[i][0] == '@')
            env[nenv++] = w.v[i] + 1;
        else
            argv[argc++] = w.v[i];
    }
    struct dsl_launch_opts o;
    char err[DSL_ERR_LEN] = "";
    dsl_launch_opts_init(&o);
    fuzz_enter_empty_dir("options");
    int r = fuzz_left(dsl_launch_opts_parse(&o, argc, argv, err), err);
    if (r == 0 && o.mode != DSL_MODE_HELP && o.mode != DSL_MODE_VERSION &&
        o.mode != DSL_MODE_AGENT)
        after_parse(&o, argc, argv, env);
    dsl_launch_opts_release(&o);
    free(env);
    free(argv);
    fuzz_words_free(&w);
    return 0;
}
