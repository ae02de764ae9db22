#!/usr/bin/env bash
# Cluster tier: restarts across nodes (run under with_cluster.sh with 3 nodes of 2
# slots): a node's rank fails or its agent dies on the first attempt, and with
# --exclude-failed-nodes the restart runs on the other 2 nodes; dstrain resumes its
# world-6 checkpoint at world 4.
# usage: with_cluster.sh 3 restart.sh DSLAUNCH WORKER DSTRAIN SOURCE_DIR
set -u
DSL=$1
W=$2
DSTRAIN=$3
SRC=$4
. "$SRC/tests/e2e/flow/lib.sh"
. "$SRC/tests/e2e/multinode/nslib.sh"
. "$SRC/tests/e2e/train/victim.sh"
[ "$NODES" = 3 ] || { echo "restart.sh needs a 3-node cluster" >&2; exit 1; }

# Remote ranks see only the env contract and exported variables, so the rank programs
# are scripts with the paths written in. "fail NODE": on the first attempt, rank 0 of
# node NODE (0-based NODE_RANK) exits 3; "agent NODE": it SIGKILLs its node agent.
cat >rankprog <<EOF
#!/bin/sh
echo "attempt=\$DSLAUNCH_RESTART_COUNT world=\$WORLD_SIZE nnodes=\$NNODES node=\$NODE_RANK master=\$MASTER_ADDR"
if [ "\$DSLAUNCH_RESTART_COUNT" = 0 ] && [ "\$NODE_RANK" = "\$2" ] && [ "\$LOCAL_RANK" = 0 ]; then
    sleep 0.3
    case \$1 in
    fail) exit 3 ;;
    agent) kill -9 \$PPID; exec sleep 600 ;;
    esac
fi
exec "$W" sleep 1
EOF
chmod +x rankprog
P=$T_TMP/rankprog

# restart_job ARGS...: dslaunch over ssh with one restart that leaves a failed node out
# (ARGS: more options, then the program and its arguments), into rc, out and err
restart_job() {
    run_capture rc out err "$DSL" --term-timeout 3 "${SSH[@]}" --max-restarts 1 \
        --exclude-failed-nodes "$@"
}

expect_success "a rank on node3 fails: --exclude-failed-nodes restarts on node1 and node2 and finishes" '
    restart_job "$P" fail 2
    assert_eq "$rc" 0
    assert_grep "attempt 1: rank 4 on node3 exited 3 at [0-9.]* s; restarting (1 of 1) without node3" err
    assert_grep "attempt 2: 2 nodes, 4 ranks" err
    assert_grep "^\[node2:rank 3\] attempt=1 world=4 nnodes=2 node=1 master=$ADDR_1$" out
    assert_not_grep "^\[node3:rank [0-9]*\] attempt=1" out
    assert_grep "^  attempt 2: every rank exited 0" err
    wait_ns_clean 10
'

expect_success "node1 agent dies: the restart runs on node2 and node3, MASTER_ADDR moves to node2" '
    restart_job "$P" agent 0
    assert_eq "$rc" 0
    assert_grep "attempt 1: node node1 lost: .*restarting (1 of 1) without node1" err
    assert_grep "^\[node2:rank 0\] attempt=1 world=4 nnodes=2 node=0 master=$ADDR_2$" out
    assert_grep "^\[node3:rank 3\] attempt=1 world=4 nnodes=2 node=1 master=$ADDR_2$" out
    wait_ns_clean 10
'

expect_success "--min-nodes 3: no restart without node3; exit is the rank code" '
    restart_job --min-nodes 3 "$P" fail 2
    assert_eq "$rc" 3
    assert_grep "not restarting: without node3 2 nodes would be left, fewer than --min-nodes 3" err
    wait_ns_clean 10
'

if [ "$MODE" = netns ]; then
expect_success "node3 network lost and back: the restart waits for its agent, keeps node3 and finishes" '
    ( sleep 1.5; "$CL" exec "$D" 3 ip link set "$IFNAME_3" down; sleep 4;
      "$CL" exec "$D" 3 ip link set "$IFNAME_3" up ) &
    run_capture rc out err "$DSL" --keepalive 3 --term-timeout 2 "${SSH[@]}" --max-restarts 1 \
        sh -c "if [ \$DSLAUNCH_RESTART_COUNT = 0 ]; then exec $W sleep 600; fi; exec $W sleep 1"
    wait
    assert_eq "$rc" 0
    assert_grep "attempt 1: node node3 lost: .*restarting (1 of 1)$" err
    assert_grep "waiting 6 s for the agents of the lost nodes" err
    assert_grep "attempt 2: 3 nodes, 6 ranks" err
    assert_grep "^  attempt 2: every rank exited 0" err
    wait_ns_clean 10
'

expect_success "Ctrl-C while waiting for a lost node: no restart, exit 130" '
    # the previous test left its own "waiting 6 s" in err: the poll below must not see
    # it before the launcher (in the background) has truncated the file
    rm -f out err
    ( sleep 1.5; "$CL" exec "$D" 3 ip link set "$IFNAME_3" down ) &
    "$DSL" --keepalive 3 --term-timeout 2 "${SSH[@]}" --max-restarts 1 "$W" sleep 600 >out 2>err &
    pid=$!
    i=0
    until grep -q "waiting 6 s" err 2>/dev/null; do
        i=$((i + 1)); [ $i -le 200 ] || { kill $pid; fail "no wait for the lost node"; }
        sleep 0.1
    done
    kill_wait INT $pid
    wait
    "$CL" exec "$D" 3 ip link set "$IFNAME_3" up
    assert_eq "$rc" 130
    assert_grep "the wait was cut short by SIGINT after [0-9.]* of 6 s" err
    assert_grep "got SIGINT between attempts: not restarting" err
    assert_grep "^  attempt 1: node node3 lost: .*not restarting: got SIGINT$" err
    wait_ns_clean 15
'
fi

expect_success "dstrain at world 6 loses node3 after a checkpoint and resumes at world 4" '
    [ -x "$DSTRAIN" ] || { echo "# no dstrain: skipped"; exit 0; }
    ck=$T_TMP/ck
    write_victim "$T_TMP/trainprog" "$DSTRAIN" "$ck" \
        "[ \"\$NODE_RANK\" = 2 ] && [ \"\$LOCAL_RANK\" = 0 ]"
    restart_job --export DSLAUNCH_COMM_TIMEOUT=30 --export OMP_NUM_THREADS=1 \
        "$T_TMP/trainprog" --backend tcp --data synthetic --synthetic-train 4096 \
        --synthetic-test 64 --synthetic-dim 128 --hidden 256,256 --train-batch 96 \
        --lr 0.001 --steps-per-print 0 --eval-interval 0 --steps 400 \
        --save-interval 25 --checkpoint-dir "$ck"
    assert_eq "$rc" 0
    assert_grep "attempt 1: rank 4 on node3 was killed by SIGKILL" err
    assert_grep "restarting (1 of 1) without node3" err
    assert_grep "dstrain: resumed from .* at step [0-9]* (saved at world size 6)" out
    assert_grep "global batch 96 = micro 24 x accumulation 1 x 4 ranks" out
    assert_grep "summary: steps 400 " out
    wait_ns_clean 10
'

done_testing
