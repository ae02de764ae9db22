/*
 * Checkpoint integrity (issue 30, item 8): a save with a non-finite value is refused
 * and `latest` kept; a checkpoint with one (checksummed or not) is refused naming the
 * tensor and the index; sparse files that claim a terabyte are refused before any
 * allocation; and stale `.partial` directories neither break a save nor are loaded.
 */
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_fixture.h"
#include "dslaunch/common/error.h"
#include "dslaunch/common/file.h"
#include "dslaunch/common/xalloc.h"
#include "test.h"
#include "test_fs.h"

/* Write a save's files as the trainer does and put them in place WITHOUT the commit's
 * validation, as a checkpoint edited after its save would be: then point latest at it. */
static void place_unvalidated(const char *dir, const char *tag, const struct state *s)
{
    char err[DSL_ERR_LEN];
    ASSERT_OK(start_save(dir, tag, 2, s, err));
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
    char err[DSL_ERR_LEN];
    struct state s, bad;
    char *dir = saved_dir(&s, 0.0f, "global_step4", 2, 4);
    fill(&bad, 1.0f);
    bad.p[13] = NAN; /* layers.0.bias[1] */
    ASSERT_EQ(save(dir, "global_step8", 2, &bad, 8, err), DSL_ECHECKPOINT);
    fprintf(stderr, "  -> %s\n", err);
    ASSERT_CONTAINS(err, "parameter 'layers.0.bias' element [1] is nan");
    ASSERT_CONTAINS(err, "the training has diverged; nothing was saved");
    assert_latest(dir, "global_step4");
    char *fin = dsl_xasprintf("%s/global_step8", dir);
    struct stat st;
    ASSERT(stat(fin, &st) < 0);
    /* the trainer gives the save up on every rank and removes its partial directory */
    dsl_ckpt_abort(dir, "global_step8");
    char *part = dsl_xasprintf("%s/global_step8.partial", dir);
    ASSERT(stat(part, &st) < 0);
    free(part);
    free(fin);
    test_tmpdir_remove(dir);
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
        load_refused(dir, NULL, flags[i], err);
        ASSERT_CONTAINS(err, "global_step3/" MODEL "': parameter 'layers.1.weight' element "
                             "[0, 2] is -inf (not finite: 1 of its 6 elements)");
        ASSERT_CONTAINS(err, "load an earlier checkpoint by its tag instead");
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
    load_refused(dir, NULL, 0, err);
    ASSERT_CONTAINS(err, SHARD(1) "': optimizer state 'exp_avg_sq' of parameter "
                                  "'layers.1.weight' element [1, 2] (flat element 20) is nan "
                                  "(not finite: 2 of the shard's 11 elements)");
    /* finite again: loads, bit for bit */
    fill(&s, 0.5f);
    place_unvalidated(dir, "global_step5", &s);
    assert_loads(dir, NULL, 0, &s);
    free(out);
    free(sub);
    test_tmpdir_remove(dir);
}

TEST(a_checkpoint_without_checksums_and_with_a_nan_should_be_refused_with_what_to_do)
{
    /* the case: every checksum cut out, a nan written into the data */
    char err[DSL_ERR_LEN];
    struct state s;
    char *dir = saved_dir(&s, 0.5f, "global_step40", 1, 40);
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
    load_refused(dir, NULL, 0, err);
    ASSERT_CONTAINS(err, "checkpoint file '");
    ASSERT_CONTAINS(err, "global_step40/" MODEL "' has no checksums");
    ASSERT_CONTAINS(err, "--allow-unverified-checkpoint");
    load_refused(dir, NULL, DSL_CKPT_ALLOW_UNVERIFIED, err);
    ASSERT_CONTAINS(err, "parameter 'layers.0.weight' element [0, 2] is nan");
    free(model);
    free(sh0);
    test_tmpdir_remove(dir);
}

TEST(a_sparse_terabyte_file_should_be_refused_from_its_header_before_any_allocation)
{
    char err[DSL_ERR_LEN];
    struct state s;
    struct dsl_ckpt c;
    char *dir = saved_dir(&s, 0.5f, "global_step2", 2, 2);
    static const char *const which[] = {MODEL, SHARD(1)};
    for (size_t i = 0; i < 2; i++) {
        char *p = file_in(dir, "global_step2", which[i]), *keep = dsl_xasprintf("%s/keep", dir);
        test_copy_file(p, keep);
        /* a terabyte of holes after the real file (a smaller one where the filesystem
           cannot hold that size): the header still describes the original bytes */
        if (truncate(p, (off_t)1 << 40) != 0)
            ASSERT(truncate(p, (off_t)1 << 34) == 0);
        load_refused(dir, NULL, 0, err);
        ASSERT_CONTAINS(err, which[i]);
        ASSERT_CONTAINS(err, "bytes of data but the tensors cover");
        ASSERT_CONTAINS(err, "bytes the header does not describe");
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
            load_refused(dir, NULL, 0, err);
            ASSERT_CONTAINS(err, MODEL "' has no checksums");
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
    load_refused(dir, NULL, 0, err);
    ASSERT_CONTAINS(err, "bad header length 2147483648");
    free(p);
    test_tmpdir_remove(dir);
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
    ASSERT_OK(start_save(dir, "global_step9", 1, &s, err));
    ASSERT_OK(write_shard(dir, "global_step9", 0, 1, 0, NUMEL, &s, err));
    load_refused(dir, "global_step9.partial", 0, err);
    ASSERT_CONTAINS(err, "'global_step9.partial' in '");
    ASSERT_CONTAINS(err, "is not a checkpoint: a '.partial' directory is a save that did not "
                         "finish");
    ASSERT_EQ(dsl_ckpt_load_params(&c, dir, "global_step5.old", 0, err), DSL_ECHECKPOINT);
    ASSERT_CONTAINS(err, "is not a checkpoint");
    dsl_ckpt_release(&c);
    /* ... nor through latest */
    char *latest = dsl_xasprintf("%s/latest", dir);
    f = fopen(latest, "w");
    fputs("global_step9.partial\n", f);
    fclose(f);
    load_refused(dir, NULL, 0, err);
    ASSERT_CONTAINS(err, "names 'global_step9.partial', the directory of a save that did not "
                         "finish");
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
    free(victim);
    test_tmpdir_remove(outside);
    test_tmpdir_remove(dir);
}

TEST_MAIN()
