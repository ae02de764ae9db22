/*
 * Checkpoints: round trip, re-cut at other world sizes, the atomic `latest`,
 * consolidate, and saves that fail (or find what failed saves left) without touching
 * the checkpoint `latest` names. Corrupt and edited files are test_ckpt_corrupt.c's,
 * non-finite values and hostile sizes test_ckpt_integrity.c's, the safetensors format
 * test_safetensors.c's.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_fixture.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/xalloc.h"
#include "test.h"
#include "test_fs.h"

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
    ASSERT_EQ(test_count_entries(dir), 2);
    test_tmpdir_remove(dir);
}

TEST(checkpoint_should_recut_for_any_world_size)
{
    /* saved at world 4, re-saved from the reassembled vectors at 2, 1, 5 and 30 (more
     * ranks than elements: empty shards) */
    char err[DSL_ERR_LEN];
    struct state s, back;
    char *dir = saved_dir(&s, 1.0f, "w4", 4, 1);
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
    test_tmpdir_remove(dir);
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
    assert_latest(dir, "global_step10");
    ASSERT_OK(dsl_ckpt_write_latest(dir, "global_step20", err));
    assert_latest(dir, "global_step20");
    char *latest = dsl_xasprintf("%s/latest", dir);
    ASSERT_EQ(test_file_size(latest), 13); /* DeepSpeed writes the bare tag */
    ASSERT_EQ(test_count_entries(dir), 1); /* no temp file left behind */
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
    char err[DSL_ERR_LEN];
    struct state s;
    char *dir = saved_dir(&s, 2.0f, "a", 1, 3);
    ASSERT_OK(save(dir, "b", 3, &s, 3, err));
    char *o1 = dsl_xasprintf("%s/model1.safetensors", dir);
    char *o3 = dsl_xasprintf("%s/model3.safetensors", dir);
    struct dsl_ckpt c;
    ASSERT_OK(dsl_ckpt_consolidate(&c, dir, "a", o1, 0, err));
    ASSERT_EQ(dsl_ckpt_caveat(&c, err, DSL_ERR_LEN), 0);
    dsl_ckpt_release(&c);
    ASSERT_OK(dsl_ckpt_consolidate(&c, dir, NULL, o3, 0, err)); /* latest = b */
    dsl_ckpt_release(&c);
    assert_same_safetensors(o1, o3);
    struct dsl_st_file f1;
    ASSERT_OK(dsl_st_load(&f1, o1, 0, err));
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
    free(o1);
    free(o3);
    test_tmpdir_remove(dir);
}

/* ---- failed and interrupted saves ------------------------------------------------ */

TEST(links_at_the_old_predictable_temp_names_should_not_be_followed)
{
    char *dir = test_tmpdir("ckpt"), err[DSL_ERR_LEN] = "";
    char *victim = dsl_xasprintf("%s/victim", dir);
    struct state s;
    fill(&s, 0.0f);
    FILE *v = fopen(victim, "w");
    ASSERT(v && fputs("precious", v) >= 0 && fclose(v) == 0);
    /* what another user could plant when temp names were PATH.tmp.PID */
    ASSERT_OK(dsl_ckpt_prepare(dir, "t", err));
    char *m = dsl_xasprintf("%s/t.partial/" MODEL ".tmp.%ld", dir, (long)getpid());
    char *l = dsl_xasprintf("%s/latest.tmp.%ld", dir, (long)getpid());
    ASSERT(symlink(victim, m) == 0 && symlink(victim, l) == 0);
    ASSERT_OK(dsl_ckpt_write_model(dir, "t", 1, views, NVIEWS, s.p, NUMEL, NULL, err));
    ASSERT_OK(write_shard(dir, "t", 0, 1, 0, NUMEL, &s, err));
    ASSERT_OK(dsl_ckpt_commit(dir, "t", 1, err));
    assert_loads(dir, NULL, 0, &s);
    struct stat st;
    ASSERT(stat(victim, &st) == 0 && st.st_size == 8);
    ASSERT(lstat(l, &st) < 0); /* the planted link was a leftover: removed, not followed */
    free(m);
    free(l);
    free(victim);
    test_tmpdir_remove(dir);
}

TEST(a_successful_save_should_remove_what_failed_saves_left)
{
    char err[DSL_ERR_LEN] = "";
    struct state s;
    char *dir = saved_dir(&s, 0.0f, "global_step1", 1, 1);
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
    assert_latest(dir, "global_step5");
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
    test_tmpdir_remove(dir);
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
        char err[DSL_ERR_LEN];
        struct state s;
        char *dir = saved_dir(&s, 0.0f, "good", 2, 1);
        ASSERT_OK(start_save(dir, "bad", 2, &s, err));
        ASSERT_OK(write_shard(dir, "bad", 0, 2, 0, 12, &s, err));
        ASSERT_OK(write_shard(dir, "bad", 1, 2, cases[i].off1, cases[i].len1, &s, err));
        ASSERT_EQ(dsl_ckpt_commit(dir, "bad", 2, err), DSL_ECHECKPOINT);
        fprintf(stderr, "  -> %s\n", err);
        ASSERT_CONTAINS(err, cases[i].err);
        assert_latest(dir, "good");
        char *bad = dsl_xasprintf("%s/bad", dir);
        struct stat st;
        ASSERT(stat(bad, &st) < 0); /* never renamed into place */
        free(bad);
        test_tmpdir_remove(dir);
    }
}

TEST(failed_save_should_leave_the_previous_checkpoint_intact)
{
    char err[DSL_ERR_LEN];
    struct state s, s2;
    struct dsl_ckpt c;
    char *dir = saved_dir(&s, 0.0f, "global_step5", 2, 5);
    fill(&s2, 9.0f);

    /* a rank never wrote its shard: the commit refuses, latest stays */
    ASSERT_OK(start_save(dir, "global_step6", 2, &s2, err));
    ASSERT_OK(write_shard(dir, "global_step6", 0, 2, 0, 12, &s2, err));
    ASSERT_EQ(dsl_ckpt_commit(dir, "global_step6", 2, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "missing shard file");

    /* re-saving the SAME tag and failing must not damage it either */
    ASSERT_OK(start_save(dir, "global_step5", 2, &s2, err));
    ASSERT_EQ(dsl_ckpt_commit(dir, "global_step5", 2, err), DSL_ECHECKPOINT);

    /* the world size the commit expects must match what was written */
    ASSERT_OK(start_save(dir, "global_step7", 1, &s2, err));
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
    assert_loads(dir, NULL, 0, &s2);
    char *old = dsl_xasprintf("%s/global_step5.old", dir);
    struct stat st;
    ASSERT(stat(old, &st) < 0);
    /* a crash between moving the old copy aside and renaming the new one in */
    char *cur = dsl_xasprintf("%s/global_step5", dir);
    ASSERT(rename(cur, old) == 0);
    assert_loads(dir, NULL, 0, &s2);
    free(cur);
    free(old);
    test_tmpdir_remove(dir);
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
    test_tmpdir_remove(dir);
}

TEST_MAIN()
