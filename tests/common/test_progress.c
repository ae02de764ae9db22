/* Unit tests of the progress record: its layout, the writer's stores, the reader. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/common/progress.h"
#include "test.h"

static char *temp_file(size_t size)
{
    char *path = strdup("/tmp/dsl_progress_test.XXXXXX");
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    ASSERT(ftruncate(fd, (off_t)size) == 0);
    close(fd);
    return path;
}

static void write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_TRUNC);
    ASSERT(fd >= 0);
    ASSERT(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
}

TEST(record_should_be_64_bytes_with_fixed_offsets)
{
    /* the layout is the format: a reader of another build must agree */
    ASSERT_EQ(sizeof(struct dsl_progress_rec), 64);
    ASSERT_EQ(offsetof(struct dsl_progress_rec, magic), 0);
    ASSERT_EQ(offsetof(struct dsl_progress_rec, version), 4);
    ASSERT_EQ(offsetof(struct dsl_progress_rec, step), 8);
    ASSERT_EQ(offsetof(struct dsl_progress_rec, coll), 16);
    ASSERT_EQ(offsetof(struct dsl_progress_rec, beat), 24);
    ASSERT_EQ(offsetof(struct dsl_progress_rec, phase), 32);
}

TEST(phase_should_read_back_and_an_unknown_one_should_read_as_none)
{
    char *path = temp_file(DSL_PROGRESS_FILE_SIZE);
    struct dsl_progress_rec *rec;
    struct dsl_progress_view v;
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_progress_attach(path, &rec, err));
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT_EQ(v.phase, DSL_PROGRESS_PHASE_NONE);
    uint64_t h0 = v.hash;
    dsl_progress_set_phase(rec, DSL_PROGRESS_PHASE_SAVING);
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT_EQ(v.phase, DSL_PROGRESS_PHASE_SAVING);
    ASSERT(v.hash != h0); /* entering a phase is a change */
    ASSERT_STR_EQ(dsl_progress_phase_name(v.phase), "saving a checkpoint");
    ASSERT_STR_EQ(dsl_progress_phase_name(DSL_PROGRESS_PHASE_LOADING), "loading a checkpoint");
    ASSERT(dsl_progress_phase_name(DSL_PROGRESS_PHASE_NONE) == NULL);
    atomic_store(&rec->phase, 77); /* a newer writer's phase this reader does not know */
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT_EQ(v.phase, DSL_PROGRESS_PHASE_NONE);
    unlink(path);
    free(path);
}

TEST(attached_record_should_read_back_step_and_collective)
{
    char *path = temp_file(DSL_PROGRESS_FILE_SIZE);
    struct dsl_progress_view v;
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT_EQ(v.form, DSL_PROGRESS_EMPTY); /* zeros: nothing written yet */

    struct dsl_progress_rec *rec;
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_progress_attach(path, &rec, err));
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT_EQ(v.form, DSL_PROGRESS_RECORD);
    ASSERT_EQ(v.coll_seq, 0);
    uint64_t h0 = v.hash;

    dsl_progress_step(rec, 41);
    dsl_progress_coll(rec, 1582, DSL_PROGRESS_ALLREDUCE, 1);
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT_EQ(v.form, DSL_PROGRESS_RECORD);
    ASSERT(v.has_step);
    ASSERT_EQ(v.step, 41);
    ASSERT_EQ(v.coll_seq, 1582);
    ASSERT_EQ(v.coll_kind, DSL_PROGRESS_ALLREDUCE);
    ASSERT_EQ(v.in_coll, 1);
    ASSERT(v.hash != h0);

    uint64_t h1 = v.hash;
    dsl_progress_coll(rec, 1582, DSL_PROGRESS_ALLREDUCE, 0); /* left it: a change */
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT_EQ(v.in_coll, 0);
    ASSERT(v.hash != h1);
    uint64_t h2 = v.hash;
    ASSERT_OK(dsl_progress_read_file(path, &v)); /* no store: the same */
    ASSERT_EQ(v.hash, h2);
    dsl_progress_beat(rec);
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT_EQ(v.beat, 1);
    ASSERT(v.hash != h2);
    ASSERT_STR_EQ(dsl_progress_coll_name(v.coll_kind), "allreduce");
    ASSERT_STR_EQ(dsl_progress_coll_name(DSL_PROGRESS_REDUCE_SCATTER), "reduce_scatter");
    ASSERT_STR_EQ(dsl_progress_coll_name(99), "collective");
    unlink(path);
    free(path);
}

TEST(attach_should_grow_a_short_file_and_reject_a_missing_one)
{
    char *path = temp_file(0);
    struct dsl_progress_rec *rec;
    char err[DSL_ERR_LEN];
    ASSERT_OK(dsl_progress_attach(path, &rec, err));
    dsl_progress_step(rec, 7);
    struct dsl_progress_view v;
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT_EQ(v.form, DSL_PROGRESS_RECORD);
    ASSERT_EQ(v.step, 7);
    unlink(path);
    ASSERT_ERR(dsl_progress_attach(path, &rec, err));
    ASSERT_CONTAINS(err, "progress file");
    ASSERT_ERR(dsl_progress_read_file(path, &v));
    free(path);
}

TEST(text_should_count_as_progress_and_give_its_step)
{
    char *path = temp_file(DSL_PROGRESS_FILE_SIZE);
    struct dsl_progress_view v;
    write_file(path, "step 12\n");
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT_EQ(v.form, DSL_PROGRESS_TEXT);
    ASSERT(v.has_step);
    ASSERT_EQ(v.step, 12);
    ASSERT_STR_EQ(v.text, "step 12");
    uint64_t h = v.hash;
    write_file(path, "step 13\n");
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT(v.hash != h);
    ASSERT_EQ(v.step, 13);
    write_file(path, "epoch 1\nStep: 99\n\n");
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT_EQ(v.step, 99);
    write_file(path, "1500");
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT_EQ(v.step, 1500);
    write_file(path, "loading shards\n");
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT_EQ(v.form, DSL_PROGRESS_TEXT);
    ASSERT(!v.has_step);
    ASSERT_STR_EQ(v.text, "loading shards");
    write_file(path, ""); /* a writer between truncating and writing: no news */
    ASSERT_OK(dsl_progress_read_file(path, &v));
    ASSERT_EQ(v.form, DSL_PROGRESS_EMPTY);
    unlink(path);
    free(path);
}

TEST(parse_should_take_any_bytes)
{
    struct dsl_progress_view v;
    unsigned char buf[128];
    uint64_t s = 1;
    for (int round = 0; round < 2000; round++) {
        size_t n = dsl_test_rng(&s) % sizeof(buf);
        for (size_t i = 0; i < n; i++)
            buf[i] = (unsigned char)dsl_test_rng(&s);
        if (round % 3 == 0 && n >= 8) { /* the magic with a wrong or right version */
            uint32_t m = DSL_PROGRESS_MAGIC, ver = (uint32_t)(round % 2);
            memcpy(buf, &m, 4);
            memcpy(buf + 4, &ver, 4);
        }
        dsl_progress_parse(buf, n, &v);
        ASSERT(strlen(v.text) < sizeof(v.text));
        ASSERT(v.coll_kind >= 0 && v.coll_kind < 128);
    }
    /* the magic in a buffer shorter than a record is text, not a record */
    uint32_t m = DSL_PROGRESS_MAGIC, ver = DSL_PROGRESS_VERSION;
    memset(buf, 'x', sizeof(buf));
    memcpy(buf, &m, 4);
    memcpy(buf + 4, &ver, 4);
    dsl_progress_parse(buf, 32, &v);
    ASSERT_EQ(v.form, DSL_PROGRESS_TEXT);
    dsl_progress_parse(buf, 64, &v);
    ASSERT_EQ(v.form, DSL_PROGRESS_RECORD);
}

TEST_MAIN()
