/*
 * Placement: the hostfile filtered by --include/--exclude/--num_nodes/--num_gpus into
 * an ordered list of nodes, each with its device (slot) ids, and the global rank
 * numbering (hosts in hostfile order, then slots in ascending order).
 *
 * Semantics follow DeepSpeed's launcher documentation, and fail loudly where DeepSpeed
 * is silently wrong: an unknown host or slot in a filter, --num_gpus above a host's
 * slots, a filter that leaves nothing, malformed specs ("a:", "a:1:2", "a@", "a:x").
 */
#ifndef DSLAUNCH_PLACEMENT_H
#define DSLAUNCH_PLACEMENT_H

#include <stddef.h>

struct dsl_hostfile;

struct dsl_node {
    char *host;       /* owned; the host name alone */
    char *user;       /* login user from the hostfile's "user@host", owned; NULL: none */
    int node_rank;
    int *slots;       /* device ids, ascending; owned */
    int nslots;
    int first_rank;   /* global rank of slots[0] */
};

struct dsl_placement {
    struct dsl_node *nodes; /* owned; lives until dsl_placement_release() */
    int nr;
    int world_size;
};

struct dsl_placement_opts {
    const char *include; /* NULL when not given (""  is an error); NODE_SPEC[@NODE_SPEC...] */
    const char *exclude;
    int num_nodes;       /* -1 when not given; other values below 1 are errors */
    int num_gpus;        /* -1 when not given; other values below 1 are errors */
    const char *include_as; /* how messages name the include (NULL: "--include 'SPEC'");
                            for an include the caller made from what the user typed */
};

/**
 * 1 when node n is this machine as the user running dslaunch: its host is one of this
 * machine's names (dsl_host_is_local) and it names no login user, or this process's own
 * ("me@localhost"). Another user's node is reached like a remote one, so that the login
 * as that user happens.
 */
int dsl_node_is_local(const struct dsl_node *n);

void dsl_placement_init(struct dsl_placement *pl);
/**
 * Build the placement from hf (which must have at least one host) and o. pl need not be
 * initialised. On error (DSL_EPLACEMENT) pl is left empty and err holds the message.
 * The nodes, their host names and slot arrays are owned by pl and live until
 * dsl_placement_release(); pl does not keep pointers into hf.
 */
int dsl_placement_build(struct dsl_placement *pl, const struct dsl_hostfile *hf,
                        const struct dsl_placement_opts *o, char *err);
void dsl_placement_release(struct dsl_placement *pl);
/**
 * Leave out the nodes i with drop[i] set (drop has pl->nr entries; NULL drops none) and
 * number the rest again: node_rank by position, first_rank by the running slot count,
 * as dsl_placement_build() does, so the kept nodes keep their order. For a restart
 * without the nodes that failed. Returns the number of nodes left (0 leaves an empty
 * placement, still to be released).
 */
int dsl_placement_drop(struct dsl_placement *pl, const unsigned char *drop);

/**
 * DeepSpeed's single-node rule: with no hostfile and no --include/--exclude/--num_nodes/
 * --num_gpus, CUDA_VISIBLE_DEVICES=1,2 means --include localhost:1,2. Call it only when
 * the hostfile was synthesised (no --hostfile, no /job/hostfile), with cvd =
 * getenv("CUDA_VISIBLE_DEVICES") and the filters the user gave. Returns
 *   0  cvd unset or empty: *include = NULL, nothing to do;
 *   1  *include = "localhost:<cvd>" (malloc'd; the caller frees it and passes it as
 *      o->include to dsl_placement_build, which checks the ids against the local slots);
 *   2  cvd set but ignored because a filter was given (*include = NULL; the caller may
 *      say so, as DeepSpeed does);
 *   3  cvd hides every device ("-1", or any list whose first item is a negative number,
 *      where CUDA stops reading): the common way to ask for CPU ranks; the caller
 *      counts CPU slots and gives the ranks no device; filters apply as usual;
 *   DSL_EPLACEMENT when cvd is not a comma list of device numbers (GPU UUIDs,
 *      MIG names, empty items), with err saying so.
 */
int dsl_placement_cuda_visible(const char *cvd, const struct dsl_placement_opts *o,
                               char **include, char *err);

/**
 * The world map as DeepSpeed's launcher encodes it: a JSON object {"host": [slots]}
 * with Python json.dumps' default separators (", " and ": "), and its URL-safe base64
 * (with '=' padding) as passed in --world_info. Both strings are malloc'd; caller frees.
 */
char *dsl_placement_world_info_json(const struct dsl_placement *pl);
char *dsl_placement_world_info_b64(const struct dsl_placement *pl);

/** URL-safe base64 with padding of n bytes; malloc'd. */
char *dsl_base64url(const void *data, size_t n);

/**
 * Number of local slots when no hostfile names this machine: DSLAUNCH_LOCAL_SLOTS if
 * set (1..DSL_HOSTFILE_MAX_SLOTS, else DSL_EUSAGE with err), else the GPU count (entries
 * of /proc/driver/nvidia/gpus) unless cpus_only, else the number of online CPUs (at
 * least 1).
 */
int dsl_local_slots(int *slots, int cpus_only, char *err);

/**
 * The oversubscription rule, in one place (docs/placement.md, "How many ranks a node
 * runs"): a node without a hostfile line (this machine with no hostfile, a no-ssh node)
 * has the slots dslaunch finds (dsl_local_slots), and `want` ranks asked for with the
 * option `flag` ("--nproc_per_node 4") must fit in them, unless oversubscribe and the
 * slots are not GPUs (a rank per GPU is the most: a rank beyond would get a device that
 * is not there). Sets *slots to the node's slot count: what was found, or want when it
 * is above and allowed; want < 1 means nothing was asked (the found count). DSL_EUSAGE
 * with err naming flag, what was found and the way out otherwise.
 */
int dsl_local_slots_for(int want, const char *flag, int oversubscribe, int cpus_only,
                        int *slots, char *err);

#endif
