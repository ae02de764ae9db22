#!/usr/bin/env bash
# Flow tests of restarts (--max-restarts, --exclude-failed-nodes, --min-nodes): the
# real dslaunch on the local transport, ranks that fail on chosen attempts
# (DSLAUNCH_RESTART_COUNT tells them which attempt they are in).
# usage: restart.sh DSLAUNCH WORKER SOURCE_DIR
set -u
DSL=$1
W=$2
SRC=$3
. "$SRC/tests/e2e/flow/local.sh"
export W # the rank program runs it

# a rank program: "fail_on ATTEMPTS RANK CODE": rank RANK exits CODE on the listed
# attempts (space-separated restart counts, or "all"); everything else prints its env
# and sleeps 0.3 s
cat >rankprog <<'EOF'
#!/bin/sh
attempts=$1 rank=$2 code=$3
echo "attempt=$DSLAUNCH_RESTART_COUNT te=$TORCHELASTIC_RESTART_COUNT max=$TORCHELASTIC_MAX_RESTARTS run=$DSLAUNCH_RUN_ID world=$WORLD_SIZE nnodes=$NNODES"
if [ "$RANK" = "$rank" ]; then
    case " $attempts " in
    *" $DSLAUNCH_RESTART_COUNT "* | " all ") exec "$W" exit "$code" 0.1 ;;
    esac
fi
exec "$W" sleep 0.3
EOF
chmod +x rankprog
P=$T_TMP/rankprog

expect_success "a rank failing on the first attempt only: 2 attempts, exit 0, both in the summary" '
    export FLOW_TAG=once.$$
    run_capture rc out err "$DSL" --max-restarts 2 --include localhost:0,1 "$P" 0 1 3
    assert_eq "$rc" 0 "exit code"
    assert_grep "attempt 1: rank 1 on localhost exited 3 at [0-9.]* s; restarting (1 of 2)" err
    assert_grep "2 attempts:" err
    assert_grep "^  attempt 1: rank 1 on localhost exited 3 at [0-9.]* s; restarting (1 of 2)$" err
    assert_grep "^  attempt 2: every rank exited 0 after [0-9.]* s$" err
    # the second attempt: restart counts under both names, the maximum, a fresh run id
    assert_grep "^\[rank 1\] attempt=1 te=1 max=2 " out
    assert_grep "^\[rank 0\] attempt=0 te=0 max=2 " out
    [ $(sed -n "s/.*run=\([0-9a-f]*\) .*/\1/p" out | sort -u | wc -l) = 2 ] ||
        fail "the attempts did not get one fresh run id each"
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "a rank failing every time: max+1 attempts, exit = its code" '
    run_capture rc out err "$DSL" --max-restarts 2 --include localhost:0,1 "$P" all 1 5
    assert_eq "$rc" 5 "exit code"
    assert_grep "3 attempts:" err
    assert_grep "^  attempt 2: rank 1 on localhost exited 5 at [0-9.]* s; restarting (2 of 2)$" err
    assert_grep "^  attempt 3: rank 1 on localhost exited 5 at [0-9.]* s; no restarts left (2 of 2 used)$" err
    [ $(grep -c "^\[rank 0\] attempt=" out) = 3 ] || fail "not 3 attempts"
'

expect_success "a rank killed by a signal every time: exit 128+N after the last attempt" '
    run_capture rc out err "$DSL" --max-restarts 1 --include localhost:0,1 sh -c "exec \"\$W\" only 0 kill 9 0.1"
    assert_eq "$rc" 137
    assert_grep "^  attempt 2: rank 0 on localhost was killed by SIGKILL at" err
'

expect_success "without --max-restarts a failure is final, as before" '
    run_capture rc out err "$DSL" --include localhost:0,1 "$P" 0 1 3
    assert_eq "$rc" 3
    [ $(grep -c "^\[rank 0\] attempt=" out) = 1 ] || fail "restarted"
    assert_not_grep "attempt" err
    assert_grep "^\[rank 0\] attempt=0 te=0 max=0 " out
'

expect_success "Ctrl-C during the second attempt: no restart, exit 130, both attempts listed" '
    export FLOW_TAG=ctrlc.$$ FLOW_PIDFILE=$T_TMP/ctrlc
    "$DSL" --max-restarts 3 --include localhost:0,1 sh -c \
        "if [ \$DSLAUNCH_RESTART_COUNT = 0 ]; then exec \"\$W\" only 1 exit 4 0.1; fi; exec \"\$W\" pidfile 600" \
        >out 2>err &
    pid=$!
    wait_ranks 2 20
    kill_wait INT $pid
    assert_eq "$rc" 130
    assert_grep "^  attempt 1: rank 1 on localhost exited 4 at [0-9.]* s; restarting (1 of 3)$" err
    assert_grep "^  attempt 2: stopped by SIGINT at [0-9.]* s; not restarting$" err
    assert_not_grep "attempt 3" err
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "SIGTERM during the first attempt: no restart, exit 143" '
    export FLOW_TAG=term.$$ FLOW_PIDFILE=$T_TMP/term
    "$DSL" --max-restarts 3 --include localhost:0,1 "$W" pidfile 600 >out 2>err &
    pid=$!
    wait_ranks 2 20
    kill_wait TERM $pid
    assert_eq "$rc" 143
    assert_grep "attempt 1: stopped by SIGTERM at [0-9.]* s; not restarting" err
    assert_not_grep "attempt 2" err
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "Slurm's warning ends the restarts: ranks that save on SIGUSR1 exit 138, no attempt 2, no error" '
    rm -f up.0 up.1
    "$DSL" --max-restarts 3 --include localhost:0,1 sh -c \
        "trap \"exit 138\" USR1; echo up >up.\$RANK; while :; do sleep 0.1; done" >out 2>err &
    pid=$!
    wait_for_file up.0 20
    wait_for_file up.1 20
    kill_wait USR1 $pid
    assert_eq "$rc" 138
    assert_grep "got SIGUSR1: passed it to the ranks of 1 node" err
    assert_grep "exited with code 138 after [0-9.]* s, as a rank does that saved on Slurm.s warning" err
    assert_grep "attempt 1: rank [01] on localhost exited 138 at [0-9.]* s; not restarting: the ranks had Slurm.s warning (SIGUSR1)" err
    assert_not_grep "attempt 2" err
    assert_not_grep "error:" err
'

expect_success "a first attempt that cannot start is not restarted" '
    : >not_a_dir
    run_capture rc out err "$DSL" --max-restarts 3 --log-dir not_a_dir/logs --include localhost:0 "$P" none 0 0
    assert_eq "$rc" 2
    assert_not_grep "attempt" err
    assert_not_grep "attempt=" out
'

expect_success "--log-dir keeps every attempt: one file per rank per attempt" '
    run_capture rc out err "$DSL" --max-restarts 1 --log-dir logs --include localhost:0,1 "$P" 0 1 3
    assert_eq "$rc" 0
    assert_grep "^attempt=0 " logs/rank0.log
    assert_not_grep "^attempt=1 " logs/rank0.log
    assert_grep "^attempt=1 " logs/rank0.restart1.log
    assert_grep "^attempt=1 " logs/rank1.restart1.log
    assert_not_grep "^attempt=0 " logs/rank1.restart1.log
'

expect_success "a restart refused by a file already at its log name says the exit code it gives (2)" '
    # rank 1 of the first attempt puts a file at the restart log name, then fails: the
    # restart does not write through it, and its summary line names the exit code
    run_capture rc out err "$DSL" --max-restarts 1 --log-dir hl --include localhost:0,1 sh -c "if [ \$DSLAUNCH_RESTART_COUNT = 0 ] && [ \$RANK = 1 ]; then ln -s /dev/null hl/rank1.restart1.log; exit 3; fi; sleep 0.3"
    assert_eq "$rc" 2 "exit code"
    assert_grep "cannot create .hl/rank1.restart1.log.: something is already there" err
    assert_grep "^  attempt 2: the ranks were not started (exit 2) at [0-9.]* s; no restarts left (1 of 1 used)$" err
    assert_not_grep "exit 0)" err
'

printf "node-a slots=2\nnode-b slots=2\nnode-c slots=2\n" >fake3.txt

expect_success "--exclude-failed-nodes: a rank on node-b fails, the restart runs on node-a and node-c" '
    export FLOW_TAG=excl.$$
    run_capture rc out err "$DSL" --hostfile fake3.txt --launcher local --max-restarts 2 \
        --exclude-failed-nodes "$P" 0 3 6
    assert_eq "$rc" 0
    assert_grep "attempt 1: rank 3 on node-b exited 6 at [0-9.]* s; restarting (1 of 2) without node-b" err
    assert_grep "attempt 2: 2 nodes, 4 ranks, run id" err
    assert_grep "^\[node-c:rank 3\] attempt=1 .* world=4 nnodes=2$" out
    assert_grep "^\[node-a:rank 0\] attempt=1 .* world=4 nnodes=2$" out
    assert_not_grep "^\[node-b:rank [0-9]*\] attempt=1 " out
    assert_grep "^  attempt 2: every rank exited 0" err
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "--min-nodes: no restart that would run on fewer nodes" '
    run_capture rc out err "$DSL" --hostfile fake3.txt --launcher local --max-restarts 2 \
        --exclude-failed-nodes --min-nodes 3 "$P" 0 3 6
    assert_eq "$rc" 6
    assert_grep "attempt 1: rank 3 on node-b exited 6 at [0-9.]* s; not restarting: without node-b 2 nodes would be left, fewer than --min-nodes 3" err
    [ $(grep -c "attempt=1" out) = 0 ] || fail "restarted below --min-nodes"
    run_capture rc out err "$DSL" --hostfile fake3.txt --launcher local --min-nodes 4 "$P" none 0 0
    assert_eq "$rc" 2
    assert_grep "min-nodes 4 but the job has only 3 nodes" err
'

expect_success "without --exclude-failed-nodes the restart keeps every node" '
    run_capture rc out err "$DSL" --hostfile fake3.txt --launcher local --max-restarts 1 "$P" 0 3 6
    assert_eq "$rc" 0
    assert_grep "^\[node-b:rank 3\] attempt=1 .* world=6 nnodes=3$" out
'

expect_success "--help lists the restart options" '
    run_capture rc out err "$DSL" --help
    assert_eq "$rc" 0
    assert_grep "\-\-max-restarts N" out
    assert_grep "\-\-exclude-failed-nodes" out
    assert_grep "\-\-min-nodes N" out
    run_capture rc out err "$DSL" --max_restarts -1 "$P"
    assert_eq "$rc" 2
'

done_testing
