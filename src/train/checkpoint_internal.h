/*
 * What the files of the checkpoint module share (checkpoint.h has the layout and the
 * public functions): the save (checkpoint.c), the directory (checkpoint_dir.c), the
 * checks of a file (checkpoint_check.c), loading (checkpoint_load.c) and the shards
 * (checkpoint_shards.c).
 */
#ifndef DSLAUNCH_CHECKPOINT_INTERNAL_H
#define DSLAUNCH_CHECKPOINT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "safetensors.h"

#define SHARD_FMT "zero_pp_rank_%d_mp_rank_00_optim_states.safetensors"
/* a stage 3 rank's files: DSL_CKPT_SHARD_FMT with the rank and "model" or "optim" */
#define DSL_CKPT_SHARD_FMT "zero_pp_rank_%d_mp_rank_00_%s_states.safetensors"
/* the one tensor of a stage 3 parameter shard (DeepSpeed's fp32_flat_groups, one group) */
#define DSL_CKPT_FLAT "fp32_flat"
#define EDITED "header does not match its checksum (dsl.sha256): it was edited or is corrupt"
/* Internal load flag: the commit validating a save (messages speak of the save). */
#define CKPT_SAVING (1u << 30)
/* Internal load flag: a stage 3 save's sets judged from the files' headers alone (the
 * commit: each rank checked its own files' data when it wrote them). */
#define CKPT_HEADERS (1u << 29)

/* ---- the directory (checkpoint_dir.c) ---- */
/** A tag no checkpoint can have: empty, a path, too long, or a save's own directory
 *  (<tag>.partial, <tag>.old). */
int dsl_ckpt_tag_bad(const char *tag);
/** The error for a bad tag; a reserved one says what it is. */
int dsl_ckpt_tag_error(const char *tag, const char *dir, char *err);
/** Remove what is at path, a directory of ours (a .partial or .old one): a link or file
 *  there is unlinked, not followed; a directory is emptied (a few levels deep) and
 *  removed. 0 when nothing is left. */
int dsl_ckpt_remove_tree(const char *path);
int dsl_ckpt_fsync_dir(const char *path);
/** "<dir>/<tag>.partial", malloc'ed. */
char *dsl_ckpt_partial_dir(const char *dir, const char *tag);
/** After a commit: the <tag>.partial directories and latest.tmp.* files that failed
 *  saves left in dir (best effort). */
void dsl_ckpt_remove_leftovers(const char *dir);

/* ---- the checks of one file (checkpoint_check.c) ---- */
/** A metadata number of f (DSL_ECHECKPOINT with err naming the file when missing or bad). */
int dsl_ckpt_meta_num(const struct dsl_st_file *f, const char *key, uint64_t *out, char *err);
/** The view that holds flat element i, or NULL. */
const struct dsl_ckpt_param *dsl_ckpt_view_of(const struct dsl_ckpt *c, size_t i);
/** "nan", "inf" or "-inf". */
const char *dsl_ckpt_nonfinite_word(float x);
/** Appends to err what to do about a value that is not finite; DSL_ECHECKPOINT. */
int dsl_ckpt_nonfinite_hint(unsigned flags, char *err);
/** The first element of v[0..n) that is not a finite number, or n; *count: how many. */
size_t dsl_ckpt_first_nonfinite(const float *v, size_t n, size_t *count);
/** "[3, 17]": element i of a tensor of that shape, row-major. */
void dsl_ckpt_index_text(const struct dsl_ckpt_param *v, size_t i, char *buf, size_t len);
/** Every parameter finite: the first that is not is named by tensor and index. */
int dsl_ckpt_params_finite(const struct dsl_ckpt *c, const char *file, unsigned flags,
                           char *err);
/** A file without any checksum: refused unless DSL_CKPT_ALLOW_UNVERIFIED; allowed, the
 *  first such file is noted in c->unverified. */
int dsl_ckpt_unverified(struct dsl_ckpt *c, const char *file, unsigned flags, char *err);
/** "off+len,off+len,...": ranges inside [0, numel), none empty, into *out (malloc'ed,
 *  n of them) and their total into *total; -1 when v is anything else. */
int dsl_ckpt_ranges_parse(const char *v, uint64_t numel, uint64_t (**out)[2], size_t *n,
                          uint64_t *total);
/** "name[d0,d1];name[d0]": the parameter views of a stage 3 checkpoint (dsl.views), laid
 *  end to end from offset 0, covering numel; names malloc'ed; -1 when v is anything else. */
int dsl_ckpt_views_parse(const char *v, size_t numel, struct dsl_ckpt_param **out, size_t *n);
/** The safetensors flags of a load. */
unsigned dsl_ckpt_st_flags(unsigned flags);
/** A file larger than any checkpoint file of a model of numel parameters (nstate fp32
 *  vectors and the header's limit) can be, refused from its size (numel 0: unknown). */
int dsl_ckpt_too_large(const char *file, size_t numel, size_t nstate, char *err);

/* ---- loading (checkpoint_load.c, checkpoint_shards.c) ---- */
void dsl_ckpt_init(struct dsl_ckpt *c);
/** Load the checkpoint in directory path (the tag's directory or a partial one); shards
 *  0: the model file alone. */
int dsl_ckpt_load_dir(struct dsl_ckpt *c, const char *path, const char *tag, int shards,
                      unsigned flags, size_t numel_hint, char *err);
/** The optimizer shards (params: stage 3's parameter shards) of path into c, after its model file (model_bad: the model
 *  file's header failed its checksum). */
int dsl_ckpt_load_shards(struct dsl_ckpt *c, const char *path, const char *tag, int model_bad,
                         int params, unsigned flags, size_t numel_hint, char *err);

/** The shard set of one kind (params: stage 3's parameter shards) in path judged from
 *  the files' headers alone: ranks, metadata, ranges; no data is read. */
int dsl_ckpt_shards_judge(struct dsl_ckpt *c, const char *path, const char *tag, int model_bad,
                          int params, unsigned flags, char *err);
/* Stage 3's parameter shards for a streamed consolidation: each file opened with its
 * header only, the set judged as dsl_ckpt_load_shards does, then every file's data
 * checked against its checksum through one buffer of bufsize bytes. */
struct dsl_ckpt_shards;
int dsl_ckpt_shards_open(struct dsl_ckpt *c, const char *path, const char *tag, int model_bad,
                         unsigned flags, size_t bufsize, struct dsl_ckpt_shards **out, char *err);
/** The len floats of view v from the shards' pieces into buf, checked finite. */
int dsl_ckpt_shards_read(const struct dsl_ckpt_shards *set, const struct dsl_ckpt *c,
                         const struct dsl_ckpt_param *v, size_t len, float *buf,
                         unsigned flags, char *err);
void dsl_ckpt_shards_free(struct dsl_ckpt_shards *set);
/** Rank 0's parameter shard of a stage 3 save in path, its header only: c's metadata,
 *  world size, size and views; the parameters allocated (uninitialised) when alloc. */
int dsl_ckpt_load_zero3_head(struct dsl_ckpt *c, const char *path, const char *tag, int *bad,
                             int alloc, unsigned flags, char *err);
/** A stage 3 save in path: no model file, and parameter shards beside the optimizer's. */
int dsl_ckpt_is_zero3(const char *path);
/** Which directory (dir/tag, or its .old copy) and tag a load of (dir, tag) reads, as
 *  dsl_ckpt_load() picks them; both malloc'ed. */
int dsl_ckpt_resolve(const char *dir, const char *tag, unsigned flags, char **path, char **t,
                     char *err);

#endif
