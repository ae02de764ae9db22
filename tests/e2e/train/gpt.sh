#!/bin/sh
# The GPT (dstrain.model.type "gpt") end to end, with the MLP's guarantees: a tiny
# model (2 layers, d=32, context 40: two of attention's row tiles of 32) trains under
# dslaunch at world 2 with falling loss; deterministic mode is bit-identical across
# worlds 1/2/4, ZeRO stages 0/1/2/3 (zero3: stage 3's layers, also in bf16 and fp16;
# zero3mem: its bytes; zero3ck: its checkpoints) and thread counts, also with
# --cpu-half (bf16) and with bf16 products (--cpu-gemm); a checkpoint resumes bit for
# bit, also at another world size, with Hugging Face's GPT-2 tensor names; consolidate writes them; `dstrain sample` continues
# a sentence the model learned; and (with python3-torch) PyTorch computes the same
# validation loss from the consolidated weights; and (inputs) what a new user runs into:
# finished runs resumed, shape mismatches, odd prompts and names, killed runs' metrics.
# The text is generated here, so no package is needed.
#
#   gpt.sh <dslaunch> <dstrain> <test>       exit 0 pass, 1 fail, 77 skip
set -u
DSL=$1
DSTRAIN=$2
TEST=$3
. "$(dirname "$0")/scratch.sh"
scratch gpt 60
unset CUDA_VISIBLE_DEVICES
[ -x "$DSL" ] && [ -x "$DSTRAIN" ] || skip "no dslaunch or dstrain"

# a few sentences over and over: structure a tiny model learns in a hundred steps
seq 1 600 | awk '{ print $1 % 7, "the quick brown fox jumps over the lazy dog" }' >"$TMP/text"
# every run of a test uses the same global batch (16); CPU path (--backend tcp)
GPT="--backend tcp --model gpt --layers 2 --dim 32 --heads 4 --context 40 --vocab 256
     --data text --data-path $TMP/text --stride 1 --train-batch 16 --micro-batch 8
     --lr 0.003 --steps-per-print 0 --bucket-size 3000"

WORLD_ARGS=$GPT WORLD_TAG=gpt
# shellcheck source=tests/e2e/train/world.sh
. "$(dirname "$0")/world.sh"

case $TEST in
launch)
    # under dslaunch, 2 local ranks, 300 steps: the loss falls (the last eval's far
    # below the first's), the progress lines count tokens, the eval line is in nats
    # and bits per byte
    "$DSL" --include localhost:0,1 "$DSTRAIN" $GPT --steps 300 --eval-interval 50 \
        --steps-per-print 50 --metrics "$TMP/m.jsonl" --checkpoint-dir "$TMP/ck" \
        >"$TMP/l.out" 2>"$TMP/l.err" ||
        { tail -n 30 "$TMP/l.out" "$TMP/l.err" >&2; fail "dslaunch run failed"; }
    grep -Eq "step 50/300 .* tokens/s [0-9]+ elapsed" "$TMP/l.out" ||
        fail "no tokens/s on the progress line: $(cat "$TMP/l.out")"
    grep -Eq "eval step 300 .* val_loss [0-9.]+ nats/byte [0-9.]+ bits/byte" "$TMP/l.out" ||
        fail "no validation loss in nats and bits per byte: $(cat "$TMP/l.out")"
    python3 - "$TMP/m.jsonl" <<'PY' || fail "the loss did not fall: $(grep eval "$TMP/l.out")"
import json, math, sys
m = [json.loads(l) for l in open(sys.argv[1])]
ev = [x for x in m if x["type"] == "eval"]
st = [x for x in m if x["type"] == "step"]
first, last = ev[0]["test_loss"], ev[-1]["test_loss"]
print("# validation loss", [round(e["test_loss"], 3) for e in ev])
assert len(ev) == 6, ev
assert first < math.log(256) and last < 0.2 * first, (first, last)
assert st[0]["loss"] > 5.0 and st[-1]["loss"] < 0.1 * st[0]["loss"], (st[0], st[-1])
PY
    # what it learned, as text: the sentence goes on from its first words
    "$DSTRAIN" sample --checkpoint "$TMP/ck" --prompt "3 the quick" --tokens 24 \
        --temperature 0 >"$TMP/s.out" 2>&1 || fail "sample failed: $(cat "$TMP/s.out")"
    grep -q "^3 the quick brown fox jumps over" "$TMP/s.out" ||
        fail "sample does not continue the sentence: $(cat "$TMP/s.out")"
    "$DSTRAIN" sample --checkpoint "$TMP/nothing" >"$TMP/s2.out" 2>&1 && fail "no checkpoint accepted"
    grep -q "no checkpoint in '$TMP/nothing'" "$TMP/s2.out" || fail "sample error: $(cat "$TMP/s2.out")"
    "$DSTRAIN" sample --checkpoint "$TMP/ck" --tokens 0 >"$TMP/s3.out" 2>&1 && fail "--tokens 0 accepted"
    grep -q "option '--tokens' is out of range: allowed 1..1000000, got '0'$" "$TMP/s3.out" ||
        fail "--tokens error: $(cat "$TMP/s3.out")"
    # --seed 0 is a seed of its own, not 1's (at the highest temperature the draws are
    # near uniform, so two seeds agreeing on 24 bytes would be a bug, not chance)
    "$DSTRAIN" sample --checkpoint "$TMP/ck" --tokens 24 --temperature 100 --seed 0 \
        >"$TMP/s0.out" 2>&1 || fail "sample --seed 0: $(cat "$TMP/s0.out")"
    "$DSTRAIN" sample --checkpoint "$TMP/ck" --tokens 24 --temperature 100 --seed 1 \
        >"$TMP/s1.out" 2>&1 || fail "sample --seed 1: $(cat "$TMP/s1.out")"
    cmp -s "$TMP/s0.out" "$TMP/s1.out" && fail "--seed 0 drew what --seed 1 drew"
    # tokenize: --out's directory is made; text too short to split, or none, writes nothing
    "$DSTRAIN" tokenize --out "$TMP/tk/a/b" "$TMP/text" >"$TMP/t1.out" 2>&1 ||
        fail "tokenize into a new directory: $(cat "$TMP/t1.out")"
    grep -q "of 1 file: wrote '$TMP/tk/a/b/text_train.bin' ([0-9]* tokens)" "$TMP/t1.out" ||
        fail "tokenize: $(cat "$TMP/t1.out")"
    : >"$TMP/empty"
    printf x >"$TMP/one"
    "$DSTRAIN" tokenize --out "$TMP/tk2" "$TMP/empty" >"$TMP/t2.out" 2>&1 && fail "empty text accepted"
    grep -q "no text: 1 file of 0 bytes" "$TMP/t2.out" || fail "empty text: $(cat "$TMP/t2.out")"
    "$DSTRAIN" tokenize --out "$TMP/tk2" "$TMP/one" >"$TMP/t3.out" 2>&1 && fail "1 byte accepted"
    grep -q "1 byte of text: too few to split" "$TMP/t3.out" || fail "1 byte: $(cat "$TMP/t3.out")"
    [ ! -e "$TMP/tk2" ] || fail "a refused tokenize left $(ls -R "$TMP/tk2")"
    ;;
monitors)
    # DeepSpeed's csv_monitor and tensorboard keys of a DeepSpeed user's config: the
    # files where DeepSpeed puts them, the csv rows the metrics' losses, the event file
    # TFRecords (checked CRCs) of Event protos that protoc --decode_raw reads; and
    # dstrain plot draws the metrics file
    cat >"$TMP/mon.json" <<JSON
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 8, "fp16": {"enabled": true},
 "csv_monitor": {"enabled": true, "output_path": "$TMP/out/csv/", "job_name": "j1"},
 "tensorboard": {"enabled": true, "output_path": "$TMP/out/tb", "job_name": "j1"}}
JSON
    train_ok 1 mon --config "$TMP/mon.json" --steps 6 --eval-interval 3 --metrics "$TMP/mon.jsonl"
    for f in Train_Samples_train_loss Train_Samples_lr Train_Samples_loss_scale Eval_Samples_test_loss; do
        [ -f "$TMP/out/csv/j1/$f.csv" ] || { ls -R "$TMP/out" >&2; fail "no csv_monitor file $f.csv"; }
    done
    ev=$(ls "$TMP"/out/tb/j1/events.out.tfevents.*) || fail "no tensorboard event file"
    python3 - "$TMP/mon.jsonl" "$TMP/out/csv/j1" "$ev" <<'PY' || fail "monitor files"
import json, struct, sys
m = [json.loads(l) for l in open(sys.argv[1])]
steps = [x for x in m if x["type"] == "step"]
rows = open(sys.argv[2] + "/Train_Samples_train_loss.csv", newline="").read().split("\r\n")
assert rows[0] == "step,train_loss" and rows[-1] == "", rows
got = [tuple(r.split(",")) for r in rows[1:-1]]
want = [(str(16 * s["step"]), s["loss"]) for s in steps]
assert len(got) == len(want) == 6, (got, want)
for (gx, gy), (wx, wy) in zip(got, want):
    assert gx == wx and abs(float(gy) - wy) <= 1e-6 * abs(wy), (gx, gy, wx, wy)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
    return c ^ 0xFFFFFFFF
def masked(b):
    c = crc32c(b)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
data, pos, recs = open(sys.argv[3], "rb").read(), 0, []
while pos < len(data):
    n, = struct.unpack_from("<Q", data, pos)
    assert struct.unpack_from("<I", data, pos + 8)[0] == masked(data[pos:pos + 8]), pos
    rec = data[pos + 12:pos + 12 + n]
    assert struct.unpack_from("<I", data, pos + 12 + n)[0] == masked(rec), pos
    recs.append(rec)
    pos += 16 + n
assert pos == len(data) and len(recs) == 1 + 6 * 3 + 2, len(recs)
for i, r in enumerate(recs):
    open("%s.rec%d" % (sys.argv[3], i), "wb").write(r)
PY
    "$DSTRAIN" plot "$TMP/mon.jsonl" --width 40 --height 8 >"$TMP/plot.out" 2>&1 ||
        fail "dstrain plot: $(cat "$TMP/plot.out")"
    grep -q "^$TMP/mon.jsonl: loss by step (\* training: 6 steps, o evaluation: 2)$" "$TMP/plot.out" &&
        [ "$(grep -c '|' "$TMP/plot.out")" -eq 8 ] || fail "dstrain plot: $(cat "$TMP/plot.out")"
    printf 'not json\n' >"$TMP/bad.jsonl"
    "$DSTRAIN" plot "$TMP/bad.jsonl" >"$TMP/plotbad.out" 2>&1 && fail "plot of no losses succeeded"
    grep -q "dstrain plot: no losses in '$TMP/bad.jsonl' (1 line is not records of a metrics file)" \
        "$TMP/plotbad.out" || fail "plot of no losses: $(cat "$TMP/plotbad.out")"
    command -v protoc >/dev/null || skip "no protoc (Debian protobuf-compiler) to decode the events"
    protoc --decode_raw <"$ev.rec0" >"$TMP/rec0.txt" || fail "protoc cannot read the first event"
    grep -q '^3: "brain.Event:2"' "$TMP/rec0.txt" || fail "first event: $(cat "$TMP/rec0.txt")"
    protoc --decode_raw <"$ev.rec1" >"$TMP/rec1.txt" || fail "protoc cannot read an event"
    tr -d ' \n' <"$TMP/rec1.txt" >"$TMP/rec1.flat"
    grep -q '^1:0x[0-9a-f]*2:165{1{1:"Train/Samples/train_loss"2:0x[0-9a-f]*}}$' "$TMP/rec1.flat" ||
        fail "a scalar event: $(cat "$TMP/rec1.txt")"
    ;;
worlds)
    # deterministic mode: worlds 1 and 2 and every stage, and 2 threads, same bits
    train_ok 1 w1 --steps 12 --eval-interval 6 --save-params "$TMP/p.w1"
    for st in 0 1 2; do
        train_ok 2 "w2s$st" --steps 12 --eval-interval 6 --zero-stage "$st" \
            --save-params "$TMP/p.w2s$st"
        cmp -s "$TMP/p.w1" "$TMP/p.w2s$st" || fail "world 2 stage $st differs from world 1"
    done
    # world 4: micro batch 4 at every world size (the deterministic order is per micro
    # batch), so worlds 1 and 4 run 4 and 1 micro steps per step
    train_ok 1 m1 --steps 6 --eval-interval 6 --micro-batch 4 --save-params "$TMP/p.m1"
    train_ok 4 m4 --steps 6 --eval-interval 6 --micro-batch 4 --zero-stage 2 \
        --save-params "$TMP/p.m4"
    cmp -s "$TMP/p.m1" "$TMP/p.m4" || fail "world 4 stage 2 differs from world 1"
    # stage 0 with overlap and one micro step streams the optimizer; the GPT hands no
    # loss over before backward, so each bucket is updated inside the step
    train_ok 4 m4s0 --steps 6 --eval-interval 6 --micro-batch 4 --zero-stage 0 \
        --overlap-comm true --save-params "$TMP/p.m4s0"
    cmp -s "$TMP/p.m1" "$TMP/p.m4s0" || fail "world 4 stage 0 with overlap differs from world 1"
    train_ok 2 ov --steps 12 --eval-interval 6 --zero-stage 2 --overlap-comm true \
        --save-params "$TMP/p.ov"
    cmp -s "$TMP/p.w1" "$TMP/p.ov" || fail "world 2 stage 2 with overlap differs"
    train_ok 1 t2 --steps 12 --eval-interval 6 --threads 2 --save-params "$TMP/p.t2"
    cmp -s "$TMP/p.w1" "$TMP/p.t2" || fail "world 1 with 2 threads differs from 1 thread"
    grep -q "val_loss" "$TMP/w1.0.out" || fail "no evaluation line"
    # --cpu-half (bf16 parameters and gradients, fp32 arithmetic): worlds 1 and 2
    # (stage 2) agree too, and train
    echo '{"bf16": {"enabled": true}}' >"$TMP/bf16.json"
    train_ok 1 h1 --config "$TMP/bf16.json" --cpu-half --steps 12 --eval-interval 12 \
        --save-params "$TMP/p.h1"
    train_ok 2 h2 --config "$TMP/bf16.json" --cpu-half --steps 12 --eval-interval 12 \
        --zero-stage 2 --save-params "$TMP/p.h2"
    grep -q "bf16 with fp32 master weights" "$TMP/h1.0.out" || fail "not the bf16 path"
    cmp -s "$TMP/p.h1" "$TMP/p.h2" || fail "bf16 world 2 stage 2 differs from world 1"
    cmp -s "$TMP/p.h1" "$TMP/p.w1" && fail "bf16 gave the fp32 parameters"
    grep -Eq "^summary: .* val_loss [0-4]\.[0-9]+ nats/byte" "$TMP/h1.0.out" ||
        fail "bf16 did not train: $(grep summary "$TMP/h1.0.out")"
    # --cpu-gemm bf16 (oneDNN): where the CPU has bf16 instructions, the same bits at
    # worlds 1 and 2, stage 2 and 2 threads, not fp32's, and it trains; elsewhere (and
    # when oneDNN is held to AVX2) it says so and gives fp32's bits
    train_ok 1 g1 --cpu-gemm bf16 --steps 12 --eval-interval 6 --save-params "$TMP/p.g1"
    if grep -q "large matrix products in bf16" "$TMP/g1.0.out"; then
        train_ok 2 g2 --cpu-gemm bf16 --steps 12 --eval-interval 6 --zero-stage 2 \
            --save-params "$TMP/p.g2"
        cmp -s "$TMP/p.g1" "$TMP/p.g2" || fail "bf16 products: world 2 stage 2 differs from world 1"
        train_ok 1 gt --cpu-gemm bf16 --steps 12 --eval-interval 6 --threads 2 \
            --save-params "$TMP/p.gt"
        cmp -s "$TMP/p.g1" "$TMP/p.gt" || fail "bf16 products: 2 threads differ from 1"
        cmp -s "$TMP/p.g1" "$TMP/p.w1" && fail "bf16 products gave the fp32 parameters"
        grep -Eq "^summary: .* val_loss [0-4]\.[0-9]+ nats/byte" "$TMP/g1.0.out" ||
            fail "bf16 products did not train: $(grep summary "$TMP/g1.0.out")"
    else
        echo "# no bf16 products here: $(grep cpu_gemm "$TMP/g1.0.err")"
    fi
    export DNNL_MAX_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
    train_ok 1 ga --cpu-gemm bf16 --steps 12 --eval-interval 6 --save-params "$TMP/p.ga"
    unset DNNL_MAX_CPU_ISA ONEDNN_MAX_CPU_ISA
    grep -q 'warning: dstrain.cpu_gemm "bf16": .*, so the products stay fp32' "$TMP/ga.0.err" ||
        fail "no fallback warning: $(cat "$TMP/ga.0.err")"
    cmp -s "$TMP/p.ga" "$TMP/p.w1" || fail "the fp32 fallback differs from fp32"
    ;;
resume)
    # stopped at step 6 and resumed equals the uninterrupted run; a world-2 stage-2
    # checkpoint resumes at world 1; GPT-2's names are in the files and consolidated
    train_ok 2 full --steps 12 --eval-interval 12 --save-params "$TMP/p.full"
    train_ok 2 half --steps 6 --eval-interval 6 --zero-stage 2 --checkpoint-dir "$TMP/ck"
    train_ok 2 rest --steps 12 --eval-interval 12 --checkpoint-dir "$TMP/ck" \
        --resume latest --save-params "$TMP/p.rest"
    grep -q "resumed from .* at step 6" "$TMP/rest.0.out" || fail "no resume line"
    cmp -s "$TMP/p.full" "$TMP/p.rest" || fail "resumed run differs from the uninterrupted one"
    train_ok 1 one --steps 12 --eval-interval 12 --checkpoint-dir "$TMP/ck" \
        --resume global_step6 --save-params "$TMP/p.one"
    cmp -s "$TMP/p.full" "$TMP/p.one" || fail "world-2 checkpoint resumed at world 1 differs"
    # --out's directories are made, as tokenize's are
    "$DSTRAIN" consolidate "$TMP/ck" --out "$TMP/hf/gpt2/model.safetensors" >/dev/null ||
        fail "consolidate failed"
    python3 - "$TMP/hf/gpt2/model.safetensors" <<'PY' || fail "tensor names or shapes"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
want = {"wte.weight": [256, 32], "wpe.weight": [40, 32], "h.0.ln_1.weight": [32],
        "h.0.attn.c_attn.weight": [32, 96], "h.0.attn.c_attn.bias": [96],
        "h.1.attn.c_proj.weight": [32, 32], "h.1.mlp.c_fc.weight": [32, 128],
        "h.1.mlp.c_proj.weight": [128, 32], "ln_f.bias": [32]}
for k, s in want.items():
    assert h[k]["shape"] == s, (k, h.get(k))
assert len([k for k in h if k != "__metadata__"]) == 4 + 12 * 2, sorted(h)
PY
    ;;
inputs)
    # what a new user runs into, each a second or less: a finished run resumed says so
    # and evaluates its checkpoint; the metrics file stays JSON (no NaN) whatever ran
    train_ok 1 done --steps 4 --eval-interval 4 --checkpoint-dir "$TMP/ck" \
        --metrics "$TMP/done.jsonl"
    train_ok 1 again --steps 4 --eval-interval 4 --checkpoint-dir "$TMP/ck" --resume latest \
        --metrics "$TMP/again.jsonl"
    grep -q "^dstrain: the checkpoint is at step 4 and the run ends at step 4 (dstrain.steps): nothing to train; raise the steps to go on" \
        "$TMP/again.0.out" || fail "a finished run resumed: $(cat "$TMP/again.0.out")"
    want=$(sed -n 's/^summary: .* val_loss \([0-9.]*\) nats.*/\1/p' "$TMP/done.0.out")
    grep -q "^summary: steps 4 wall [0-9.]* s tokens/s [0-9]* val_loss $want nats/byte" \
        "$TMP/again.0.out" ||
        fail "a finished run's summary: $(grep summary "$TMP/again.0.out") (want val_loss $want, no final_loss)"
    ! grep -q nan "$TMP/again.0.out" || fail "a finished run resumed prints nan: $(grep nan "$TMP/again.0.out")"
    # resumed with fewer steps than the checkpoint has: refused with the numbers, exit 2
    "$DSTRAIN" $GPT --steps 2 --checkpoint-dir "$TMP/ck" --resume latest >"$TMP/below.out" 2>&1
    rc=$?
    [ "$rc" -eq 2 ] || fail "--steps below the checkpoint's step: exit $rc, not 2: $(cat "$TMP/below.out")"
    grep -q "error: the checkpoint is at step 4 but the run ends at step 2 (dstrain.steps): it is past the end; raise the steps above 4 to go on, or resume an earlier checkpoint (--resume TAG)" \
        "$TMP/below.out" || fail "--steps below the checkpoint's step: $(cat "$TMP/below.out")"
    ! grep -q nan "$TMP/below.out" || fail "--steps below the checkpoint's step printed nan"
    # what a user reads back: sample from a tag's directory named directly, and from
    # consolidate's file (it keeps the model's shape), the same text as from the dir
    "$DSTRAIN" sample --checkpoint "$TMP/ck" --prompt "3 the" --tokens 12 --temperature 0 \
        >"$TMP/sd.out" 2>&1 || fail "sample: $(cat "$TMP/sd.out")"
    "$DSTRAIN" sample --checkpoint "$TMP/ck/global_step4/" --prompt "3 the" --tokens 12 \
        --temperature 0 >"$TMP/st.out" 2>&1 || fail "sample of a tag's directory: $(cat "$TMP/st.out")"
    cmp -s "$TMP/sd.out" "$TMP/st.out" || fail "sample of a tag's directory differs"
    "$DSTRAIN" consolidate "$TMP/ck/global_step4" --out "$TMP/cons/model.safetensors" \
        >"$TMP/co.out" 2>&1 || fail "consolidate of a tag's directory: $(cat "$TMP/co.out")"
    "$DSTRAIN" sample --checkpoint "$TMP/cons/model.safetensors" --prompt "3 the" --tokens 12 \
        --temperature 0 >"$TMP/sc.out" 2>&1 || fail "sample of consolidate's file: $(cat "$TMP/sc.out")"
    cmp -s "$TMP/sd.out" "$TMP/sc.out" || fail "sample of consolidate's file differs: $(cat "$TMP/sc.out")"
    "$DSTRAIN" sample --checkpoint "$TMP/cons/model.safetensors" --tag global_step4 \
        >"$TMP/sct.out" 2>&1 && fail "--tag with a file accepted"
    grep -q "is a file of parameters, not a checkpoint directory: leave out --tag" "$TMP/sct.out" ||
        fail "--tag with a file: $(cat "$TMP/sct.out")"
    python3 - "$TMP/done.jsonl" "$TMP/again.jsonl" <<'PY' || fail "metrics are not JSON"
import json, sys
for f in sys.argv[1:]:
    for l in open(f):
        json.loads(l, parse_constant=lambda c: sys.exit("%s: %s in %s" % (f, c, l)))
s = [json.loads(l) for l in open(sys.argv[2])][-1]
assert s["type"] == "summary" and s["final_loss"] is None and s["test_loss"] > 0, s
PY
    # eval_iters bounds the evaluation: its first eval_iters x global batch samples, the
    # same ones every time; one at least the test set's size is the whole evaluation
    train_ok 1 ei1 --steps 2 --eval-interval 2 --eval-iters 1
    train_ok 1 eiall --steps 2 --eval-interval 2
    train_ok 1 eibig --steps 2 --eval-interval 2 --eval-iters 1000
    grep -q "^dstrain: each evaluation on the first 16 of [0-9]* test samples (dstrain.eval_iters 1 x global batch 16)$" \
        "$TMP/ei1.0.out" || fail "eval_iters 1: $(cat "$TMP/ei1.0.out")"
    ev() { sed -n 's/^eval step 2 .* val_loss \([0-9.]*\) .*/\1/p' "$TMP/$1.0.out"; }
    [ -n "$(ev eiall)" ] && [ "$(ev eiall)" = "$(ev eibig)" ] && [ "$(ev ei1)" != "$(ev eiall)" ] ||
        fail "eval_iters: val_loss $(ev ei1) (1), $(ev eibig) (1000), $(ev eiall) (all)"
    # a model of a vocabulary below 256 (ASCII token shards at vocabulary 128): a prompt
    # byte beyond it is refused before anything is printed, naming the byte
    "$DSTRAIN" tokenize --out "$TMP/ascii" "$TMP/text" >/dev/null || fail "tokenize failed"
    train_ok 1 v128 --steps 2 --eval-interval 2 --data tokens --data-path "$TMP/ascii" \
        --vocab 128 --checkpoint-dir "$TMP/ck128"
    "$DSTRAIN" sample --checkpoint "$TMP/ck128" --prompt "ok é" --tokens 3 >"$TMP/s.out" \
        2>"$TMP/s.err" && fail "a prompt byte beyond the vocabulary accepted"
    [ ! -s "$TMP/s.out" ] || fail "sample printed before refusing: $(cat "$TMP/s.out")"
    grep -q "dstrain sample: the prompt's byte 0xc3 at offset 3 is outside the vocabulary of 128 of checkpoint '$TMP/ck128/global_step2'" \
        "$TMP/s.err" || fail "prompt beyond the vocabulary: $(cat "$TMP/s.err")"
    # a byte-level model of a vocabulary beyond 256 (GPT-2's 50257 on text, as the docs
    # allow; 300 here): sample prints bytes without --encoder/--bpe, and refuses them
    train_ok 1 v300 --steps 2 --eval-interval 2 --vocab 300 --checkpoint-dir "$TMP/ck300"
    "$DSTRAIN" sample --checkpoint "$TMP/ck300" --prompt "3 the" --tokens 8 --temperature 0 \
        >"$TMP/s300.out" 2>&1 || fail "sample of a byte-level vocabulary 300: $(cat "$TMP/s300.out")"
    grep -q "^3 the" "$TMP/s300.out" || fail "sample of a byte-level vocabulary 300: $(cat "$TMP/s300.out")"
    G=$(dirname "$0")/../../data/gpt2
    "$DSTRAIN" sample --checkpoint "$TMP/ck300" --encoder "$G/encoder.json.gz" \
        --bpe "$G/vocab.bpe.gz" >"$TMP/s300b.out" 2>&1 && fail "BPE files taken for a byte-level model"
    grep -q "checkpoint '$TMP/ck300/global_step2' was trained on bytes (its data was text or byte shards): leave out --encoder and --bpe" \
        "$TMP/s300b.out" || fail "BPE files for a byte-level model: $(cat "$TMP/s300b.out")"
    # a checkpoint resumed with another shape of the same parameter count (the heads
    # change no tensor) is refused, not loaded into a different model; an MLP too
    "$DSTRAIN" $GPT --steps 6 --heads 2 --checkpoint-dir "$TMP/ck" --resume latest \
        >"$TMP/h2.out" 2>&1 && fail "a 4-head checkpoint resumed with 2 heads"
    grep -q "checkpoint '$TMP/ck/global_step4' holds a GPT of 2 layers, dim 32, 4 heads, context 40, vocab 256; the model is one of 2 layers, dim 32, 2 heads, context 40, vocab 256: resume with the checkpoint's shape" \
        "$TMP/h2.out" || fail "resume with 2 heads: $(cat "$TMP/h2.out")"
    "$DSTRAIN" --backend tcp --data synthetic --train-batch 8 --steps 6 \
        --checkpoint-dir "$TMP/ck" --resume latest >"$TMP/mlp.out" 2>&1 &&
        fail "a GPT checkpoint resumed as an MLP"
    grep -q "checkpoint '$TMP/ck/global_step4' holds a GPT of 2 layers, dim 32, 4 heads, context 40, vocab 256; the model is an MLP" \
        "$TMP/mlp.out" || fail "resume as an MLP: $(cat "$TMP/mlp.out")"
    # a key the chosen data or model does not use is named, not silently dropped:
    # val_fraction with token shards (their names split them), stride with the MLP
    echo '{"dstrain": {"data": {"val_fraction": 0.5}}}' >"$TMP/vf.json"
    train_ok 1 vf --config "$TMP/vf.json" --steps 1 --eval-interval 1 --data tokens \
        --data-path "$TMP/ascii"
    grep -q "warning: 'dstrain.data.val_fraction' splits dataset \"text\": token shards are split by their names (\*train\*.bin, \*val\*.bin), so it is unused" \
        "$TMP/vf.0.err" || fail "val_fraction with shards: $(cat "$TMP/vf.0.err")"
    # but not for the shipped config's 0.1, the default, when docs/gpt.md trains it on
    # BPE shards with --data tokens
    echo '{"dstrain": {"data": {"val_fraction": 0.1}}}' >"$TMP/vf.json"
    train_ok 1 vf1 --config "$TMP/vf.json" --steps 1 --eval-interval 1 --data tokens \
        --data-path "$TMP/ascii"
    ! grep -q "val_fraction" "$TMP/vf1.0.err" || fail "warned of the default: $(cat "$TMP/vf1.0.err")"
    "$DSTRAIN" --backend tcp --data synthetic --synthetic-train 64 --synthetic-test 16 \
        --synthetic-dim 8 --hidden 8 --train-batch 8 --steps 1 --stride 3 >"$TMP/st.out" 2>&1 ||
        fail "MLP with --stride: $(cat "$TMP/st.out")"
    grep -q "warning: 'dstrain.data.stride' (--stride) spaces the GPT's training windows: the MLP ignores it" \
        "$TMP/st.out" || fail "stride with the MLP: $(cat "$TMP/st.out")"
    # sample reads the parameters only: the model file copied on its own (the
    # optimizer shards are twice its size) is enough, with its checks kept (consolidate
    # still wants the whole checkpoint: ranks.sh)
    mkdir -p "$TMP/only/global_step4"
    cp "$TMP/ck/latest" "$TMP/only/"
    cp "$TMP/ck/global_step4/mp_rank_00_model_states.safetensors" "$TMP/only/global_step4/"
    "$DSTRAIN" sample --checkpoint "$TMP/only" --prompt "3 the" --tokens 4 --temperature 0 \
        >"$TMP/so.out" 2>&1 || fail "sample from the model file alone: $(cat "$TMP/so.out")"
    "$DSTRAIN" sample --checkpoint "$TMP/ck" --prompt "3 the" --tokens 4 --temperature 0 \
        >"$TMP/sf.out" 2>&1 || fail "sample: $(cat "$TMP/sf.out")"
    cmp -s "$TMP/so.out" "$TMP/sf.out" || fail "the model file alone samples otherwise"
    printf 'x' | dd of="$TMP/only/global_step4/mp_rank_00_model_states.safetensors" bs=1 \
        seek=2000 conv=notrunc 2>/dev/null
    "$DSTRAIN" sample --checkpoint "$TMP/only" --tokens 4 >"$TMP/sb.out" 2>&1 &&
        fail "a damaged model file sampled"
    grep -q "mp_rank_00_model_states.safetensors" "$TMP/sb.out" || fail "damaged: $(cat "$TMP/sb.out")"
    # tokenize refuses a --name whose shards dataset "tokens" would not take for their
    # split ("val" and "train" both words: x_val_train.bin), before writing anything
    "$DSTRAIN" tokenize --out "$TMP/nm" --name x_val "$TMP/text" >"$TMP/nm.out" 2>&1 &&
        fail "tokenize --name x_val accepted"
    grep -q "dstrain tokenize: --name 'x_val' makes 'x_val_train.bin', which dataset \"tokens\" would not read as the training split: choose a name without \"train\" or \"val\" as a word" \
        "$TMP/nm.out" || fail "tokenize --name x_val: $(cat "$TMP/nm.out")"
    [ ! -e "$TMP/nm" ] || fail "a refused tokenize wrote $(ls "$TMP/nm")"
    "$DSTRAIN" tokenize --out "$TMP/nm2" --name interval "$TMP/text" >/dev/null 2>&1 ||
        fail "tokenize --name interval refused"
    # tokenize into the directory it reads (both default to '.' in a corpus directory)
    # would read its own shards as text the next time: refused, nothing written
    mkdir -p "$TMP/corpus"
    cp "$TMP/text" "$TMP/corpus/a.txt"
    (cd "$TMP/corpus" && "$DSTRAIN" tokenize .) >"$TMP/cp.out" 2>&1 &&
        fail "tokenize wrote into the directory it reads"
    grep -q "dstrain tokenize: --out '.' is the directory '.' it reads: its shards would be read as text the next time; give --out another directory" \
        "$TMP/cp.out" || fail "tokenize into its input: $(cat "$TMP/cp.out")"
    [ "$(ls "$TMP/corpus")" = a.txt ] || fail "a refused tokenize wrote $(ls "$TMP/corpus")"
    # a run killed mid-training (SIGKILL, or SIGTERM without --save-on-signal) leaves
    # whole JSON lines in its metrics file, not a record cut where a buffer ended
    "$DSTRAIN" $GPT --steps 1000000 --eval-interval 1000000 --metrics "$TMP/k.jsonl" \
        >"$TMP/k.out" 2>&1 &
    kp=$!
    i=0
    while [ "$(cat "$TMP/k.jsonl" 2>/dev/null | grep -c '"type":"step"')" -lt 20 ]; do
        i=$((i + 1))
        [ "$i" -le 600 ] || { kill -9 $kp; fail "no 20 training steps after 60 s"; }
        sleep 0.1
    done
    kill -9 $kp
    wait $kp
    python3 - "$TMP/k.jsonl" <<'PY' || fail "a killed run's metrics: $(tail -c 300 "$TMP/k.jsonl")"
import json, sys
b = open(sys.argv[1]).read()
assert b.endswith("\n"), "the last line is cut: %r" % b[-80:]
for l in b.splitlines():
    json.loads(l)
PY
    # tokenize's refusal quotes the fraction as given, not rounded to an allowed-out 1
    "$DSTRAIN" tokenize --out "$TMP/tk" --val_fraction 0.9999999 "$TMP/text" >"$TMP/t.out" 2>&1 &&
        fail "tokenize split nothing off"
    grep -q "too few to split into training and validation at --val_fraction 0.9999999$" \
        "$TMP/t.out" || fail "tokenize --val_fraction: $(cat "$TMP/t.out")"
    ;;
zero3)
    # ZeRO stage 3 (CPU): deterministic mode gives stage 0's parameters, bit for bit,
    # at worlds 1, 2 and 4, with and without overlap_comm, with every layer gathered
    # (persistence threshold 0), one window (no prefetch), the embeddings kept whole
    # and the blocks gathered (10000), and the default (every layer whole); and its
    # evaluations (the layers from the shards) print stage 0's validation losses; the
    # 16-bit paths (--cpu-half, --cpu-gemm bf16) give their stage 0 bits too. Micro
    # batch 4 at every world size, 3 evaluations in 6 steps.
    Z="--steps 6 --eval-interval 2 --micro-batch 4"
    train_ok 1 r $Z --save-params "$TMP/p.r"
    grep '^eval step' "$TMP/r.0.out" >"$TMP/ev.r"
    [ "$(wc -l <"$TMP/ev.r")" -eq 3 ] || fail "not 3 evaluations: $(cat "$TMP/ev.r")"
    for v in "1 0 false" "2 0 false" "2 0 true" "2 0 true --prefetch-bucket-size 0" \
        "2 10000 true" "2 100000 false" "4 0 true" "4 10000 false" "4 100000 true"; do
        set -- $v
        n=$1 th=$2 ov=$3
        shift 3
        t="z$n.$th.$ov$#"
        train_ok "$n" "$t" $Z --zero-stage 3 --param-persistence-threshold "$th" \
            --overlap-comm "$ov" "$@" --save-params "$TMP/p.$t"
        grep -q "ZeRO stage 3, $n ranks" "$TMP/$t.0.out" || fail "$t: not stage 3 at world $n"
        cmp -s "$TMP/p.r" "$TMP/p.$t" || fail "stage 3 ($v) differs from world 1 stage 0"
        grep '^eval step' "$TMP/$t.0.out" | cmp -s - "$TMP/ev.r" ||
            fail "stage 3 ($v) evaluates otherwise: $(grep '^eval step' "$TMP/$t.0.out")"
    done
    # stages 1 and 2 at world 4 too, so the four stages meet at every world size
    for st in 1 2; do
        train_ok 4 "s$st" $Z --zero-stage "$st" --save-params "$TMP/p.s$st"
        cmp -s "$TMP/p.r" "$TMP/p.s$st" || fail "world 4 stage $st differs from world 1"
    done
    # --cpu-half in bf16 and in fp16 (loss scaling from 2^16: steps overflow and are
    # skipped alike): stage 3 gives stage 0's bits at worlds 2 and 4
    echo '{"bf16": {"enabled": true}}' >"$TMP/bf16.json"
    echo '{"fp16": {"enabled": true, "initial_scale_power": 16}}' >"$TMP/fp16.json"
    for h in bf16 fp16; do
        train_ok 1 "h$h" $Z --config "$TMP/$h.json" --cpu-half --save-params "$TMP/p.h$h"
        grep -q "$h parameters and gradients" "$TMP/h$h.0.err" || fail "not the $h path"
        cmp -s "$TMP/p.h$h" "$TMP/p.r" && fail "$h gave the fp32 parameters"
        for v in "2 0 true" "4 0 false" "4 100000 true"; do
            set -- $v
            t="h$h$1.$2.$3"
            train_ok "$1" "$t" $Z --config "$TMP/$h.json" --cpu-half --zero-stage 3 \
                --param-persistence-threshold "$2" --overlap-comm "$3" --save-params "$TMP/p.$t"
            cmp -s "$TMP/p.h$h" "$TMP/p.$t" || fail "$h stage 3 ($v) differs from world 1"
        done
    done
    # bf16 products (--cpu-gemm, where the CPU has bf16 instructions) likewise
    train_ok 1 g $Z --cpu-gemm bf16 --save-params "$TMP/p.g"
    if grep -q "large matrix products in bf16" "$TMP/g.0.out"; then
        for n in 2 4; do
            train_ok "$n" "g$n" $Z --cpu-gemm bf16 --zero-stage 3 \
                --param-persistence-threshold 0 --save-params "$TMP/p.g$n"
            cmp -s "$TMP/p.g" "$TMP/p.g$n" || fail "bf16 products: world $n stage 3 differs"
        done
        cmp -s "$TMP/p.g" "$TMP/p.r" && fail "bf16 products gave the fp32 parameters"
    else
        echo "# no bf16 products here: $(grep cpu_gemm "$TMP/g.0.err")"
    fi
    ;;
zero3mem)
    # stage 3's model-state bytes are the formula, to the byte: 16 per shard element
    # (fp32 and Adam, or 2 + 2 + 12 with --cpu-half), the staging buckets, and the
    # gathered layers: two windows of the largest layer that is not kept whole, plus
    # the whole copies. Layers: the embeddings (V + T) C (wte and wpe), each block
    # 12 C^2 + 13 C, ln_f 2 C; 3 blocks here, so that threshold 10000 (the embeddings
    # and ln_f whole, the blocks gathered) differs from keeping all whole.
    E=$(((256 + 40) * 32)) K=$((12 * 32 * 32 + 13 * 32)) F=$((2 * 32))
    for v in "fp32 0 4" "fp32 10000 4" "fp32 100000 4" "bf16 0 2"; do
        set -- $v
        h=$1 th=$2 esz=$3
        cfg=
        [ "$h" = bf16 ] && { echo '{"bf16": {"enabled": true}}' >"$TMP/bf16.json";
            cfg="--config $TMP/bf16.json --cpu-half"; }
        t="m$h.$th"
        # shellcheck disable=SC2086 # cfg is words
        train_ok 2 "$t" --steps 2 --eval-interval 0 --zero-stage 3 $cfg \
            --param-persistence-threshold "$th" --layers 3
        P=$(params_of "$TMP/$t.0.out")
        [ "$P" -eq $((E + 3 * K + F)) ] || fail "$P parameters, not the layers' $((E + 3 * K + F))"
        case $th in
        0) want_g=$((2 * K * esz)) ;;                     # two windows of a block
        10000) want_g=$(((2 * K + E + F) * esz)) ;;       # and the embeddings and ln_f whole
        100000) want_g=$((P * esz)) ;;                    # all whole, no window
        esac
        for r in 0 1; do
            model_state "$TMP/$t.0.out" "$r"
            [ "$gath" = "$want_g" ] || fail "$t rank $r: gathered '$gath', expected $want_g"
            [ "$tot" -eq $((16 * S + B + gath)) ] ||
                fail "$t rank $r: $tot bytes, formula $((16 * S + B + gath))"
            nb=$(sed -n 's/.* \([0-9]*\) buckets;.*/\1/p' "$TMP/$t.0.out")
            d=$((2 * S - P))
            [ "${d#-}" -le "$nb" ] || fail "$t rank $r: shard $S of $P params"
        done
        # the printed formula: 16P/N, or (2 + 2 + 12)P/N with fp32 master weights
        f=$(sed -n 's/.*model-state formula \([0-9]*\) bytes.*/\1/p' "$TMP/$t.0.out")
        [ "$f" = $((16 * P / 2)) ] || fail "$t: formula '$f', expected $((16 * P / 2))"
        echo "# $t: P $P, rank 0 model state $tot bytes = 16 x $S + buckets $B + gathered $gath"
    done
    ;;
zero3ck)
    # a stage 3 checkpoint (each rank its own shards, nothing gathered) saved at step 6
    # of 12 at world 2: resumed at world 2 stage 3, resharded to world 1 stage 0 and to
    # world 4 stage 3, each ends with the uninterrupted run's parameters; consolidate
    # and sample read it as any checkpoint
    Z3="--zero-stage 3 --param-persistence-threshold 0"
    C="--steps 12 --eval-interval 6 --micro-batch 4"
    train_ok 2 full $C $Z3 --save-params "$TMP/p.full"
    train_ok 2 half $C $Z3 --steps 6 --checkpoint-dir "$TMP/ck"
    for r in 0 1; do
        [ -f "$TMP/ck/global_step6/zero_pp_rank_${r}_mp_rank_00_model_states.safetensors" ] ||
            fail "stage 3 wrote no parameter shard for rank $r"
    done
    [ ! -e "$TMP/ck/global_step6/mp_rank_00_model_states.safetensors" ] ||
        fail "stage 3 wrote a gathered model file"
    RESUME_ARGS=$C
    resumed_equal ck "2 rest $Z3" "1 to0 --zero-stage 0" "4 to4 $Z3 --overlap-comm true"
    grep -q "each rank read its own shard" "$TMP/rest.0.out" ||
        fail "stage 3 at the save's world did not read per rank"
    # the last of them saved step 12 at world 4 stage 3
    [ -f "$TMP/ck/global_step12/zero_pp_rank_3_mp_rank_00_model_states.safetensors" ] ||
        fail "no world-4 stage-3 checkpoint at step 12: $(ls "$TMP/ck/global_step12")"
    "$DSTRAIN" consolidate "$TMP/ck" --out "$TMP/m.st" >/dev/null || fail "consolidate failed"
    size=$(wc -c <"$TMP/p.full")
    tail -c "$size" "$TMP/m.st" | cmp -s - "$TMP/p.full" ||
        fail "consolidated stage 3 parameters differ from the run's"
    "$DSTRAIN" sample --checkpoint "$TMP/ck" --prompt "3 the" --tokens 8 --temperature 0 \
        >"$TMP/s3.out" 2>&1 || fail "sample of a stage 3 checkpoint: $(cat "$TMP/s3.out")"
    "$DSTRAIN" sample --checkpoint "$TMP/m.st" --prompt "3 the" --tokens 8 --temperature 0 \
        >"$TMP/sc.out" 2>&1 || fail "sample of consolidate's file: $(cat "$TMP/sc.out")"
    grep -q "^3 the" "$TMP/s3.out" && cmp -s "$TMP/s3.out" "$TMP/sc.out" ||
        fail "sample of a stage 3 checkpoint: $(cat "$TMP/s3.out") / $(cat "$TMP/sc.out")"
    ;;
torch)
    # the forward against an independent PyTorch GPT-2 (Hugging Face's layout, Conv1D
    # weights) on the trained, consolidated parameters: the same validation loss
    /usr/bin/python3 -c "import torch, numpy" 2>/dev/null || skip "no python3-torch"
    train_ok 1 tr --steps 200 --eval-interval 200 --checkpoint-dir "$TMP/ck"
    want=$(sed -n 's/^summary: .* val_loss \([0-9.]*\) nats.*/\1/p' "$TMP/tr.0.out")
    "$DSTRAIN" consolidate "$TMP/ck" --out "$TMP/m.st" >/dev/null || fail "consolidate failed"
    PYTHONPATH="$(dirname "$0")/../../../bench/peers" \
    /usr/bin/python3 - "$TMP/m.st" "$TMP/text" "$want" <<'PY' || fail "PyTorch disagrees"
import sys
import numpy as np, torch
import gpt_ref
W = gpt_ref.load(sys.argv[1])
L, C, NH, T = 2, 32, 4, 40
data = np.frombuffer(open(sys.argv[2], "rb").read(), dtype=np.uint8).astype(np.int64)
val = data[int(len(data) * 0.9):]
nw = (len(val) - 1) // T
X = torch.tensor(np.stack([val[i * T:i * T + T] for i in range(nw)]))
Y = torch.tensor(np.stack([val[i * T + 1:i * T + T + 1] for i in range(nw)]))
got = gpt_ref.loss(W, X, Y, L, C, NH)
print("# validation loss: dstrain %s, PyTorch %.6f" % (sys.argv[3], got))
assert abs(got - float(sys.argv[3])) < 1e-3 and got < 1.0, got
PY
    ;;
*)
    fail "unknown test '$TEST'"
    ;;
esac
echo "PASS: gpt $TEST"
