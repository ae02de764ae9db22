/*
 * DeepSpeed-format hostfiles: one "[user@]host slots=N [max_slots=M] [# comment]" per line.
 *
 * Order is rank order and is never sorted. pdsh-style ranges ("node[01-04,7]") expand
 * in place. Errors name the file and line: "hostfile 'hosts.txt':7: bad slot count 'x4'".
 * The full format is in docs/hostfile.md.
 */
#ifndef DSLAUNCH_HOSTFILE_H
#define DSLAUNCH_HOSTFILE_H

#include <stddef.h>

/** Limits: more hosts (after range expansion) or slots per host is an error. */
#define DSL_HOSTFILE_MAX_HOSTS 65536
#define DSL_HOSTFILE_MAX_SLOTS 4096
/** The longest host name accepted (DNS limit). */
#define DSL_HOST_NAME_MAX 253
/** The longest login user name accepted ("user@host"; useradd's limit). */
#define DSL_USER_NAME_MAX 32

struct dsl_host {
    char *name;    /* owned by the hostfile; the host alone, what filters name */
    char *user;    /* login user of "user@host", owned; NULL when the line names none */
    int slots;     /* >= 1 */
    int max_slots; /* -1 when not given */
    int line;      /* 1-based source line (0 when synthesised) */
};

struct dsl_hostfile {
    char *path;             /* as given, or NULL when synthesised; owned */
    struct dsl_host *hosts; /* in file order; owned */
    size_t nr, alloc;
};

void dsl_hostfile_init(struct dsl_hostfile *hf);
/**
 * Read and parse path (at most 16 MiB). On error hf is left empty and err holds the
 * message: "hostfile 'x': No such file or directory" (returns -errno) or a parse error
 * (returns DSL_EHOSTFILE).
 */
int dsl_hostfile_load(struct dsl_hostfile *hf, const char *path, char *err);
/**
 * Parse text (len bytes, need not be NUL-terminated); path is used in messages only
 * (NULL reads as "-"). hf must be freshly initialised. Returns 0 or DSL_EHOSTFILE with
 * hf left empty and err = "hostfile 'PATH':LINE: what 'offending text'".
 */
int dsl_hostfile_parse(struct dsl_hostfile *hf, const char *path, const char *text, size_t len,
                       char *err);
/** Append one host (a synthesised "localhost slots=N" entry, say). Copies name. */
void dsl_hostfile_add(struct dsl_hostfile *hf, const char *name, int slots);
/**
 * The host called name, or NULL, names compared as DNS compares them (ASCII case
 * ignored, as the parser does for duplicates): 'Worker-0' finds the line 'worker-0',
 * whose spelling is the one to use in messages. The pointer is owned by hf.
 */
const struct dsl_host *dsl_hostfile_find(const struct dsl_hostfile *hf, const char *name);
/**
 * The index of the first of names[0..n) that repeats an earlier one, compared as
 * dsl_hostfile_find compares them (ASCII case ignored), or n when all differ. Linear
 * time: a Slurm node list expands to up to 65536 names.
 */
size_t dsl_host_names_first_repeat(char *const *names, size_t n);
void dsl_hostfile_release(struct dsl_hostfile *hf);

/**
 * 1 if name is a usable login user name (the "user" of "user@host"): a POSIX portable
 * login name, 1..DSL_USER_NAME_MAX characters of [A-Za-z0-9._-], not starting with '-'.
 * It reaches ssh's -l, pdsh's -w and Open MPI's ssh, so nothing else is let through.
 */
int dsl_user_name_valid(const char *name);

/**
 * 1 if name is a usable host name: 1..DSL_HOST_NAME_MAX characters of [A-Za-z0-9._-],
 * not starting with '-' (it would read as an ssh option). Names with ':', '@' or ','
 * could not be named in --include/--exclude, so they are refused too.
 */
int dsl_host_name_valid(const char *name);

/* pdsh-style host ranges ("node[01-04,7]"): dsl_hostrange_expand() */
#include "dslaunch/common/hostrange.h"

#endif
