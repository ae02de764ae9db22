/*
 * Checkpoints and safetensors: round trip, re-cut at other world sizes, the atomic
 * `latest`, consolidate, every corruption case with its message, and saves that fail
 * without touching the checkpoint `latest` names.
 */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/checkpoint.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "train/safetensors.h"
#include "dslaunch/common/xalloc.h"
#include "test.h"
#include "test_fs.h"

/* ---- helpers --------------------------------------------------------------------- */


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

static void fill(struct state *s, float salt)
{
    for (int i = 0; i < NUMEL; i++) {
        s->p[i] = 0.5f * (float)i + salt;
        s->m[i] = (float)i + 100.0f + salt;
        s->v[i] = (float)(i * i) + salt;
    }
}

/* A complete save at world `world`, as the trainer does it (without the barriers). */
static int save(const char *dir, const char *tag, int world, const struct state *s,
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
        const char *names[2] = {"exp_avg", "exp_avg_sq"};
        const float *slices[2] = {s->m + off, s->v + off};
        if ((r = dsl_ckpt_write_optim(dir, tag, rank, world, names, slices, 2, off, len, NUMEL,
                                      &meta, err)) < 0)
            goto out;
    }
    r = dsl_ckpt_commit(dir, tag, world, err);
out:
    dsl_strvec_release(&meta);
    return r;
}

static void assert_state(const struct dsl_ckpt *c, const struct state *s)
{
    ASSERT_EQ(c->numel, NUMEL);
    ASSERT(memcmp(c->params, s->p, sizeof(s->p)) == 0);
    ASSERT_EQ(c->nstate, 2);
    ASSERT(dsl_ckpt_state(c, "exp_avg") && dsl_ckpt_state(c, "exp_avg_sq"));
    ASSERT(memcmp(dsl_ckpt_state(c, "exp_avg"), s->m, sizeof(s->m)) == 0);
    ASSERT(memcmp(dsl_ckpt_state(c, "exp_avg_sq"), s->v, sizeof(s->v)) == 0);
}

static char *file_in(const char *dir, const char *tag, const char *name)
{
    return dsl_xasprintf("%s/%s/%s", dir, tag, name);
}

static char *shard_file(const char *dir, const char *tag, int rank)
{
    return dsl_xasprintf("%s/%s/zero_pp_rank_%d_mp_rank_00_optim_states.safetensors", dir, tag,
                         rank);
}

static long file_size(const char *path)
{
    struct stat st;
    ASSERT(stat(path, &st) == 0);
    return (long)st.st_size;
}

static void copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[4096];
    size_t n;
    ASSERT(a && b);
    while ((n = fread(buf, 1, sizeof(buf), a)) > 0)
        ASSERT(fwrite(buf, 1, n, b) == n);
    fclose(a);
    fclose(b);
}

static void flip_byte(const char *path, long off)
{
    int fd = open(path, O_RDWR);
    unsigned char ch;
    ASSERT(fd >= 0);
    ASSERT(pread(fd, &ch, 1, off) == 1);
    ch ^= 0x40;
    ASSERT(pwrite(fd, &ch, 1, off) == 1);
    close(fd);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    ASSERT(d != NULL);
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* ---- round trip ------------------------------------------------------------------ */

TEST(checkpoint_should_round_trip_parameters_state_and_metadata)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN], tag[64];
    struct state s;
    struct dsl_ckpt c;
    uint64_t step;
    fill(&s, 0.25f);
    dsl_ckpt_tag(tag, sizeof(tag), 7);
    ASSERT_STR_EQ(tag, "global_step7");
    ASSERT_OK(save(dir, tag, 3, &s, 7, err));
    ASSERT_OK(dsl_ckpt_load(&c, dir, NULL, 0, err));
    assert_state(&c, &s);
    ASSERT_STR_EQ(c.tag, "global_step7");
    ASSERT_EQ(c.saved_world, 3);
    ASSERT_OK(dsl_ckpt_meta_u64(&c, "step", &step, err));
    ASSERT_EQ(step, 7);
    ASSERT_CONTAINS(dsl_ckpt_meta(&c, "lossscale"), "scale=65536");
    ASSERT_STR_EQ(dsl_ckpt_meta(&c, "format"), "pt");
    ASSERT_ERR(dsl_ckpt_meta_u64(&c, "nope", &step, err));
    ASSERT_CONTAINS(err, "missing metadata 'nope'");
    ASSERT_OK(dsl_ckpt_check_params(&c, views, NVIEWS, NUMEL, err));
    struct dsl_ckpt_param other[NVIEWS];
    memcpy(other, views, sizeof(views));
    other[2].shape[0] = 3;
    other[2].shape[1] = 2;
    ASSERT_EQ(dsl_ckpt_check_params(&c, other, NVIEWS, NUMEL, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "parameter tensor 2 is 'layers.1.weight'");
    ASSERT_EQ(dsl_ckpt_check_params(&c, views, NVIEWS, NUMEL + 1, err), DSL_ECHECKPOINT);
    dsl_ckpt_release(&c);
    /* by explicit tag too; only the committed directory and latest remain */
    ASSERT_OK(dsl_ckpt_load(&c, dir, "global_step7", 0, err));
    dsl_ckpt_release(&c);
    ASSERT_EQ(count_entries(dir), 2);
    rm_rf(dir);
    free(dir);
}

TEST(checkpoint_should_recut_for_any_world_size)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN];
    struct state s, back;
    fill(&s, 1.0f);
    /* saved at world 4, re-saved from the reassembled vectors at 2, 1, 5 and 30 (more
     * ranks than elements: empty shards) */
    ASSERT_OK(save(dir, "w4", 4, &s, 1, err));
    int worlds[] = {2, 1, 5, 30};
    const char *prev = "w4";
    char tags[4][16];
    for (int i = 0; i < 4; i++) {
        struct dsl_ckpt c;
        ASSERT_OK(dsl_ckpt_load(&c, dir, prev, 0, err));
        assert_state(&c, &s);
        memcpy(back.p, c.params, sizeof(back.p));
        memcpy(back.m, dsl_ckpt_state(&c, "exp_avg"), sizeof(back.m));
        memcpy(back.v, dsl_ckpt_state(&c, "exp_avg_sq"), sizeof(back.v));
        dsl_ckpt_release(&c);
        snprintf(tags[i], sizeof(tags[i]), "w%d", worlds[i]);
        ASSERT_OK(save(dir, tags[i], worlds[i], &back, 1, err));
        prev = tags[i];
    }
    struct dsl_ckpt c;
    ASSERT_OK(dsl_ckpt_load(&c, dir, "latest", 0, err));
    ASSERT_STR_EQ(c.tag, "w30");
    ASSERT_EQ(c.saved_world, 30);
    assert_state(&c, &s);
    dsl_ckpt_release(&c);
    rm_rf(dir);
    free(dir);
}

TEST(checkpoint_slice_should_split_evenly_and_cover_everything)
{
    for (size_t n = 0; n < 40; n++) {
        for (int w = 1; w <= 9; w++) {
            size_t pos = 0, maxl = 0, minl = (size_t)-1;
            for (int r = 0; r < w; r++) {
                size_t off, len;
                dsl_ckpt_slice(n, r, w, &off, &len);
                ASSERT_EQ(off, pos);
                pos += len;
                maxl = len > maxl ? len : maxl;
                minl = len < minl ? len : minl;
            }
            ASSERT_EQ(pos, n);
            ASSERT(maxl - minl <= 1);
        }
    }
}

TEST(latest_should_be_replaced_atomically_and_read_back)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN], *tag;
    ASSERT_OK(dsl_ckpt_write_latest(dir, "global_step10", err));
    ASSERT_OK(dsl_ckpt_read_latest(dir, &tag, err));
    ASSERT_STR_EQ(tag, "global_step10");
    free(tag);
    ASSERT_OK(dsl_ckpt_write_latest(dir, "global_step20", err));
    ASSERT_OK(dsl_ckpt_read_latest(dir, &tag, err));
    ASSERT_STR_EQ(tag, "global_step20");
    free(tag);
    char *latest = dsl_xasprintf("%s/latest", dir);
    ASSERT_EQ(file_size(latest), 13); /* DeepSpeed writes the bare tag */
    ASSERT_EQ(count_entries(dir), 1); /* no temp file left behind */
    ASSERT_EQ(dsl_ckpt_write_latest(dir, "../x", err), DSL_ECHECKPOINT);
    FILE *f = fopen(latest, "w");
    fputs("../etc\n", f);
    fclose(f);
    ASSERT_EQ(dsl_ckpt_read_latest(dir, &tag, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "does not hold a valid tag");
    free(latest);
    rm_rf(dir);
    ASSERT_EQ(dsl_ckpt_read_latest(dir, &tag, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "no checkpoint in");
    free(dir);
}

TEST(consolidate_should_write_the_same_bytes_whatever_the_world_size)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN];
    struct state s;
    fill(&s, 2.0f);
    ASSERT_OK(save(dir, "a", 1, &s, 3, err));
    ASSERT_OK(save(dir, "b", 3, &s, 3, err));
    char *o1 = dsl_xasprintf("%s/model1.safetensors", dir);
    char *o3 = dsl_xasprintf("%s/model3.safetensors", dir);
    struct dsl_ckpt c;
    ASSERT_OK(dsl_ckpt_consolidate(&c, dir, "a", o1, 0, err));
    ASSERT_EQ(dsl_ckpt_caveat(&c, err, DSL_ERR_LEN), 0);
    dsl_ckpt_release(&c);
    ASSERT_OK(dsl_ckpt_consolidate(&c, dir, NULL, o3, 0, err)); /* latest = b */
    dsl_ckpt_release(&c);
    struct dsl_st_file f1, f3;
    ASSERT_OK(dsl_st_load(&f1, o1, 0, err));
    ASSERT_OK(dsl_st_load(&f3, o3, 0, err));
    ASSERT_EQ(f1.len, f3.len);
    ASSERT(memcmp(f1.buf, f3.buf, f1.len) == 0);
    ASSERT_EQ(f1.n, NVIEWS);
    for (size_t i = 0; i < NVIEWS; i++) {
        const struct dsl_st_tensor *t = dsl_st_find(&f1, views[i].name);
        ASSERT(t != NULL);
        ASSERT_EQ(t->dtype, DSL_ST_F32);
        ASSERT_EQ(t->ndim, views[i].ndim);
        ASSERT_EQ(t->shape[0], views[i].shape[0]);
        ASSERT(memcmp(t->data, s.p + views[i].offset, (size_t)t->nbytes) == 0);
    }
    ASSERT_STR_EQ(dsl_env_get(&f1.meta, "format"), "pt");
    dsl_st_release(&f1);
    dsl_st_release(&f3);
    free(o1);
    free(o3);
    rm_rf(dir);
    free(dir);
}

/* ---- corruption ------------------------------------------------------------------ */

enum corruption {
    TRUNCATE_DATA,
    TRUNCATE_HEADER,
    TRUNCATE_TINY,
    FLIP_DATA,
    FLIP_SHARD_DATA,
    BAD_HEADER,
    MISSING_SHARD,
    EXTRA_SHARD,
    FOREIGN_SHARD,
    MISSING_MODEL,
    LATEST_DANGLING,
};

static const struct {
    enum corruption what;
    const char *err;
} corruptions[] = {
    {TRUNCATE_DATA, "(truncated file?)"},
    {TRUNCATE_HEADER, "is truncated: header of"},
    {TRUNCATE_TINY, "is truncated: 5 bytes, no header length"},
    {FLIP_DATA, "the tensor data does not match its checksum"},
    {FLIP_SHARD_DATA, "zero_pp_rank_1_mp_rank_00_optim_states.safetensors': the tensor data "
                      "does not match its checksum"},
    {BAD_HEADER, "bad header at byte"},
    {MISSING_SHARD, "missing shard file 'zero_pp_rank_1_mp_rank_00_optim_states.safetensors' "
                    "(rank 1 of 3)"},
    {EXTRA_SHARD, "unexpected shard file"},
    {FOREIGN_SHARD, "zero_pp_rank_1_mp_rank_00_optim_states.safetensors': metadata 'step' is "
                    "'1' but the model file"},
    {MISSING_MODEL, "mp_rank_00_model_states.safetensors': No such file"},
    {LATEST_DANGLING, "no checkpoint 'global_step9' in"},
};

TEST(corrupt_checkpoints_should_fail_with_an_error_naming_the_file)
{
    for (size_t i = 0; i < sizeof(corruptions) / sizeof(corruptions[0]); i++) {
        char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN] = "";
        struct state s;
        struct dsl_ckpt c;
        fill(&s, 0.0f);
        ASSERT_OK(save(dir, "global_step1", 3, &s, 1, err));
        ASSERT_OK(save(dir, "global_step2", 3, &s, 2, err));
        char *model = file_in(dir, "global_step2", DSL_CKPT_MODEL_FILE);
        char *sh1 = shard_file(dir, "global_step2", 1);
        long size = file_size(model);
        switch (corruptions[i].what) {
        case TRUNCATE_DATA:
            ASSERT(truncate(model, size - 4) == 0);
            break;
        case TRUNCATE_HEADER:
            ASSERT(truncate(model, 40) == 0);
            break;
        case TRUNCATE_TINY:
            ASSERT(truncate(model, 5) == 0);
            break;
        case FLIP_DATA:
            flip_byte(model, size - 10);
            break;
        case FLIP_SHARD_DATA:
            flip_byte(sh1, file_size(sh1) - 3);
            break;
        case BAD_HEADER:
            flip_byte(model, 9); /* the '"' after '{' */
            break;
        case MISSING_SHARD:
            ASSERT(unlink(sh1) == 0);
            break;
        case EXTRA_SHARD: {
            char *sh3 = shard_file(dir, "global_step2", 3);
            copy_file(sh1, sh3);
            free(sh3);
            break;
        }
        case FOREIGN_SHARD: {
            char *old = shard_file(dir, "global_step1", 1);
            copy_file(old, sh1);
            free(old);
            break;
        }
        case MISSING_MODEL:
            ASSERT(unlink(model) == 0);
            break;
        case LATEST_DANGLING:
            ASSERT_OK(dsl_ckpt_write_latest(dir, "global_step9", err));
            break;
        }
        int r = dsl_ckpt_load(&c, dir, NULL, 0, err);
        fprintf(stderr, "  %d -> %s\n", (int)corruptions[i].what, err);
        ASSERT_EQ(r, DSL_ECHECKPOINT);
        ASSERT_CONTAINS(err, corruptions[i].err);
        ASSERT_CONTAINS(err, dir); /* names the file */
        dsl_ckpt_release(&c);
        /* the older checkpoint is untouched */
        ASSERT_OK(dsl_ckpt_load(&c, dir, "global_step1", 0, err));
        assert_state(&c, &s);
        dsl_ckpt_release(&c);
        free(model);
        free(sh1);
        rm_rf(dir);
        free(dir);
    }
}

/* Replace the first `from` in the header of the file at path with `to` (same length). */
static void edit_header(const char *path, const char *from, const char *to)
{
    int fd = open(path, O_RDWR);
    unsigned char len[8];
    ASSERT(fd >= 0);
    ASSERT(pread(fd, len, 8, 0) == 8);
    size_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | len[i];
    char *h = dsl_xmalloc(hlen + 1);
    ASSERT(pread(fd, h, hlen, 8) == (ssize_t)hlen);
    h[hlen] = '\0';
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
static void strip_sums(const char *path)
{
    static const char a[] = ",\"dsl.data_sha256\":\"", b[] = "\",\"dsl.sha256\":\"";
    int fd = open(path, O_RDWR);
    unsigned char len[8];
    ASSERT(fd >= 0);
    ASSERT(pread(fd, len, 8, 0) == 8);
    size_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | len[i];
    char *h = dsl_xmalloc(hlen + 1);
    ASSERT(pread(fd, h, hlen, 8) == (ssize_t)hlen);
    h[hlen] = '\0';
    char *at = strstr(h, a);
    ASSERT(at != NULL);
    size_t n = (sizeof(a) - 1) + 64 + (sizeof(b) - 1) + 64 + 1;
    ASSERT(strncmp(at + sizeof(a) - 1 + 64, b, sizeof(b) - 1) == 0);
    memset(at, ' ', n);
    ASSERT(pwrite(fd, h, hlen, 8) == (ssize_t)hlen);
    free(h);
    close(fd);
}

#define MODEL "mp_rank_00_model_states.safetensors"
#define SHARD(r) "zero_pp_rank_" #r "_mp_rank_00_optim_states.safetensors"
#define LS "\"lossscale\":\"scale=6553"

static const struct {
    const char *file; /* MODEL, a SHARD, or NULL: every file */
    const char *from, *to;
    const char *err[3];
} edits[] = {
    /* one file edited: named, with the field, as the one whose checksum failed */
    {SHARD(1), "\"step\":\"2\"", "\"step\":\"3\"",
     {SHARD(1) "': metadata 'step' is '3' but the model file", "says '2'",
      "its header does not match its checksum (dsl.sha256)"}},
    {MODEL, "\"step\":\"2\"", "\"step\":\"9\"",
     {MODEL "': metadata 'step' is '9' but '" SHARD(0) "' says '2'",
      "the model file's header does not match its checksum", "edited"}},
    {SHARD(0), "\"seed\":\"1234\"", "\"seed\":\"1235\"",
     {SHARD(0) "': metadata 'seed' is '1235' but the model file", "says '1234'",
      "its header does not match"}},
    {MODEL, "\"seed\":\"1234\"", "\"seed\":\"4321\"",
     {MODEL "': metadata 'seed' is '4321' but '" SHARD(0) "' says '1234'",
      "the model file's header", "edited"}},
    {SHARD(2), LS "6 ", LS "7 ",
     {SHARD(2) "': metadata 'lossscale' is 'scale=65537 iter=3", "says 'scale=65536",
      "its header does not match"}},
    {MODEL, LS "6 ", LS "0 ",
     {MODEL "': metadata 'lossscale' is 'scale=65530", "says 'scale=65536",
      "the model file's header"}},
    {SHARD(1), "\"dsl.world_size\":\"3\"", "\"dsl.world_size\":\"4\"",
     {SHARD(1) "': metadata 'dsl.world_size' is '4' but the model file", "says '3'",
      "its header does not match"}},
    {MODEL, "\"dsl.world_size\":\"3\"", "\"dsl.world_size\":\"2\"",
     {MODEL "': metadata 'dsl.world_size' is '2'", "says '3'", "the model file's header"}},
    /* the same edit in every file: no file disagrees, the checksum still catches it */
    {NULL, "\"step\":\"2\"", "\"step\":\"5\"",
     {"': its header does not match its checksum (dsl.sha256): it was edited or is corrupt",
      "global_step2/", "global_step2/"}},
    /* a tensor's shape is no shared field: the checksum catches it */
    {MODEL, "\"shape\":[3,4]", "\"shape\":[4,3]",
     {MODEL "': its header does not match its checksum", "global_step2/", "edited"}},
};

TEST(edited_checkpoint_headers_should_fail_naming_the_file_and_the_field)
{
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN] = "";
        struct state s;
        struct dsl_ckpt c;
        fill(&s, 0.0f);
        ASSERT_OK(save(dir, "global_step2", 3, &s, 2, err));
        static const char *const all[] = {MODEL, SHARD(0), SHARD(1), SHARD(2)};
        for (size_t k = 0; k < 4; k++) {
            if (edits[i].file && strcmp(edits[i].file, all[k]) != 0)
                continue;
            char *p = file_in(dir, "global_step2", all[k]);
            edit_header(p, edits[i].from, edits[i].to);
            free(p);
        }
        ASSERT_EQ(dsl_ckpt_load(&c, dir, NULL, 0, err), DSL_ECHECKPOINT);
        fprintf(stderr, "  %zu -> %s\n", i, err);
        for (int k = 0; k < 3; k++)
            ASSERT_CONTAINS(err, edits[i].err[k]);
        ASSERT_CONTAINS(err, dir);
        dsl_ckpt_release(&c);
        rm_rf(dir);
        free(dir);
    }
}

TEST(checkpoints_of_older_versions_should_load_and_still_be_cross_checked)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN] = "";
    struct state s;
    struct dsl_ckpt c;
    fill(&s, 1.5f);
    ASSERT_OK(save(dir, "global_step2", 2, &s, 2, err));
    ASSERT_OK(dsl_ckpt_load(&c, dir, NULL, 0, err));
    ASSERT_EQ(c.sum, DSL_ST_SUM_SHA256);
    dsl_ckpt_release(&c);
    /* a checksum removed from one file only: refused */
    char *model = file_in(dir, "global_step2", MODEL), *sh0 = shard_file(dir, "global_step2", 0);
    char *sh1 = shard_file(dir, "global_step2", 1);
    strip_sums(sh1);
    ASSERT_EQ(dsl_ckpt_load(&c, dir, NULL, 0, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, SHARD(1) "' lacks a SHA-256 checksum but the model file");
    dsl_ckpt_release(&c);
    /* none in any file: refused, naming the file and the option, unless allowed; then
     * it loads and says which file went unchecked */
    strip_sums(model);
    strip_sums(sh0);
    ASSERT_EQ(dsl_ckpt_load(&c, dir, NULL, 0, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "global_step2/" MODEL "' has no checksums");
    ASSERT_CONTAINS(err, "pass --allow-unverified-checkpoint to load it anyway");
    dsl_ckpt_release(&c);
    ASSERT_EQ(dsl_ckpt_load_params(&c, dir, NULL, 0, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "has no checksums");
    dsl_ckpt_release(&c);
    ASSERT_OK(dsl_ckpt_load(&c, dir, NULL, DSL_CKPT_ALLOW_UNVERIFIED, err));
    ASSERT_EQ(c.sum, DSL_ST_SUM_NONE);
    ASSERT(c.unverified && strstr(c.unverified, MODEL));
    char why[DSL_ERR_LEN];
    ASSERT_EQ(dsl_ckpt_caveat(&c, why, sizeof(why)), 1);
    ASSERT_CONTAINS(why, "loaded unverified");
    assert_state(&c, &s);
    dsl_ckpt_release(&c);
    /* the files must still agree */
    edit_header(sh0, "\"step\":\"2\"", "\"step\":\"7\"");
    ASSERT_EQ(dsl_ckpt_load(&c, dir, NULL, DSL_CKPT_ALLOW_UNVERIFIED, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, SHARD(0) "': metadata 'step' is '7' but the model file");
    ASSERT(strstr(err, "checksum") == NULL);
    dsl_ckpt_release(&c);
    free(model);
    free(sh0);
    free(sh1);
    rm_rf(dir);
    free(dir);
}

TEST(a_fifo_in_place_of_a_shard_or_latest_should_fail_the_load_at_once)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN] = "";
    struct state s;
    struct dsl_ckpt c;
    fill(&s, 0.0f);
    ASSERT_OK(save(dir, "global_step2", 2, &s, 2, err));
    char *sh1 = shard_file(dir, "global_step2", 1);
    ASSERT(unlink(sh1) == 0 && mkfifo(sh1, 0644) == 0);
    alarm(60); /* a hang guard: a blocking read of a FIFO without a writer never returns */
    ASSERT_EQ(dsl_ckpt_load(&c, dir, NULL, 0, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, SHARD(1) "' is not a regular file (a FIFO)");
    dsl_ckpt_release(&c);
    char *latest = dsl_xasprintf("%s/latest", dir);
    ASSERT(unlink(latest) == 0 && mkfifo(latest, 0644) == 0);
    ASSERT_EQ(dsl_ckpt_load(&c, dir, NULL, 0, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "latest' is not a regular file (a FIFO)");
    alarm(0);
    dsl_ckpt_release(&c);
    free(latest);
    free(sh1);
    rm_rf(dir);
    free(dir);
}

TEST(links_at_the_old_predictable_temp_names_should_not_be_followed)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN] = "";
    char *victim = dsl_xasprintf("%s/victim", dir);
    struct state s;
    struct dsl_ckpt c;
    fill(&s, 0.0f);
    FILE *v = fopen(victim, "w");
    ASSERT(v && fputs("precious", v) >= 0 && fclose(v) == 0);
    /* what another user could plant when temp names were PATH.tmp.PID */
    ASSERT_OK(dsl_ckpt_prepare(dir, "t", err));
    char *m = dsl_xasprintf("%s/t.partial/" MODEL ".tmp.%ld", dir, (long)getpid());
    char *l = dsl_xasprintf("%s/latest.tmp.%ld", dir, (long)getpid());
    ASSERT(symlink(victim, m) == 0 && symlink(victim, l) == 0);
    ASSERT_OK(dsl_ckpt_write_model(dir, "t", 1, views, NVIEWS, s.p, NUMEL, NULL, err));
    const char *names[2] = {"exp_avg", "exp_avg_sq"};
    const float *slices[2] = {s.m, s.v};
    ASSERT_OK(dsl_ckpt_write_optim(dir, "t", 0, 1, names, slices, 2, 0, NUMEL, NUMEL, NULL,
                                   err));
    ASSERT_OK(dsl_ckpt_commit(dir, "t", 1, err));
    ASSERT_OK(dsl_ckpt_load(&c, dir, NULL, 0, err));
    assert_state(&c, &s);
    dsl_ckpt_release(&c);
    struct stat st;
    ASSERT(stat(victim, &st) == 0 && st.st_size == 8);
    ASSERT(lstat(l, &st) < 0); /* the planted link was a leftover: removed, not followed */
    free(m);
    free(l);
    free(victim);
    rm_rf(dir);
    free(dir);
}

TEST(a_successful_save_should_remove_what_failed_saves_left)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN] = "";
    struct state s;
    fill(&s, 0.0f);
    ASSERT_OK(save(dir, "global_step1", 1, &s, 1, err));
    /* a killed save, a full disk, a kill inside the latest rewrite */
    char *p3 = dsl_xasprintf("%s/global_step3.partial", dir);
    char *p4 = dsl_xasprintf("%s/global_step4.partial", dir);
    char *tmp = dsl_xasprintf("%s/latest.tmp.0123456789abcdef", dir);
    char *keep = dsl_xasprintf("%s/keep", dir), *keepf = dsl_xasprintf("%s/keep/data", dir);
    char *in3 = dsl_xasprintf("%s/" MODEL ".tmp.1", p3);
    ASSERT(mkdir(p3, 0755) == 0 && mkdir(keep, 0755) == 0);
    FILE *f = fopen(in3, "w");
    ASSERT(f && fclose(f) == 0);
    f = fopen(keepf, "w");
    ASSERT(f && fclose(f) == 0);
    f = fopen(tmp, "w");
    ASSERT(f && fclose(f) == 0);
    /* a link named like a leftover: removed itself, what it points at is kept */
    ASSERT(symlink(keep, p4) == 0);
    ASSERT_OK(save(dir, "global_step5", 1, &s, 5, err));
    struct stat st;
    ASSERT(lstat(p3, &st) < 0 && lstat(p4, &st) < 0 && lstat(tmp, &st) < 0);
    ASSERT(stat(keepf, &st) == 0);
    char *latest;
    ASSERT_OK(dsl_ckpt_read_latest(dir, &latest, err));
    ASSERT_STR_EQ(latest, "global_step5");
    free(latest);
    /* the older checkpoint is no leftover */
    struct dsl_ckpt c;
    ASSERT_OK(dsl_ckpt_load(&c, dir, "global_step1", 0, err));
    dsl_ckpt_release(&c);
    free(p3);
    free(p4);
    free(tmp);
    free(keep);
    free(keepf);
    free(in3);
    rm_rf(dir);
    free(dir);
}

static int write_shard(const char *dir, const char *tag, int rank, int world, size_t off,
                       size_t len, const struct state *s, char *err)
{
    const char *names[2] = {"exp_avg", "exp_avg_sq"};
    const float *slices[2] = {s->m + off, s->v + off};
    return dsl_ckpt_write_optim(dir, tag, rank, world, names, slices, 2, off, len, NUMEL, NULL,
                                err);
}

TEST(overlapping_or_gapped_shards_should_be_refused_at_commit)
{
    static const struct {
        size_t off1, len1;
        const char *err;
    } cases[] = {
        {10, 13, "(overlapping shards)"}, /* rank 0 has [0, 12) */
        {13, 10, "(a gap between shards)"},
        {12, 10, "shards cover 22 of 23 elements"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN];
        struct state s;
        fill(&s, 0.0f);
        ASSERT_OK(save(dir, "good", 2, &s, 1, err));
        ASSERT_OK(dsl_ckpt_prepare(dir, "bad", err));
        ASSERT_OK(dsl_ckpt_write_model(dir, "bad", 2, views, NVIEWS, s.p, NUMEL, NULL, err));
        ASSERT_OK(write_shard(dir, "bad", 0, 2, 0, 12, &s, err));
        ASSERT_OK(write_shard(dir, "bad", 1, 2, cases[i].off1, cases[i].len1, &s, err));
        ASSERT_EQ(dsl_ckpt_commit(dir, "bad", 2, err), DSL_ECHECKPOINT);
        fprintf(stderr, "  -> %s\n", err);
        ASSERT_CONTAINS(err, cases[i].err);
        char *latest;
        ASSERT_OK(dsl_ckpt_read_latest(dir, &latest, err));
        ASSERT_STR_EQ(latest, "good");
        free(latest);
        char *bad = dsl_xasprintf("%s/bad", dir);
        struct stat st;
        ASSERT(stat(bad, &st) < 0); /* never renamed into place */
        free(bad);
        rm_rf(dir);
        free(dir);
    }
}

TEST(failed_save_should_leave_the_previous_checkpoint_intact)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN];
    struct state s, s2;
    struct dsl_ckpt c;
    fill(&s, 0.0f);
    fill(&s2, 9.0f);
    ASSERT_OK(save(dir, "global_step5", 2, &s, 5, err));

    /* a rank never wrote its shard: the commit refuses, latest stays */
    ASSERT_OK(dsl_ckpt_prepare(dir, "global_step6", err));
    ASSERT_OK(dsl_ckpt_write_model(dir, "global_step6", 2, views, NVIEWS, s2.p, NUMEL, NULL, err));
    ASSERT_OK(write_shard(dir, "global_step6", 0, 2, 0, 12, &s2, err));
    ASSERT_EQ(dsl_ckpt_commit(dir, "global_step6", 2, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "missing shard file");

    /* re-saving the SAME tag and failing must not damage it either */
    ASSERT_OK(dsl_ckpt_prepare(dir, "global_step5", err));
    ASSERT_OK(dsl_ckpt_write_model(dir, "global_step5", 2, views, NVIEWS, s2.p, NUMEL, NULL, err));
    ASSERT_EQ(dsl_ckpt_commit(dir, "global_step5", 2, err), DSL_ECHECKPOINT);

    /* the world size the commit expects must match what was written */
    ASSERT_OK(dsl_ckpt_prepare(dir, "global_step7", err));
    ASSERT_OK(dsl_ckpt_write_model(dir, "global_step7", 1, views, NVIEWS, s2.p, NUMEL, NULL, err));
    ASSERT_OK(write_shard(dir, "global_step7", 0, 1, 0, NUMEL, &s2, err));
    ASSERT_EQ(dsl_ckpt_commit(dir, "global_step7", 2, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "was written by 1 ranks, not 2");

    /* writes fail where the directory cannot be made (a file is in the way) */
    char *blocked = dsl_xasprintf("%s/blocked", dir);
    FILE *f = fopen(blocked, "w");
    fclose(f);
    ASSERT_ERR(dsl_ckpt_prepare(blocked, "global_step8", err));
    ASSERT_CONTAINS(err, "cannot create checkpoint directory");
    ASSERT_ERR(dsl_ckpt_write_model(blocked, "global_step8", 1, views, NVIEWS, s2.p, NUMEL,
                                    NULL, err));
    ASSERT_ERR(write_shard(dir, "never_prepared", 0, 1, 0, NUMEL, &s2, err));
    ASSERT_CONTAINS(err, "never_prepared.partial");
    free(blocked);

    ASSERT_OK(dsl_ckpt_load(&c, dir, NULL, 0, err));
    ASSERT_STR_EQ(c.tag, "global_step5");
    assert_state(&c, &s);
    dsl_ckpt_release(&c);

    /* and a later good save of the same tag replaces it cleanly */
    ASSERT_OK(save(dir, "global_step5", 2, &s2, 5, err));
    ASSERT_OK(dsl_ckpt_load(&c, dir, NULL, 0, err));
    assert_state(&c, &s2);
    dsl_ckpt_release(&c);
    char *old = dsl_xasprintf("%s/global_step5.old", dir);
    struct stat st;
    ASSERT(stat(old, &st) < 0);
    /* a crash between moving the old copy aside and renaming the new one in */
    char *cur = dsl_xasprintf("%s/global_step5", dir);
    ASSERT(rename(cur, old) == 0);
    ASSERT_OK(dsl_ckpt_load(&c, dir, NULL, 0, err));
    assert_state(&c, &s2);
    dsl_ckpt_release(&c);
    free(cur);
    free(old);
    rm_rf(dir);
    free(dir);
}

TEST(writers_should_reject_views_that_do_not_tile_the_parameters)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN];
    struct state s;
    fill(&s, 0.0f);
    struct dsl_ckpt_param bad[NVIEWS];
    memcpy(bad, views, sizeof(views));
    bad[1].offset = 13;
    ASSERT_OK(dsl_ckpt_prepare(dir, "t", err));
    ASSERT_EQ(dsl_ckpt_write_model(dir, "t", 1, bad, NVIEWS, s.p, NUMEL, NULL, err),
              DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "'layers.0.bias' starts at 13, expected 12");
    ASSERT_EQ(dsl_ckpt_write_model(dir, "t", 1, views, NVIEWS, s.p, NUMEL + 1, NULL, err),
              DSL_ECHECKPOINT);
    ASSERT_EQ(write_shard(dir, "t", 0, 1, 20, 5, &s, err), DSL_ECHECKPOINT);
    ASSERT_EQ(dsl_ckpt_prepare(dir, "a/b", err), DSL_ECHECKPOINT);
    rm_rf(dir);
    free(dir);
}

/* ---- safetensors ----------------------------------------------------------------- */

TEST(safetensors_should_round_trip_dtypes_shapes_and_escaped_metadata)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN];
    char *path = dsl_xasprintf("%s/x.safetensors", dir);
    float f[6] = {1, 2, 3, 4, 5, 6};
    int64_t q[2] = {-1, 1LL << 40};
    unsigned char u[3] = {1, 2, 3};
    struct dsl_st_tensor t[] = {
        {"a \"quoted\"\nname", DSL_ST_F32, 2, {2, 3}, f, 0},
        {"empty", DSL_ST_F32, 1, {0}, f, 0},
        {"scalar", DSL_ST_I64, 0, {0}, q, 0},
        {"q", DSL_ST_I64, 1, {2}, q, 0},
        {"bytes\xc3\xa9", DSL_ST_U8, 1, {3}, u, 0},
    };
    struct dsl_strvec meta;
    dsl_strvec_init(&meta);
    dsl_env_set(&meta, "note", "tab\there \"q\" back\\slash \x01");
    ASSERT_OK(dsl_st_write(path, t, sizeof(t) / sizeof(t[0]), &meta, err));
    struct dsl_st_file r;
    ASSERT_OK(dsl_st_load(&r, path, 0, err));
    ASSERT_EQ(r.n, 5);
    ASSERT_EQ((8 + (r.buf[0] | r.buf[1] << 8)) % 8, 0); /* data aligned to 8 */
    const struct dsl_st_tensor *a = dsl_st_find(&r, "a \"quoted\"\nname");
    ASSERT(a && a->ndim == 2 && a->shape[1] == 3 && a->nbytes == 24);
    ASSERT(memcmp(a->data, f, 24) == 0);
    const struct dsl_st_tensor *sc = dsl_st_find(&r, "scalar");
    ASSERT(sc && sc->ndim == 0 && sc->nbytes == 8);
    ASSERT(memcmp(sc->data, q, 8) == 0);
    ASSERT(dsl_st_find(&r, "empty")->nbytes == 0);
    ASSERT(memcmp(dsl_st_find(&r, "bytes\xc3\xa9")->data, u, 3) == 0);
    ASSERT_STR_EQ(dsl_env_get(&r.meta, "note"), "tab\there \"q\" back\\slash \x01");
    ASSERT(dsl_env_get(&r.meta, "dsl.sha256") != NULL);
    dsl_st_release(&r);
    dsl_strvec_release(&meta);
    free(path);
    rm_rf(dir);
    free(dir);
}

/* In-memory file from a header and data bytes. */
static int parse_st(const char *header, const void *data, size_t dlen, char *err)
{
    size_t hl = strlen(header), len = 8 + hl + dlen;
    unsigned char *buf = dsl_xmalloc(len);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    memcpy(buf + 8 + hl, data, dlen);
    struct dsl_st_file f;
    int r = dsl_st_parse(&f, "m.safetensors", buf, len, 0, err);
    dsl_st_release(&f);
    free(buf);
    return r;
}

/* 64 hex digits: eight times the 8 given */
#define HEX64(x8) x8 x8 x8 x8 x8 x8 x8 x8
#define HEX63_ZEROS "0000000" HEX64("0000000") /* 7 + 56 */

static const struct {
    const char *header;
    size_t dlen;
    const char *err; /* NULL: valid */
} header_cases[] = {
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, NULL},
    /* a file from another writer: no crc, spaces, escapes, metadata first */
    {" { \"__metadata__\" : {\"format\":\"pt\"} , \"\\u00e9\\ud83d\\ude00\" : "
     "{ \"shape\" : [ 1 , 2 ] , \"dtype\" : \"BF16\" , \"data_offsets\" : [ 0 , 4 ] } }   ",
     4, NULL},
    {"{}", 0, NULL},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
     "12 bytes of data but the tensors cover 8"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
     "needs 12 bytes"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "(overlap)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, "(gap)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "appears twice"},
    {"{\"a\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "unsupported dtype 'F31'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, "needs dtype, shape and data_offsets"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
     "unexpected or repeated field 'x'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
     "expected a non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
     "\"data_offsets\":[0,4]}}", 4, "impossible size"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "data_offsets [4, 0]"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", 4,
     "number out of range"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4,
     "unexpected text after the header object"},
    {"[1]", 0, "expected '{'"},
    {"{\"__metadata__\":{\"k\":1}}", 0, "expected '\"'"},
    {"{\"__metadata__\":{\"a=b\":\"1\"}}", 0, "unsupported or repeated metadata key 'a=b'"},
    {"{\"\\q\":{}}", 0, "bad escape"},
    {"{\"\\ud800\":{}}", 0, "lone surrogate"},
    {"{\"__metadata__\":{\"dsl.crc32\":\"00000000\"},"
     "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "checksum mismatch"},
    /* the checksums of dslaunch's files: 64 lowercase hex digits without escapes */
    {"{\"__metadata__\":{\"dsl.sha256\":\"abc\"}}", 0,
     "dsl.sha256 must be 64 lowercase hex digits"},
    {"{\"__metadata__\":{\"dsl.data_sha256\":\"" HEX64("AAAAAAAA") "\"}}", 0,
     "dsl.data_sha256 must be 64 lowercase hex digits"},
    {"{\"__metadata__\":{\"dsl.sha256\":\"\\u0030" HEX63_ZEROS "\"}}", 0,
     "dsl.sha256 must be 64 lowercase hex digits"},
    {"{\"__metadata__\":{\"dsl.sha256\":\"" HEX64("00000000") "\"}}", 0,
     "'m.safetensors': the header does not match its checksum (dsl.sha256): it was edited"},
    {"{\"__metadata__\":{\"dsl.data_sha256\":\"" HEX64("00000000") "\"},"
     "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     "the tensor data does not match its checksum (dsl.data_sha256 000000000000..."},
    /* numbers are exact 64-bit integers (a zero dimension makes this one 0 bytes) */
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0,18446744073709551615],\"data_offsets\":[0,0]}}", 0,
     NULL},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0,18446744073709551616],\"data_offsets\":[0,0]}}", 0,
     "number out of range"},
    {"{\"\\u005f_metadata__\":{\"k\":\"v\"}}", 0, NULL},
    /* the grammar of an entry */
    {"{\"a\":1}", 0, "expected '{'"},
    {"{\"a\":{\"dtype\":1,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "expected '\"'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4, "expected '['"},
    {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "unexpected or repeated field 'dtype'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
     "too many entries in array (at most 8)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,4]}}", 4,
     "too many entries in array (at most 2)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4,
     "data_offsets must hold two numbers"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4,
     "leading zero in number"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4,
     "expected a non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e0],\"data_offsets\":[0,4]}}", 4,
     "expected a non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[true],\"data_offsets\":[0,4]}}", 4,
     "expected a non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[[1]],\"data_offsets\":[0,4]}}", 4,
     "expected a non-negative integer"},
    {"{\"__metadata__\":{\"k\":{\"x\":{}}}}", 0, "nested too deep"},
    /* metadata */
    {"{\"__metadata__\":\"x\"}", 0, "expected '{'"},
    {"{\"__metadata__\":{\"k\":null}}", 0, "expected '\"'"},
    {"{\"__metadata__\":{\"\":\"1\"}}", 0, "unsupported or repeated metadata key ''"},
    {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0,
     "unsupported or repeated metadata key 'k'"},
    {"{\"__metadata__\":{\"k\":\"1\"},\"__metadata__\":{\"j\":\"2\"}}", 0, "repeated __metadata__"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "repeated __metadata__"},
    /* strings and the JSON text itself */
    {"{\"a\x01\":{}}", 0, "control character in string"},
    {"{\x01}", 0, "control character outside a string"},
    {"{\"\\u0000\":{}}", 0, "NUL in string"},
    {"{\"\\udc00\":{}}", 0, "lone surrogate"},
    {"{\"\\ud800\\u0041\":{}}", 0, "bad surrogate pair"},
    {"{\"\\u12g4\":{}}", 0, "bad \\u escape"},
    {"{\"\\u12", 0, "short \\u escape"},
    {"{\"abc", 0, "unterminated string"},
    {"{\"a\":{\"dtype\":\"F32\"", 0, "unexpected end of the header"},
    {"{a:{}}", 0, "bad header at byte 1: expected '\"'"},
    {"{\"a\" {}}", 0, "bad header at byte 5"},
    {"\xef\xbb\xbf{}", 0, "expected '{'"},
    {"{", 0, "bad header length 1"},
};

TEST(safetensors_reader_should_validate_every_header_rule)
{
    unsigned char data[16] = {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7};
    for (size_t i = 0; i < sizeof(header_cases) / sizeof(header_cases[0]); i++) {
        char err[DSL_ERR_LEN] = "";
        int r = parse_st(header_cases[i].header, data, header_cases[i].dlen, err);
        fprintf(stderr, "  %zu -> %s\n", i, r < 0 ? err : "ok");
        if (!header_cases[i].err) {
            ASSERT_OK(r);
        } else {
            ASSERT_EQ(r, DSL_ECHECKPOINT);
            ASSERT_CONTAINS(err, header_cases[i].err);
            ASSERT_CONTAINS(err, "'m.safetensors'");
        }
    }
    char err[DSL_ERR_LEN];
    struct dsl_st_file f;
    unsigned char huge[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    ASSERT_EQ(dsl_st_parse(&f, "m.safetensors", huge, 8, 0, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "is truncated: header of");
    dsl_st_release(&f);
    ASSERT_EQ(dsl_st_parse(&f, "m.safetensors", huge, 5, 0, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "no header length");
    dsl_st_release(&f);
}

TEST(checkpoint_meta_sizes_should_take_exactly_n_plain_numbers)
{
    /* dstrain sample read the "gpt" key with sscanf("%zu,..."), undefined past SIZE_MAX
       and lenient with signs, spaces and trailing text */
    struct dsl_ckpt c;
    char err[DSL_ERR_LEN];
    size_t v[5] = {0};
    memset(&c, 0, sizeof(c));
    c.path = (char *)"ck/global_step1";
    dsl_strvec_init(&c.meta);
    dsl_strvec_push(&c.meta, "gpt=4,128,4,128,256");
    ASSERT_OK(dsl_ckpt_meta_sizes(&c, "gpt", v, 5, err));
    ASSERT(v[0] == 4 && v[1] == 128 && v[2] == 4 && v[3] == 128 && v[4] == 256);
    static const char *const bad[] = {"gpt=4,128,4,128", "gpt=4,128,4,128,256,1",
                                      "gpt=4,128,4,128,256x", "gpt= 4,128,4,128,256",
                                      "gpt=-4,128,4,128,256", "gpt=4,,4,128,256",
                                      "gpt=4,128,4,128,99999999999999999999", "gpt=",
                                      "gpt=04,128,4,128,256"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        dsl_strvec_clear(&c.meta);
        dsl_strvec_push(&c.meta, bad[i]);
        size_t w[5] = {7, 7, 7, 7, 7};
        ASSERT_EQ(dsl_ckpt_meta_sizes(&c, "gpt", w, 5, err), DSL_ECHECKPOINT);
        ASSERT_CONTAINS(err, "bad metadata 'gpt'");
        ASSERT(w[0] == 7 && w[4] == 7); /* filled only on success */
    }
    ASSERT_EQ(dsl_ckpt_meta_sizes(&c, "nope", v, 5, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "missing metadata 'nope'");
    dsl_strvec_release(&c.meta);
}

/* ---- integrity (issue 30, item 8) ---------------------------------------------- */

/* Write a save's files as the trainer does and put them in place WITHOUT the commit's
 * validation, as a checkpoint edited after its save would be: then point latest at it. */
static void place_unvalidated(const char *dir, const char *tag, const struct state *s)
{
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_ckpt_prepare(dir, tag, err));
    ASSERT_OK(dsl_ckpt_write_model(dir, tag, 2, views, NVIEWS, s->p, NUMEL, NULL, err));
    ASSERT_OK(write_shard(dir, tag, 0, 2, 0, 12, s, err));
    ASSERT_OK(write_shard(dir, tag, 1, 2, 12, NUMEL - 12, s, err));
    char *part = dsl_xasprintf("%s/%s.partial", dir, tag), *fin = dsl_xasprintf("%s/%s", dir, tag);
    ASSERT(rename(part, fin) == 0);
    ASSERT_OK(dsl_ckpt_write_latest(dir, tag, err));
    free(part);
    free(fin);
}

TEST(a_save_with_a_non_finite_parameter_should_be_refused_and_latest_kept)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN];
    struct state s, bad;
    fill(&s, 0.0f);
    ASSERT_OK(save(dir, "global_step4", 2, &s, 4, err));
    fill(&bad, 1.0f);
    bad.p[13] = NAN; /* layers.0.bias[1] */
    ASSERT_EQ(save(dir, "global_step8", 2, &bad, 8, err), DSL_ECHECKPOINT);
    fprintf(stderr, "  -> %s\n", err);
    ASSERT_CONTAINS(err, "parameter 'layers.0.bias' element [1] is nan");
    ASSERT_CONTAINS(err, "the training has diverged; nothing was saved");
    char *latest;
    ASSERT_OK(dsl_ckpt_read_latest(dir, &latest, err));
    ASSERT_STR_EQ(latest, "global_step4");
    free(latest);
    char *fin = dsl_xasprintf("%s/global_step8", dir);
    struct stat st;
    ASSERT(stat(fin, &st) < 0);
    /* the trainer gives the save up on every rank and removes its partial directory */
    dsl_ckpt_abort(dir, "global_step8");
    char *part = dsl_xasprintf("%s/global_step8.partial", dir);
    ASSERT(stat(part, &st) < 0);
    free(part);
    free(fin);
    rm_rf(dir);
    free(dir);
}

TEST(a_non_finite_parameter_or_state_should_be_refused_naming_tensor_and_index)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN];
    struct state s;
    struct dsl_ckpt c;
    fill(&s, 0.5f);
    s.p[17] = -INFINITY; /* layers.1.weight [0, 2] */
    place_unvalidated(dir, "global_step3", &s);
    static const unsigned flags[] = {0, DSL_CKPT_ALLOW_UNVERIFIED};
    for (size_t i = 0; i < 2; i++) { /* allowing unverified files allows no nan */
        ASSERT_EQ(dsl_ckpt_load(&c, dir, NULL, flags[i], err), DSL_ECHECKPOINT);
        fprintf(stderr, "  -> %s\n", err);
        ASSERT_CONTAINS(err, "global_step3/" MODEL "': parameter 'layers.1.weight' element "
                             "[0, 2] is -inf (not finite: 1 of its 6 elements)");
        ASSERT_CONTAINS(err, "load an earlier checkpoint by its tag instead");
        dsl_ckpt_release(&c);
        /* dstrain sample's reader too */
        ASSERT_EQ(dsl_ckpt_load_params(&c, dir, NULL, flags[i], err), DSL_ECHECKPOINT);
        ASSERT_CONTAINS(err, "parameter 'layers.1.weight' element [0, 2] is -inf");
        dsl_ckpt_release(&c);
    }
    /* consolidate: nothing written */
    char *out = dsl_xasprintf("%s/sub/model.safetensors", dir), *sub = dsl_xasprintf("%s/sub", dir);
    ASSERT_EQ(dsl_ckpt_consolidate(&c, dir, NULL, out, 0, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "is -inf");
    dsl_ckpt_release(&c);
    struct stat st;
    ASSERT(stat(sub, &st) < 0);
    /* the optimizer state: rank 1's shard holds flat elements 12..22 */
    fill(&s, 0.5f);
    s.v[20] = NAN; /* exp_avg_sq of layers.1.weight [1, 2] */
    s.v[21] = INFINITY;
    place_unvalidated(dir, "global_step4", &s);
    ASSERT_EQ(dsl_ckpt_load(&c, dir, NULL, 0, err), DSL_ECHECKPOINT);
    fprintf(stderr, "  -> %s\n", err);
    ASSERT_CONTAINS(err, SHARD(1) "': optimizer state 'exp_avg_sq' of parameter "
                                  "'layers.1.weight' element [1, 2] (flat element 20) is nan "
                                  "(not finite: 2 of the shard's 11 elements)");
    dsl_ckpt_release(&c);
    /* finite again: loads, bit for bit */
    fill(&s, 0.5f);
    place_unvalidated(dir, "global_step5", &s);
    ASSERT_OK(dsl_ckpt_load(&c, dir, NULL, 0, err));
    assert_state(&c, &s);
    dsl_ckpt_release(&c);
    free(out);
    free(sub);
    rm_rf(dir);
    free(dir);
}

TEST(a_checkpoint_without_checksums_and_with_a_nan_should_be_refused_with_what_to_do)
{
    /* the case: every checksum cut out, a nan written into the data */
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN];
    struct state s;
    struct dsl_ckpt c;
    fill(&s, 0.5f);
    ASSERT_OK(save(dir, "global_step40", 1, &s, 40, err));
    char *model = file_in(dir, "global_step40", MODEL), *sh0 = shard_file(dir, "global_step40", 0);
    strip_sums(model);
    strip_sums(sh0);
    struct dsl_st_file f;
    ASSERT_OK(dsl_st_load(&f, model, 0, err));
    long data = (long)(f.len - NUMEL * sizeof(float));
    dsl_st_release(&f);
    float nan = NAN;
    int fd = open(model, O_RDWR);
    ASSERT(fd >= 0 && pwrite(fd, &nan, sizeof(nan), data + 4 * 2) == (ssize_t)sizeof(nan));
    close(fd);
    ASSERT_EQ(dsl_ckpt_load(&c, dir, NULL, 0, err), DSL_ECHECKPOINT);
    fprintf(stderr, "  -> %s\n", err);
    ASSERT_CONTAINS(err, "checkpoint file '");
    ASSERT_CONTAINS(err, "global_step40/" MODEL "' has no checksums");
    ASSERT_CONTAINS(err, "--allow-unverified-checkpoint");
    dsl_ckpt_release(&c);
    ASSERT_EQ(dsl_ckpt_load(&c, dir, NULL, DSL_CKPT_ALLOW_UNVERIFIED, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "parameter 'layers.0.weight' element [0, 2] is nan");
    dsl_ckpt_release(&c);
    free(model);
    free(sh0);
    rm_rf(dir);
    free(dir);
}

TEST(a_sparse_terabyte_file_should_be_refused_from_its_header_before_any_allocation)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN];
    struct state s;
    struct dsl_ckpt c;
    fill(&s, 0.5f);
    ASSERT_OK(save(dir, "global_step2", 2, &s, 2, err));
    static const char *const which[] = {MODEL, SHARD(1)};
    for (size_t i = 0; i < 2; i++) {
        char *p = file_in(dir, "global_step2", which[i]), *keep = dsl_xasprintf("%s/keep", dir);
        copy_file(p, keep);
        /* a terabyte of holes after the real file (a smaller one where the filesystem
           cannot hold that size): the header still describes the original bytes */
        if (truncate(p, (off_t)1 << 40) != 0)
            ASSERT(truncate(p, (off_t)1 << 34) == 0);
        ASSERT_EQ(dsl_ckpt_load(&c, dir, NULL, 0, err), DSL_ECHECKPOINT);
        fprintf(stderr, "  -> %s\n", err);
        ASSERT_CONTAINS(err, which[i]);
        ASSERT_CONTAINS(err, "bytes of data but the tensors cover");
        ASSERT_CONTAINS(err, "bytes the header does not describe");
        dsl_ckpt_release(&c);
        ASSERT(rename(keep, p) == 0);
        free(keep);
        free(p);
    }
    ASSERT_OK(dsl_ckpt_load(&c, dir, NULL, 0, err));
    dsl_ckpt_release(&c);
    /* a header that agrees with a terabyte of holes (2^38 floats) and has no checksums:
     * refused from its header, and at resume, where the model's size is known, from
     * the file's size whatever the flags (under ASan, an allocation of that size would
     * abort the test) */
    {
        char *m = file_in(dir, "global_step2", MODEL);
        static const char h[] =
            "{\"__metadata__\":{\"dsl.kind\":\"model\",\"dsl.tag\":\"global_step2\","
            "\"dsl.numel\":\"274877906944\",\"dsl.world_size\":\"2\",\"format\":\"pt\"},"
            "\"w\":{\"dtype\":\"F32\",\"shape\":[274877906944],"
            "\"data_offsets\":[0,1099511627776]}}";
        size_t hl = (sizeof(h) - 1 + 7) / 8 * 8;
        unsigned char lenb[8];
        for (int b = 0; b < 8; b++)
            lenb[b] = (unsigned char)((uint64_t)hl >> (8 * b));
        FILE *mf = fopen(m, "wb");
        ASSERT(mf != NULL);
        ASSERT(fwrite(lenb, 1, 8, mf) == 8 && fwrite(h, 1, sizeof(h) - 1, mf) == sizeof(h) - 1);
        for (size_t k = sizeof(h) - 1; k < hl; k++)
            fputc(' ', mf);
        fclose(mf);
        if (truncate(m, (off_t)(8 + hl) + ((off_t)1 << 40)) == 0) {
            ASSERT_EQ(dsl_ckpt_load(&c, dir, NULL, 0, err), DSL_ECHECKPOINT);
            fprintf(stderr, "  -> %s\n", err);
            ASSERT_CONTAINS(err, MODEL "' has no checksums");
            dsl_ckpt_release(&c);
            ASSERT_EQ(dsl_ckpt_load_for(&c, dir, NULL, DSL_CKPT_ALLOW_UNVERIFIED, NUMEL, err),
                      DSL_ECHECKPOINT);
            fprintf(stderr, "  -> %s\n", err);
            ASSERT_CONTAINS(err, "more than a checkpoint of this model (23 parameters) can "
                                 "hold");
            dsl_ckpt_release(&c);
        }
        free(m);
    }
    /* a header length past the file, and one past the format's limit: no allocation */
    char *p = file_in(dir, "global_step2", MODEL);
    ASSERT(truncate(p, (off_t)1 << 34) == 0);
    unsigned char len[8] = {0, 0, 0, 0x80, 0, 0, 0, 0}; /* 2^31 */
    int fd = open(p, O_RDWR);
    ASSERT(fd >= 0 && pwrite(fd, len, 8, 0) == 8);
    close(fd);
    ASSERT_EQ(dsl_ckpt_load(&c, dir, NULL, 0, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "bad header length 2147483648");
    dsl_ckpt_release(&c);
    free(p);
    rm_rf(dir);
    free(dir);
}

TEST(stale_partial_directories_should_neither_break_a_save_nor_ever_be_loaded)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN];
    struct state s;
    struct dsl_ckpt c;
    struct stat st;
    fill(&s, 0.5f);
    /* a file outside that links inside the stale partials point at: never touched */
    char *outside = test_tmpdir("ckpt"), *victim = dsl_xasprintf("%s/victim", outside);
    FILE *f = fopen(victim, "w");
    ASSERT(f != NULL);
    fputs("keep", f);
    fclose(f);
    /* what a killed save, or anyone after it, left: files, a nested directory, links */
    char *part = dsl_xasprintf("%s/global_step3.partial", dir);
    char *nested = dsl_xasprintf("%s/sub/deeper", part);
    ASSERT(dsl_dir_make_all(nested) == 0);
    char *x = dsl_xasprintf("%s/" MODEL ".tmp.0123456789abcdef", part);
    f = fopen(x, "w");
    fclose(f);
    free(x);
    x = dsl_xasprintf("%s/link", nested);
    ASSERT(symlink(victim, x) == 0);
    free(x);
    x = dsl_xasprintf("%s/dirlink", part);
    ASSERT(symlink(outside, x) == 0);
    free(x);
    ASSERT_OK(save(dir, "global_step3", 2, &s, 3, err));
    ASSERT(stat(part, &st) < 0);
    ASSERT(stat(victim, &st) == 0);
    /* a partial that is a link to a directory: the link goes, not what it names */
    char *part5 = dsl_xasprintf("%s/global_step5.partial", dir);
    ASSERT(symlink(outside, part5) == 0);
    ASSERT_OK(save(dir, "global_step5", 2, &s, 5, err));
    ASSERT(lstat(part5, &st) < 0);
    ASSERT(stat(victim, &st) == 0);
    /* a complete save that never committed is no checkpoint: not by its name ... */
    ASSERT_OK(dsl_ckpt_prepare(dir, "global_step9", err));
    ASSERT_OK(dsl_ckpt_write_model(dir, "global_step9", 1, views, NVIEWS, s.p, NUMEL, NULL, err));
    ASSERT_OK(write_shard(dir, "global_step9", 0, 1, 0, NUMEL, &s, err));
    ASSERT_EQ(dsl_ckpt_load(&c, dir, "global_step9.partial", 0, err), DSL_ECHECKPOINT);
    fprintf(stderr, "  -> %s\n", err);
    ASSERT_CONTAINS(err, "'global_step9.partial' in '");
    ASSERT_CONTAINS(err, "is not a checkpoint: a '.partial' directory is a save that did not "
                         "finish");
    dsl_ckpt_release(&c);
    ASSERT_EQ(dsl_ckpt_load_params(&c, dir, "global_step5.old", 0, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "is not a checkpoint");
    dsl_ckpt_release(&c);
    /* ... nor through latest */
    char *latest = dsl_xasprintf("%s/latest", dir);
    f = fopen(latest, "w");
    fputs("global_step9.partial\n", f);
    fclose(f);
    ASSERT_EQ(dsl_ckpt_load(&c, dir, NULL, 0, err), DSL_ECHECKPOINT);
    fprintf(stderr, "  -> %s\n", err);
    ASSERT_CONTAINS(err, "names 'global_step9.partial', the directory of a save that did not "
                         "finish");
    dsl_ckpt_release(&c);
    ASSERT_EQ(dsl_ckpt_write_latest(dir, "global_step9.partial", err), DSL_ECHECKPOINT);
    ASSERT_EQ(dsl_ckpt_prepare(dir, "global_step9.partial", err), DSL_ECHECKPOINT);
    /* the next save puts latest right and clears the partial */
    ASSERT_OK(save(dir, "global_step6", 2, &s, 6, err));
    ASSERT_OK(dsl_ckpt_load(&c, dir, NULL, 0, err));
    ASSERT_STR_EQ(c.tag, "global_step6");
    dsl_ckpt_release(&c);
    char *part9 = dsl_xasprintf("%s/global_step9.partial", dir);
    ASSERT(stat(part9, &st) < 0);
    free(part9);
    free(latest);
    free(part5);
    free(nested);
    free(part);
    rm_rf(outside);
    free(victim);
    free(outside);
    rm_rf(dir);
    free(dir);
}

int main(int argc, char **argv)
{
    return RUN_TESTS(argc, argv);
}
