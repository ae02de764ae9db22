# A tiny TAP harness for the flow tests: ok/not ok lines on stdout, each failing test's
# log on stdout as comments; the script exits non-zero if any test failed.
T_N=0
T_FAILED=0
T_TMP=$(mktemp -d "${TMPDIR:-/tmp}/dslflow.XXXXXX")
trap 'rm -rf "$T_TMP"' EXIT

# expect_success "name" 'commands'  -- runs commands in a subshell with set -e semantics
# FLOW_ONLY=TEXT runs only the tests whose name contains TEXT (the rest are skipped).
expect_success() {
    T_N=$((T_N + 1))
    local out="$T_TMP/t$T_N.log" t0=$SECONDS rc
    case $1 in
        *"${FLOW_ONLY:-}"*) ;;
        *) echo "ok $T_N - $1 # SKIP not selected by FLOW_ONLY"; return 0 ;;
    esac
    # Not "if (...)": bash ignores set -e inside a command whose status is tested,
    # which would let every assertion but the last one fail silently.
    (set -e; eval "$2") >"$out" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        echo "ok $T_N - $1 # $((SECONDS - t0)) s"
    elif [ $rc -eq 77 ]; then
        echo "ok $T_N - $1 # SKIP $(sed -n 's/^SKIP: //p' "$out" | tail -n 1)"
    else
        echo "not ok $T_N - $1 # $((SECONDS - t0)) s"
        sed 's/^/#   /' "$out" | tail -40
        T_FAILED=$((T_FAILED + 1))
    fi
}

# skip REASON: end the running test as skipped (TAP "ok N - name # SKIP REASON"); for
# what this machine cannot do (no cgroups, no kernel log), never for a failure
skip() {
    echo "SKIP: $*"
    exit 77
}

# run_capture CODEVAR OUTFILE ERRFILE cmd...: run cmd, store exit code
run_capture() {
    local __var=$1 __out=$2 __err=$3
    shift 3
    set +e
    "$@" >"$__out" 2>"$__err"
    eval "$__var=\$?"
    set -e
}

# fail MESSAGE: print and return false
fail() {
    echo "FAIL: $*" >&2
    return 1
}

# assert_eq ACTUAL EXPECTED [what]
assert_eq() {
    [ "$1" = "$2" ] || fail "${3:-value}: got '$1', expected '$2'"
}

# assert_grep PATTERN FILE
assert_grep() {
    grep -q -- "$1" "$2" || { echo "--- $2:" >&2; cat "$2" >&2; fail "'$1' not found in $2"; }
}

assert_not_grep() {
    ! grep -q -- "$1" "$2" || { echo "--- $2:" >&2; cat "$2" >&2; fail "'$1' unexpectedly found in $2"; }
}

# procs_with_tag TAG: pids of processes whose environment holds FLOW_TAG=TAG
procs_with_tag() {
    local p
    for p in /proc/[0-9]*; do
        if { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qx "FLOW_TAG=$1"; then
            # zombies are already dead; only live processes count
            if [ "$(awk '{print $3}' "$p/stat" 2>/dev/null)" != "Z" ]; then
                echo "${p#/proc/}"
            fi
        fi
    done
}

# wait_no_procs TAG BOUND: succeed once no process carries the tag; fail after BOUND s.
# A liveness bound, not a speed check: teardown normally finishes in milliseconds.
wait_no_procs() {
    local i=0 left
    while [ $i -lt $(($2 * 10)) ]; do
        left=$(procs_with_tag "$1")
        [ -z "$left" ] && return 0
        sleep 0.1
        i=$((i + 1))
    done
    echo "processes left behind:" >&2
    for p in $left; do ps -o pid,pgid,stat,args -p "$p" >&2 || true; done
    for p in $left; do kill -9 "$p" 2>/dev/null || true; done
    return 1
}

# wait_exit PID BOUND: wait for a child of this shell (dslaunch) to exit, at most BOUND
# s (a liveness bound); its exit code in $rc, or fail with it still running
wait_exit() {
    local i=0
    while kill -0 "$1" 2>/dev/null && [ $i -lt $(($2 * 10)) ]; do
        [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ] || break
        sleep 0.1
        i=$((i + 1))
    done
    [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ] || ! kill -0 "$1" 2>/dev/null ||
        fail "dslaunch still running $2 s later" || return 1
    set +e; wait "$1"; rc=$?; set -e
}

# process_state PID: its state letter (T: stopped), or nothing when it is gone
process_state() {
    awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true
}

# pid_alive PID: the process exists and is not a zombie
pid_alive() {
    [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != "Z" ]
}

# assert_alive PID...: each process is running
assert_alive() {
    local p
    for p in "$@"; do pid_alive "$p" || fail "process $p is not running"; done
}

# wait_gone BOUND PID...: succeed once none of the processes runs; fail after BOUND s
# (a liveness bound, as in wait_no_procs); BOUND 0 looks once
wait_gone() {
    local i=0 p left
    local bound=$1
    shift
    while :; do
        left=""
        for p in "$@"; do pid_alive "$p" && left="$left $p"; done
        [ -z "$left" ] && return 0
        [ $i -ge $((bound * 10)) ] && break
        sleep 0.1
        i=$((i + 1))
    done
    for p in $left; do ps -o pid,pgid,stat,args -p "$p" >&2 || true; done
    fail "processes still running:$left"
}

# written_pids PIDFILE "SUFFIX..." WHAT RANK...: the pids that processes of the worker
# wrote to PIDFILE.RANK.SUFFIX themselves, one per line. Fails, saying "rank RANK WHAT"
# (%s: the suffix), when one is missing, so a test of their clean-up cannot pass
# without something to clean up.
written_pids() {
    local base=$1 sufs=$2 what=$3 r s p
    shift 3
    for r in "$@"; do
        for s in $sufs; do
            p=$(head -n 1 "$base.$r.$s" 2>/dev/null)
            case $p in
                '' | *[!0-9]*) fail "rank $r ${what//%s/$s} ($base.$r.$s: '$p')"; return 1 ;;
            esac
            echo "$p"
        done
    done
}

# grandchild_pids PIDFILE RANK...: the pids of the worker's grandchildren ("grandchild"
# mode, PIDFILE.RANK.gc)
grandchild_pids() {
    local base=$1
    shift
    written_pids "$base" gc "started no grandchild" "$@"
}

# descendant_pids PIDFILE RANK...: the pids of the processes the worker's "descend"
# left behind (PIDFILE.RANK.sid and .dmn)
descendant_pids() {
    local base=$1
    shift
    written_pids "$base" "sid dmn" "left no %s process" "$@"
}

# wait_no_cgroups READYFILE BOUND: the job's cgroups (dslaunch-<run id>, the run id as
# the worker's "descend" wrote it into READYFILE) are gone from every hierarchy; fail
# after BOUND s (a liveness bound)
wait_no_cgroups() {
    local id i=0 left
    id=$(head -n 1 "$1" 2>/dev/null)
    [ -n "$id" ] || fail "no run id in $1" || return 1
    while :; do
        left=$(find /sys/fs/cgroup -maxdepth 8 -type d -name "dslaunch-$id" 2>/dev/null)
        [ -z "$left" ] && return 0
        [ $i -ge $(($2 * 10)) ] && break
        sleep 0.1
        i=$((i + 1))
    done
    fail "cgroups left behind: $left"
}

. "$(dirname "${BASH_SOURCE[0]}")/census.sh"

# assert_job_clean BOUND ID...: the census (census.sh) finds nothing of the jobs with
# these run ids within BOUND s (a liveness bound): no process, cgroup or progress file
assert_job_clean() {
    wait_job_clean "$@" || fail "the job left processes, cgroups or files behind"
}

# run_ids FILE: the distinct run ids the flow worker appended to FILE ($FLOW_RUNIDS)
run_ids() {
    sort -u "$1" 2>/dev/null | grep .
}

# wait_for_file FILE BOUND
wait_for_file() {
    local i=0
    while [ $i -lt $(($2 * 10)) ]; do
        [ -s "$1" ] && return 0
        sleep 0.1
        i=$((i + 1))
    done
    fail "file $1 did not appear"
}

# wait_ranks N BOUND: until ranks 0..N-1 wrote their pid files ($FLOW_PIDFILE.RANK), each
# within BOUND seconds
wait_ranks() {
    local r
    for r in $(seq 0 $(($1 - 1))); do wait_for_file "$FLOW_PIDFILE.$r" "$2"; done
}

# kill_wait SIG PID: send SIG to PID, a child of this shell, and wait for it; its exit
# status in rc
kill_wait() {
    kill -"$1" "$2"
    set +e; wait "$2"; rc=$?; set -e
}

# wait_metrics FILE BOUND: until dstrain's metrics FILE holds a training step (BOUND
# seconds at most)
wait_metrics() {
    local i=0
    until grep -q '"type":"step"' "$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -le $(($2 * 10)) ] || fail "no training step after $2 s"
        sleep 0.1
    done
}

done_testing() {
    echo "1..$T_N"
    echo "flow: $((T_N - T_FAILED)) passed, $T_FAILED failed"
    [ $T_FAILED -eq 0 ]
}
