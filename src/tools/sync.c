/*
 * dslaunch sync: files and directories to every host over SFTP.
 *
 * Theory of operation. The sources are scanned once, locally (sync_scan.c). Then
 * min(--fanout, hosts) worker threads take hosts from a shared counter; each opens one
 * blocking libssh session (sshsession.c: the launcher's config, host-key and
 * authentication rules) and one SFTP session on it, and walks the tree onto the host
 * (sync_walk.c; --checksum: sync_checksum.c; single file operations and the atomic
 * replace: sync_remote.c).
 *
 * Shared destinations: before each PATH a host creates ".NAME.dsl-sync-claim-RUN" beside
 * it with O_EXCL, RUN a random id of this run. The host that makes it copies; a host that
 * finds it (the nodes share the directory: NFS, a bind mount) waits for the owner, copies
 * nothing and says so. The claim stays until every other host has looked: with a thread
 * per host the owner waits for that; with fewer threads (--fanout below the hosts) it
 * cannot, as a host that has not started needs its thread, so the owner ends with its
 * session left open and its claims kept, and the main thread removes them once every
 * host is done (SYNC_KEEP_MAX sessions at most; past that a claim goes at once, a later
 * host finds the files up to date instead of being told, and the summary says so).
 *
 * A host stops at its first failure (the message names host and path); the others go
 * on. The main thread prints a progress line every second on stderr once a copy has
 * run for a second (bytes, files, rate, slowest host), then one summary line per host
 * and a total on stdout.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include "dslaunch/common/dynbuf.h"
#include "dslaunch/common/file.h"
#include "dslaunch/plan/hostfile.h"
#include "dslaunch/job/job.h"
#include "dslaunch/common/log.h"
#include "dslaunch/common/opt.h"
#include "dslaunch/common/parse.h"
#include "dslaunch/plan/placement.h"
#include "dslaunch/remote/sshsession.h"
#include "dslaunch/remote/transport.h"
#include "dslaunch/common/strvec.h"
#include "dslaunch/tools/sync.h"
#include "dslaunch/common/xalloc.h"
#include "sync_impl.h"
#include "toolargs.h"
#include "dslaunch/common/banned.h"

static void nap(void)
{
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* Claim file of a root: ".NAME.dsl-sync-claim-TOKEN" beside it, made with O_EXCL.
 * The host that makes it copies; a host of this run that finds it (another node sharing
 * the directory: NFS, a bind mount) waits for that host and copies nothing.
 * Returns the owning host when another host owns it, else NULL (*made: ours to remove). */
static char *claim_path(const struct sync_run *run, const char *remote)
{
    const char *sl = strrchr(remote, '/');
    if (sl)
        return dsl_xasprintf("%.*s.%s.dsl-sync-claim-%s", (int)(sl - remote + 1), remote,
                             sl + 1, run->token);
    return dsl_xasprintf(".%s.dsl-sync-claim-%s", remote, run->token);
}

static struct sync_host *claim(struct sync_run *run, struct sync_host *h, const char *cp,
                               int *made)
{
    size_t self = (size_t)(h - run->hosts);
    *made = 0;
    sftp_file f = sftp_open(h->sftp, cp, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (f) {
        char line[32];
        int n = snprintf(line, sizeof(line), "%zu\n", self);
        /* a short write leaves a claim the others cannot read: they copy too, and the
         * atomic replace keeps that safe, only not once */
        (void)sftp_write(f, line, (size_t)n);
        sftp_close(f);
        *made = 1;
        return NULL;
    }
    /* the owner creates, then writes: an empty claim is read again for up to 2 s */
    char line[32];
    ssize_t n = 0;
    for (int tries = 0; n == 0 && tries < 100; tries++) {
        if (tries)
            nap();
        f = sftp_open(h->sftp, cp, O_RDONLY, 0);
        if (!f)
            return NULL; /* no claim to be seen: copy as usual */
        n = sftp_read(f, line, sizeof(line) - 1);
        sftp_close(f);
    }
    if (n <= 0)
        return NULL;
    line[n] = '\0';
    char *end;
    unsigned long idx = strtoul(line, &end, 10);
    if (end == line || *end != '\n' || idx >= run->nhosts || idx == self)
        return NULL;
    return &run->hosts[idx];
}

/* The owner of root i keeps its claim until every other host has looked at it (or is
 * done), so a fast copy cannot hide the sharing from a host that connected later. Only
 * when every host has a thread: otherwise one may wait for a host that cannot start. */
static void wait_looked(struct sync_run *run, struct sync_host *h, size_t i)
{
    if (!run->all_at_once)
        return;
    for (size_t j = 0; j < run->nhosts; j++) {
        struct sync_host *o = &run->hosts[j];
        while (o != h && !atomic_load(&o->done) && atomic_load(&o->looked) <= i)
            nap();
    }
}

/* Done with the claim cp of root i: removed, or kept for later (see the theory). 0, or
 * -1 when it could not be removed. */
static int release_claim(struct sync_run *run, struct sync_host *h, size_t i, const char *cp)
{
    if (!run->all_at_once && h->kept.nr == 0) {
        if (atomic_fetch_add(&run->keeping, 1) < SYNC_KEEP_MAX) {
            dsl_strvec_push(&h->kept, cp);
            return 0;
        }
        atomic_store(&run->keep_full, 1);
    } else if (!run->all_at_once) {
        dsl_strvec_push(&h->kept, cp); /* its session stays open anyway */
        return 0;
    }
    wait_looked(run, h, i);
    return sftp_unlink(h->sftp, cp) < 0 ? -1 : 0;
}

static void host_close(struct sync_host *h)
{
    if (h->sftp)
        sftp_free(h->sftp);
    h->sftp = NULL;
    dsl_ssh_session_close(h->s);
    h->s = NULL;
}

/* Once every host is done: the claims kept open (release_claim) are removed. */
static void remove_kept(struct sync_run *run)
{
    for (size_t j = 0; j < run->nhosts; j++) {
        struct sync_host *h = &run->hosts[j];
        for (size_t k = 0; k < h->kept.nr && h->sftp; k++)
            if (sftp_unlink(h->sftp, h->kept.v[k]) < 0 && h->rc == 0)
                dsl_sync_host_fail(h, "remove", h->kept.v[k]);
        host_close(h);
    }
}

static void sync_host_run(struct sync_run *run, struct sync_host *h)
{
    const struct dsl_sync_opts *o = run->o;
    int r;
    h->t0 = dsl_now();
    /* "user@host" (a hostfile's login user): that user, over the ssh config's User */
    struct dsl_transport_opts tr = o->tr;
    const char *at = strchr(h->name, '@');
    char *user = at ? dsl_xstrndup(h->name, (size_t)(at - h->name)) : NULL;
    if (user)
        tr.ssh_user = user;
    r = dsl_ssh_session_open(&h->s, at ? at + 1 : h->name, &tr, DSL_SSH_BULK, NULL, h->err);
    free(user);
    if (r < 0) {
        h->rc = r;
        goto out;
    }
    if (!(h->sftp = sftp_new(h->s)) || sftp_init(h->sftp) < 0) {
        h->rc = DSL_EREMOTE;
        snprintf(h->err, sizeof(h->err), "%s: the SFTP subsystem was refused: %s", h->name,
                 ssh_get_error(h->s));
        goto out;
    }
    h->can_fsync = sftp_extension_supported(h->sftp, "fsync@openssh.com", "1");
    h->buf = dsl_xmalloc(SYNC_CHUNK);
    for (size_t i = 0; i < run->nroots && h->rc == 0; i++) {
        struct sync_root *root = &run->roots[i];
        if (dsl_sync_remote_mkdirs(h, root->remote) < 0)
            break;
        int made;
        char *cp = claim_path(run, root->remote);
        struct sync_host *owner = claim(run, h, cp, &made);
        atomic_store(&h->looked, i + 1);
        if (owner) {
            /* the owner made its claim in this run, so it is running: wait for it */
            while (!atomic_load(&owner->done) && atomic_load(&owner->finished) <= i)
                nap();
            if (owner->rc == 0) {
                h->shared_with = owner->name;
                h->shared++;
                atomic_store(&h->finished, i + 1);
                free(cp);
                continue;
            }
            /* the owner failed: copy from here after all */
        }
        int missing;
        sftp_attributes a = dsl_sync_remote_lstat(h, root->remote, &missing);
        if (!a && !missing) {
            dsl_sync_host_fail(h, "read", root->remote);
            if (made)
                release_claim(run, h, i, cp);
            free(cp);
            break;
        }
        r = dsl_sync_entry_sync(run, h, &root->e, root->remote, a);
        sftp_attributes_free(a);
        if (r == 0)
            r = dsl_sync_checksum_flush(run, h);
        if (r < 0 && h->rc == 0)
            h->rc = r; /* before finished: a waiting host must see the failure */
        if (made && release_claim(run, h, i, cp) < 0 && r == 0)
            r = dsl_sync_host_fail(h, "remove", cp);
        atomic_store(&h->finished, i + 1);
        free(cp);
        if (r < 0 && h->rc == 0)
            h->rc = r;
    }
out:
    if (!h->kept.nr || !h->s || !ssh_is_connected(h->s))
        host_close(h); /* else remove_kept closes it */
    free(h->buf);
    h->buf = NULL;
    h->t1 = dsl_now();
    atomic_store(&h->done, 1);
}

static void *sync_worker(void *arg)
{
    struct sync_run *run = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&run->next, 1);
        if (i >= run->nhosts)
            return NULL;
        sync_host_run(run, &run->hosts[i]);
    }
}

/* ---- progress and summary ---- */

static void human(double b, char *out, size_t len)
{
    static const char *const unit[] = {"B", "KB", "MB", "GB", "TB"};
    int u = 0;
    while (b >= 1000.0 && u < 4) {
        b /= 1000.0;
        u++;
    }
    snprintf(out, len, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

static void progress_line(struct sync_run *run, double t0, int tty)
{
    uint64_t bytes = 0, low = UINT64_MAX;
    unsigned files = 0, done = 0;
    const char *slow = NULL;
    for (size_t i = 0; i < run->nhosts; i++) {
        struct sync_host *h = &run->hosts[i];
        uint64_t b = atomic_load(&h->bytes);
        bytes += b;
        files += atomic_load(&h->copied);
        if (atomic_load(&h->done)) {
            done++;
        } else if (b < low) {
            low = b;
            slow = h->name;
        }
    }
    double dt = dsl_now() - t0;
    char hb[32], hr[32], hl[32];
    human((double)bytes, hb, sizeof(hb));
    human(dt > 0 ? (double)bytes / dt : 0, hr, sizeof(hr));
    human((double)(low == UINT64_MAX ? 0 : low), hl, sizeof(hl));
    fprintf(stderr, "%ssync: %s copied, %u files, %s/s, %u/%zu hosts done%s%s%s%s%s",
            tty ? "\r\033[K" : "", hb, files, hr, done, run->nhosts, slow ? ", slowest " : "",
            slow ? slow : "", slow ? " (" : "", slow ? hl : "", slow ? ")" : "");
    if (!tty)
        fputc('\n', stderr);
    fflush(stderr);
}

static void wait_hosts(struct sync_run *run, double t0)
{
    int tty = isatty(2);
    double last = t0;
    int shown = 0;
    for (;;) {
        size_t done = 0;
        for (size_t i = 0; i < run->nhosts; i++)
            done += atomic_load(&run->hosts[i].done) ? 1u : 0u;
        if (done == run->nhosts)
            break;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        double now = dsl_now();
        if (run->o->verbose >= 0 && now - t0 >= 1.0 && now - last >= (tty ? 1.0 : 5.0)) {
            progress_line(run, t0, tty);
            last = now;
            shown = 1;
        }
    }
    if (shown && tty)
        fputs("\r\033[K", stderr);
}

int dsl_sync_exit_code(int rc)
{
    if (rc == 0)
        return 0;
    if (rc == DSL_EUSAGE)
        return DSL_EXIT_USAGE;
    if (rc == DSL_ECONNECT || rc == DSL_ETIMEDOUT)
        return DSL_EXIT_UNREACHABLE;
    if (rc == DSL_EAUTH)
        return DSL_EXIT_AUTH;
    return 1;
}

int dsl_sync_run(const struct dsl_sync_opts *o, char *const *hosts, size_t nhosts)
{
    struct sync_run run;
    char err[DSL_ERR_LEN];
    int rc = 0;
    memset(&run, 0, sizeof(run));
    run.o = o;
    for (size_t i = 0; i < SYNC_HASH_LOCKS; i++)
        pthread_mutex_init(&run.hash_locks[i], NULL);
    run.roots = dsl_xcalloc(o->npaths ? o->npaths : 1, sizeof(*run.roots));
    for (size_t i = 0; i < o->npaths; i++) {
        run.nroots++;
        if ((rc = dsl_sync_root_make(&run.roots[i], o->paths[i], o->dest, err)) < 0) {
            dsl_error("sync: %s", err);
            rc = DSL_EUSAGE; /* nothing was copied anywhere */
            goto out;
        }
    }
    run.nhosts = nhosts;
    run.hosts = dsl_xcalloc(nhosts ? nhosts : 1, sizeof(*run.hosts));
    for (size_t i = 0; i < nhosts; i++) {
        run.hosts[i].name = hosts[i];
        run.hosts[i].o = o;
        dsl_strvec_init(&run.hosts[i].pending);
        dsl_strvec_init(&run.hosts[i].kept);
    }
    ssh_init();
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    {
        uint64_t tok = ((uint64_t)(unsigned)rand() << 32) ^ (uint64_t)(unsigned)rand() ^
                       ((uint64_t)getpid() << 16) ^ (uint64_t)time(NULL);
        snprintf(run.token, sizeof(run.token), "%016llx", (unsigned long long)tok);
    }
    size_t nthreads = (size_t)(o->fanout > 0 ? o->fanout : 1);
    if (nthreads > nhosts)
        nthreads = nhosts;
    run.all_at_once = nthreads == nhosts;
    pthread_t *tid = dsl_xcalloc(nthreads ? nthreads : 1, sizeof(*tid));
    size_t started = 0;
    double t0 = dsl_now();
    for (size_t i = 0; i < nthreads; i++) {
        if (pthread_create(&tid[i], NULL, sync_worker, &run) != 0)
            break;
        started++;
    }
    if (!started && nhosts)
        sync_worker(&run); /* no threads to be had: one host after another */
    wait_hosts(&run, t0);
    for (size_t i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    free(tid);
    remove_kept(&run);
    double dt = dsl_now() - t0;

    uint64_t total = 0;
    unsigned copied = 0, failed = 0, deleted = 0;
    for (size_t i = 0; i < nhosts; i++) {
        struct sync_host *h = &run.hosts[i];
        uint64_t b = atomic_load(&h->bytes);
        unsigned c = atomic_load(&h->copied);
        total += b;
        copied += c;
        deleted += h->deleted;
        if (h->rc < 0) {
            failed++;
            if (!rc)
                rc = h->rc;
            printf("%s: FAILED after %u copied: %s\n", h->name, c, h->err);
            continue;
        }
        if (h->shared) /* said even with -q: the user must know the nodes share it */
            printf("%s: shares the destination with %s, copied there once (%u path%s)\n",
                   h->name, h->shared_with, h->shared, h->shared == 1 ? "" : "s");
        if (o->verbose >= 0) {
            char hb[32];
            human((double)b, hb, sizeof(hb));
            printf("%s: %u copied (%s), %u up to date, %u deleted, %.2f s\n", h->name, c, hb,
                   h->same, h->deleted, h->t1 - h->t0);
        }
    }
    if (atomic_load(&run.keep_full)) /* said even with -q, as sharing is */
        printf("sync: more than %d hosts held claims while --fanout %d was below the %zu "
               "hosts: a host sharing a destination with one of them may have found it up "
               "to date instead of being told\n", SYNC_KEEP_MAX, o->fanout, nhosts);
    char ht[32], hr[32];
    human((double)total, ht, sizeof(ht));
    human(dt > 0 ? (double)total / dt : 0, hr, sizeof(hr));
    if (failed) {
        for (size_t i = 0; i < nhosts; i++)
            if (run.hosts[i].rc < 0)
                dsl_error("sync: %s", run.hosts[i].err);
        dsl_error("sync failed on %u of %zu hosts", failed, nhosts);
    } else if (o->verbose >= 0 && copied == 0 && deleted == 0) {
        printf("sync: nothing to copy, %zu hosts up to date (%.2f s)\n", nhosts, dt);
    } else if (o->verbose >= 0) {
        printf("sync: %zu hosts, %u entries copied (%s), %u deleted in %.2f s (%s/s)\n", nhosts,
               copied, ht, deleted, dt, hr);
    }
    fflush(stdout);
out:
    for (size_t i = 0; i < run.nroots; i++) {
        dsl_sync_entry_release(&run.roots[i].e);
        free(run.roots[i].remote);
    }
    free(run.roots);
    for (size_t i = 0; i < run.nhosts; i++) {
        dsl_strvec_release(&run.hosts[i].pending);
        dsl_strvec_release(&run.hosts[i].kept);
        free(run.hosts[i].pending_e);
    }
    free(run.hosts);
    for (size_t i = 0; i < SYNC_HASH_LOCKS; i++)
        pthread_mutex_destroy(&run.hash_locks[i]);
    return rc;
}

/* ---- command line ---- */

struct sync_args {
    char *hostfile, *include, *exclude, *dest, *ssh_config, *ssh_identity;
    int delete_extra, checksum, fanout, ssh_port, accept_new, verbose, help;
    double connect_timeout;
};

#define SOFF(f) offsetof(struct sync_args, f)
static const struct dsl_opt sync_opts[] = {
    {"hostfile", 'H', DSL_OPT_STRING, SOFF(hostfile), "FILE", "hosts ('host slots=N' lines)",
     "/job/hostfile", 0, 0, NULL, 0, NULL},
    {"include", 'i', DSL_OPT_STRING, SOFF(include), "SPEC", "only these hosts", NULL, 0, 0,
     NULL, 0, NULL},
    {"exclude", 'e', DSL_OPT_STRING, SOFF(exclude), "SPEC", "all but these hosts", NULL, 0, 0,
     NULL, 0, NULL},
    {"dest", 0, DSL_OPT_STRING, SOFF(dest), "DIR", "copy to DIR/<name of PATH> instead", NULL,
     0, 0, NULL, 0, NULL},
    {"delete", 0, DSL_OPT_FLAG, SOFF(delete_extra), NULL,
     "remove remote files gone at the source", NULL, 0, 0, NULL, 0, NULL},
    {"checksum", 0, DSL_OPT_FLAG, SOFF(checksum), NULL,
     "compare SHA-256 (remote sha256sum) instead of size+mtime", NULL, 0, 0, NULL, 0, NULL},
    {"fanout", 0, DSL_OPT_INT, SOFF(fanout), "N", "hosts copied to at once", "32", 1, 4096,
     NULL, 0, NULL},
    {"ssh_config", 0, DSL_OPT_STRING, SOFF(ssh_config), "FILE", "ssh client configuration",
     "~/.ssh/config", 0, 0, NULL, 0, NULL},
    {"ssh_port", 0, DSL_OPT_INT, SOFF(ssh_port), "PORT", "ssh port", "from ssh config, or 22",
     1, 65535, NULL, 0, NULL},
    {"ssh_identity", 0, DSL_OPT_STRING, SOFF(ssh_identity), "FILE", "ssh private key",
     "ssh-agent and default keys", 0, 0, NULL, 0, NULL},
    {"ssh_accept_new", 0, DSL_OPT_FLAG, SOFF(accept_new), NULL,
     "trust unknown host keys on first use", NULL, 0, 0, NULL, 0, NULL},
    {"connect_timeout", 0, DSL_OPT_SECONDS, SOFF(connect_timeout), "SECONDS",
     "give up on a host that does not answer", "10", 1, 3600, NULL, 0, NULL},
    {"verbose", 'v', DSL_OPT_SET, SOFF(verbose), NULL, "one line per copied or deleted entry",
     NULL, 0, 0, NULL, 1, NULL},
    {"quiet", 'q', DSL_OPT_SET, SOFF(verbose), NULL, "errors only",
     NULL, 0, 0, NULL, -1, NULL},
    {"help", 'h', DSL_OPT_FLAG, SOFF(help), NULL, "show this help", NULL, 0, 0, NULL, 0, NULL},
};
static const struct dsl_opt_parser sync_parser = {
    .prog = "dslaunch sync",
    .opts = sync_opts,
    .nopts = sizeof(sync_opts) / sizeof(sync_opts[0]),
};

static void usage(FILE *f)
{
    fputs("usage: dslaunch sync [options] PATH...\n"
          "Copy files and directories to the same absolute path on every host (SFTP).\n", f);
    dsl_opt_help(&sync_parser, f);
}

int dsl_sync_main(int argc, char **argv)
{
    struct dsl_sync_opts o;
    struct sync_args sa = {.fanout = 32, .connect_timeout = 10};
    struct dsl_hostfile hf;
    struct dsl_placement pl;
    struct dsl_strvec paths, hosts;
    const char *hostfile = NULL;
    char err[DSL_ERR_LEN];
    int code = DSL_EXIT_USAGE, r;
    memset(&o, 0, sizeof(o));
    dsl_hostfile_init(&hf);
    dsl_placement_init(&pl);
    dsl_strvec_init(&paths);
    dsl_strvec_init(&hosts);

    static const struct dsl_tool_usage tu = {"sync", usage, 0};
    if (!dsl_tool_args_parse(&sync_parser, &tu, &sa, &sa.help, argc, argv, &paths, &code))
        goto out;
    if ((sa.ssh_config && dsl_file_check_readable("--ssh-config", sa.ssh_config, err) < 0) ||
        (sa.ssh_identity &&
         dsl_file_check_readable("--ssh-identity", sa.ssh_identity, err) < 0)) {
        dsl_error("sync: %s", err);
        goto out;
    }
    o.dest = sa.dest;
    o.delete_extra = sa.delete_extra;
    o.checksum = sa.checksum;
    o.fanout = sa.fanout;
    o.verbose = sa.verbose;
    o.tr.ssh_config = sa.ssh_config;
    o.tr.ssh_identity = sa.ssh_identity;
    o.tr.ssh_port = sa.ssh_port;
    o.tr.accept_new = sa.accept_new;
    o.tr.connect_timeout = sa.connect_timeout;
    o.tr.keepalive = 30;
    hostfile = sa.hostfile;
    if (!paths.nr) {
        dsl_error("sync: nothing to copy: give one or more PATHs (see dslaunch sync --help)");
        goto out;
    }
    if (!hostfile && access("/job/hostfile", R_OK) == 0)
        hostfile = "/job/hostfile";
    if (!hostfile) {
        dsl_error("sync: no hosts: give --hostfile (or create /job/hostfile)");
        goto out;
    }
    if ((r = dsl_hostfile_load(&hf, hostfile, err)) < 0) {
        dsl_error("%s", err);
        goto out;
    }
    struct dsl_placement_opts po = {
        .include = sa.include, .exclude = sa.exclude, .num_nodes = -1, .num_gpus = -1};
    if ((r = dsl_placement_build(&pl, &hf, &po, err)) < 0) {
        dsl_error("%s", err);
        goto out;
    }
    for (int i = 0; i < pl.nr; i++) {
        if (pl.nodes[i].user)
            dsl_strvec_pushf(&hosts, "%s@%s", pl.nodes[i].user, pl.nodes[i].host);
        else
            dsl_strvec_push(&hosts, pl.nodes[i].host);
    }
    o.paths = paths.v;
    o.npaths = paths.nr;
    code = dsl_sync_exit_code(dsl_sync_run(&o, hosts.v, hosts.nr));
out:
    dsl_placement_release(&pl);
    dsl_hostfile_release(&hf);
    dsl_strvec_release(&paths);
    dsl_strvec_release(&hosts);
    free(sa.hostfile);
    free(sa.include);
    free(sa.exclude);
    free(sa.dest);
    free(sa.ssh_config);
    free(sa.ssh_identity);
    return code;
}
