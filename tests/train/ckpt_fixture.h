/*
 * What the checkpoint tests share (test_checkpoint.c, test_ckpt_corrupt.c,
 * test_ckpt_integrity.c, test_ckpt_zero3.c): a small model of four views with its
 * optimizer state, its save as the trainer does it, the paths of a tag's files, header
 * edits that keep the header's length, and the checks every test repeats.
 */
#ifndef DSLAUNCH_TESTS_CKPT_FIXTURE_H
#define DSLAUNCH_TESTS_CKPT_FIXTURE_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "train/checkpoint.h"
#include "train/safetensors.h"
#include "test.h"
#include "test_fs.h"

#define MODEL "mp_rank_00_model_states.safetensors"
#define SHARD(r) "zero_pp_rank_" #r "_mp_rank_00_optim_states.safetensors"

#define NUMEL 23
static const struct dsl_ckpt_param views[] = {
    {"layers.0.weight", 0, 2, {3, 4}},
    {"layers.0.bias", 12, 1, {3}},
    {"layers.1.weight", 15, 2, {2, 3}},
    {"layers.1.bias", 21, 1, {2}},
};
#define NVIEWS (sizeof(views) / sizeof(views[0]))

struct state {
    float p[NUMEL], m[NUMEL], v[NUMEL];
};

static inline void fill(struct state *s, float salt)
{
    for (int i = 0; i < NUMEL; i++) {
        s->p[i] = 0.5f * (float)i + salt;
        s->m[i] = (float)i + 100.0f + salt;
        s->v[i] = (float)(i * i) + salt;
    }
}

/* Rank `rank`'s optimizer shard: the state's elements [off, off + len), with meta
 * (NULL: none). */
static inline int write_optim(const char *dir, const char *tag, int rank, int world,
                              size_t off, size_t len, const struct state *s,
                              const struct dsl_strvec *meta, char *err)
{
    const char *names[2] = {"exp_avg", "exp_avg_sq"};
    const float *slices[2] = {s->m + off, s->v + off};
    return dsl_ckpt_write_optim(dir, tag, rank, world, names, slices, 2, off, len, NUMEL, meta,
                                err);
}

static inline int write_shard(const char *dir, const char *tag, int rank, int world,
                              size_t off, size_t len, const struct state *s, char *err)
{
    return write_optim(dir, tag, rank, world, off, len, s, NULL, err);
}

/* The start of a save of tag at world `world` without metadata: its directory and its
 * model file; the shards and the commit are the caller's. */
static inline int start_save(const char *dir, const char *tag, int world,
                             const struct state *s, char *err)
{
    int r = dsl_ckpt_prepare(dir, tag, err);
    return r < 0 ? r : dsl_ckpt_write_model(dir, tag, world, views, NVIEWS, s->p, NUMEL, NULL, err);
}

/* A complete save at world `world`, as the trainer does it (without the barriers). */
static inline int save(const char *dir, const char *tag, int world, const struct state *s,
                       uint64_t step, char *err)
{
    struct dsl_strvec meta;
    int r;
    dsl_strvec_init(&meta);
    char num[32];
    snprintf(num, sizeof(num), "%llu", (unsigned long long)step);
    dsl_env_set(&meta, "step", num);
    dsl_env_set(&meta, "lossscale", "scale=65536 iter=3 last_overflow=-1 hysteresis=2 skipped=0");
    dsl_env_set(&meta, "seed", "1234");
    if ((r = dsl_ckpt_prepare(dir, tag, err)) < 0)
        goto out;
    if ((r = dsl_ckpt_write_model(dir, tag, world, views, NVIEWS, s->p, NUMEL, &meta, err)) < 0)
        goto out;
    for (int rank = 0; rank < world; rank++) {
        size_t off, len;
        dsl_ckpt_slice(NUMEL, rank, world, &off, &len);
        if ((r = write_optim(dir, tag, rank, world, off, len, s, &meta, err)) < 0)
            goto out;
    }
    r = dsl_ckpt_commit(dir, tag, world, err);
out:
    dsl_strvec_release(&meta);
    return r;
}

/* A fresh scratch directory holding one good checkpoint `tag` of fill(s, salt) at step
 * `step`, which is also the tag `latest` names; test_tmpdir_remove() ends it. */
static inline char *saved_dir(struct state *s, float salt, const char *tag, int world,
                              uint64_t step)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN];
    fill(s, salt);
    ASSERT_OK(save(dir, tag, world, s, step, err));
    return dir;
}

static inline void assert_state(const struct dsl_ckpt *c, const struct state *s)
{
    ASSERT_EQ(c->numel, NUMEL);
    ASSERT(memcmp(c->params, s->p, sizeof(s->p)) == 0);
    ASSERT_EQ(c->nstate, 2);
    ASSERT(dsl_ckpt_state(c, "exp_avg") && dsl_ckpt_state(c, "exp_avg_sq"));
    ASSERT(memcmp(dsl_ckpt_state(c, "exp_avg"), s->m, sizeof(s->m)) == 0);
    ASSERT(memcmp(dsl_ckpt_state(c, "exp_avg_sq"), s->v, sizeof(s->v)) == 0);
}

/* Loading tag (NULL: latest) from dir with flags is refused as DSL_ECHECKPOINT; the
 * message, also printed, is left in err for the caller's checks. */
static inline void load_refused(const char *dir, const char *tag, unsigned flags, char *err)
{
    struct dsl_ckpt c;
    ASSERT_EQ(dsl_ckpt_load(&c, dir, tag, flags, err), DSL_ECHECKPOINT);
    fprintf(stderr, "  -> %s\n", err);
    dsl_ckpt_release(&c);
}

/* Loading tag (NULL: latest) from dir with flags gives back exactly s. */
static inline void assert_loads(const char *dir, const char *tag, unsigned flags,
                                const struct state *s)
{
    char err[DSL_ERR_LEN];
    struct dsl_ckpt c;
    ASSERT_OK(dsl_ckpt_load(&c, dir, tag, flags, err));
    assert_state(&c, s);
    dsl_ckpt_release(&c);
}

/* `latest` in dir names want. */
static inline void assert_latest(const char *dir, const char *want)
{
    char err[DSL_ERR_LEN], *tag = NULL;
    ASSERT_OK(dsl_ckpt_read_latest(dir, &tag, err));
    ASSERT_STR_EQ(tag, want);
    free(tag);
}

/* Two safetensors files that both load and hold the same bytes. */
static inline void assert_same_safetensors(const char *a, const char *b)
{
    char err[DSL_ERR_LEN];
    struct dsl_st_file fa, fb;
    ASSERT_OK(dsl_st_load(&fa, a, 0, err));
    ASSERT_OK(dsl_st_load(&fb, b, 0, err));
    ASSERT_EQ(fa.len, fb.len);
    ASSERT(memcmp(fa.buf, fb.buf, fa.len) == 0);
    dsl_st_release(&fa);
    dsl_st_release(&fb);
}

static inline char *file_in(const char *dir, const char *tag, const char *name)
{
    return dsl_xasprintf("%s/%s/%s", dir, tag, name);
}

/* Rank `rank`'s file of `kind` ("optim", or "model" at stage 3) in the tag. */
static inline char *rank_file(const char *dir, const char *tag, int rank, const char *kind)
{
    return dsl_xasprintf("%s/%s/zero_pp_rank_%d_mp_rank_00_%s_states.safetensors", dir, tag,
                         rank, kind);
}

static inline char *shard_file(const char *dir, const char *tag, int rank)
{
    return rank_file(dir, tag, rank, "optim");
}

/* The header of the safetensors file open at fd, NUL-terminated; its length in *hlen. */
static inline char *read_header(int fd, size_t *hlen)
{
    unsigned char len[8];
    ASSERT(fd >= 0);
    ASSERT(pread(fd, len, 8, 0) == 8);
    size_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | len[i];
    char *h = dsl_xmalloc(n + 1);
    ASSERT(pread(fd, h, n, 8) == (ssize_t)n);
    h[n] = '\0';
    *hlen = n;
    return h;
}

/* Replace the first `from` in the header of the file at path with `to` (same length). */
static inline void edit_header(const char *path, const char *from, const char *to)
{
    int fd = open(path, O_RDWR);
    size_t hlen;
    char *h = read_header(fd, &hlen);
    char *at = strstr(h, from);
    ASSERT(at != NULL);
    ASSERT_EQ(strlen(from), strlen(to));
    memcpy(at, to, strlen(to));
    ASSERT(pwrite(fd, h, hlen, 8) == (ssize_t)hlen);
    free(h);
    close(fd);
}

/* Make the file look like one of an older version: its checksum members become
 * spaces (still valid JSON, same header length). */
static inline void strip_sums(const char *path)
{
    static const char a[] = ",\"dsl.data_sha256\":\"", b[] = "\",\"dsl.sha256\":\"";
    int fd = open(path, O_RDWR);
    size_t hlen;
    char *h = read_header(fd, &hlen);
    char *at = strstr(h, a);
    ASSERT(at != NULL);
    size_t n = (sizeof(a) - 1) + 64 + (sizeof(b) - 1) + 64 + 1;
    ASSERT(strncmp(at + sizeof(a) - 1 + 64, b, sizeof(b) - 1) == 0);
    memset(at, ' ', n);
    ASSERT(pwrite(fd, h, hlen, 8) == (ssize_t)hlen);
    free(h);
    close(fd);
}

#endif
