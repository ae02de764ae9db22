/*
 * dstrain checkpoints, in DeepSpeed's shape with safetensors files:
 *
 *   <dir>/latest                                           the tag, written last
 *   <dir>/<tag>/mp_rank_00_model_states.safetensors        full fp32 parameters,
 *                                                          one tensor per named view
 *   <dir>/<tag>/zero_pp_rank_<r>_mp_rank_00_optim_states.safetensors
 *                                                          rank r's optimizer shard
 *
 * ZeRO stage 3 saves without a gather, as DeepSpeed does: no model file; every rank r
 * writes its own parameters beside its optimizer shard,
 *
 *   <dir>/<tag>/zero_pp_rank_<r>_mp_rank_00_model_states.safetensors
 *
 * one fp32 vector "fp32_flat" of the pieces it holds (one per reduce bucket), where
 * they go in "dsl.shard_ranges" ("offset+length,..." in flat elements, the same in
 * its optimizer shard, whose vectors hold the same pieces), the parameter names and
 * shapes in "dsl.views" ("0.weight[64,784];0.bias[64];..."), in every file of the save.
 * The loader reassembles them as it does optimizer shards, so such a checkpoint
 * resumes at any stage and world size; `dstrain consolidate` streams the parameter
 * shards into one file one tensor at a time.
 *
 * The tag is "global_step<N>" by default. Optimizer shards always hold a contiguous
 * [offset, offset+len) slice of the FULL UNPADDED flat state vectors (whatever the
 * ZeRO stage and its in-memory padding), recorded in the metadata; the loader
 * reassembles the full vectors from all shards of a tag, checking that they cover
 * [0, numel) exactly once, so a run can resume at any world size and re-cut.
 *
 * Saving (collective; the trainer supplies the barriers):
 *   rank 0:    dsl_ckpt_prepare(dir, tag)        fresh <dir>/<tag>.partial/
 *   -- barrier --
 *   rank 0:    dsl_ckpt_write_model(...)
 *   every rank dsl_ckpt_write_optim(...)         its slice, fsynced
 *   -- barrier --
 *   rank 0:    dsl_ckpt_commit(dir, tag, world)  validates every file, renames the
 *                                                 partial dir to <dir>/<tag>, fsyncs,
 *                                                 then dsl_ckpt_write_latest()
 * A save that fails anywhere before the commit leaves only the .partial directory,
 * which rank 0 removes (dsl_ckpt_abort) once every rank knows the save failed; one that
 * was killed leaves it behind, and the next prepare of that tag and the next successful
 * commit remove it (whatever is in it, links not followed). The checkpoint `latest`
 * names is never touched. Metadata added by the writers: format=pt, dsl.kind, dsl.tag,
 * dsl.numel, dsl.world_size, dsl.rank, dsl.shard_offset, dsl.shard_len and the
 * checksums dsl.data_sha256 and dsl.sha256 (safetensors.h); the caller's own keys
 * (step, loss scale, seed, data position ...) are stored as given, the same in every
 * file of a save.
 *
 * Loading checks every file's checksums, and that the model file and every shard
 * agree on every key that describes the checkpoint rather than one file (all but
 * dsl.kind, dsl.rank, dsl.shard_offset, dsl.shard_len and the checksums): a mismatch
 * is an error naming the file and the key, and the file whose checksum failed when
 * one did. Checkpoints of older versions (crc32 only) load; c->sum says so. A file
 * without any checksum is refused unless the caller passes DSL_CKPT_ALLOW_UNVERIFIED
 * (the user's --allow-unverified-checkpoint). A parameter or optimizer state element
 * that is not a finite number (nan, inf) is refused always, naming the file, the tensor
 * and the element: checksums say the bytes are what was saved, not that a run can go
 * on from them. The commit validates a save with the same code, so a diverged run's
 * save fails and `latest` stays where it was.
 *
 * Tags ending in ".partial" or ".old" are the save's own directories and never a
 * checkpoint: refused by every function that takes a tag, and in `latest`.
 */
#ifndef DSLAUNCH_CHECKPOINT_H
#define DSLAUNCH_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "dslaunch/common/strvec.h"
#include "safetensors.h"

#define DSL_CKPT_MODEL_FILE "mp_rank_00_model_states.safetensors"
/* stage 3 with stage3_gather_16bit_weights_on_model_save: the 16-bit weights, one tensor
 * per view, beside the shards (no loader reads it; it is for other tools) */
#define DSL_CKPT_16BIT_FILE "model_16bit.safetensors"
#define DSL_CKPT_MAX_STATE 4

/** A named view of the flat parameter vector, e.g. {"layers.0.weight", 0, 2,
 *  {1024, 784}}. Views passed to the writer must tile [0, numel) in order. */
struct dsl_ckpt_param {
    const char *name;
    size_t offset;
    int ndim;
    uint64_t shape[4];
};

/** "global_step<N>" into buf. */
void dsl_ckpt_tag(char *buf, size_t n, uint64_t step);
/** The even split used for optimizer shards: [off, off+len) of numel for rank. */
void dsl_ckpt_slice(size_t numel, int rank, int world, size_t *off, size_t *len);

/** Rank 0, before any rank writes: create dir if needed and an empty
 *  <dir>/<tag>.partial (removing a stale one). */
int dsl_ckpt_prepare(const char *dir, const char *tag, char *err);
/** Rank 0, after a failed save that every rank has given up: remove <dir>/<tag>.partial
 *  (best effort; a killed save's is removed by the next prepare or commit). */
void dsl_ckpt_abort(const char *dir, const char *tag);

/*
 * Is dir one directory every rank sees? Rank 0 writes <dir>/.dstrain-shared-<hex> with
 * hex as its content (creating dir if needed; the name must be new), every rank reads
 * it back, rank 0 removes it. dsl_ckpt_probe_sees returns 1 when the file holds hex,
 * 0 when it is missing or holds something else, a negative code with err otherwise.
 */
int dsl_ckpt_probe_write(const char *dir, const char *hex, char *err);
int dsl_ckpt_probe_sees(const char *dir, const char *hex, char *err);
void dsl_ckpt_probe_remove(const char *dir, const char *hex);

/** Rank 0: the parameters, one tensor per view, into the partial directory; world is
 *  the number of optimizer shards that will be written. meta: the caller's
 *  "key=value" entries (may be NULL). */
int dsl_ckpt_write_model(const char *dir, const char *tag, int world,
                         const struct dsl_ckpt_param *views, size_t nviews,
                         const float *params, size_t numel, const struct dsl_strvec *meta,
                         char *err);

/**
 * Every rank: its optimizer shard. names[i] ("exp_avg", "exp_avg_sq", ...) and
 * slices[i] (len floats each, element j being flat element offset+j of state i).
 * nstate may be 0 (plain SGD) and len may be 0.
 */
int dsl_ckpt_write_optim(const char *dir, const char *tag, int rank, int world,
                         const char *const *names, const float *const *slices,
                         size_t nstate, size_t offset, size_t len, size_t numel,
                         const struct dsl_strvec *meta, char *err);

/**
 * ZeRO stage 3, every rank: its parameter shard and its optimizer shard (see the top),
 * nothing from any other rank. ranges[0..nranges): the flat [offset, offset+length)
 * pieces this rank holds, in the order of params and of every slices[i] (each the sum
 * of the lengths); views: the whole model's, as for dsl_ckpt_write_model (names without
 * '[' or ';').
 */
int dsl_ckpt_write_zero3(const char *dir, const char *tag, int rank, int world,
                         const struct dsl_ckpt_param *views, size_t nviews, size_t numel,
                         const size_t (*ranges)[2], size_t nranges, const float *params,
                         const char *const *names, const float *const *slices, size_t nstate,
                         const struct dsl_strvec *meta, char *err);

/** Rank 0, after every rank's files are durable: validate the partial directory
 *  (world shards, full coverage), move it to <dir>/<tag>, write latest, then remove
 *  the <other tag>.partial directories and latest.tmp.* files that failed saves left
 *  (a checkpoint_dir belongs to one job at a time). */
int dsl_ckpt_commit(const char *dir, const char *tag, int world, char *err);

/** Atomically make <dir>/latest hold tag (temp file with a random name created
 *  O_EXCL|O_NOFOLLOW, fsync, rename, fsync dir). */
int dsl_ckpt_write_latest(const char *dir, const char *tag, char *err);
/** 1 if <dir>/latest exists (some checkpoint was committed), 0 if not (the directory
 *  may be missing too), <0 with err when it cannot be told. */
int dsl_ckpt_has_latest(const char *dir, char *err);
/** Read <dir>/latest. *tag is malloc'ed, owned by the caller. */
int dsl_ckpt_read_latest(const char *dir, char **tag, char *err);

/** Load flag: load files that carry no checksum at all (another tool's, or ours with
 *  the checksums removed); c->unverified names the first. Without it they are refused. */
#define DSL_CKPT_ALLOW_UNVERIFIED 1u
/** Load flag (the readers of a finished checkpoint: consolidate, sample): dir may be a
 *  tag's directory itself (ck/global_step40, which has a model file and no 'latest')
 *  when no tag is given; it is read as that tag of its parent. */
#define DSL_CKPT_STEP_DIR 2u
/** Load flag for dsl_ckpt_load_params: of a stage 3 checkpoint only rank 0's parameter
 *  shard's header (the metadata, world size, views; params NULL), not every rank's
 *  pieces; other checkpoints load their model file as without it. */
#define DSL_CKPT_HEAD_ONLY 4u

/** A loaded checkpoint: everything in memory, owned by it until _release(). */
struct dsl_ckpt {
    char *tag;
    char *path;                  /* <dir>/<tag> */
    size_t numel;
    float *params;               /* numel floats, flat order */
    struct dsl_ckpt_param *views; /* as saved; names owned here */
    size_t nviews;
    struct dsl_strvec meta;      /* the model file's metadata ("key=value") */
    int saved_world;             /* world size at save time */
    size_t nstate;
    char *state_names[DSL_CKPT_MAX_STATE];
    float *state[DSL_CKPT_MAX_STATE]; /* numel floats each, reassembled */
    enum dsl_st_sum sum;         /* the weakest checksum of its files: DSL_ST_SUM_SHA256,
                                    or older files whose metadata nothing protects */
    char *unverified;            /* the first file without any checksum (loaded with
                                    DSL_CKPT_ALLOW_UNVERIFIED), or NULL */
    int zero3;                   /* saved by ZeRO stage 3: per-rank parameter shards */
    size_t (*ranges)[2];         /* dsl_ckpt_load_rank: the flat [offset, length) pieces
                                    params and every state hold, nranges of them, shard_len
                                    elements in all; else NULL */
    size_t nranges, shard_len;
    size_t stream_peak;          /* consolidate of a stage 3 checkpoint: the largest data
                                    buffer it held, in bytes (one tensor's) */
};

/**
 * Load <dir>/<tag> (tag NULL or "latest": the tag in <dir>/latest), validating every
 * file (see dsl_st_load(): regular files only, checksums), the metadata every file
 * must share (see the top), and the shard coverage: a missing, extra, duplicate or
 * overlapping shard, a shard of another tag or world size, a numel mismatch, a file
 * without checksums (unless flags has DSL_CKPT_ALLOW_UNVERIFIED) or a value that is not
 * finite is an error (DSL_ECHECKPOINT) naming the file. Every size in a file's header
 * is checked against the file's size before anything is allocated for its data. c is
 * initialised either way.
 */
int dsl_ckpt_load(struct dsl_ckpt *c, const char *dir, const char *tag, unsigned flags,
                  char *err);
/** dsl_ckpt_load for a model of numel parameters (the resume): a file larger than a
 *  checkpoint of that model can be (the safetensors header's limit and its fp32
 *  vectors) is refused from its size, before it is read. */
int dsl_ckpt_load_for(struct dsl_ckpt *c, const char *dir, const char *tag, unsigned flags,
                      size_t numel, char *err);
/** The same for the parameters alone (`dstrain sample`): the model file, with
 *  every check of its own, and no optimizer shard read (nstate 0), so the model file
 *  copied without its shards is enough. */
int dsl_ckpt_load_params(struct dsl_ckpt *c, const char *dir, const char *tag, unsigned flags,
                         char *err);
/**
 * A stage 3 checkpoint resumed at the world size it was saved at: rank's own two files
 * only (its parameter and optimizer shards, every check a load makes of them and of
 * their agreement), no other rank's. c->params and c->state hold the rank's pieces
 * (c->shard_len floats each, laid out as c->ranges says); views, meta and numel as a
 * whole load gives them. 1 (c released) when the checkpoint is not a stage 3 one or was
 * saved at another world size than world: load it whole instead.
 */
int dsl_ckpt_load_rank(struct dsl_ckpt *c, const char *dir, const char *tag, int rank,
                       int world, unsigned flags, size_t numel, char *err);
/** One safetensors file of fp32 parameters on its own: `dstrain consolidate`'s output
 *  (its metadata carries the model's shape as the checkpoint's did), with the same
 *  checks of its checksums and values; saved_world 1, no optimizer state, tag the
 *  file's name. c is initialised either way. */
int dsl_ckpt_load_file(struct dsl_ckpt *c, const char *file, unsigned flags, char *err);
void dsl_ckpt_release(struct dsl_ckpt *c);
/** What a loaded checkpoint's checks could not cover, as a warning for people into buf:
 *  files loaded without checksums (DSL_CKPT_ALLOW_UNVERIFIED), or an older dstrain's
 *  files whose metadata nothing protects. 1 when there is something to say, else 0. */
int dsl_ckpt_caveat(const struct dsl_ckpt *c, char *buf, size_t n);
/** Compare the saved views with the model's (names, offsets, shapes, numel). */
int dsl_ckpt_check_params(const struct dsl_ckpt *c, const struct dsl_ckpt_param *views,
                          size_t nviews, size_t numel, char *err);
/** The reassembled state vector called name, or NULL. */
const float *dsl_ckpt_state(const struct dsl_ckpt *c, const char *name);
/** A metadata value (pointer into c->meta) or NULL; _u64 parses it (DSL_ECHECKPOINT
 *  with err when missing or not a number). */
const char *dsl_ckpt_meta(const struct dsl_ckpt *c, const char *key);
int dsl_ckpt_meta_u64(const struct dsl_ckpt *c, const char *key, uint64_t *out, char *err);
/** A value of n (1..DSL_CKPT_META_SIZES) decimal sizes joined by ',' ("4,128,4,128,256",
 *  the "gpt" key) into out[0..n), filled only on success; DSL_ECHECKPOINT with err when
 *  missing, or anything but exactly that (no sign, space, suffix or leading zero; each
 *  fits size_t). */
#define DSL_CKPT_META_SIZES 8
int dsl_ckpt_meta_sizes(const struct dsl_ckpt *c, const char *key, size_t *out, size_t n,
                        char *err);

/** `dstrain consolidate`: one fp32 safetensors file with the parameters of the
 *  checkpoint (tag NULL: latest), one tensor per saved view, written atomically; the
 *  missing directories of out_path are made after the checkpoint has loaded. c: the
 *  checkpoint as loaded (flags as dsl_ckpt_load()), initialised either way, the
 *  caller's to release (its sum and unverified say what to warn about). */
int dsl_ckpt_consolidate(struct dsl_ckpt *c, const char *dir, const char *tag,
                         const char *out_path, unsigned flags, char *err);
/**
 * The streamed consolidation of a stage 3 checkpoint in directory path (a tag's, or a
 * save's partial one): its parameter shards opened without reading their data, their
 * checksums checked and the checkpoint's metadata compared across them, then one tensor
 * at a time read from the shards' pieces, checked finite, converted to dtype (F32,
 * F16 or BF16) and written to out_path (atomically; dsl_st_stream). At most one tensor's
 * floats (and its 16-bit copy) are in memory: c->stream_peak says how many bytes.
 * c: initialised here, its meta the shards', params NULL.
 */
int dsl_ckpt_consolidate_zero3(struct dsl_ckpt *c, const char *path, const char *tag,
                               const char *out_path, enum dsl_st_dtype dtype, unsigned flags,
                               char *err);

#endif
