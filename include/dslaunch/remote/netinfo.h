/*
 * Facts about this machine for the agent's handshake (hello/probed messages): host
 * name, CPU count, GPU count (read from /proc/driver/nvidia without linking CUDA), the
 * interfaces that are up with their IPv4/IPv6 addresses, and which interface and
 * source address the kernel would use to reach a given address.
 *
 * Nothing here prints or serialises: the agent copies the struct into its message.
 */
#ifndef DSLAUNCH_NETINFO_H
#define DSLAUNCH_NETINFO_H

#include <stddef.h>

#define DSL_NETINFO_HOST_LEN 256

struct dsl_netinfo_iface {
    char *name;      /* owned, e.g. "eth0" */
    char **addrs;    /* owned numeric addresses ("10.0.0.2", "fe80::1%eth0"), IPv4 first */
    int naddrs;
    int loopback;    /* 1 for IFF_LOOPBACK interfaces */
};

struct dsl_netinfo {
    char hostname[DSL_NETINFO_HOST_LEN];
    int cpus;                        /* online CPUs (sysconf), at least 1 */
    int gpus;                        /* NVIDIA GPUs in /proc/driver/nvidia/gpus, 0 if none */
    struct dsl_netinfo_iface *ifaces; /* owned; interfaces that are up, in getifaddrs order */
    int nifaces;
};

/** Set ni to an empty state (safe to release). */
void dsl_netinfo_init(struct dsl_netinfo *ni);
/**
 * Fill ni with this machine's facts. Returns 0, or a negative code with err set (ni
 * then holds whatever could be collected and must still be released). err may be NULL.
 */
int dsl_netinfo_collect(struct dsl_netinfo *ni, char *err);
/** Free everything ni owns; ni is left empty. */
void dsl_netinfo_release(struct dsl_netinfo *ni);

/** Online CPU count (at least 1). */
int dsl_netinfo_cpus(void);
/** NVIDIA GPU count from /proc/driver/nvidia/gpus (or dir for tests), 0 if absent. */
int dsl_netinfo_gpus(const char *dir);

/**
 * Which interface and source address the kernel uses to reach dest_ip (numeric IPv4
 * or IPv6): a UDP socket is connected to it (no packet is sent) and its local address
 * looked up among the interfaces. Returns 0 with ifname/src_ip filled (ifname "" if no
 * interface carries the address), or a negative code with err set (no route: -ENETUNREACH).
 */
int dsl_netinfo_route(const char *dest_ip, char *ifname, size_t ifname_len, char *src_ip,
                      size_t src_len, char *err);

#endif
