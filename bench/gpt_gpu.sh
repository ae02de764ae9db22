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
#
# Needs a dstrain built with CUDA and a visible GPU: without one it says so and exits 1.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-40}
MB=${3:-16}
PEAK=${PEAK_TFLOPS:-989}
ATTENTION=${ATTENTION:-tensor}
case $ATTENTION in
tensor) ATTN_NAME="tensor cores (WMMA, bf16 in, fp32 accumulators)" ;;
scalar) ATTN_NAME="scalar fp32 kernels" ;;
auto) ATTN_NAME="the model's choice (tensor cores on sm_80+)" ;;
*) echo "ATTENTION '$ATTENTION' is none of tensor, scalar, auto" >&2; exit 1 ;;
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
DSL_GPT_ATTENTION=$ATTENTION RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000 )) \
    "$DSTRAIN" --config "$TMP/bench.json" >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ "$rc" -ne 0 ]; then
    if grep -q "built without CUDA\|needs a GPU and none is visible" "$TMP/err"; then
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
python3 - "$tps" "$PEAK" $L $C $T $V "$ATTN_NAME" <<'PY'
import sys
tps, peak = float(sys.argv[1]), float(sys.argv[2])
L, C, T, V = map(int, sys.argv[3:7])
attn = sys.argv[7]
params = 12 * L * C * C + V * C
fpt = 6 * params + 12 * L * T * C
tf = tps * fpt / 1e12
print(f"gpt_gpu: GPT-2 124M shapes ({params / 1e6:.1f} M matmul parameters), bf16, world 1: "
      f"{tps:.0f} tokens/s, {fpt / 1e9:.3f} GFLOP/token, {tf:.1f} TFLOP/s, "
      f"MFU {100 * tf / peak:.1f}% of {peak:g} TFLOP/s; attention on {attn}")
PY
