#!/bin/sh
# GPT benchmark: dstrain's GPT against the PyTorch DDP (Gloo) peer on the same model
# (L=4, d=128, 4 heads, context 128, byte vocabulary: 842,496 parameters), the same
# data (Debian's fortunes, last 10% validation), AdamW (lr 1e-3, betas 0.9/0.95,
# no weight decay), clipping at 1.0, micro batch 16, side by side in one run, plus
# the OpenBLAS sgemm rate on the step's largest shapes (bench/sgemm.c) that the
# training FLOP rate is compared with.
#
#   bench/gpt.sh [build dir] [steps] [reps] [precisions]
#                                  (default: build, 60 steps, 1 rep, "fp32")
#
# precisions "fp32 bf16" runs each world twice more: dstrain with --cpu-gemm bf16 (its
# large products in bf16 through oneDNN) against the peer under torch.autocast("cpu",
# bfloat16), both side by side with the fp32 pair in the same rounds, and prints
# dstrain bf16 against PyTorch fp32 too (the issue's peer is fp32). The sgemm column
# stays OpenBLAS's fp32 rate, so a bf16 row's share of it can pass 100%
# (bench/cpugemm.sh measures the bf16 products themselves).
#
# BASELINE=/path/to/another/dstrain runs that build too, right after this one in every
# round, and prints its median and the ratio of the two per world and precision: how a
# change moves the ratio to PyTorch, measured side by side.
#
# With reps > 1 each world runs dstrain and the peer alternately reps times and the
# medians count (every run's figure is printed): on a shared 2-core machine two runs of
# the same job can differ by 2x.
# world 1: 2 threads; world 2: global batch 32, 1 thread per rank, ZeRO stage 1.
# Tokens/s of both are over the training steps only (the peer leaves out its first 10
# as warm-up; dstrain counts all of them and leaves out its evaluation). The validation
# loss after the same steps at the same global batch is printed for both (PyTorch: 20
# random batches of 16 windows; dstrain: every non-overlapping window, and with
# python3-torch its consolidated checkpoint on the peer's 20 batches too, through
# peers/gpt_val_subset.py: the peer's batches are 0.03 nats/byte easier than the
# whole split).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-60}
REPS=${3:-1}
PRECS=${4:-fp32}
DSTRAIN=$BUILD/dstrain
PEER=${TORCH_PEER:-$(dirname "$0")/peers/torch_gpt_text.py}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dsbench-gpt.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
[ -x "$DSTRAIN" ] || { echo "no $DSTRAIN (build it first)" >&2; exit 1; }
[ -d /usr/share/games/fortunes ] || { echo "no fortunes (apt-get install fortunes)" >&2; exit 1; }
cc -O2 -o "$TMP/sgemm" "$ROOT/bench/sgemm.c" $(pkg-config --cflags --libs openblas)
. "$ROOT/bench/blascore.sh" # dstrain's kernel choice for everyone
bench_blascore "$DSTRAIN"
# the peer's settings exactly (the shipped configs/gpt_fortunes.json trains longer, with
# a schedule)
cat >"$TMP/bench.json" <<EOF
{
  "train_micro_batch_size_per_gpu": 16,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "betas": [0.9, 0.95], "eps": 1e-8,
                                           "weight_decay": 0.0}},
  "gradient_clipping": 1.0,
  "seed": 1234,
  "zero_optimization": {"stage": 1},
  "dstrain": {
    "model": {"type": "gpt", "layers": 4, "dim": 128, "heads": 4, "context": 128, "vocab": 256},
    "data": {"dataset": "text", "path": "/usr/share/games/fortunes", "stride": 1}
  }
}
EOF
port() { echo $(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000 )); }

dstrain_world() { # world threads precision: tokens/s into $TMP/tps, val loss into $TMP/vl
    n=$1 th=$2 prec=$3 p=$(port) r=0 pids=""
    while [ "$r" -lt "$n" ]; do
        RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$p DSLAUNCH_RUN_ID="bench-$$-$p" DSLAUNCH_RUN_TOKEN=bench \
            DSLAUNCH_COMM_TIMEOUT=120 "${BIN:-$DSTRAIN}" --config "$TMP/bench.json" \
            --backend tcp --threads "$th" --cpu-gemm "$prec" --steps "$STEPS" \
            --eval-interval "$STEPS" \
            --steps-per-print 0 --checkpoint-dir "$TMP/ck$n" >"$TMP/d.$r" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    for q in $pids; do wait "$q" || { tail -n 5 "$TMP"/d.* >&2; echo 0 >"$TMP/tps"; return; }; done
    if [ "$prec" = bf16 ] && ! grep -q "large matrix products in bf16" "$TMP/d.0"; then
        echo "    (no bf16 products here: $(grep cpu_gemm "$TMP/d.0" | head -n 1))"
    fi
    grep "^summary:" "$TMP/d.0" | sed 's/^/    /'
    sed -n 's/^summary: .*tokens\/s \([0-9.]*\) .*/\1/p' "$TMP/d.0" >"$TMP/tps"
    sed -n 's/^summary: .*val_loss \([0-9.]*\) .*/\1/p' "$TMP/d.0" >"$TMP/vl"
    # the same model on the peer's own 20 validation batches (needs python3-torch)
    echo - >"$TMP/vs"
    if [ -z "${BIN:-}" ] && /usr/bin/python3 -c "import torch" 2>/dev/null &&
        "$DSTRAIN" consolidate "$TMP/ck$n" --out "$TMP/m$n.st" >/dev/null; then
        /usr/bin/python3 "$(dirname "$0")/peers/gpt_val_subset.py" "$TMP/m$n.st" |
            sed -n "s/.*: //p" >"$TMP/vs"
    fi
}

torch_world() { # world threads precision
    ac=none
    [ "$3" = bf16 ] && ac=bf16
    if [ ! -r "$PEER" ] || ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
        echo "    (PyTorch peer not available)"
        echo 0 >"$TMP/tps"
        echo - >"$TMP/vl"
        return
    fi
    /usr/bin/python3 "$PEER" --world "$1" --threads "$2" --steps "$STEPS" --port "$(port)" \
        --autocast "$ac" >"$TMP/t.out" 2>&1
    grep "^#" "$TMP/t.out" | tail -n 2 | sed 's/^/    /'
    sed -n 's/.*mean tokens\/s \([0-9.]*\).*/\1/p' "$TMP/t.out" >"$TMP/tps"
    sed -n 's/.*val loss \([0-9.]*\) nats.*/\1/p' "$TMP/t.out" >"$TMP/vl"
}

sgemm_rate() { # procs threads: the step's fc shapes at 2048 rows, all ranks at once
    i=0
    while [ "$i" -lt "$1" ]; do
        "$TMP/sgemm" "$2" 2048 128 384 128 512 128 >"$TMP/sg.$i" &
        i=$((i + 1))
    done
    wait
    cat "$TMP"/sg.* | sed -n 's/# sgemm GFLOP\/s //p' | awk '{s += $1} END {printf "%.2f", s}'
    rm -f "$TMP"/sg.*
}

# training FLOPs per token: 6 x parameters plus the attention products (12 L T C)
F=$(awk 'BEGIN {print 6 * 842496 + 12 * 4 * 128 * 128}')
echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC') $(uname -n) $(nproc) cores; load: $(uptime | sed 's/.*load average: //')"
echo "# OpenBLAS kernels: ${OPENBLAS_CORETYPE:-chosen by OpenBLAS}; $F FLOP per token; $STEPS steps"
: >"$TMP/table"
med() { sort -n "$1" | awk 'NF {v[++n] = $1} END {print n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2}'; }
mean() { awk 'NF {s += $1; n++} END {printf "%.2f", s / n}' "$1"; }
for w in 1 2; do
    th=$((2 / w))
    echo "# world $w, $th thread(s) per rank"
    for pr in $PRECS; do
        : >"$TMP/dl.$pr"
        : >"$TMP/tl.$pr"
        : >"$TMP/sa.$pr"
        : >"$TMP/sb.$pr"
        : >"$TMP/bl.$pr"
    done
    k=0
    while [ "$k" -lt "$REPS" ]; do
        for pr in $PRECS; do
            echo "  $pr"
            sgemm_rate "$w" "$th" >>"$TMP/sa.$pr"
            echo >>"$TMP/sa.$pr"
            dstrain_world "$w" "$th" "$pr"
            cat "$TMP/tps" >>"$TMP/dl.$pr"
            echo "$(cat "$TMP/vl") ($(cat "$TMP/vs"))" >"$TMP/dv.$pr"
            if [ -n "${BASELINE:-}" ]; then
                echo "  $pr, baseline"
                BIN=$BASELINE dstrain_world "$w" "$th" "$pr"
                cat "$TMP/tps" >>"$TMP/bl.$pr"
            fi
            sgemm_rate "$w" "$th" >>"$TMP/sb.$pr"
            echo >>"$TMP/sb.$pr"
            torch_world "$w" "$th" "$pr"
            cat "$TMP/tps" >>"$TMP/tl.$pr"
            cat "$TMP/vl" >"$TMP/tv.$pr"
        done
        k=$((k + 1))
    done
    for pr in $PRECS; do
        D=$(med "$TMP/dl.$pr") T=$(med "$TMP/tl.$pr") A=$(mean "$TMP/sa.$pr")
        B=$(mean "$TMP/sb.$pr")
        echo "    $pr, medians of $REPS: dstrain $D, PyTorch $T tokens/s"
        lab="world $w, global batch $((16 * w)), $th thread(s) per rank"
        [ "$pr" = fp32 ] || lab="$lab, $pr (dstrain --cpu-gemm $pr, PyTorch autocast $pr)"
        awk -v l="$lab" -v d="$D" -v t="$T" -v a="$A" -v b="$B" -v f="$F" \
            -v dv="$(cat "$TMP/dv.$pr")" -v tv="$(cat "$TMP/tv.$pr")" 'BEGIN {
            g = f * d / 1e9; s = (a + b) / 2
            printf "| %s | %.0f | %s | %s | %.1f | %.1f (%.1f / %.1f) | %.0f%% | %s | %s |\n", l, d,
                (t > 0 ? sprintf("%.0f", t) : "-"), (t > 0 ? sprintf("%.2fx", d / t) : "-"),
                g, s, a, b, 100 * g / s, dv, tv
        }' >>"$TMP/table"
        if [ -n "${BASELINE:-}" ]; then
            awk -v l="$lab" -v d="$D" -v b="$(med "$TMP/bl.$pr")" -v t="$T" 'BEGIN {
                printf "# %s: baseline %.0f tokens/s (%s PyTorch), dstrain / baseline %.3f\n", l, b,
                    (t > 0 ? sprintf("%.2fx", b / t) : "-"), (b > 0 ? d / b : 0)
            }' >>"$TMP/basel"
        fi
        echo "$D" >"$TMP/dmed.$w.$pr"
        echo "$T" >"$TMP/tmed.$w.$pr"
    done
done
echo
echo "| run | dstrain tokens/s (median of $REPS) | PyTorch DDP tokens/s (median of $REPS) | ratio | dstrain GFLOP/s | sgemm GFLOP/s, mean (before / after) | FLOP rate / sgemm | dstrain val loss, all windows (the peer's 20 batches) | PyTorch val loss (its 20 batches) |"
echo "|---|---|---|---|---|---|---|---|---|"
cat "$TMP/table"
for pr in $PRECS; do
    [ "$pr" = fp32 ] || for w in 1 2; do
        [ -s "$TMP/tmed.$w.fp32" ] || continue
        awk -v w="$w" -v p="$pr" -v d="$(cat "$TMP/dmed.$w.$pr")" -v t="$(cat "$TMP/tmed.$w.fp32")" \
            'BEGIN { if (t > 0) printf "# world %s: dstrain %s %.0f tokens/s against PyTorch fp32 %.0f: %.2fx\n", w, p, d, t, d / t }'
    done
done
[ -n "${BASELINE:-}" ] && { echo "# baseline: $BASELINE"; cat "$TMP/basel"; }
echo "# load after: $(uptime | sed 's/.*load average: //')"
