#!/usr/bin/env bash
# The Slurm test cluster's own test (run under with_slurm.sh 2): srun places ranks as
# Slurm documents, and `down` leaves nothing behind, also with a job step running and
# after a failed `up`.
# usage: with_slurm.sh 2 selftest.sh SOURCE_DIR
set -u
SRC=$1
. "$SRC/tests/e2e/flow/lib.sh"
cd "$T_TMP" || exit 1 # every file a test writes is in its own temporary directory
SC=$DSL_SLURM_SH

# alive PID: a live process (a zombie waiting for a slow init counts as gone)
alive() { [[ $(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) =~ ^[RSDT]$ ]]; }

expect_success "srun -N2 -n4: SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID and host per task" '
    srun -N2 -n4 sh -c "echo \$SLURM_PROCID \$SLURM_LOCALID \$SLURM_NODEID \$(hostname) \$SLURM_STEP_NUM_TASKS \$SLURM_STEP_NODELIST" |
        sort -n >out
    printf "%s\n" "0 0 0 n1 4 n[1-2]" "1 1 0 n1 4 n[1-2]" "2 0 1 n2 4 n[1-2]" "3 1 1 n2 4 n[1-2]" >want
    diff want out
'

expect_success "srun -N2 -n3: uneven tasks per node (2,1)" '
    srun -N2 -n3 sh -c "echo \$SLURM_PROCID \$SLURM_LOCALID \$SLURM_NODEID \$(hostname) \$SLURM_STEP_TASKS_PER_NODE" |
        sort -n >out
    printf "%s\n" "0 0 0 n1 2,1" "1 1 0 n1 2,1" "2 0 1 n2 2,1" >want
    diff want out
'

expect_success "a node resolves every node name and reaches the others over its own network" '
    "$SC" exec "$DSL_SLURM_DIR" n2 getent hosts n1 >out
    assert_grep "^10\.213\.[0-9]*\.2 *n1$" out
    "$SC" exec "$DSL_SLURM_DIR" n2 hostname >out
    assert_eq "$(cat out)" n2
'

expect_success "down with a job step running: no namespace, no daemon, no step, no file left" '
    d=$(mktemp -d /tmp/dsl-slurm-self.XXXXXX)
    "$SC" up 1 "$d"
    . "$d/slurm.env"
    pids="$(cat "$d/ctl/slurmctld.launch.pid" "$d/n1/slurmd.launch.pid" "$d/ctl/munged.pid" "$d/n1/run/munged.pid")"
    SLURM_CONF=$d/slurm.conf srun -N1 -n1 sh -c "echo \$\$ >$T_TMP/step.pid; exec sleep 600" >/dev/null 2>&1 &
    srun_pid=$!
    wait_for_file "$T_TMP/step.pid" 30
    step=$(cat "$T_TMP/step.pid")
    # the step runs inside n1: its pid is n1 namespace s (same pid namespace)
    ip netns pids "$NS_1" | grep -qx "$step" || fail "step $step not in $NS_1"
    "$SC" down "$d"
    kill -KILL $srun_pid; wait $srun_pid || true  # srun would retry the gone controller
    for p in $pids $step; do ! alive "$p" || fail "process $p survived down"; done
    ! ip netns list | grep -q "^$PREFIX" || fail "namespace of $PREFIX left: $(ip netns list | grep "^$PREFIX")"
    ! ip link show "${PREFIX}h0" >/dev/null 2>&1 || fail "link ${PREFIX}h0 left"
    [ ! -e "$d" ] || fail "files left: $(find "$d")"
    "$SC" down "$d"   # idempotent
'

expect_success "up below a directory others cannot search is refused before anything is made" '
    mkdir -m 0700 priv
    run_capture rc out err "$SC" up 1 "$PWD/priv/c"
    assert_eq "$rc" 1
    assert_grep "searchable by all" err
    assert_not_grep "tearing down" err
'

expect_success "a failed up (a slurmd that cannot start) tears down what it made" '
    mkdir -p fake
    printf "#!/bin/sh\necho fake slurmd refuses >&2\nexit 1\n" >fake/slurmd
    chmod +x fake/slurmd
    d=$(mktemp -d /tmp/dsl-slurm-self.XXXXXX)
    run_capture rc out err env PATH="$PWD/fake:$PATH" "$SC" up 1 "$d"
    assert_eq "$rc" 1
    assert_grep "slurmd of n1 exited" err
    assert_grep "fake slurmd refuses" err
    prefix=$(sed -n "s/.*tearing down \(dsls[0-9]*\)$/\1/p" err)
    [ -n "$prefix" ] || fail "no prefix in the message"
    ! ip netns list | grep -q "^$prefix" || fail "namespace of $prefix left"
    ! ip link show "${prefix}h0" >/dev/null 2>&1 || fail "link ${prefix}h0 left"
    [ ! -e "$d" ] || fail "files left: $(find "$d")"
'

expect_success "a failed up whose stderr reader went away (up | head -1) still tears down" '
    d=$(mktemp -d /tmp/dsl-slurm-self.XXXXXX)
    mkdir -p fake
    printf "#!/bin/sh\necho fake slurmd refuses >&2\nexit 1\n" >fake/slurmd
    chmod +x fake/slurmd
    # env execs the script, so its pid names the namespaces (dsls<pid>)
    env PATH="$PWD/fake:$PATH" "$SC" up 1 "$d" 2> >(head -n 1 >first) >/dev/null &
    pid=$!
    wait $pid || true
    assert_grep "slurmd of n1 exited" first
    ! ip netns list | grep -q "^dsls$pid" || fail "namespace of dsls$pid left"
    ! ip link show "dsls${pid}h0" >/dev/null 2>&1 || fail "link dsls${pid}h0 left"
    [ ! -e "$d" ] || fail "files left: $(find "$d")"
'

expect_success "with_slurm.sh stops a command that runs too long and still tears down" '
    run_capture rc out err env DSL_SLURM_TIMEOUT=3 "$(dirname "$SC")/with_slurm.sh" 1 \
        sh -c ". \"\$DSL_SLURM_DIR/slurm.env\"; echo \$PREFIX \$SLURM_DIR >$PWD/seen; srun -N1 sleep 600"
    assert_eq "$rc" 124
    assert_grep "ran past 3 s and was stopped" err
    read -r prefix d <seen
    ! ip netns list | grep -q "^$prefix" || fail "namespace of $prefix left"
    [ ! -e "$d" ] || fail "files left: $(find "$d")"
'

done_testing
