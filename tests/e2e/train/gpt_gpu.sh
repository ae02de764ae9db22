#!/bin/sh
# The GPT on the GPU end to end (label gpu): the real dstrain with --backend nccl at
# world 1 trains a tiny GPT (2 layers, d=32, 2 heads, context 16, bytes) on generated
# text, in fp32 and in bf16 (fp32 master weights):
#   - the loss falls (the final training loss below 60% of ln 256, the untrained one);
#   - fp32 tracks the CPU run (--backend tcp) of the same job: the final training loss
#     within 5e-3 relative and the validation loss too (40 steps of drift from
#     rounding in another order; test_gpu_gpt checks 12 steps at 1e-3);
#   - bf16 tracks the CPU's fp32 within 5e-2 relative (16-bit activations);
#   - two GPU runs save the same parameter bits (--save-params): at world 1 nothing is
#     summed across ranks, and every kernel and cuBLAS call has a fixed order.
# Skipped (77) when this dstrain has no CUDA, or there is no NVIDIA driver or no GPU
# visible.
#
#   gpt_gpu.sh <dstrain>       exit 0 pass, 1 fail, 77 skip
set -u
DSTRAIN=$1
. "$(dirname "$0")/scratch.sh"
scratch gptgpu 60
[ -x "$DSTRAIN" ] || skip "no dstrain"

seq 1 600 | awk '{ print $1 % 7, "the quick brown fox jumps over the lazy dog" }' >"$TMP/text"
cat >"$TMP/bf16.json" <<'JSON'
{"bf16": {"enabled": true}}
JSON
ARGS="--model gpt --layers 2 --dim 32 --heads 2 --context 16 --vocab 256
      --data text --data-path $TMP/text --train-batch 16 --micro-batch 8 --lr 0.003
      --steps 40 --eval-interval 40 --steps-per-print 0 --bucket-size 3000 --seed 3"

run() { # NAME ARGS...: one rank at world 1; summary line into $TMP/NAME.sum
    name=$1
    shift
    # shellcheck disable=SC2086 # ARGS are words
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000 )) \
        "$DSTRAIN" $ARGS "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
    rc=$?
    # no GPU here: a build without CUDA, no driver, or no device; a GPU host whose
    # cuBLAS or NCCL cannot be loaded fails (exit 3 names the library)
    grep -q "built without CUDA\|libcuda.so.1 (the NVIDIA driver)\|no GPU is visible" \
        "$TMP/$name.err" && skip "$(grep -m1 "nccl" "$TMP/$name.err")"
    [ "$rc" -eq 0 ] || { tail -n 20 "$TMP/$name.out" "$TMP/$name.err" >&2; fail "run $name failed"; }
    grep "^summary:" "$TMP/$name.out" >"$TMP/$name.sum" || fail "no summary from $name"
}

run gpu1 --backend nccl --save-params "$TMP/p.gpu1"
run gpu2 --backend nccl --save-params "$TMP/p.gpu2"
run cpu --backend tcp
run bf16 --backend nccl --config "$TMP/bf16.json"
cmp -s "$TMP/p.gpu1" "$TMP/p.gpu2" || fail "two GPU runs saved different parameters"

python3 - "$TMP" <<'PY' || fail "the GPU runs do not track the CPU run"
import re, sys
d = sys.argv[1]
def summary(name):
    s = open(f"{d}/{name}.sum").read()
    return float(re.search(r"final_loss ([0-9.]+)", s).group(1)), \
        float(re.search(r"val_loss ([0-9.]+)", s).group(1))
c, g, b = summary("cpu"), summary("gpu1"), summary("bf16")
print("# final/val loss: cpu", c, "gpu fp32", g, "gpu bf16", b)
for (x, y, tol, what) in ((g[0], c[0], 5e-3, "fp32 final"), (g[1], c[1], 5e-3, "fp32 val"),
                          (b[0], c[0], 5e-2, "bf16 final"), (b[1], c[1], 5e-2, "bf16 val")):
    rel = abs(x - y) / abs(y)
    print(f"# {what}: {x} vs cpu {y}, rel {rel:.3g} (bound {tol})")
    assert rel <= tol, what
assert g[0] < 0.6 * 5.545 and b[0] < 0.6 * 5.545, "the loss did not fall from ln 256"
PY
echo "PASS"
