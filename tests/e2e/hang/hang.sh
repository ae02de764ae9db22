#!/usr/bin/env bash
# Hang detection through the real programs: dslaunch, dstrain, the flow worker and a
# Python program with the opt-in heartbeat, on the local transport.
# usage: hang.sh DSLAUNCH DSTRAIN WORKER SOURCE_DIR
#
# No check depends on how fast the machine is: a verdict must not come before the
# timeout that allows it (hang, comm), and the times from a fault to the exit are
# printed as TAP comments, not judged (bench/faults.py times detection).
set -u
DSL=$1
DSTRAIN=$2
W=$3
SRC=$4
. "$SRC/tests/e2e/flow/lib.sh"
export DSLAUNCH_LOCAL_SLOTS=4
unset CUDA_VISIBLE_DEVICES PYTHONFAULTHANDLER DSLAUNCH_PROGRESS_FILE
export OMP_NUM_THREADS=1
cd "$T_TMP"

# a tiny model that trains "forever" (steps take about a millisecond)
TINY="--backend tcp --data synthetic --synthetic-train 512 --synthetic-test 128
      --synthetic-dim 24 --hidden 32,16 --train-batch 32 --micro-batch 8 --bucket-size 200
      --steps-per-print 200 --eval-interval 0 --lr 0.01"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }
# measured TEXT: a measurement, printed as a TAP comment at the end
measured() { echo "$*" >>"$T_TMP/measured"; }

# rank_pid TAG RANK: the live process of the job tagged TAG whose RANK is RANK
rank_pid() {
    local p
    for p in $(procs_with_tag "$1"); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2"; then
            case $(readlink "/proc/$p/exe" 2>/dev/null) in
                */dstrain | */python3* | */flow_worker) echo "$p"; return 0 ;;
            esac
        fi
    done
    return 1
}

# stacks_of REPORT RANK: the stack section of one rank in a text report
stacks_of() {
    awk -v r="==== rank $2 " 'index($0, r) == 1 { on = 1; next } /^==== rank / { on = 0 } on' "$1"
}

# dstrain_job DIR HANG_TIMEOUT: in the new directory DIR (the cwd after), dslaunch with
# --hang-timeout HANG_TIMEOUT starts 2 dstrain ranks in the background (job: its pid)
# and returns once they train; victim is rank 1's pid, run_id the job's run id
dstrain_job() {
    mkdir "$1" && cd "$1"
    "$DSL" --hang-timeout "$2" --term-timeout 2 --include localhost:0,1 "$DSTRAIN" $TINY \
        --steps 100000000 --metrics m.json >out 2>err &
    job=$!
    wait_metrics m.json 60
    victim=$(rank_pid "$FLOW_TAG" 1)
    run_id=$(tr "\0" "\n" <"/proc/$victim/environ" | sed -n "s/^DSLAUNCH_RUN_ID=//p")
}

# job_exit T0: waits for dstrain_job's dslaunch; rc is its exit status, t the seconds
# from T0 to its exit
job_exit() {
    rc=0
    wait $job || rc=$?
    t=$(since "$1")
}

# json_check FILE PYTHON-EXPRESSION: the report's JSON (as d) satisfies the expression
json_check() {
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
ok = eval(sys.argv[2])
sys.exit(0 if ok else 1)' "$1" "$2" || { cat "$1" >&2; fail "report $1: not $2"; }
}

expect_success "dstrain: a stopped rank is named with the collective it never entered; stacks of every rank" '
    export FLOW_TAG=hangA.$$ DSLAUNCH_COMM_TIMEOUT=120
    dstrain_job A 3
    pf=$(tr "\0" "\n" <"/proc/$victim/environ" | sed -n "s/^DSLAUNCH_PROGRESS_FILE=//p")
    case $pf in /dev/shm/dslaunch-$run_id-1.[0-9]*.progress) ;; *) fail "progress file $pf" ;; esac
    [ -e "$pf" ] || fail "no progress file for rank 1"
    kill -STOP "$victim"
    t0=$(now)
    job_exit "$t0"
    measured "hang first: SIGSTOP of rank 1 -> dslaunch exit $t s (hang timeout 3 s, grace 2 s)"
    assert_eq "$rc" 205 "exit code"
    assert_grep "error: hang: rank 1 (localhost, pid $victim, stopped) never entered [a-z_]* #[0-9]*; rank 0 waits in it" err
    report=$(ls dslaunch-hang-*.txt)
    for r in 0 1; do
        stacks_of "$report" $r >s$r
        assert_grep "^#0 " s$r
    done
    # rank 0 waits inside the collective; rank 1 was stopped wherever SIGSTOP found it
    # (inside a collective, or between two: in the sampler, the optimizer ...)
    assert_grep "dsl_comm_" s0
    json_check "${report%.txt}.json" "d[\"reason\"] == \"hang\" and d[\"stuck\"] == [1] and all(\"#0\" in r[\"stack\"] for r in d[\"ranks\"])"
    # never before a whole hang timeout; how long after it is measured, not judged
    # (bench/faults.py times detection)
    ge "$t" 3 || fail "the job went down $t s after the stop, before the hang timeout (3 s)"
    wait_no_procs "$FLOW_TAG" 10
    [ ! -e "$pf" ] || fail "progress file left behind"
    assert_job_clean 10 "$run_id"
'

expect_success "dstrain: when the collective times out first, the summary names the stopped rank, not rank 0" '
    export FLOW_TAG=hangB.$$ DSLAUNCH_COMM_TIMEOUT=3 DSLAUNCH_STORE_TIMEOUT=120
    dstrain_job B 600
    survivor=$(rank_pid "$FLOW_TAG" 0)
    kill -STOP "$victim"
    t0=$(now)
    wait_gone 30 "$survivor"
    ts=$(since "$t0")
    job_exit "$t0"
    measured "comm timeout first: SIGSTOP of rank 1 -> rank 0 exit $ts s (comm timeout 3 s), -> dslaunch exit $t s"
    assert_eq "$rc" 205 "exit code"
    assert_grep "allreduce timed out after 3.0 s waiting for rank 1" err
    assert_grep "error: hang: rank 1 (localhost, pid $victim, stopped) never entered [a-z_]* #[0-9]* (no progress for [0-9.]* s); rank 0 waited in it and exited with code 1" err
    assert_not_grep "rank 0 (host localhost, pid [0-9]*) exited with code 1" err
    stacks_of dslaunch-hang-*.txt 1 >s1
    assert_grep "^#0 " s1
    ge "$ts" 3 || fail "rank 0 exited $ts s after its peer stopped, before the comm timeout (3 s)"
    wait_no_procs "$FLOW_TAG" 10
    assert_job_clean 10 "$run_id"
'

# by_hand N NAME SIG: N dstrain ranks under the env contract (no launcher), rank 1 gets
# SIG mid-run; prints "rank:seconds-from-signal-to-exit:status" per survivor
by_hand() {
    local n=$1 name=$2 sig=$3 port=$((20000 + RANDOM % 12000)) r p t0
    local pids=()
    for r in $(seq 0 $((n - 1))); do
        RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$port DSLAUNCH_RUN_ID=$name DSLAUNCH_RUN_TOKEN=t \
            DSLAUNCH_COMM_TIMEOUT=3 DSLAUNCH_STORE_TIMEOUT=120 \
            "$DSTRAIN" $TINY --train-batch $((8 * n)) --steps 100000000 --metrics "$name.m.json" \
            >"$name.$r.out" 2>"$name.$r.err" &
        pids+=($!)
    done
    wait_metrics "$name.m.json" 60
    kill -"$sig" "${pids[1]}"
    t0=$(now)
    for r in $(seq 0 $((n - 1))); do
        [ "$r" = 1 ] && continue
        local rc=0
        wait "${pids[$r]}" || rc=$?
        echo "$r:$(since "$t0"):$rc"
    done
    kill -KILL "${pids[1]}" 2>/dev/null || true
    wait "${pids[1]}" 2>/dev/null || true
}

expect_success "survivors of a stopped or killed peer exit with an error that names it (world 3, no launcher)" '
    for sig in STOP KILL; do
        by_hand 3 surv$sig $sig >times.$sig
        measured "world 3 by hand, SIG$sig of rank 1 -> survivors exit (rank:s:status) $(tr "\n" " " <times.$sig)"
        while IFS=: read -r r s st; do
            [ "$st" != 0 ] || fail "rank $r exited 0 after its peer got SIG$sig"
            [ "$sig" = KILL ] || ge "$s" 3 || fail "rank $r exited $s s after SIG$sig of rank 1, before the comm timeout (3 s)"
        done <times.$sig
        grep -q "rank 1" surv$sig.0.err || fail "rank 0 does not name rank 1"
    done
'

cat >hb.py <<'EOF'
import os, time
def beat(step):  # the documented one line (docs/reliability.md), in a function
    if "DSLAUNCH_PROGRESS_FILE" in os.environ: open(os.environ["DSLAUNCH_PROGRESS_FILE"], "w").write(f"step {step}\n")
def stuck_here():
    while True:
        time.sleep(1000)
rank = int(os.environ["RANK"])
for step in range(10**9):
    beat(step)
    if rank == 1 and step == 20:
        stuck_here()
    time.sleep(0.05)
EOF

expect_success "python: a rank whose heartbeat stops is named; its Python stack is in the report" '
    export FLOW_TAG=hangP.$$
    mkdir P && cd P
    run_capture rc out err "$DSL" --hang-timeout 2 --term-timeout 2 --include localhost:0,1 python3 ../hb.py
    assert_eq "$rc" 205 "exit code"
    assert_grep "error: hang: rank 1 (localhost, pid [0-9]*) made no progress for [0-9.]* s (at step 20); rank 0 advanced meanwhile" err
    report=$(ls dslaunch-hang-*.txt)
    stacks_of "$report" 1 >s1
    assert_grep "Python traceback (faulthandler)" s1
    assert_grep "line [0-9]* in stuck_here" s1
    stacks_of "$report" 0 >s0
    assert_grep "hb.py\", line [0-9]* in <module>" s0
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "python below a shell rank (sh -c \"python3 hb.py; ...\"): named, and the Python stack of its python is in the report" '
    export FLOW_TAG=hangQ.$$
    mkdir Q && cd Q
    # "; exit" keeps sh from exec-ing python: the rank is sh, python its child
    run_capture rc out err "$DSL" --hang-timeout 2 --term-timeout 2 --include localhost:0,1 \
        sh -c "python3 ../hb.py; exit \$?"
    assert_eq "$rc" 205 "exit code"
    assert_grep "error: hang: rank 1 (localhost, pid [0-9]*) made no progress for [0-9.]* s (at step 20); rank 0 advanced meanwhile" err
    report=$(ls dslaunch-hang-*.txt)
    stacks_of "$report" 1 >s1
    assert_grep "Python traceback (faulthandler) of the rank.s python pid [0-9]* ---" s1
    assert_grep "line [0-9]* in stuck_here" s1
    stacks_of "$report" 0 >s0
    assert_grep "hb.py\", line [0-9]* in <module>" s0
    wait_no_procs "$FLOW_TAG" 10
'

# A checkpoint save longer than the hang timeout, in the binary record as dstrain writes
# it: rank 0 left allreduce #4 and is "saving a checkpoint" (the record's phase) while
# rank 1 waits inside #5, the collective that ends the save. "writes": the save writes
# 4 KiB every 0.1 s for 6 s (3x --hang-timeout 2), then rank 0 enters #5 and both leave
# it. "stuck": the save writes nothing.
cat >phase.py <<'EOF'
import mmap, os, struct, sys, time
f = open(os.environ["DSLAUNCH_PROGRESS_FILE"], "r+b")
m = mmap.mmap(f.fileno(), 64)
def rec(step, seq, inside, phase):  # magic, version, step, coll, beat, phase
    m[0:40] = struct.pack("<IIQQQQ", 0x504C5344, 1, step, seq << 8 | 1 << 1 | inside, 0, phase)
def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.02)
if os.environ["RANK"] == "1":
    rec(4, 5, 1, 0)
    wait_for("saved")
    rec(5, 5, 0, 0)
    sys.exit(0)
rec(4, 4, 0, 1)
if sys.argv[1] == "stuck":
    time.sleep(1000)
fd = os.open("ckpt.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
end = time.time() + 6
while time.time() < end:
    os.write(fd, b"x" * 4096)
    time.sleep(0.1)
os.close(fd)
rec(4, 5, 1, 0)
open("saved", "w").close()
time.sleep(0.2)
rec(5, 5, 0, 0)
EOF

# phase_job DIR MODE: in the new directory DIR (the cwd after), phase.py MODE on 2 ranks
# under a hang timeout of 2 s, into rc, out and err
phase_job() {
    mkdir "$1" && cd "$1"
    run_capture rc out err "$DSL" --hang-timeout 2 --term-timeout 2 --include localhost:0,1 \
        python3 ../phase.py "$2"
}

expect_success "a checkpoint save 3x longer than the hang timeout is no hang while it writes (the saving phase of the record)" '
    export FLOW_TAG=hangS.$$
    phase_job S writes
    assert_eq "$rc" 0 "exit code"
    assert_not_grep "hang" err
    [ "$(stat -c %s ckpt.bin)" -ge $((40 * 4096)) ] || fail "the save wrote $(stat -c %s ckpt.bin) bytes"
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "a checkpoint save that writes nothing is a hang that names the saving rank with its phase" '
    export FLOW_TAG=hangT.$$
    phase_job T stuck
    assert_eq "$rc" 205 "exit code"
    assert_grep "error: hang: rank 0 (localhost, pid [0-9]*, saving a checkpoint) never entered allreduce #5; rank 1 waits in it" err
    json_check dslaunch-hang-*.json "d[\"ranks\"][0][\"progress\"][\"phase\"] == \"saving a checkpoint\""
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "a rank that exits 0 while another sleeps is reported after the hang timeout; report in --log-dir" '
    export FLOW_TAG=hangE.$$
    run_capture rc out err "$DSL" --hang-timeout 2 --log-dir logs --include localhost:0,1 "$W" only 0 exit 0 0.3
    assert_eq "$rc" 205 "exit code"
    assert_grep "error: hang: rank 0 exited 0 at 0.[0-9] s; rank 1 (localhost, pid [0-9]*) still running at [0-9.]* s, no progress for [0-9.]* s" err
    report=$(ls logs/dslaunch-hang-*.txt)
    stacks_of "$report" 1 >s1
    assert_grep "nanosleep" s1
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "--job-timeout stops the job with 206, stacks and a report" '
    export FLOW_TAG=hangJ.$$
    mkdir J && cd J
    run_capture rc out err "$DSL" --job-timeout 2 --include localhost:0,1 "$W" sleep 600
    assert_eq "$rc" 206 "exit code"
    assert_grep "error: job timeout: the job ran for 2.[0-9] s, past --job-timeout 2 s" err
    json_check dslaunch-hang-*.json "d[\"reason\"] == \"job_timeout\" and d[\"exit_code\"] == 206 and all(\"nanosleep\" in r[\"stack\"] for r in d[\"ranks\"])"
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "ranks get a progress file and PYTHONFAULTHANDLER, none with --hang-timeout 0; dead agents files are swept" '
    # one left by an agent that was SIGKILLed (no such pid can exist), one of a live one
    stale=/dev/shm/dslaunch-000000000000-0.4194305.progress
    alive=/dev/shm/dslaunch-000000000000-0.$$.progress
    : >"$stale"
    : >"$alive"
    run_capture rc out err "$DSL" --include localhost:0,1 env
    [ ! -e "$stale" ] || fail "the progress file of a dead agent was not swept"
    [ -e "$alive" ] || fail "the progress file of a live agent was removed"
    rm -f "$alive"
    assert_eq "$rc" 0
    assert_grep "^\[rank 1\] DSLAUNCH_PROGRESS_FILE=/dev/shm/dslaunch-[0-9a-f]\{12\}-1\.[0-9]*\.progress$" out
    assert_grep "^\[rank 0\] PYTHONFAULTHANDLER=1$" out
    f=$(sed -n "s/^\[rank 1\] DSLAUNCH_PROGRESS_FILE=//p" out)
    [ ! -e "$f" ] || fail "progress file $f left behind"
    run_capture rc out err "$DSL" --hang-timeout 0 --include localhost:0,1 env
    assert_eq "$rc" 0
    assert_not_grep "DSLAUNCH_PROGRESS_FILE" out
    assert_not_grep "PYTHONFAULTHANDLER" out
    run_capture rc out err "$DSL" --hang-timeout 0.5 --include localhost:0 "$W" env
    assert_eq "$rc" 2
    assert_grep "hang-timeout" err
'

expect_success "a program that reports no progress is not judged without --hang-timeout" '
    run_capture rc out err "$DSL" --include localhost:0,1 sh -c "[ \"\$RANK\" = 0 ] || sleep 3"
    assert_eq "$rc" 0
    assert_not_grep "hang" err
'

expect_success "dstrain results are bit-identical with and without a progress file" '
    port=$((20000 + RANDOM % 12000))
    for mode in with without; do
        for r in 0 1; do
            f=""
            if [ $mode = with ]; then
                head -c 4096 /dev/zero >prog.$r
                f=$T_TMP/prog.$r
            fi
            DSLAUNCH_PROGRESS_FILE=$f RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 \
                MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DSLAUNCH_RUN_ID=bits$mode \
                DSLAUNCH_RUN_TOKEN=t "$DSTRAIN" $TINY --steps 40 --save-params p.$mode \
                >bits.$mode.$r.out 2>&1 &
        done
        wait
        port=$((port + 1))
    done
    cmp p.with p.without || fail "parameters differ with the progress file"
    python3 -c "import struct; m, v, step, coll = struct.unpack(\"<IIQQ\", open(\"prog.1\", \"rb\").read(24)); assert m == 0x504c5344 and v == 1 and step == 40 and coll >> 8 > 40, (m, v, step, coll >> 8)"
'

[ -s "$T_TMP/measured" ] && sed "s/^/# /" "$T_TMP/measured"
done_testing
