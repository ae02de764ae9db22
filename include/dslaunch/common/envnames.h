/*
 * The environment contract between the launcher and the programs it starts: every
 * variable name spelled once. The launcher (job/) writes them into each rank's
 * environment; dstrain, dsbench and the collectives (comm/) read them, as PyTorch's
 * env:// rendezvous, torchrun and DeepSpeed programs do. docs/env.md says what each
 * value means; the names follow torchrun and DeepSpeed so existing programs run
 * unchanged.
 *
 * The macros are string literals, so they concatenate: getenv(DSL_ENV_RANK),
 * dsl_strvec_pushf(&env, DSL_ENV_RANK "=%d", rank).
 */
#ifndef DSLAUNCH_COMMON_ENVNAMES_H
#define DSLAUNCH_COMMON_ENVNAMES_H

/* ---- written by the launcher for every rank ---- */
#define DSL_ENV_RANK "RANK"                         /* global rank */
#define DSL_ENV_WORLD_SIZE "WORLD_SIZE"             /* ranks in the job */
#define DSL_ENV_LOCAL_RANK "LOCAL_RANK"             /* rank within its node */
#define DSL_ENV_LOCAL_WORLD_SIZE "LOCAL_WORLD_SIZE" /* ranks on the node */
#define DSL_ENV_LOCAL_SIZE "LOCAL_SIZE"             /* the same, Horovod's name */
#define DSL_ENV_NODE_RANK "NODE_RANK"               /* node index */
#define DSL_ENV_GROUP_RANK "GROUP_RANK"             /* the same, torchrun's name */
#define DSL_ENV_CROSS_RANK "CROSS_RANK"             /* the same, Horovod's name */
#define DSL_ENV_NNODES "NNODES"                     /* node count */
#define DSL_ENV_CROSS_SIZE "CROSS_SIZE"             /* the same, Horovod's name */
#define DSL_ENV_MASTER_ADDR "MASTER_ADDR"           /* rendezvous address */
#define DSL_ENV_MASTER_PORT "MASTER_PORT"           /* rendezvous port */
#define DSL_ENV_CUDA_VISIBLE_DEVICES "CUDA_VISIBLE_DEVICES" /* the node's device ids */
#define DSL_ENV_RUN_ID "DSLAUNCH_RUN_ID"            /* job id: scopes teardown and the store */
#define DSL_ENV_RUN_TOKEN "DSLAUNCH_RUN_TOKEN"      /* the job's secret for its store */
#define DSL_ENV_RESTART_COUNT "DSLAUNCH_RESTART_COUNT" /* restarts so far (0: first attempt) */
#define DSL_ENV_TE_RESTART_COUNT "TORCHELASTIC_RESTART_COUNT" /* the same, torchrun's name */
#define DSL_ENV_TE_MAX_RESTARTS "TORCHELASTIC_MAX_RESTARTS" /* --max-restarts */
#define DSL_ENV_OMP_NUM_THREADS "OMP_NUM_THREADS"   /* set when the user did not */
#define DSL_ENV_NCCL_SOCKET_IFNAME "NCCL_SOCKET_IFNAME" /* interface toward MASTER_ADDR */
#define DSL_ENV_GLOO_SOCKET_IFNAME "GLOO_SOCKET_IFNAME" /* the same, for Gloo */
#define DSL_ENV_PROGRESS_FILE "DSLAUNCH_PROGRESS_FILE" /* where the rank reports progress
                                                          (common/progress.h) */
#define DSL_ENV_PYTHONFAULTHANDLER "PYTHONFAULTHANDLER" /* set while hangs are watched */

/* ---- read by the ranks (set by the user when the defaults do not fit) ---- */
#define DSL_ENV_COMM_TIMEOUT "DSLAUNCH_COMM_TIMEOUT"   /* seconds a collective may wait */
#define DSL_ENV_STORE_TIMEOUT "DSLAUNCH_STORE_TIMEOUT" /* seconds to reach the store */
#define DSL_ENV_STORE_INSECURE "DSLAUNCH_STORE_INSECURE" /* 1: a multi-rank store without
                                                              a token is allowed */
#define DSL_ENV_STORE_FD "DSLAUNCH_STORE_FD"   /* rank 0: the listening socket its agent
                                                  reserved on MASTER_PORT, to serve on */
#define DSL_ENV_STORE_DEBUG "DSLAUNCH_STORE_DEBUG" /* 1: the store prints its counters */
#define DSL_ENV_NCCL_PAD_ALWAYS "DSLAUNCH_NCCL_PAD_ALWAYS" /* 1: every nccl reduce-scatter
                                                  and all-gather takes the padded path of
                                                  uneven shards (a test at world 1) */

#endif
