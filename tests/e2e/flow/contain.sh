#!/usr/bin/env bash
# Flow tests of containment on the local transport: nothing a rank starts survives the
# job (every containment mode), the supervisor's own parts going quiet, and why a rank
# died (the OOM killer, in the cgroup or in the kernel log).
# usage: contain.sh DSLAUNCH WORKER SOURCE_DIR
set -u
DSL=$1
W=$2
SRC=$3
. "$SRC/tests/e2e/flow/local.sh"

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

# in_mode MODE NAME: the case runs its ranks under containment MODE (skipped where MODE
# cannot contain them here), tagged and with pid files named NAME.MODE
in_mode() {
    need_mode "$1"
    export DSLAUNCH_CONTAIN=$1 FLOW_TAG=$2.$1.$$ FLOW_PIDFILE=$T_TMP/$2.$1
}

# start_ready ARGS...: dslaunch ARGS... in the background (stdout in out, stderr in err,
# its pid in pid), once both ranks' descendants are ready; their pids in left, alive
start_ready() {
    "$DSL" "$@" >out 2>err &
    pid=$!
    wait_for_file "$FLOW_PIDFILE.0.ready" 20
    wait_for_file "$FLOW_PIDFILE.1.ready" 20
    left=$(descendant_pids "$FLOW_PIDFILE" 0 1)
    assert_alive $left
}

# job_gone BOUND: no process of the job is left and, unless under process tracking, its
# cgroups are removed, each within BOUND seconds
job_gone() {
    wait_no_procs "$FLOW_TAG" "$1"
    [ "$DSLAUNCH_CONTAIN" = tracking ] || wait_no_cgroups "$FLOW_PIDFILE.0.ready" "$1"
}

# swept_by_agent: when dslaunch returned nothing of $left ran any more, the agent did it
# (not its clean-up process), and the job is gone
swept_by_agent() {
    wait_gone 0 $left  # when dslaunch returns, nothing of the job runs
    assert_not_grep "clean-up process" err  # ... and the agent did it, not its keeper
    job_gone 5
}

descendant_cases() {
    local mode=$1
    expect_success "[$mode] a clean exit (0) leaves no setsid child or daemon behind" '
        in_mode $mode dclean
        run_capture rc out err "$DSL" --term-timeout 1 --include localhost:0,1 "$W" descend exit 0
        assert_eq "$rc" 0 "exit code"
        left=$(descendant_pids "$FLOW_PIDFILE" 0 1)
        swept_by_agent
    '
    expect_success "[$mode] a failing rank (exit 1): no descendant of any rank survives" '
        in_mode $mode dfail
        run_capture rc out err "$DSL" --term-timeout 1 --include localhost:0,1 "$W" descend only 1 await 0 exit 1
        assert_eq "$rc" 1 "exit code"
        assert_grep "rank 1 (host localhost, pid [0-9]*) exited with code 1" err
        left=$(descendant_pids "$FLOW_PIDFILE" 0 1)
        swept_by_agent
    '
    expect_success "[$mode] Ctrl-C (SIGINT to dslaunch): no descendant survives" '
        in_mode $mode dint
        start_ready --term-timeout 1 --include localhost:0,1 "$W" descend sleep 600
        kill_wait INT $pid
        assert_eq "$rc" 130 "exit code"
        swept_by_agent
    '
    expect_success "[$mode] the node agent SIGKILLed: its clean-up process kills every descendant" '
        in_mode $mode dkill
        start_ready --term-timeout 1 --include localhost:0,1 "$W" descend sleep 600
        # process tracking tells the clean-up process what it found every 0.5 s (its
        # documented gap); cgroups have no gap, so only that mode waits for a report
        [ $mode != tracking ] || sleep 1.2
        agent=$(pgrep -P $pid)  # the local transport forks the agent as a child of dslaunch
        [ -n "$agent" ] || fail "no agent under dslaunch ($pid)"
        kill -KILL $agent
        set +e; wait $pid; rc=$?; set -e
        assert_eq "$rc" 204 "exit code (node agent died)"
        wait_gone 10 $left $(cat "$FLOW_PIDFILE.0" "$FLOW_PIDFILE.1" 2>/dev/null)
        job_gone 10
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

# start_to_freeze: dslaunch (--keepalive 3) with two ranks that leave descendants, in the
# background: its pid in pid, its agent's in agent, the ranks and descendants in left,
# all alive. When the case ends, however, what it stopped is resumed and dslaunch killed.
start_to_freeze() {
    "$DSL" --keepalive 3 --term-timeout 1 --include localhost:0,1 "$W" descend pidfile 600 >out 2>err &
    pid=$!
    agent=""
    trap "[ -z \"\$agent\" ] || kill -CONT \$agent 2>/dev/null || true; kill -CONT $pid 2>/dev/null || true; kill -KILL $pid 2>/dev/null || true" EXIT
    wait_for_file "$FLOW_PIDFILE.0.ready" 20
    wait_for_file "$FLOW_PIDFILE.1.ready" 20
    wait_ranks 2 20
    left="$(descendant_pids "$FLOW_PIDFILE" 0 1) $(cat "$FLOW_PIDFILE.0" "$FLOW_PIDFILE.1")"
    assert_alive $left
    # process tracking tells the clean-up process what it found every 0.5 s
    [ "$DSLAUNCH_CONTAIN" != tracking ] || sleep 1.2
    agent=$(pgrep -P $pid)  # the local transport forks the agent as a child of dslaunch
    [ -n "$agent" ] || fail "no agent under dslaunch ($pid)"
}

frozen_agent_cases() {
    local mode=$1
    expect_success "[$mode] a stopped local node agent is a lost node within --keepalive, and its ranks are stopped" '
        in_mode $mode agstop
        start_to_freeze
        kill -STOP $agent
        wait_exit $pid 40
        assert_eq "$rc" 200 "exit code (a lost node)"
        assert_grep "node 0 (localhost) lost: no word from .localhost. for [0-9.]* s" err
        wait_gone 10 $left
        job_gone 10
    '
    expect_success "[$mode] a frozen node agent whose launcher is gone: its clean-up process ends the ranks, and the agent sweeps once resumed" '
        in_mode $mode agfrz
        start_to_freeze
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
        job_gone 10
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

# need_mount_ns: skip the test where it cannot have a mount namespace of its own
need_mount_ns() {
    [ "$(id -u)" = 0 ] && command -v unshare >/dev/null || skip "needs root and unshare for a private mount namespace"
    unshare --mount true 2>/dev/null || skip "cannot make a mount namespace here"
}

expect_success "--log-dir on a full file system: the write error is reported at once, the console keeps every line, exit 207" '
    need_mount_ns
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
    need_mount_ns
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

done_testing
