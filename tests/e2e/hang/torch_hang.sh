#!/usr/bin/env bash
# Hang detection of real PyTorch DDP programs (tests/e2e/hang/ddp.py: Gloo, env://,
# printing on rank 0 only), which report no progress of their own: healthy jobs run to
# their end under a hang timeout shorter than their run, and each kind of culprit is
# named alone. Skips (77) without PyTorch (Debian's python3-torch).
# usage: torch_hang.sh DSLAUNCH SOURCE_DIR [cluster]
#   cluster: one rank on each of the first 2 nodes of the namespace cluster (under
#   with_cluster.sh 2, which sets DSL_CLUSTER_DIR); else two local ranks.
#
# The hang timeout is 2 s. No check here depends on how fast the machine is: a verdict
# must report at least a whole timeout of silence (never early), and how long after the
# timeout it came is written to the scratch file "measured", not judged.
set -u
DSL=$1
SRC=$2
shift 2
. "$SRC/tests/e2e/flow/lib.sh"
HANG=2
PROG=$SRC/tests/e2e/hang/ddp.py
unset CUDA_VISIBLE_DEVICES PYTHONFAULTHANDLER DSLAUNCH_PROGRESS_FILE MASTER_ADDR MASTER_PORT
export OMP_NUM_THREADS=1

PY=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
        PY=$(command -v "$p")
        break
    fi
done
if [ -z "$PY" ]; then
    echo "SKIP: no python3 with PyTorch (Debian: apt-get install python3-torch)" >&2
    exit 77
fi

if [ $# -gt 0 ]; then
    . "$SRC/tests/e2e/multinode/nslib.sh"
    WHERE=(--hostfile "$D/hostfile" --ssh-config "$D/ssh_config" --num_nodes 2
           --num_gpus 1 --export OMP_NUM_THREADS=1)
    NODE1=node2
else
    export DSLAUNCH_LOCAL_SLOTS=2
    cd "$T_TMP"
    WHERE=(--include localhost:0,1)
    NODE1=localhost
fi
RUN=("$DSL" "${WHERE[@]}" --hang-timeout $HANG --term-timeout 2 "$PY" "$PROG")

# quiet_ok ERRFILE: the verdict reports a silence of at least the hang timeout
quiet_ok() {
    local q
    q=$(sed -n 's/^dslaunch: error: hang: .*; no progress anywhere for \([0-9.]*\) s$/\1/p' "$1")
    [ -n "$q" ] || fail "no verdict with its silence in $1"
    echo "${2:-?}: no progress for $q s at the verdict (hang timeout $HANG s)" >>"$T_TMP/measured"
    awk -v q="$q" -v t=$HANG 'BEGIN { exit !(q >= t) }' || fail "verdict after only $q s of silence"
}

# stuck_is JSON LIST: the report blames exactly these ranks
stuck_is() {
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if d["stuck"] == json.loads(sys.argv[2]) and d["exit_code"] == 205 else 1)' \
        "$1" "$2" || { cat "$1" >&2; fail "report $1: stuck is not $2"; }
}

expect_success "a healthy DDP job printing on rank 0 only runs to its end under a hang timeout shorter than its run" '
    mkdir healthy && cd healthy
    run_capture rc out err "${RUN[@]}" healthy $((3 * HANG))
    assert_eq "$rc" 0 "exit code"
    assert_not_grep "hang" err
    assert_grep "rank 0\] step 5 " out
    assert_not_grep "rank 1\]" out
'

expect_success "a healthy job silent for longer than the hang timeout, rank 0 waiting for a straggler, runs to its end" '
    mkdir straggler && cd straggler
    run_capture rc out err "${RUN[@]}" straggler $((3 * HANG))
    assert_eq "$rc" 0 "exit code"
    assert_not_grep "hang" err
'

expect_success "a silent loading phase longer than the hang timeout, before the first print, is no hang" '
    mkdir loading && cd loading
    run_capture rc out err "${RUN[@]}" loading $((2 * HANG + 1))
    assert_eq "$rc" 0 "exit code"
    assert_not_grep "hang" err
    assert_grep "rank 0\] step 0 " out
'

# culprit MODE VERDICT-PATTERN STUCK [nobound]: rank 1 misbehaves (ddp.py MODE); the
# verdict names what it did, and the report blames STUCK. nobound: the job never showed
# progress, so its silence counts from the start (the ranks' imports included): the
# verdict's silence is not checked then.
culprit() {
    mkdir "$1" && cd "$1"
    run_capture rc out err "${RUN[@]}" "$1" 600
    assert_eq "$rc" 205 "exit code"
    assert_grep "^dslaunch: error: hang: $2; no progress anywhere for [0-9.]* s$" err
    [ "${4:-}" = nobound ] || quiet_ok err "$1"
    stuck_is dslaunch-hang-*.json "$3"
}

R1="rank 1 ($NODE1, pid [0-9]*"
WAITS="rank 0 waits inside a torch.distributed collective for it"
expect_success "a rank deadlocked outside the collectives is named alone, asleep" '
    culprit sleep "$R1) sleeps outside any collective (no CPU time); $WAITS" [1]
'
expect_success "a rank spinning in a Python loop is named alone, busy" '
    culprit spin "$R1) is busy outside any collective (CPU time or I/O advancing); $WAITS" [1]
'
expect_success "a SIGSTOPped rank is named alone, stopped" '
    culprit stop "$R1, stopped) is stopped; $WAITS" [1]
'
expect_success "a rank that exited 0 before its peers joined is named alone while they wait for it" '
    culprit exit "rank 1 ($NODE1) exited 0 at [0-9.]* s; rank 0 still waits inside the torch.distributed rendezvous (TCPStore) for it" [1] nobound
'
expect_success "a rank that exits 0 in the middle of training is named, not the peer that lost it" '
    mkdir quit && cd quit
    run_capture rc out err "${RUN[@]}" quit 600
    assert_eq "$rc" 205 "exit code"
    assert_grep "^dslaunch: error: hang: rank 1 ($NODE1) exited 0 at [0-9.]* s while its peers still ran; rank 0 lost it in a collective and exited with code 1 at [0-9.]* s$" err
    assert_not_grep "error: rank 0 (host" err
    stuck_is dslaunch-hang-*.json [1]
'
expect_success "when every rank waits in a collective that does not complete, the backend is blamed" '
    culprit allwait "every rank waits inside a gloo collective that does not complete (ranks 0-1): none is missing, so the network or the communication backend is at fault" [0,1]
'

[ -s "$T_TMP/measured" ] && sed "s/^/# /" "$T_TMP/measured"
done_testing
