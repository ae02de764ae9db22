/*
 * ds_config.json's sections reaching their fields: DeepSpeed's defaults, every section,
 * Adam vs AdamW, legacy spellings, the monitors, the model's size keys, the CPU's
 * products and half precision.
 */
#include <string.h>

#include "dslaunch/common/error.h"
#include "dslaunch/train/train_config.h"
#include "test.h"
#include "config_test.h"

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
    check_message("{\"train_batch_size\": 8, \"tensorboard\": {\"output_path\": 3}}", 0,
                  "expected a string for 'tensorboard.output_path', got a number", 0);
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
    check_message("{\"train_batch_size\": 8, \"dstrain\": {\"cpu_half\": true}}", 0,
                  "'dstrain.cpu_half' needs 'bf16.enabled' or 'fp16.enabled'", 0);
}

TEST_MAIN()
