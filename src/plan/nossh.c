/*
 * No-ssh mode's settings (nossh.h): options, then the scheduler's variables, then
 * defaults, each value remembering its source. Pure apart from reading the secret file
 * (refused unless private to this user, as ssh refuses an open private key) and, for
 * the slots, the local devices; nothing is connected here.
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/common/xalloc.h"
#include "dslaunch/plan/hostfile.h"
#include "dslaunch/plan/nossh.h"
#include "dslaunch/plan/placement.h"
#include "dslaunch/common/banned.h"

#define SECRET_MAX 4096

/* memset that the compiler may not drop (no libcrypto in this library) */
static void wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--)
        *v++ = 0;
}

void dsl_nossh_init(struct dsl_nossh *ns)
{
    memset(ns, 0, sizeof(*ns));
}

void dsl_nossh_release(struct dsl_nossh *ns)
{
    free(ns->master_addr);
    if (ns->secret) {
        wipe(ns->secret, ns->secret_len);
        free(ns->secret);
    }
    dsl_nossh_init(ns);
}

static const char *env_get(char *const *env, const char *name)
{
    return dsl_env_lookup(env, name, strlen(name));
}

/* An env value as an int in lo..hi; "N:N" too for PET_NNODES (torchrun's min:max). */
static int env_int(const char *name, const char *v, int lo, int hi, int range_ok, int *out,
                   char *err)
{
    const char *colon = range_ok ? strchr(v, ':') : NULL;
    int a, b;
    if (colon) {
        char *first = dsl_xstrndup(v, (size_t)(colon - v));
        int r1 = dsl_parse_int(first, lo, hi, &a), r2 = dsl_parse_int(colon + 1, lo, hi, &b);
        free(first);
        if (r1 < 0 || r2 < 0)
            return dsl_seterr(err, DSL_EUSAGE, "%s='%s' is not a node count", name, v);
        if (a != b)
            return dsl_seterr(err, DSL_EUSAGE, "%s='%s' is an elastic range; no-ssh mode "
                              "needs a fixed node count (min = max)", name, v);
        *out = a;
        return 0;
    }
    if (dsl_parse_int(v, lo, hi, out) < 0)
        return dsl_seterr(err, DSL_EUSAGE, "%s='%s' is not an integer from %d to %d", name, v,
                          lo, hi);
    return 0;
}

/* "readable", "writable", "readable and writable" (or "accessible": execute alone) */
static const char *access_words(mode_t m)
{
    int rd = (m & (S_IRGRP | S_IROTH)) != 0, wr = (m & (S_IWGRP | S_IWOTH)) != 0;
    return rd && wr ? "readable and writable" : rd ? "readable" : wr ? "writable" : "accessible";
}

static const char *access_who(mode_t m)
{
    int g = (m & S_IRWXG) != 0, o = (m & S_IRWXO) != 0;
    return g && o ? "its group and others" : g ? "its group" : "others";
}

/*
 * Whoever holds the secret can join the job and run commands as this user on every
 * node, so its file is held to the rule OpenSSH applies to a private key: a file of our
 * own must be private to us (no bit of 077). A file root provides (an administrator's,
 * a Kubernetes Secret volume's) may be shared with its group (a pod's fsGroup makes
 * such files 0440) but not with others; a file of another ordinary user is refused,
 * since its owner can read or replace it. fd is the opened file, so the file checked
 * is the file read.
 */
static int check_secret_file(int fd, const char *path, char *err)
{
    struct stat st;
    uid_t me = geteuid();
    if (fstat(fd, &st) < 0)
        return dsl_seterr(err, DSL_EUSAGE, "--job_secret_file '%s': %s", path, strerror(errno));
    mode_t mode = st.st_mode & 07777;
    if (S_ISDIR(st.st_mode))
        return dsl_seterr(err, DSL_EUSAGE, "--job_secret_file '%s': %s", path, strerror(EISDIR));
    if (st.st_uid != me && st.st_uid != 0) {
        struct passwd *pw = getpwuid(st.st_uid);
        return dsl_seterr(err, DSL_EUSAGE, "--job_secret_file '%s' belongs to another user "
                          "(%s%s%suid %ld): its owner can read or replace the job secret; "
                          "use a file of your own (copy it, then chmod 600 the copy)", path,
                          pw && pw->pw_name ? "'" : "", pw && pw->pw_name ? pw->pw_name : "",
                          pw && pw->pw_name ? "', " : "", (long)st.st_uid);
    }
    if (st.st_uid == me && (mode & 077)) {
        /* a Kubernetes Secret volume: PATH -> ..data/PATH, the mode from defaultMode */
        char link[16];
        ssize_t n = readlink(path, link, sizeof(link));
        int kube = n >= 7 && memcmp(link, "..data/", 7) == 0;
        return dsl_seterr(err, DSL_EUSAGE, "--job_secret_file '%s' is %s by %s (mode %04o): "
                          "anyone who can read it can join the job and run commands as you; "
                          "%s%s%s (ssh refuses a private key with such a mode too)", path,
                          access_words(mode), access_who(mode), (unsigned)mode,
                          kube ? "set defaultMode: 0400 on the Secret volume" : "run chmod 600 '",
                          kube ? "" : path, kube ? "" : "'");
    }
    if (st.st_uid != me && (mode & S_IRWXO))
        return dsl_seterr(err, DSL_EUSAGE, "--job_secret_file '%s' is %s by every user of "
                          "this machine (mode %04o, owned by root): anyone can join the job; "
                          "have it made private (chmod o-rwx), or copy it to a file of your "
                          "own and chmod 600 that", path,
                          access_words(mode & (S_IRWXO)), (unsigned)mode);
    return 0;
}

static int read_secret(struct dsl_nossh *ns, const char *path, char *err)
{
    unsigned char buf[SECRET_MAX + 1];
    size_t len = 0;
    int r = 0, fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dsl_seterr(err, DSL_EUSAGE, "--job_secret_file '%s': %s", path, strerror(errno));
    if ((r = check_secret_file(fd, path, err)) < 0)
        goto out;
    while (len < sizeof(buf)) {
        ssize_t got = read(fd, buf + len, sizeof(buf) - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            r = dsl_seterr(err, DSL_EUSAGE, "--job_secret_file '%s': %s", path,
                           strerror(errno));
            goto out;
        }
        if (got == 0)
            break;
        len += (size_t)got;
    }
    if (len > SECRET_MAX) {
        r = dsl_seterr(err, DSL_EUSAGE, "--job_secret_file '%s': larger than 4 KiB", path);
        goto out;
    }
    size_t n = len;
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--; /* `echo secret >file` and Kubernetes secrets both end so, or not */
    ns->secret = dsl_xmalloc(n + 1);
    memcpy(ns->secret, buf, n);
    ns->secret_len = n;
    snprintf(ns->from_secret, sizeof(ns->from_secret), "--job_secret_file '%.200s'", path);
out:
    wipe(buf, len);
    close(fd);
    return r;
}

/* The node count and this node's rank, each from its flag or torchrun's variables. */
static int resolve_nodes(struct dsl_nossh *ns, const struct dsl_launch_opts *o, char *const *env,
                         char *err)
{
    const char *pet_nnodes = env_get(env, "PET_NNODES");
    int r;
    /* nodes */
    if (o->nnodes > 0) {
        ns->nnodes = o->nnodes;
        snprintf(ns->from_nnodes, sizeof(ns->from_nnodes), "--nnodes");
    } else if (pet_nnodes && pet_nnodes[0]) {
        if ((r = env_int("PET_NNODES", pet_nnodes, 1, 1 << 20, 1, &ns->nnodes, err)) < 0)
            return r;
        snprintf(ns->from_nnodes, sizeof(ns->from_nnodes), "PET_NNODES");
    } else {
        return dsl_seterr(err, DSL_EUSAGE, "no-ssh mode needs the number of nodes: --nnodes N "
                          "(or PET_NNODES)");
    }
    /* this node's rank */
    static const char *const rank_vars[] = {"PET_NODE_RANK", "JOB_COMPLETION_INDEX"};
    if (o->node_rank >= 0) {
        ns->node_rank = o->node_rank;
        snprintf(ns->from_node_rank, sizeof(ns->from_node_rank), "--node_rank");
    } else {
        ns->node_rank = -1;
        for (size_t i = 0; i < 2 && ns->node_rank < 0; i++) {
            const char *v = env_get(env, rank_vars[i]);
            if (!v || !v[0])
                continue;
            if ((r = env_int(rank_vars[i], v, 0, (1 << 20) - 1, 0, &ns->node_rank, err)) < 0)
                return r;
            snprintf(ns->from_node_rank, sizeof(ns->from_node_rank), "%s", rank_vars[i]);
        }
        if (ns->node_rank < 0 && ns->nnodes == 1) {
            /* torchrun's one-node habit (`--nnodes 1 --nproc_per_node N`): the only node
             * is node 0, as torchrun itself assumes */
            ns->node_rank = 0;
            snprintf(ns->from_node_rank, sizeof(ns->from_node_rank), "the only node");
        }
        if (ns->node_rank < 0)
            return dsl_seterr(err, DSL_EUSAGE, "no-ssh mode needs this node's rank: --node_rank "
                              "K (or PET_NODE_RANK, or JOB_COMPLETION_INDEX of an indexed Job)");
    }
    if (ns->node_rank >= ns->nnodes)
        return dsl_seterr(err, DSL_EUSAGE, "node rank %d (from %s) is not below the node count "
                          "%d (from %s)", ns->node_rank, ns->from_node_rank, ns->nnodes,
                          ns->from_nnodes);
    return 0;
}

/* Node 0's address and the master and control ports. */
static int resolve_master(struct dsl_nossh *ns, const struct dsl_launch_opts *o, char *const *env,
                          char *err)
{
    int r;
    /* the coordinator */
    const char *pet_addr = env_get(env, "PET_MASTER_ADDR");
    if (o->master_addr) {
        ns->master_addr = dsl_xstrdup(o->master_addr);
        snprintf(ns->from_master_addr, sizeof(ns->from_master_addr), "--master_addr");
    } else if (pet_addr && pet_addr[0]) {
        ns->master_addr = dsl_xstrdup(pet_addr);
        snprintf(ns->from_master_addr, sizeof(ns->from_master_addr), "PET_MASTER_ADDR");
    } else if (ns->node_rank > 0) {
        return dsl_seterr(err, DSL_EUSAGE, "node rank %d needs node 0's address: --master_addr "
                          "ADDR (or PET_MASTER_ADDR)", ns->node_rank);
    } else {
        snprintf(ns->from_master_addr, sizeof(ns->from_master_addr), "chosen by the probe");
    }
    /* every node dials it (and dialled a word like 'bad host!' until --join_timeout);
     * the coordinator listens on IPv4 only (common/net.c), so an IPv6 literal could
     * never be reached: name both now */
    if (ns->master_addr && strchr(ns->master_addr, ':'))
        return dsl_seterr(err, DSL_EUSAGE, "%s '%.80s': no-ssh mode reaches node 0 over IPv4 "
                          "only; give node 0's IPv4 address or a name that resolves to one",
                          ns->from_master_addr, ns->master_addr);
    if (ns->master_addr && !dsl_host_name_valid(ns->master_addr))
        return dsl_seterr(err, DSL_EUSAGE, "%s '%.80s' is not a host name or IPv4 address "
                          "(letters, digits, '.', '-' and '_')", ns->from_master_addr,
                          ns->master_addr);
    const char *pet_port = env_get(env, "PET_MASTER_PORT");
    if (o->master_port_given) {
        ns->master_port = o->master_port;
        snprintf(ns->from_master_port, sizeof(ns->from_master_port), "--master_port");
    } else if (pet_port && pet_port[0]) {
        if ((r = env_int("PET_MASTER_PORT", pet_port, 1, 65535, 0, &ns->master_port, err)) < 0)
            return r;
        snprintf(ns->from_master_port, sizeof(ns->from_master_port), "PET_MASTER_PORT");
    } else {
        ns->master_port = o->master_port;
        snprintf(ns->from_master_port, sizeof(ns->from_master_port), "default");
    }
    if (o->control_port > 0) {
        ns->control_port = o->control_port;
        snprintf(ns->from_control_port, sizeof(ns->from_control_port), "--control_port");
    } else {
        ns->control_port = ns->master_port < 65535 ? ns->master_port + 1 : ns->master_port - 1;
        snprintf(ns->from_control_port, sizeof(ns->from_control_port), "master port %s 1",
                 ns->master_port < 65535 ? "+" : "-");
    }
    if (ns->control_port == ns->master_port)
        return dsl_seterr(err, DSL_EUSAGE, "--control_port %d is the master port: the "
                          "coordinator's control channel needs a port of its own",
                          ns->control_port);
    return 0;
}

/* The job's shared secret: a file, or the variable; a job of one node needs none. */
static int resolve_secret(struct dsl_nossh *ns, const struct dsl_launch_opts *o, char *const *env,
                          char *err)
{
    int r;
    /* the shared secret: not needed by a job of one node */
    if (ns->nnodes > 1) {
        const char *sv = env_get(env, DSL_ENV_JOB_SECRET);
        if (o->job_secret_file) {
            if ((r = read_secret(ns, o->job_secret_file, err)) < 0)
                return r;
        } else if (sv && sv[0]) {
            ns->secret_len = strlen(sv);
            ns->secret = (unsigned char *)dsl_xstrdup(sv);
            snprintf(ns->from_secret, sizeof(ns->from_secret), DSL_ENV_JOB_SECRET);
        } else {
            return dsl_seterr(err, DSL_EUSAGE, "no-ssh mode needs the job's shared secret, the "
                              "same on every node: --job_secret_file FILE or "
                              DSL_ENV_JOB_SECRET " (e.g. from a Kubernetes Secret); nodes "
                              "are never accepted without it");
        }
        if (ns->secret_len < DSL_NOSSH_SECRET_MIN)
            return dsl_seterr(err, DSL_EUSAGE, "the job secret from %s is %zu bytes; it needs "
                              "at least %d (e.g. `openssl rand -hex 32`)", ns->from_secret,
                              ns->secret_len, DSL_NOSSH_SECRET_MIN);
    } else {
        snprintf(ns->from_secret, sizeof(ns->from_secret), "not needed (one node)");
    }
    return 0;
}

int dsl_nossh_resolve(struct dsl_nossh *ns, const struct dsl_launch_opts *o, char *const *env,
                      char *err)
{
    dsl_nossh_release(ns);
    const char *pet_nnodes = env_get(env, "PET_NNODES");
    int explicit = o->no_ssh || o->node_rank >= 0 || o->nnodes > 0;
    if (!explicit && !(pet_nnodes && pet_nnodes[0] && !o->hostfile &&
                       o->launcher == DSL_LAUNCHER_AUTO))
        return 0;
    ns->on = 1;
    if (o->hostfile)
        return dsl_seterr(err, DSL_EUSAGE, "no-ssh mode (--no_ssh, --node_rank, --nnodes) "
                          "takes its nodes from the nodes that dial in: leave out --hostfile");
    if (o->launcher != DSL_LAUNCHER_AUTO)
        return dsl_seterr(err, DSL_EUSAGE, "no-ssh mode starts no agents: leave out "
                          "--launcher (every node runs dslaunch itself)");
    if (o->include || o->exclude || o->num_nodes > 0)
        return dsl_seterr(err, DSL_EUSAGE, "--include, --exclude and --num_nodes choose among "
                          "a hostfile's hosts; in no-ssh mode every node that runs dslaunch "
                          "is in the job (use --nproc_per_node or --num_gpus per node)");
    int r;
    if ((r = resolve_nodes(ns, o, env, err)) < 0 || (r = resolve_master(ns, o, env, err)) < 0 ||
        (r = resolve_secret(ns, o, env, err)) < 0)
        return r;
    return 0;
}

int dsl_nossh_resolve_slots(struct dsl_nossh *ns, const struct dsl_launch_opts *o, char *err)
{
    /* a count asked for must fit this node, as on a launch without a hostfile: the
     * oversubscription rule (dsl_local_slots_for, docs/placement.md) */
    int want = o->nproc_per_node > 0 ? o->nproc_per_node : o->num_gpus;
    if (want > 0) {
        char flag[64];
        dsl_launch_opts_count_flag(o, want, flag, sizeof(flag));
        int r = dsl_local_slots_for(want, flag, o->oversubscribe, 0, &ns->slots, err);
        if (r < 0)
            return r;
        ns->slots = want;
        snprintf(ns->from_slots, sizeof(ns->from_slots), "%s",
                 o->num_processes > 0 ? "--num_processes"
                 : o->nproc_per_node > 0 ? "--nproc_per_node" : "--num_gpus");
        return 0;
    }
    int r = dsl_local_slots(&ns->slots, 0, err);
    if (r < 0)
        return r;
    snprintf(ns->from_slots, sizeof(ns->from_slots), "this node's devices (or CPUs)");
    return 0;
}
