#!/bin/sh
# ZeRO stage 3 against stage 2 on the CPU, side by side in one run (issue #34):
#  1. throughput on a model both hold: the GPT of bench/gpt.sh (L=4, d=128, context 128,
#     byte vocabulary, micro batch 16) at world 2 and 4, stage 2 and stage 3 alternating
#     run by run, median tokens/s of each, and the ratio stage 3 / stage 2;
#  2. capacity under a per-rank memory budget: the widest GPT (4 layers, dim stepping up,
#     micro batch 2 so that the model state, not the activations, fills the budget)
#     that trains 2 steps with every rank in a memory cgroup of BUDGET
#     (dslaunch --rank-memory-limit, the OOM killer ends a rank over it), at each stage,
#     with its parameter count and the model-state bytes dstrain prints for rank 0;
#  3. the peer, PyTorch FSDP (Debian's python3-torch), where it runs here; else why not.
#
#   bench/zero3.sh [build dir] [steps] [reps] [budget] [worlds]
#                  (default: build, 30 steps, 3 reps, 512M, "2 4")
#
# MODEL=mlp runs the MLP (784, six hidden layers of H, 10 on synthetic data, H stepping
# up) instead of the GPT. Ranks of part 1 are started with the env contract directly (no launcher in the
# timing); part 2 goes through dslaunch for its cgroups, which needs a memory cgroup
# (`dslaunch --check`). On a shared 2-core machine runs of the same job differ by up to
# 2x: only ratios of runs made in the same minutes mean anything.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-30}
REPS=${3:-3}
BUDGET=${4:-512M}
WORLDS=${5:-2 4}
MODEL=${MODEL:-gpt}
DSTRAIN=$BUILD/dstrain
DSL=$BUILD/dslaunch
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dsbench-zero3.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
[ -x "$DSTRAIN" ] && [ -x "$DSL" ] || { echo "no $DSTRAIN or $DSL (build first)" >&2; exit 1; }
if [ "$MODEL" = gpt ] && [ ! -d /usr/share/games/fortunes ]; then
    echo "no fortunes (apt-get install fortunes)" >&2
    exit 1
fi

port() { echo $((20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000)); }

# model_args SIZE [MICRO]: the model's flags, SIZE its width (dim for the GPT, hidden
# for the MLP), MICRO the micro batch (default 16 for the GPT, 32 for the MLP)
model_args() {
    if [ "$MODEL" = gpt ]; then
        echo "--model gpt --data text --data-path /usr/share/games/fortunes --layers 4" \
            "--dim $1 --heads 4 --context 128 --vocab 256 --micro-batch ${2:-16}"
    else
        echo "--model mlp --data synthetic --synthetic-train 4096 --synthetic-test 256" \
            "--hidden $1,$1,$1,$1,$1,$1 --micro-batch ${2:-32}"
    fi
}
RATE=tokens/s
[ "$MODEL" = gpt ] || RATE=samples/s

# run_world WORLD STAGE SIZE: one run with the env contract; its rate into $TMP/rate
run_world() {
    n=$1 p=$(port) r=0 pids=""
    while [ "$r" -lt "$n" ]; do
        # shellcheck disable=SC2046 # model_args is a word list by design
        RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$p DSLAUNCH_RUN_ID="bench-$$-$p" DSLAUNCH_RUN_TOKEN=bench \
            DSLAUNCH_COMM_TIMEOUT=300 "$DSTRAIN" $(model_args "$3") --backend tcp \
            --threads 1 --zero-stage "$2" --steps "$STEPS" --eval-interval 0 --eval-iters 1 \
            --steps-per-print 0 >"$TMP/d.$r" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    ok=1
    for q in $pids; do wait "$q" || ok=0; done
    if [ $ok = 0 ]; then
        tail -n 3 "$TMP"/d.* >&2
        echo 0 >"$TMP/rate"
        return
    fi
    sed -n "s|^summary: .*$RATE \([0-9.]*\) .*|\1|p" "$TMP/d.0" >"$TMP/rate"
}

med() { sort -n "$1" | awk 'NF {v[++n] = $1} END {print n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2}'; }

echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC') $(uname -n) $(nproc) cores; load: $(uptime | sed 's/.*load average: //')"
echo "# model $MODEL; $STEPS steps; $REPS reps; budget $BUDGET per rank"
SMALL=128
[ "$MODEL" = gpt ] || SMALL=512
: >"$TMP/table"
for w in $WORLDS; do
    : >"$TMP/s2"
    : >"$TMP/s3"
    i=0
    while [ "$i" -lt "$REPS" ]; do
        for st in 2 3; do
            run_world "$w" "$st" "$SMALL"
            echo "    world $w stage $st run $((i + 1)): $(cat "$TMP/rate") $RATE"
            cat "$TMP/rate" >>"$TMP/s$st"
        done
        i=$((i + 1))
    done
    a=$(med "$TMP/s2")
    b=$(med "$TMP/s3")
    echo "$w $a $b $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", (a > 0 ? b / a : 0)}')" \
        >>"$TMP/table"
done

# fits WORLD STAGE SIZE: 0 when 2 steps train with every rank under the budget; the
# model-state line of rank 0 into $TMP/state
fits() {
    # shellcheck disable=SC2046
    DSLAUNCH_LOCAL_SLOTS=$1 "$DSL" --include "localhost:$(seq -s, 0 $(($1 - 1)))" \
        --rank-memory-limit "$BUDGET" \
        --hang-timeout 0 "$DSTRAIN" $(model_args "$3" 2) --backend tcp --threads 1 \
        --zero-stage "$2" --steps 2 --eval-interval 0 --eval-iters 1 --steps-per-print 0 \
        >"$TMP/f.out" 2>&1
    rc=$?
    sed -n 's/.*rank 0 model-state bytes \([0-9]*\).*/\1/p' "$TMP/f.out" | head -n 1 >"$TMP/state"
    sed -n 's/.*model \([0-9]*\) params.*/\1/p' "$TMP/f.out" | head -n 1 >"$TMP/params"
    return $rc
}

if [ "$MODEL" = gpt ]; then
    SIZES="128 256 384 512 640 768 896 1024 1280 1536 1792 2048"
else
    SIZES="512 768 1024 1280 1536 1792 2048 2560 3072 4096"
fi
: >"$TMP/cap"
for w in $WORLDS; do
    for st in 2 3; do
        best=- bp=- bs=- why="none fits"
        for s in $SIZES; do
            if fits "$w" "$st" "$s"; then
                best=$s bp=$(cat "$TMP/params") bs=$(cat "$TMP/state")
            else
                why=$(grep -m1 -o "out of memory[^;]*\|OOM[^;]*\|error: [^;]*" "$TMP/f.out")
                break
            fi
        done
        echo "    world $w stage $st: widest $best ($bp params, rank 0 model state $bs bytes); next: ${why:-failed}"
        echo "$w $st $best $bp $bs" >>"$TMP/cap"
    done
done

# the peer: PyTorch FSDP on the CPU with Gloo, if this torch can
peer="PyTorch not installed (python3-torch)"
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    p=$(port)
    for r in 0 1; do
        RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p PYTHONPATH="$ROOT/bench/peers" \
            /usr/bin/python3 "$ROOT/bench/peers/fsdp_probe.py" >"$TMP/fsdp.$r" 2>&1 &
    done
    wait
    if grep -q "^fsdp ok" "$TMP/fsdp.0"; then
        peer="runs here (bench/peers/fsdp_probe.py); a GPT peer is still to be written"
    else
        peer="does not run here: $(grep -v '^ ' "$TMP/fsdp.0" | tail -n 1)"
    fi
fi

echo
echo "| world | stage 2 $RATE | stage 3 $RATE | stage 3 / stage 2 |"
echo "|---|---|---|---|"
while read -r w a b q; do echo "| $w | $a | $b | $q |"; done <"$TMP/table"
echo
echo "| world | stage | widest that fits $BUDGET per rank | parameters | rank 0 model-state bytes |"
echo "|---|---|---|---|---|"
while read -r w st s p b; do echo "| $w | $st | $s | $p | $b |"; done <"$TMP/cap"
echo
echo "PyTorch FSDP: $peer"
