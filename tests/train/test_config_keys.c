/*
 * ds_config.json's keys and messages: every error path with its message, unknown-key
 * and not-implemented warnings, "auto", control characters and positions in messages,
 * duplicate keys, a missing file, and every shipped config in configs/.
 */
#include <dirent.h>
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/train/train_config.h"
#include "test.h"
#include "config_test.h"

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
    const char *json = "{\n"
                       "  \"train_batch_size\": 8,\n"
                       "  \"foo\": 1,\n"
                       "  \"wandb\": {\"enabled\": true},\n"
                       "  \"optimizer\": {\"type\": \"Adam\", \"params\": {\"amsgrad\": true}},\n"
                       "  \"dstrain\": {\"colour\": \"blue\"}\n"
                       "}\n";
    const char *want[] = {"t.json:3:3: unknown key 'foo' (ignored)",
                          "t.json:4:3: DeepSpeed key 'wandb' is not implemented by dstrain and "
                          "is ignored",
                          "t.json:5:44: unknown key 'optimizer.params.amsgrad' (ignored)",
                          "t.json:6:15: unknown key 'dstrain.colour' (ignored)"};
    parse_warnings(&cfg, json, want, 4, 1);
    dsl_train_config_release(&cfg);
}

TEST(deepspeed_keys_dstrain_lacks_should_say_not_implemented_also_when_nested)
{
    struct dsl_train_config cfg;
    const char *json = "{\"train_batch_size\": 8, \"fp16_master_weights_and_grads\": false,\n"
                       " \"zero_optimization\": {\"stage\": 1, \"allgather_partitions\": true,\n"
                       "   \"cpu_offload_params\": false, \"stage3_gather_x\": 1,\n"
                       "   \"overlap_comm\": true},\n"
                       " \"fp16\": {\"enabled\": false, \"auto_cast\": false}}";
    const char *want[] = {"'fp16_master_weights_and_grads' is not implemented",
                          "'zero_optimization.allgather_partitions' is not implemented by "
                          "dstrain and is ignored",
                          "'zero_optimization.cpu_offload_params' is not implemented",
                          "'zero_optimization.stage3_gather_x' is not implemented",
                          "'fp16.auto_cast' is not implemented"};
    parse_warnings(&cfg, json, want, 5, 0);
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
    check_message("{\"gradient_clipping\": \"auto\"}", 0,
                  "t.json: 'gradient_clipping' is \"auto\", which only the HuggingFace "
                  "integration of DeepSpeed fills in: write a value, or leave the key out",
                  0);
    dsl_train_config_init(&cfg);
    ASSERT_EQ(dsl_train_config_set(&cfg, "optimizer.params.lr", "auto", err), DSL_ECONFIG);
    ASSERT_CONTAINS(err, "'optimizer.params.lr' cannot be \"auto\"");
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
    check_message("{\"train_batch_size\": 8, \"\\u001b[2Jx\\n\": 1}", 1,
                  "unknown key '\\x1b[2Jx\\n' (ignored)", 0);
    check_message("{\"train_batch_size\": 8, \"optimizer\": {\"type\": "
                  "\"\\u001b]0;x\\u0007\"}}",
                  0, "unsupported optimizer '\\x1b]0;x\\x07'", 0);
}

TEST(config_should_give_the_position_of_a_key_written_with_escapes)
{
    check_message("{\"train_batch_size\": 8,\n \"fo\\u001bo\": 1}", 1,
                  "t.json:2:2: unknown key 'fo\\x1bo' (ignored)", 1);
    check_message("{\"train_batch_size\": 8,\n \"optimizer\": {\"params\": "
                  "{\"l\\u0072\": \"x\"}}}",
                  0, "t.json:2:27: expected a number for 'optimizer.params.lr', got a string", 1);
}

TEST(a_key_given_twice_in_one_object_should_be_refused_naming_both_lines)
{
    check_message("{\"train_batch_size\": 8,\n \"seed\": 7,\n \"seed\": 8}", 0,
                  "t.json:3:2: duplicate key 'seed' (first at line 2, column 2): keep "
                  "one of them",
                  1);
    check_message("{\"train_batch_size\": 8, \"optimizer\": {\"params\": {\"lr\": 1,\n"
                  "\"lr\": 2}}}",
                  0, "t.json:2:1: duplicate key 'optimizer.params.lr' (first at line 1", 0);
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

TEST_MAIN()
