/*
 * DeepSpeed-format hostfiles: one "host slots=N [max_slots=M] [# comment]" per line.
 *
 * Order is rank order and is never sorted. pdsh-style ranges ("node[01-04,7]") expand
 * in place. Errors name the file and line: "hostfile 'hosts.txt':7: bad slot count 'x4'".
 */
#ifndef DSLAUNCH_HOSTFILE_H
#define DSLAUNCH_HOSTFILE_H

#include <stddef.h>

struct dsl_host {
    char *name;    /* owned by the hostfile */
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
/** Read and parse path. On error hf is left empty and err holds the message. */
int dsl_hostfile_load(struct dsl_hostfile *hf, const char *path, char *err);
/** Parse text (len bytes, need not be NUL-terminated); path is used in messages only. */
int dsl_hostfile_parse(struct dsl_hostfile *hf, const char *path, const char *text, size_t len,
                       char *err);
/** Append one host (a synthesised "localhost slots=N" entry, say). Copies name. */
void dsl_hostfile_add(struct dsl_hostfile *hf, const char *name, int slots);
const struct dsl_host *dsl_hostfile_find(const struct dsl_hostfile *hf, const char *name);
void dsl_hostfile_release(struct dsl_hostfile *hf);

/**
 * Expand a pdsh-style host range "pre[01-04,7]post" into out (appends copies).
 * A name without brackets appends itself. Returns 0 or -EINVAL with err describing the
 * problem (malformed, reversed, too large).
 */
struct dsl_strvec;
int dsl_hostrange_expand(const char *spec, struct dsl_strvec *out, char *err);

#endif
