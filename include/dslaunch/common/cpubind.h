/*
 * Core binding of a node's ranks (DeepSpeed's --bind_cores_to_rank / --bind_core_list):
 * the cores this node may use are split evenly between its local ranks, in NUMA order,
 * so that a rank's cores share a NUMA node whenever the split allows it.
 *
 * The cores are the agent's own affinity (what the node lets it use: a Slurm or
 * container cpuset), narrowed to --bind_core_list when given. They are ordered by NUMA
 * node, then by number, and rank i gets the i-th run of floor(cores / ranks) of them,
 * as DeepSpeed does; the remainder stays unused. Fewer cores than ranks is an error.
 * Pure functions over plain arrays, so the tests can give any topology.
 */
#ifndef DSLAUNCH_COMMON_CPUBIND_H
#define DSLAUNCH_COMMON_CPUBIND_H

#include <stddef.h>

#define DSL_CPUBIND_MAX 4096 /* core numbers 0..DSL_CPUBIND_MAX-1 */

/**
 * Parse a core list "0-3,8,10-11" into out (ascending, no duplicates). Returns the
 * count, or DSL_EUSAGE with err naming the bad item.
 */
int dsl_cpubind_parse(const char *list, int *out, size_t cap, char *err);

/**
 * The NUMA node of each core (node_of[c], -1 when unknown) from sysfs root
 * ("/sys/devices/system/node" or a test's copy): the cpulist file of every nodeN.
 * Cores from cap on are left out. Returns the number of NUMA nodes found (0: none,
 * every core then -1).
 */
int dsl_cpubind_numa(const char *root, int *node_of, size_t cap);

/**
 * Split cores[0..n) (ascending) between nranks ranks: out[r * per .. (r+1) * per) are
 * rank r's cores, *per their count. node_of may be NULL (no NUMA information). Returns
 * 0, or DSL_EUSAGE with err when there are fewer cores than ranks.
 */
int dsl_cpubind_split(const int *cores, size_t n, const int *node_of, int nranks, int *out,
                      int *per, char *err);

/** "0-3,8" for cores[0..n) (ascending) into buf. */
void dsl_cpubind_format(const int *cores, size_t n, char *buf, size_t len);

#endif
