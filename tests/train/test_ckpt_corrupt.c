/*
 * Broken checkpoints: truncated, flipped, missing, extra and foreign files, edited
 * headers, files of older versions without checksums, and FIFOs in place of files.
 * Each is refused with an error naming the file (and the field), and the older
 * checkpoint beside it still loads.
 */
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
        char err[DSL_ERR_LEN] = "";
        struct state s;
        char *dir = saved_dir(&s, 0.0f, "global_step1", 3, 1);
        ASSERT_OK(save(dir, "global_step2", 3, &s, 2, err));
        char *model = file_in(dir, "global_step2", DSL_CKPT_MODEL_FILE);
        char *sh1 = shard_file(dir, "global_step2", 1);
        long size = test_file_size(model);
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
            test_flip_byte(model, size - 10);
            break;
        case FLIP_SHARD_DATA:
            test_flip_byte(sh1, test_file_size(sh1) - 3);
            break;
        case BAD_HEADER:
            test_flip_byte(model, 9); /* the '"' after '{' */
            break;
        case MISSING_SHARD:
            ASSERT(unlink(sh1) == 0);
            break;
        case EXTRA_SHARD: {
            char *sh3 = shard_file(dir, "global_step2", 3);
            test_copy_file(sh1, sh3);
            free(sh3);
            break;
        }
        case FOREIGN_SHARD: {
            char *old = shard_file(dir, "global_step1", 1);
            test_copy_file(old, sh1);
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
        load_refused(dir, NULL, 0, err);
        ASSERT_CONTAINS(err, corruptions[i].err);
        ASSERT_CONTAINS(err, dir); /* names the file */
        /* the older checkpoint is untouched */
        assert_loads(dir, "global_step1", 0, &s);
        free(model);
        free(sh1);
        test_tmpdir_remove(dir);
    }
}

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
        char err[DSL_ERR_LEN] = "";
        struct state s;
        char *dir = saved_dir(&s, 0.0f, "global_step2", 3, 2);
        static const char *const all[] = {MODEL, SHARD(0), SHARD(1), SHARD(2)};
        for (size_t k = 0; k < 4; k++) {
            if (edits[i].file && strcmp(edits[i].file, all[k]) != 0)
                continue;
            char *p = file_in(dir, "global_step2", all[k]);
            edit_header(p, edits[i].from, edits[i].to);
            free(p);
        }
        load_refused(dir, NULL, 0, err);
        for (int k = 0; k < 3; k++)
            ASSERT_CONTAINS(err, edits[i].err[k]);
        ASSERT_CONTAINS(err, dir);
        test_tmpdir_remove(dir);
    }
}

TEST(checkpoints_of_older_versions_should_load_and_still_be_cross_checked)
{
    char err[DSL_ERR_LEN] = "";
    struct state s;
    struct dsl_ckpt c;
    char *dir = saved_dir(&s, 1.5f, "global_step2", 2, 2);
    ASSERT_OK(dsl_ckpt_load(&c, dir, NULL, 0, err));
    ASSERT_EQ(c.sum, DSL_ST_SUM_SHA256);
    dsl_ckpt_release(&c);
    /* a checksum removed from one file only: refused */
    char *model = file_in(dir, "global_step2", MODEL), *sh0 = shard_file(dir, "global_step2", 0);
    char *sh1 = shard_file(dir, "global_step2", 1);
    strip_sums(sh1);
    load_refused(dir, NULL, 0, err);
    ASSERT_CONTAINS(err, SHARD(1) "' lacks a SHA-256 checksum but the model file");
    /* none in any file: refused, naming the file and the option, unless allowed; then
     * it loads and says which file went unchecked */
    strip_sums(model);
    strip_sums(sh0);
    load_refused(dir, NULL, 0, err);
    ASSERT_CONTAINS(err, "global_step2/" MODEL "' has no checksums");
    ASSERT_CONTAINS(err, "pass --allow-unverified-checkpoint to load it anyway");
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
    load_refused(dir, NULL, DSL_CKPT_ALLOW_UNVERIFIED, err);
    ASSERT_CONTAINS(err, SHARD(0) "': metadata 'step' is '7' but the model file");
    ASSERT(strstr(err, "checksum") == NULL);
    free(model);
    free(sh0);
    free(sh1);
    test_tmpdir_remove(dir);
}

TEST(a_fifo_in_place_of_a_shard_or_latest_should_fail_the_load_at_once)
{
    char err[DSL_ERR_LEN] = "";
    struct state s;
    char *dir = saved_dir(&s, 0.0f, "global_step2", 2, 2);
    char *sh1 = shard_file(dir, "global_step2", 1);
    ASSERT(unlink(sh1) == 0 && mkfifo(sh1, 0644) == 0);
    alarm(60); /* a hang guard: a blocking read of a FIFO without a writer never returns */
    load_refused(dir, NULL, 0, err);
    ASSERT_CONTAINS(err, SHARD(1) "' is not a regular file (a FIFO)");
    char *latest = dsl_xasprintf("%s/latest", dir);
    ASSERT(unlink(latest) == 0 && mkfifo(latest, 0644) == 0);
    load_refused(dir, NULL, 0, err);
    ASSERT_CONTAINS(err, "latest' is not a regular file (a FIFO)");
    alarm(0);
    free(latest);
    free(sh1);
    test_tmpdir_remove(dir);
}

TEST_MAIN()
