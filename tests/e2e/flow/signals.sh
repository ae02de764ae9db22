#!/usr/bin/env bash
# Flow tests of stopping a job on the local transport: SIGINT, SIGTERM and SIGHUP to
# dslaunch, the grace and a second Ctrl-C, a console nobody reads, SIGKILL of dslaunch,
# and SIGUSR1 (Slurm's warning) passed to the ranks.
# usage: signals.sh DSLAUNCH WORKER SOURCE_DIR
set -u
DSL=$1
W=$2
SRC=$3
. "$SRC/tests/e2e/flow/local.sh"

# start_two ARGS...: dslaunch ARGS... in the background (stdout in out, stderr in err,
# its pid in pid), once ranks 0 and 1 wrote their pid files
start_two() {
    "$DSL" "$@" >out 2>err &
    pid=$!
    wait_ranks 2 20
}

# stop_two SIG CODE: dslaunch with two waiting ranks, stopped by SIG, exits CODE and
# leaves no process
stop_two() {
    start_two --include localhost:0,1 "$W" pidfile 600
    ranks=$(cat "$FLOW_PIDFILE.0" "$FLOW_PIDFILE.1")
    assert_alive $ranks
    kill_wait "$1" $pid
    assert_eq "$rc" "$2"
    wait_no_procs "$FLOW_TAG" 10
    wait_gone 5 $ranks
}

expect_success "SIGINT to dslaunch stops every rank and leaves no process" '
    export FLOW_TAG=sigint.$$ FLOW_PIDFILE=$T_TMP/sigint
    stop_two INT 130
    assert_grep "got SIGINT" err
'

expect_success "SIGTERM to dslaunch is forwarded and reported" '
    export FLOW_TAG=sigterm.$$ FLOW_PIDFILE=$T_TMP/sigterm
    stop_two TERM 143
'

# A stop the user asked for exits 128 + the signal whatever the ranks do about it, and
# is not reported as an error (docs/exit-codes.md).
for sig in INT:130 TERM:143 HUP:129; do
expect_success "SIG${sig%:*} to dslaunch: ranks exiting 1 on it still give ${sig#*:}, no error line" '
    export FLOW_TAG=stop'"${sig%:*}"'.$$ FLOW_PIDFILE=$T_TMP/stop'"${sig%:*}"'
    start_two --term-timeout 20 --include localhost:0,1 "$W" on-signal 1 0
    kill_wait '"${sig%:*}"' $pid
    assert_eq "$rc" '"${sig#*:}"' "exit code"
    [ -s "$FLOW_PIDFILE.0.done" ] && [ -s "$FLOW_PIDFILE.1.done" ] || fail "a rank did not run its handler"
    assert_not_grep "error:" err
    assert_grep "stopped by SIG'"${sig%:*}"'; 2 ranks stopped, 0 killed after the 20 s grace" err
    wait_no_procs "$FLOW_TAG" 10
'
done

expect_success "ranks outliving the grace after SIGTERM: still 143, killed ranks counted, no error line" '
    export FLOW_TAG=outlive.$$ FLOW_PIDFILE=$T_TMP/outlive
    start_two --term-timeout 1 --include localhost:0,1 "$W" on-signal 0 600
    kill_wait TERM $pid
    assert_eq "$rc" 143 "exit code"
    assert_not_grep "error:" err
    assert_grep "stopped by SIGTERM; 0 ranks stopped, 2 killed after the 1 s grace" err
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "a second Ctrl-C kills at once: still 130, no error line" '
    export FLOW_TAG=twice.$$ FLOW_PIDFILE=$T_TMP/twice
    start_two --term-timeout 300 --include localhost:0,1 "$W" on-signal 0 600
    kill -INT $pid
    i=0; until grep -q "got SIGINT" err || [ $i -ge 200 ]; do sleep 0.1; i=$((i + 1)); done
    kill_wait INT $pid
    assert_eq "$rc" 130 "exit code"
    assert_grep "second interrupt" err
    assert_not_grep "error:" err
    assert_grep "stopped by SIGINT; 0 ranks stopped, 2 killed at the second interrupt" err
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "stdout not read for 8 s while ranks print: the job runs on, lines delivered or counted, logs complete" '
    export FLOW_TAG=unread.$$ FLOW_PIDFILE=$T_TMP/unread
    # The reader first sleeps (3x --keepalive), then waits (bounded) until both ranks
    # have printed everything: with a launcher blocked in write they never would.
    set +e
    "$DSL" --keepalive 2 --output-buffer 256K --log-dir unread_logs --include localhost:0,1 \
        "$W" print 30000 2 2>err |
        ( sleep 8
          i=0; while { [ ! -s "$FLOW_PIDFILE.0" ] || [ ! -s "$FLOW_PIDFILE.1" ]; } && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
          ls "$FLOW_PIDFILE".0 "$FLOW_PIDFILE".1 > done_before_reading 2>/dev/null
          cat > out )
    rc=${PIPESTATUS[0]}
    set -e
    assert_eq "$rc" 0 "exit code"
    [ "$(wc -l < done_before_reading)" = 2 ] || fail "the ranks did not finish while stdout was not read"
    for r in 0 1; do
        assert_eq "$(wc -l < unread_logs/rank$r.log)" 30000 "lines in rank$r.log"
        assert_eq "$(tail -n 1 unread_logs/rank$r.log | cut -d" " -f1-3)" "out $r 30000"
    done
    delivered=$(grep -c "^\[rank [01]\] out [01] [0-9]* the quick brown fox jumps over the lazy dog$" out || true)
    assert_eq "$(wc -l < out)" "$delivered" "every delivered line is whole"
    dropped=$(sed -n "s/.*: \([0-9]*\) output lines* w[a-z]* dropped because stdout was not read; --log-dir has them all$/\1/p" err)
    assert_eq "$((delivered + ${dropped:-0}))" 60000 "lines delivered ($delivered) + dropped (${dropped:-0})"
    assert_not_grep "error:" err
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "dslaunch | head -3 with ranks printing forever: exits 141 at once, no rank left, no error" '
    export FLOW_TAG=head.$$ FLOW_RUNIDS=$T_TMP/head.ids
    set +e
    timeout 30 "$DSL" --include localhost:0,1 "$W" print 0 0 2>err | head -n 3 > out
    rc=${PIPESTATUS[0]}
    set -e
    assert_eq "$rc" 141 "exit code (124: still running after 30 s)"
    assert_eq "$(wc -l < out)" 3
    assert_not_grep "error:" err
    wait_no_procs "$FLOW_TAG" 10
    assert_job_clean 10 $(run_ids "$FLOW_RUNIDS")
'

expect_success "SIGKILL of dslaunch leaves no agent or rank behind" '
    export FLOW_TAG=sigkill.$$ FLOW_PIDFILE=$T_TMP/sigkill
    start_two --include localhost:0,1 "$W" grandchild 600
    ranks=$(cat "$FLOW_PIDFILE.0" "$FLOW_PIDFILE.1")
    gcs=$(grandchild_pids "$FLOW_PIDFILE" 0 1)
    assert_alive $ranks $gcs
    kill -KILL $pid
    set +e; wait $pid; set -e
    wait_no_procs "$FLOW_TAG" 15
    wait_gone 5 $ranks $gcs
'

expect_success "SIGUSR1 to a node agent reaches its ranks and the job goes on" '
    # Slurm delivers --signal=USR1@T (no B:) and scancel -s USR1 to the tasks of every
    # step: under the slurm transport those are the agents, which must not die of it
    cat >u1.sh <<EOS
#!/bin/sh
trap "echo usr1 >usr1.\$RANK" USR1
echo >ready.\$RANK
i=0
while [ ! -e usr1.\$RANK ] && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i + 1)); done
[ -e usr1.\$RANK ]
EOS
    chmod +x u1.sh
    rm -f ready.* usr1.*
    "$DSL" --include localhost:0,1 ./u1.sh >u1.out 2>u1.err &
    dsl=$!
    for _ in $(seq 100); do [ -e ready.0 ] && [ -e ready.1 ] && break; sleep 0.1; done
    agent=$(ps -o pid= --ppid "$dsl" | tr -d " ")
    [ -n "$agent" ] && [ "$(echo "$agent" | wc -l)" = 1 ] || { kill "$dsl"; fail "agent: <$agent>"; }
    kill -USR1 "$agent"
    wait "$dsl"
    rc=$?
    cat u1.err >&2
    assert_eq "$rc" 0 "exit"
    [ -e usr1.0 ] && [ -e usr1.1 ] || fail "a rank did not get SIGUSR1"
    assert_grep "dslaunch agent: got SIGUSR1: passed it to this node.s 2 ranks" u1.err
'

expect_success "Slurm's warning reaches each rank's own process, not the helpers it started" '
    # the helper stands for a DataLoader worker started by spawn or forkserver: its
    # SIGUSR1 is the default, death, and the rank would then fail instead of saving
    cat >uh.sh <<EOS
#!/bin/sh
trap "echo usr1 >uh-usr1.\$RANK" USR1
sleep 600 &
echo \$! >uh-helper.\$RANK
echo >uh-ready.\$RANK
i=0
while [ ! -e uh-usr1.\$RANK ] && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i + 1)); done
[ -e uh-usr1.\$RANK ] || exit 4
kill -0 \$(cat uh-helper.\$RANK) || exit 3
kill \$(cat uh-helper.\$RANK)
EOS
    chmod +x uh.sh
    rm -f uh-*
    "$DSL" --include localhost:0,1 ./uh.sh >uh.out 2>uh.err &
    dsl=$!
    for _ in $(seq 100); do [ -e uh-ready.0 ] && [ -e uh-ready.1 ] && break; sleep 0.1; done
    kill -USR1 "$dsl"
    rc=0
    wait "$dsl" || rc=$?
    cat uh.err >&2
    assert_eq "$rc" 0 "exit (3: a helper died of the warning, 4: a rank never got it)"
    assert_grep "got SIGUSR1: passed it to the ranks of 1 node" uh.err
'

expect_success "a Python rank's spawn-started workers live through Slurm's warning" '
    command -v python3 >/dev/null || skip "no python3"
    cat >uw.py <<"EOS"
import multiprocessing as mp, os, signal, sys, time

def worker(stop):
    while not os.path.exists(stop):
        time.sleep(0.05)

if __name__ == "__main__":
    got = []
    signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
    rank = os.environ["RANK"]
    ctx = mp.get_context("spawn")  # forkserver, the default from Python 3.14, alike
    ps = [ctx.Process(target=worker, args=("uw-stop." + rank,)) for _ in range(2)]
    for p in ps:
        p.start()
    open("uw-ready." + rank, "w").close()
    for _ in range(300):
        if got:
            break
        time.sleep(0.1)
    alive = [p.exitcode for p in ps]
    open("uw-stop." + rank, "w").close()
    for p in ps:
        p.join()
    print("warned:", bool(got), "workers while warned:", alive, "at the end:",
          [p.exitcode for p in ps], flush=True)
    sys.exit(0 if got and alive == [None, None] and [p.exitcode for p in ps] == [0, 0] else 3)
EOS
    rm -f uw-*
    "$DSL" --include localhost:0,1 --no_python python3 uw.py >uw.out 2>uw.err &
    dsl=$!
    for _ in $(seq 300); do [ -e uw-ready.0 ] && [ -e uw-ready.1 ] && break; sleep 0.1; done
    kill -USR1 "$dsl"
    rc=0
    wait "$dsl" || rc=$?
    cat uw.out uw.err >&2
    assert_eq "$rc" 0 "exit"
    [ "$(grep -c "warned: True workers while warned: \[None, None\] at the end: \[0, 0\]" uw.out)" = 2 ] ||
        fail "a rank or its workers"
'

done_testing
