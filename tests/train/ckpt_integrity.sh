#!/bin/sh
# Checkpoint integrity with the real dstrain, one rank (issue 30, item 8): what a user
# meets when a checkpoint is not what was saved.
#
#   ckpt_integrity.sh <dstrain>      exit 0 pass, 1 fail, 77 skip
#
# - files without checksums are refused, naming the file and the option, and load with
#   --allow-unverified-checkpoint (a warning; the resume is bit for bit); the same in
#   `dstrain consolidate` and `dstrain sample`;
# - a nan in the parameters is refused by every reader, naming the tensor and the
#   element, also with --allow-unverified-checkpoint; a diverged run's save is refused
#   and `latest` stays where it was, with no .partial directory left;
# - a terabyte sparse file is refused from its header, at once, without allocating;
# - a stale <tag>.partial/ (whatever is in it) does not break the next save, and is
#   never loaded, by its name or through `latest`.
# A refused resume exits non-zero before the first step: no summary, no checkpoint.
set -u
DSTRAIN=$1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dstrain-ckpt.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }
[ -x "$DSTRAIN" ] || skip "no dstrain"

TINY="--backend tcp --data synthetic --synthetic-train 512 --synthetic-test 128
      --synthetic-dim 24 --hidden 32,16 --train-batch 32 --micro-batch 8 --steps 12
      --bucket-size 200 --steps-per-print 0 --eval-interval 6 --lr 0.01"

# run NAME ARGS...: dstrain with ARGS, stdout and stderr into NAME.out and NAME.err
run() {
    n=$1
    shift
    "$DSTRAIN" "$@" >"$TMP/$n.out" 2>"$TMP/$n.err"
}
show() { cat "$TMP/$1.out" "$TMP/$1.err" >&2; }
# refused NAME TEXT ARGS...: the run fails, says TEXT, and trained nothing
refused() {
    n=$1 text=$2
    shift 2
    if run "$n" "$@"; then
        show "$n"
        fail "$n: accepted"
    fi
    grep -qF -- "$text" "$TMP/$n.err" || { show "$n"; fail "$n: no '$text'"; }
    ! grep -q '^summary:' "$TMP/$n.out" || fail "$n: trained anyway"
}
# put4 FILE INDEX BYTES: the float32 INDEX of FILE's data region becomes BYTES (printf)
put4() {
    hlen=$(od -An -tu8 -N8 "$1" | tr -d ' ')
    printf "$3" | dd of="$1" bs=1 seek=$((8 + hlen + 4 * $2)) conv=notrunc 2>/dev/null
}
NAN='\000\000\300\177'

run full $TINY --save-params "$TMP/p.full" || { show full; fail "plain run"; }
run half $TINY --steps 6 --checkpoint-dir "$TMP/ck" || { show half; fail "first half"; }
MODEL=global_step6/mp_rank_00_model_states.safetensors

# -- no checksums: refused unless allowed, then bit for bit with a warning ----------
cp -R "$TMP/ck" "$TMP/ckold"
for f in "$TMP"/ckold/global_step6/*.safetensors; do
    perl -pi -e 's/,"dsl\.data_sha256":"[0-9a-f]{64}","dsl\.sha256":"[0-9a-f]{64}"/" " x length($&)/e' "$f"
done
! grep -q "dsl.sha256" "$TMP"/ckold/global_step6/*.safetensors || fail "checksums not blanked"
refused nosums "checkpoint file '$TMP/ckold/$MODEL' has no checksums" \
    $TINY --checkpoint-dir "$TMP/ckold" --resume latest
grep -qF "pass --allow-unverified-checkpoint to load it anyway" "$TMP/nosums.err" ||
    fail "the refusal does not say what to do"
[ ! -e "$TMP/ckold/global_step12" ] || fail "a refused resume saved a checkpoint"
refused nosums_cons "has no checksums" consolidate "$TMP/ckold"
refused nosums_sample "has no checksums" sample --checkpoint "$TMP/ckold"
run allowed $TINY --checkpoint-dir "$TMP/ckold" --resume latest --allow-unverified-checkpoint \
    --save-params "$TMP/p.allowed" || { show allowed; fail "--allow-unverified-checkpoint"; }
grep -q "loaded unverified" "$TMP/allowed.err" || { show allowed; fail "no warning"; }
cmp -s "$TMP/p.full" "$TMP/p.allowed" || fail "the unverified resume differs"
# and the config key does the same as the flag
printf '{"train_batch_size": 32, "dstrain": {"allow_unverified_checkpoint": true}}\n' \
    >"$TMP/allow.json"
run allowed_cfg --config "$TMP/allow.json" $TINY --checkpoint-dir "$TMP/ckold" \
    --resume global_step6 || { show allowed_cfg; fail "dstrain.allow_unverified_checkpoint"; }
run cons_allowed consolidate "$TMP/ckold" --tag global_step6 --allow-unverified-checkpoint --out "$TMP/m.st" ||
    { show cons_allowed; fail "consolidate --allow-unverified-checkpoint"; }
grep -q "loaded unverified" "$TMP/cons_allowed.err" || fail "consolidate: no warning"
# sample reads the parameters of a GPT: this MLP checkpoint gets past the checksums only
refused sample_allowed "holds no GPT" sample --checkpoint "$TMP/ckold" --tag global_step6 \
    --allow-unverified-checkpoint

# -- a nan written into the parameters: refused by every reader, whatever the flag ---
echo global_step6 >"$TMP/ckold/latest"
put4 "$TMP/ckold/$MODEL" 2 "$NAN"
NANMSG="checkpoint file '$TMP/ckold/$MODEL': parameter '0.weight' element [0, 2] is nan"
refused nan "$NANMSG" $TINY --checkpoint-dir "$TMP/ckold" --resume latest \
    --allow-unverified-checkpoint
refused nan_cons "$NANMSG" consolidate "$TMP/ckold" --allow-unverified-checkpoint
refused nan_sample "$NANMSG" sample --checkpoint "$TMP/ckold" --allow-unverified-checkpoint

# -- a terabyte of holes after a model file: refused from the header --------------
cp -R "$TMP/ck" "$TMP/cks"
truncate -s 1T "$TMP/cks/$MODEL" 2>/dev/null || truncate -s 16G "$TMP/cks/$MODEL" ||
    skip "no sparse files here"
refused sparse "more than a checkpoint of this model (1498 parameters) can hold" \
    $TINY --checkpoint-dir "$TMP/cks" --resume latest
refused sparse_cons "bytes the header does not describe" consolidate "$TMP/cks"
# a header that agrees with the terabyte (one tensor of 2^38 floats), without checksums:
# refused from the header, or from the size at resume, before anything is read
perl -e '$h = q({"__metadata__":{"dsl.kind":"model","dsl.tag":"global_step6","dsl.numel":"274877906944","dsl.world_size":"1","format":"pt"},"0.weight":{"dtype":"F32","shape":[274877906944],"data_offsets":[0,1099511627776]}});
         $h .= " " x ((8 - length($h) % 8) % 8); print pack("Q<", length $h), $h' \
    >"$TMP/cks/$MODEL"
truncate -s $((1099511627776 + $(od -An -tu8 -N8 "$TMP/cks/$MODEL" | tr -d ' ') + 8)) \
    "$TMP/cks/$MODEL" || skip "no sparse files of a terabyte here"
refused huge "more than a checkpoint of this model (1498 parameters) can hold" \
    $TINY --checkpoint-dir "$TMP/cks" --resume latest --allow-unverified-checkpoint
refused huge_cons "has no checksums" consolidate "$TMP/cks"

# -- a stale partial: the next save goes on, nothing takes it for a checkpoint --------
cp -R "$TMP/ck" "$TMP/ckp"
mkdir -p "$TMP/ckp/global_step12.partial/sub/deeper" "$TMP/ckp/global_step9.partial"
: >"$TMP/ckp/global_step12.partial/mp_rank_00_model_states.safetensors.tmp.0123456789abcdef"
: >"$TMP/ckp/global_step12.partial/sub/deeper/x"
cp "$TMP"/ck/global_step6/* "$TMP/ckp/global_step9.partial/"
refused bypartial "is not a checkpoint: a '.partial' directory is a save that did not finish" \
    $TINY --checkpoint-dir "$TMP/ckp" --resume global_step9.partial
echo global_step9.partial >"$TMP/ckp/latest"
refused latestpartial "names 'global_step9.partial', the directory of a save that did not finish" \
    $TINY --checkpoint-dir "$TMP/ckp" --resume auto
echo global_step6 >"$TMP/ckp/latest"
run stale $TINY --checkpoint-dir "$TMP/ckp" --resume auto --save-interval 6 \
    --save-params "$TMP/p.stale" || { show stale; fail "a stale partial broke the save"; }
cmp -s "$TMP/p.full" "$TMP/p.stale" || fail "the resume beside a stale partial differs"
[ "$(cat "$TMP/ckp/latest")" = global_step12 ] || fail "latest is not global_step12"
ls -d "$TMP"/ckp/*.partial 2>/dev/null && fail "partial directories left after a save"

# -- a diverged run's save: refused, latest kept, no partial left --------------------
printf '{"train_batch_size": 32, "optimizer": {"type": "SGD"}}\n' >"$TMP/sgd.json"
run sgd --config "$TMP/sgd.json" $TINY --steps 3 --checkpoint-dir "$TMP/ckd" ||
    { show sgd; fail "SGD run"; }
if run diverged --config "$TMP/sgd.json" $TINY --lr 1000000 --checkpoint-dir "$TMP/ckd" \
    --resume latest --save-interval 3 --steps 9; then
    show diverged
    fail "a diverged run saved"
fi
grep -q "the training has diverged; nothing was saved" "$TMP/diverged.err" ||
    { show diverged; fail "no message for the diverged save"; }
[ "$(cat "$TMP/ckd/latest")" = global_step3 ] || fail "latest moved"
ls -d "$TMP"/ckd/*.partial 2>/dev/null && fail "the failed save left its partial directory"
[ ! -e "$TMP/ckd/global_step6" ] || fail "the diverged checkpoint is in place"
echo "PASS"
exit 0
