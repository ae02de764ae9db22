/*
 * dstrain's command line (trainer_settings.c): a flag's value reaches the settings
 * exactly as typed. A path may hold any byte but NUL, quotes, backslashes, TABs and
 * "\u0041" included, and neither the flags nor the config file name may be read as
 * anything but the bytes given.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dslaunch/common/error.h"
#include "dslaunch/train/trainer_settings.h"
#include "test.h"

/* parse "dstrain" + words (NULL-terminated) into s; returns what the parser did */
static int parse_words(struct dsl_train_settings *s, char *err, const char *const *words)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)"dstrain";
    for (; *words && argc < 63; words++)
        argv[argc++] = (char *)*words;
    argv[argc] = NULL;
    return dsl_train_settings_parse(s, argc, argv, err);
}

/* flag value is refused as DSL_ECONFIG; the message in err */
static void refuse(const char *flag, const char *value, char *err)
{
    struct dsl_train_settings s;
    const char *words[] = {flag, value, NULL};
    ASSERT_EQ(parse_words(&s, err, words), DSL_ECONFIG);
    dsl_train_settings_release(&s);
}

/* flag=value must leave field equal to value, byte for byte */
static void check_path_flag(const char *flag, const char *value, size_t field_off)
{
    struct dsl_train_settings s;
    char err[DSL_ERR_LEN] = "";
    const char *words[] = {flag, value, NULL};
    int r = parse_words(&s, err, words);
    if (r != 0)
        fprintf(stderr, "%s '%s': %s\n", flag, value, err);
    ASSERT_EQ(r, 0);
    char *got = *(char **)(void *)((char *)&s + field_off);
    ASSERT(got != NULL);
    ASSERT_STR_EQ(got, value);
    dsl_train_settings_release(&s);
}

#define FIELD_OFF(m) offsetof(struct dsl_train_settings, m)

/* the three cases of the issue, and the other characters JSON gives a meaning to */
static const char *const awkward[] = {
    "c\"d.jsonl", "a\\tb.jsonl", "e\\u0041f.jsonl", "x\\", "\"",
    "q\",\"x\":\"y", "tab\there", "null", "[1]", "  spaced  ", "\\\\server\\share",
};

TEST(metrics_should_take_its_value_byte_for_byte)
{
    for (size_t i = 0; i < sizeof(awkward) / sizeof(awkward[0]); i++)
        check_path_flag("--metrics", awkward[i], FIELD_OFF(cfg.dstrain.metrics));
}

TEST(checkpoint_dir_should_take_its_value_byte_for_byte)
{
    for (size_t i = 0; i < sizeof(awkward) / sizeof(awkward[0]); i++)
        check_path_flag("--checkpoint-dir", awkward[i], FIELD_OFF(cfg.dstrain.checkpoint_dir));
}

TEST(data_path_should_take_its_value_byte_for_byte)
{
    for (size_t i = 0; i < sizeof(awkward) / sizeof(awkward[0]); i++)
        check_path_flag("--data-path", awkward[i], FIELD_OFF(cfg.dstrain.data_path));
}

TEST(save_params_should_take_its_value_byte_for_byte)
{
    for (size_t i = 0; i < sizeof(awkward) / sizeof(awkward[0]); i++)
        check_path_flag("--save-params", awkward[i], FIELD_OFF(params_out));
}

TEST(resume_should_take_its_value_byte_for_byte)
{
    for (size_t i = 0; i < sizeof(awkward) / sizeof(awkward[0]); i++)
        check_path_flag("--resume", awkward[i], FIELD_OFF(cfg.dstrain.resume));
}

TEST(the_equals_spelling_should_take_the_value_byte_for_byte_too)
{
    struct dsl_train_settings s;
    char err[DSL_ERR_LEN] = "";
    const char *words[] = {"--metrics=c\"d.jsonl", NULL};
    ASSERT_OK(parse_words(&s, err, words));
    ASSERT_STR_EQ(s.cfg.dstrain.metrics, "c\"d.jsonl");
    dsl_train_settings_release(&s);
}

TEST(an_empty_path_should_still_be_refused)
{
    char err[DSL_ERR_LEN] = "";
    refuse("--metrics", "", err);
    ASSERT_CONTAINS(err, "command line: expected a non-empty string for 'dstrain.metrics'");
}

TEST(config_should_open_the_file_named_byte_for_byte)
{
    char dir[] = "/tmp/dsl-settings-XXXXXX";
    ASSERT(mkdtemp(dir) != NULL);
    static const char *const names[] = {"q\"uote.json", "back\\slash.json", "e\\u0041f.json"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char path[256];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "w");
        ASSERT(f != NULL);
        fprintf(f, "{\"train_batch_size\": 8, \"dstrain\": {\"metrics\": \"m%zu\"}}\n", i);
        fclose(f);
        struct dsl_train_settings s;
        char err[DSL_ERR_LEN] = "";
        const char *words[] = {"--config", path, NULL};
        int r = parse_words(&s, err, words);
        if (r != 0)
            fprintf(stderr, "--config '%s': %s\n", path, err);
        ASSERT_EQ(r, 0);
        char want[8];
        snprintf(want, sizeof(want), "m%zu", i);
        ASSERT_STR_EQ(s.cfg.dstrain.metrics, want);
        dsl_train_settings_release(&s);
        unlink(path);
    }
    rmdir(dir);
}

TEST(a_list_flag_should_not_splice_its_value_into_json)
{
    struct dsl_train_settings s;
    char err[DSL_ERR_LEN] = "";
    /* once "[%s]": two arrays' worth of text taken as one list */
    refuse("--hidden", "1],[2", err);
    const char *ok[] = {"--hidden", "64,32", NULL};
    ASSERT_OK(parse_words(&s, err, ok));
    ASSERT_EQ(s.cfg.dstrain.nhidden, 2);
    ASSERT_EQ(s.cfg.dstrain.hidden[0], 64);
    ASSERT_EQ(s.cfg.dstrain.hidden[1], 32);
    dsl_train_settings_release(&s);
}

TEST(a_number_flag_should_take_the_whole_word_as_its_number)
{
    struct dsl_train_settings s;
    char err[DSL_ERR_LEN] = "";
    /* once JSON text with whatever followed the number ignored */
    refuse("--steps", "10x", err);
    ASSERT_STR_EQ(err, "command line: expected an integer for 'dstrain.steps', got a string");
    const char *ok[] = {"--steps", "10", "--lr", "3e-4", "--drop-last", "true", NULL};
    ASSERT_OK(parse_words(&s, err, ok));
    ASSERT_EQ(s.cfg.dstrain.steps, 10);
    ASSERT(s.cfg.optimizer.lr == 3e-4);
    ASSERT_EQ(s.cfg.dstrain.drop_last, 1);
    dsl_train_settings_release(&s);
}

TEST(every_key_flag_should_be_one_row_of_the_key_table_and_once)
{
    struct dsl_train_config_flag f, g;
    size_t n = 0;
    for (size_t i = 0; dsl_train_config_flag_at(i, &f); i++, n++) {
        for (size_t j = 0; j < i; j++) {
            ASSERT(dsl_train_config_flag_at(j, &g));
            ASSERT(strcmp(f.name, g.name) != 0);
            ASSERT(strcmp(f.key, g.key) != 0);
        }
        /* the key is the table's: whatever the word, never "unknown config key" */
        struct dsl_train_config cfg;
        char err[DSL_ERR_LEN] = "";
        dsl_train_config_init(&cfg);
        if (dsl_train_config_set(&cfg, f.key, f.bare ? "true" : "x", err) < 0)
            ASSERT(strstr(err, "unknown config key") == NULL);
        dsl_train_config_release(&cfg);
        ASSERT(f.help && f.help[0]);
    }
    ASSERT(n >= 30);
}

/* the last of --save-on-signal and --no-save-on-signal wins, over a file too */
static int save_on_signal_of(const char *const *words)
{
    struct dsl_train_settings s;
    char err[DSL_ERR_LEN] = "";
    int r = parse_words(&s, err, words);
    if (r != 0)
        fprintf(stderr, "%s\n", err);
    ASSERT_EQ(r, 0);
    int v = s.cfg.dstrain.save_on_signal;
    dsl_train_settings_release(&s);
    return v;
}

TEST(no_save_on_signal_should_turn_saving_on_a_stop_signal_off)
{
    const char *dflt[] = {"--checkpoint-dir", "ck", NULL};
    const char *off[] = {"--checkpoint-dir", "ck", "--no-save-on-signal", NULL};
    const char *off_[] = {"--no_save_on_signal", NULL};
    const char *on_off[] = {"--save-on-signal", "--no-save-on-signal", NULL};
    const char *off_on[] = {"--no-save-on-signal", "--save-on-signal", NULL};
    ASSERT_EQ(save_on_signal_of(dflt), -1); /* on by default: a checkpoint dir is set */
    ASSERT_EQ(save_on_signal_of(off), 0);
    ASSERT_EQ(save_on_signal_of(off_), 0);
    ASSERT_EQ(save_on_signal_of(on_off), 0);
    ASSERT_EQ(save_on_signal_of(off_on), 1);

    char path[] = "/tmp/dsl_test_sosXXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    const char *json = "{\"dstrain\": {\"save_on_signal\": true}}";
    ASSERT_EQ(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    const char *file_on_flag_off[] = {"--config", path, "--no-save-on-signal", NULL};
    ASSERT_EQ(save_on_signal_of(file_on_flag_off), 0);
    unlink(path);

    struct dsl_train_settings s;
    char err[DSL_ERR_LEN] = "";
    const char *bad[] = {"--no-save-on-signal=yes", NULL};
    ASSERT(parse_words(&s, err, bad) < 0);
    ASSERT_CONTAINS(err, "option '--no_save_on_signal' takes no value");
    dsl_train_settings_release(&s);
}

TEST(cpu_or_gpu_should_be_decided_once_and_kept)
{
    struct dsl_train_settings s;
    char err[DSL_ERR_LEN] = "";
    const char *tcp[] = {"--backend", "tcp", "--micro-batch", "8", NULL};
    ASSERT_OK(parse_words(&s, err, tcp));
    ASSERT_EQ(s.placed, 0); /* not at parse time: the rank env may still change */
    ASSERT_OK(dsl_train_settings_place(&s, err));
    ASSERT_EQ(s.gpu, 0);
    ASSERT_STR_EQ(dsl_train_settings_backend(&s), "tcp");
    ASSERT_OK(dsl_train_settings_verify(&s, 1, 1, err)); /* keeps the answer */
    ASSERT_EQ(s.gpu, 0);
    dsl_train_settings_release(&s);
    /* nccl is the GPU path, or an error that says why there is none */
    const char *nccl[] = {"--backend", "nccl", "--micro-batch", "8", NULL};
    ASSERT_OK(parse_words(&s, err, nccl));
    int r = dsl_train_settings_place(&s, err);
    if (r == 0) {
        ASSERT_EQ(s.gpu, 1);
        ASSERT_STR_EQ(dsl_train_settings_backend(&s), "nccl");
    } else {
        /* built without CUDA, or no GPU for this rank here (a library, the driver or a
         * device missing: DSL_ENOGPU, dstrain's exit 3) */
        ASSERT(r == DSL_ENOTSUP || r == DSL_ENOGPU);
        ASSERT_CONTAINS(err, "backend 'nccl'");
        ASSERT_EQ(dsl_train_settings_verify(&s, 1, 1, err), r);
    }
    dsl_train_settings_release(&s);
}

/* verify() as on a rank placed on a GPU (s.gpu set by hand: no device needed) */
static void verify_on_gpu(struct dsl_train_settings *s, const char *const *words)
{
    char err[DSL_ERR_LEN] = "";
    ASSERT_OK(parse_words(s, err, words));
    s->placed = 1;
    s->gpu = 1;
    int r = dsl_train_settings_verify(s, 0, 1, err);
    if (r < 0)
        fprintf(stderr, "%s\n", err);
    ASSERT_OK(r);
}

/* DeepSpeed's reduce_bucket_size (5e8) makes a GPT-2 one bucket, reduced after backward:
 * on a GPU the defaults are smaller buckets issued during backward, and whatever the
 * config says wins; the CPU keeps DeepSpeed's defaults (its bits must not move) */
TEST(a_gpu_rank_should_default_to_small_overlapped_buckets_unless_the_config_says)
{
    struct dsl_train_settings s;
    char err[DSL_ERR_LEN] = "";
    const char *plain[] = {"--backend", "tcp", "--micro-batch", "8", NULL};
    ASSERT_OK(parse_words(&s, err, plain));
    ASSERT_OK(dsl_train_settings_verify(&s, 0, 1, err));
    ASSERT_EQ(s.gpu, 0);
    ASSERT_EQ(s.to.bucket_elems, 500000000);
    ASSERT_EQ(s.to.overlap_comm, 0);
    ASSERT_EQ(s.model.seg_max, 500000000);
    dsl_train_settings_release(&s);

    verify_on_gpu(&s, plain);
    ASSERT_EQ(s.to.bucket_elems, DSL_GPU_BUCKET_ELEMS);
    ASSERT_EQ(s.to.overlap_comm, 1);
    ASSERT_EQ(s.model.seg_max, DSL_GPU_BUCKET_ELEMS);
    dsl_train_settings_release(&s);

    const char *given[] = {"--backend", "tcp", "--micro-batch", "8", "--bucket-size",
                           "500000000", "--overlap-comm", "false", NULL};
    verify_on_gpu(&s, given);
    ASSERT_EQ(s.to.bucket_elems, 500000000);
    ASSERT_EQ(s.to.overlap_comm, 0);
    dsl_train_settings_release(&s);

    const char *one[] = {"--backend", "tcp", "--micro-batch", "8", "--bucket-size", "1000",
                         NULL};
    verify_on_gpu(&s, one);
    ASSERT_EQ(s.to.bucket_elems, 1000);
    ASSERT_EQ(s.to.overlap_comm, 1);
    dsl_train_settings_release(&s);
}

/* stage 3 runs the MLP and the GPT on the CPU and on a GPU */
TEST(stage_three_should_take_the_mlp_and_the_gpt_on_the_cpu_and_on_a_gpu)
{
    struct dsl_train_settings s;
    char err[DSL_ERR_LEN] = "";
    const char *mlp[] = {"--backend", "tcp", "--micro-batch", "8", "--zero-stage", "3", NULL};
    verify_on_gpu(&s, mlp);
    ASSERT_EQ(s.to.zero_stage, 3);
    dsl_train_settings_release(&s);
    ASSERT_OK(parse_words(&s, err, mlp));
    ASSERT_OK(dsl_train_settings_verify(&s, 0, 1, err));
    ASSERT_EQ(s.to.zero_stage, 3);
    ASSERT_EQ(s.to.z3_persist, 100000);
    dsl_train_settings_release(&s);
    const char *gpt[] = {"--backend", "tcp", "--micro-batch", "8", "--zero-stage", "3",
                         "--model", "gpt", "--data", "text", NULL};
    ASSERT_OK(parse_words(&s, err, gpt));
    int r = dsl_train_settings_verify(&s, 0, 1, err);
    if (r < 0)
        fprintf(stderr, "%d: %s\n", r, err);
    ASSERT_OK(r);
    ASSERT_EQ(s.to.zero_stage, 3);
    dsl_train_settings_release(&s);
    verify_on_gpu(&s, gpt);
    ASSERT_EQ(s.to.zero_stage, 3);
    dsl_train_settings_release(&s);
}

TEST_MAIN()
