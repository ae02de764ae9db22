/*
 * ds_config.json semantics: the batch triple with DeepSpeed's inference rules, every
 * error path with its message, unknown-key warnings, Adam vs AdamW, command-line
 * overrides, and every shipped config in configs/.
 */
#include <dirent.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/train/train_config.h"
#include "test.h"

static int parse(struct dsl_train_config *cfg, const char *text, int world, char *err)
{
    dsl_train_config_init(cfg);
    err[0] = '\0';
    return dsl_train_config_parse(cfg, "t.json", text, strlen(text), world, err);
}

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

static const struct {
    const char *json;
    const char *err;
} error_cases[] = {
    {"{\n  \"train_batch_size\": 8,\n  \"optimizer\": {\n    \"type\": \"AdamW\",\n"
     "    \"params\": {\"lr\": \"fast\"}\n  }\n}",
     "t.json:5:16: expected a number for 'optimizer.params.lr', got a string"},
    {"{\n  \"train_batch_size\": 8,\n  \"a\": ]\n}", "t.json:3:"},
    {"{\n  \"train_batch_size\": 8,\n  \"a\": ]\n}", "invalid JSON"},
    {"{\"train_batch_size\": 8} x", "t.json:1:25: unexpected text after the JSON value"},
    {"[1, 2]", "t.json: expected a JSON object at the top level"},
    {"", "t.json:1:1: invalid JSON"},
    {"{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 7}}",
     "'zero_optimization.stage' must be 0, 1, 2 or 3, got 7"},
    {"{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
     "\"stage3_max_live_parameters\": 0}}",
     "'zero_optimization.stage3_max_live_parameters' out of range: allowed 1..9007199254740992"},
    {"{\"train_batch_size\": 8, \"zero_optimization\": 2}",
     "expected an object for 'zero_optimization', got a number"},
    {"{\"train_batch_size\": 8, \"zero_optimization\": {\"overlap_comm\": 1}}",
     "expected true or false for 'zero_optimization.overlap_comm', got a number"},
    {"{\"train_batch_size\": 8, \"zero_optimization\": {\"reduce_bucket_size\": 0}}",
     "'zero_optimization.reduce_bucket_size' out of range: allowed 1..9007199254740992, got "
     "'0'"},
    {"{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Lamb\"}}",
     "unsupported optimizer 'Lamb' for 'optimizer.type' (supported: Adam, AdamW, SGD)"},
    {"{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": -1}}}",
     "'optimizer.params.lr' out of range: allowed 0..1000000, got '-1'"},
    {"{\"train_batch_size\": 8, \"optimizer\": {\"params\": {\"lr\": 1e999}}}",
     "t.json:1:50: 'optimizer.params.lr' out of range: allowed 0..1000000, got '1e999'"},
    {"{\"train_batch_size\": 8, \"optimizer\": {\"params\": {\"eps\": -1e-8}}}",
     "'optimizer.params.eps' out of range: allowed 0..1, got '-1e-8'"},
    {"{\"train_batch_size\": 8, \"optimizer\": {\"params\": {\"weight_decay\": -0.1}}}",
     "'optimizer.params.weight_decay' out of range: allowed 0..1000000, got '-0.1'"},
    {"{\"train_batch_size\": 8, \"seed\": -1}",
     "'seed' out of range: allowed 0..9007199254740992, got '-1'"},
    {"{\"train_batch_size\": 8, \"seed\": 1.5}",
     "expected an integer from 0 to 9007199254740992 for 'seed', got '1.5'"},
    {"{\"train_batch_size\": 8, \"steps_per_print\": 9223372036854775808}",
     "'steps_per_print' out of range: allowed 0..9007199254740992, got '9223372036854775808'"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"save_interval\": 1e300}}",
     "'dstrain.save_interval' out of range: allowed 0..9007199254740992, got '1e300'"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"threads\": 5000}}",
     "'dstrain.threads' out of range: allowed 0..4096, got '5000'"},
    {"{\"train_batch_size\": 8, \"fp16\": {\"loss_scale_window\": 0}}",
     "'fp16.loss_scale_window' out of range: allowed 1..9007199254740992, got '0'"},
    {"{\"train_batch_size\": 8, \"fp16\": {\"hysteresis\": 1e10}}",
     "'fp16.hysteresis' out of range: allowed 1..1000000000, got '1e10'"},
    {"{\"train_batch_size\": 8, \"fp16\": {\"min_loss_scale\": 0}}",
     "'fp16.min_loss_scale' out of range: allowed 1e-30..1e+30, got '0'"},
    {"{\"train_batch_size\": 8, \"fp16\": {\"loss_scale\": 1e31}}",
     "'fp16.loss_scale' out of range: allowed 0..1e+30, got '1e31'"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"data\": {\"synthetic\": {\"features\": 1e8}}}}",
     "'dstrain.data.synthetic.features' out of range: allowed 1..10000000, got '1e8'"},
    {"{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
     "{\"warmup_max_lr\": 2e6}}}",
     "'scheduler.params.warmup_max_lr' out of range: allowed 0..1000000, got '2e6'"},

    {"{\"train_batch_size\": 8, \"optimizer\": {\"params\": {\"betas\": [0.9]}}}",
     "expected two numbers [beta1, beta2] for 'optimizer.params.betas'"},
    {"{\"train_batch_size\": 8, \"optimizer\": {\"params\": {\"betas\": [0.9, 1.5]}}}",
     "'optimizer.params.betas' must hold two numbers in [0, 1), got [0.9, 1.5]"},
    {"{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"OneCycle\"}}",
     "unsupported scheduler 'OneCycle' for 'scheduler.type'"},
    {"{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
     "{\"warmup_type\": \"cubic\"}}}",
     "'scheduler.params.warmup_type' must be \"log\" or \"linear\""},
    {"{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
     "{\"warmup_num_steps\": -5}}}",
     "'scheduler.params.warmup_num_steps' out of range: allowed 0..9007199254740992, got '-5'"},
    {"{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}",
     "t.json: 'fp16.enabled' and 'bf16.enabled' cannot both be true"},
    {"{\"train_batch_size\": 8, \"fp16\": {\"enabled\": \"yes\"}}",
     "expected true or false for 'fp16.enabled', got a string"},
    {"{\"train_batch_size\": 8, \"fp16\": {\"initial_scale_power\": 128}}",
     "'fp16.initial_scale_power' out of range: allowed 0..127, got '128'"},
    {"{\"train_batch_size\": 8, \"gradient_clipping\": -1.0}",
     "'gradient_clipping' out of range: allowed 0..1e+30, got '-1.0'"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"backend\": \"mpi\"}}",
     "bad value 'mpi' for 'dstrain.backend' (expected one of \"auto\", \"tcp\", \"nccl\")"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"model\": {\"type\": \"rnn\"}}}",
     "bad value 'rnn' for 'dstrain.model.type' (expected one of \"mlp\", \"gpt\")"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"model\": {\"type\": \"gpt\"}}}",
     "model 'gpt' trains on token data: set 'dstrain.data.dataset' to \"text\""},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"data\": {\"dataset\": \"text\"}}}",
     "dataset 'text' holds tokens, which only 'dstrain.model.type' \"gpt\" trains on"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"model\": {\"type\": \"gpt\", \"dim\": 100, "
     "\"heads\": 3}, \"data\": {\"dataset\": \"text\"}}}",
     "'dstrain.model.heads' (3) must divide 'dstrain.model.dim' (100)"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"model\": {\"type\": \"gpt\", \"vocab\": 100},"
     " \"data\": {\"dataset\": \"text\"}}}",
     "'dstrain.model.vocab' must be at least 256, got 100"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"model\": {\"layers\": 49}}}",
     "'dstrain.model.layers' out of range"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"model\": {\"context\": 0}}}",
     "'dstrain.model.context' out of range"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"model\": {\"hidden\": [128, 0]}}}",
     "'dstrain.model.hidden' out of range: each layer size allowed 1..1000000, got [128, 0]"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"data\": {\"dataset\": \"cifar\"}}}",
     "bad value 'cifar' for 'dstrain.data.dataset' (expected one of \"fashion_mnist\", "
     "\"synthetic\", \"text\", \"tokens\")"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"epochs\": 0, \"steps\": 0}}",
     "nothing to train"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"deterministic\": \"on\"}}",
     "expected true, false or null for 'dstrain.deterministic'"},
    {"{\"train_batch_size\": 8, \"dstrain\": {\"checkpoint_dir\": \"\"}}",
     "expected a non-empty string for 'dstrain.checkpoint_dir'"},
    {"{\"train_batch_size\": 8, \"dstrain\": [1]}", "expected an object for 'dstrain', got an array"},
};

TEST(bad_values_of_known_keys_should_be_errors_naming_key_and_file)
{
    for (size_t i = 0; i < sizeof(error_cases) / sizeof(error_cases[0]); i++) {
        struct dsl_train_config cfg;
        char err[DSL_ERR_LEN];
        int r = parse(&cfg, error_cases[i].json, 2, err);
        fprintf(stderr, "  -> %s\n", err);
        ASSERT_EQ(r, DSL_ECONFIG);
        ASSERT_CONTAINS(err, error_cases[i].err);
        ASSERT(strncmp(err, "t.json", 6) == 0);
        dsl_train_config_release(&cfg);
    }
}

TEST(unknown_keys_should_warn_once_each_and_not_fail)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    const char *json = "{\n"
                       "  \"train_batch_size\": 8,\n"
                       "  \"foo\": 1,\n"
                       "  \"wandb\": {\"enabled\": true},\n"
                       "  \"optimizer\": {\"type\": \"Adam\", \"params\": {\"amsgrad\": true}},\n"
                       "  \"dstrain\": {\"colour\": \"blue\"}\n"
                       "}\n";
    ASSERT_OK(parse(&cfg, json, 1, err));
    ASSERT_EQ(cfg.warnings.nr, 4);
    ASSERT_STR_EQ(cfg.warnings.v[0], "t.json:3:3: unknown key 'foo' (ignored)");
    ASSERT_STR_EQ(cfg.warnings.v[1], "t.json:4:3: DeepSpeed key 'wandb' is not "
                                     "implemented by dstrain and is ignored");
    ASSERT_STR_EQ(cfg.warnings.v[2], "t.json:5:44: unknown key 'optimizer.params.amsgrad' "
                                     "(ignored)");
    ASSERT_STR_EQ(cfg.warnings.v[3], "t.json:6:15: unknown key 'dstrain.colour' (ignored)");
    dsl_train_config_release(&cfg);
}

TEST(deepspeed_keys_dstrain_lacks_should_say_not_implemented_also_when_nested)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    const char *json = "{\"train_batch_size\": 8, \"fp16_master_weights_and_grads\": false,\n"
                       " \"zero_optimization\": {\"stage\": 1, \"allgather_partitions\": true,\n"
                       "   \"cpu_offload\": false, \"stage3_gather_x\": 1, \"overlap_comm\": true},\n"
                       " \"fp16\": {\"enabled\": false, \"auto_cast\": false}}";
    ASSERT_OK(parse(&cfg, json, 1, err));
    ASSERT_EQ(cfg.warnings.nr, 5);
    ASSERT_CONTAINS(cfg.warnings.v[0], "'fp16_master_weights_and_grads' is not implemented");
    ASSERT_CONTAINS(cfg.warnings.v[1], "'zero_optimization.allgather_partitions' is not "
                                       "implemented by dstrain and is ignored");
    ASSERT_CONTAINS(cfg.warnings.v[2], "'zero_optimization.cpu_offload' is not implemented");
    ASSERT_CONTAINS(cfg.warnings.v[3], "'zero_optimization.stage3_gather_x' is not implemented");
    ASSERT_CONTAINS(cfg.warnings.v[4], "'fp16.auto_cast' is not implemented");
    ASSERT_EQ(cfg.zero.overlap_comm, 1);
    dsl_train_config_release(&cfg);
}

TEST(auto_in_any_non_batch_key_should_be_one_error_naming_every_such_key)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    const char *json = "{\"fp16\": {\"enabled\": \"auto\"}, \"gradient_clipping\": \"auto\",\n"
                       " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", "
                       "\"betas\": \"auto\"}}, \"dstrain\": {\"backend\": \"auto\"}}";
    ASSERT_EQ(parse(&cfg, json, 1, err), DSL_ECONFIG);
    ASSERT_STR_EQ(err, "t.json: 'fp16.enabled', 'gradient_clipping', 'optimizer.params.lr' and "
                       "'optimizer.params.betas' are \"auto\", which only the HuggingFace "
                       "integration of DeepSpeed fills in: write a value for each, or leave "
                       "them out for dstrain's default (docs/config.md)");
    dsl_train_config_release(&cfg);
    ASSERT_EQ(parse(&cfg, "{\"gradient_clipping\": \"auto\"}", 1, err), DSL_ECONFIG);
    ASSERT_CONTAINS(err, "t.json: 'gradient_clipping' is \"auto\", which only the HuggingFace "
                         "integration of DeepSpeed fills in: write a value, or leave the key out");
    dsl_train_config_release(&cfg);
    dsl_train_config_init(&cfg);
    ASSERT_EQ(dsl_train_config_set(&cfg, "optimizer.params.lr", "auto", err), DSL_ECONFIG);
    ASSERT_CONTAINS(err, "'optimizer.params.lr' cannot be \"auto\"");
    dsl_train_config_release(&cfg);
}

static const struct {
    const char *optimizer;
    enum dsl_cfg_optim type;
    int adam_w_mode;
} adam_cases[] = {
    /* DeepSpeed: "Adam" means decoupled weight decay unless adam_w_mode is false */
    {"{\"type\": \"Adam\", \"params\": {\"weight_decay\": 0.01}}", DSL_CFG_OPTIM_ADAM, 1},
    {"{\"type\": \"Adam\", \"params\": {\"adam_w_mode\": false}}", DSL_CFG_OPTIM_ADAM, 0},
    {"{\"type\": \"Adam\", \"params\": {\"adam_w_mode\": true}}", DSL_CFG_OPTIM_ADAM, 1},
    /* AdamW is always decoupled */
    {"{\"type\": \"AdamW\", \"params\": {\"adam_w_mode\": false}}", DSL_CFG_OPTIM_ADAMW, 1},
    {"{\"type\": \"adamw\"}", DSL_CFG_OPTIM_ADAMW, 1},
    /* order of keys does not matter */
    {"{\"params\": {\"adam_w_mode\": false}, \"type\": \"Adam\"}", DSL_CFG_OPTIM_ADAM, 0},
    {"{\"type\": \"SGD\", \"params\": {\"lr\": 0.1, \"momentum\": 0.9}}", DSL_CFG_OPTIM_SGD, 0},
};

TEST(adam_and_adamw_should_resolve_weight_decay_mode_like_deepspeed)
{
    for (size_t i = 0; i < sizeof(adam_cases) / sizeof(adam_cases[0]); i++) {
        struct dsl_train_config cfg;
        char err[DSL_ERR_LEN], json[512];
        snprintf(json, sizeof(json), "{\"train_batch_size\": 8, \"optimizer\": %s}",
                 adam_cases[i].optimizer);
        ASSERT_OK(parse(&cfg, json, 1, err));
        ASSERT_EQ(cfg.optimizer.type, adam_cases[i].type);
        ASSERT_EQ(cfg.optimizer.adam_w_mode, adam_cases[i].adam_w_mode);
        dsl_train_config_release(&cfg);
    }
}

TEST(defaults_should_be_deepspeeds)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    ASSERT_OK(parse(&cfg, "{\"train_micro_batch_size_per_gpu\": 4}", 1, err));
    ASSERT_EQ(cfg.optimizer.type, DSL_CFG_OPTIM_ADAM);
    ASSERT(cfg.optimizer.lr == 1e-3 && cfg.optimizer.beta1 == 0.9 &&
           cfg.optimizer.beta2 == 0.999 && cfg.optimizer.eps == 1e-8 &&
           cfg.optimizer.weight_decay == 0.0);
    ASSERT_EQ(cfg.scheduler.type, DSL_SCHED_NONE);
    ASSERT(cfg.gradient_clipping == 0.0 && cfg.gradient_predivide_factor == 1.0);
    ASSERT_EQ(cfg.steps_per_print, 10);
    ASSERT_EQ(cfg.fp16.enabled, 0);
    ASSERT(cfg.fp16.loss_scale == 0.0 && cfg.fp16.min_loss_scale == 1.0);
    ASSERT_EQ(cfg.fp16.initial_scale_power, 16);
    ASSERT_EQ(cfg.fp16.loss_scale_window, 1000);
    ASSERT_EQ(cfg.fp16.hysteresis, 2);
    ASSERT_EQ(cfg.zero.stage, 0);
    ASSERT_EQ(cfg.zero.reduce_bucket_size, 500000000);
    ASSERT_EQ(cfg.zero.allgather_bucket_size, 500000000);
    ASSERT_EQ(cfg.zero.overlap_comm, 0);
    ASSERT_EQ(cfg.zero.contiguous_gradients, 1);
    ASSERT_EQ(cfg.zero.reduce_scatter, 1);
    ASSERT_STR_EQ(cfg.dstrain.model_type, "mlp");
    ASSERT_EQ(cfg.dstrain.nhidden, 2);
    ASSERT_EQ(cfg.dstrain.hidden[0], 1024);
    ASSERT_STR_EQ(cfg.dstrain.dataset, "fashion_mnist");
    ASSERT(cfg.dstrain.data_path == NULL); /* the dataset's own default */
    ASSERT_STR_EQ(cfg.dstrain.backend, "auto");
    ASSERT_EQ(cfg.dstrain.deterministic, -1);
    ASSERT(cfg.dstrain.checkpoint_dir == NULL && cfg.dstrain.resume == NULL);
    /* a stop saves wherever there is a checkpoint_dir; no time interval; whole eval */
    ASSERT_EQ(cfg.dstrain.save_on_signal, -1);
    ASSERT(cfg.dstrain.save_interval_minutes == 0.0);
    ASSERT_EQ(cfg.dstrain.eval_iters, 0);
    ASSERT_EQ(cfg.warnings.nr, 0);
    dsl_train_config_release(&cfg);
}

TEST(every_section_should_reach_its_fields)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    const char *json =
        "{\"train_micro_batch_size_per_gpu\": 32, \"gradient_accumulation_steps\": 2,"
        " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.002, \"betas\": [0.8, 0.99],"
        "   \"eps\": 1e-6, \"weight_decay\": 0.05}},"
        " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_min_lr\": 1e-5,"
        "   \"warmup_max_lr\": 0.003, \"warmup_num_steps\": 100, \"warmup_type\": \"linear\","
        "   \"total_num_steps\": 5000}},"
        " \"gradient_clipping\": 1.0, \"steps_per_print\": 50, \"seed\": 7,"
        " \"wall_clock_breakdown\": true, \"prescale_gradients\": true,"
        " \"gradient_predivide_factor\": 2.0,"
        " \"fp16\": {\"enabled\": true, \"loss_scale\": 0, \"initial_scale_power\": 12,"
        "   \"loss_scale_window\": 500, \"hysteresis\": 3, \"consecutive_hysteresis\": true,"
        "   \"min_loss_scale\": 4},"
        " \"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": 5e7,"
        "   \"allgather_bucket_size\": 2e7, \"overlap_comm\": true, \"contiguous_gradients\": false,"
        "   \"reduce_scatter\": false},"
        " \"dstrain\": {\"model\": {\"type\": \"mlp\", \"hidden\": [256, 128, 64]},"
        "   \"data\": {\"dataset\": \"synthetic\", \"path\": \"/tmp/x\", \"drop_last\": true,"
        "     \"shuffle\": false, \"synthetic\": {\"train_samples\": 1000, \"test_samples\": 100,"
        "     \"features\": 32, \"classes\": 4}},"
        "   \"epochs\": 3, \"steps\": 100, \"eval_interval\": 20, \"checkpoint_dir\": \"ck\","
        "   \"save_interval\": 50, \"save_on_signal\": true, \"deterministic\": false,"
        "   \"backend\": \"tcp\", \"metrics\": \"m.jsonl\", \"resume\": \"latest\", \"threads\": 2}}";
    ASSERT_OK(parse(&cfg, json, 2, err));
    ASSERT_EQ(cfg.train_batch_size, 128);
    ASSERT_EQ(cfg.optimizer.type, DSL_CFG_OPTIM_ADAMW);
    ASSERT(cfg.optimizer.lr == 0.002 && cfg.optimizer.beta1 == 0.8 &&
           cfg.optimizer.beta2 == 0.99 && cfg.optimizer.eps == 1e-6 &&
           cfg.optimizer.weight_decay == 0.05);
    ASSERT_EQ(cfg.scheduler.type, DSL_SCHED_WARMUP_DECAY_LR);
    ASSERT(cfg.scheduler.warmup_min_lr == 1e-5 && cfg.scheduler.warmup_max_lr == 0.003);
    ASSERT_EQ(cfg.scheduler.warmup_max_lr_set, 1);
    ASSERT_EQ(cfg.scheduler.warmup_num_steps, 100);
    ASSERT_EQ(cfg.scheduler.warmup_type, DSL_WARMUP_LINEAR);
    ASSERT_EQ(cfg.scheduler.total_num_steps, 5000);
    ASSERT(cfg.gradient_clipping == 1.0 && cfg.gradient_predivide_factor == 2.0);
    ASSERT_EQ(cfg.steps_per_print, 50);
    ASSERT_EQ(cfg.seed, 7);
    ASSERT_EQ(cfg.wall_clock_breakdown, 1);
    ASSERT_EQ(cfg.prescale_gradients, 1);
    ASSERT_EQ(cfg.fp16.enabled, 1);
    ASSERT_EQ(cfg.fp16.initial_scale_power, 12);
    ASSERT_EQ(cfg.fp16.loss_scale_window, 500);
    ASSERT_EQ(cfg.fp16.hysteresis, 3);
    ASSERT_EQ(cfg.fp16.consecutive_hysteresis, 1);
    ASSERT(cfg.fp16.min_loss_scale == 4.0);
    ASSERT_EQ(cfg.zero.stage, 2);
    ASSERT_EQ(cfg.zero.reduce_bucket_size, 50000000);
    ASSERT_EQ(cfg.zero.allgather_bucket_size, 20000000);
    ASSERT_EQ(cfg.zero.overlap_comm, 1);
    ASSERT_EQ(cfg.zero.contiguous_gradients, 0);
    ASSERT_EQ(cfg.zero.reduce_scatter, 0);
    struct dsl_dstrain_config *d = &cfg.dstrain;
    ASSERT_EQ(d->nhidden, 3);
    ASSERT_EQ(d->hidden[2], 64);
    ASSERT_STR_EQ(d->dataset, "synthetic");
    ASSERT_STR_EQ(d->data_path, "/tmp/x");
    ASSERT_EQ(d->drop_last, 1);
    ASSERT_EQ(d->shuffle, 0);
    ASSERT_EQ(d->synthetic_train, 1000);
    ASSERT_EQ(d->synthetic_test, 100);
    ASSERT_EQ(d->synthetic_features, 32);
    ASSERT_EQ(d->synthetic_classes, 4);
    ASSERT_EQ(d->epochs, 3);
    ASSERT_EQ(d->steps, 100);
    ASSERT_EQ(d->eval_interval, 20);
    ASSERT_STR_EQ(d->checkpoint_dir, "ck");
    ASSERT_EQ(d->save_interval, 50);
    ASSERT_EQ(d->save_on_signal, 1);
    ASSERT_EQ(d->deterministic, 0);
    ASSERT_STR_EQ(d->backend, "tcp");
    ASSERT_STR_EQ(d->metrics, "m.jsonl");
    ASSERT_STR_EQ(d->resume, "latest");
    ASSERT_EQ(d->threads, 2);
    ASSERT_EQ(cfg.warnings.nr, 0);
    dsl_train_config_release(&cfg);
}

TEST(legacy_spellings_should_be_accepted)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    ASSERT_OK(parse(&cfg, "{\"train_batch_size\": 8, \"zero_optimization\": true, "
                          "\"bfloat16\": {\"enabled\": true}}", 1, err));
    ASSERT_EQ(cfg.zero.stage, 1);
    ASSERT_EQ(cfg.bf16, 1);
    dsl_train_config_release(&cfg);
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

TEST(deepspeeds_monitor_sections_should_be_read_with_deepspeeds_defaults)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    ASSERT_OK(parse(&cfg, "{\"train_batch_size\": 8, \"csv_monitor\": {\"enabled\": true, "
                          "\"output_path\": \"\", \"job_name\": \"run1\"}, "
                          "\"tensorboard\": {\"enabled\": true, \"output_path\": \"logs/\"}}",
                    1, err));
    ASSERT_EQ(cfg.warnings.nr, 0); /* implemented now: no "not implemented" warning */
    ASSERT_EQ(cfg.csv_monitor.enabled, 1);
    ASSERT_STR_EQ(cfg.csv_monitor.output_path, ""); /* DeepSpeed's default: the cwd */
    ASSERT_STR_EQ(cfg.csv_monitor.job_name, "run1");
    ASSERT_EQ(cfg.tensorboard.enabled, 1);
    ASSERT_STR_EQ(cfg.tensorboard.output_path, "logs/");
    ASSERT_STR_EQ(cfg.tensorboard.job_name, "DeepSpeedJobName");
    dsl_train_config_release(&cfg);
    ASSERT_EQ(parse(&cfg, "{\"train_batch_size\": 8, \"tensorboard\": {\"output_path\": 3}}",
                    1, err), DSL_ECONFIG);
    ASSERT_CONTAINS(err, "expected a string for 'tensorboard.output_path', got a number");
    dsl_train_config_release(&cfg);
}

TEST(size_keys_given_should_be_recorded_per_model_so_that_unused_ones_can_be_named)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    ASSERT_OK(parse(&cfg, "{\"train_batch_size\": 8, \"dstrain\": {\"model\": {\"type\": "
                          "\"gpt\"}, \"data\": {\"dataset\": \"text\"}}}",
                    1, err));
    ASSERT_EQ(cfg.given.model, 0u); /* the type alone sizes nothing */
    ASSERT_OK(dsl_train_config_set(&cfg, "dstrain.model.hidden", "[64]", err));
    ASSERT_EQ(cfg.given.model, DSL_CFG_GIVEN_MLP);
    dsl_train_config_release(&cfg);
    ASSERT_OK(parse(&cfg, "{\"train_batch_size\": 8, \"dstrain\": {\"model\": {\"layers\": 2, "
                          "\"hidden\": [32]}}}",
                    1, err));
    ASSERT_EQ(cfg.given.model, DSL_CFG_GIVEN_MLP | DSL_CFG_GIVEN_GPT);
    dsl_train_config_release(&cfg);
    /* the command line's cross-field errors are the command line's, not a missing file's */
    dsl_train_config_init(&cfg);
    ASSERT_OK(dsl_train_config_set(&cfg, "train_batch_size", "8", err));
    ASSERT_OK(dsl_train_config_set(&cfg, "dstrain.model.type", "gpt", err));
    ASSERT_OK(dsl_train_config_set(&cfg, "dstrain.data.dataset", "text", err));
    ASSERT_OK(dsl_train_config_set(&cfg, "dstrain.model.dim", "30", err));
    ASSERT_EQ(cfg.given.model, DSL_CFG_GIVEN_GPT);
    ASSERT_EQ(dsl_train_config_finish(&cfg, 1, err), DSL_ECONFIG);
    ASSERT_STR_EQ(err, "command line: 'dstrain.model.heads' (4) must divide 'dstrain.model.dim' "
                       "(30): each head has dim / heads channels");
    dsl_train_config_release(&cfg);
}

TEST(cpu_gemm_should_default_to_fp32_and_take_only_fp32_or_bf16)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    ASSERT_OK(parse(&cfg, "{\"train_batch_size\": 8}", 1, err));
    ASSERT_STR_EQ(cfg.dstrain.cpu_gemm, "fp32");
    ASSERT_OK(dsl_train_config_set(&cfg, "dstrain.cpu_gemm", "bf16", err));
    ASSERT_STR_EQ(cfg.dstrain.cpu_gemm, "bf16");
    ASSERT_EQ(dsl_train_config_set(&cfg, "dstrain.cpu_gemm", "tf32", err), DSL_ECONFIG);
    ASSERT_STR_EQ(err, "command line: bad value 'tf32' for 'dstrain.cpu_gemm' (expected one of "
                       "\"fp32\", \"bf16\")");
    dsl_train_config_release(&cfg);
}

TEST(half_precision_on_the_cpu_should_compute_in_fp32_with_a_warning)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    const char *warn;
    ASSERT_OK(parse(&cfg, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true}}", 1, err));
    ASSERT_EQ(dsl_train_config_precision(&cfg, 0, &warn), DSL_PREC_FP32);
    ASSERT_STR_EQ(warn, "fp16 on the CPU: computing in fp32, with DeepSpeed's dynamic loss "
                        "scaling");
    ASSERT_EQ(dsl_train_config_precision(&cfg, 1, &warn), DSL_PREC_FP16);
    ASSERT(warn == NULL);
    dsl_train_config_release(&cfg);
    ASSERT_OK(parse(&cfg, "{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true}}", 1, err));
    ASSERT_EQ(dsl_train_config_precision(&cfg, 0, &warn), DSL_PREC_FP32);
    ASSERT_CONTAINS(warn, "bf16.enabled is ignored on the CPU");
    ASSERT_EQ(dsl_train_config_precision(&cfg, 1, &warn), DSL_PREC_BF16);
    dsl_train_config_release(&cfg);
    ASSERT_OK(parse(&cfg, "{\"train_batch_size\": 8}", 1, err));
    ASSERT_EQ(dsl_train_config_precision(&cfg, 0, &warn), DSL_PREC_FP32);
    ASSERT(warn == NULL);
    dsl_train_config_release(&cfg);
}

TEST(cpu_half_should_give_the_cpu_mixed_precision_and_need_a_16_bit_type)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    const char *warn;
    ASSERT_OK(parse(&cfg,
                    "{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true},"
                    " \"dstrain\": {\"cpu_half\": true}}",
                    1, err));
    ASSERT_EQ(dsl_train_config_precision(&cfg, 0, &warn), DSL_PREC_BF16);
    ASSERT_CONTAINS(warn, "bf16 parameters and gradients, fp32 arithmetic and master weights");
    ASSERT_EQ(dsl_train_config_precision(&cfg, 1, &warn), DSL_PREC_BF16);
    ASSERT(warn == NULL);
    dsl_train_config_release(&cfg);
    ASSERT_OK(parse(&cfg,
                    "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true},"
                    " \"dstrain\": {\"cpu_half\": true}}",
                    1, err));
    ASSERT_EQ(dsl_train_config_precision(&cfg, 0, &warn), DSL_PREC_FP16);
    ASSERT_CONTAINS(warn, "fp16 parameters and gradients");
    dsl_train_config_release(&cfg);
    ASSERT_EQ(parse(&cfg, "{\"train_batch_size\": 8, \"dstrain\": {\"cpu_half\": true}}", 1,
                    err),
              DSL_ECONFIG);
    ASSERT_CONTAINS(err, "'dstrain.cpu_half' needs 'bf16.enabled' or 'fp16.enabled'");
    dsl_train_config_release(&cfg);
}

TEST(load_should_name_a_missing_file)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    dsl_train_config_init(&cfg);
    ASSERT_ERR(dsl_train_config_load(&cfg, "/nonexistent/ds.json", 1, err));
    ASSERT_STR_EQ(err, "cannot open config '/nonexistent/ds.json': No such file or directory");
    dsl_train_config_release(&cfg);
}

TEST(every_shipped_config_should_load_without_warnings)
{
    DIR *d = opendir(DSL_CONFIGS_DIR);
    struct dirent *e;
    int n = 0;
    ASSERT(d != NULL);
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        for (int world = 1; world <= 4; world *= 2) {
            struct dsl_train_config cfg;
            char err[DSL_ERR_LEN], path[1024];
            snprintf(path, sizeof(path), "%s/%s", DSL_CONFIGS_DIR, e->d_name);
            dsl_train_config_init(&cfg);
            int r = dsl_train_config_load(&cfg, path, world, err);
            fprintf(stderr, "  %s at world %d: %s\n", e->d_name, world, r < 0 ? err : "ok");
            ASSERT_OK(r);
            for (size_t i = 0; i < cfg.warnings.nr; i++)
                fprintf(stderr, "  warning: %s\n", cfg.warnings.v[i]);
            ASSERT_EQ(cfg.warnings.nr, 0);
            dsl_train_config_release(&cfg);
        }
        n++;
    }
    closedir(d);
    ASSERT(n >= 5);
}

TEST(config_should_escape_control_characters_in_warnings_and_errors)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    ASSERT_OK(parse(&cfg, "{\"train_batch_size\": 8, \"\\u001b[2Jx\\n\": 1}", 1, err));
    ASSERT_EQ(cfg.warnings.nr, 1);
    ASSERT_CONTAINS(cfg.warnings.v[0], "unknown key '\\x1b[2Jx\\n' (ignored)");
    dsl_train_config_release(&cfg);
    ASSERT_EQ(parse(&cfg, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": "
                          "\"\\u001b]0;x\\u0007\"}}", 1, err), DSL_ECONFIG);
    ASSERT_CONTAINS(err, "unsupported optimizer '\\x1b]0;x\\x07'");
    dsl_train_config_release(&cfg);
}

TEST(config_should_give_the_position_of_a_key_written_with_escapes)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    ASSERT_OK(parse(&cfg, "{\"train_batch_size\": 8,\n \"fo\\u001bo\": 1}", 1, err));
    ASSERT_EQ(cfg.warnings.nr, 1);
    ASSERT_STR_EQ(cfg.warnings.v[0], "t.json:2:2: unknown key 'fo\\x1bo' (ignored)");
    dsl_train_config_release(&cfg);
    ASSERT_EQ(parse(&cfg, "{\"train_batch_size\": 8,\n \"optimizer\": {\"params\": "
                          "{\"l\\u0072\": \"x\"}}}", 1, err), DSL_ECONFIG);
    ASSERT_STR_EQ(err, "t.json:2:27: expected a number for 'optimizer.params.lr', got a string");
    dsl_train_config_release(&cfg);
}

TEST(a_key_given_twice_in_one_object_should_be_refused_naming_both_lines)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    ASSERT_EQ(parse(&cfg, "{\"train_batch_size\": 8,\n \"seed\": 7,\n \"seed\": 8}", 1, err),
              DSL_ECONFIG);
    ASSERT_STR_EQ(err, "t.json:3:2: duplicate key 'seed' (first at line 2, column 2): keep "
                       "one of them");
    dsl_train_config_release(&cfg);
    ASSERT_EQ(parse(&cfg, "{\"train_batch_size\": 8, \"optimizer\": {\"params\": {\"lr\": 1,\n"
                          "\"lr\": 2}}}", 1, err), DSL_ECONFIG);
    ASSERT_CONTAINS(err, "t.json:2:1: duplicate key 'optimizer.params.lr' (first at line 1");
    dsl_train_config_release(&cfg);
}

TEST(the_same_key_in_two_objects_should_not_be_a_duplicate)
{
    struct dsl_train_config cfg;
    char err[DSL_ERR_LEN];
    /* "type" in optimizer and scheduler; "x" in two objects of one list */
    ASSERT_OK(parse(&cfg, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\"}, "
                          "\"scheduler\": {\"type\": \"WarmupLR\"}, "
                          "\"unknown_list\": [{\"x\": 1}, {\"x\": 2}]}", 1, err));
    dsl_train_config_release(&cfg);
}

int main(int argc, char **argv)
{
    return RUN_TESTS(argc, argv);
}
