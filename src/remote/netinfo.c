/*
 * Facts about this machine for the handshake.
 *
 * Theory of operation: everything is read fresh on each call, synchronously and
 * without network traffic. Interfaces come from getifaddrs(); an interface that is not
 * IFF_UP is skipped, as are address families other than IPv4/IPv6. The route lookup
 * connects a UDP socket (connect() on a datagram socket only asks the routing table;
 * nothing is sent) and matches getsockname()'s address against the interface list,
 * which is what NCCL_SOCKET_IFNAME needs: the name of the interface that carries the
 * traffic to MASTER_ADDR on this node, whatever it is called here.
 */
#define _GNU_SOURCE /* getifaddrs, NI_NUMERICHOST */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/remote/netinfo.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/common/banned.h"

void dsl_netinfo_init(struct dsl_netinfo *ni)
{
    memset(ni, 0, sizeof(*ni));
}

void dsl_netinfo_release(struct dsl_netinfo *ni)
{
    for (int i = 0; i < ni->nifaces; i++) {
        for (int j = 0; j < ni->ifaces[i].naddrs; j++)
            free(ni->ifaces[i].addrs[j]);
        free(ni->ifaces[i].addrs);
        free(ni->ifaces[i].name);
    }
    free(ni->ifaces);
    dsl_netinfo_init(ni);
}

int dsl_netinfo_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

int dsl_netinfo_gpus(const char *dir)
{
    DIR *d = opendir(dir ? dir : "/proc/driver/nvidia/gpus");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++; /* one directory per PCI address */
    closedir(d);
    return n;
}

/* Numeric text of a sockaddr, or -1. */
static int addr_text(const struct sockaddr *sa, char *out, size_t len)
{
    socklen_t sl = sa->sa_family == AF_INET ? (socklen_t)sizeof(struct sockaddr_in)
                                             : (socklen_t)sizeof(struct sockaddr_in6);
    return getnameinfo(sa, sl, out, (socklen_t)len, NULL, 0, NI_NUMERICHOST) ? -1 : 0;
}

static struct dsl_netinfo_iface *iface_get(struct dsl_netinfo *ni, const char *name,
                                           int *alloc)
{
    for (int i = 0; i < ni->nifaces; i++)
        if (!strcmp(ni->ifaces[i].name, name))
            return &ni->ifaces[i];
    DSL_ALLOC_GROW(ni->ifaces, ni->nifaces, *alloc);
    struct dsl_netinfo_iface *f = &ni->ifaces[ni->nifaces++];
    memset(f, 0, sizeof(*f));
    f->name = dsl_xstrdup(name);
    return f;
}

/* IPv4 before IPv6 within an interface, so addrs[0] is the one people expect. */
static void iface_add(struct dsl_netinfo_iface *f, const char *addr, int v4)
{
    f->addrs = dsl_xreallocarray(f->addrs, (size_t)f->naddrs + 1, sizeof(*f->addrs));
    int at = f->naddrs;
    if (v4)
        while (at > 0 && strchr(f->addrs[at - 1], ':')) {
            f->addrs[at] = f->addrs[at - 1];
            at--;
        }
    f->addrs[at] = dsl_xstrdup(addr);
    f->naddrs++;
}

static int collect_ifaces(struct dsl_netinfo *ni, char *err)
{
    struct ifaddrs *ifa0;
    if (getifaddrs(&ifa0) < 0)
        return dsl_seterr(err, -errno, "cannot list network interfaces: %s", strerror(errno));
    int alloc = 0;
    for (struct ifaddrs *ifa = ifa0; ifa; ifa = ifa->ifa_next) {
        if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP))
            continue;
        int fam = ifa->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6)
            continue;
        char text[NI_MAXHOST];
        if (addr_text(ifa->ifa_addr, text, sizeof(text)) < 0)
            continue;
        struct dsl_netinfo_iface *f = iface_get(ni, ifa->ifa_name, &alloc);
        f->loopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
        iface_add(f, text, fam == AF_INET);
    }
    freeifaddrs(ifa0);
    return 0;
}

int dsl_netinfo_collect(struct dsl_netinfo *ni, char *err)
{
    if (gethostname(ni->hostname, sizeof(ni->hostname)) < 0)
        ni->hostname[0] = '\0';
    ni->hostname[sizeof(ni->hostname) - 1] = '\0';
    ni->cpus = dsl_netinfo_cpus();
    ni->gpus = dsl_netinfo_gpus(NULL);
    return collect_ifaces(ni, err);
}

/* Find the interface that carries the address in sa (compared as binary, not text). */
static int iface_of(const struct sockaddr_storage *ss, char *ifname, size_t ifname_len)
{
    struct ifaddrs *ifa0;
    if (getifaddrs(&ifa0) < 0)
        return -errno;
    int found = 0;
    for (struct ifaddrs *ifa = ifa0; ifa && !found; ifa = ifa->ifa_next) {
        if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != ss->ss_family)
            continue;
        if (ss->ss_family == AF_INET) {
            const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)ss;
            const struct sockaddr_in *b = (const struct sockaddr_in *)(void *)ifa->ifa_addr;
            found = a->sin_addr.s_addr == b->sin_addr.s_addr;
        } else {
            const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)(const void *)ss;
            const struct sockaddr_in6 *b = (const struct sockaddr_in6 *)(void *)ifa->ifa_addr;
            found = !memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr));
        }
        if (found)
            snprintf(ifname, ifname_len, "%s", ifa->ifa_name);
    }
    freeifaddrs(ifa0);
    return found;
}

int dsl_netinfo_route(const char *dest_ip, char *ifname, size_t ifname_len, char *src_ip,
                      size_t src_len, char *err)
{
    if (ifname_len)
        ifname[0] = '\0';
    if (src_len)
        src_ip[0] = '\0';
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    hints.ai_flags = AI_NUMERICHOST;
    int g = getaddrinfo(dest_ip, "9", &hints, &ai);
    if (g != 0)
        return dsl_seterr(err, -EINVAL, "bad address '%s': %s", dest_ip, gai_strerror(g));
    int r;
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        r = dsl_seterr(err, -errno, "cannot create socket: %s", strerror(errno));
        goto out;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        r = dsl_seterr(err, -errno, "no route to '%s': %s", dest_ip, strerror(errno));
        goto out;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)(void *)&ss, &sl) < 0) {
        r = dsl_seterr(err, -errno, "cannot read local address: %s", strerror(errno));
        goto out;
    }
    char text[NI_MAXHOST];
    if (addr_text((const struct sockaddr *)(const void *)&ss, text, sizeof(text)) < 0) {
        r = dsl_seterr(err, -EINVAL, "cannot format local address for '%s'", dest_ip);
        goto out;
    }
    snprintf(src_ip, src_len, "%s", text);
    r = iface_of(&ss, ifname, ifname_len);
    if (r < 0) {
        r = dsl_seterr(err, r, "cannot list network interfaces: %s", strerror(-r));
        goto out;
    }
    r = 0;
out:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return r;
}
