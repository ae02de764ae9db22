#!/usr/bin/env bash
# Cluster tier: no-ssh mode (docs/no-ssh.md). Each node of the namespace cluster runs
# its own dslaunch, as a Kubernetes JobSet or PyTorchJob starts one per pod: node1's is
# the coordinator (--node_rank 0), node2's dials in to it; no ssh is used. Run under
# with_cluster.sh 2.
# usage: with_cluster.sh 2 nossh.sh DSLAUNCH WORKER DSTRAIN SOURCE_DIR
set -u
DSL=$1
W=$2
DSTRAIN=$3
SRC=$4
. "$SRC/tests/e2e/flow/lib.sh"
. "$SRC/tests/e2e/multinode/nslib.sh"
. "$SRC/tests/e2e/flow/census.sh"
export DSLAUNCH_JOB_SECRET=nossh-test-secret-0123456789
PORT=29640

# on_node I CMD...: CMD in nodeI's namespaces with the host name nodeI (as a pod has its
# own), writing its pid to $T_TMP/pid.I first
on_node() {
    local i=$1
    shift
    "$CL" exec "$D" "$i" unshare --uts /bin/sh -c \
        'hostname "$1"; echo $$ >"$2"; shift 2; exec "$@"' sh "node$i" "$T_TMP/pid.$i" "$@"
}

# wait_pid_gone PID BOUND: fail unless PID has exited within BOUND seconds (a liveness
# bound: the issue's "within grace + 2 s", not a speed check)
wait_pid_gone() {
    local i=0
    while kill -0 "$1" 2>/dev/null; do
        [ $i -lt $(($2 * 10)) ] || fail "pid $1 still runs after $2 s"
        sleep 0.1
        i=$((i + 1))
    done
}

# node2 OFFSET ARGS...: node2's dslaunch with ARGS..., node rank 1 of 2, dialling node1
# at port PORT + OFFSET, in the background: output in out2 and err2, its pid in p2
node2() {
    local off=$1
    shift
    on_node 2 "$DSL" --node_rank 1 --nnodes 2 --master_addr "$ADDR_1" \
        --master_port $((PORT + off)) "$@" >out2 2>err2 &
    p2=$!
}

# node2_done: node2's exit status in rc2, once it ended, and both nodes' stderr shown
node2_done() {
    rc2=0
    wait $p2 || rc2=$?
    cat err err2
}

# wait_four_ranks: until the job's 4 ranks wrote their run ids to $FLOW_RUNIDS (10 s at
# the most)
wait_four_ranks() {
    local i
    for i in $(seq 100); do [ -s "$FLOW_RUNIDS" ] && [ $(wc -l <"$FLOW_RUNIDS") -ge 4 ] && \
        break; sleep 0.1; done
    [ $(wc -l <"$FLOW_RUNIDS") -ge 4 ] || fail "the ranks did not start"
}

expect_success "two nodes make one job: RANK 0..3, WORLD_SIZE 4, one MASTER_ADDR/PORT, NODE_RANK" '
    on_node 2 "$DSL" --node_rank 1 --nnodes 2 --master_addr "$ADDR_1" --master_port $PORT \
        --nproc_per_node 2 "$W" env >out2 2>err2 &
    p2=$!
    run_capture rc out err on_node 1 "$DSL" --node_rank 0 --nnodes 2 --master_addr "$ADDR_1" \
        --master_port $PORT --nproc_per_node 2 "$W" env
    node2_done
    assert_eq "$rc" 0 "the coordinator"
    assert_eq "$rc2" 0 "node rank 1"
    for r in 0 1 2 3; do assert_grep "rank $r\] RANK=$r$" out; done
    assert_grep "^\[node1:rank 1\] NODE_RANK=0$" out
    assert_grep "^\[node2:rank 2\] NODE_RANK=1$" out
    assert_grep "^\[node2:rank 3\] LOCAL_RANK=1$" out
    [ $(grep -c "\] WORLD_SIZE=4$" out) = 4 ]
    [ $(grep -c "\] MASTER_ADDR=$ADDR_1$" out) = 4 ]
    [ $(grep -c "\] MASTER_PORT=$PORT$" out) = 4 ]
    [ $(grep "DSLAUNCH_RUN_ID=" out | sed "s/.*=//" | sort -u | wc -l) = 1 ]
    assert_grep "all 2 nodes are in" err
    assert_not_grep "RANK=" out2
    wait_ns_clean 10
'

expect_success "PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT alone make the job" '
    PET="PET_NNODES=2 PET_MASTER_ADDR=$ADDR_1 PET_MASTER_PORT=$((PORT + 10))"
    on_node 2 env $PET PET_NODE_RANK=1 "$DSL" "$W" env >out2 2>err2 &
    p2=$!
    run_capture rc out err on_node 1 env $PET PET_NODE_RANK=0 "$DSL" --num_gpus 2 "$W" env
    node2_done
    assert_eq "$rc" 0
    assert_eq "$rc2" 0
    assert_grep "^\[node2:rank [0-9]*\] NODE_RANK=1$" out
    assert_grep "^\[node1:rank 0\] MASTER_PORT=$((PORT + 10))$" out
    n=$(grep -c "\] RANK=" out)
    [ $(grep -c "\] WORLD_SIZE=$n$" out) = $n ]
    # the coordinator says where each value came from
    env $PET PET_NODE_RANK=0 "$DSL" --dry-run "$W" env >dry
    python3 -c "import json,sys; f=json.load(open(\"dry\"))[\"no_ssh\"][\"from\"]; \
        assert f[\"nnodes\"]==\"PET_NNODES\" and f[\"node_rank\"]==\"PET_NODE_RANK\" and \
        f[\"master_addr\"]==\"PET_MASTER_ADDR\" and f[\"master_port\"]==\"PET_MASTER_PORT\", f"
    wait_ns_clean 10
'

expect_success "a wrong secret is refused with a clear message and nothing is started" '
    export FLOW_RUNIDS=$T_TMP/wrong.ids
    on_node 2 env DSLAUNCH_JOB_SECRET=not-the-job-secret-at-all "$DSL" --node_rank 1 \
        --nnodes 2 --master_addr "$ADDR_1" --master_port $((PORT + 20)) "$W" env \
        >out2 2>err2 &
    p2=$!
    run_capture rc out err on_node 1 "$DSL" --join_timeout 6 --node_rank 0 --nnodes 2 \
        --master_port $((PORT + 20)) --export FLOW_RUNIDS "$W" env
    node2_done
    assert_eq "$rc2" 201 "the node with the wrong secret"
    assert_grep "node rank 1: the coordinator at $ADDR_1:$((PORT + 21)) did not accept this node" err2
    assert_grep "the job secret (DSLAUNCH_JOB_SECRET) must be the same on every node" err2
    assert_eq "$rc" 203 "the coordinator"
    assert_grep "warning: no-ssh coordinator: refused 1 connection whose key belongs to no node rank" err
    assert_grep "node rank 1 never came" err
    assert_grep "nothing was started" err
    assert_not_grep "RANK=" out
    [ ! -s "$FLOW_RUNIDS" ] || fail "a rank ran"
    wait_ns_clean 10
'

expect_success "killing node2s launcher tears node1 down within grace + 2 s, nothing left" '
    export FLOW_RUNIDS=$T_TMP/kill2.ids
    on_node 2 "$DSL" --node_rank 1 --nnodes 2 --master_addr "$ADDR_1" \
        --master_port $((PORT + 30)) >out2 2>err2 &
    on_node 1 "$DSL" --term-timeout 3 --node_rank 0 --nnodes 2 --master_port $((PORT + 30)) \
        --export FLOW_RUNIDS "$W" sleep 600 >out 2>err &
    p1=$!
    wait_four_ranks
    pid1=$(cat "$T_TMP/pid.1")
    kill -9 "$(cat "$T_TMP/pid.2")"
    wait_pid_gone "$pid1" 5
    wait $p1 || true
    assert_grep "node 1 (node2) lost" err
    assert_job_clean 10 $(run_ids "$FLOW_RUNIDS")
    wait_ns_clean 10
'

expect_success "killing node1s coordinator stops node2s ranks within grace + 2 s, nothing left" '
    export FLOW_RUNIDS=$T_TMP/kill1.ids
    node2 40 "$W" sleep 600
    on_node 1 "$DSL" --term-timeout 3 --node_rank 0 --nnodes 2 --master_port $((PORT + 40)) \
        --export FLOW_RUNIDS "$W" sleep 600 >out 2>err &
    wait_four_ranks
    pid2=$(cat "$T_TMP/pid.2")
    kill -9 "$(cat "$T_TMP/pid.1")"
    wait_pid_gone "$pid2" 5
    rc2=0; wait $p2 || rc2=$?
    cat err2
    assert_eq "$rc2" 200 "node rank 1 after losing the coordinator"
    assert_grep "lost the coordinator; this node.s ranks were stopped" err2
    assert_job_clean 10 $(run_ids "$FLOW_RUNIDS")
    wait_ns_clean 10
'

expect_success "uneven slots: node1 runs 1 rank, node2 3; a rank on node2 exits 7: both torn down, 7" '
    node2 60 --nproc_per_node 3 --oversubscribe "$W" only 2 exit 7 0.5
    run_capture rc out err on_node 1 "$DSL" --term-timeout 3 --node_rank 0 --nnodes 2 \
        --nproc_per_node 1 --master_port $((PORT + 60)) "$W" only 2 exit 7 0.5
    node2_done
    assert_eq "$rc" 7
    assert_eq "$rc2" 7 "node rank 1 (its rank failed)"
    assert_grep "rank 2 (host node2, pid [0-9]*) exited with code 7" err
    assert_grep "rank 2 exiting with 7" err
    wait_ns_clean 10
'

expect_success "--max-restarts across nodes: a failed attempt runs again, node2 dialling in again" '
    on_node 2 "$DSL" --max-restarts 1 --node_rank 1 --nnodes 2 --master_addr "$ADDR_1" \
        --master_port $((PORT + 70)) >out2 2>err2 &
    p2=$!
    printf "%s\n" "#!/bin/sh" \
        "[ \"\$DSLAUNCH_RESTART_COUNT\" = 0 ] && [ \"\$NODE_RANK\" = 1 ] && [ \"\$LOCAL_RANK\" = 0 ] && exit 3" \
        "exec \"$W\" env" >prog
    chmod +x prog
    run_capture rc out err on_node 1 "$DSL" --term-timeout 3 --max-restarts 1 --node_rank 0 \
        --nnodes 2 --master_port $((PORT + 70)) "$T_TMP/prog"
    node2_done
    assert_eq "$rc" 0
    assert_eq "$rc2" 0
    assert_grep "restarting (1 of 1)" err
    assert_grep "^\[node2:rank [0-9]*\] DSLAUNCH_RESTART_COUNT=1$" out
    wait_ns_clean 10
'

# Rank 0 exits 0 and the others sleep on: silence alone names nobody (hang.c), but
# silence after a rank finished does, and the verdict names node2's ranks.
expect_success "hang detection sees node2s ranks: --hang-timeout stops the job with 205" '
    node2 80 "$W" only 0 exit 0 0.3
    run_capture rc out err on_node 1 "$DSL" --term-timeout 2 --hang-timeout 2 --node_rank 0 \
        --nnodes 2 --master_port $((PORT + 80)) "$W" only 0 exit 0 0.3
    node2_done
    assert_eq "$rc" 205
    assert_eq "$rc2" 1 "node rank 1, stopped by the coordinator"
    assert_grep "error: hang: rank 0 exited 0 at .*node2" err
    assert_grep "the coordinator stopped the job" err2
    wait_ns_clean 10
'

expect_success "a node started with another program or arguments is refused: both shown, 202" '
    export FLOW_RUNIDS=$T_TMP/argv.ids
    # a newline and an escape in a word: shown quoted, never raw
    on_node 2 "$DSL" --node_rank 1 --nnodes 2 --master_addr "$ADDR_1" \
        --master_port $((PORT + 90)) "$W" env "--lr=0.1
x$(printf "\033")[31m" >out2 2>err2 &
    p2=$!
    run_capture rc out err on_node 1 "$DSL" --node_rank 0 --nnodes 2 \
        --master_port $((PORT + 90)) --export FLOW_RUNIDS "$W" env --lr=0.2
    node2_done
    assert_eq "$rc" 202 "the coordinator"
    assert_eq "$rc2" 202 "node rank 1"
    assert_grep "node rank 1 (.node2.) was started with another program or arguments than node 0" err
    assert_grep "node rank 1: .$W. .env. .--lr=0.1.nx.x1b.31m.; node 0: .$W. .env. .--lr=0.2." err
    assert_grep "nothing was started" err
    assert_grep "the coordinator refused the job: node rank 1 .* was started with another program" err2
    assert_not_grep "$(printf "\033")" err
    assert_not_grep "$(printf "\033")" err2
    assert_not_grep "RANK=" out
    [ ! -s "$FLOW_RUNIDS" ] || fail "a rank ran"
    wait_ns_clean 10
'

expect_success "a node with another dslaunch version (a stale image) is refused: 202" '
    on_node 2 env DSLAUNCH_FAKE_VERSION=0.0.1-stale "$DSL" --node_rank 1 --nnodes 2 \
        --master_addr "$ADDR_1" --master_port $((PORT + 100)) "$W" env >out2 2>err2 &
    p2=$!
    run_capture rc out err on_node 1 "$DSL" --node_rank 0 --nnodes 2 \
        --master_port $((PORT + 100)) "$W" env
    node2_done
    assert_eq "$rc" 202 "the coordinator"
    assert_eq "$rc2" 202 "node rank 1"
    assert_grep "node rank 1 (.node2.) runs dslaunch 0.0.1-stale, node 0 runs " err
    assert_grep "the coordinator refused the job: node rank 1" err2
    assert_not_grep "RANK=" out
    wait_ns_clean 10
'

expect_success "dstrain trains at world 4 across the two nodes" '
    [ -x "$DSTRAIN" ] || skip "no dstrain"
    ARGS=(--backend tcp --data synthetic --synthetic-train 512 --synthetic-test 64
          --synthetic-dim 32 --hidden 32 --train-batch 32 --lr 0.01 --steps-per-print 0
          --eval-interval 0 --steps 20)
    node2 50 --nproc_per_node 2 "$DSTRAIN" "${ARGS[@]}"
    run_capture rc out err on_node 1 "$DSL" --node_rank 0 --nnodes 2 --nproc_per_node 2 \
        --master_port $((PORT + 50)) --export OMP_NUM_THREADS=1 "$DSTRAIN" "${ARGS[@]}"
    rc2=0; wait $p2 || rc2=$?
    cat err err2 | tail -20
    assert_eq "$rc" 0
    assert_eq "$rc2" 0
    assert_grep "x 4 ranks" out
    assert_grep "summary: steps 20 " out
    wait_ns_clean 10
'

done_testing
