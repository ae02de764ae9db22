# Sourced by the trainer benchmarks (sh and bash; bench/train.sh, bench/train_net.sh):
# mlp_config FILE BUCKET EPOCHS writes the ds_config.json both measure, the MLP
# 784-1024-1024-10 with AdamW on Fashion-MNIST (the peers' settings), with a reduce
# bucket of BUCKET elements, for EPOCHS epochs.
mlp_config() {
    cat >"$1" <<EOF
{
  "train_batch_size": 128,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "betas": [0.9, 0.999],
                "eps": 1e-8, "weight_decay": 0.01}},
  "steps_per_print": 100000,
  "seed": 1234,
  "zero_optimization": {"stage": 0, "overlap_comm": true, "reduce_bucket_size": $2},
  "dstrain": {"model": {"type": "mlp", "hidden": [1024, 1024]},
              "data": {"dataset": "fashion_mnist"}, "epochs": $3}
}
EOF
}
