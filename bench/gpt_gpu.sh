#!/bin/sh
# GPU GPT benchmark: dstrain's CUDA GPT at GPT-2 124M's shapes (12 layers, width 768,
# 12 heads, context 1024, vocabulary 50257) at world 1 in bf16 (fp32 master weights,
# AdamW, ZeRO stage 1), on random tokens in llm.c's shard format. Prints the steady
# tokens/s (the last progress interval, after the warm-up steps) and the model FLOP
# utilisation against the GPU's dense bf16 peak:
#   MFU = tokens/s x (6 (12 L C^2 + V C) + 12 L T C) / peak
# (the parameters' multiply-adds forward and backward, plus the attention products as
# computed: both triangles; the model's flops_per_sample / T). llm.c's published
# figures for the same model are the reference (docs/benchmarks.md).
#
#   bench/gpt_gpu.sh [build dir] [steps] [micro batch]    (default: build, 40, 16)
#   PEAK_TFLOPS=989 (H100 SXM dense bf16; H100 PCIe: 756, A100: 312, H200: 989)
#   ATTENTION=tensor (default: the tensor-core attention, or dstrain refuses the model),
#             scalar (the scalar fp32 kernels) or auto (the model's choice): passed to
#             dstrain as DSL_GPT_ATTENTION and named in the result line, so the two
#             kernels can be compared side by side (run it once with each)
#   EPILOGUES=on (default: the projections' bias, the MLP's GELU and their gradients in
#             cuBLASLt epilogues) or off (plain GEMMs and the separate kernels): passed
#             as DSL_GPT_EPILOGUES and named in the result line, the A/B of the epilogues
#
# Needs a dstrain built with CUDA and a visible GPU: without one it says so and exits 1.
# dstrain's GPU timers (CUDA events) print the GPU time per phase with each progress
# line and per kernel class at the end ("gpu ms per step", docs/trainer.md).
#
# PROFILE_STEP=S profiles step S (S >= 2; default run: 3 steps) with Nsight Compute
# instead of measuring throughput: a first run with DSTRAIN_COUNT_LAUNCHES=1 (no ncu)
# reads how many launches come before step S and how many are in it, then
#   ncu --clock-control none --metrics gpu__time_duration.sum --profile-from-start off
#       --launch-count COUNT ...
# runs S steps with DSTRAIN_PROFILE_STEP=S (dstrain opens the profiler's window around
# that step), or with PROFILE_MODE=skip, --launch-skip BEFORE --launch-count COUNT and no
# window. Prints the kernels by GPU time, the top PROFILE_TOP (15) with their share
# ("gpt_gpu profile: ..." lines). NCU names the binary (default: ncu on PATH, then
# $CUDA_HOME/bin/ncu); exit 1 if it is missing or profiles nothing.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-40}
PROFILE_STEP=${PROFILE_STEP:-}
[ -n "$PROFILE_STEP" ] && STEPS=$PROFILE_STEP
MB=${3:-16}
PEAK=${PEAK_TFLOPS:-989}
ATTENTION=${ATTENTION:-tensor}
case $ATTENTION in
tensor) ATTN_NAME="tensor cores (WMMA, bf16 in, fp32 accumulators)" ;;
scalar) ATTN_NAME="scalar fp32 kernels" ;;
auto) ATTN_NAME="the model's choice (tensor cores on sm_80+)" ;;
*) echo "ATTENTION '$ATTENTION' is none of tensor, scalar, auto" >&2; exit 1 ;;
esac
EPILOGUES=${EPILOGUES:-on}
case $EPILOGUES in
on | off) ;;
*) echo "EPILOGUES '$EPILOGUES' is neither on nor off" >&2; exit 1 ;;
esac
DSTRAIN=$BUILD/dstrain
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dsbench-gptgpu.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
[ -x "$DSTRAIN" ] || { echo "no $DSTRAIN (build it first, with -DDSL_WITH_CUDA=ON)" >&2; exit 1; }
L=12 C=768 NH=12 T=1024 V=50257

# random token shards: enough windows for every step, and a small validation split
python3 - "$TMP" $(( (STEPS + 2) * MB * (T + 1) )) <<'PY' || { echo "cannot write the shards" >&2; exit 1; }
import random, struct, sys
d, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
for name, count in (("bench_train_000.bin", n), ("bench_val_000.bin", 4 * 1025)):
    hdr = [20240520, 1, count] + [0] * 253
    with open(f"{d}/{name}", "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        f.write(struct.pack(f"<{count}H", *(rng.randrange(50257) for _ in range(count))))
PY
cat >"$TMP/bench.json" <<JSON
{
  "train_micro_batch_size_per_gpu": $MB,
  "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.0006, "betas": [0.9, 0.95], "eps": 1e-8,
                                           "weight_decay": 0.0}},
  "gradient_clipping": 1.0,
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 1},
  "steps_per_print": 10,
  "dstrain": {
    "backend": "nccl",
    "steps": $STEPS,
    "eval_interval": $STEPS,
    "model": {"type": "gpt", "layers": $L, "dim": $C, "heads": $NH, "context": $T,
              "vocab": $V},
    "data": {"dataset": "tokens", "path": "$TMP"}
  }
}
JSON
# run dstrain (PREFIX: a profiler's command line before it, as words)
run_dstrain() {
    # shellcheck disable=SC2086 # PREFIX is words
    DSL_GPT_ATTENTION=$ATTENTION DSL_GPT_EPILOGUES=$EPILOGUES RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000 )) \
        ${PREFIX:-} "$DSTRAIN" --config "$TMP/bench.json" >"$TMP/out" 2>"$TMP/err"
}
if [ -n "$PROFILE_STEP" ]; then
    case $PROFILE_STEP in '' | *[!0-9]* | 0 | 1) echo "PROFILE_STEP must be 2 or more" >&2; exit 1 ;; esac
    NCU=${NCU:-$(command -v ncu || echo "${CUDA_HOME:-/usr/local/cuda}/bin/ncu")}
    export DSTRAIN_COUNT_LAUNCHES=1 # "dstrain: launches step S before B count C"
    run_dstrain
    rc=$?
    if [ "$rc" -ne 0 ]; then
        # exit 3: no GPU for this rank (docs/exit-codes.md)
        { [ "$rc" -eq 3 ] || grep -q "built without CUDA\|needs a GPU" "$TMP/err"; } &&
            { echo "gpt_gpu: no GPU to run on: $(grep -m1 nccl "$TMP/err")" >&2; exit 1; }
        tail -n 20 "$TMP/out" "$TMP/err" >&2
        echo "gpt_gpu: dstrain failed (exit $rc)" >&2
        exit 1
    fi
    line=$(grep "^dstrain: launches step $PROFILE_STEP " "$TMP/out")
    before=$(echo "$line" | sed -n 's/.* before \([0-9]*\) count.*/\1/p')
    count=$(echo "$line" | sed -n 's/.* count \([0-9]*\)$/\1/p')
    [ -n "$before" ] && [ -n "$count" ] ||
        { echo "gpt_gpu: no launch count for step $PROFILE_STEP in dstrain's output" >&2; exit 1; }
    [ -x "$NCU" ] || { echo "gpt_gpu: no Nsight Compute ($NCU)" >&2; exit 1; }
    # a cuBLAS call counts once and may launch more kernels: the range mode's cap is
    # twice the count; the skip mode takes the count as it is
    if [ "${PROFILE_MODE:-range}" = skip ]; then
        sel="--launch-skip $before --launch-count $count"
    else
        sel="--profile-from-start off --launch-count $(( 2 * count + 16 ))"
    fi
    echo "gpt_gpu profile: step $PROFILE_STEP of $STEPS: $before launches before it, $count in it" \
        "(dstrain's count); ncu $sel"
    PREFIX="$NCU --clock-control none --metrics gpu__time_duration.sum $sel --csv --page raw
            --log-file $TMP/ncu.csv"
    # the window around the step (range mode), and no events of the timers in the way
    export DSTRAIN_PROFILE_STEP=$PROFILE_STEP DSTRAIN_GPU_TIMERS=0
    run_dstrain
    rc=$?
    if [ "$rc" -ne 0 ]; then
        tail -n 20 "$TMP/out" "$TMP/err" "$TMP/ncu.csv" >&2
        echo "gpt_gpu: dstrain under ncu failed (exit $rc)" >&2
        exit 1
    fi
    python3 - "$TMP/ncu.csv" "$count" "${PROFILE_TOP:-15}" <<'PY'
import csv, re, sys
path, counted, top = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [r for r in csv.reader(l for l in open(path, errors="replace") if l.startswith('"'))]
if len(rows) < 3:
    sys.exit("gpt_gpu: ncu profiled no kernel (see its log: " + path + "):\n" +
             "".join(open(path, errors="replace").readlines()[-10:]))
head, units = rows[0], rows[1]
try:
    kn, tm = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
except ValueError:
    sys.exit("gpt_gpu: no Kernel Name or gpu__time_duration.sum column in ncu's output")
scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(units[tm], None)
if scale is None:
    sys.exit(f"gpt_gpu: unknown unit '{units[tm]}' of gpu__time_duration.sum")
by = {}
for r in rows[2:]:
    name = re.sub(r"\(.*$", "", r[kn]).strip() or r[kn]   # no parameter list
    name = re.sub(r"^(void )", "", name)
    ms = float(r[tm].replace(",", "")) * scale
    c = by.setdefault(name, [0.0, 0])
    c[0] += ms
    c[1] += 1
total = sum(v[0] for v in by.values())
n = sum(v[1] for v in by.values())
print(f"gpt_gpu profile: {n} kernels profiled (dstrain counted {counted} launches, cuBLAS "
      f"calls once each), {total:.2f} ms of GPU time in the step")
for name, (ms, k) in sorted(by.items(), key=lambda kv: -kv[1][0])[:top]:
    print(f"gpt_gpu profile: {ms:9.3f} ms {100 * ms / total:5.1f}% {k:5d}x {name[:100]}")
PY
    exit $?
fi
run_dstrain
rc=$?
if [ "$rc" -ne 0 ]; then
    if [ "$rc" -eq 3 ] || grep -q "built without CUDA\|needs a GPU" "$TMP/err"; then
        echo "gpt_gpu: no GPU to run on: $(grep -m1 nccl "$TMP/err")" >&2
    else
        tail -n 20 "$TMP/out" "$TMP/err" >&2
        echo "gpt_gpu: dstrain failed (exit $rc)" >&2
    fi
    exit 1
fi
cat "$TMP/out"
tps=$(grep "^step .* tokens/s" "$TMP/out" | tail -n 1 | sed -n 's/.* tokens\/s \([0-9]*\).*/\1/p')
[ -n "$tps" ] || { echo "gpt_gpu: no tokens/s in dstrain's progress lines" >&2; exit 1; }
python3 - "$tps" "$PEAK" $L $C $T $V "$ATTN_NAME" "$EPILOGUES" <<'PY'
import sys
tps, peak = float(sys.argv[1]), float(sys.argv[2])
L, C, T, V = map(int, sys.argv[3:7])
attn, epi = sys.argv[7], sys.argv[8]
params = 12 * L * C * C + V * C
fpt = 6 * params + 12 * L * T * C
tf = tps * fpt / 1e12
print(f"gpt_gpu: GPT-2 124M shapes ({params / 1e6:.1f} M matmul parameters), bf16, world 1: "
      f"{tps:.0f} tokens/s, {fpt / 1e9:.3f} GFLOP/token, {tf:.1f} TFLOP/s, "
      f"MFU {100 * tf / peak:.1f}% of {peak:g} TFLOP/s; attention on {attn}; "
      f"cuBLASLt epilogues {epi}")
PY
