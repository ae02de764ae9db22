#!/usr/bin/env bash
# Hang detection across nodes: world 6 (3 namespace nodes x 2 slots, over SSH), run
# under with_cluster.sh 3. A dstrain rank on the middle node is SIGSTOPped; the
# launcher must name it, whether its hang timeout or the peers' comm timeout fires
# first, and collect the stacks of all six ranks through their node agents.
# usage: with_cluster.sh 3 cluster_hang.sh DSLAUNCH DSTRAIN SOURCE_DIR
set -u
DSL=$1
DSTRAIN=$2
SRC=$3
. "$SRC/tests/e2e/flow/lib.sh"
. "$SRC/tests/e2e/multinode/nslib.sh"
export OMP_NUM_THREADS=1
TINY="--backend tcp --data synthetic --synthetic-train 960 --synthetic-test 96
      --synthetic-dim 24 --hidden 32,16 --train-batch 48 --micro-batch 8 --bucket-size 200
      --steps-per-print 200 --eval-interval 0 --lr 0.01 --steps 100000000"

# rank_pid TAG RANK: the dstrain process of rank RANK in the job tagged TAG
rank_pid() {
    local p
    for p in $(procs_with_tag "$1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2" || continue
        case $(readlink "/proc/$p/exe" 2>/dev/null) in */dstrain) echo "$p"; return 0 ;; esac
    done
    return 1
}

# run_stopped NAME HANG COMM WHAT: the job, rank 3 stopped once it trains; rc and the
# seconds from the stop to dslaunch's exit in $NAME.rc and $NAME.t, and with WHAT (the
# timeout that was to act) and the hang line in measured; the exit must be 205
run_stopped() {
    local name=$1 hang=$2 comm=$3 job victim t0 rc=0
    mkdir "$name"
    (cd "$name" && exec "$DSL" "${SSH[@]}" --hang-timeout "$hang" --term-timeout 2 \
        --export FLOW_TAG="$name.$$" --export OMP_NUM_THREADS \
        --export DSLAUNCH_COMM_TIMEOUT="$comm" \
        "$DSTRAIN" $TINY --metrics "$T_TMP/$name/m.json" >out 2>err) &
    job=$!
    wait_metrics "$name/m.json" 90
    victim=$(rank_pid "$name.$$" 3) || fail "rank 3 not found"
    echo "$victim" >"$name.victim"
    tr '\0' '\n' <"/proc/$victim/environ" | sed -n "s/^DSLAUNCH_RUN_ID=//p" >"$name.runid"
    kill -STOP "$victim"
    t0=$(date +%s.%N)
    wait $job || rc=$?
    echo "$rc" >"$name.rc"
    awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }' >"$name.t"
    echo "# stop -> dslaunch exit $(cat "$name.t") s ($4)" >>measured
    grep "error: hang" "$name/err" >>measured || true
    assert_eq "$rc" 205 "exit code"
}

json_stacks() {
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["ranks"]) == 6 and all("#0" in r["stack"] for r in d["ranks"]), d["ranks"]
assert d["stuck"] == [3], d["stuck"]' "$1" || fail "report $1 lacks a stack of every rank"
}

expect_success "world 6 on 3 nodes: a rank stopped on node2 is named by the hang timeout, stacks of all 6" '
    run_stopped hangfirst 4 120 "hang timeout 4 s"
    victim=$(cat hangfirst.victim)
    assert_grep "error: hang: rank 3 (node2, pid $victim, stopped) \(never entered\|makes no progress inside\) [a-z_]* #[0-9]*; ranks* [0-9,-]* waits* in it" hangfirst/err
    json_stacks hangfirst/dslaunch-hang-*.json
    wait_ns_clean 15
    assert_job_clean 15 "$(cat hangfirst.runid)"
'

expect_success "world 6 on 3 nodes: when the peers time out first, the stopped rank is named" '
    run_stopped commfirst 600 4 "comm timeout 4 s"
    victim=$(cat commfirst.victim)
    assert_grep "timed out after 4.0 s" commfirst/err
    assert_grep "error: hang: rank 3 (node2, pid $victim, stopped)" commfirst/err
    wait_ns_clean 15
    assert_job_clean 15 "$(cat commfirst.runid)"
'

[ -s measured ] && sed "s/^\([^#]\)/# \1/" measured
done_testing
