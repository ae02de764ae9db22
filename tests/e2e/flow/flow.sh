#!/usr/bin/env bash
# Flow tests of the real dslaunch CLI on the local transport: the env contract, arguments,
# usage errors, hostfiles, output and --log-dir, ports, fake nodes, --dry-run and --check.
# Stops and signals are in signals.sh, containment and why a rank died in contain.sh.
# usage: flow.sh DSLAUNCH WORKER SOURCE_DIR
set -u
DSL=$1
W=$2
SRC=$3
. "$SRC/tests/e2e/flow/local.sh"

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
