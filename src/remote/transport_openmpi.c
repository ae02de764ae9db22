/*
 * The Open MPI transport (--launcher openmpi): mpirun starts the node agents, which
 * connect back to the launcher (connectback.h), for sites where mpirun is the way in.
 *
 * Theory of operation. mpirun starts one program per slot of a host list in one go
 * and forwards stdin to rank 0 only, so the agents dial back, and one mpirun serves a
 * whole batch of hosts (batch.c: the batch of one pass, its wake-ups, failure and
 * close; this file gives its hooks): the batch's first progress() forks
 *
 *   mpirun -np N --host h0:1,h1:1,.. --map-by node --mca plm_rsh_no_tree_spawn 1
 *          --mca plm_rsh_agent "ssh OPTS" [--launcher_args words] /bin/sh -c SCRIPT
 *          dslaunch --agent ... --connect A:P,.. --launcher-key L
 *
 * where SCRIPT drops what orted put into the environment (OMPI_*, PMIX_*) and execs
 * the agent with `--connect-index $OMPI_COMM_WORLD_RANK`: rank i runs on host i and
 * prints its public key as "DSLCB2-KEY i A" (connectback.h), which mpirun forwards to
 * our pipe; the connection of host i then expects a hello naming A, and the handshake
 * (L being the batch's key pair) proves both ends. No user data is in the script or
 * its arguments: the plan travels sealed over the socket. OPTS names the user's ssh
 * paths only through links in a private directory (dsl_cb_ssh_files), because
 * plm_rsh_agent reaches a shell; tree spawn is off, so every orted is started from this
 * host, where those links are. OPTS carries the login user of the hostfile's
 * "user@host" as -l USER, so the hosts of one batch share a user: a host of another user
 * starts another batch (group_by_user). Opens in a later pass start another batch
 * (another mpirun). --launcher_args words go in before the program, split on
 * whitespace only (launcherargs.h), as DeepSpeed's openmpi runner places them.
 *
 * If mpirun exits before an agent connected (ssh refused, program missing, a sibling
 * rank failed), every unconnected connection of the batch fails with the reason found
 * in mpirun's output (ssh's error, a missing program; else its last lines). mpirun
 * ends the whole batch when one agent exits non-zero; that is its semantics, not ours.
 */
#define _GNU_SOURCE /* nftw */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "batch.h"
#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/plan/launcherargs.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/banned.h"

/*
 * The agent launcher script run by mpirun: $0 dslaunch, the rest its arguments. It
 * drops what orted put into the environment (OMPI_*, PMIX_*, PRTE_*, ...) before the
 * agent starts: the agent's environment is the base of every rank's, and those values
 * describe the agents' job, not the ranks' (a rank calling MPI_Init would join it as
 * rank <node index>). Names only ([A-Za-z0-9_]) reach unset; user variables that the
 * export set names travel on the control channel and are set again for the ranks.
 */
static const char agent_script[] =
    "r=${OMPI_COMM_WORLD_RANK:?not started by mpirun}; "
    "for v in $(env | sed -n -e 's/^\\(OMPI_[A-Za-z0-9_]*\\)=.*/\\1/p' "
    "-e 's/^\\(PMIX_[A-Za-z0-9_]*\\)=.*/\\1/p' -e 's/^\\(PRTE_[A-Za-z0-9_]*\\)=.*/\\1/p'); "
    "do unset \"$v\"; done; unset HFI_NO_BACKTRACE IPATH_NO_BACKTRACE; "
    "exec \"$0\" \"$@\" --connect-index \"$r\"";

/* Lines of mpirun's output that say why a daemon or agent did not start: the line
   handler's words (batch.c) */
static const char *const mpi_reasons[] = {
    "ssh: ", "Permission denied", "Host key verification failed", "HOST IDENTIFICATION",
    "Connection refused", "Connection timed out", "No route to host", "not found",
    "No such file", "Could not resolve", "orted: command not found", NULL};

/* The batch's private part: mpirun's ssh command and the links it names. */
struct mpi_extra {
    char *ssh_agent;              /* plm_rsh_agent value */
    struct dsl_cb_sshfiles files; /* released once every agent connected */
};

static void mpi_release(void *extra)
{
    struct mpi_extra *x = extra;
    if (!x)
        return;
    dsl_cb_sshfiles_release(&x->files);
    free(x->ssh_agent);
    free(x);
}

/* "ssh -F cfg -p P -l USER ..." for plm_rsh_agent (o has the batch's user). */
static int mpi_prepare(const struct dsl_transport_opts *o, const struct dsl_conn *c,
                       void **extra, char *err)
{
    (void)c;
    struct mpi_extra *x = dsl_xcalloc(1, sizeof(*x));
    dsl_cb_sshfiles_init(&x->files);
    char *opts = dsl_cb_ssh_options(o, &x->files, err);
    if (!opts) {
        mpi_release(x);
        return DSL_EUSAGE;
    }
    x->ssh_agent = dsl_xasprintf("ssh %s", opts);
    free(opts);
    *extra = x;
    return 0;
}

/* once every orted is up, ssh needs the links no more: none left behind even if we
   are SIGKILLed later */
static void mpi_all_open(struct dsl_batch *b)
{
    struct mpi_extra *x = b->extra;
    dsl_cb_sshfiles_release(&x->files);
}

static int mpi_check_host(struct dsl_conn *c)
{
    if (strpbrk(c->host, ", \t\n:") || !c->host[0])
        return dsl_cb_conn_fail(c, DSL_EUSAGE, "host name '%s' cannot be passed to mpirun --host",
                                c->host);
    return 0;
}

static int mpi_argv(const struct dsl_batch *b, struct dsl_strvec *argv, char *err)
{
    (void)err;
    const struct mpi_extra *x = b->extra;
    struct dsl_dynbuf hostlist;
    dsl_dynbuf_init(&hostlist, 1 << 20);
    for (size_t i = 0; i < b->hosts.nr; i++)
        dsl_dynbuf_addf(&hostlist, "%s%s:1", i ? "," : "", b->hosts.v[i]);
    const char *mpirun = getenv("DSLAUNCH_MPIRUN");
    dsl_strvec_push(argv, mpirun && mpirun[0] ? mpirun : "mpirun");
    if (geteuid() == 0)
        dsl_strvec_push(argv, "--allow-run-as-root");
    dsl_strvec_pushf(argv, "-np");
    dsl_strvec_pushf(argv, "%zu", b->hosts.nr);
    dsl_strvec_pushv(argv, (const char *const[]){"--host", dsl_dynbuf_str(&hostlist),
                                                 "--map-by", "node", "--mca",
                                                 "plm_rsh_no_tree_spawn", "1", "--mca",
                                                 "plm_rsh_agent", x->ssh_agent, NULL});
    dsl_launcher_args_split(argv, b->launcher_args);
    dsl_strvec_pushv(argv, (const char *const[]){"/bin/sh", "-c", agent_script, NULL});
    for (size_t i = 0; i < b->agent_argv.nr; i++)
        dsl_strvec_push(argv, b->agent_argv.v[i]);
    dsl_strvec_push(argv, "--connect");
    dsl_strvec_push(argv, dsl_batch_connect_arg());
    dsl_strvec_push(argv, "--launcher-key");
    dsl_strvec_push(argv, b->lhex);
    dsl_dynbuf_release(&hostlist);
    return 0;
}

static int mpi_ended(struct dsl_conn *c, int code, const char *tail)
{
    int cls = strstr(tail, "Permission denied (") || strstr(tail, "Host key verification")
                  ? DSL_EAUTH
                  : strstr(tail, "No such file") || strstr(tail, "not found") ||
                            strstr(tail, "Exit code: 127")
                        ? DSL_EREMOTE
                        : DSL_ECONNECT;
    const char *advice = strstr(tail, "Host key verification failed")
                             ? " (unknown host key: rerun with --ssh-accept-new, or run "
                               "ssh once to accept it)"
                             : "";
    return dsl_cb_conn_fail(c, cls, "mpirun for '%s' ended (exit %d) before its agent "
                            "connected back%s%s%s", c->host, code, tail[0] ? ": " : "",
                            tail, advice);
}

/* rm -r of one entry of a tree (nftw, depth first, links not followed) */
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/*
 * mpirun keeps a session directory while it runs and removes it as it exits; SIGKILL
 * (ours, after a grace period, when it hangs on a node that went away) leaves it: Open
 * MPI 4's TMPDIR/ompi.NODE.UID/pid.PID, or PRRTE's TMPDIR/prte.NODE.UID/dvm.PID (Open
 * MPI 5), under the tmpdir_base MCA parameter if one is set. NODE is the host name,
 * short unless Open MPI was told to keep it whole, so both are tried. Only a directory
 * of ours is removed, and its parent when that is left empty.
 */
static void mpi_killed(pid_t pid)
{
    const char *base = getenv("OMPI_MCA_orte_tmpdir_base");
    if (!base || !*base)
        base = getenv("PRTE_MCA_prte_tmpdir_base");
    if (!base || !*base)
        base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    char host[256] = "", shorthost[256];
    if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
        return;
    snprintf(shorthost, sizeof(shorthost), "%s", host);
    shorthost[strcspn(shorthost, ".")] = '\0';
    const char *names[] = {host, shorthost};
    const char *kinds[][2] = {{"ompi", "pid"}, {"prte", "dvm"}};
    for (size_t n = 0; n < 2; n++)
        for (size_t k = 0; k < 2; k++) {
            char top[4096], dir[4200];
            struct stat st;
            snprintf(top, sizeof(top), "%s/%s.%s.%lu", base, kinds[k][0], names[n],
                     (unsigned long)geteuid());
            snprintf(dir, sizeof(dir), "%s/%s.%ld", top, kinds[k][1], (long)pid);
            if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
                continue;
            nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
            rmdir(top); /* only if nothing else is left in it */
        }
}

static struct dsl_batch_kind mpi_kind = {
    .prog = "mpirun",
    .setup_what = "an mpirun batch",
    .timeout_hint = "",
    .squeeze = 1,
    .check_host = mpi_check_host,
    .reasons = mpi_reasons,
    .prepare = mpi_prepare,
    .all_open = mpi_all_open,
    .release = mpi_release,
    .killed = mpi_killed,
    .argv = mpi_argv,
    .ended = mpi_ended,
    .group_by_user = 1,
    .out_max = 16384,
};

static int mpi_open(struct dsl_conn *c, const struct dsl_transport_opts *o,
                    char *const *agent_argv)
{
    return dsl_batch_open(&mpi_kind, c, o, agent_argv);
}

const struct dsl_transport_ops dsl_transport_openmpi = DSL_BATCH_TRANSPORT_OPS("openmpi", mpi_open);
