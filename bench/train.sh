#!/bin/sh
# Trainer benchmark: dstrain against PyTorch DDP (Gloo) on the same MLP 784-1024-1024-10,
# AdamW (lr 1e-3, wd 0.01), Fashion-MNIST, side by side in one run, plus the OpenBLAS
# sgemm rate on the step's shapes (bench/sgemm.c) that the training FLOP rate
# (6 x P x samples/s) is compared with.
#
#   bench/train.sh [build dir] [epochs] [reps]   (default: build, 1 epoch, 3 reps)
#
# BASELINE=/path/to/another/dstrain runs that build too, alternating with this one run
# by run (A B A B ...) so that both see the same machine, and adds its median and the
# ratio of the two to the table: how a change moves the ratio to PyTorch, measured side
# by side.
#
# Each dstrain configuration runs `reps` times and the median samples/s counts (every
# run's figure is printed): on this project's 2-vCPU VMs two back-to-back runs of the
# same world-2 job differ by up to 25%. PyTorch runs once per world (it takes 4x as
# long, and its ratio is far from the goal).
#
# world 1: batch 128, 2 BLAS threads; world 2: micro batch 64 (global 128), 1 thread
# per rank, as the PyTorch peer was measured. dstrain's ranks are started with the env
# contract directly (no launcher in the timing). Needs python3-torch and
# libopenblas0-pthread for the peer (skipped when missing).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
EPOCHS=${2:-1}
REPS=${3:-3}
DSTRAIN=$BUILD/dstrain
PEER=${TORCH_PEER:-$(dirname "$0")/peers/torch_mlp_fmnist.py}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dsbench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
[ -x "$DSTRAIN" ] || { echo "no $DSTRAIN (build it first)" >&2; exit 1; }

cc -O2 -o "$TMP/sgemm" "$ROOT/bench/sgemm.c" $(pkg-config --cflags --libs openblas)

# Every program runs the same OpenBLAS kernels: the ones dstrain ends up with
. "$ROOT/bench/blascore.sh"
bench_blascore "$DSTRAIN"

. "$ROOT/bench/mlp_config.sh"
mlp_config "$TMP/bench.json" 500000 "$EPOCHS"

# below Linux's ephemeral port range, so no outgoing connection holds it
port() { echo $(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000 )); }

dstrain_one() { # bin runs-file world threads extra-args...  (one retry on another port)
    bin=$1 runs=$2 n=$3 th=$4
    shift 4
    for attempt in 1 2; do
        p=$(port)
        r=0
        pids=""
        while [ "$r" -lt "$n" ]; do
            RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
                MASTER_PORT=$p DSLAUNCH_RUN_ID="bench-$$-$p" DSLAUNCH_RUN_TOKEN=bench \
                OMP_NUM_THREADS=$th DSLAUNCH_COMM_TIMEOUT=60 DSLAUNCH_STORE_TIMEOUT=60 \
                "$bin" --config "$TMP/bench.json" "$@" >"$TMP/d.$r" 2>&1 &
            pids="$pids $!"
            r=$((r + 1))
        done
        ok=1
        for q in $pids; do wait "$q" || ok=0; done
        if [ "$ok" -eq 1 ]; then
            grep -E "^summary:" "$TMP/d.0" | sed 's/^/    /'
            sed -n 's/^summary: .*samples\/s \([0-9.]*\) .*/\1/p' "$TMP/d.0" >>"$runs"
            return 0
        fi
        echo "    dstrain failed (attempt $attempt):" >&2
        tail -n 3 "$TMP"/d.* >&2
    done
    echo 0 >>"$runs"
}

median() { # file: the median of its numbers
    sort -n "$1" | awk '{v[NR] = $1} END {
        m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m }'
}

dstrain_world() { # world threads extra-args...: REPS runs, the median into $TMP/sps
    : >"$TMP/runs"
    : >"$TMP/runs.base"
    i=0
    while [ "$i" -lt "$REPS" ]; do
        dstrain_one "$DSTRAIN" "$TMP/runs" "$@"
        if [ -n "${BASELINE:-}" ]; then
            echo "    baseline:"
            dstrain_one "$BASELINE" "$TMP/runs.base" "$@"
        fi
        i=$((i + 1))
    done
    median "$TMP/runs" >"$TMP/sps"
    echo "    median samples/s $(cat "$TMP/sps") of $REPS runs"
    if [ -n "${BASELINE:-}" ]; then
        median "$TMP/runs.base" >"$TMP/sps.base"
        echo "    baseline median samples/s $(cat "$TMP/sps.base") of $REPS runs"
    fi
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

# sgemm reference for a configuration: the same threads/batch as its runs, all ranks'
# worth at once (two 1-thread processes for world 2), measured right before and right
# after them
sgemm_rate() { # procs threads batch
    i=0
    while [ "$i" -lt "$1" ]; do
        "$TMP/sgemm" "$2" "$3" >"$TMP/sg.$i" &
        i=$((i + 1))
    done
    wait
    cat "$TMP"/sg.* | sed -n 's/# sgemm GFLOP\/s //p' | awk '{s += $1} END {printf "%.2f", s}'
    rm -f "$TMP"/sg.*
}

P=1863690
echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC') $(uname -n) $(nproc) cores; load: $(uptime | sed 's/.*load average: //')"
echo "# OpenBLAS kernels (OPENBLAS_CORETYPE) for dstrain, PyTorch and sgemm: ${OPENBLAS_CORETYPE:-chosen by OpenBLAS}"
echo "# P = $P parameters, 6P = $(awk -v P=$P 'BEGIN {printf "%.1f", 6 * P / 1e6}') MFLOP per sample"

row() { # label dstrain-sps torch-sps sgemm-before sgemm-after
    base=
    [ -n "${BASELINE:-}" ] && base=$(cat "$TMP/sps.base")
    awk -v l="$1" -v d="$2" -v t="$3" -v a="$4" -v b="$5" -v P="$P" -v base="$base" 'BEGIN {
        g = 6 * P * d / 1e9; s = (a + b) / 2
        printf "| %s | %.0f | %s | %s | %.1f | %.1f (%.1f / %.1f) | %.0f%% |", l, d,
            (t > 0 ? sprintf("%.0f", t) : "-"), (t > 0 ? sprintf("%.2fx", d / t) : "-"),
            g, s, a, b, 100 * g / s
        if (base != "")
            printf " %.0f | %s | %s |", base, (t > 0 ? sprintf("%.2fx", base / t) : "-"),
                (base > 0 ? sprintf("%.3f", d / base) : "-")
        printf "\n"
    }' >>"$TMP/table"
}

echo "# world 1, batch 128, 2 threads"
A=$(sgemm_rate 1 2 128)
dstrain_world 1 2 --micro-batch 128
D1=$(cat "$TMP/sps")
B=$(sgemm_rate 1 2 128)
torch_world 1 2 128
T1=$(cat "$TMP/sps")
row "world 1, batch 128, 2 threads" "$D1" "$T1" "$A" "$B"

echo "# world 2, micro batch 64 (global 128), 1 thread per rank"
for st in 0 1 2; do
    A=$(sgemm_rate 2 1 64)
    dstrain_world 2 1 --micro-batch 64 --zero-stage "$st"
    D=$(cat "$TMP/sps")
    B=$(sgemm_rate 2 1 64)
    if [ "$st" -eq 0 ]; then
        torch_world 2 1 64
        T2=$(cat "$TMP/sps")
    fi
    row "world 2, micro 64, ZeRO stage $st" "$D" "$T2" "$A" "$B"
done

echo
if [ -n "${BASELINE:-}" ]; then
    echo "# baseline: $BASELINE"
    echo "| run | dstrain samples/s (median of $REPS) | PyTorch DDP samples/s | ratio | dstrain GFLOP/s (6P x samples/s) | sgemm GFLOP/s, mean (before / after) | FLOP rate / sgemm | baseline samples/s | baseline ratio | dstrain / baseline |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
else
    echo "| run | dstrain samples/s (median of $REPS) | PyTorch DDP samples/s | ratio | dstrain GFLOP/s (6P x samples/s) | sgemm GFLOP/s, mean (before / after) | FLOP rate / sgemm |"
    echo "|---|---|---|---|---|---|---|"
fi
cat "$TMP/table"
echo "# load after: $(uptime | sed 's/.*load average: //')"
