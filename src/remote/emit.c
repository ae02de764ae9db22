/*
 * The batch script of `--emit sbatch` (emit.h). Text only: nothing is started, nothing
 * is looked up beyond the plan already built. The script is for /bin/sh; every word
 * that comes from the user (options, program, arguments, exported values, the working
 * directory) is single-quoted by dsl_shell_quote, inside which sh interprets nothing,
 * so spaces, quotes, '$', backquotes and newlines reach dslaunch byte for byte. The
 * #SBATCH lines carry only numbers and a sanitised job name (sbatch reads them with
 * its own, simpler quoting).
 *
 * Without --save-on-signal the script execs dslaunch: Slurm's signals to the batch
 * shell (scancel -b, --signal=B:...) then reach dslaunch itself. With it, the shell
 * stays to requeue: dslaunch runs in the background, a USR1 trap (set before it
 * starts, so that no warning ends the shell; one that comes before dslaunch's pid is
 * known is sent right after, best effort: a signal that lands between the fork and
 * dslaunch's own handler is lost, which a warning minutes before the time limit never
 * does) passes Slurm's warning on once, and the shell
 * waits until dslaunch has really ended (a wait interrupted by the
 * trap returns 138 too, so it waits again while the process exists); exit 138 means
 * the ranks saved a checkpoint, and `scontrol requeue` puts the job back in the queue,
 * where its next start resumes from it (dstrain --resume auto).
 *
 * Whether the ranks save on SIGUSR1 is decided when the script is written, from what
 * dstrain itself reads at its start: its --save-on-signal flag, else the last of its
 * --config files that sets dstrain.save_on_signal (flags override files in dstrain).
 * The files are read here, as dstrain will find them (the plan's working directory,
 * then the configs shipped beside dstrain for a bare name); a file that cannot be read
 * here, and any program other than dstrain, cannot be asked, and the script's comments
 * say so rather than guess. dstrain reads no environment variable for it, and dslaunch
 * has no config file of its own, so there is no other way to turn it on.
 */
#define _DEFAULT_SOURCE /* realpath */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/plan/options.h"
#include "dslaunch/plan/plan.h"
#include "dslaunch/remote/emit.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/banned.h"

static void add_quoted(struct dsl_dynbuf *out, const char *s)
{
    char *q = dsl_shell_quote(s);
    dsl_dynbuf_addstr(out, q);
    free(q);
}

static int shell_name(const char *s, size_t n)
{
    if (n == 0 || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '_' || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= '0' && s[i] <= '9')))
            return 0;
    return 1;
}

int dsl_emit_sbatch(const struct dsl_emit_req *rq, struct dsl_dynbuf *out, char *err)
{
    int even = 1;
    long total = 0;
    if (rq->nodes < 1)
        return dsl_seterr(err, DSL_EUSAGE, "--emit sbatch: a job of %d nodes", rq->nodes);
    for (int i = 0; i < rq->nodes; i++) {
        if (rq->slots[i] < 1)
            return dsl_seterr(err, DSL_EUSAGE, "--emit sbatch: node %d has no slot", i);
        even &= rq->slots[i] == rq->slots[0];
        total += rq->slots[i];
    }
    if (!even && rq->gpus) {
        char list[128] = "";
        size_t l = 0;
        for (int i = 0; i < rq->nodes && l < sizeof(list) - 16; i++)
            l += (size_t)snprintf(list + l, sizeof(list) - l, "%s%d", i ? "," : "", rq->slots[i]);
        return dsl_seterr(err, DSL_EUSAGE, "--emit sbatch: the plan's nodes have unequal GPU "
                          "counts (%s), which Slurm cannot be asked for per node (--gpus=N "
                          "spreads N as Slurm likes); give every node the same with --num_gpus",
                          list);
    }
    for (size_t k = 0; rq->env && rq->env[k]; k++)
        if (!shell_name(rq->env[k], strcspn(rq->env[k], "=")) || !strchr(rq->env[k], '='))
            return dsl_seterr(err, DSL_EUSAGE, "--emit sbatch: the exported variable '%.*s' "
                              "has a name sh cannot export", (int)strcspn(rq->env[k], "="),
                              rq->env[k]);

    dsl_dynbuf_addstr(out, "#!/bin/sh\n");
    dsl_dynbuf_addf(out, "# written by dslaunch --dry-run --emit sbatch: %d node%s, %ld rank%s "
                    "(the plan's hosts: ", rq->nodes, rq->nodes == 1 ? "" : "s", total,
                    total == 1 ? "" : "s");
    for (const char *h = rq->hosts_from ? rq->hosts_from : "?"; *h; h++)
        dsl_dynbuf_add(out, *h == '\n' ? " " : h, 1);
    dsl_dynbuf_addstr(out, ")\n# submit it with: sbatch FILE (more #SBATCH lines, e.g. "
                      "--partition, --time, may be added here)\n");
    if (rq->job_name && rq->job_name[0])
        dsl_dynbuf_addf(out, "#SBATCH --job-name=%s\n", rq->job_name);
    if (rq->gpu_note)
        dsl_dynbuf_addstr(out, rq->gpu_note);
    dsl_dynbuf_addf(out, "#SBATCH --nodes=%d\n", rq->nodes);
    if (even) {
        dsl_dynbuf_addf(out, "#SBATCH --ntasks-per-node=%d\n", rq->slots[0]);
        if (rq->gpus)
            dsl_dynbuf_addf(out, "#SBATCH --gpus-per-node=%d\n", rq->slots[0]);
    } else {
        /* Slurm has no per-node list: ask for the total and let dslaunch follow the
         * spread Slurm chooses (SLURM_TASKS_PER_NODE). With --ntasks-per-node as well,
         * Slurm 22.05 gives every node that many tasks, more than the total */
        dsl_dynbuf_addstr(out, "# the plan's nodes have unequal slots (");
        for (int i = 0; i < rq->nodes; i++)
            dsl_dynbuf_addf(out, "%s%d", i ? "," : "", rq->slots[i]);
        dsl_dynbuf_addstr(out, "): Slurm spreads the ranks itself\n");
        dsl_dynbuf_addf(out, "#SBATCH --ntasks=%ld\n", total);
    }
    if (rq->signal_note)
        dsl_dynbuf_addstr(out, rq->signal_note);
    if (rq->requeue) {
        if (!rq->resumes)
            dsl_dynbuf_addstr(out, "# the program has no --resume: a requeued start begins "
                              "afresh (dstrain: add --resume auto)\n");
        dsl_dynbuf_addf(out, "#SBATCH --signal=B:USR1@%d\n", rq->signal_secs);
        dsl_dynbuf_addstr(out, "#SBATCH --requeue\n#SBATCH --open-mode=append\n");
    }
    dsl_dynbuf_addstr(out, "cd ");
    add_quoted(out, rq->cwd ? rq->cwd : ".");
    dsl_dynbuf_addstr(out, " || exit 1\n");
    for (size_t k = 0; rq->env && rq->env[k]; k++) {
        size_t n = strcspn(rq->env[k], "=");
        dsl_dynbuf_addf(out, "export %.*s=", (int)n, rq->env[k]);
        add_quoted(out, rq->env[k] + n + 1);
        dsl_dynbuf_addstr(out, "\n");
    }
    if (rq->requeue)
        dsl_dynbuf_addstr(
            out,
            "# Slurm's warning (--signal=B:USR1) comes to this shell: it passes it to dslaunch,\n"
            "# which passes it to every rank; they save a checkpoint and exit 138. The trap\n"
            "# is set first (an untrapped USR1 would end this shell); one that comes before\n"
            "# dslaunch has a pid waits in 'early'\n"
            "pid= early=\n"
            "trap 'if [ -n \"$pid\" ]; then kill -USR1 \"$pid\" 2>/dev/null; else early=1; fi' USR1\n");
    else
        dsl_dynbuf_addstr(out, "exec");
    for (size_t k = 0; rq->argv[k]; k++) {
        if (k || !rq->requeue)
            dsl_dynbuf_addstr(out, " ");
        add_quoted(out, rq->argv[k]);
    }
    if (!rq->requeue) {
        dsl_dynbuf_addstr(out, "\n");
        return 0;
    }
    dsl_dynbuf_addstr(
        out,
        " &\n"
        "pid=$!\n"
        "[ -z \"$early\" ] || kill -USR1 \"$pid\"\n"
        "wait \"$pid\"\n"
        "rc=$?\n"
        "while kill -0 \"$pid\" 2>/dev/null; do wait \"$pid\"; rc=$?; done\n"
        "if [ \"$rc\" -eq 138 ]; then\n"
        "    echo \"dslaunch saved on Slurm's warning (exit 138): requeueing job $SLURM_JOB_ID\" >&2\n"
        "    scontrol requeue \"$SLURM_JOB_ID\" && exit 0\n"
        "fi\n"
        "exit \"$rc\"\n");
    return 0;
}

/* the options that do not apply inside the allocation the script runs in: the emit
 * itself, and the choice of hosts, which the allocation makes */
static const char *const not_forwarded[] = {
    "dry_run", "emit", "hostfile", "include", "exclude", "num_nodes", "num_gpus",
    "launcher", "master_addr", "main_process_ip", "force_multi", NULL};

/* A comment line of the script: "# ", text with every control byte as '?' (a file
 * name holding a newline must not end the comment and start a command), "\n". */
static void note_line(struct dsl_dynbuf *b, char *text)
{
    dsl_dynbuf_addstr(b, "# ");
    for (char *c = text; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    dsl_dynbuf_addstr(b, text);
    dsl_dynbuf_addstr(b, "\n");
    free(text);
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The file dstrain will read for --config name: as given when absolute, else in the
 * plan's working directory; a bare name found nowhere is one of the configs shipped
 * beside dstrain (bin/../share/dslaunch/configs), NAME or NAME.json. */
static char *config_path(const struct dsl_plan *p, const char *dstrain, const char *name)
{
    char *path = name[0] == '/' || !p->cwd ? dsl_xstrdup(name)
                                            : dsl_xasprintf("%s/%s", p->cwd, name);
    if (!*name || strchr(name, '/') || access(path, F_OK) == 0 || !strchr(dstrain, '/'))
        return path;
    /* dstrain looks beside its /proc/self/exe: links resolved */
    char *real = realpath(dstrain, NULL);
    const char *exe = real ? real : dstrain;
    static const char *const suffix[] = {"", ".json"};
    size_t dir = (size_t)(strrchr(exe, '/') - exe);
    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        char *shipped = dsl_xasprintf("%.*s/../share/dslaunch/configs/%s%s", (int)dir, exe,
                                      name, suffix[i]);
        if (access(shipped, R_OK) == 0) {
            free(path);
            free(real);
            return shipped;
        }
        free(shipped);
    }
    free(real);
    return path;
}

/* dstrain.save_on_signal (*save: 0 or 1), dstrain.resume (*resume: 1 when a non-empty
 * string) and dstrain.checkpoint_dir (*ckdir: 1 when a non-empty string) of the config
 * at path, each left as it is when the file does not set it, the last of a repeated
 * key winning as in dstrain. 0, or -1 with why. */
static int dstrain_keys(const char *path, int *save, int *resume, int *ckdir, char *why,
                        size_t cap)
{
    struct dsl_dynbuf b;
    dsl_dynbuf_init(&b, 16u << 20); /* dstrain's own limit */
    int r = dsl_dynbuf_load_file(&b, path);
    if (r < 0) {
        snprintf(why, cap, "%s", r == -EFBIG ? "larger than 16 MiB" : dsl_strerror(r));
        dsl_dynbuf_release(&b);
        return -1;
    }
    cJSON *root = cJSON_ParseWithLength(dsl_dynbuf_str(&b), b.len);
    dsl_dynbuf_release(&b);
    if (!cJSON_IsObject(root)) {
        snprintf(why, cap, "not a JSON object");
        cJSON_Delete(root);
        return -1;
    }
    const cJSON *sec, *it;
    r = 0;
    cJSON_ArrayForEach(sec, root) {
        if (!sec->string || strcmp(sec->string, "dstrain") || !cJSON_IsObject(sec))
            continue;
        cJSON_ArrayForEach(it, sec) {
            if (!it->string)
                continue;
            if (!strcmp(it->string, "save_on_signal")) {
                if (!cJSON_IsBool(it)) {
                    snprintf(why, cap, "dstrain.save_on_signal is not true or false");
                    r = -1;
                } else {
                    *save = cJSON_IsTrue(it) ? 1 : 0;
                }
            } else if (!strcmp(it->string, "resume") && cJSON_IsString(it)) {
                *resume = it->valuestring[0] != '\0';
            } else if (!strcmp(it->string, "checkpoint_dir") && cJSON_IsString(it)) {
                *ckdir = it->valuestring[0] != '\0';
            }
        }
    }
    cJSON_Delete(root);
    return r;
}

/* rq->requeue, rq->resumes and the note that says why (see emit.h) */
static void look_at_program(const struct dsl_plan *p, struct dsl_emit_req *rq,
                            struct dsl_emit_store *st)
{
    const struct dsl_launch_opts *o = p->opts;
    const char *prog = p->argv.nr ? p->argv.v[0] : o->argv.v[0];
    int dstrain = !strcmp(base_name(prog), "dstrain");
    struct dsl_strvec configs;
    struct dsl_dynbuf note, unread;
    int flag = 0, save = -1, cfg_resume = 0, unknown = 0, ckdir = 0;
    const char *save_in = NULL, *ckdir_in = NULL;

    dsl_strvec_init(&configs);
    dsl_dynbuf_init(&note, 1 << 16);
    dsl_dynbuf_init(&unread, 1 << 16);
    for (size_t k = 1; k < o->argv.nr; k++) {
        const char *a = o->argv.v[k];
        if (!strcmp(a, "--save-on-signal") || !strcmp(a, "--save_on_signal"))
            flag = 1;
        else if (!strcmp(a, "--no-save-on-signal") || !strcmp(a, "--no_save_on_signal"))
            flag = -1; /* the last of the two wins, as in dstrain */
        else if (!strncmp(a, "--resume", 8))
            rq->resumes = 1;
        else if (dstrain && (!strcmp(a, "--checkpoint-dir") || !strcmp(a, "--checkpoint_dir")) &&
                 k + 1 < o->argv.nr && o->argv.v[k + 1][0])
            ckdir = 1;
        else if (dstrain && (!strncmp(a, "--checkpoint-dir=", 17) ||
                             !strncmp(a, "--checkpoint_dir=", 17)) && a[17])
            ckdir = 1;
        else if (dstrain && !strcmp(a, "--config") && k + 1 < o->argv.nr)
            dsl_strvec_push(&configs, o->argv.v[++k]);
        else if (dstrain && !strncmp(a, "--config=", 9))
            dsl_strvec_push(&configs, a + 9);
    }
    for (size_t i = 0; i < configs.nr; i++) {
        char *path = config_path(p, prog, configs.v[i]), why[160];
        int s = -1, r = -1, c = -1;
        if (dstrain_keys(path, &s, &r, &c, why, sizeof(why)) < 0) {
            note_line(&unread, dsl_xasprintf("could not read --config '%s' while writing this "
                                           "script (%s): whether it turns "
                                           "dstrain.save_on_signal on is not known",
                                           configs.v[i], why));
            unknown = 1;
        } else {
            if (s >= 0) {
                save = s;
                save_in = configs.v[i];
            }
            if (r >= 0)
                cfg_resume = r;
            if (c >= 0)
                ckdir_in = c ? configs.v[i] : NULL;
        }
        free(path);
    }
    rq->resumes |= cfg_resume;
    if (flag < 0) {
        note_line(&note, dsl_xstrdup("no warning signal asked for: the program's arguments "
                                     "hold --no-save-on-signal"));
    } else if (flag) {
        note_line(&note, dsl_xstrdup("the ranks save a checkpoint on Slurm's warning: the "
                                     "program's arguments hold --save-on-signal"));
        rq->requeue = 1;
    } else if (save == 1) {
        note_line(&note, dsl_xasprintf("the ranks save a checkpoint on Slurm's warning: "
                                       "dstrain.save_on_signal is true in --config '%s' (as "
                                       "read while this script was written)", save_in));
        rq->requeue = 1;
    } else if (save < 0 && dstrain && !unknown && (ckdir || ckdir_in)) {
        /* dstrain's default: a run with a checkpoint directory saves on a stop signal */
        note_line(&note, ckdir ? dsl_xstrdup("the ranks save a checkpoint on Slurm's warning: "
                                             "dstrain does by default when it has a checkpoint "
                                             "directory (--checkpoint-dir)")
                               : dsl_xasprintf("the ranks save a checkpoint on Slurm's warning: "
                                               "dstrain does by default when it has a "
                                               "checkpoint directory (dstrain.checkpoint_dir in "
                                               "--config '%s')", ckdir_in));
        rq->requeue = 1;
    } else if (unknown) {
        if (unread.len) /* (with the flag, which overrides them, they do not matter) */
            dsl_dynbuf_add(&note, unread.buf, unread.len);
        note_line(&note, dsl_xstrdup("so no warning signal is asked for: if the ranks do "
                                     "save on SIGUSR1, write this script again where the "
                                     "file can be read (docs/slurm.md)"));
        rq->signal_unknown = 1;
    } else if (!dstrain) {
        note_line(&note, dsl_xasprintf("'%s' is not dstrain: whether it saves a checkpoint on "
                                       "SIGUSR1 cannot be known here, so no warning signal is "
                                       "asked for (for a program that does: docs/slurm.md, "
                                       "\"Programs other than dstrain\")",
                                       base_name(o->argv.v[0])));
        rq->signal_unknown = 1;
    } else if (save == 0) {
        note_line(&note, dsl_xasprintf("no warning signal asked for: dstrain.save_on_signal "
                                       "is false in --config '%s' (as read while this script "
                                       "was written) and there is no --save-on-signal",
                                       save_in));
    }
    if (note.len) {
        st->note = dsl_xstrdup(dsl_dynbuf_str(&note));
        rq->signal_note = st->note;
    }
    dsl_dynbuf_release(&note);
    dsl_dynbuf_release(&unread);
    dsl_strvec_release(&configs);
}

/*
 * Whether the script asks for GPUs (docs/slurm.md, "GPUs or tasks"): an allocation that
 * has them says so itself; otherwise only a count of GPUs (--num_gpus, DeepSpeed's) asks
 * for them, and only where there are any: CUDA_VISIBLE_DEVICES=-1 hides them, and a
 * cluster whose nodes have none (sinfo) would reject the request. --nproc_per_node and
 * --num_processes count processes. st->gpu_note says why, where the count does not.
 */
static int slots_are_gpus(const struct dsl_plan *p, int gpus, struct dsl_emit_req *rq,
                          struct dsl_emit_store *st)
{
    const struct dsl_launch_opts *o = p->opts;
    const char *gpn = getenv("SLURM_GPUS_PER_NODE"), *gon = getenv("SLURM_GPUS_ON_NODE");
    struct dsl_dynbuf note;
    int on;
    if (p->from_allocation && ((gpn && gpn[0]) || (gon && gon[0] && strcmp(gon, "0"))))
        return 1;
    if (gpus <= 0)
        return 0;
    dsl_dynbuf_init(&note, 4096);
    if (o->nproc_per_node > 0) {
        note_line(&note, dsl_xasprintf("%s counts processes: tasks are asked for, not GPUs "
                                       "(for a GPU each, give --num_gpus instead)",
                                       o->num_processes > 0 ? "--num_processes"
                                                            : "--nproc_per_node"));
        on = 0;
    } else if (p->no_devices) {
        note_line(&note, dsl_xstrdup("CUDA_VISIBLE_DEVICES hides every GPU (CPU ranks): "
                                     "tasks are asked for, not GPUs"));
        on = 0;
    } else {
        char why[512];
        int has = dsl_slurm_cluster_has_gpus(why, sizeof(why));
        if (has == 0)
            note_line(&note, dsl_xasprintf("%s: tasks are asked for, not the GPUs of "
                                           "--num_gpus %d (sbatch would reject them)", why,
                                           gpus));
        else if (has < 0)
            note_line(&note, dsl_xasprintf("GPUs are asked for (--num_gpus %d); whether this "
                                           "cluster has any could not be told (%s): for a "
                                           "CPU cluster use --nproc_per_node %d", gpus, why,
                                           gpus));
        on = has != 0;
        rq->gpus_unknown = has < 0;
    }
    if (note.len)
        st->gpu_note = dsl_xstrdup(dsl_dynbuf_str(&note));
    dsl_dynbuf_release(&note);
    return on;
}

void dsl_emit_req_from_plan(const struct dsl_plan *p, int argc, char **argv, int nodes,
                            int gpus, struct dsl_emit_req *rq, struct dsl_emit_store *st)
{
    const struct dsl_launch_opts *o = p->opts;
    int login = !p->from_allocation && !strcmp(p->hosts_from, "this machine");
    memset(rq, 0, sizeof(*rq));
    memset(st, 0, sizeof(*st));
    dsl_strvec_init(&st->argv);
    rq->nodes = login ? (nodes > 0 ? nodes : 1) : p->pl.nr;
    st->slots = dsl_xcalloc((size_t)rq->nodes, sizeof(int));
    for (int i = 0; i < rq->nodes; i++)
        st->slots[i] = login ? (gpus > 0 ? gpus : p->pl.nodes[0].nslots) : p->pl.nodes[i].nslots;
    rq->slots = st->slots;
    rq->gpus = slots_are_gpus(p, gpus, rq, st);
    rq->gpu_note = st->gpu_note;
    look_at_program(p, rq, st);
    rq->signal_secs = 90;
    /* the program's base name, as a job name sbatch's own parser reads as one word */
    const char *base = strrchr(o->argv.v[0], '/');
    base = base ? base + 1 : o->argv.v[0];
    size_t n = 0;
    for (; base[n] && n < sizeof(st->name) - 1; n++) {
        char c = base[n];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        st->name[n] = ok ? c : '_';
    }
    st->name[n] = '\0';
    rq->job_name = st->name;
    rq->hosts_from = p->hosts_from;
    rq->cwd = p->cwd;
    rq->env = (const char *const *)p->exported.v;
    dsl_strvec_push(&st->argv, p->self_exe);
    dsl_strvec_push(&st->argv, "--launcher");
    dsl_strvec_push(&st->argv, "slurm");
    dsl_launch_opts_forward(argc, argv, not_forwarded, &st->argv);
    dsl_strvec_push(&st->argv, "--");
    for (size_t k = 0; k < o->argv.nr; k++)
        dsl_strvec_push(&st->argv, o->argv.v[k]);
    rq->argv = (const char *const *)st->argv.v;
}

void dsl_emit_req_release(struct dsl_emit_store *st)
{
    free(st->slots);
    free(st->note);
    free(st->gpu_note);
    dsl_strvec_release(&st->argv);
    memset(st, 0, sizeof(*st));
    dsl_strvec_init(&st->argv);
}
