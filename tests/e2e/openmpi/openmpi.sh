#!/usr/bin/env bash
# Cluster tier: `dslaunch --launcher openmpi` against sshd in network namespaces (run
# under with_cluster.sh, which brings a 2-node cluster with 2 slots each up and down).
# One mpirun starts one agent per node over OpenSSH; the agents connect back. Checked:
# the env contract of the 2x2 job, arguments, a failing rank's exit code, a node whose
# network goes down mid-run, an unreachable node, a wrong key, an unknown host key, a
# missing mpirun, Ctrl-C and SIGKILL of the launcher, and that nothing is left behind
# afterwards, neither in the namespaces nor on the launching host (mpirun, its ssh
# clients and orteds reaped).
# usage: with_cluster.sh 2 openmpi.sh DSLAUNCH WORKER SOURCE_DIR
set -u
DSL=$1
W=$2
SRC=$3
. "$SRC/tests/e2e/flow/lib.sh"
. "$SRC/tests/e2e/multinode/nslib.sh"
SSH=(--launcher openmpi "${SSH[@]}")
# mpirun's session directories in a folder of this test's own: every mpirun of every
# suite otherwise shares TMPDIR/ompi.HOST.UID, which the last one out removes, so an
# mpirun of another suite starting at that moment failed ("orte_session_dir failed").
# dslaunch clears a killed mpirun's directory under TMPDIR too, and the check below
# looks there.
export TMPDIR="$T_TMP"

command -v mpirun >/dev/null || { echo "not ok 1 - mpirun is not installed (apt-get install openmpi-bin)"; exit 1; }

# Processes on any node or the launching host whose command line names this cluster's
# ssh_config: dslaunch itself, mpirun, its ssh clients and the orted daemons it starts.
job_procs() {
    pgrep -f -- "$D/ssh_config" | tr "\n" " " || true
}

# mpirun's session directories (Open MPI 4: ompi.HOST.UID/pid.PID; 5: prte.HOST.UID/
# dvm.PID) made since this test started whose mpirun is gone: what a killed mpirun
# leaves, and dslaunch removes (other tests' running mpiruns are alive, so not named)
touch "$T_TMP/started"
stale_session_dirs() {
    local d
    for d in $(find "${TMPDIR:-/tmp}" -mindepth 2 -maxdepth 2 -newer "$T_TMP/started" \
        \( -path "*/ompi.*/pid.*" -o -path "*/prte.*/dvm.*" \) 2>/dev/null); do
        kill -0 "${d##*.}" 2>/dev/null || echo "$d"
    done
}

# Nothing of the job left anywhere: namespaces and the launching host (mpirun, ssh,
# mpirun's session directory).
wait_all_clean() {  # liveness bound, not a speed check
    local i=0 left
    wait_ns_clean "$1"
    while [ $i -lt $(($1 * 10)) ]; do
        left=$(job_procs)
        if [ -z "$left" ]; then
            left=$(stale_session_dirs)
            [ -z "$left" ] && return 0
            fail "mpirun's session directories left behind: $left"
        fi
        sleep 0.1; i=$((i + 1))
    done
    for p in $left; do ps -o pid,stat,args -p "$p" >&2 || true; done
    fail "processes of the job left behind:$left"
}

expect_success "2 nodes x 2 slots through mpirun: env, MASTER_ADDR, interfaces per node" '
    run_capture rc out err "$DSL" "${SSH[@]}" "$W" env
    assert_eq "$rc" 0
    assert_world_2x2 out
    wait_all_clean 10
'

expect_success "ranks do not inherit the agents' MPI job (OMPI_*, PMIX_*); exported OMPI_ vars arrive" '
    run_capture rc out err "$DSL" "${SSH[@]}" --export OMPI_MCA_btl=self /usr/bin/env
    assert_eq "$rc" 0
    [ $(grep -c "^\[node[12]:rank [0-3]\] RANK=" out) = 4 ]
    assert_not_grep "\] OMPI_COMM_WORLD" out
    assert_not_grep "\] PMIX_" out
    assert_not_grep "\] OMPI_MCA_orte" out
    [ $(grep -c "\] OMPI_MCA_btl=self$" out) = 4 ] || fail "an exported OMPI_ variable was lost"
'

expect_success "arguments arrive intact through mpirun (they travel on the socket)" '
    run_capture rc out err "$DSL" "${SSH[@]}" "$W" args "I am 6'"'"' tall" "\$(touch $T_TMP/pwned)" ""
    assert_eq "$rc" 0
    [ ! -e "$T_TMP/pwned" ] || fail "a shell interpreted user data"
    for a in "I am 6'"'"' tall" "\$(touch $T_TMP/pwned)" ""; do
        hex=$(printf %s "$a" | od -An -tx1 | tr -d " \n")
        [ $(grep -c "^\[node2:rank [23]\] arg $hex$" out) = 2 ] || fail "argument [$a] not intact on node2"
    done
'

expect_success "a rank on node2 exits 7: exit 7, summary names node2, nothing left" '
    run_capture rc out err "$DSL" --term-timeout 3 "${SSH[@]}" "$W" only 3 exit 7 0.5
    assert_eq "$rc" 7
    assert_grep "rank 3 (host node2, pid [0-9]*) exited with code 7" err
    assert_grep "rank 3 exiting with 7" err
    wait_all_clean 10
'

expect_success "the network of node2 goes down mid-run: exit 200 naming node2, nothing left" '
    # cut the link once every rank runs (not after a fixed delay: a slow start would
    # then be cut during the launch)
    ( for r in 0 1 2 3; do wait_for_file "$T_TMP/nd.$r" 60 || exit 1; done
      "$CL" exec "$D" 2 ip link set "$IFNAME_2" down ) &
    run_capture rc out err "$DSL" --keepalive 3 --term-timeout 2 "${SSH[@]}" \
        --export FLOW_PIDFILE=$T_TMP/nd "$W" pidfile 600
    wait
    "$CL" exec "$D" 2 ip link set "$IFNAME_2" up
    assert_eq "$rc" 200
    assert_grep "node2" err
    assert_grep "lost" err
    wait_all_clean 15
'

expect_success "sshd stopped on node2: mpirun fails, exit 200 with its output, nothing starts" '
    "$CL" sshd-stop "$D" 2
    run_capture rc out err "$DSL" --connect-timeout 10 "${SSH[@]}" \
        --export FLOW_PIDFILE=$T_TMP/nostart "$W" pidfile 600
    "$CL" sshd-start "$D" 2
    assert_eq "$rc" 200
    assert_grep "node2" err
    assert_grep "mpirun for .node2. ended" err
    assert_grep "ssh: connect to host $ADDR_2 port [0-9]*: Connection refused" err
    assert_grep "nothing was started" err
    [ ! -e "$T_TMP/nostart.0" ] || fail "a rank was started on node1"
    wait_all_clean 10
'

expect_success "no dslaunch at the remote path: 202 with what to do, as over ssh" '
    no_remote_dslaunch node1 ".*not found.*" "${SSH[@]}"
'

expect_success "a wrong identity fails authentication (201) and starts nothing" '
    ssh-keygen -q -t ed25519 -N "" -f wrongkey
    sed "/IdentityFile/d" "$D/ssh_config" > cfg_nokey
    run_capture rc out err "$DSL" --launcher openmpi --hostfile "$D/hostfile" \
        --ssh-config cfg_nokey --ssh-identity wrongkey "$W" env
    assert_eq "$rc" 201
    assert_grep "Permission denied (publickey" err
    assert_not_grep "RANK=" out
    wait_all_clean 10
'

expect_success "an unknown host key is refused with advice; --ssh-accept-new trusts it" '
    : > empty_known
    sed "s|UserKnownHostsFile .*|UserKnownHostsFile $T_TMP/empty_known|" "$D/ssh_config" > cfg_unknown
    run_capture rc out err "$DSL" --launcher openmpi --hostfile "$D/hostfile" --ssh-config cfg_unknown "$W" env
    assert_eq "$rc" 201
    assert_grep "Host key verification failed" err
    assert_grep "ssh-accept-new" err
    run_capture rc out err "$DSL" --launcher openmpi --ssh-accept-new --hostfile "$D/hostfile" \
        --ssh-config cfg_unknown "$W" env
    assert_eq "$rc" 0
    assert_grep "RANK=3" out
    wait_all_clean 10
'

expect_success "an mpirun that ends at once fails every host at once, every time, and starts nothing" '
    # a missing one is refused before any host is tried, naming the variable
    run_capture rc out err env DSLAUNCH_MPIRUN=$T_TMP/no-such-mpirun "$DSL" \
        --connect-timeout 60 "${SSH[@]}" "$W" env
    assert_eq "$rc" 2 "exit code with a missing mpirun"
    assert_grep "runs DSLAUNCH_MPIRUN=.*no-such-mpirun. instead of .mpirun." err
    # repeated: the first connection to see mpirun end must wake its siblings (a lost
    # wakeup left one waiting for --connect-timeout in about one run out of six)
    printf "#!/bin/sh\nexit 1\n" >"$T_TMP/quit-mpirun"
    chmod +x "$T_TMP/quit-mpirun"
    for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
        run_capture rc out err env DSLAUNCH_MPIRUN=$T_TMP/quit-mpirun "$DSL" \
            --connect-timeout 60 "${SSH[@]}" "$W" env
        assert_eq "$rc" 200 "exit code of run $i"
        [ $(grep -c "mpirun for .node[12]. ended (exit 1) before its agent connected back" err) = 2 ] ||
            { cat err >&2; fail "run $i: not both hosts failed at once"; }
        assert_not_grep "RANK=" out
    done
    wait_all_clean 10
'

expect_success "Ctrl-C on the launcher: exit 130, mpirun reaped, nothing left anywhere" '
    start_world4 "$T_TMP/cc" "${SSH[@]}" --export FLOW_PIDFILE=$T_TMP/cc "$W" pidfile 600
    kill_wait INT $pid
    assert_eq "$rc" 130
    wait_all_clean 15
'

expect_success "SIGKILL of the launcher: mpirun and the agents go, nothing left anywhere" '
    start_world4 "$T_TMP/kk" "${SSH[@]}" --export FLOW_PIDFILE=$T_TMP/kk "$W" grandchild 600
    gcs=$(grandchild_pids "$T_TMP/kk" 0 1 2 3)
    assert_alive $gcs
    kill -KILL $pid
    set +e; wait $pid; set -e
    wait_all_clean 20
    wait_gone 20 $gcs
'

# "user@host": the login user reaches mpirun's ssh (-l, one mpirun per user); and
# --launcher_args reach mpirun: -x passes a variable that dslaunch does not export to
# the agents, whose environment is the base of the ranks'.
expect_success "user@host and --launcher_args reach mpirun (-x VAR arrives at every rank); an unknown user is denied" '
    printf "%s@node1 slots=2\nnode2 slots=2\n" "$(id -un)" > hf.user
    run_capture rc out err env DSL_LA_MARK=via-mpirun "$DSL" --launcher openmpi --hostfile hf.user \
        --ssh-config "$D/ssh_config" --launcher_args " -x  DSL_LA_MARK" /usr/bin/env
    cat err
    assert_eq "$rc" 0
    for r in 0 1 2 3; do assert_grep "rank $r\] DSL_LA_MARK=via-mpirun$" out; done
    assert_grep "^\[node2:rank 3\] MASTER_ADDR=$ADDR_1$" out
    run_capture rc out err env DSL_LA_MARK=via-mpirun "$DSL" --launcher openmpi --hostfile hf.user \
        --ssh-config "$D/ssh_config" /usr/bin/env
    [ "$rc" = 0 ] || cat err
    assert_eq "$rc" 0 "without --launcher_args"
    assert_not_grep "DSL_LA_MARK" out
    printf "node1 slots=2\ndslnouser@node2 slots=2\n" > hf.nouser
    run_capture rc out err "$DSL" --launcher openmpi --hostfile hf.nouser --ssh-config "$D/ssh_config" "$W" env
    cat err
    assert_eq "$rc" 201 "exit for an unknown user"
    assert_grep "mpirun for .node2. ended .*dslnouser@.*Permission denied" err
    assert_not_grep "RANK=" out
    wait_all_clean 10
'

done_testing
