/*
 * ds_config.json's batch: the batch triple with DeepSpeed's inference rules, no config
 * at all, command-line overrides finished again, and a resume at another world size.
 */
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/train/train_config.h"
#include "test.h"
#include "config_test.h"

static const struct {
    const char *json;
    int world;
    long train, micro, accum; /* expected; 0 = error */
    const char *err;          /* substring of the error */
} batch_cases[] = {
    /* all three given and consistent */
    {"{\"train_batch_size\": 128, \"train_micro_batch_size_per_gpu\": 64, "
     "\"gradient_accumulation_steps\": 1}", 2, 128, 64, 1, NULL},
    /* train + micro: accumulation = train // micro // world */
    {"{\"train_batch_size\": 256, \"train_micro_batch_size_per_gpu\": 64}", 2, 256, 64, 2, NULL},
    /* train + accumulation: micro = train // world // accum */
    {"{\"train_batch_size\": 256, \"gradient_accumulation_steps\": 2}", 2, 256, 64, 2, NULL},
    /* micro + accumulation: train = micro * accum * world */
    {"{\"train_micro_batch_size_per_gpu\": 32, \"gradient_accumulation_steps\": 4}", 2, 256, 32,
     4, NULL},
    /* only train: accumulation 1 */
    {"{\"train_batch_size\": 128}", 4, 128, 32, 1, NULL},
    /* only micro: accumulation 1 */
    {"{\"train_micro_batch_size_per_gpu\": 16}", 3, 48, 16, 1, NULL},
    /* mismatch of three given numbers shows all four */
    {"{\"train_batch_size\": 100, \"train_micro_batch_size_per_gpu\": 64, "
     "\"gradient_accumulation_steps\": 1}", 2, 0, 0, 0,
     "t.json: batch sizes do not add up: train_batch_size 100 != "
     "train_micro_batch_size_per_gpu 64 x gradient_accumulation_steps 1 x world size 2"},
    /* integer division that does not come out: 130 // 64 // 2 = 1 */
    {"{\"train_batch_size\": 130, \"train_micro_batch_size_per_gpu\": 64}", 2, 0, 0, 0,
     "train_batch_size 130 != train_micro_batch_size_per_gpu 64 x gradient_accumulation_steps "
     "1 x world size 2 (gradient_accumulation_steps inferred)"},
    /* ... or comes out as 0 */
    {"{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 64}", 2, 0, 0, 0,
     "gradient_accumulation_steps 0 x world size 2"},
    {"{\"train_batch_size\": 6, \"gradient_accumulation_steps\": 4}", 2, 0, 0, 0,
     "train_micro_batch_size_per_gpu 0"},
    {"{}", 1, 0, 0, 0,
     "either 'train_batch_size' or 'train_micro_batch_size_per_gpu' must be given"},
    {"{\"gradient_accumulation_steps\": 4}", 1, 0, 0, 0, "either 'train_batch_size'"},
    /* "auto": say what to write */
    {"{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": 64, "
     "\"gradient_accumulation_steps\": 1}", 2, 0, 0, 0,
     "'train_batch_size' is \"auto\", which only the HuggingFace integration of DeepSpeed "
     "fills in: write 128"},
    {"{\"train_batch_size\": 256, \"train_micro_batch_size_per_gpu\": \"auto\", "
     "\"gradient_accumulation_steps\": 2}", 2, 0, 0, 0,
     "'train_micro_batch_size_per_gpu' is \"auto\""},
    {"{\"train_batch_size\": 256, \"train_micro_batch_size_per_gpu\": \"auto\", "
     "\"gradient_accumulation_steps\": 2}", 2, 0, 0, 0, "write 64"},
    {"{\"train_batch_size\": 256, \"train_micro_batch_size_per_gpu\": 32, "
     "\"gradient_accumulation_steps\": \"auto\"}", 4, 0, 0, 0, "write 2"},
    /* zero, negative, fractional, wrong type */
    {"{\"train_micro_batch_size_per_gpu\": 0}", 1, 0, 0, 0,
     "t.json:1:2: 'train_micro_batch_size_per_gpu' out of range: allowed 1..16777216, got '0'"},
    {"{\"train_batch_size\": -8}", 1, 0, 0, 0,
     "'train_batch_size' out of range: allowed 1..16777216, got '-8'"},
    {"{\"train_batch_size\": 64.5}", 1, 0, 0, 0,
     "expected an integer from 1 to 16777216 for 'train_batch_size', got '64.5'"},
    /* huge: the number as written, never an abort or a wrapped value */
    {"{\"train_micro_batch_size_per_gpu\": 4,\n \"gradient_accumulation_steps\": 1e9}", 1, 0,
     0, 0, "t.json:2:2: 'gradient_accumulation_steps' out of range: allowed 1..16777216, got "
     "'1e9'"},
    {"{\"train_batch_size\": 9223372036854775808}", 1, 0, 0, 0,
     "'train_batch_size' out of range: allowed 1..16777216, got '9223372036854775808'"},
    {"{\"train_batch_size\": 1e400}", 1, 0, 0, 0,
     "'train_batch_size' out of range: allowed 1..16777216, got '1e400'"},
    /* each in range, the product not (and no overflow on the way) */
    {"{\"train_micro_batch_size_per_gpu\": 8192, \"gradient_accumulation_steps\": 4096}", 1,
     0, 0, 0, "t.json: global batch out of range: train_micro_batch_size_per_gpu 8192 x "
     "gradient_accumulation_steps 4096 x world size 1 = 33554432 samples per step, allowed "
     "1..16777216"},
    {"{\"train_micro_batch_size_per_gpu\": 16777216, \"gradient_accumulation_steps\": "
     "16777216}", 1048576, 0, 0, 0, "= 295147905179352825856 samples per step"},
    {"{\"train_micro_batch_size_per_gpu\": 16777216}", 2, 0, 0, 0,
     "global batch out of range"},
    {"{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": 16777216, "
     "\"gradient_accumulation_steps\": 16777216}", 1048576, 0, 0, 0,
     "'train_batch_size' is \"auto\""},
    {"{\"train_batch_size\": 16777216, \"train_micro_batch_size_per_gpu\": 16777216, "
     "\"gradient_accumulation_steps\": 16777216}", 1048576, 0, 0, 0,
     "batch sizes do not add up"},
    {"{\"train_batch_size\": 16777216}", 1, 16777216, 16777216, 1, NULL},
    {"{\"train_batch_size\": \"64\"}", 1, 0, 0, 0,
     "expected an integer for 'train_batch_size', got a string"},
    /* null means not given */
    {"{\"train_batch_size\": null, \"train_micro_batch_size_per_gpu\": 8}", 2, 16, 8, 1, NULL},
};

TEST(batch_triple_should_follow_deepspeeds_rules)
{
    for (size_t i = 0; i < sizeof(batch_cases) / sizeof(batch_cases[0]); i++) {
        struct dsl_train_config cfg;
        char err[DSL_ERR_LEN];
        int r = parse(&cfg, batch_cases[i].json, batch_cases[i].world, err);
        fprintf(stderr, "  %s (world %d): %s\n", batch_cases[i].json, batch_cases[i].world,
                r < 0 ? err : "ok");
        if (batch_cases[i].err) {
            ASSERT_EQ(r, DSL_ECONFIG);
            ASSERT_CONTAINS(err, batch_cases[i].err);
        } else {
            ASSERT_OK(r);
            ASSERT_EQ(cfg.train_batch_size, batch_cases[i].train);
            ASSERT_EQ(cfg.train_micro_batch_size_per_gpu, batch_cases[i].micro);
            ASSERT_EQ(cfg.gradient_accumulation_steps, batch_cases[i].accum);
            ASSERT_EQ(cfg.world_size, batch_cases[i].world);
        }
        dsl_train_config_release(&cfg);
    }
}

TEST(no_config_at_all_should_say_so_rather_than_name_a_file)
{
    /* `dstrain --steps 1` or `dslaunch train` without --config */
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    dsl_train_config_init(&cfg);
    ASSERT_EQ(dsl_train_config_finish(&cfg, 1, err), DSL_ECONFIG);
    ASSERT_STR_EQ(err, "no --config given: either 'train_batch_size' or "
                       "'train_micro_batch_size_per_gpu' must be given");
    dsl_train_config_release(&cfg);
}

TEST(command_line_overrides_should_reuse_the_same_checks)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    ASSERT_OK(parse(&cfg, "{\"train_batch_size\": 128, \"train_micro_batch_size_per_gpu\": 64}",
                    0, err));
    ASSERT_OK(dsl_train_config_set(&cfg, "dstrain.epochs", "3", err));
    ASSERT_EQ(cfg.dstrain.epochs, 3);
    ASSERT_OK(dsl_train_config_set(&cfg, "dstrain.backend", "tcp", err)); /* bare word */
    ASSERT_STR_EQ(cfg.dstrain.backend, "tcp");
    ASSERT_OK(dsl_train_config_set(&cfg, "dstrain.model.hidden", "[256,128]", err));
    ASSERT_EQ(cfg.dstrain.nhidden, 2);
    ASSERT_EQ(cfg.dstrain.hidden[1], 128);
    ASSERT_OK(dsl_train_config_set(&cfg, "optimizer.params.lr", "3e-4", err));
    ASSERT(cfg.optimizer.lr == 3e-4);
    ASSERT_OK(dsl_train_config_set(&cfg, "dstrain.checkpoint_dir", "/tmp/ck", err));
    ASSERT_STR_EQ(cfg.dstrain.checkpoint_dir, "/tmp/ck");
    ASSERT_OK(dsl_train_config_set(&cfg, "dstrain.deterministic", "true", err));
    ASSERT_EQ(cfg.dstrain.deterministic, 1);
    ASSERT_OK(dsl_train_config_set(&cfg, "dstrain.save_on_signal", "false", err));
    ASSERT_EQ(cfg.dstrain.save_on_signal, 0);
    ASSERT_OK(dsl_train_config_set(&cfg, "dstrain.save_interval_minutes", "30", err));
    ASSERT(cfg.dstrain.save_interval_minutes == 30.0);
    ASSERT_EQ(dsl_train_config_set(&cfg, "dstrain.save_interval_minutes", "-1", err),
              DSL_ECONFIG);
    ASSERT_CONTAINS(err, "'dstrain.save_interval_minutes' out of range");
    ASSERT_OK(dsl_train_config_set(&cfg, "dstrain.eval_iters", "20", err));
    ASSERT_EQ(cfg.dstrain.eval_iters, 20);
    ASSERT_EQ(dsl_train_config_set(&cfg, "optimizer.params.lr", "fast", err), DSL_ECONFIG);
    ASSERT_STR_EQ(err, "command line: expected a number for 'optimizer.params.lr', got a string");
    /* stage 3 and its keys (DeepSpeed's names and defaults) */
    ASSERT_EQ(cfg.zero.stage3_prefetch_bucket_size, 50000000);
    ASSERT_EQ(cfg.zero.stage3_max_live_parameters, 1000000000);
    ASSERT_EQ(cfg.zero.stage3_param_persistence_threshold, 100000);
    ASSERT_EQ(cfg.zero.stage3_gather_16bit_weights_on_model_save, 0);
    ASSERT_OK(dsl_train_config_set(&cfg, "zero_optimization.stage", "3", err));
    ASSERT_EQ(cfg.zero.stage, 3);
    ASSERT_OK(dsl_train_config_set(&cfg, "zero_optimization.stage3_param_persistence_threshold",
                                   "0", err));
    ASSERT_EQ(cfg.zero.stage3_param_persistence_threshold, 0);
    ASSERT_OK(dsl_train_config_set(&cfg, "zero_optimization.stage", "0", err));
    ASSERT_EQ(dsl_train_config_set(&cfg, "dstrain.nope", "1", err), DSL_ECONFIG);
    ASSERT_STR_EQ(err, "command line: unknown config key 'dstrain.nope'");
    /* finish after overrides, and again after more: resolves from the given values */
    ASSERT_OK(dsl_train_config_finish(&cfg, 2, err));
    ASSERT_EQ(cfg.gradient_accumulation_steps, 1);
    ASSERT_OK(dsl_train_config_set(&cfg, "train_micro_batch_size_per_gpu", "32", err));
    ASSERT_OK(dsl_train_config_finish(&cfg, 2, err));
    ASSERT_EQ(cfg.gradient_accumulation_steps, 2);
    ASSERT_OK(dsl_train_config_finish(&cfg, 1, err));
    ASSERT_EQ(cfg.gradient_accumulation_steps, 4);
    ASSERT_EQ(dsl_train_config_finish(&cfg, 3, err), DSL_ECONFIG);
    dsl_train_config_release(&cfg);
}

TEST(a_resume_at_another_world_should_keep_the_checkpoints_global_batch_or_refuse)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN], note[512];
    /* the shipped configs' shape: micro batch and accumulation, no train_batch_size */
    ASSERT_OK(parse(&cfg, "{\"train_micro_batch_size_per_gpu\": 16, "
                          "\"gradient_accumulation_steps\": 1}", 0, err));
    /* 16 ranks made 256; at 8 the accumulation doubles, the global batch holds */
    ASSERT_OK(dsl_train_config_finish(&cfg, 8, err));
    ASSERT_EQ(cfg.train_batch_size, 128);
    ASSERT_EQ(dsl_train_config_keep_batch(&cfg, 256, 16, "ck/global_step40", note,
                                          sizeof(note), err), 1);
    ASSERT_EQ(cfg.train_batch_size, 256);
    ASSERT_EQ(cfg.gradient_accumulation_steps, 2);
    ASSERT_STR_EQ(note, "keeping the global batch of checkpoint 'ck/global_step40': "
                        "train_batch_size 256 (saved at world size 16) at world size 8: "
                        "gradient_accumulation_steps 1 -> 2 (train_micro_batch_size_per_gpu "
                        "16 x 2 x world size 8)");
    /* growth: 64 at world 4 kept at 8 by accumulating less */
    ASSERT_OK(dsl_train_config_set(&cfg, "gradient_accumulation_steps", "2", err));
    ASSERT_OK(dsl_train_config_finish(&cfg, 8, err));
    ASSERT_EQ(dsl_train_config_keep_batch(&cfg, 128, 4, "ck", note, sizeof(note), err), 1);
    ASSERT_EQ(cfg.gradient_accumulation_steps, 1);
    /* cannot be made: the numbers, the world sizes that work, a micro batch that does */
    ASSERT_OK(dsl_train_config_finish(&cfg, 12, err));
    ASSERT_EQ(dsl_train_config_keep_batch(&cfg, 256, 16, "ck/global_step40", note,
                                          sizeof(note), err), DSL_ECONFIG);
    ASSERT_STR_EQ(err, "checkpoint 'ck/global_step40' was trained with train_batch_size 256 "
                       "at world size 16; at world size 12 with train_micro_batch_size_per_gpu "
                       "16 it cannot be kept: 256 is not a multiple of 16 x 12 = 192; resume "
                       "at a world size that keeps it (world size 1, 2, 4, 8, 16), or set "
                       "'train_batch_size' (--train-batch) to change the global batch on "
                       "purpose");
    ASSERT_OK(dsl_train_config_finish(&cfg, 4, err));
    ASSERT_EQ(dsl_train_config_keep_batch(&cfg, 96, 2, "ck", note, sizeof(note), err),
              DSL_ECONFIG);
    ASSERT_CONTAINS(err, "(world size 1, 2, 3, 6), a micro batch that keeps it "
                         "(--micro-batch 12: 12 x 2 x world size 4)");
    /* nothing to do: the same world, the same batch, an unknown one */
    ASSERT_EQ(dsl_train_config_keep_batch(&cfg, 256, 4, "ck", note, sizeof(note), err), 0);
    ASSERT_EQ(dsl_train_config_keep_batch(&cfg, 128, 2, "ck", note, sizeof(note), err), 0);
    ASSERT_EQ(dsl_train_config_keep_batch(&cfg, 0, 2, "ck", note, sizeof(note), err), 0);
    ASSERT_EQ(cfg.train_batch_size, 128);
    dsl_train_config_release(&cfg);
    /* train_batch_size given: DeepSpeed's rule keeps it (accumulation derived); a
       different one in the checkpoint was changed on purpose, and stays changed */
    ASSERT_OK(parse(&cfg, "{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 8}",
                    0, err));
    ASSERT_OK(dsl_train_config_finish(&cfg, 2, err));
    ASSERT_EQ(cfg.gradient_accumulation_steps, 4);
    ASSERT_EQ(dsl_train_config_keep_batch(&cfg, 128, 4, "ck", note, sizeof(note), err), 0);
    ASSERT_EQ(cfg.train_batch_size, 64);
    dsl_train_config_release(&cfg);
}

TEST_MAIN()
