/*
 * The agent's ways to its launcher: stdin/stdout, a connection back to the launcher
 * (pdsh, mpirun, srun: dialled and sealed here), or no-ssh mode's join of node 0.
 *
 * Theory of operation, connect-back. Started by srun, the agent first takes its step's
 * GPUs (Slurm's gres) and its node index; then it dials the launcher's listener within
 * 30 s, proves the keys in the handshake, and runs on the sealed connection.
 *
 * No-ssh mode, node K. The keys come from the secret; the agent dials node 0's address
 * (retrying while the coordinator is not up yet, until --join_timeout), the handshake
 * proves both ends, and the node agent runs on the channel in this process. Its result
 * is the node's exit code. After a failed attempt the node dials again once: the
 * coordinator keeps its listener for restarts, so "connection refused" means it has
 * exited and the node exits too; --max-restarts bounds the attempts here as there.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_impl.h"
#include "dslaunch/agent/agent.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/net.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/proto/exitcode.h"
#include "dslaunch/remote/connectback.h"
#include "dslaunch/remote/join.h"
#include "dslaunch/remote/seal.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/banned.h"

int dsl_agent_run(const struct dsl_launch_opts *opts)
{
    if (!opts->agent_connect)
        return dsl_agent_main(0, 1);
    char err[DSL_ERR_LEN] = "";
    int fd, index = opts->agent_index;
    struct dsl_seal seal;
    /* started by srun with the job's GPUs on this node (Slurm's gres sets SLURM_STEP_GPUS
     * with CUDA_VISIBLE_DEVICES): the plan's device ids are places in that list; a gres
     * without device files gets "NoDevFiles", which names no device */
    const char *step_cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (opts->agent_slurm_nodes && getenv("SLURM_STEP_GPUS") && step_cvd &&
        strcmp(step_cvd, "NoDevFiles") != 0)
        dsl_agent_set_node_devices(step_cvd);
    if (opts->agent_slurm_nodes && dsl_slurm_agent_prepare(opts->agent_slurm_nodes, &index,
                                                           err) < 0) {
        dsl_error("%s", err);
        return DSL_EXIT_UNREACHABLE;
    }
    double deadline = dsl_now() + 30.0;
    if (dsl_agent_cb_dial(opts->agent_connect, opts->agent_key, index, 30.0, 1,
                          &fd, &seal, err) < 0) {
        dsl_error("cannot connect back to the launcher: %s", err);
        dsl_seal_release(&seal);
        return DSL_EXIT_UNREACHABLE;
    }
    if (dsl_agent_cb_handshake(fd, &seal, deadline, err) < 0) {
        dsl_error("%s", err);
        dsl_seal_release(&seal);
        return DSL_EXIT_UNREACHABLE;
    }
    int code = dsl_agent_main_sealed(fd, &seal);
    dsl_seal_release(&seal);
    close(fd);
    return code;
}

int dsl_nossh_join(struct dsl_plan *p)
{
    const struct dsl_nossh *ns = &p->nossh;
    const struct dsl_launch_opts *o = p->opts;
    char err[DSL_ERR_LEN] = "", label[32];
    unsigned char lpriv[DSL_SEAL_KEY_LEN], lpub[DSL_SEAL_KEY_LEN];
    unsigned char apriv[DSL_SEAL_KEY_LEN], apub[DSL_SEAL_KEY_LEN];
    dsl_join_agent_label(ns->node_rank, label, sizeof(label));
    if (dsl_seal_key_derive(ns->secret, ns->secret_len, "launcher", lpriv, lpub, err) < 0 ||
        dsl_seal_key_derive(ns->secret, ns->secret_len, label, apriv, apub, err) < 0) {
        dsl_error("%s", err);
        return DSL_EXIT_AUTH;
    }
    memset(lpriv, 0, sizeof(lpriv)); /* only the coordinator needs it */
    char *hostport = strchr(ns->master_addr, ':')
                         ? dsl_xasprintf("[%s]:%d", ns->master_addr, ns->control_port)
                         : dsl_xasprintf("%s:%d", ns->master_addr, ns->control_port);
    struct dsl_agent_join join = {.node_rank = ns->node_rank, .nnodes = ns->nnodes,
                                  .slots = ns->slots, .argv = o->argv.v,
                                  .argc = o->argv.nr};
    int code = DSL_EXIT_UNREACHABLE;
    for (int attempt = 0;; attempt++) {
        int fd = -1;
        struct dsl_seal seal;
        double deadline = dsl_now() + o->join_timeout;
        if (attempt == 0 && o->verbose >= 1)
            dsl_info("node rank %d of %d: dialling the coordinator at %s (up to %.0f s)",
                     ns->node_rank, ns->nnodes, hostport, o->join_timeout);
        if (dsl_agent_cb_dial_keyed(hostport, apriv, lpub, deadline, attempt == 0, &fd, &seal,
                                    err) < 0) {
            if (attempt == 0) {
                dsl_error("node rank %d: cannot reach the coordinator (node 0) at %s within "
                          "%.0f s: %s", ns->node_rank, hostport, o->join_timeout, err);
                code = DSL_EXIT_UNREACHABLE;
            } else if (o->verbose >= 2) {
                dsl_info("the coordinator has ended; no further attempt");
            }
            dsl_seal_release(&seal);
            break;
        }
        /* a dial for a restart waits in the coordinator's backlog until its next attempt
         * begins, which may be after a lost node's keepalive: as long as the join */
        int hr = dsl_agent_cb_handshake(fd, &seal, attempt ? deadline : dsl_now() + 10.0, err);
        if (hr < 0 && attempt > 0) {
            /* the coordinator ended, or its next attempt left this node out: its
             * summary says why; this node keeps its last attempt's code */
            if (o->verbose >= 1)
                dsl_info("node rank %d: the coordinator took this node into no further "
                         "attempt", ns->node_rank);
        } else if (hr < 0) {
            dsl_error("node rank %d: the coordinator at %s did not accept this node (%s): the "
                      "job secret (%s) must be the same on every node, and node rank %d must "
                      "be below --nnodes there and not taken", ns->node_rank, hostport, err,
                      ns->from_secret, ns->node_rank);
            code = DSL_EXIT_AUTH;
        }
        if (hr < 0) {
            dsl_seal_release(&seal);
            close(fd);
            break;
        }
        if (o->verbose >= 2)
            dsl_info("node rank %d: joined the coordinator at %s", ns->node_rank, hostport);
        join.signalled = join.refused = 0;
        code = dsl_agent_main_joined(fd, &seal, &join);
        dsl_seal_release(&seal);
        close(fd);
        if (code == 0 || join.signalled || join.refused || attempt >= o->max_restarts)
            break;
    }
    memset(apriv, 0, sizeof(apriv));
    free(hostport);
    return code;
}
