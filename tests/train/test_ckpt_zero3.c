/*
 * ZeRO stage 3 checkpoints: every rank's parameter and optimizer pieces in files of its
 * own (checkpoint.h), loaded whole at any world size, consolidated one tensor at a time
 * (the largest buffer is one tensor's), 16-bit weights the same way, and every broken
 * set (a missing, corrupt or overlapping shard) refused naming the file, with nothing
 * written and the previous checkpoint intact.
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

#include "dslaunch/common/dtype.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "train/checkpoint.h"
#include "train/checkpoint_internal.h"
#include "train/safetensors.h"
#include "ckpt_fixture.h"
#include "test.h"
#include "test_fs.h"


/* An MLP-shaped model: layers of [width, in] weights and [width] biases. */
struct model {
    struct dsl_ckpt_param v[16];
    char names[16][32];
    size_t nv, numel, maxv;
    float *p, *m, *s;
};

static void model_init(struct model *md, int layers, size_t in, size_t width)
{
    memset(md, 0, sizeof(*md));
    for (int l = 0; l < layers; l++) {
        size_t rows = l + 1 == layers ? 10 : width, cols = l ? width : in;
        struct dsl_ckpt_param *w = &md->v[md->nv], *b = &md->v[md->nv + 1];
        snprintf(md->names[md->nv], 32, "%d.weight", 2 * l);
        snprintf(md->names[md->nv + 1], 32, "%d.bias", 2 * l);
        *w = (struct dsl_ckpt_param){md->names[md->nv], md->numel, 2, {rows, cols}};
        md->numel += rows * cols;
        *b = (struct dsl_ckpt_param){md->names[md->nv + 1], md->numel, 1, {rows}};
        md->numel += rows;
        md->maxv = rows * cols > md->maxv ? rows * cols : md->maxv;
        md->nv += 2;
    }
    md->p = dsl_xmalloc(md->numel * sizeof(float));
    md->m = dsl_xmalloc(md->numel * sizeof(float));
    md->s = dsl_xmalloc(md->numel * sizeof(float));
    for (size_t i = 0; i < md->numel; i++) {
        md->p[i] = 0.001f * (float)i - 3.0f;
        md->m[i] = (float)i + 0.25f;
        md->s[i] = (float)(i % 97) * 0.5f;
    }
}

static void model_release(struct model *md)
{
    free(md->p);
    free(md->m);
    free(md->s);
}

static void meta_of(struct dsl_strvec *meta, uint64_t step)
{
    dsl_strvec_init(meta);
    dsl_strvec_pushf(meta, "step=%llu", (unsigned long long)step);
    dsl_env_set(meta, "seed", "1234");
    dsl_env_set(meta, "zero_stage", "3");
}

/*
 * Rank `rank`'s files as the trainer writes them: buckets of at most `bucket` elements
 * that never span two views, and of each bucket the rank's dsl_ckpt_slice piece.
 * overlap: the last rank also claims the first element of rank 0's first piece.
 */
static int write_rank(const char *dir, const char *tag, int rank, int world,
                      const struct model *md, size_t bucket, int overlap, uint64_t step,
                      char *err)
{
    size_t(*rg)[2] = dsl_xcalloc(md->numel, sizeof(*rg)), n = 0, len = 0;
    float *p = dsl_xmalloc(md->numel * sizeof(float) + 4), *m = dsl_xmalloc(md->numel * 4 + 4);
    float *s = dsl_xmalloc(md->numel * sizeof(float) + 4);
    for (size_t k = 0; k < md->nv; k++) {
        size_t lo = md->v[k].offset;
        size_t hi = k + 1 < md->nv ? md->v[k + 1].offset : md->numel;
        for (size_t b = lo; b < hi; b += bucket) {
            size_t blen = hi - b < bucket ? hi - b : bucket, off, plen;
            dsl_ckpt_slice(blen, rank, world, &off, &plen);
            if (overlap && rank == world - 1 && n == 0 && off > 0) {
                off--;
                plen++;
            }
            if (!plen)
                continue;
            rg[n][0] = b + off;
            rg[n][1] = plen;
            memcpy(p + len, md->p + b + off, plen * sizeof(float));
            memcpy(m + len, md->m + b + off, plen * sizeof(float));
            memcpy(s + len, md->s + b + off, plen * sizeof(float));
            len += plen;
            n++;
        }
    }
    struct dsl_strvec meta;
    meta_of(&meta, step);
    const char *names[2] = {"exp_avg", "exp_avg_sq"};
    const float *slices[2] = {m, s};
    int r = dsl_ckpt_write_zero3(dir, tag, rank, world, md->v, md->nv, md->numel,
                                 (const size_t(*)[2])rg, n, p, names, slices, 2, &meta, err);
    dsl_strvec_release(&meta);
    free(rg);
    free(p);
    free(m);
    free(s);
    return r;
}

/* A whole stage 3 save at world `world`: prepare, every rank's files, commit. */
static int save_z3(const char *dir, const char *tag, int world, const struct model *md,
                   size_t bucket, int overlap, char *err)
{
    int r = dsl_ckpt_prepare(dir, tag, err);
    for (int rank = 0; rank < world && r >= 0; rank++)
        r = write_rank(dir, tag, rank, world, md, bucket, overlap, 7, err);
    return r < 0 ? r : dsl_ckpt_commit(dir, tag, world, err);
}

/* A fresh scratch directory with md saved at world `world` as tag global_step7, in
 * buckets of 50; test_tmpdir_remove() ends it. */
static char *saved_z3(const struct model *md, int world)
{
    char *dir = test_tmpdir("z3"), err[DSL_ERR_LEN];
    ASSERT_OK(save_z3(dir, "global_step7", world, md, 50, 0, err));
    return dir;
}

static void flip_last_byte(const char *path)
{
    test_flip_byte(path, test_file_size(path) - 1);
}

TEST(zero3_checkpoint_should_load_whole_at_any_world_size)
{
    struct model md;
    model_init(&md, 3, 20, 16);
    for (int world = 1; world <= 4; world++) {
        char *dir = saved_z3(&md, world), err[DSL_ERR_LEN];
        struct dsl_ckpt c;
        ASSERT_OK(dsl_ckpt_load(&c, dir, NULL, 0, err));
        ASSERT_EQ(c.zero3, 1);
        ASSERT_EQ(c.saved_world, world);
        ASSERT_EQ(c.numel, md.numel);
        ASSERT_OK(dsl_ckpt_check_params(&c, md.v, md.nv, md.numel, err));
        ASSERT(memcmp(c.params, md.p, md.numel * sizeof(float)) == 0);
        ASSERT(memcmp(dsl_ckpt_state(&c, "exp_avg"), md.m, md.numel * sizeof(float)) == 0);
        ASSERT(memcmp(dsl_ckpt_state(&c, "exp_avg_sq"), md.s, md.numel * sizeof(float)) == 0);
        ASSERT_STR_EQ(dsl_ckpt_meta(&c, "step"), "7");
        ASSERT_EQ(c.sum, DSL_ST_SUM_SHA256);
        dsl_ckpt_release(&c);
        /* the parameters alone (dstrain sample, the resume's batch check) */
        ASSERT_OK(dsl_ckpt_load_params(&c, dir, NULL, 0, err));
        ASSERT(memcmp(c.params, md.p, md.numel * sizeof(float)) == 0);
        ASSERT_EQ(c.nstate, 0);
        dsl_ckpt_release(&c);
        test_tmpdir_remove(dir);
    }
    model_release(&md);
}

TEST(zero3_consolidate_should_hold_one_tensor_at_a_time)
{
    /* 6 layers of 128 x 128: the largest tensor is a sixth of the model */
    struct model md;
    model_init(&md, 6, 128, 128);
    char *dir = test_tmpdir("z3"), err[DSL_ERR_LEN];
    char *out1 = dsl_xasprintf("%s/w1/model.safetensors", dir);
    char *out4 = dsl_xasprintf("%s/w4.safetensors", dir);
    char *d1 = dsl_xasprintf("%s/ck1", dir), *d4 = dsl_xasprintf("%s/ck4", dir);
    struct dsl_ckpt c, f;
    ASSERT_OK(save_z3(d1, "global_step7", 1, &md, 1000, 0, err));
    ASSERT_OK(save_z3(d4, "global_step7", 4, &md, 1000, 0, err));
    ASSERT_OK(dsl_ckpt_consolidate(&c, d1, NULL, out1, 0, err));
    dsl_ckpt_release(&c);
    ASSERT_OK(dsl_ckpt_consolidate(&c, d4, "global_step7", out4, 0, err));
    printf("# %zu parameters, largest tensor %zu: consolidation's largest buffer %zu bytes "
           "of %zu\n", md.numel, md.maxv, c.stream_peak, md.numel * sizeof(float));
    ASSERT_EQ(c.stream_peak, md.maxv * sizeof(float));
    ASSERT(c.stream_peak * 5 < md.numel * sizeof(float));
    ASSERT(c.params == NULL);
    dsl_ckpt_release(&c);
    /* the model, whole, with the checkpoint's own keys and not its bookkeeping */
    ASSERT_OK(dsl_ckpt_load_file(&f, out4, 0, err));
    ASSERT_EQ(f.numel, md.numel);
    ASSERT_OK(dsl_ckpt_check_params(&f, md.v, md.nv, md.numel, err));
    ASSERT(memcmp(f.params, md.p, md.numel * sizeof(float)) == 0);
    ASSERT_STR_EQ(dsl_ckpt_meta(&f, "step"), "7");
    ASSERT(dsl_ckpt_meta(&f, "dsl.views") == NULL && dsl_ckpt_meta(&f, "dsl.rank") == NULL);
    dsl_ckpt_release(&f);
    /* the same bytes from world 1 and world 4 */
    assert_same_safetensors(out1, out4);
    test_tmpdir_remove(dir);
    free(d1);
    free(d4);
    free(out1);
    free(out4);
    model_release(&md);
}

TEST(zero3_16bit_weights_should_be_the_rounded_parameters_streamed_the_same_way)
{
    struct model md;
    model_init(&md, 4, 64, 64);
    char *dir = test_tmpdir("z3"), err[DSL_ERR_LEN];
    char *out = dsl_xasprintf("%s/m16.safetensors", dir);
    char *path = dsl_xasprintf("%s/global_step7", dir);
    struct dsl_ckpt c;
    struct dsl_st_file f;
    ASSERT_OK(save_z3(dir, "global_step7", 3, &md, 300, 0, err));
    for (int bf = 0; bf < 2; bf++) {
        enum dsl_st_dtype dt = bf ? DSL_ST_BF16 : DSL_ST_F16;
        ASSERT_OK(dsl_ckpt_consolidate_zero3(&c, path, "global_step7", out, dt, 0, err));
        ASSERT_EQ(c.stream_peak, md.maxv * (sizeof(float) + sizeof(uint16_t)));
        dsl_ckpt_release(&c);
        ASSERT_OK(dsl_st_load(&f, out, 0, err));
        ASSERT_EQ(f.n, md.nv);
        for (size_t k = 0; k < md.nv; k++) {
            const struct dsl_st_tensor *t = dsl_st_find(&f, md.v[k].name);
            ASSERT(t && t->dtype == dt);
            const uint16_t *h = t->data;
            for (size_t i = 0; i < t->nbytes / 2; i++) {
                float x = md.p[md.v[k].offset + i];
                ASSERT_EQ(h[i], bf ? dsl_bf16_from_float(x) : dsl_fp16_from_float(x));
            }
        }
        dsl_st_release(&f);
    }
    test_tmpdir_remove(dir);
    free(out);
    free(path);
    model_release(&md);
}

/* the load and the consolidation of dir both fail with a message holding want, and the
 * consolidation leaves nothing at its output */
static void assert_refused(const char *dir, const char *want)
{
    char err[DSL_ERR_LEN] = "";
    char *out = dsl_xasprintf("%s/out/model.safetensors", dir), *o = dsl_xasprintf("%s/out", dir);
    struct dsl_ckpt c;
    struct stat st;
    ASSERT_ERR(dsl_ckpt_load(&c, dir, NULL, 0, err));
    printf("  -> %s\n", err);
    ASSERT_CONTAINS(err, want);
    dsl_ckpt_release(&c);
    err[0] = '\0';
    ASSERT_ERR(dsl_ckpt_consolidate(&c, dir, NULL, out, 0, err));
    ASSERT_CONTAINS(err, want);
    dsl_ckpt_release(&c);
    ASSERT(stat(out, &st) < 0 && stat(o, &st) < 0);
    free(out);
    free(o);
}

TEST(a_missing_or_corrupt_zero3_shard_should_be_refused_naming_the_file)
{
    struct model md;
    model_init(&md, 3, 20, 16);
    static const struct {
        int rank;
        const char *kind;
        int corrupt;
        const char *want;
    } cases[] = {
        {2, "model", 0, "missing shard file 'zero_pp_rank_2_mp_rank_00_model_states"},
        {0, "model", 0, "missing shard file 'zero_pp_rank_0_mp_rank_00_model_states"},
        {1, "model", 1, "zero_pp_rank_1_mp_rank_00_model_states.safetensors': the tensor "
                        "data does not match its checksum"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *dir = saved_z3(&md, 3);
        char *f = rank_file(dir, "global_step7", cases[i].rank, cases[i].kind);
        if (cases[i].corrupt)
            flip_last_byte(f);
        else
            ASSERT(unlink(f) == 0);
        assert_refused(dir, cases[i].want);
        free(f);
        test_tmpdir_remove(dir);
    }
    /* the optimizer's files are the resume's: a load refuses them, naming the file */
    char *dir = saved_z3(&md, 3), err[DSL_ERR_LEN];
    struct dsl_ckpt c;
    char *f = rank_file(dir, "global_step7", 1, "optim");
    flip_last_byte(f);
    ASSERT_ERR(dsl_ckpt_load(&c, dir, NULL, 0, err));
    ASSERT_CONTAINS(err, "zero_pp_rank_1_mp_rank_00_optim_states.safetensors': the tensor data");
    dsl_ckpt_release(&c);
    ASSERT(unlink(f) == 0);
    ASSERT_ERR(dsl_ckpt_load(&c, dir, NULL, 0, err));
    ASSERT_CONTAINS(err, "missing shard file 'zero_pp_rank_1_mp_rank_00_optim_states");
    dsl_ckpt_release(&c);
    free(f);
    test_tmpdir_remove(dir);
    model_release(&md);
}

TEST(overlapping_zero3_pieces_should_fail_the_commit_and_keep_latest)
{
    struct model md;
    model_init(&md, 3, 20, 16);
    char *dir = saved_z3(&md, 2), err[DSL_ERR_LEN];
    struct dsl_ckpt c;
    ASSERT_ERR(save_z3(dir, "global_step9", 2, &md, 50, 1, err));
    printf("  -> %s\n", err);
    ASSERT_CONTAINS(err, "overlapping shards");
    dsl_ckpt_abort(dir, "global_step9");
    assert_latest(dir, "global_step7");
    ASSERT_OK(dsl_ckpt_load(&c, dir, NULL, 0, err));
    ASSERT(memcmp(c.params, md.p, md.numel * sizeof(float)) == 0);
    dsl_ckpt_release(&c);
    test_tmpdir_remove(dir);
    model_release(&md);
}

TEST(a_zero3_save_with_a_nan_should_fail_at_its_writer_and_keep_latest)
{
    struct model md;
    model_init(&md, 3, 20, 16);
    char *dir = saved_z3(&md, 2), err[DSL_ERR_LEN];
    md.s[md.numel - 1] = NAN; /* in the last rank's optimizer pieces */
    ASSERT_ERR(save_z3(dir, "global_step9", 2, &md, 50, 0, err));
    printf("  -> %s\n", err);
    ASSERT_CONTAINS(err, "zero_pp_rank_1_mp_rank_00_optim_states.safetensors': 'exp_avg_sq'");
    ASSERT_CONTAINS(err, "the training has diverged; nothing was saved");
    dsl_ckpt_abort(dir, "global_step9");
    assert_latest(dir, "global_step7");
    test_tmpdir_remove(dir);
    model_release(&md);
}

TEST(a_rank_should_read_only_its_own_zero3_shard_at_the_saved_world)
{
    struct model md;
    model_init(&md, 3, 20, 16);
    char *dir = saved_z3(&md, 3), err[DSL_ERR_LEN];
    struct dsl_ckpt c;
    /* rank 1 of 3 needs no other rank's files: the others' shards removed */
    for (int r = 0; r < 3; r++) {
        if (r == 1)
            continue;
        char *f = rank_file(dir, "global_step7", r, "optim");
        ASSERT(unlink(f) == 0);
        free(f);
    }
    char *f2 = rank_file(dir, "global_step7", 2, "model");
    ASSERT(unlink(f2) == 0);
    free(f2);
    ASSERT_EQ(dsl_ckpt_load_rank(&c, dir, NULL, 1, 3, 0, md.numel, err), 0);
    ASSERT(c.zero3 && c.nranges > 1 && c.saved_world == 3 && c.nstate == 2);
    size_t at = 0;
    for (size_t i = 0; i < c.nranges; i++) {
        const float *m = dsl_ckpt_state(&c, "exp_avg");
        ASSERT(memcmp(c.params + at, md.p + c.ranges[i][0], c.ranges[i][1] * 4) == 0);
        ASSERT(memcmp(m + at, md.m + c.ranges[i][0], c.ranges[i][1] * 4) == 0);
        at += c.ranges[i][1];
    }
    ASSERT_EQ(at, c.shard_len);
    ASSERT_STR_EQ(dsl_ckpt_meta(&c, "step"), "7");
    dsl_ckpt_release(&c);
    /* another world size: 1, load it whole */
    ASSERT_EQ(dsl_ckpt_load_rank(&c, dir, NULL, 1, 2, 0, md.numel, err), 1);
    /* rank 0's own optimizer shard is gone: named */
    ASSERT_ERR(dsl_ckpt_load_rank(&c, dir, NULL, 0, 3, 0, md.numel, err));
    ASSERT_CONTAINS(err, "missing shard file 'zero_pp_rank_0_mp_rank_00_optim_states");
    test_tmpdir_remove(dir);
    model_release(&md);
}

TEST(zero3_metadata_parsers_should_take_exactly_their_grammar)
{
    uint64_t(*rg)[2] = NULL, total = 0;
    size_t n = 0;
    ASSERT_OK(dsl_ckpt_ranges_parse("0+3,10+2", 12, &rg, &n, &total));
    ASSERT(n == 2 && rg[1][0] == 10 && rg[1][1] == 2 && total == 5);
    free(rg);
    ASSERT_OK(dsl_ckpt_ranges_parse("", 12, &rg, &n, &total));
    ASSERT(n == 0 && total == 0);
    free(rg);
    static const char *const bad_ranges[] = {"0+3,", ",0+3", "0+0", "01+3", "+3", "0+13",
                                             "11+2", "0+3 ", "-1+2", "0+3;1+1",
                                             "99999999999999999999+1"};
    for (size_t i = 0; i < sizeof(bad_ranges) / sizeof(bad_ranges[0]); i++)
        ASSERT(dsl_ckpt_ranges_parse(bad_ranges[i], 12, &rg, &n, &total) < 0);
    struct dsl_ckpt_param *v = NULL;
    ASSERT_OK(dsl_ckpt_views_parse("0.weight[3,2];0.bias[3];s[]", 10, &v, &n));
    ASSERT(n == 3 && v[1].offset == 6 && v[2].ndim == 0 && v[2].offset == 9);
    ASSERT_STR_EQ(v[1].name, "0.bias");
    for (size_t i = 0; i < n; i++)
        free((char *)(uintptr_t)v[i].name);
    free(v);
    static const char *const bad_views[] = {"a[3,2];b[4]", "a[3,2];b[3];", "[3]", "a[3,]",
                                            "a[3", "a[1,1,1,1,1]", "a;b[9]", "a[2]x;b[7]",
                                            "a[9][0]", "a[01,9]"};
    for (size_t i = 0; i < sizeof(bad_views) / sizeof(bad_views[0]); i++)
        ASSERT(dsl_ckpt_views_parse(bad_views[i], 9, &v, &n) < 0);
}

TEST_MAIN()
