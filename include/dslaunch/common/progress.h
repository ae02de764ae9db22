/*
 * Progress heartbeats: how a rank tells its node agent that it is still advancing,
 * without a system call per report.
 *
 * The node agent creates one small file per rank (in /dev/shm when it can) and names
 * it in the rank's environment as DSLAUNCH_PROGRESS_FILE (envnames.h). Two kinds of
 * writer use it:
 *
 *  - dstrain and the comm map the file and keep one fixed binary record in it up to
 *    date with plain stores (struct dsl_progress_rec below): the optimizer step, and
 *    the sequence number and kind of the current collective with an in/out flag. A
 *    collective costs two 8-byte stores into a page shared with the agent. Around
 *    work that takes long between two collectives (writing or loading a checkpoint)
 *    the writer sets a phase; while a rank is in a phase, the agent counts the bytes
 *    it reads and writes (/proc/PID/io) as progress, and ranks waiting in a
 *    collective for a rank that works in a phase are not a hang (src/job/hang.c).
 *  - any other program writes text into the file, whenever it likes ("step 12\n", or
 *    anything that changes); docs/reliability.md shows the one line of Python.
 *
 * The agent reads every file once per progress tick (dsl_progress_read_file) and
 * treats any change of content as progress. It never needs the writer's cooperation
 * for consistency: it reads the file twice and keeps the copy only when both agree, so
 * it never believes a half-written record, and a text writer that truncates and
 * rewrites the file is seen as "no news" for one tick, not as a change to nothing.
 *
 * The record is in the host's byte order: writer and reader always share the host.
 */
#ifndef DSLAUNCH_COMMON_PROGRESS_H
#define DSLAUNCH_COMMON_PROGRESS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define DSL_PROGRESS_MAGIC 0x504c5344u /* "DSLP" in a little-endian file */
#define DSL_PROGRESS_VERSION 1u
/* The agent creates the file this large (zeros); readers look at this much of it. */
#define DSL_PROGRESS_FILE_SIZE 4096u

/* What a collective was (the comm's kinds, numbered for the record). */
enum dsl_progress_coll {
    DSL_PROGRESS_COLL_NONE = 0,
    DSL_PROGRESS_ALLREDUCE = 1,
    DSL_PROGRESS_REDUCE_SCATTER = 2,
    DSL_PROGRESS_ALLGATHER = 3,
    DSL_PROGRESS_BROADCAST = 4,
    DSL_PROGRESS_BARRIER = 5,
};

/* What a rank is doing outside collectives, in the record's phase. */
enum dsl_progress_phase {
    DSL_PROGRESS_PHASE_NONE = 0,
    DSL_PROGRESS_PHASE_SAVING = 1,  /* writing a checkpoint */
    DSL_PROGRESS_PHASE_LOADING = 2, /* loading a checkpoint (resume) */
};
#define DSL_PROGRESS_PHASE_MAX 2

/*
 * The binary record, at offset 0 of the file (64 bytes). The writer sets version and
 * then magic when it attaches; after that each field has one writer at a time and is
 * replaced by a single aligned 8-byte store.
 */
struct dsl_progress_rec {
    _Atomic uint32_t magic;   /* DSL_PROGRESS_MAGIC once a writer attached */
    _Atomic uint32_t version; /* DSL_PROGRESS_VERSION */
    _Atomic uint64_t step;    /* the program's step (dstrain: optimizer steps done) */
    _Atomic uint64_t coll;    /* (seq << 8) | (kind << 1) | inside; seq counts from 1 */
    _Atomic uint64_t beat;    /* other work that counts as progress (any change) */
    _Atomic uint64_t phase;   /* enum dsl_progress_phase (0 in records of older writers) */
    uint64_t reserved[3];
};

/* ---- writing (the ranks) ---- */

/**
 * Map the record of the file at path for writing (made at least one record long) and
 * mark it attached. The mapping lives until the process exits. 0, or a negative code
 * with err set.
 */
int dsl_progress_attach(const char *path, struct dsl_progress_rec **out, char *err);
/**
 * The record of this process: attached on the first call from DSLAUNCH_PROGRESS_FILE,
 * the same pointer afterwards; NULL when the variable is unset or the file cannot be
 * mapped (err, if not NULL, says why on that first call). Call it first from one thread
 * (the comm does, at open); later calls from any thread only read the cached pointer.
 */
struct dsl_progress_rec *dsl_progress_self(char *err);

static inline void dsl_progress_step(struct dsl_progress_rec *p, uint64_t step)
{
    if (p)
        atomic_store_explicit(&p->step, step, memory_order_relaxed);
}

/* Entering (inside = 1) or leaving (0) collective number seq of the given kind. */
static inline void dsl_progress_coll(struct dsl_progress_rec *p, uint64_t seq,
                                     enum dsl_progress_coll kind, int inside)
{
    if (p)
        atomic_store_explicit(&p->coll,
                              seq << 8 | (uint64_t)kind << 1 | (uint64_t)(inside != 0),
                              memory_order_relaxed);
}

static inline void dsl_progress_beat(struct dsl_progress_rec *p)
{
    if (p)
        atomic_store_explicit(&p->beat,
                              atomic_load_explicit(&p->beat, memory_order_relaxed) + 1,
                              memory_order_relaxed);
}

static inline void dsl_progress_set_phase(struct dsl_progress_rec *p,
                                          enum dsl_progress_phase phase)
{
    if (p)
        atomic_store_explicit(&p->phase, (uint64_t)phase, memory_order_relaxed);
}

/* ---- reading (the agent) ---- */

enum dsl_progress_form {
    DSL_PROGRESS_EMPTY = 0, /* nothing written yet (or a rewrite in flight) */
    DSL_PROGRESS_RECORD,    /* a binary record */
    DSL_PROGRESS_TEXT,      /* anything else a program wrote */
};

/* What a reader learned from one look at a progress file. */
struct dsl_progress_view {
    enum dsl_progress_form form;
    uint64_t hash;      /* of the content: a different hash is progress */
    int has_step;       /* record: always; text: when it reads "step N" or "N" */
    uint64_t step;
    uint64_t coll_seq;  /* record: last collective entered or left, 0 = none yet */
    int coll_kind;      /* enum dsl_progress_coll */
    int in_coll;        /* 1 while inside coll_seq */
    uint64_t beat;
    int phase;          /* record: enum dsl_progress_phase (an unknown one reads as 0) */
    char text[64];      /* text: its last non-empty line, cut to fit */
};

/** Decode len bytes of a progress file's start. Pure; any input is accepted. */
void dsl_progress_parse(const void *buf, size_t len, struct dsl_progress_view *v);
/**
 * Read the file at path (two agreeing reads of its first DSL_PROGRESS_FILE_SIZE bytes)
 * and decode it. 0, or -errno when it cannot be opened or read.
 */
int dsl_progress_read_file(const char *path, struct dsl_progress_view *v);
/** "allreduce", "reduce_scatter", ... ("collective" for an unknown kind). */
const char *dsl_progress_coll_name(int kind);
/** "saving a checkpoint", "loading a checkpoint"; NULL for none (or an unknown one). */
const char *dsl_progress_phase_name(int phase);

#endif
