#!/usr/bin/env bash
# Flow tests of `dslaunch doctor` on this machine alone (local transport, no cluster).
# usage: doctor_flow.sh DSLAUNCH SOURCE_DIR
set -u
DSL=$1
SRC=$2
. "$SRC/tests/e2e/flow/lib.sh"
unset CUDA_VISIBLE_DEVICES NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME DSLAUNCH_FAKE_VERSION
cd "$T_TMP"
printf 'localhost slots=2\n' >hosts

row() { grep -E "^$1 +$2 +" "$3"; }

expect_success "a healthy local node: exit 0, every check ok, an all-reduce with its bandwidth" '
    run_capture rc out err "$DSL" doctor --hostfile hosts
    cat out err
    assert_eq "$rc" 0
    for c in agent dslaunch kernel glibc "cuda driver" nccl gpus "master port" clock disk cwd; do
        row localhost "$c" out | grep -Eq " (ok|note) " || fail "no row for $c"
    done
    row localhost dslaunch out | grep -q "ok .*(protocol [0-9]*)"
    row localhost cwd out | grep -q "ok .*$T_TMP exists"
    row cluster allreduce out | grep -Eq "(ok|note) .*busbw [0-9.]+ GB/s"
    assert_grep "^doctor: all checks passed on 1 node(s)" out
'

expect_success "a missing program and working directory are problems with remedies" '
    run_capture rc out err "$DSL" doctor --hostfile hosts --remote-cwd /nonexistent/dir \
        no-such-program-xyz --its-arg
    cat out err
    assert_eq "$rc" 1
    row localhost cwd out | grep -q "FAIL .*/nonexistent/dir missing"
    grep -A1 -E "^localhost +cwd" out | grep -q "fix: create /nonexistent/dir on localhost"
    row localhost program out | grep -q "FAIL"
    grep -A1 -E "^localhost +program" out | grep -q "fix: install no-such-program-xyz on localhost"
    row cluster allreduce out | grep -q "note .*skipped"
    assert_grep "^doctor: 2 problem(s)" out
'

expect_success "an agent of another version (testing hook) fails the dslaunch row" '
    DSLAUNCH_FAKE_VERSION=9.9.9 run_capture rc out err "$DSL" doctor --no-allreduce --hostfile hosts
    assert_eq "$rc" 1
    row localhost dslaunch out | grep -q "FAIL .*9.9.9"
    grep -A1 -E "^localhost +dslaunch" out | grep -q "fix: install dslaunch"
'

expect_success "--json prints one object for scripts" '
    run_capture rc out err "$DSL" doctor --json --no-allreduce --hostfile hosts
    assert_eq "$rc" 0
    python3 -c "
import json
o = json.load(open(\"out\"))
assert o[\"ok\"] is True and o[\"problems\"] == 0, o
n = o[\"nodes\"][0]
assert n[\"host\"] == \"localhost\" and n[\"reachable\"] and n[\"slots\"] == 2, n
assert n[\"disk_free\"] > 0 and abs(n[\"clock_offset\"]) < 1, n
assert all(c[\"status\"] in (\"ok\", \"note\") for c in o[\"checks\"]), o[\"checks\"]
assert \"allreduce\" not in o
"
'

expect_success "a failing all-reduce (no dsbench to be found) is a problem with the command to rerun" '
    mkdir -p bin && cp "$DSL" bin/dslaunch
    PATH=/usr/bin:/bin run_capture rc out err bin/dslaunch doctor --hostfile hosts
    cat out err
    assert_eq "$rc" 1
    row cluster allreduce out | grep -q "FAIL .*failed (exit 127, tcp backend)"
    grep -A1 -E "^cluster +allreduce" out |
        grep -q "fix: install dsbench (built with dslaunch) beside dslaunch on every node; run it by hand to see everything: .*bin/dslaunch --hostfile hosts --no-prefix dsbench -b 1M"
    assert_grep "^doctor: 1 problem(s)" out
'

expect_success "a bad option is a usage error (exit 2)" '
    run_capture rc out err "$DSL" doctor --no-such-option
    assert_eq "$rc" 2
    assert_grep "usage: dslaunch doctor" err
'

echo "1..$T_N"
exit $((T_FAILED > 0))
