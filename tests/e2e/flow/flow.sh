#!/usr/bin/env bash
# Flow tests of the real dslaunch CLI on the local transport.
# usage: flow.sh DSLAUNCH WORKER SOURCE_DIR
set -u
DSL=$1
W=$2
SRC=$3
. "$SRC/tests/e2e/flow/lib.sh"
export DSLAUNCH_LOCAL_SLOTS=4
unset CUDA_VISIBLE_DEVICES OMP_NUM_THREADS
cd "$T_TMP"

expect_success "two local ranks get the env contract" '
    run_capture rc out err "$DSL" --include localhost:0,1 "$W" env
    assert_eq "$rc" 0 "exit code"
    assert_grep "^\[rank 0\] RANK=0$" out
    assert_grep "^\[rank 1\] RANK=1$" out
    assert_grep "^\[rank 1\] LOCAL_RANK=1$" out
    assert_grep "^\[rank 0\] WORLD_SIZE=2$" out
    assert_grep "^\[rank 1\] LOCAL_WORLD_SIZE=2$" out
    assert_grep "^\[rank 0\] NODE_RANK=0$" out
    assert_grep "^\[rank 0\] NNODES=1$" out
    assert_grep "^\[rank 0\] MASTER_ADDR=127.0.0.1$" out
    assert_grep "^\[rank 1\] MASTER_PORT=[0-9][0-9]*$" out
    assert_grep "^\[rank 0\] CUDA_VISIBLE_DEVICES=0,1$" out
    assert_grep "^\[rank 0\] DSLAUNCH_RUN_ID=[0-9a-f]\{12\}$" out
    assert_grep "^\[rank 0\] DSLAUNCH_RUN_TOKEN=[0-9a-f]\{32\}$" out
    assert_grep "^\[rank 0\] OMP_NUM_THREADS=[1-9]" out
    assert_grep "OMP_NUM_THREADS=[1-9][0-9]* for each rank (.*, 2 local ranks)" err
    # both ranks see the same run id and port
    [ $(grep -c "DSLAUNCH_RUN_ID=" out) = 2 ]
    [ $(grep "DSLAUNCH_RUN_ID=" out | sed "s/.*=//" | sort -u | wc -l) = 1 ]
'

expect_success "the OMP_NUM_THREADS note counts one local rank in the singular" '
    run_capture rc out err "$DSL" --include localhost:0 true
    assert_eq "$rc" 0
    assert_grep "for each rank (.*, 1 local rank); export it" err
'

expect_success "LOCAL_RANK is the index within the node, devices are physical ids" '
    run_capture rc out err "$DSL" --include localhost:3,1 "$W" env
    assert_eq "$rc" 0
    assert_grep "^\[rank 0\] LOCAL_RANK=0$" out
    assert_grep "^\[rank 1\] LOCAL_RANK=1$" out
    assert_grep "^\[rank 0\] CUDA_VISIBLE_DEVICES=1,3$" out
'

expect_success "--num_gpus and --num-gpus, --opt=value and --opt value" '
    run_capture rc out err "$DSL" --num-gpus=3 "$W" env
    assert_eq "$rc" 0
    assert_grep "^\[rank 2\] WORLD_SIZE=3$" out
    run_capture rc out err "$DSL" --num_gpus 1 "$W" env
    assert_eq "$rc" 0
    assert_grep "^\[rank 0\] WORLD_SIZE=1$" out
'

expect_success "a rank exiting 3 tears down its sleeping sibling; dslaunch exits 3 with a summary" '
    export FLOW_TAG=exit3.$$ FLOW_PIDFILE=$T_TMP/exit3
    run_capture rc out err "$DSL" --include localhost:0,1 "$W" only 1 exit 3 0.3
    assert_eq "$rc" 3 "exit code"
    assert_grep "rank 1 (host localhost, pid [0-9]*) exited with code 3" err
    assert_grep "rank 1 exiting with 3" err
    assert_grep "stopped 1 other rank" err
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "the summary counts only the ranks the stop ended, not those that had finished" '
    run_capture rc out err "$DSL" --include localhost:0,1,2 sh -c \
        "case \$RANK in 0) exit 0;; 1) sleep 1; exit 3;; *) exec sleep 30;; esac"
    cat err
    assert_eq "$rc" 3 "exit code"
    assert_grep "stopped 1 other rank(s); 1 had finished before$" err
'

expect_success "a rank killed by SIGKILL gives 137 and names the signal" '
    run_capture rc out err "$DSL" --include localhost:0,1 "$W" only 0 kill 9 0.2
    assert_eq "$rc" 137
    assert_grep "rank 0 (host localhost, pid [0-9]*) was killed by SIGKILL" err
    assert_grep "was killed by SIGKILL after [0-9.]* s (not sent by dslaunch; node had [0-9.]* [KMGT]iB available)" err
'

expect_success "the summary shows the last lines of the failing rank stderr" '
    run_capture rc out err "$DSL" --include localhost:0 "$W" stderr 30
    assert_eq "$rc" 5
    assert_grep "last lines of rank 0" err
    assert_grep "  | problem line 30" err
    assert_grep "  | problem line 11" err
    assert_not_grep "  | problem line 10$" err
'

expect_success "a rank that ignores SIGTERM is killed after --term-timeout" '
    export FLOW_TAG=ignterm.$$ FLOW_PIDFILE=$T_TMP/ignterm
    run_capture rc out err "$DSL" --term-timeout 1 --include localhost:0,1 sh -c "if [ \"\$RANK\" = 0 ]; then exec \"$W\" ignore-term 600; else sleep 0.5; exit 4; fi"
    assert_eq "$rc" 4
    assert_grep "SIGKILL" err
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "grandchildren in a rank group die with the job" '
    export FLOW_TAG=gc.$$ FLOW_PIDFILE=$T_TMP/gc
    # rank 1 fails (exit 6) once the grandchild of rank 0 runs, or exits 7 when none
    # runs within 10 s: the test must not pass for want of a grandchild to clean up
    run_capture rc out err "$DSL" --include localhost:0,1 sh -c "
        [ \"\$RANK\" = 0 ] && exec \"$W\" grandchild 600
        i=0
        while [ ! -s \"\$FLOW_PIDFILE.0\" ] && [ \$i -lt 200 ]; do sleep 0.05; i=\$((i + 1)); done
        kill -0 \"\$(cat \"\$FLOW_PIDFILE.0.gc\")\" || exit 7
        exit 6"
    assert_eq "$rc" 6 "exit code (7: rank 0 had no running grandchild)"
    gc=$(grandchild_pids "$FLOW_PIDFILE" 0)
    wait_no_procs "$FLOW_TAG" 10
    wait_gone 5 $gc
'

expect_success "SIGINT to dslaunch stops every rank and leaves no process" '
    export FLOW_TAG=sigint.$$ FLOW_PIDFILE=$T_TMP/sigint
    "$DSL" --include localhost:0,1 "$W" pidfile 600 >out 2>err &
    pid=$!
    wait_for_file "$FLOW_PIDFILE.1" 20
    wait_for_file "$FLOW_PIDFILE.0" 20
    ranks=$(cat "$FLOW_PIDFILE.0" "$FLOW_PIDFILE.1")
    assert_alive $ranks
    kill -INT $pid
    set +e; wait $pid; rc=$?; set -e
    assert_eq "$rc" 130
    assert_grep "got SIGINT" err
    wait_no_procs "$FLOW_TAG" 10
    wait_gone 5 $ranks
'

expect_success "SIGTERM to dslaunch is forwarded and reported" '
    export FLOW_TAG=sigterm.$$ FLOW_PIDFILE=$T_TMP/sigterm
    "$DSL" --include localhost:0,1 "$W" pidfile 600 >out 2>err &
    pid=$!
    wait_for_file "$FLOW_PIDFILE.1" 20
    wait_for_file "$FLOW_PIDFILE.0" 20
    ranks=$(cat "$FLOW_PIDFILE.0" "$FLOW_PIDFILE.1")
    assert_alive $ranks
    kill -TERM $pid
    set +e; wait $pid; rc=$?; set -e
    assert_eq "$rc" 143
    wait_no_procs "$FLOW_TAG" 10
    wait_gone 5 $ranks
'

# A stop the user asked for exits 128 + the signal whatever the ranks do about it, and
# is not reported as an error (docs/exit-codes.md).
for sig in INT:130 TERM:143 HUP:129; do
expect_success "SIG${sig%:*} to dslaunch: ranks exiting 1 on it still give ${sig#*:}, no error line" '
    export FLOW_TAG=stop'"${sig%:*}"'.$$ FLOW_PIDFILE=$T_TMP/stop'"${sig%:*}"'
    "$DSL" --term-timeout 20 --include localhost:0,1 "$W" on-signal 1 0 >out 2>err &
    pid=$!
    wait_for_file "$FLOW_PIDFILE.0" 20
    wait_for_file "$FLOW_PIDFILE.1" 20
    kill -'"${sig%:*}"' $pid
    set +e; wait $pid; rc=$?; set -e
    assert_eq "$rc" '"${sig#*:}"' "exit code"
    [ -s "$FLOW_PIDFILE.0.done" ] && [ -s "$FLOW_PIDFILE.1.done" ] || fail "a rank did not run its handler"
    assert_not_grep "error:" err
    assert_grep "stopped by SIG'"${sig%:*}"'; 2 ranks stopped, 0 killed after the 20 s grace" err
    wait_no_procs "$FLOW_TAG" 10
'
done

expect_success "ranks outliving the grace after SIGTERM: still 143, killed ranks counted, no error line" '
    export FLOW_TAG=outlive.$$ FLOW_PIDFILE=$T_TMP/outlive
    "$DSL" --term-timeout 1 --include localhost:0,1 "$W" on-signal 0 600 >out 2>err &
    pid=$!
    wait_for_file "$FLOW_PIDFILE.0" 20
    wait_for_file "$FLOW_PIDFILE.1" 20
    kill -TERM $pid
    set +e; wait $pid; rc=$?; set -e
    assert_eq "$rc" 143 "exit code"
    assert_not_grep "error:" err
    assert_grep "stopped by SIGTERM; 0 ranks stopped, 2 killed after the 1 s grace" err
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "a second Ctrl-C kills at once: still 130, no error line" '
    export FLOW_TAG=twice.$$ FLOW_PIDFILE=$T_TMP/twice
    "$DSL" --term-timeout 300 --include localhost:0,1 "$W" on-signal 0 600 >out 2>err &
    pid=$!
    wait_for_file "$FLOW_PIDFILE.0" 20
    wait_for_file "$FLOW_PIDFILE.1" 20
    kill -INT $pid
    i=0; until grep -q "got SIGINT" err || [ $i -ge 200 ]; do sleep 0.1; i=$((i + 1)); done
    kill -INT $pid
    set +e; wait $pid; rc=$?; set -e
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
    "$DSL" --include localhost:0,1 "$W" grandchild 600 >out 2>err &
    pid=$!
    wait_for_file "$FLOW_PIDFILE.1" 20
    wait_for_file "$FLOW_PIDFILE.0" 20
    ranks=$(cat "$FLOW_PIDFILE.0" "$FLOW_PIDFILE.1")
    gcs=$(grandchild_pids "$FLOW_PIDFILE" 0 1)
    assert_alive $ranks $gcs
    kill -KILL $pid
    set +e; wait $pid; set -e
    wait_no_procs "$FLOW_TAG" 15
    wait_gone 5 $ranks $gcs
'

expect_success "arguments reach the program byte for byte" '
    nl="
"
    run_capture rc out err "$DSL" --include localhost:0 "$W" args "I am 6'"'"' tall" "\$(touch $T_TMP/pwned)" "a${nl}b" "" "  spaced  " "ünïcødé" "--include" "*"
    assert_eq "$rc" 0
    [ ! -e "$T_TMP/pwned" ] || fail "command substitution ran"
    expect=""
    for a in "I am 6'"'"' tall" "\$(touch $T_TMP/pwned)" "a${nl}b" "" "  spaced  " "ünïcødé" "--include" "*"; do
        expect="$expect[rank 0] arg $(printf %s "$a" | od -An -tx1 | tr -d " \n")${nl}"
    done
    printf %s "$expect" > expect
    diff expect out
'

expect_success "--local_rank_arg appends --local_rank=N" '
    run_capture rc out err "$DSL" --local_rank_arg --include localhost:0,1 "$W" args x
    assert_eq "$rc" 0
    assert_grep "^\[rank 1\] arg $(printf %s --local_rank=1 | od -An -tx1 | tr -d " \n")$" out
    run_capture rc out err "$DSL" --include localhost:0,1 "$W" args x
    assert_not_grep "$(printf %s --local_rank | od -An -tx1 | tr -d " \n")" out
'

expect_success "a missing .py script is an error before anything starts, not python3 failing on every rank" '
    run_capture rc out err "$DSL" --include localhost:0,1 no_such_script.py --epochs 3
    assert_eq "$rc" 127
    assert_grep "^dslaunch: error: cannot run .no_such_script.py.: No such file or directory in .$PWD.$" err
    [ ! -s out ] || fail "a rank ran"
    assert_not_grep "rank 0" err
    mkdir -p app.py && printf "print(\"main ran\")\n" >app.py/__main__.py
    run_capture rc out err "$DSL" --include localhost:0 app.py
    assert_eq "$rc" 0 "a directory with __main__.py is a script python3 runs"
    assert_grep "^\[rank 0\] main ran$" out
'

expect_success "a .py PROGRAM runs with python3 -u and gets --local_rank=N after the script, as DeepSpeed does" '
    printf "import os, sys\nprint(\"argv\", os.environ[\"LOCAL_RANK\"], sys.argv[1:], open(\"/proc/self/cmdline\").read().split(chr(0))[1])\n" >train.py
    run_capture rc out err "$DSL" --include localhost:0,1 train.py --epochs 3 -- x
    cat err
    assert_eq "$rc" 0
    assert_grep "^\[rank 0\] argv 0 \[.--local_rank=0., .--epochs., .3., .--., .x.\] -u$" out
    assert_grep "^\[rank 1\] argv 1 \[.--local_rank=1., .--epochs., .3., .--., .x.\] -u$" out
    run_capture rc out err "$DSL" --include localhost:0 --no_local_rank train.py a
    assert_grep "^\[rank 0\] argv 0 \[.a.\] -u$" out
    run_capture rc out err "$DSL" --include localhost:0 --dry-run train.py a
    python3 -c "import json; d=json.load(open(\"out\")); assert d[\"argv\"]==[\"python3\",\"-u\",\"train.py\",\"--local_rank=<LOCAL_RANK>\",\"a\"], d[\"argv\"]"
    chmod 755 train.py
    sed -i "1i #!/usr/bin/env python3" train.py
    run_capture rc out err "$DSL" --include localhost:0 --no_python ./train.py a
    assert_eq "$rc" 0
    assert_grep "^\[rank 0\] argv 0 \[.a.\]" out
'

expect_success "--module runs python3 -u -m MODULE; DeepSpeed flags without a feature here say what to use" '
    mkdir -p pkg && printf "import os, sys\nprint(\"mod\", os.environ[\"RANK\"], sys.argv[1:])\n" >pkg/__main__.py
    run_capture rc out err "$DSL" --include localhost:0,1 -m pkg y
    assert_eq "$rc" 0
    assert_grep "^\[rank 1\] mod 1 \[.--local_rank=1., .y.\]$" out
    run_capture rc out err "$DSL" --module --no_python pkg
    assert_eq "$rc" 2
    run_capture rc out err "$DSL" --elastic_training "$W" env
    assert_eq "$rc" 2
    assert_grep "option .--elastic_training. is DeepSpeed.s; dslaunch has no such feature: .*--max-restarts" err
    run_capture rc out err "$DSL" --autotuning tune "$W" env
    assert_eq "$rc" 2
    assert_grep "autotuner" err
    run_capture rc out err "$DSL" --include localhost:0 --enable_each_rank_log ds_logs "$W" env
    assert_eq "$rc" 0
    assert_grep "RANK=0" ds_logs/rank0.log
'

expect_success "--bind_cores_to_rank: each rank runs on its own equal share of the cores, OMP_NUM_THREADS its size" '
    n=$(nproc)
    [ "$n" -ge 2 ] || skip "one usable core"
    run_capture rc out err "$DSL" --include localhost:0,1 --bind_cores_to_rank python3 -c \
        "import os; print(\"cores\", sorted(os.sched_getaffinity(0)), os.environ[\"OMP_NUM_THREADS\"])"
    cat err
    assert_eq "$rc" 0
    python3 - out "$n" <<PY
import ast, os, re, sys
got = {}
for line in open(sys.argv[1]):
    m = re.match(r"\[rank (\d)\] cores (\[.*\]) (\d+)$", line.strip())
    if m:
        got[int(m.group(1))] = (set(ast.literal_eval(m.group(2))), int(m.group(3)))
per = int(sys.argv[2]) // 2
assert sorted(got) == [0, 1], got
a, b = got[0][0], got[1][0]
assert len(a) == per and len(b) == per and not (a & b), got
assert a | b <= os.sched_getaffinity(0), got
assert got[0][1] == per and got[1][1] == per, got
PY
    run_capture rc out err "$DSL" --include localhost:0 --bind_core_list 1 sh -c "grep Cpus_allowed_list /proc/self/status"
    assert_eq "$rc" 0
    assert_grep "Cpus_allowed_list:.1$" out
    run_capture rc out err "$DSL" --include localhost:0,1 --bind_core_list 1 true
    assert_eq "$rc" 202 "a node that cannot bind is a mismatch, not a missing program (127)"
    assert_grep "1 core(s) cannot be bound to 2 rank(s)" err
    assert_grep "rank 0 (host localhost) could not be started" err
    run_capture rc out err "$DSL" --include localhost:0 --bind_core_list 4095 true
    assert_eq "$rc" 202
    assert_grep "core 4095 of --bind_core_list .4095. is not one this node lets dslaunch use" err
    run_capture rc out err "$DSL" --bind_core_list 0-x true
    assert_eq "$rc" 2
    assert_grep "option .--bind_core_list.: bad core list item .0-x." err
'

expect_success "a rank reads end of file on stdin whatever dslaunch was given (docs/env.md, Standard input)" '
    run_capture rc out err "$DSL" --include localhost:0 sh -c "wc -c; readlink /proc/self/fd/0" <<<typed-input
    assert_eq "$rc" 0
    assert_grep "^\[rank 0\] 0$" out
    assert_grep "^\[rank 0\] /dev/null$" out
'

expect_success "--save_pid writes /tmp/<pid>.ds while dslaunch runs and removes it" '
    "$DSL" --include localhost:0 --save_pid sh -c "cat /tmp/\$PPID.ds >/dev/null; sleep 0.5" &
    pid=$!
    for i in $(seq 50); do [ -f /tmp/$pid.ds ] && break; sleep 0.1; done
    assert_eq "$(cat /tmp/$pid.ds)" "$pid"
    wait $pid
    [ ! -e /tmp/$pid.ds ] || fail "/tmp/$pid.ds left behind"
'

expect_success "a missing program is reported before anything starts (127)" '
    run_capture rc out err "$DSL" --include localhost:0,1 ./no-such-program
    assert_eq "$rc" 127
    assert_grep "cannot start .*no-such-program" err
    run_capture rc out err "$DSL" --include localhost:0,1 no-such-program-in-path
    assert_eq "$rc" 127
    assert_grep "command not found" err
'

expect_success "a non-executable program gives 126" '
    echo "#!/bin/sh" > notexec.sh
    run_capture rc out err "$DSL" --include localhost:0 ./notexec.sh
    assert_eq "$rc" 126
    assert_grep "not an executable" err
'

expect_success "usage errors exit 2 and start nothing" '
    run_capture rc out err "$DSL" --no-such-option x
    assert_eq "$rc" 2
    assert_grep "unknown option .--no-such-option." err
    run_capture rc out err "$DSL" --include localhost:0 --exclude localhost:1 "$W" env
    assert_eq "$rc" 2
    run_capture rc out err "$DSL" --master_port=abc "$W" env
    assert_eq "$rc" 2
    assert_grep "master_port" err
    run_capture rc out err "$DSL"
    assert_eq "$rc" 2
    assert_grep "no program" err
    mkdir -p nopdsh && printf "worker-0 slots=1\n" >hf.nopdsh
    run_capture rc out err env PATH="$T_TMP/nopdsh" "$DSL" --launcher pdsh -H hf.nopdsh --dry-run true
    assert_eq "$rc" 2
    assert_grep "error: --launcher pdsh needs .pdsh., which is not in PATH (Debian: apt install pdsh)" err
    run_capture rc out err env PATH="$T_TMP/nopdsh" "$DSL" --launcher openmpi -H hf.nopdsh true
    assert_eq "$rc" 2
    assert_grep "needs .mpirun." err
    run_capture rc out err "$DSL" --log-dir --dry-run "$W" env
    assert_eq "$rc" 2
    assert_grep "option .--log_dir. needs a value, and .--dry-run. is an option" err
    [ ! -e ./--dry-run ] || fail "made a directory named --dry-run"
    assert_not_grep "RANK=" out
'

expect_success "a bad hostfile names path and line; a missing one is an error" '
    printf "worker-0 slots=2\nworker-1 slots=x4\n" > bad.txt
    run_capture rc out err "$DSL" --hostfile bad.txt "$W" env
    assert_eq "$rc" 2
    assert_grep "bad.txt.:2:" err
    assert_grep "x4" err
    run_capture rc out err "$DSL" --hostfile nope.txt "$W" env
    assert_eq "$rc" 2
    assert_grep "nope.txt" err
'

expect_success "a hostfile or a ds_config that is a FIFO is refused at once, not waited on" '
    mkfifo hosts.fifo config.fifo
    # timeout: a liveness bound; a read of a FIFO nobody writes would never end (124)
    run_capture rc out err timeout 30 "$DSL" --hostfile hosts.fifo "$W" env
    assert_eq "$rc" 2 "exit code (124: still waiting on the FIFO)"
    assert_grep "hostfile .hosts.fifo.: not a regular file (a FIFO, socket or device): not reading it" err
    dstrain="$(dirname "$DSL")/dstrain"
    [ -x "$dstrain" ] || skip "dstrain is not built beside dslaunch"
    run_capture rc out err timeout 30 "$dstrain" --config config.fifo
    assert_eq "$rc" 2 "exit code of dstrain (124: still waiting on the FIFO)"
    assert_grep "config .config.fifo.: not a regular file (a FIFO, socket or device): not reading it" err
'

expect_success "a rank's stderr quoted in the failure summary is escaped; its streamed lines stay byte-exact" '
    printf "%s\n" "printf \"X\\033]0;PWNED\\007\\033[2JY\\n\" >&2" "exit 1" >rank.sh
    run_capture rc out err "$DSL" --include localhost:0 sh rank.sh
    assert_eq "$rc" 1
    raw=$(printf "X\033]0;PWNED\007\033[2JY")
    # the line the rank wrote, streamed as written (docs/design.md)
    assert_eq "$(grep -cxF "[rank 0] $raw" err)" 1 "raw streamed lines"
    # what dslaunch prints itself is escaped: no other line carries an ESC or a BEL
    assert_grep "^  | X\\\\x1b\]0;PWNED\\\\x07\\\\x1b\[2JY$" err
    assert_eq "$(grep -c "$(printf "[\033\007]")" err)" 1 "lines with a raw ESC or BEL"
'

expect_success "a --ssh-config or --ssh-identity that is not there is an error before any host is looked up" '
    printf "nohost-a slots=1\nnohost-b slots=1\n" >hosts_missing_cfg
    run_capture rc out err "$DSL" --hostfile hosts_missing_cfg --ssh-config no_such_ssh_config "$W" env
    assert_eq "$rc" 2
    assert_grep "^dslaunch: error: --ssh-config .no_such_ssh_config.: No such file or directory$" err
    assert_not_grep "resolve" err
    run_capture rc out err "$DSL" --hostfile hosts_missing_cfg --ssh-config . "$W" env
    assert_eq "$rc" 2
    assert_grep "^dslaunch: error: --ssh-config .\.. is a directory, not a file$" err
    run_capture rc out err "$DSL" --hostfile hosts_missing_cfg --ssh-identity no_such_key "$W" env
    assert_eq "$rc" 2
    assert_grep "^dslaunch: error: --ssh-identity .no_such_key.: No such file or directory$" err
    run_capture rc out err "$DSL" sync --hostfile hosts_missing_cfg --ssh-config no_such_ssh_config .
    assert_eq "$rc" 2
    assert_grep "sync: --ssh-config .no_such_ssh_config.: No such file or directory$" err
    run_capture rc out err "$DSL" --include localhost:0 --ssh-config /dev/null "$W" env
    assert_eq "$rc" 0 "ssh -F /dev/null is a common idiom"
'

expect_success "--help lists every option with defaults; --version" '
    run_capture rc out err "$DSL" --help
    assert_eq "$rc" 0
    for o in hostfile include exclude num-nodes num-gpus master-addr master-port launcher export log-dir output-buffer no-prefix term-timeout rank-memory-limit local-rank-arg dry-run check fanout connect-timeout keepalive ssh-config ssh-port ssh-identity ssh-accept-new remote-dslaunch remote-cwd; do
        assert_grep "\-\-$o" out
    done
    assert_grep "default: 29500" out
    assert_grep "^       dslaunch sync PATH\.\.\. --hostfile FILE  *# copy files to every node$" out
    run_capture rc out err "$DSL" --version
    assert_eq "$rc" 0
    assert_grep "^dslaunch [0-9]" out
'

expect_success "--log-dir writes one file per rank and still shows the console" '
    run_capture rc out err "$DSL" --log-dir logs --include localhost:0,1 "$W" env
    assert_eq "$rc" 0
    assert_grep "^RANK=0$" logs/rank0.log
    assert_grep "^RANK=1$" logs/rank1.log
    assert_grep "^\[rank 1\] RANK=1$" out
'

expect_success "--log-dir never writes through a link planted at a log name: refused, and the link replaced with --log-dir-overwrite" '
    mkdir -m 0755 planted && echo precious >victim && ln -s "$PWD/victim" planted/rank0.log
    ln -s "$PWD/victim" planted/rank1.log
    run_capture rc out err "$DSL" --log-dir planted --include localhost:0,1 "$W" env
    assert_eq "$rc" 2
    assert_grep "holds the logs of an earlier run (.rank0.log. and 1 more)" err
    assert_eq "$(cat victim)" precious "the link target"
    run_capture rc out err "$DSL" --log-dir planted --log-dir-overwrite --include localhost:0,1 "$W" env
    assert_eq "$rc" 0
    assert_eq "$(cat victim)" precious "the link target"
    [ ! -L planted/rank0.log ] && [ ! -L planted/rank1.log ] || fail "a log is still a link"
    assert_grep "^RANK=0$" planted/rank0.log
    assert_grep "^RANK=1$" planted/rank1.log
'

expect_success "--log-dir refuses a directory others can write or another user owns, writing nothing" '
    echo precious >victim2
    mkdir -m 1777 shared && ln -s "$PWD/victim2" shared/rank0.log
    run_capture rc out err "$DSL" --log-dir shared --include localhost:0 "$W" env
    assert_eq "$rc" 2
    assert_grep "^dslaunch: error: --log-dir: directory .shared. is shared (writable by group and others, sticky: mode 1777, like /tmp)" err
    assert_grep "e.g. .shared/logs. (created if missing)" err
    assert_not_grep "chmod" err
    assert_eq "$(cat victim2)" precious "the link target"
    mkdir -m 0775 grpdir
    run_capture rc out err "$DSL" --log-dir grpdir --include localhost:0 "$W" env
    assert_eq "$rc" 2
    assert_grep "directory .grpdir. is writable by its group (mode 0775)" err
    [ -z "$(ls grpdir)" ] || fail "files written into grpdir"
    if [ "$(id -u)" = 0 ]; then
        mkdir -m 0755 foreign && chown 65534 foreign
        run_capture rc out err "$DSL" --log-dir foreign --include localhost:0 "$W" env
        assert_grep "directory .foreign. belongs to another user (uid 65534, not 0)" err
        ln -s "$PWD/planted" foreign_link && chown -h 65534 foreign_link
        run_capture rc out err "$DSL" --log-dir foreign_link --include localhost:0 "$W" env
        assert_grep "directory .foreign_link. is a symbolic link owned by another user (uid 65534)" err
    else
        run_capture rc out err "$DSL" --log-dir / --include localhost:0 "$W" env
        assert_grep "directory ./. belongs to another user (uid 0, not $(id -u))" err
    fi
    assert_eq "$rc" 2
'

expect_success "--no-prefix prints bare lines" '
    run_capture rc out err "$DSL" --no-prefix --include localhost:0 "$W" env
    assert_eq "$rc" 0
    assert_grep "^RANK=0$" out
'

expect_success "progress lines redrawn with \\r come out whole, not garbled" '
    run_capture rc out err "$DSL" --include localhost:0 "$W" progress
    assert_eq "$rc" 0
    assert_grep "^\[rank 0\] done$" out
    ! grep -q "$(printf "\r")" out || fail "raw carriage return in output"
    grep "progress" out | grep -qv "^\[rank 0\] progress *[0-9]*%$" && fail "torn progress line" || true
'

expect_success "output exactly as written: NUL, \\r, \\r\\n and 2 MB of random bytes through stdout (--no-prefix) and --log-dir" '
    head -c 2000000 /dev/urandom >rand.bin
    printf "a\0b\n\rprog 1\rprog 2\r\nend\r\nno newline" >mixed.bin
    mkdir -m 700 lg
    for f in rand.bin mixed.bin; do
        run_capture rc out err "$DSL" --include localhost:0 --no-prefix --log-dir lg \
            --log-dir-overwrite cat "$f"
        assert_eq "$rc" 0
        cmp "$f" out || fail "stdout differs from $f"
        cmp "$f" lg/rank0.log || fail "--log-dir differs from $f"
    done
    # with prefixes: every line whole, NUL kept, and no empty line for a leading \r
    run_capture rc out err "$DSL" --include localhost:0 cat mixed.bin
    python3 - out <<PY
got = open(__import__("sys").argv[1], "rb").read()
want = b"[rank 0] a\0b\n[rank 0] prog 1\n[rank 0] prog 2\n[rank 0] end\n[rank 0] no newline\n"
assert got == want, got
PY
'

expect_success "a busy default master port is replaced; a busy given port is an error" '
    # wait (bounded) for the port if another program holds it right now, then hold it
    python3 -c "
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
for i in range(300):
    try:
        s.bind((\"\", 29500)); break
    except OSError:
        time.sleep(0.1)
s.listen(1); open(\"listening\", \"w\").write(\"1\"); time.sleep(60)" &
    lp=$!
    wait_for_file listening 40 || { kill $lp; false; }
    run_capture rc1 out1 err1 "$DSL" --include localhost:0 "$W" env
    run_capture rc2 out2 err2 "$DSL" --master_port 29500 --include localhost:0 "$W" env
    kill $lp
    assert_eq "$rc1" 0
    assert_grep "master port 29500 is busy; using" err1
    assert_not_grep "MASTER_PORT=29500$" out1
    assert_eq "$rc2" 2
    assert_grep "master port 29500 is busy" err2
'

expect_success "--launcher local runs fake hosts of a hostfile as separate nodes" '
    printf "# two fake nodes\nnode-a slots=2\nnode-b slots=2 # trailing comment\n" > fake.txt
    run_capture rc out err "$DSL" --hostfile fake.txt --launcher local "$W" env
    assert_eq "$rc" 0
    assert_grep "^\[node-a:rank 0\] NODE_RANK=0$" out
    assert_grep "^\[node-b:rank 3\] NODE_RANK=1$" out
    assert_grep "^\[node-b:rank 3\] LOCAL_RANK=1$" out
    assert_grep "^\[node-b:rank 2\] RANK=2$" out
    assert_grep "^\[node-b:rank 2\] NNODES=2$" out
    assert_grep "^\[node-b:rank 2\] WORLD_SIZE=4$" out
'

expect_success "a failure on one fake node tears down the other node" '
    export FLOW_TAG=twonode.$$ FLOW_PIDFILE=$T_TMP/twonode
    run_capture rc out err "$DSL" --hostfile fake.txt --launcher local "$W" only 3 exit 7 0.3
    assert_eq "$rc" 7
    assert_grep "rank 3 (host node-b" err
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "only exported variables reach the env set; --export adds more" '
    export NCCL_DEBUG=INFO FLOW_PRIVATE=secret FLOW_EXPORTED=yes
    run_capture rc out err "$DSL" --dry-run --export FLOW_EXPORTED --export EXTRA=1 --include localhost:0,1 "$W" env
    assert_eq "$rc" 0
    python3 - out <<PY
import json, sys
d = json.load(open(sys.argv[1]))
env = d["env"]
assert env.get("NCCL_DEBUG") == "INFO", env
assert env.get("FLOW_EXPORTED") == "yes", env
assert env.get("EXTRA") == "1", env
assert "FLOW_PRIVATE" not in env, env
assert "CUDA_VISIBLE_DEVICES" not in env, env
PY
    printf "FROM_FILE=value with spaces\n# comment\n\nQUOTED=\"q v\"\n" > .dslaunch_env
    run_capture rc out err "$DSL" --dry-run --include localhost:0 "$W" env
    assert_eq "$rc" 0
    python3 -c "import json,sys; e=json.load(open(\"out\"))[\"env\"]; assert e[\"FROM_FILE\"]==\"value with spaces\" and e[\"QUOTED\"]==\"q v\", e"
    printf "not a valid line\n" > .dslaunch_env
    run_capture rc out err "$DSL" --dry-run --include localhost:0 "$W" env
    rm -f .dslaunch_env
    assert_eq "$rc" 2
    assert_grep ".dslaunch_env.:1:" err
'

expect_success "--dry-run prints the plan for a dozen placements" '
    printf "worker-0 slots=4\nworker-1 slots=4\nworker-2 slots=2\n" > h3.txt
    check() {  # check EXPECTED_WORLD_INFO ARGS...
        local want=$1; shift
        run_capture rc out err "$DSL" --dry-run --hostfile h3.txt "$@" prog
        assert_eq "$rc" 0 "exit code for $*"
        python3 - out "$want" <<PY
import json, sys, base64
d = json.load(open(sys.argv[1]))
want = json.loads(sys.argv[2])
got = {w["host"]: w["slots"] for w in d["world_info"]}
assert list(got.items()) == list(want.items()), (got, want)
assert d["world_size"] == sum(len(v) for v in want.values())
assert base64.urlsafe_b64decode(d["world_info_b64"]).decode() == json.dumps(want), d["world_info_b64"]
ranks = d["ranks"]
assert [r["rank"] for r in ranks] == list(range(d["world_size"]))
i = 0
for n, (h, slots) in enumerate(want.items()):
    for l, s in enumerate(slots):
        r = ranks[i]; i += 1
        assert (r["host"], r["node_rank"], r["local_rank"], r["device"]) == (h, n, l, s), r
assert d["master_port"] == 29500 or d["master_port"] > 0
assert d["launcher"] == "ssh", d["launcher"]
PY
    }
    check "{\"worker-0\": [0, 1, 2, 3], \"worker-1\": [0, 1, 2, 3], \"worker-2\": [0, 1]}"
    check "{\"worker-0\": [0, 2], \"worker-1\": [0, 1, 2, 3]}" -i "worker-0:0,2@worker-1"
    check "{\"worker-0\": [0, 2]}" --include worker-0:2,0,2
    check "{\"worker-1\": [1], \"worker-2\": [0, 1]}" -i "worker-2@worker-1:1"
    check "{\"worker-0\": [0, 1, 2, 3], \"worker-2\": [0, 1]}" -e worker-1
    check "{\"worker-0\": [1, 2, 3], \"worker-1\": [0, 1, 2, 3], \"worker-2\": [1]}" -e "worker-0:0@worker-2:0"
    check "{\"worker-0\": [0, 1, 2, 3], \"worker-1\": [0, 1, 2, 3]}" --num_nodes 2
    check "{\"worker-0\": [0]}" --num_nodes 1 --num_gpus 1
    check "{\"worker-0\": [0, 1], \"worker-1\": [0, 1], \"worker-2\": [0, 1]}" --num_gpus 2
    check "{\"worker-1\": [3]}" --include=worker-1:3
    check "{\"worker-0\": [0, 1, 2, 3], \"worker-1\": [0, 1, 2, 3]}" --exclude worker-2
'

expect_success "--dry-run shows the hostfile login users and the --launcher_args words of pdsh and openmpi" '
    printf "alice@worker-0 slots=2\nworker-1 slots=1\n" > hu.txt
    for l in pdsh openmpi; do
        run_capture rc out err "$DSL" --dry-run --hostfile hu.txt --launcher $l \
            --launcher_args " -f 1  --x=\$(y);* " -i worker-0 prog
        assert_eq "$rc" 0 "exit ($l)"
        python3 - out "$l" <<PY
import json, sys
d = json.load(open(sys.argv[1]))
assert d["launcher"] == sys.argv[2], d["launcher"]
assert d["world_info"] == [{"host": "worker-0", "user": "alice", "slots": [0, 1]}], d["world_info"]
assert d["master_addr"] == "worker-0", d["master_addr"]
assert d["launcher_args"] == ["-f", "1", "--x=\$(y);*"], d["launcher_args"]
assert [r["host"] for r in d["ranks"]] == ["worker-0", "worker-0"], d["ranks"]
PY
    done
    run_capture rc out err "$DSL" --dry-run --hostfile hu.txt --launcher_args "-f 1" prog
    assert_eq "$rc" 2 "launcher_args on ssh"
    assert_grep "launcher_args passes options to a launcher command (pdsh, mpirun, srun), but this job uses the ssh transport, which runs none" err
    run_capture rc out err "$DSL" --dry-run --launcher_args "-f 1" prog
    assert_eq "$rc" 2 "launcher_args on local"
    assert_grep "but this job uses the local transport, which runs none" err
    run_capture rc out err "$DSL" --dry-run --hostfile hu.txt -i alice@worker-0 prog
    assert_eq "$rc" 2 "a user in a filter"
    assert_grep "unknown host .alice. .*that is a login user of the hostfile: filters name hosts alone" err
    run_capture rc out err "$DSL" --dry-run --hostfile hu.txt --launcher slurm prog
    assert_eq "$rc" 2 "a user with slurm"
    assert_grep "the slurm transport starts the agents as the Slurm job.s user, so the login user of .alice@worker-0. (hostfile .hu.txt.) cannot be honoured" err
    printf "w slots=1\na+b@v slots=1\n" > hb.txt
    run_capture rc out err "$DSL" --dry-run --hostfile hb.txt prog
    assert_eq "$rc" 2 "a bad user"
    assert_grep "hostfile .hb.txt.:2: bad user name .a+b." err
'

expect_success "--launcher slurm with no hostfile outside an allocation is refused before srun runs" '
    # the only host would be localhost, where srun cannot place an agent
    printf "#!/bin/sh\necho ran >\"%s/srun.ran\"\nexit 1\n" "$PWD" >fake-srun
    chmod +x fake-srun
    for dry in "" --dry-run; do
        run_capture rc out err env -u SLURM_JOB_ID -u SLURM_JOB_NODELIST DSLAUNCH_SRUN="$PWD/fake-srun" \
            "$DSL" $dry --launcher slurm --launcher_args "-N2" /bin/true
        assert_eq "$rc" 2 "exit ($dry)"
        assert_grep "launcher slurm outside a Slurm allocation (no SLURM_JOB_ID and SLURM_JOB_NODELIST here) needs --hostfile with Slurm.s node names" err
        [ ! -e srun.ran ] || fail "srun ran ($dry)"
    done
    rm -f out.sh
    run_capture rc out err env -u SLURM_JOB_ID -u SLURM_JOB_NODELIST \
        "$DSL" --dry-run --emit sbatch=out.sh --launcher slurm --num_nodes 2 /bin/true
    assert_eq "$rc" 0 "--emit sbatch still writes a script for an allocation to come"
    assert_grep "^#SBATCH --nodes=2$" out.sh
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

expect_success "--launcher slurm checks the srun that DSLAUNCH_SRUN names, not the one in PATH" '
    printf "#!/bin/sh\nexit 1\n" >my-srun
    chmod +x my-srun
    printf "n1 slots=1\nn2 slots=1\n" >hs.txt
    # a site srun outside PATH, named by the variable: accepted, and the one run
    run_capture rc out err env PATH=/nonexistent DSLAUNCH_SRUN="$PWD/my-srun" \
        "$DSL" --dry-run --launcher slurm --hostfile hs.txt /bin/true
    cat err >&2
    assert_eq "$rc" 0 "srun outside PATH"
    python3 -c "import json, sys; assert json.load(open(sys.argv[1]))[\"srun\"][0] == sys.argv[2]" \
        out "$PWD/my-srun" || fail "the srun line does not start with DSLAUNCH_SRUN"
    # a misspelt one: refused before any host is tried, naming the variable
    run_capture rc out err env DSLAUNCH_SRUN=/nonexistent/srun \
        "$DSL" --launcher slurm --hostfile hs.txt /bin/true
    assert_eq "$rc" 2 "DSLAUNCH_SRUN missing"
    assert_grep "launcher slurm runs DSLAUNCH_SRUN=./nonexistent/srun. instead of .srun., but" err
    run_capture rc out err env DSLAUNCH_MPIRUN="$PWD/hs.txt" \
        "$DSL" --dry-run --launcher openmpi --hostfile hs.txt /bin/true
    assert_eq "$rc" 2 "DSLAUNCH_MPIRUN not executable"
    assert_grep "launcher openmpi runs DSLAUNCH_MPIRUN=.*hs.txt. instead of .mpirun., but" err
'

expect_success "--dry-run rejects bad placements with the usage code" '
    printf "worker-0 slots=4\nworker-1 slots=4\n" > h2.txt
    for spec in "worker-9" "worker-0:7" "worker-0:" "worker-0:1:2" "worker-0@" "worker-0:x"; do
        run_capture rc out err "$DSL" --dry-run --hostfile h2.txt -i "$spec" prog
        assert_eq "$rc" 2 "include $spec"
        [ -s err ] || fail "no message for $spec"
    done
    run_capture rc out err "$DSL" --dry-run --hostfile h2.txt -e "worker-0@worker-1" prog
    assert_eq "$rc" 2
    run_capture rc out err "$DSL" --dry-run --hostfile h2.txt --num_gpus 5 prog
    assert_eq "$rc" 2
    run_capture rc out err "$DSL" --dry-run --hostfile h2.txt --num-nodes=1 --include worker-1 prog
    assert_eq "$rc" 2
'

expect_success "--check without a hostfile shows the MASTER_ADDR the ranks get" '
    run_capture rc out err "$DSL" --check --include localhost:0,1
    assert_eq "$rc" 0
    shown=$(cat out err | sed -n "s/^MASTER_ADDR=\([^ ]*\) .*/\1/p")
    [ -n "$shown" ] || fail "--check printed no MASTER_ADDR: $(cat out)"
    run_capture rc out err "$DSL" --include localhost:0,1 sh -c "echo addr=\$MASTER_ADDR"
    assert_eq "$rc" 0
    assert_eq "$(grep -c "addr=$shown\$" out)" 2 "ranks with the MASTER_ADDR --check showed"
'

expect_success "--check starts no rank, so it says nothing about the ranks' OMP_NUM_THREADS" '
    run_capture rc out err "$DSL" --check --include localhost:0,1
    assert_eq "$rc" 0
    assert_grep "preflight ok: 1 node(s), 2 rank(s)" err
    assert_not_grep "OMP_NUM_THREADS" err
'

expect_success "an exported NCCL_/GLOO_SOCKET_IFNAME that no interface satisfies stops the preflight (202)" '
    run_capture rc out err env NCCL_SOCKET_IFNAME=nosuch0 "$DSL" --export NCCL_SOCKET_IFNAME \
        --include localhost:0 "$W" env
    assert_eq "$rc" 202
    assert_grep "error: .localhost. has no interface that NCCL_SOCKET_IFNAME=.nosuch0. allows (its interfaces: lo" err
    assert_not_grep "RANK=" out
    run_capture rc out err env GLOO_SOCKET_IFNAME=lo,nosuch0 "$DSL" --export GLOO_SOCKET_IFNAME \
        --include localhost:0 "$W" env
    assert_eq "$rc" 202
    for v in NCCL_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME==lo GLOO_SOCKET_IFNAME=lo; do
        run_capture rc out err env "$v" "$DSL" --export "${v%%=*}" --include localhost:0 "$W" env
        assert_eq "$rc" 0 "exit code with $v"
    done
'

expect_success "CUDA_VISIBLE_DEVICES selects local devices when nothing else does" '
    run_capture rc out err env CUDA_VISIBLE_DEVICES=1,2 "$DSL" --dry-run prog
    assert_eq "$rc" 0
    python3 -c "import json,sys; d=json.load(open(\"out\")); assert d[\"world_info\"]==[{\"host\":\"localhost\",\"slots\":[1,2]}], d"
    run_capture rc out err env CUDA_VISIBLE_DEVICES=GPU-abc "$DSL" --dry-run prog
    assert_eq "$rc" 2
    run_capture rc out err env CUDA_VISIBLE_DEVICES=7 "$DSL" --dry-run prog
    assert_eq "$rc" 2
    assert_grep "error: CUDA_VISIBLE_DEVICES=.7. selects the local devices: host .localhost. has no slot 7" err
    assert_not_grep "include" err
'

expect_success "CUDA_VISIBLE_DEVICES=-1 (no GPUs, the CPU idiom): CPU slots, and ranks that see no device" '
    run_capture rc out err env CUDA_VISIBLE_DEVICES=-1 "$DSL" --num_gpus 2 "$W" env
    cat err
    assert_eq "$rc" 0
    assert_eq "$(grep -c "^\[rank [01]\] CUDA_VISIBLE_DEVICES=-1$" out)" 2 "ranks with -1"
    assert_not_grep "RANK=2" out
    run_capture rc out err env -u DSLAUNCH_LOCAL_SLOTS CUDA_VISIBLE_DEVICES=-1 "$DSL" --dry-run prog
    assert_eq "$rc" 0
    python3 -c "import json,os; d=json.load(open(\"out\")); assert d[\"world_info\"]==[{\"host\":\"localhost\",\"slots\":list(range(os.cpu_count()))}], d"
'

expect_success "the README main job: two local ranks train on Fashion-MNIST and the loss falls" '
    [ -x "$(dirname "$DSL")/dstrain" ] || fail "dstrain is not built beside dslaunch"
    [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || fail "dataset-fashion-mnist is not installed (scripts/setup.sh)"
    run_capture rc out err "$DSL" --include localhost:0,1 train --config "$SRC/configs/fashion_mnist.json" --steps 300 --metrics m.jsonl
    assert_eq "$rc" 0
    assert_grep "^\[rank 0\] summary: steps 300 " out
    python3 - m.jsonl <<PY
import json, sys
rec = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rec if r.get("type") == "step"]
assert len(steps) >= 200, len(steps)
first = sum(r["loss"] for r in steps[:20]) / 20
last = sum(r["loss"] for r in steps[-20:]) / 20
assert last < 0.6 * first, (first, last)
summ = [r for r in rec if r.get("type") == "summary"][0]
assert summ["test_acc"] > 0.75, summ
PY
'

expect_success "a rank killed in the middle of an allreduce: dslaunch names it and tears the job down" '
    [ -x "$(dirname "$DSL")/dsbench" ] || fail "dsbench is not built beside dslaunch"
    export FLOW_TAG=killar.$$
    run_capture rc out err "$DSL" --term-timeout 2 --include localhost:0,1,2 sh -c "if [ \"\$RANK\" = 1 ]; then (sleep 1.5; kill -9 \$\$) & fi; exec \"$(dirname "$DSL")/dsbench\" -b 16M -e 16M -w 1 -n 100000 -o allreduce"
    assert_eq "$rc" 137
    assert_grep "rank 1 (host localhost, pid [0-9]*) was killed by SIGKILL" err
    wait_no_procs "$FLOW_TAG" 10
'

# ---- descendants: nothing a rank starts survives the job, whatever the outcome ----
#
# Each case runs under one containment mode (DSLAUNCH_CONTAIN: auto, v1, v2, tracking);
# a cgroup mode this machine cannot provide is skipped. The worker's "descend" leaves a
# setsid child and a double-fork daemon (which ignores SIGTERM) per rank; a case passes
# when they ran, are gone afterwards with the ranks and every other process of the job
# (the clean-up process included), and the job's cgroups are removed. While the agent
# lives it does all that before its node reports done, so nothing of the job runs any
# more when dslaunch returns (a script may count on the GPU memory being free).

# the containment `--check` reports for DSLAUNCH_CONTAIN=$1
contain_line() {
    DSLAUNCH_CONTAIN=$1 "$DSL" --check --include localhost:0 2>&1 |
        sed -n 's/^node 0 ranks contained by: //p'
}

# need_mode MODE: skip the test when MODE would not put ranks into cgroups here
need_mode() {
    local line
    line=$(contain_line "$1")
    [ -n "$line" ] || fail "--check printed no containment line"
    if [ "$1" != tracking ]; then
        case $line in cgroup*) ;; *) skip "no cgroup can be made here for mode $1 ($line)" ;; esac
    fi
    echo "containment: $line"
}

descendant_cases() {
    local mode=$1
    expect_success "[$mode] a clean exit (0) leaves no setsid child or daemon behind" '
        need_mode $mode
        export DSLAUNCH_CONTAIN=$mode FLOW_TAG=dclean.$mode.$$ FLOW_PIDFILE=$T_TMP/dclean.$mode
        run_capture rc out err "$DSL" --term-timeout 1 --include localhost:0,1 "$W" descend exit 0
        assert_eq "$rc" 0 "exit code"
        left=$(descendant_pids "$FLOW_PIDFILE" 0 1)
        wait_gone 0 $left  # when dslaunch returns, nothing of the job runs
        assert_not_grep "clean-up process" err  # ... and the agent did it, not its keeper
        wait_no_procs "$FLOW_TAG" 5
        [ $mode = tracking ] || wait_no_cgroups "$FLOW_PIDFILE.0.ready" 5
    '
    expect_success "[$mode] a failing rank (exit 1): no descendant of any rank survives" '
        need_mode $mode
        export DSLAUNCH_CONTAIN=$mode FLOW_TAG=dfail.$mode.$$ FLOW_PIDFILE=$T_TMP/dfail.$mode
        run_capture rc out err "$DSL" --term-timeout 1 --include localhost:0,1 "$W" descend only 1 await 0 exit 1
        assert_eq "$rc" 1 "exit code"
        assert_grep "rank 1 (host localhost, pid [0-9]*) exited with code 1" err
        left=$(descendant_pids "$FLOW_PIDFILE" 0 1)
        wait_gone 0 $left  # when dslaunch returns, nothing of the job runs
        assert_not_grep "clean-up process" err  # ... and the agent did it, not its keeper
        wait_no_procs "$FLOW_TAG" 5
        [ $mode = tracking ] || wait_no_cgroups "$FLOW_PIDFILE.0.ready" 5
    '
    expect_success "[$mode] Ctrl-C (SIGINT to dslaunch): no descendant survives" '
        need_mode $mode
        export DSLAUNCH_CONTAIN=$mode FLOW_TAG=dint.$mode.$$ FLOW_PIDFILE=$T_TMP/dint.$mode
        "$DSL" --term-timeout 1 --include localhost:0,1 "$W" descend sleep 600 >out 2>err &
        pid=$!
        wait_for_file "$FLOW_PIDFILE.0.ready" 20
        wait_for_file "$FLOW_PIDFILE.1.ready" 20
        left=$(descendant_pids "$FLOW_PIDFILE" 0 1)
        assert_alive $left
        kill -INT $pid
        set +e; wait $pid; rc=$?; set -e
        assert_eq "$rc" 130 "exit code"
        wait_gone 0 $left  # when dslaunch returns, nothing of the job runs
        assert_not_grep "clean-up process" err  # ... and the agent did it, not its keeper
        wait_no_procs "$FLOW_TAG" 5
        [ $mode = tracking ] || wait_no_cgroups "$FLOW_PIDFILE.0.ready" 5
    '
    expect_success "[$mode] the node agent SIGKILLed: its clean-up process kills every descendant" '
        need_mode $mode
        export DSLAUNCH_CONTAIN=$mode FLOW_TAG=dkill.$mode.$$ FLOW_PIDFILE=$T_TMP/dkill.$mode
        "$DSL" --term-timeout 1 --include localhost:0,1 "$W" descend sleep 600 >out 2>err &
        pid=$!
        wait_for_file "$FLOW_PIDFILE.0.ready" 20
        wait_for_file "$FLOW_PIDFILE.1.ready" 20
        left=$(descendant_pids "$FLOW_PIDFILE" 0 1)
        assert_alive $left
        # process tracking tells the clean-up process what it found every 0.5 s (its
        # documented gap); cgroups have no gap, so only that mode waits for a report
        [ $mode != tracking ] || sleep 1.2
        agent=$(pgrep -P $pid)  # the local transport forks the agent as a child of dslaunch
        [ -n "$agent" ] || fail "no agent under dslaunch ($pid)"
        kill -KILL $agent
        set +e; wait $pid; rc=$?; set -e
        assert_eq "$rc" 204 "exit code (node agent died)"
        wait_gone 10 $left $(cat "$FLOW_PIDFILE.0" "$FLOW_PIDFILE.1" 2>/dev/null)
        wait_no_procs "$FLOW_TAG" 10
        [ $mode = tracking ] || wait_no_cgroups "$FLOW_PIDFILE.0.ready" 10
    '
}

for mode in auto v1 v2 tracking; do
    descendant_cases $mode
done

# ---- the supervisor's own parts going quiet ----
#
# A node agent that stops (SIGSTOP, a debugger, a machine that freezes) answers nothing
# and dies of nothing. The launcher times it out like any silent node (--keepalive, the
# local transport included), and its clean-up process, which stops hearing from it,
# ends the ranks on its own. Each case resumes or kills what it stopped, even when it
# fails, so nothing it froze outlives it.

frozen_agent_cases() {
    local mode=$1
    expect_success "[$mode] a stopped local node agent is a lost node within --keepalive, and its ranks are stopped" '
        need_mode $mode
        export DSLAUNCH_CONTAIN=$mode FLOW_TAG=agstop.$mode.$$ FLOW_PIDFILE=$T_TMP/agstop.$mode
        "$DSL" --keepalive 3 --term-timeout 1 --include localhost:0,1 "$W" descend pidfile 600 >out 2>err &
        pid=$!
        agent=""
        trap "[ -z \"\$agent\" ] || kill -CONT \$agent 2>/dev/null || true; kill -KILL $pid 2>/dev/null || true" EXIT
        wait_for_file "$FLOW_PIDFILE.0.ready" 20
        wait_for_file "$FLOW_PIDFILE.1.ready" 20
        wait_for_file "$FLOW_PIDFILE.0" 20
        wait_for_file "$FLOW_PIDFILE.1" 20
        left="$(descendant_pids "$FLOW_PIDFILE" 0 1) $(cat "$FLOW_PIDFILE.0" "$FLOW_PIDFILE.1")"
        assert_alive $left
        [ $mode != tracking ] || sleep 1.2  # the clean-up process hears of them (tracking)
        agent=$(pgrep -P $pid)  # the local transport forks the agent as a child of dslaunch
        [ -n "$agent" ] || fail "no agent under dslaunch ($pid)"
        kill -STOP $agent
        wait_exit $pid 40
        assert_eq "$rc" 200 "exit code (a lost node)"
        assert_grep "node 0 (localhost) lost: no word from .localhost. for [0-9.]* s" err
        wait_gone 10 $left
        wait_no_procs "$FLOW_TAG" 10
        [ $mode = tracking ] || wait_no_cgroups "$FLOW_PIDFILE.0.ready" 10
    '
    expect_success "[$mode] a frozen node agent whose launcher is gone: its clean-up process ends the ranks, and the agent sweeps once resumed" '
        need_mode $mode
        export DSLAUNCH_CONTAIN=$mode FLOW_TAG=agfrz.$mode.$$ FLOW_PIDFILE=$T_TMP/agfrz.$mode
        "$DSL" --keepalive 3 --term-timeout 1 --include localhost:0,1 "$W" descend pidfile 600 >out 2>err &
        pid=$!
        agent=""
        trap "[ -z \"\$agent\" ] || kill -CONT \$agent 2>/dev/null || true; kill -CONT $pid 2>/dev/null || true; kill -KILL $pid 2>/dev/null || true" EXIT
        wait_for_file "$FLOW_PIDFILE.0.ready" 20
        wait_for_file "$FLOW_PIDFILE.1.ready" 20
        wait_for_file "$FLOW_PIDFILE.0" 20
        wait_for_file "$FLOW_PIDFILE.1" 20
        left="$(descendant_pids "$FLOW_PIDFILE" 0 1) $(cat "$FLOW_PIDFILE.0" "$FLOW_PIDFILE.1")"
        assert_alive $left
        [ $mode != tracking ] || sleep 1.2  # the clean-up process hears of them (tracking)
        agent=$(pgrep -P $pid)
        [ -n "$agent" ] || fail "no agent under dslaunch ($pid)"
        # a frozen agent and a launcher that cannot act on it (as for a remote node,
        # whose launcher can only say it is lost): only the clean-up process is left.
        # The launcher is stopped, not killed: its death would orphan the agent`s
        # process group, and the kernel resumes a stopped orphaned group (SIGHUP, SIGCONT)
        kill -STOP $pid
        kill -STOP $agent
        wait_gone 30 $left
        assert_eq "$(process_state $agent)" T "the agent, still stopped"
        kill -CONT $agent  # it finds the launcher silent, stops what is left, and exits
        kill -CONT $pid
        wait_exit $pid 30
        wait_gone 10 $agent
        wait_no_procs "$FLOW_TAG" 10
        [ $mode = tracking ] || wait_no_cgroups "$FLOW_PIDFILE.0.ready" 10
    '
}

for mode in auto tracking; do
    frozen_agent_cases $mode
done

# Ranks that take a while to die: the last thread of each frees 2 GiB after the process has
# left cgroup.procs, and until then the kernel refuses to remove the cgroup (EBUSY).
expect_success "the node agent SIGKILLed while a multi-threaded rank frees its memory: the job's cgroups are still removed" '
    need_mode auto
    export DSLAUNCH_CONTAIN=auto FLOW_TAG=bigkill.$$ FLOW_PIDFILE=$T_TMP/bigkill
    "$DSL" --term-timeout 1 --include localhost:0,1 "$W" descend hold 2048 600 >out 2>err &
    pid=$!
    # whatever happens, remove what the job left (empty by then), by its own run id only
    trap "kill -KILL $pid 2>/dev/null || true; id=\$(head -n 1 $FLOW_PIDFILE.0.ready 2>/dev/null);
          [ -z \"\$id\" ] || find /sys/fs/cgroup -maxdepth 8 -depth -type d -path \"*/dslaunch-\$id*\" -exec rmdir {} + 2>/dev/null || true" EXIT
    wait_for_file "$FLOW_PIDFILE.0.ready" 20
    wait_for_file "$FLOW_PIDFILE.0" 60
    wait_for_file "$FLOW_PIDFILE.1" 60
    agent=$(pgrep -P $pid)
    [ -n "$agent" ] || fail "no agent under dslaunch ($pid)"
    kill -KILL $agent
    set +e; wait $pid; rc=$?; set -e
    assert_eq "$rc" 204 "exit code (node agent died)"
    wait_no_procs "$FLOW_TAG" 10
    wait_no_cgroups "$FLOW_PIDFILE.0.ready" 15
'

expect_success "dslaunch stopped (SIGSTOP) past --keepalive, then resumed: exit 200, saying the agents lost it, not a user's stop" '
    export FLOW_TAG=lpause.$$ FLOW_PIDFILE=$T_TMP/lpause
    "$DSL" --keepalive 2 --term-timeout 1 --include localhost:0,1 "$W" pidfile 600 >out 2>err &
    pid=$!
    trap "kill -CONT $pid 2>/dev/null || true; kill -KILL $pid 2>/dev/null || true" EXIT
    wait_for_file "$FLOW_PIDFILE.0" 20
    wait_for_file "$FLOW_PIDFILE.1" 20
    ranks=$(cat "$FLOW_PIDFILE.0" "$FLOW_PIDFILE.1")
    kill -STOP $pid
    wait_gone 30 $ranks  # the agent, hearing nothing for the keepalive, stopped them
    kill -CONT $pid
    wait_exit $pid 30
    assert_eq "$rc" 200 "exit code (the launcher was lost)"
    assert_grep "dslaunch itself did not run for [0-9.]* s (stopped by SIGSTOP or ^Z, or suspended), past --keepalive 2 s: the node agents lost it and stopped the ranks" err
    assert_not_grep "sent by dslaunch.s stop" err
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "--log-dir on a full file system: the write error is reported at once, the console keeps every line, exit 207" '
    [ "$(id -u)" = 0 ] && command -v unshare >/dev/null || skip "needs root and unshare for a private mount namespace"
    unshare --mount true 2>/dev/null || skip "cannot make a mount namespace here"
    export FLOW_TAG=logfull.$$
    mkdir -m 700 full
    # a 64 KiB tmpfs as the log directory, in a mount namespace of the job alone; the
    # two ranks print 4000 lines (about 330 KB) each
    mnt='"'"'mount -t tmpfs -o size=64k,mode=700 tmpfs "$1" || exit 99; shift; exec "$@"'"'"'
    run_capture rc out err unshare --mount --propagation private sh -c "$mnt" sh "$T_TMP/full" "$DSL" --log-dir "$T_TMP/full" --include localhost:0,1 "$W" print 4000 0.5
    assert_eq "$rc" 207 "exit code (the ranks succeeded, the logs are incomplete)"
    assert_eq "$(grep -c "^\[rank 0\] out 0 " out)" 4000 "rank 0 lines on the console"
    assert_eq "$(grep -c "^\[rank 1\] out 1 " out)" 4000 "rank 1 lines on the console"
    assert_grep "^dslaunch: error: --log-dir: cannot write .*/full/rank[01]\.log. (rank [01]): No space left on device; the log misses its lines from here on (the console still has them)" err
    assert_grep "^dslaunch: error: every rank exited 0, but the --log-dir files are incomplete: rank [01] lost [0-9]* bytes" err
    wait_no_procs "$FLOW_TAG" 10
'

expect_success "a read-only /sys/fs/cgroup (as in a container): process tracking, and no descendant survives" '
    [ "$(id -u)" = 0 ] && command -v unshare >/dev/null || skip "needs root and unshare for a private mount namespace"
    unshare --mount true 2>/dev/null || skip "cannot make a mount namespace here"
    export FLOW_TAG=rocg.$$ FLOW_PIDFILE=$T_TMP/rocg
    # every cgroup mount remounted read-only in a mount namespace of the job alone
    ro='"'"'for m in $(awk "/ - cgroup2? /{print \$5}" /proc/self/mountinfo); do mount -o remount,bind,ro "$m" || exit 99; done; exec "$@"'"'"'
    unshare --mount --propagation private sh -c "$ro" sh "$DSL" --check --include localhost:0 >out 2>err
    assert_grep "^node 0 ranks contained by: process tracking$" err
    run_capture rc out err unshare --mount --propagation private sh -c "$ro" sh "$DSL" --term-timeout 1 --include localhost:0,1 "$W" descend exit 0
    assert_eq "$rc" 0 "exit code"
    left=$(descendant_pids "$FLOW_PIDFILE" 0 1)
    wait_gone 0 $left
    wait_no_procs "$FLOW_TAG" 5
'

expect_success "an unprivileged user (no cgroup may be made): process tracking, and no descendant survives" '
    [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null || skip "needs root and setpriv to become nobody"
    chmod a+x "$T_TMP" && mkdir -m 777 nobody
    cd nobody  # a working directory nobody may use
    as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$T_TMP/nobody" "$@"; }
    as_nobody "$DSL" --check --include localhost:0 >out 2>err || { cat err; skip "nobody cannot run $DSL here (build directory not readable?)"; }
    assert_grep "^node 0 ranks contained by: process tracking$" err
    export FLOW_TAG=nobody.$$ FLOW_PIDFILE=$T_TMP/nobody/p
    run_capture rc out err as_nobody "$DSL" --term-timeout 1 --include localhost:0,1 "$W" descend exit 0
    assert_eq "$rc" 0 "exit code"
    left=$(descendant_pids "$FLOW_PIDFILE" 0 1)
    wait_gone 0 $left
    assert_not_grep "clean-up process" err
    wait_no_procs "$FLOW_TAG" 5
'

# ---- why a rank died ----

expect_success "a rank over --rank-memory-limit is killed by the OOM killer, and the summary says so" '
    line=$(contain_line auto)
    case $line in *"memory limit and OOM kills per rank"*) ;; *) skip "no memory cgroup for ranks here ($line)" ;; esac
    export FLOW_TAG=oom.$$ FLOW_RUNIDS=$T_TMP/oom.ids
    run_capture rc out err "$DSL" --rank-memory-limit 50M --include localhost:0,1 "$W" only 1 oom 200
    assert_eq "$rc" 137 "exit code"
    assert_grep "rank 1 (host localhost, pid [0-9]*) was killed by the OOM killer after [0-9.]* s (SIGKILL; memory limit 50.0 MiB of its cgroup, peak [0-9.]* [KM]iB; node had [0-9.]* [KMGT]iB available)" err
    assert_grep "stopped 1 other rank" err
    wait_no_procs "$FLOW_TAG" 5
    assert_job_clean 5 $(run_ids "$FLOW_RUNIDS")
'

expect_success "--rank-memory-limit on a node without a memory cgroup is refused before anything starts (202)" '
    export DSLAUNCH_CONTAIN=tracking FLOW_PIDFILE=$T_TMP/nolimit
    run_capture rc out err "$DSL" --rank-memory-limit 1G --include localhost:0 "$W" pidfile 600
    assert_eq "$rc" 202 "exit code"
    assert_grep "cannot limit a rank.s memory (--rank-memory-limit): it has no memory cgroup for ranks" err
    [ ! -e "$FLOW_PIDFILE.0" ] || fail "a rank was started"
'

# test_memcg NAME LIMIT: a memory cgroup below this shell's own (v1 memory, or v2 with
# memory delegated) holding at most LIMIT bytes; prints its directory, or fails
test_memcg() {
    local path mnt dir
    path=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3 }' /proc/self/cgroup)
    mnt=$(awk '/ - cgroup / && $NF ~ /(^|,)memory(,|$)/ { print $5; exit }' /proc/self/mountinfo)
    if [ -n "$path" ] && [ -n "$mnt" ]; then
        dir=$mnt${path%/}/$1
        mkdir "$dir" && echo "$2" > "$dir/memory.limit_in_bytes" && echo "$dir" && return 0
        rmdir "$dir" 2>/dev/null
        return 1
    fi
    path=$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup)
    mnt=$(awk '/ - cgroup2 / { print $5; exit }' /proc/self/mountinfo)
    [ -n "$mnt" ] && grep -qw memory "$mnt${path%/}/cgroup.subtree_control" 2>/dev/null || return 1
    dir=$mnt${path%/}/$1
    mkdir "$dir" && echo "$2" > "$dir/memory.max" && echo "$dir" && return 0
    rmdir "$dir" 2>/dev/null
    return 1
}

expect_success "without memory cgroups for ranks, the kernel log names the OOM kill" '
    [ -r /dev/kmsg ] || skip "the kernel log (/dev/kmsg) is not readable here"
    cg=$(test_memcg dslflow-oom.$$ 150M) || skip "no memory cgroup can be made for the test here"
    # the whole job (dslaunch, agent, rank) in a 150 MiB cgroup, the ranks under process
    # tracking: the OOM killer ends the rank, and only the kernel log can say so
    trap "for i in \$(seq 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done" EXIT
    export DSLAUNCH_CONTAIN=tracking FLOW_TAG=kmsg.$$
    run_capture rc out err sh -c "echo 0 > "$cg/cgroup.procs" && exec "$DSL" --include localhost:0 "$W" oom 400"
    assert_eq "$rc" 137 "exit code"
    assert_grep "rank 0 (host localhost, pid [0-9]*) was killed by the OOM killer after [0-9.]* s (SIGKILL, named in the kernel log; node had [0-9.]* [KMGT]iB available)" err
    wait_no_procs "$FLOW_TAG" 5
'

expect_success "a no-ssh node that finds no coordinator names it and exits 200" '
    # node rank 1 dials node 0 at master_port + 1 = 2 on loopback, where nothing listens
    export DSLAUNCH_JOB_SECRET=0123456789abcdef0123456789abcdef
    run_capture rc out err "$DSL" --node_rank 1 --nnodes 2 --master_addr 127.0.0.1 \
        --master_port 1 --join_timeout 1 true
    assert_eq "$rc" 200 "exit code"
    assert_grep "node rank 1: cannot reach the coordinator (node 0) at 127.0.0.1:2 within 1 s: no address answered (127.0.0.1:2: " err
    assert_not_grep "launcher" err
'

done_testing
