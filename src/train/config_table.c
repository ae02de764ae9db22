/*
 * ds_config.json's key table (config_internal.h): one row per setting, with its type,
 * place in struct dsl_train_config, bounds or check, default, dstrain's flag and the
 * words that --help and docs/config.md's key tables show (config_doc.c prints those;
 * a test fails when the docs differ). The DeepSpeed keys dstrain knows of but ignores.
 * A table, long by nature: a key is one row here.
 */
#include <stddef.h>
#include <string.h>

#include "config_internal.h"
#include "dslaunch/model/model.h"
#include "dslaunch/common/banned.h"

#define OFF(m) offsetof(struct dsl_train_config, m)
#define BIG 9.007199254740992e15 /* 2^53: integers a double holds exactly */

/* a default written as a macro, as the word a row's def holds */
#define WORD_(x) #x
#define WORD(x) WORD_(x)
#define DSL_CFG_VAL_FRACTION_WORD WORD(DSL_CFG_VAL_FRACTION)

/* the rows with a flag come in the order dstrain --help lists them */
const struct key dsl_cfgp_keys[] = {
    {.path = "dstrain", .kind = K_SECTION},
    {.path = "dstrain.backend", .kind = K_SPECIAL, .off = OFF(dstrain.backend),
     .fn = dsl_cfgp_sp_choice, .flag = "backend", .def = "auto",
     .help = "comm backend: tcp, nccl or auto",
     .doc = "comm backend, and with it the CPU (tcp) or the GPU (nccl); auto takes the GPU "
            "when this rank has one"},
    {.path = "dstrain.save_on_signal", .kind = K_SPECIAL, .off = OFF(dstrain.save_on_signal),
     .fn = dsl_cfgp_sp_tristate, .flag = "save_on_signal", .flags = KEY_BARE, .def = "null",
     .help = "on SIGTERM, SIGINT or SIGUSR1 (Slurm's warning) finish the step, write a "
             "checkpoint, exit 128 + the signal (default: on when a checkpoint dir is set)",
     .doc = "on SIGTERM, SIGINT or SIGUSR1 finish the step, save, exit 128 + the signal "
            "(`--save-on-signal`); null = on when `checkpoint_dir` is set, `false` "
            "(`--no-save-on-signal`) turns it off (trainer.md, Failure behaviour; `dslaunch --dry-run --emit sbatch` reads it "
            "to ask Slurm for the warning: docs/slurm.md)"},
    {.path = "dstrain.metrics", .kind = K_STRING, .off = OFF(dstrain.metrics),
     .flag = "metrics", .help = "JSON lines, one object per step, to FILE"},
    {.path = "dstrain.threads", .kind = K_INT, .off = OFF(dstrain.threads), .max = 4096,
     .flag = "threads", .def = "0", .help = "compute threads per rank (0: fair share)",
     .doc = "compute threads per rank (sgemm and optimizer); 0 = `OMP_NUM_THREADS`, else "
            "the cores shared among the local ranks"},
    {.path = "dstrain.model", .kind = K_SECTION},
    {.path = "dstrain.model.type", .kind = K_SPECIAL, .off = OFF(dstrain.model_type),
     .fn = dsl_cfgp_sp_choice, .flag = "model", .def = "mlp",
     .help = "model type (mlp or gpt)",
     .doc = "the model (gpt: docs/gpt.md); a size key of the other model (`hidden` for a "
            "gpt, `layers`/`dim`/`heads`/`context`/`vocab` for an mlp) is unused and rank 0 "
            "warns about it"},
    {.path = "dstrain.model.layers", .kind = K_SIZE, .off = OFF(dstrain.gpt_layers), .min = 1,
     .max = DSL_GPT_MAX_LAYERS, .flag = "layers", .def = "4",
     .help = "gpt: transformer blocks"},
    {.path = "dstrain.model.dim", .kind = K_SIZE, .off = OFF(dstrain.gpt_dim), .min = 1,
     .max = 65536, .flag = "dim", .def = "128", .help = "gpt: model width",
     .doc = "gpt: width (C)"},
    {.path = "dstrain.model.heads", .kind = K_SIZE, .off = OFF(dstrain.gpt_heads), .min = 1,
     .max = 65536, .flag = "heads", .def = "4", .help = "gpt: attention heads (dividing dim)",
     .doc = "gpt: attention heads; must divide `dim`; on the GPU the head size `dim / heads` "
            "is at most 128 (128 needs 74,240 bytes of shared memory per block: Ampere "
            "(sm_80) or later; sm_75 takes up to 96)"},
    {.path = "dstrain.model.context", .kind = K_SIZE, .off = OFF(dstrain.gpt_context),
     .min = 1, .max = 65536, .flag = "context", .def = "128",
     .help = "gpt: tokens per window", .doc = "gpt: tokens per window (T)"},
    {.path = "dstrain.model.vocab", .kind = K_SIZE, .off = OFF(dstrain.gpt_vocab), .min = 2,
     .max = 65536, .flag = "vocab", .def = "256", .help = "gpt: vocabulary size",
     .doc = "gpt: vocabulary (token ids are uint16 in llm.c's shards); at least 256 for "
            "`text` (bytes), 50257 for GPT-2's tokenizer (`dstrain tokenize --encoder "
            "--bpe`, docs/gpt.md)"},
    {.path = "dstrain.model.hidden", .kind = K_SPECIAL, .fn = dsl_cfgp_sp_hidden,
     .flag = "hidden", .def = "1024,1024", .help = "hidden sizes, e.g. 1024,1024",
     .doc = "mlp: hidden layer sizes"},
    {.path = "dstrain.data", .kind = K_SECTION},
    {.path = "dstrain.data.dataset", .kind = K_SPECIAL, .off = OFF(dstrain.dataset),
     .fn = dsl_cfgp_sp_choice, .flag = "data", .def = "fashion_mnist",
     .help = "fashion_mnist, synthetic, text or tokens",
     .doc = "`fashion-mnist` is accepted for `fashion_mnist`; a gpt needs `text` or "
            "`tokens`, an mlp neither"},
    {.path = "dstrain.data.path", .kind = K_STRING, .off = OFF(dstrain.data_path),
     .flag = "data_path", .def_doc = "the dataset's",
     .help = "the dataset's files (Fashion-MNIST or token shard directory, text file or "
             "directory)",
     .doc = "`fashion_mnist`: `/usr/share/datasets/fashion-mnist` (Debian "
            "`dataset-fashion-mnist`); `text`: a file or directory, "
            "`/usr/share/games/fortunes` (Debian `fortunes`); `tokens`: a directory of "
            "llm.c `*train*.bin` / `*val*.bin` shards, required"},
    {.path = "dstrain.data.stride", .kind = K_SIZE, .off = OFF(dstrain.data_stride),
     .max = 65536, .flag = "stride", .def = "0",
     .help = "gpt: tokens between training windows (0: context)",
     .doc = "gpt: tokens between training window starts; 0 = the context (an mlp warns "
            "that it ignores it)"},
    {.path = "dstrain.data.synthetic", .kind = K_SECTION},
    {.path = "dstrain.data.synthetic.train_samples", .kind = K_SIZE,
     .off = OFF(dstrain.synthetic_train), .min = 1, .max = 1e9, .flag = "synthetic_train",
     .def = "60000", .help = "synthetic training samples"},
    {.path = "dstrain.data.synthetic.test_samples", .kind = K_SIZE,
     .off = OFF(dstrain.synthetic_test), .min = 1, .max = 1e9, .flag = "synthetic_test",
     .def = "10000", .help = "synthetic test samples"},
    {.path = "dstrain.data.synthetic.features", .kind = K_SIZE,
     .off = OFF(dstrain.synthetic_features), .min = 1, .max = 1e7, .flag = "synthetic_dim",
     .def = "784", .help = "synthetic input size"},
    {.path = "dstrain.data.synthetic.classes", .kind = K_SIZE,
     .off = OFF(dstrain.synthetic_classes), .min = 2, .max = 1e6, .def = "10",
     .help = "synthetic classes"},
    {.path = "dstrain.data.drop_last", .kind = K_BOOL, .off = OFF(dstrain.drop_last),
     .flag = "drop_last", .def = "false", .help = "drop the last partial batch (true/false)",
     .doc = "drop the last partial global batch of an epoch (DistributedSampler's "
            "meaning)"},
    {.path = "dstrain.data.shuffle", .kind = K_BOOL, .off = OFF(dstrain.shuffle),
     .def = "true", .help = "per-epoch shuffle from seed + epoch"},
    {.path = "dstrain.data.val_fraction", .kind = K_DOUBLE, .off = OFF(dstrain.val_fraction),
     .min = 0.001, .max = 0.999, .def = DSL_CFG_VAL_FRACTION_WORD,
     .help = "`text`: the last fraction of the bytes is validation (with `tokens` the "
             "shards' names split the data, and rank 0 warns that it is unused)"},
    {.path = "dstrain.epochs", .kind = K_U64, .off = OFF(dstrain.epochs), .max = 1e9,
     .flag = "epochs", .def = "1", .help = "epochs (when steps is 0)"},
    {.path = "dstrain.steps", .kind = K_U64, .off = OFF(dstrain.steps), .max = BIG,
     .flag = "steps", .def = "0", .help = "optimizer steps (0: epochs decide)",
     .doc = "optimizer steps in all; 0 = from `epochs`"},
    {.path = "dstrain.eval_interval", .kind = K_U64, .off = OFF(dstrain.eval_interval),
     .max = BIG, .flag = "eval_interval", .def = "0",
     .help = "steps between evaluations (0: epoch)",
     .doc = "steps between evaluations; 0 = at the end of every epoch"},
    {.path = "dstrain.eval_iters", .kind = K_U64, .off = OFF(dstrain.eval_iters), .max = BIG,
     .flag = "eval_iters", .def = "0",
     .help = "global batches of the test set per evaluation (0: all of it)",
     .doc = "global batches of the test set each evaluation reads (its first `eval_iters` "
            "x `train_batch_size` samples, the same every time; nanoGPT's and "
            "Megatron-DeepSpeed's `eval_iters`); 0 = all of it"},
    {.path = "dstrain.checkpoint_dir", .kind = K_STRING, .off = OFF(dstrain.checkpoint_dir),
     .flag = "checkpoint_dir", .help = "checkpoint directory",
     .doc = "checkpoint directory; no checkpoints without it"},
    {.path = "dstrain.save_interval", .kind = K_U64, .off = OFF(dstrain.save_interval),
     .max = BIG, .flag = "save_interval", .def = "0", .help = "steps between checkpoints",
     .doc = "steps between checkpoints; 0 = only at the end"},
    {.path = "dstrain.save_interval_minutes", .kind = K_DOUBLE,
     .off = OFF(dstrain.save_interval_minutes), .max = 1e6, .flag = "save_interval_minutes",
     .def = "0", .help = "minutes between checkpoints (0: none by time)",
     .doc = "also save after the first step that ends this many minutes after the last "
            "save or the start; rank 0's clock decides, every rank saves after the same "
            "step; 0 = no saves by time"},
    {.path = "dstrain.resume", .kind = K_STRING, .off = OFF(dstrain.resume), .flag = "resume",
     .help = "resume from 'latest', a tag, or 'auto' (latest if any, else fresh)",
     .doc = "`latest`, a tag, or `auto` (latest if any, else a fresh start); none under a "
            "launcher's restart with a `checkpoint_dir` means `auto` (trainer.md)"},
    {.path = "dstrain.allow_unverified_checkpoint", .kind = K_BOOL,
     .off = OFF(dstrain.allow_unverified_checkpoint), .flag = "allow_unverified_checkpoint",
     .flags = KEY_BARE, .def = "false",
     .help = "resume from a checkpoint whose files carry no checksums",
     .doc = "resume from a checkpoint whose files carry no checksums (with a warning); "
            "non-finite values are refused regardless (trainer.md)"},
    {.path = "dstrain.deterministic", .kind = K_SPECIAL, .off = OFF(dstrain.deterministic),
     .fn = dsl_cfgp_sp_tristate, .flag = "deterministic", .def = "null",
     .help = "canonical reduction order (true/false)",
     .doc = "canonical reduction order; null = on for the tcp (CPU) backend"},
    {.path = "dstrain.cpu_half", .kind = K_BOOL, .off = OFF(dstrain.cpu_half),
     .flag = "cpu_half", .flags = KEY_BARE, .def = "false",
     .help = "fp16/bf16 on the CPU: 16-bit params and gradients (half the comm bytes)",
     .doc = "with `bf16`/`fp16` on the CPU: 16-bit parameters and gradients (half the comm "
            "bytes), fp32 arithmetic and master weights (see trainer.md); needs "
            "`bf16.enabled` or `fp16.enabled`; ignored on the GPU"},
    {.path = "dstrain.cpu_gemm", .kind = K_SPECIAL, .off = OFF(dstrain.cpu_gemm),
     .fn = dsl_cfgp_sp_choice, .flag = "cpu_gemm", .def = "fp32",
     .help = "the CPU's large matrix products: fp32, or bf16 (bf16 inputs, fp32 sums; needs "
             "AVX512-BF16 or AMX)",
     .doc = "`bf16`: the CPU models' large matrix products with bf16-rounded inputs and "
            "fp32 sums (oneDNN; CPUs with AVX512-BF16 or AMX, else fp32 with a warning); "
            "deterministic mode still holds (trainer.md)"},
    {.path = "steps_per_print", .kind = K_LONG, .off = OFF(steps_per_print), .max = BIG,
     .flag = "steps_per_print", .def = "10", .help = "steps between progress lines",
     .doc = "steps between progress lines; 0 = never (dstrain extension)"},
    {.path = "seed", .kind = K_U64, .off = OFF(seed), .max = BIG, .flag = "seed", .def = "42",
     .help = "seed",
     .doc = "dstrain: parameter init and data order (DeepSpeed has no such key)"},
    {.path = "train_batch_size", .kind = K_SPECIAL, .off = OFF(given.train),
     .fn = dsl_cfgp_sp_batch, .flag = "train_batch", .help = "train_batch_size",
     .doc = "global batch per optimizer step"},
    {.path = "train_micro_batch_size_per_gpu", .kind = K_SPECIAL, .off = OFF(given.micro),
     .fn = dsl_cfgp_sp_batch, .flag = "micro_batch", .help = "micro batch per rank",
     .doc = "per rank and micro step"},
    {.path = "gradient_accumulation_steps", .kind = K_SPECIAL, .off = OFF(given.accum),
     .fn = dsl_cfgp_sp_batch, .flag = "grad_accum", .help = "gradient_accumulation_steps",
     .doc = "micro steps per optimizer step"},
    {.path = "zero_optimization", .kind = K_SECTION},
    {.path = "zero_optimization.stage", .kind = K_SPECIAL, .off = OFF(zero.stage),
     .fn = dsl_cfgp_sp_zero_stage, .flag = "zero_stage", .def = "0",
     .help = "ZeRO stage (0, 1, 2, 3)",
     .doc = "stage 3 runs the MLP and the GPT on the CPU (tcp backend) and on the GPU "
            "(nccl)"},
    {.path = "zero_optimization.reduce_bucket_size", .kind = K_U64,
     .off = OFF(zero.reduce_bucket_size), .min = 1, .max = BIG, .flag = "bucket_size",
     .def = "500000000", .help = "reduce_bucket_size",
     .doc = "elements of a gradient reduction bucket (on a GPU 25000000 when not set)"},
    {.path = "zero_optimization.overlap_comm", .kind = K_BOOL, .off = OFF(zero.overlap_comm),
     .flag = "overlap_comm", .def = "false", .help = "overlap_comm (true/false)",
     .doc = "reduce a bucket while the backward pass goes on (on a GPU true when not set)"},
    {.path = "zero_optimization.allgather_bucket_size", .kind = K_U64,
     .off = OFF(zero.allgather_bucket_size), .min = 1, .max = BIG, .def = "500000000",
     .help = "elements"},
    {.path = "zero_optimization.contiguous_gradients", .kind = K_BOOL,
     .off = OFF(zero.contiguous_gradients), .def = "true", .help = "accepted"},
    {.path = "zero_optimization.stage3_prefetch_bucket_size", .kind = K_U64,
     .off = OFF(zero.stage3_prefetch_bucket_size), .max = BIG, .flag = "prefetch_bucket_size",
     .def = "50000000", .help = "stage 3: fetch the next layer while one computes (0: off)",
     .doc = "elements; stage 3: 0 = gather one layer at a time, else the next layer is "
            "gathered while one computes (docs/trainer.md, ZeRO)"},
    {.path = "zero_optimization.stage3_max_live_parameters", .kind = K_U64,
     .off = OFF(zero.stage3_max_live_parameters), .min = 1, .max = BIG,
     .flag = "max_live_parameters", .def = "1000000000",
     .help = "stage 3: most gathered parameters at once",
     .doc = "elements; stage 3: the most gathered parameters at once (two layers, or one "
            "without prefetch); a layer larger than it is an error"},
    {.path = "zero_optimization.stage3_param_persistence_threshold", .kind = K_U64,
     .off = OFF(zero.stage3_param_persistence_threshold), .max = BIG,
     .flag = "param_persistence_threshold", .def = "100000",
     .help = "stage 3: layers this small stay whole",
     .doc = "elements; stage 3: a layer of at most this many parameters stays whole on "
            "every rank"},
    {.path = "zero_optimization.stage3_gather_16bit_weights_on_model_save", .kind = K_BOOL,
     .off = OFF(zero.stage3_gather_16bit_weights_on_model_save), .def = "false",
     .help = "stage 3: every save also writes `model_16bit.safetensors` (bf16, or fp16 with "
             "`fp16` enabled) beside the shards, streamed from them one tensor at a time by "
             "rank 0; ignored at stages 0-2 (their model file is the whole fp32 model)"},
    {.path = "zero_optimization.reduce_scatter", .kind = K_BOOL,
     .off = OFF(zero.reduce_scatter), .def = "true", .help = "accepted"},
    {.path = "zero_optimization.offload_optimizer", .kind = K_SECTION},
    {.path = "zero_optimization.offload_optimizer.device", .kind = K_SPECIAL,
     .off = OFF(zero.offload_optimizer), .fn = dsl_cfgp_sp_choice, .def = "none",
     .help = "ZeRO-Offload of the optimizer state and step (stages 1-3)",
     .doc = "ZeRO-Offload of the fp32 master weights, the optimizer state and its step "
            "(stages 1-3): on the CPU (tcp) a no-op, said once (they are in host memory "
            "already); on the GPU not implemented yet, an error; `nvme` is an error"},
    {.path = "zero_optimization.offload_optimizer.pin_memory", .kind = K_BOOL,
     .off = OFF(zero.offload_optimizer_pin), .def = "false", .help = "accepted"},
    {.path = "zero_optimization.offload_param", .kind = K_SECTION},
    {.path = "zero_optimization.offload_param.device", .kind = K_SPECIAL,
     .off = OFF(zero.offload_param), .fn = dsl_cfgp_sp_choice, .def = "none",
     .help = "stage 3: ZeRO-Offload of the parameters",
     .doc = "stage 3 only: ZeRO-Offload of the parameter shards, as `offload_optimizer`: "
            "a no-op on the CPU, an error on the GPU and for `nvme`"},
    {.path = "zero_optimization.offload_param.pin_memory", .kind = K_BOOL,
     .off = OFF(zero.offload_param_pin), .def = "false", .help = "accepted"},
    {.path = "zero_optimization.cpu_offload", .kind = K_BOOL, .off = OFF(zero.cpu_offload),
     .def = "false", .help = "legacy: true means `offload_optimizer.device` \"cpu\""},
    {.path = "optimizer", .kind = K_SECTION},
    {.path = "optimizer.type", .kind = K_SPECIAL, .off = OFF(optimizer.type),
     .fn = dsl_cfgp_sp_optim_type, .def = "Adam",
     .help = "the optimizer, any case; others are an error"},
    {.path = "optimizer.params", .kind = K_SECTION},
    {.path = "optimizer.params.lr", .kind = K_DOUBLE, .off = OFF(optimizer.lr), .max = 1e6,
     .flag = "lr", .def = "0.001", .help = "learning rate"},
    {.path = "optimizer.params.betas", .kind = K_SPECIAL, .fn = dsl_cfgp_sp_betas,
     .def = "0.9,0.999", .help = "Adam's beta1 and beta2"},
    {.path = "optimizer.params.eps", .kind = K_DOUBLE, .off = OFF(optimizer.eps), .max = 1,
     .def = "1e-8", .help = "Adam's epsilon"},
    {.path = "optimizer.params.weight_decay", .kind = K_DOUBLE,
     .off = OFF(optimizer.weight_decay), .max = 1e6, .def = "0",
     .help = "weight decay; the default is DeepSpeed's FusedAdam's"},
    {.path = "optimizer.params.adam_w_mode", .kind = K_BOOL,
     .off = OFF(optimizer.adam_w_mode_cfg), .def_doc = "true",
     .help = "`Adam` only: `true` = decoupled weight decay (AdamW), `false` = L2 added to "
             "the gradient"},
    {.path = "optimizer.params.momentum", .kind = K_DOUBLE, .off = OFF(optimizer.momentum),
     .max = 1, .def = "0",
     .help = "`SGD` only (torch.optim.SGD, no dampening, not Nesterov)"},
    {.path = "gradient_clipping", .kind = K_DOUBLE, .off = OFF(gradient_clipping), .max = 1e30,
     .flag = "gradient_clipping", .def = "0", .help = "global L2 norm clip (0: off)",
     .doc = "global L2 norm over all ranks' shards; 0 = off (DeepSpeed's code default)"},
    {.path = "scheduler", .kind = K_SECTION},
    {.path = "scheduler.type", .kind = K_SPECIAL, .fn = dsl_cfgp_sp_sched_type,
     .def_doc = "none (constant lr)",
     .help = "the lr schedule; others (`OneCycle`, `LRRangeTest`) are an error"},
    {.path = "scheduler.params", .kind = K_SECTION},
    {.path = "scheduler.params.warmup_min_lr", .kind = K_DOUBLE,
     .off = OFF(scheduler.warmup_min_lr), .max = 1e6,
     .help = "WarmupLR, WarmupDecayLR: the lr warmup starts from"},
    {.path = "scheduler.params.warmup_max_lr", .kind = K_SPECIAL, .max = 1e6,
     .fn = dsl_cfgp_sp_max_lr, .def_doc = "optimizer lr (WarmupLR), 0.001 (WarmupDecayLR)",
     .help = "WarmupLR, WarmupDecayLR: the lr warmup ends at"},
    {.path = "scheduler.params.warmup_num_steps", .kind = K_LONG,
     .off = OFF(scheduler.warmup_num_steps), .max = BIG,
     .help = "all: warmup steps (raised to 2 if smaller, as DeepSpeed does)"},
    {.path = "scheduler.params.warmup_type", .kind = K_SPECIAL,
     .fn = dsl_cfgp_sp_warmup_type, .def_doc = "`log`", .help = "all: the warmup's curve"},
    {.path = "scheduler.params.total_num_steps", .kind = K_LONG,
     .off = OFF(scheduler.total_num_steps), .min = 1, .max = BIG,
     .def_doc = "the run's optimizer steps",
     .help = "WarmupDecayLR, WarmupCosineLR: steps of the whole schedule"},
    {.path = "scheduler.params.warmup_min_ratio", .kind = K_DOUBLE,
     .off = OFF(scheduler.warmup_min_ratio), .max = 1,
     .help = "WarmupCosineLR: the lr's fraction warmup starts from"},
    {.path = "scheduler.params.cos_min_ratio", .kind = K_DOUBLE,
     .off = OFF(scheduler.cos_min_ratio), .max = 1,
     .help = "WarmupCosineLR: the lr's fraction the decay ends at"},
    {.path = "wall_clock_breakdown", .kind = K_BOOL, .off = OFF(wall_clock_breakdown),
     .def = "false", .help = "where each step's time goes, on the progress lines"},
    {.path = "prescale_gradients", .kind = K_BOOL, .off = OFF(prescale_gradients),
     .def = "false", .help = "divide before the reduction instead of after"},
    {.path = "gradient_predivide_factor", .kind = K_DOUBLE, .off = OFF(gradient_predivide_factor),
     .min = 1e-30, .max = 1e30, .def = "1",
     .help = "with `prescale_gradients`: divide by it before the reduction"},
    {.path = "fp16", .kind = K_SECTION},
    {.path = "fp16.enabled", .kind = K_BOOL, .off = OFF(fp16.enabled), .def = "false",
     .help = "fp16 mixed precision with loss scaling"},
    {.path = "fp16.loss_scale", .kind = K_DOUBLE, .off = OFF(fp16.loss_scale), .max = 1e30,
     .def = "0", .help = "0 = dynamic; > 0 = static scale"},
    /* 2^127: the largest power of two in fp32, the type the scaled gradient has */
    {.path = "fp16.initial_scale_power", .kind = K_INT, .off = OFF(fp16.initial_scale_power),
     .max = 127, .def = "16",
     .help = "initial dynamic scale 2^power (2^127 is fp32's largest power of two)"},
    {.path = "fp16.loss_scale_window", .kind = K_LONG, .off = OFF(fp16.loss_scale_window),
     .min = 1, .max = BIG, .def = "1000", .help = "clean steps before the scale doubles"},
    {.path = "fp16.hysteresis", .kind = K_INT, .off = OFF(fp16.hysteresis), .min = 1,
     .max = 1e9, .def = "2", .help = "overflows tolerated before the scale halves"},
    {.path = "fp16.consecutive_hysteresis", .kind = K_BOOL,
     .off = OFF(fp16.consecutive_hysteresis), .def = "false",
     .help = "refill the hysteresis on every clean step"},
    {.path = "fp16.min_loss_scale", .kind = K_DOUBLE, .off = OFF(fp16.min_loss_scale),
     .min = 1e-30, .max = 1e30, .def = "1", .help = "the dynamic scale's floor"},
    {.path = "bf16", .kind = K_SECTION},
    {.path = "bf16.enabled", .kind = K_BOOL, .off = OFF(bf16), .def = "false",
     .help = "bf16 mixed precision; no loss scaling"},
    {.path = "csv_monitor", .kind = K_SECTION},
    {.path = "csv_monitor.enabled", .kind = K_BOOL, .off = OFF(csv_monitor.enabled),
     .def = "false", .help = "write DeepSpeed's CSV monitor files (rank 0)"},
    {.path = "csv_monitor.output_path", .kind = K_SPECIAL, .off = OFF(csv_monitor.output_path),
     .fn = dsl_cfgp_sp_anystring, .def_doc = "`\"\"`",
     .help = "the directory above the job's; `\"\"` is the working directory"},
    {.path = "csv_monitor.job_name", .kind = K_STRING, .off = OFF(csv_monitor.job_name),
     .def = "DeepSpeedJobName", .help = "the job's directory: `<output_path>/<job_name>/`"},
    {.path = "tensorboard", .kind = K_SECTION},
    {.path = "tensorboard.enabled", .kind = K_BOOL, .off = OFF(tensorboard.enabled),
     .def = "false", .help = "write TensorBoard event files (rank 0)"},
    {.path = "tensorboard.output_path", .kind = K_SPECIAL, .off = OFF(tensorboard.output_path),
     .fn = dsl_cfgp_sp_anystring, .def_doc = "`\"\"`",
     .help = "the directory above the job's; `\"\"` is the working directory"},
    {.path = "tensorboard.job_name", .kind = K_STRING, .off = OFF(tensorboard.job_name),
     .def = "DeepSpeedJobName", .help = "the job's directory: `<output_path>/<job_name>/`"},
    {.path = "bfloat16", .kind = K_SECTION},
    {.path = "bfloat16.enabled", .kind = K_BOOL, .off = OFF(bf16),
     .help = "the legacy name of `bf16.enabled`"},
};
const size_t dsl_cfgp_nkeys = sizeof(dsl_cfgp_keys) / sizeof(dsl_cfgp_keys[0]);

int dsl_train_config_flag_at(size_t i, struct dsl_train_config_flag *f)
{
    for (size_t j = 0; j < dsl_cfgp_nkeys; j++) {
        if (!dsl_cfgp_keys[j].flag || i-- > 0)
            continue;
        f->name = dsl_cfgp_keys[j].flag;
        f->key = dsl_cfgp_keys[j].path;
        f->help = dsl_cfgp_keys[j].help;
        f->bare = (dsl_cfgp_keys[j].flags & KEY_BARE) != 0;
        return 1;
    }
    return 0;
}

/* DeepSpeed keys dstrain knows of but does not implement: a warning says so. */
static const char *const ignored_ds_keys[] = {
    "activation_checkpointing", "aio", "amp", "autotuning", "checkpoint", "comms_logger",
    "communication_data_type", "compression_training", "curriculum_learning", "data_efficiency",
    "data_types", "dump_state", "elasticity", "flops_profiler", "gradient_clipping_type",
    "memory_breakdown", "monitor", "wandb", "comet", "pipeline",
    "sparse_attention", "sparse_gradients", "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer", "disable_allgather", "fp32_allreduce", "timers",
    "nebula", "compile", "quantize_training", "eigenvalue", "progressive_layer_drop",
};

/* Nested DeepSpeed keys dstrain knows of but does not implement (any other key under
 * zero_optimization is DeepSpeed's too, and said so). */
static const char *const ignored_ds_paths[] = {
    "fp16_master_weights_and_grads", "zero_optimization.allgather_partitions",
    "zero_optimization.cpu_offload_params", "zero_optimization.cpu_offload_use_pin_memory",
    "zero_optimization.sub_group_size",
    "zero_optimization.round_robin_gradients", "zero_optimization.load_from_fp32_weights",
    "zero_optimization.elastic_checkpoint", "zero_optimization.ignore_unused_parameters",
    "zero_optimization.fp16_master_weights_and_grads", "zero_optimization.mics_shard_size",
    "zero_optimization.zero_hpz_partition_size", "zero_optimization.zero_quantized_weights",
    "zero_optimization.zero_quantized_gradients", "fp16.auto_cast",
    "bf16.immediate_grad_update",
};

const struct key *dsl_cfgp_find_key(const char *path)
{
    for (size_t i = 0; i < dsl_cfgp_nkeys; i++)
        if (strcmp(dsl_cfgp_keys[i].path, path) == 0)
            return &dsl_cfgp_keys[i];
    return NULL;
}

int dsl_cfgp_is_ignored(const char *prefix, const char *name, const char *path)
{
    for (size_t i = 0; !prefix[0] && i < sizeof(ignored_ds_keys) / sizeof(ignored_ds_keys[0]);
         i++)
        if (strcmp(ignored_ds_keys[i], name) == 0)
            return 1;
    for (size_t i = 0; i < sizeof(ignored_ds_paths) / sizeof(ignored_ds_paths[0]); i++)
        if (strcmp(ignored_ds_paths[i], path) == 0)
            return 1;
    /* the offload sections' other keys (nvme_path, buffer_count, ratio ...) are
     * DeepSpeed's too */
    return !strncmp(path, "zero_optimization.", 18) &&
           (!strchr(path + 18, '.') || !strncmp(path + 18, "offload_optimizer.", 18) ||
            !strncmp(path + 18, "offload_param.", 14));
}
