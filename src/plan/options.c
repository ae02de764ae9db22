/*
 * dslaunch's options: one table drives parsing and --help.
 *
 * Names are matched after folding '-' to '_' past the leading "--", so --num-gpus and
 * --num_gpus are the same flag. Parsing stops at the first non-option word (the
 * program) or at "--"; nothing after it is looked at.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/plan/options.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

enum opt_kind { OPT_FLAG, OPT_STR, OPT_INT, OPT_SECONDS, OPT_LIST, OPT_SPECIAL };

struct opt_def {
    const char *name;  /* canonical, with '_' */
    char short_name;
    enum opt_kind kind;
    size_t offset;     /* into struct dsl_launch_opts */
    const char *arg;   /* placeholder in --help */
    const char *help;
    const char *def;   /* default shown in --help */
};

#define OFF(f) offsetof(struct dsl_launch_opts, f)

static const struct opt_def opts[] = {
    {"hostfile", 'H', OPT_STR, OFF(hostfile), "FILE",
     "DeepSpeed hostfile ('host slots=N' lines)", "/job/hostfile if present, else localhost"},
    {"include", 'i', OPT_STR, OFF(include), "SPEC",
     "use only these hosts/slots, e.g. 'worker-0:0,2@worker-1'", NULL},
    {"exclude", 'e', OPT_STR, OFF(exclude), "SPEC", "use all but these hosts/slots", NULL},
    {"num_nodes", 0, OPT_INT, OFF(num_nodes), "N", "use the first N hosts", "all"},
    {"num_gpus", 0, OPT_INT, OFF(num_gpus), "N", "use the first N slots of every host", "all"},
    {"master_addr", 0, OPT_STR, OFF(master_addr), "ADDR",
     "rendezvous address (an IP of the first node)", "chosen by the handshake"},
    {"master_port", 0, OPT_INT, OFF(master_port), "PORT",
     "rendezvous port; a busy default is replaced, a busy given one is an error", "29500"},
    {"launcher", 0, OPT_SPECIAL, 0, "KIND", "auto, local, ssh, pdsh or openmpi", "auto"},
    {"export", 0, OPT_LIST, OFF(exports), "VAR[=VALUE]",
     "also export VAR to every worker (repeatable)", NULL},
    {"log_dir", 0, OPT_STR, OFF(log_dir), "DIR", "also write each rank's output to DIR/rank<N>.log",
     NULL},
    {"no_prefix", 0, OPT_FLAG, OFF(no_prefix), NULL, "do not prefix output lines with the rank",
     NULL},
    {"term_timeout", 0, OPT_SECONDS, OFF(term_timeout), "SECONDS",
     "grace between SIGTERM and SIGKILL when a job stops", "10"},
    {"local_rank_arg", 0, OPT_FLAG, OFF(local_rank_arg), NULL,
     "append --local_rank=N to the program's arguments (old DeepSpeed scripts)", NULL},
    {"dry_run", 0, OPT_SPECIAL, 0, NULL,
     "resolve everything, print the plan as JSON, start nothing", NULL},
    {"check", 0, OPT_SPECIAL, 0, NULL, "run only the preflight handshake on every host", NULL},
    {"fanout", 0, OPT_INT, OFF(fanout), "N", "hosts connecting at once", "256"},
    {"connect_timeout", 0, OPT_SECONDS, OFF(tr.connect_timeout), "SECONDS",
     "give up on a host that does not answer", "30"},
    {"keepalive", 0, OPT_SECONDS, OFF(tr.keepalive), "SECONDS",
     "declare a silent host lost after this long", "15"},
    {"ssh_config", 0, OPT_STR, OFF(tr.ssh_config), "FILE", "ssh client configuration",
     "~/.ssh/config"},
    {"ssh_port", 0, OPT_INT, OFF(tr.ssh_port), "PORT", "ssh port", "from ssh config, or 22"},
    {"ssh_identity", 0, OPT_STR, OFF(tr.ssh_identity), "FILE", "ssh private key",
     "ssh-agent and default keys"},
    {"ssh_accept_new", 0, OPT_FLAG, OFF(tr.accept_new), NULL,
     "trust unknown host keys on first use (changed keys are always refused)", NULL},
    {"remote_dslaunch", 0, OPT_STR, OFF(remote_dslaunch), "PATH",
     "dslaunch on the other hosts", "this dslaunch's absolute path"},
    {"sync", 0, OPT_LIST, OFF(sync_paths), "PATH",
     "copy PATH to every host first (as dslaunch sync); start only if all succeeded", NULL},
    {"remote_cwd", 0, OPT_STR, OFF(remote_cwd), "DIR", "working directory on the other hosts",
     "the current directory"},
    {"verbose", 'v', OPT_SPECIAL, 0, NULL, "say more", NULL},
    {"quiet", 'q', OPT_SPECIAL, 0, NULL, "say only errors", NULL},
    {"agent", 0, OPT_SPECIAL, 0, NULL, NULL, NULL}, /* internal: node agent mode */
    {"connect", 0, OPT_STR, OFF(agent_connect), "ADDR:PORT", NULL, NULL}, /* internal */
    {"token", 0, OPT_STR, OFF(agent_token), "T", NULL, NULL},             /* internal */
    {"help", 'h', OPT_SPECIAL, 0, NULL, "show this help", NULL},
    {"version", 'V', OPT_SPECIAL, 0, NULL, "show the version", NULL},
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

void dsl_launch_opts_init(struct dsl_launch_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->num_nodes = -1;
    o->num_gpus = -1;
    o->master_port = 29500;
    o->term_timeout = 10.0;
    o->fanout = 256;
    o->tr.connect_timeout = 30.0;
    o->tr.keepalive = 15.0;
    o->verbose = 1;
    dsl_strvec_init(&o->exports);
    dsl_strvec_init(&o->sync_paths);
    dsl_strvec_init(&o->argv);
}

void dsl_launch_opts_release(struct dsl_launch_opts *o)
{
    free(o->hostfile);
    free(o->include);
    free(o->exclude);
    free(o->master_addr);
    free(o->log_dir);
    free(o->remote_dslaunch);
    free(o->remote_cwd);
    free(o->agent_connect);
    free(o->agent_token);
    free((char *)o->tr.ssh_config);
    free((char *)o->tr.ssh_identity);
    dsl_strvec_release(&o->exports);
    dsl_strvec_release(&o->sync_paths);
    dsl_strvec_release(&o->argv);
    dsl_launch_opts_init(o);
}

static const struct opt_def *find_long(const char *name, size_t len)
{
    char folded[64];
    if (len >= sizeof(folded))
        return NULL;
    for (size_t i = 0; i < len; i++)
        folded[i] = name[i] == '-' ? '_' : name[i];
    folded[len] = '\0';
    for (size_t i = 0; i < NOPTS; i++)
        if (!strcmp(opts[i].name, folded))
            return &opts[i];
    return NULL;
}

static const struct opt_def *find_short(char c)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (opts[i].short_name == c)
            return &opts[i];
    return NULL;
}

static int apply(struct dsl_launch_opts *o, const struct opt_def *d, const char *val,
                 char *err)
{
    char *base = (char *)o;
    const char *n = d->name;
    switch (d->kind) {
    case OPT_FLAG:
        *(int *)(base + d->offset) = 1;
        return 0;
    case OPT_STR: {
        char **slot = (char **)(base + d->offset);
        free(*slot);
        *slot = dsl_xstrdup(val);
        if (!strcmp(n, "hostfile"))
            o->hostfile_given = 1;
        return 0;
    }
    case OPT_INT: {
        int v;
        int lo = 1, hi = 1 << 24;
        if (!strcmp(n, "master_port") || !strcmp(n, "ssh_port"))
            hi = 65535;
        if (dsl_parse_int(val, lo, hi, &v) < 0)
            return dsl_seterr(err, DSL_EUSAGE, "option '--%s' needs an integer from %d to %d, not '%s'",
                              n, lo, hi, val);
        *(int *)(base + d->offset) = v;
        if (!strcmp(n, "master_port"))
            o->master_port_given = 1;
        return 0;
    }
    case OPT_SECONDS: {
        double v;
        if (dsl_parse_seconds(val, &v) < 0)
            return dsl_seterr(err, DSL_EUSAGE, "option '--%s' needs a duration in seconds, not '%s'",
                              n, val);
        *(double *)(base + d->offset) = v;
        return 0;
    }
    case OPT_LIST:
        dsl_strvec_push((struct dsl_strvec *)(base + d->offset), val);
        return 0;
    case OPT_SPECIAL:
        break;
    }
    if (!strcmp(n, "launcher")) {
        static const char *const names[] = {"auto", "local", "ssh", "pdsh", "openmpi"};
        for (int i = 0; i < 5; i++)
            if (!strcmp(val, names[i])) {
                o->launcher = (enum dsl_launcher_kind)i;
                return 0;
            }
        return dsl_seterr(err, DSL_EUSAGE,
                          "unknown launcher '%s' (use auto, local, ssh, pdsh or openmpi)", val);
    }
    if (!strcmp(n, "dry_run"))
        o->mode = DSL_MODE_DRY_RUN;
    else if (!strcmp(n, "check"))
        o->mode = DSL_MODE_CHECK;
    else if (!strcmp(n, "agent"))
        o->mode = DSL_MODE_AGENT;
    else if (!strcmp(n, "help"))
        o->mode = DSL_MODE_HELP;
    else if (!strcmp(n, "version"))
        o->mode = DSL_MODE_VERSION;
    else if (!strcmp(n, "verbose"))
        o->verbose = 2;
    else if (!strcmp(n, "quiet"))
        o->verbose = 0;
    return 0;
}

static int takes_value(const struct opt_def *d)
{
    return d->kind != OPT_FLAG && !(d->kind == OPT_SPECIAL && !d->arg);
}

int dsl_launch_opts_parse(struct dsl_launch_opts *o, int argc, char **argv, char *err)
{
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break;
        const struct opt_def *d;
        const char *val = NULL;
        if (a[1] == '-') {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            d = find_long(name, len);
            if (!d)
                return dsl_seterr(err, DSL_EUSAGE, "unknown option '--%.*s' (see dslaunch --help)",
                                  (int)len, name);
            if (eq) {
                if (!takes_value(d))
                    return dsl_seterr(err, DSL_EUSAGE, "option '--%s' takes no value", d->name);
                val = eq + 1;
            }
        } else {
            d = find_short(a[1]);
            if (!d)
                return dsl_seterr(err, DSL_EUSAGE, "unknown option '-%c' (see dslaunch --help)", a[1]);
            if (a[2]) {
                if (!takes_value(d))
                    return dsl_seterr(err, DSL_EUSAGE, "option '-%c' takes no value", a[1]);
                val = a[2] == '=' ? a + 3 : a + 2;
            }
        }
        if (takes_value(d) && !val) {
            if (i + 1 >= argc)
                return dsl_seterr(err, DSL_EUSAGE, "option '--%s' needs a value", d->name);
            val = argv[++i];
        }
        int r = apply(o, d, val, err);
        if (r < 0)
            return r;
    }
    for (; i < argc; i++)
        dsl_strvec_push(&o->argv, argv[i]);

    /* verify */
    if (o->mode == DSL_MODE_AGENT && !o->agent_connect != !o->agent_token)
        return dsl_seterr(err, DSL_EUSAGE, "--agent needs both --connect and --token, or neither");
    if (o->mode == DSL_MODE_HELP || o->mode == DSL_MODE_VERSION || o->mode == DSL_MODE_AGENT)
        return 0;
    if (o->agent_connect || o->agent_token)
        return dsl_seterr(err, DSL_EUSAGE, "--connect and --token are for --agent only");
    if (o->mode != DSL_MODE_CHECK && o->argv.nr == 0)
        return dsl_seterr(err, DSL_EUSAGE, "no program given (usage: dslaunch [options] PROGRAM [ARGS...])");
    if (o->term_timeout > 3600)
        return dsl_seterr(err, DSL_EUSAGE, "option '--term-timeout' is over an hour");
    for (size_t k = 0; k < o->exports.nr; k++) {
        const char *e = o->exports.v[k];
        const char *eq = strchr(e, '=');
        size_t len = eq ? (size_t)(eq - e) : strlen(e);
        int ok = len > 0 && !(e[0] >= '0' && e[0] <= '9');
        for (size_t j = 0; ok && j < len; j++)
            ok = (e[j] == '_' || (e[j] >= 'A' && e[j] <= 'Z') || (e[j] >= 'a' && e[j] <= 'z') ||
                  (e[j] >= '0' && e[j] <= '9'));
        if (!ok)
            return dsl_seterr(err, DSL_EUSAGE, "bad variable name in '--export %s'", e);
    }
    return 0;
}

void dsl_launch_opts_help(FILE *f)
{
    fprintf(f, "usage: dslaunch [options] PROGRAM [ARGS...]\n"
               "       dslaunch [options] train --config ds_config.json\n"
               "       dslaunch --check --hostfile FILE\n"
               "       dslaunch doctor --hostfile FILE       check every node, say how to fix\n"
               "       dslaunch sync PATH... --hostfile FILE copy files to every node\n"
               "       dslaunch ssh-setup --hostfile FILE [--mesh]  passwordless SSH set-up\n\n"
               "Starts PROGRAM once per slot on every host of a DeepSpeed hostfile and\n"
               "supervises the job. 'train' runs the bundled trainer dstrain.\n"
               "Multi-word options accept '-' or '_' (--num-gpus = --num_gpus).\n\n"
               "options:\n");
    for (size_t i = 0; i < NOPTS; i++) {
        const struct opt_def *d = &opts[i];
        if (!d->help)
            continue;
        char left[80];
        char dashed[40];
        size_t n = strlen(d->name);
        if (n >= sizeof(dashed))
            n = sizeof(dashed) - 1;
        for (size_t k = 0; k < n; k++)
            dashed[k] = d->name[k] == '_' ? '-' : d->name[k];
        dashed[n] = '\0';
        if (d->short_name)
            snprintf(left, sizeof(left), "-%c, --%s%s%s", d->short_name, dashed,
                     d->arg ? " " : "", d->arg ? d->arg : "");
        else
            snprintf(left, sizeof(left), "    --%s%s%s", dashed, d->arg ? " " : "",
                     d->arg ? d->arg : "");
        fprintf(f, "  %-34s %s", left, d->help);
        if (d->def)
            fprintf(f, " (default: %s)", d->def);
        fputc('\n', f);
    }
    fprintf(f, "\nexit codes: 0 all ranks succeeded; the first failing rank's code, or 128+signal;\n"
               "  2 usage or input error; 126 program not executable; 127 program not found;\n"
               "  200 host unreachable; 201 authentication or host key failure; 202 preflight\n"
               "  mismatch; 203 launcher timeout; 204 node agent failed. See docs/exit-codes.md.\n");
}
