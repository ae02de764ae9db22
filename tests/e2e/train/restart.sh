#!/bin/sh
# dstrain under dslaunch --max-restarts: a rank killed once mid-training, the job
# restarted, resumed from the latest complete checkpoint ("resume" defaults to "auto"
# under a restart), and the final parameters compared bit for bit with a run stopped
# at that checkpoint and resumed by hand.
#
#   restart.sh <dslaunch> <dstrain>       exit 0 pass, 1 fail, 77 skip
set -u
DSL=$1
DSTRAIN=$2
. "$(dirname "$0")/scratch.sh"
# generous bounds: a loaded machine (ASan, parallel ctest) must not fail a healthy run
scratch restart 120
unset CUDA_VISIBLE_DEVICES
. "$(dirname "$0")/../flow/census.sh"
. "$(dirname "$0")/victim.sh"
[ -x "$DSL" ] && [ -x "$DSTRAIN" ] || skip "no dslaunch or dstrain"

# a few milliseconds a step, so that a kill lands well inside the run
M="--backend tcp --data synthetic --synthetic-train 4096 --synthetic-test 64
   --synthetic-dim 128 --hidden 256,256 --train-batch 64 --micro-batch 32 --lr 0.001
   --steps-per-print 0 --eval-interval 0"
STEPS=600
CK=$TMP/ck

# The rank program is a script, not dstrain, so dslaunch cannot hand rank 0 a reserved
# master port: it checks 29500 is free and releases it, and another job started at
# that moment (this test under another OpenBLAS kernel family, in parallel) can take
# it first. A port of its own, one the kernel just gave out as free, keeps such runs
# apart.
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null) ||
    PORT=29500

# launch NAME ARGS...: dslaunch on 2 local ranks; output in $TMP/NAME.{out,err}
launch() {
    name=$1
    shift
    "$DSL" --include localhost:0,1 --master_port "$PORT" "$@" >"$TMP/$name.out" \
        2>"$TMP/$name.err"
}
show() { for f in "$TMP/$1".out "$TMP/$1".err; do echo "== $f"; tail -n 30 "$f"; done >&2; }

# The rank program: on the first attempt, rank 1 is SIGKILLed (with its dstrain) as
# soon as a checkpoint is committed; any other rank or attempt is dstrain itself.
write_victim "$TMP/victim" "$DSTRAIN" "$CK" '[ "$RANK" = 1 ]' \
    "echo \"\$DSLAUNCH_RUN_ID\" >>\"$TMP/ids\""

# 1. the restarted job finishes with exit 0 after resuming
launch restart --max-restarts 2 "$TMP/victim" $M --steps $STEPS --save-interval 50 \
    --checkpoint-dir "$CK" --save-params "$TMP/p.restart"
rc=$?
[ "$rc" -eq 0 ] || { show restart; fail "restarted job exited $rc"; }
grep -q "attempt 1: rank 1 on localhost was killed by SIGKILL at .*; restarting (1 of 2)" \
    "$TMP/restart.err" || { show restart; fail "no restart line for the killed rank"; }
grep -q "^  attempt 2: every rank exited 0" "$TMP/restart.err" ||
    { show restart; fail "no successful second attempt in the summary"; }
at=$(sed -n "s/.*dstrain: resumed from '.*global_step\([0-9]*\)' at step \([0-9]*\) .*/\2/p" \
    "$TMP/restart.out")
[ -n "$at" ] || { show restart; fail "the second attempt did not resume from a checkpoint"; }
[ "$at" -ge 50 ] && [ "$at" -lt "$STEPS" ] || fail "resumed at step $at"
# nothing of either attempt is left: processes, cgroups, progress files
ids=$(sort -u "$TMP/ids")
[ "$(echo "$ids" | wc -l)" -eq 2 ] || fail "expected the run ids of 2 attempts, got: $ids"
# shellcheck disable=SC2086
wait_job_clean 10 $ids || fail "the restarted job left processes, cgroups or files behind"
echo "# rank 1 killed after the checkpoint at step $at; resumed there"

# 2. the same by hand: stopped at that checkpoint, resumed with --resume latest
launch stop "$DSTRAIN" $M --steps "$at" --checkpoint-dir "$TMP/ref" ||
    { show stop; fail "the stopped run failed"; }
launch resume "$DSTRAIN" $M --steps $STEPS --checkpoint-dir "$TMP/ref" --resume latest \
    --save-params "$TMP/p.ref" || { show resume; fail "the resumed run failed"; }
cmp -s "$TMP/p.restart" "$TMP/p.ref" ||
    fail "the restarted job's parameters differ from a run stopped at step $at and resumed"
echo "# parameters equal the stopped-and-resumed run bit for bit"

# 3. "resume": "auto" takes the latest complete checkpoint, never a half-written one:
# a later step's partial save, and even a later tag that "latest" does not name yet,
# are left alone
mkdir -p "$TMP/ref/global_step9999.partial"
echo junk >"$TMP/ref/global_step9999.partial/mp_rank_00_model_states.safetensors"
cp -r "$TMP/ref/global_step$STEPS" "$TMP/ref/global_step9998"
launch auto "$DSTRAIN" $M --steps $STEPS --checkpoint-dir "$TMP/ref" --resume auto \
    --save-params "$TMP/p.auto" || { show auto; fail "--resume auto failed"; }
grep -q "resumed from '.*global_step$STEPS' at step $STEPS" "$TMP/auto.out" ||
    { show auto; fail "--resume auto did not take the latest complete checkpoint"; }

# 4. a restart with nothing saved yet starts afresh, silently: rank 1 fails before
# dstrain starts on the first attempt; the result is the uninterrupted run
cat >"$TMP/early" <<EOF
#!/bin/sh
[ "\$DSLAUNCH_RESTART_COUNT" = 0 ] && [ "\$RANK" = 1 ] && exit 1
exec "$DSTRAIN" "\$@"
EOF
chmod +x "$TMP/early"
launch early --max-restarts 1 "$TMP/early" $M --steps 100 --save-interval 50 \
    --checkpoint-dir "$TMP/ck_early" --save-params "$TMP/p.early" ||
    { show early; fail "the restart without a checkpoint failed"; }
grep -q "resumed" "$TMP/early.out" && fail "resumed although nothing was saved"
launch plain "$DSTRAIN" $M --steps 100 --save-params "$TMP/p.plain" ||
    { show plain; fail "the uninterrupted run failed"; }
cmp -s "$TMP/p.early" "$TMP/p.plain" || fail "a fresh restart differs from the uninterrupted run"

# 5. "auto" without any checkpoint, outside a launcher, is a fresh start too
"$DSTRAIN" $M --steps 5 --checkpoint-dir "$TMP/empty" --resume auto >"$TMP/alone.out" 2>&1 ||
    { cat "$TMP/alone.out" >&2; fail "--resume auto on an empty directory failed"; }
grep -q "resumed" "$TMP/alone.out" && fail "resumed from an empty directory"
echo "# ok"
exit 0
