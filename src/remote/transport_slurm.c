/*
 * The Slurm transport (--launcher slurm, and auto for the hosts of a Slurm allocation):
 * one srun job step starts one node agent per host, and the agents connect back to the
 * launcher on the sealed channel of connectback.h, as with pdsh and mpirun.
 *
 * Theory of operation. Every open() in the same pass of the fan-out loop joins the
 * current batch (batch.c, shared with transport_openmpi.c; this file gives its hooks);
 * the batch's first progress() forks the srun line of srun.h:
 *
 *   srun --nodes=N --ntasks=N --ntasks-per-node=1 --kill-on-bad-exit=1
 *        --nodelist=H0,..,Hn-1 --job-name=dslaunch [--launcher_args words]
 *        dslaunch --agent --slurm-nodes H0,..,Hn-1 --connect A:P,.. --launcher-key L
 *
 * srun execs that argv on every node (no shell anywhere: no user path or value is ever
 * split or interpreted). Slurm orders a step's tasks by its own node order, not by
 * --nodelist, so the agent takes its index from its SLURMD_NODENAME's place in
 * --slurm-nodes (dsl_slurm_agent_prepare), prints "DSLCB2-KEY i A" on its stdout, which
 * srun forwards to our pipe, and dials back; connection i then expects A, and the
 * handshake (L being the batch's key pair) proves both ends. The plan, env and argv
 * travel sealed over the socket, never on srun's command line. The agent also drops the
 * step's own SLURM_* variables (task id, step id, tasks per node of the step), which
 * describe the agents' step and would mislead the ranks.
 *
 * Wake-ups, failure before connect-back (srun's "error:" lines are the reason) and
 * close are batch.c's. --kill-on-bad-exit ends the step when one agent
 * fails; a SIGTERM to srun is forwarded by srun to every agent, which stops its ranks.
 * srun is the leader of its own process group and gets SIGTERM if the launcher dies.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/plan/srun.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/banned.h"

extern char **environ;

/* Lines of srun's output that say why the step or an agent did not start: the line
   handler's words (batch.c) */
static const char *const slurm_reasons[] = {"error:", "fatal:", "not found", "No such file",
                                            "Permission denied", "Unable to", NULL};

static int slurm_check_host(struct dsl_conn *c)
{
    if (strpbrk(c->host, ",[] \t\n") || !c->host[0] || c->host[0] == '-')
        return dsl_cb_conn_fail(c, DSL_EUSAGE, "host name '%s' cannot be passed to srun "
                                "--nodelist", c->host);
    return 0;
}

static int slurm_argv(const struct dsl_batch *b, struct dsl_strvec *argv, char *err)
{
    return dsl_srun_argv(argv, b->launcher_args, b->hosts.v, b->hosts.nr, b->agent_argv.v,
                         dsl_batch_connect_arg(), b->lhex, err);
}

static int slurm_ended(struct dsl_conn *c, int code, const char *tail)
{
    int cls = strstr(tail, "No such file") || strstr(tail, "not found") ||
                      strstr(tail, "execve")
                  ? DSL_EREMOTE
                  : DSL_ECONNECT;
    return dsl_cb_conn_fail(c, cls, "srun for '%s' ended (exit %d) before its agent "
                            "connected back%s%s", c->host, code, tail[0] ? ": " : "", tail);
}

static struct dsl_batch_kind slurm_kind = {
    .prog = "srun",
    .setup_what = "an srun step",
    .timeout_hint = " (waiting for an allocation? raise --connect-timeout)",
    .check_host = slurm_check_host,
    .reasons = slurm_reasons,
    .argv = slurm_argv,
    .ended = slurm_ended,
    .out_max = 16384,
};

static int slurm_open(struct dsl_conn *c, const struct dsl_transport_opts *o,
                      char *const *agent_argv)
{
    return dsl_batch_open(&slurm_kind, c, o, agent_argv);
}

const struct dsl_transport_ops dsl_transport_slurm = DSL_BATCH_TRANSPORT_OPS("slurm", slurm_open);

/* the step's and task's own variables: they describe the agents' step, not the ranks */
static int step_variable(const char *name, size_t n)
{
    static const char *const exact[] = {
        "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS",
        "SLURM_GTIDS", "SLURM_TASK_PID", "SLURM_STEPID", "SLURM_TASKS_PER_NODE",
        "SLURM_NTASKS_PER_NODE", "SLURM_DISTRIBUTION", "SLURM_LAUNCH_NODE_IPADDR",
        "SLURM_KILL_BAD_EXIT", "SLURM_LABELIO", "SLURM_UMASK", "SLURM_PRIO_PROCESS",
        "SLURM_NODELIST", "SLURM_NNODES", "SLURM_CPUS_PER_TASK"};
    static const char *const prefix[] = {"SLURM_STEP_", "SLURM_SRUN_COMM_", "SLURM_CPU_BIND"};
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
        if (strlen(exact[i]) == n && !memcmp(name, exact[i], n))
            return 1;
    for (size_t i = 0; i < sizeof(prefix) / sizeof(prefix[0]); i++)
        if (n >= strlen(prefix[i]) && !memcmp(name, prefix[i], strlen(prefix[i])))
            return 1;
    return 0;
}

int dsl_slurm_agent_prepare(const char *nodes, int *index, char *err)
{
    const char *me = getenv("SLURMD_NODENAME");
    if (!me || !me[0])
        return dsl_seterr(err, DSL_EUSAGE, "--slurm-nodes: SLURMD_NODENAME is not set (this "
                          "agent was not started by srun)");
    int found = -1, i = 0;
    for (const char *s = nodes; found < 0; i++) {
        size_t n = strcspn(s, ",");
        if (n == strlen(me) && !memcmp(s, me, n))
            found = i;
        if (!s[n])
            break;
        s += n + 1;
    }
    if (found < 0)
        return dsl_seterr(err, DSL_EUSAGE, "srun started this agent on node '%.100s', which is "
                          "not one of the plan's nodes '%.200s' (the hostfile must name Slurm's "
                          "node names)", me, nodes);
    if (found > 99999)
        return dsl_seterr(err, DSL_EUSAGE, "--slurm-nodes: more than 100000 nodes");
    /* collect the names first: unsetenv changes environ under the loop */
    struct dsl_strvec names;
    dsl_strvec_init(&names);
    for (char **e = environ; *e; e++) {
        size_t n = strcspn(*e, "=");
        if (step_variable(*e, n))
            dsl_strvec_pushf(&names, "%.*s", (int)n, *e);
    }
    for (size_t k = 0; k < names.nr; k++)
        unsetenv(names.v[k]);
    dsl_strvec_release(&names);
    *index = found;
    return 0;
}
