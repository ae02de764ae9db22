#!/usr/bin/env bash
# Cluster tier of `dslaunch doctor` (run under with_cluster.sh 2): a healthy cluster
# passes; a node running another dslaunch version, an NCCL_SOCKET_IFNAME missing on
# node2, and a master port blocked by a firewall rule in node2's namespace are each
# flagged with their remedy line.
# usage: with_cluster.sh 2 doctor_cluster.sh DSLAUNCH SOURCE_DIR
set -u
DSL=$1
SRC=$2
. "$SRC/tests/e2e/flow/lib.sh"
. "$SRC/tests/e2e/multinode/nslib.sh"
# a port of our own, so a busy 29500 elsewhere on the machine cannot interfere
PORT=$((20000 + $$ % 20000))

# the check rows of one host: "HOST  CHECK  STATUS ..." lines of the table
row() { grep -E "^$1 +$2 +" "$3"; }

expect_success "a healthy 2-node cluster: exit 0, one table, an all-reduce with its bandwidth" '
    run_capture rc out err "$DSL" doctor -v -v "${SSH[@]}" --master_port $PORT
    cat out err
    assert_eq "$rc" 0
    row node1 dslaunch out | grep -q " ok "
    row node2 dslaunch out | grep -q " ok "
    row node2 "master port" out | grep -q "ok .*reached $ADDR_1:$PORT via"
    if [ "$MODE" = netns ]; then
        row node2 "master port" out | grep -q "via $IFNAME_2 ($ADDR_2)"
    fi
    row node1 clock out | grep -q " ok "
    row node2 cwd out | grep -q " ok "
    row cluster allreduce out | grep -Eq "(ok|note) .*busbw [0-9.]+ GB/s \\(tcp backend, 4 rank\\(s\\)"
    assert_grep "^doctor: all checks passed on 2 node(s)" out
    assert_not_grep FAIL out
'

expect_success "--json prints one object with ok=true and every node" '
    run_capture rc out err "$DSL" doctor --json --no-allreduce "${SSH[@]}" --master_port $PORT
    assert_eq "$rc" 0
    python3 -c "
import json, sys
o = json.load(open(\"out\"))
assert o[\"ok\"] is True and o[\"problems\"] == 0, o
assert [n[\"host\"] for n in o[\"nodes\"]] == [\"node1\", \"node2\"], o[\"nodes\"]
assert all(n[\"reachable\"] and \"kernel\" in n for n in o[\"nodes\"])
assert any(c[\"check\"] == \"master port\" for c in o[\"checks\"])
"
'

expect_success "node2 runs another dslaunch version: flagged with its remedy, exit 1" '
    cat >"$T_TMP/dslaunch-wrap" <<WRAP
#!/bin/sh
if [ "\$(hostname)" = node2 ]; then export DSLAUNCH_FAKE_VERSION=9.9.9; fi
exec "$DSL" "\$@"
WRAP
    chmod +x "$T_TMP/dslaunch-wrap"
    run_capture rc out err "$DSL" doctor "${SSH[@]}" --master_port $PORT \
        --remote-dslaunch "$T_TMP/dslaunch-wrap"
    cat out err
    assert_eq "$rc" 1
    row node1 dslaunch out | grep -q " ok "
    row node2 dslaunch out | grep -q "FAIL .*9.9.9 (protocol 1)"
    grep -A1 -E "^node2 +dslaunch" out | grep -q "fix: install dslaunch [0-9.]* (protocol 1) on node2"
    row cluster allreduce out | grep -q "note .*skipped"
'

expect_success "NCCL_SOCKET_IFNAME of node1 does not exist on node2: flagged for node2" '
    [ "$MODE" = netns ] || { echo "loopback mode: interface names do not differ"; exit 0; }
    NCCL_SOCKET_IFNAME=$IFNAME_1 run_capture rc out err "$DSL" doctor --no-allreduce \
        "${SSH[@]}" --master_port $PORT
    cat out err
    assert_eq "$rc" 1
    row node1 NCCL_SOCKET_IFNAME out | grep -q "ok .*$IFNAME_1 matches"
    row node2 NCCL_SOCKET_IFNAME out | grep -q "FAIL .*$IFNAME_1 matches no interface"
    grep -A1 -E "^node2 +NCCL_SOCKET_IFNAME" out |
        grep -q "fix: node2 has no interface matching NCCL_SOCKET_IFNAME=$IFNAME_1 .*NCCL_SOCKET_IFNAME=$IFNAME_1,$IFNAME_2$"
    [ "$(grep -c FAIL out)" = 1 ]
'

expect_success "GLOO_SOCKET_IFNAME naming the interface of node1 is flagged for node2 only" '
    [ "$MODE" = netns ] || { echo "loopback mode: interface names do not differ"; exit 0; }
    run_capture rc out err "$DSL" doctor --no-allreduce "${SSH[@]}" --master_port $PORT \
        --export GLOO_SOCKET_IFNAME=$IFNAME_1
    cat out err
    assert_eq "$rc" 1
    row node1 GLOO_SOCKET_IFNAME out | grep -q " ok "
    row node2 GLOO_SOCKET_IFNAME out | grep -q "FAIL .*$IFNAME_1 matches no interface"
    grep -A1 -E "^node2 +GLOO_SOCKET_IFNAME" out | grep -q "fix: node2 has no interface named by"
'

expect_success "the master port is blocked for node2 by a firewall rule: flagged for node2" '
    [ "$MODE" = netns ] || { echo "loopback mode: no per-node firewall"; exit 0; }
    "$CL" exec "$D" node2 iptables -A OUTPUT -p tcp --dport $PORT -j REJECT --reject-with tcp-reset
    run_capture rc out err "$DSL" doctor -v -v "${SSH[@]}" --master_port $PORT
    "$CL" exec "$D" node2 iptables -D OUTPUT -p tcp --dport $PORT -j REJECT --reject-with tcp-reset
    cat out err
    assert_eq "$rc" 1
    row node1 "master port" out | grep -q "ok .*listening on $PORT"
    row node2 "master port" out | grep -q "FAIL .*cannot connect to $ADDR_1:$PORT via $IFNAME_2"
    grep -A1 -E "^node2 +master port" out | grep -q "fix: open TCP port $PORT from node2 to node1"
    row cluster allreduce out | grep -q "note .*skipped"
'

expect_success "an unreachable node2 is a problem row with its remedy; node1 is still checked" '
    "$CL" sshd-stop "$D" node2
    run_capture rc out err "$DSL" doctor --connect-timeout 5 "${SSH[@]}" --master_port $PORT
    "$CL" sshd-start "$D" node2
    cat out err
    assert_eq "$rc" 1
    row node2 agent out | grep -q "FAIL"
    grep -A1 -E "^node2 +agent" out | grep -q "fix: check that the host is up and reachable"
    row node1 dslaunch out | grep -q " ok "
    row node1 "master port" out | grep -q "ok .*listening on $PORT"
    row node1 clock out | grep -q " ok "
    if row node2 clock out; then fail "an unreachable node has a clock row"; fi
'

echo "1..$T_N"
exit $((T_FAILED > 0))
