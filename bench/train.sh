#!/bin/sh
# Trainer benchmark: dstrain against PyTorch DDP (Gloo) on the same MLP 784-1024-1024-10,
# AdamW (lr 1e-3, wd 0.01), Fashion-MNIST, side by side in one run, plus the OpenBLAS
# sgemm rate on the step's shapes (bench/sgemm.c) that the training FLOP rate
# (6 x P x samples/s) is compared with.
#
#   bench/train.sh [build dir] [epochs]      (default: build, 1 epoch)
#
# world 1: batch 128, 2 BLAS threads; world 2: micro batch 64 (global 128), 1 thread
# per rank, as the PyTorch peer was measured. dstrain's ranks are started with the env
# contract directly (no launcher in the timing). Needs python3-torch and
# libopenblas0-pthread for the peer (skipped when missing).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
EPOCHS=${2:-1}
DSTRAIN=$BUILD/dstrain
PEER=${TORCH_PEER:-/work/shared/bench/torch_mlp_fmnist.py}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dsbench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
[ -x "$DSTRAIN" ] || { echo "no $DSTRAIN (build it first)" >&2; exit 1; }

cc -O2 -o "$TMP/sgemm" "$ROOT/bench/sgemm.c" $(pkg-config --cflags --libs openblas)

cat >"$TMP/bench.json" <<EOF
{
  "train_batch_size": 128,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "betas": [0.9, 0.999],
                "eps": 1e-8, "weight_decay": 0.01}},
  "steps_per_print": 100000,
  "seed": 1234,
  "zero_optimization": {"stage": 0, "overlap_comm": true},
  "dstrain": {"model": {"type": "mlp", "hidden": [1024, 1024]},
              "data": {"dataset": "fashion_mnist"}, "epochs": $EPOCHS}
}
EOF

port() { echo $(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 30000 )); }

dstrain_world() { # world threads extra-args...
    n=$1 th=$2
    shift 2
    p=$(port)
    r=0
    pids=""
    while [ "$r" -lt "$n" ]; do
        RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$p DSLAUNCH_RUN_ID=bench DSLAUNCH_RUN_TOKEN=bench OMP_NUM_THREADS=$th \
            "$DSTRAIN" --config "$TMP/bench.json" "$@" >"$TMP/d.$r" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    for q in $pids; do wait "$q"; done
    grep -E "^summary:" "$TMP/d.0" | sed 's/^/    /'
    sed -n 's/^summary: .*samples\/s \([0-9.]*\) .*/\1/p' "$TMP/d.0" >"$TMP/sps"
}

torch_world() { # world threads micro
    if [ ! -r "$PEER" ] || ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
        echo "    (PyTorch peer not available)"
        echo 0 >"$TMP/sps"
        return
    fi
    /usr/bin/python3 "$PEER" --world "$1" --threads "$2" --micro-batch "$3" --epochs "$EPOCHS" \
        --port "$(port)" >"$TMP/t.out" 2>&1
    grep "mean samples/s" "$TMP/t.out" | sed 's/^/    /'
    sed -n 's/.*mean samples\/s \([0-9.]*\).*/\1/p' "$TMP/t.out" >"$TMP/sps"
}

echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC') $(uname -n) $(nproc) cores; load: $(uptime | sed 's/.*load average: //')"
echo "# OpenBLAS sgemm on the training shapes"
G1=$("$TMP/sgemm" 1 128 | sed -n 's/# sgemm GFLOP\/s //p')
G2=$("$TMP/sgemm" 2 128 | sed -n 's/# sgemm GFLOP\/s //p')
G64=$("$TMP/sgemm" 1 64 | sed -n 's/# sgemm GFLOP\/s //p')
echo "    sgemm GFLOP/s: 1 thread batch 128 $G1, 2 threads batch 128 $G2, 1 thread batch 64 $G64"
P=1863690

echo "# world 1, batch 128, 2 threads"
dstrain_world 1 2 --micro-batch 128
D1=$(cat "$TMP/sps")
torch_world 1 2 128
T1=$(cat "$TMP/sps")
echo "# world 2, micro batch 64, 1 thread per rank (ZeRO stage 0, overlap_comm)"
dstrain_world 2 1 --micro-batch 64
D2=$(cat "$TMP/sps")
echo "# world 2, ZeRO stage 1 and 2"
dstrain_world 2 1 --micro-batch 64 --zero-stage 1
D2s1=$(cat "$TMP/sps")
dstrain_world 2 1 --micro-batch 64 --zero-stage 2
D2s2=$(cat "$TMP/sps")
torch_world 2 1 64
T2=$(cat "$TMP/sps")

awk -v d1="$D1" -v t1="$T1" -v d2="$D2" -v t2="$T2" -v s1="$D2s1" -v s2="$D2s2" \
    -v g1="$G1" -v g2="$G2" -v g64="$G64" -v P="$P" 'BEGIN {
    f = 6 * P / 1e9
    printf "| run | dstrain samples/s | PyTorch samples/s | ratio | dstrain GFLOP/s | sgemm GFLOP/s | FLOP rate / sgemm |\n"
    printf "|---|---|---|---|---|---|---|\n"
    printf "| world 1, batch 128, 2 threads | %.0f | %.0f | %.2fx | %.1f | %.1f | %.0f%% |\n", d1, t1, (t1 > 0 ? d1 / t1 : 0), d1 * f, g2, 100 * d1 * f / g2
    printf "| world 2, micro 64, stage 0 | %.0f | %.0f | %.2fx | %.1f | %.1f (2 x 1 thread, batch 64) | %.0f%% |\n", d2, t2, (t2 > 0 ? d2 / t2 : 0), d2 * f, 2 * g64, 100 * d2 * f / (2 * g64)
    printf "| world 2, micro 64, stage 1 | %.0f | | %.2fx | %.1f | | %.0f%% |\n", s1, (t2 > 0 ? s1 / t2 : 0), s1 * f, 100 * s1 * f / (2 * g64)
    printf "| world 2, micro 64, stage 2 | %.0f | | %.2fx | %.1f | | %.0f%% |\n", s2, (t2 > 0 ? s2 / t2 : 0), s2 * f, 100 * s2 * f / (2 * g64)
}'
echo "# load after: $(uptime | sed 's/.*load average: //')"
