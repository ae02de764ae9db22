#!/usr/bin/env bash
# Cluster tier: the real dslaunch against sshd in network namespaces (run under
# with_cluster.sh, which brings a 2-node cluster with 2 slots each up and down).
# usage: with_cluster.sh 2 launch.sh DSLAUNCH WORKER SOURCE_DIR
set -u
DSL=$1
W=$2
SRC=$3
. "$SRC/tests/e2e/flow/lib.sh"
. "$SRC/tests/e2e/multinode/nslib.sh"

expect_success "2 nodes x 2 slots: env, MASTER_ADDR is node1's address, interfaces per node" '
    run_capture rc out err "$DSL" "${SSH[@]}" "$W" env
    assert_eq "$rc" 0
    assert_world_2x2 out
    if [ "$MODE" = netns ]; then
        assert_grep "^\[node2:rank 2\] GLOO_SOCKET_IFNAME=$IFNAME_2$" out
    fi
    [ $(grep -c "DSLAUNCH_RUN_ID=" out) = 4 ]
    wait_ns_clean 10
'

expect_success "--check prints the preflight table and starts nothing" '
    run_capture rc out err "$DSL" --check "${SSH[@]}"
    assert_eq "$rc" 0
    assert_grep "MASTER_ADDR=$ADDR_1" err
    assert_grep "preflight ok: 2 node(s), 4 rank(s)" err
    assert_grep "^node 1 ranks contained by: [a-z]" err
'

expect_success "a rank on node2 exits 7: node1 is torn down, exit 7, summary names node2" '
    run_capture rc out err "$DSL" --term-timeout 3 "${SSH[@]}" "$W" only 3 exit 7 0.5
    assert_eq "$rc" 7
    assert_grep "rank 3 (host node2, pid [0-9]*) exited with code 7" err
    assert_grep "rank 3 exiting with 7" err
    wait_ns_clean 10
'

expect_success "NCCL_SOCKET_IFNAME naming an interface of node1 only: refused naming node2 and its interfaces" '
    [ "$MODE" = netns ] || skip "loopback mode: the nodes share the interfaces of this machine"
    run_capture rc out err env NCCL_SOCKET_IFNAME="$IFNAME_1" "$DSL" --export NCCL_SOCKET_IFNAME "${SSH[@]}" "$W" env
    cat err
    assert_eq "$rc" 202
    assert_grep "error: .node2. has no interface that NCCL_SOCKET_IFNAME=.$IFNAME_1. allows (its interfaces: .*$IFNAME_2" err
    assert_not_grep "node1. has no interface" err
    assert_not_grep "RANK=" out
    # "^name": any interface but those (and lo): node1 keeps none, node2 its own
    run_capture rc out err env NCCL_SOCKET_IFNAME="^$IFNAME_1" "$DSL" --export NCCL_SOCKET_IFNAME "${SSH[@]}" "$W" env
    assert_eq "$rc" 202
    assert_grep "error: .node1. has no interface that NCCL_SOCKET_IFNAME=.\^$IFNAME_1. allows" err
    assert_not_grep "node2. has no interface" err
    run_capture rc out err env NCCL_SOCKET_IFNAME="$IFNAME_1,$IFNAME_2" "$DSL" --export NCCL_SOCKET_IFNAME "${SSH[@]}" "$W" env
    assert_eq "$rc" 0 "a list that names an interface of each node"
'

# The preflight looks the program up in the PATH the rank will have (the export set),
# not in the node's login PATH: it used to refuse a program only the exported PATH has.
expect_success "a program only in the exported PATH (a venv) passes the preflight on every node and runs" '
    mkdir -p venv/bin
    printf "#!/bin/sh\necho onlyvenv \$RANK\n" >venv/bin/onlyvenv-$$
    chmod 755 venv/bin/onlyvenv-$$
    run_capture rc out err env PATH="$T_TMP/venv/bin:$PATH" "$DSL" --export PATH "${SSH[@]}" onlyvenv-$$
    cat err
    assert_eq "$rc" 0
    assert_eq "$(grep -c "onlyvenv [0-3]\$" out)" 4 "ranks that ran it"
    run_capture rc out err "$DSL" "${SSH[@]}" onlyvenv-$$
    assert_eq "$rc" 202 "without the exported PATH"
    assert_grep "cannot start .onlyvenv-$$.: command not found in PATH" err
'

expect_success "no dslaunch at the remote path: 202 with what to do, not a dead agent (204)" '
    no_remote_dslaunch node2 ".*No such file or directory" "${SSH[@]}"
    assert_grep "install the same dslaunch at that path on every node (dslaunch sync can copy it), or give --remote-dslaunch PATH" err
'

expect_success "a missing Python script is named by every node's preflight, and nothing starts" '
    run_capture rc out err "$DSL" "${SSH[@]}" no-such-script-$$.py
    assert_eq "$rc" 202
    assert_grep "preflight: .node1.: cannot run .no-such-script-$$.py.: No such file or directory in ." err
    assert_grep "preflight: .node2.: cannot run .no-such-script-$$.py.: No such file or directory in ." err
    [ ! -s out ] || fail "a rank ran"
'

expect_success "user env values and arguments arrive intact on remote ranks" '
    nl="
"
    export NCCL_FLOW_TEST="a b;\$(touch $T_TMP/pwned-env)"
    run_capture rc out err "$DSL" "${SSH[@]}" --export "FLOW_EXPORTED=x'"'"'y\"z \$HOME" \
        "$W" args "I am 6'"'"' tall" "\$(touch $T_TMP/pwned)" "a${nl}b" "" "ünï" "*"
    assert_eq "$rc" 0
    [ ! -e "$T_TMP/pwned" ] && [ ! -e "$T_TMP/pwned-env" ] || fail "a shell interpreted user data"
    for a in "I am 6'"'"' tall" "\$(touch $T_TMP/pwned)" "a${nl}b" "" "ünï" "*"; do
        hex=$(printf %s "$a" | od -An -tx1 | tr -d " \n")
        [ $(grep -c "^\[node2:rank [23]\] arg $hex$" out) = 2 ] || fail "argument [$a] not intact on node2"
    done
    run_capture rc out err "$DSL" "${SSH[@]}" --export "FLOW_EXPORTED=x'"'"'y\"z \$HOME" "$W" env
    assert_eq "$rc" 0
    grep -qF "[node2:rank 3] FLOW_EXPORTED=x'"'"'y\"z \$HOME" out || fail "env value not intact"
'

expect_success "the network of node2 goes down mid-run: exit 200 (host unreachable), nothing left" '
    ( sleep 1.5; "$CL" exec "$D" 2 ip link set "$IFNAME_2" down ) &
    run_capture rc out err "$DSL" --keepalive 3 --term-timeout 2 "${SSH[@]}" "$W" sleep 600
    wait
    "$CL" exec "$D" 2 ip link set "$IFNAME_2" up
    assert_eq "$rc" 200
    assert_grep "node2" err
    assert_grep "lost" err
    wait_ns_clean 15
'

expect_success "sshd stopped on node2: preflight fails, nothing starts on node1" '
    "$CL" sshd-stop "$D" 2
    export FLOW_PIDFILE=$T_TMP/nostart
    run_capture rc out err "$DSL" --connect-timeout 5 "${SSH[@]}" --export FLOW_PIDFILE "$W" pidfile 600
    "$CL" sshd-start "$D" 2
    assert_eq "$rc" 200
    assert_grep "node2" err
    assert_grep "nothing was started" err
    [ ! -e "$FLOW_PIDFILE.0" ] || fail "a rank was started on node1"
    wait_ns_clean 10
'

expect_success "a wrong identity fails authentication (201) and starts nothing" '
    ssh-keygen -q -t ed25519 -N "" -f wrongkey
    sed "/IdentityFile/d" "$D/ssh_config" > cfg_nokey
    run_capture rc out err "$DSL" --hostfile "$D/hostfile" --ssh-config cfg_nokey --ssh-identity wrongkey "$W" env
    assert_eq "$rc" 201
    assert_grep "node1" err
    assert_not_grep "RANK=" out
'

expect_success "an unknown host key is refused with advice; --ssh-accept-new trusts it" '
    : > empty_known
    sed "s|UserKnownHostsFile .*|UserKnownHostsFile $T_TMP/empty_known|" "$D/ssh_config" > cfg_unknown
    run_capture rc out err "$DSL" --hostfile "$D/hostfile" --ssh-config cfg_unknown "$W" env
    assert_eq "$rc" 201
    assert_grep "ssh-accept-new" err
    run_capture rc out err "$DSL" --ssh-accept-new --hostfile "$D/hostfile" --ssh-config cfg_unknown "$W" env
    assert_eq "$rc" 0
    assert_grep "RANK=3" out
'

expect_success "a changed host key is always refused" '
    ssh-keygen -q -t ed25519 -N "" -f otherhost
    awk -v k="$(cut -d" " -f1,2 otherhost.pub)" "{ if (\$1 ~ /$ADDR_2|node2/) print \$1, k; else print }" "$D/known_hosts" > changed_known
    sed "s|UserKnownHostsFile .*|UserKnownHostsFile $T_TMP/changed_known|" "$D/ssh_config" > cfg_changed
    run_capture rc out err "$DSL" --ssh-accept-new --hostfile "$D/hostfile" --ssh-config cfg_changed "$W" env
    assert_eq "$rc" 201
    assert_grep "node2" err
    assert_not_grep "RANK=" out
'

# OpenSSH accepts a port-less known_hosts line for a host on another port ("found
# matching key w/out port") and records nothing: so must dslaunch (it refused with 201).
expect_success "sshd on port 2222 with port-less known_hosts lines: accepted as OpenSSH does; another key is not" '
    [ "$MODE" = netns ] || skip "loopback mode: known_hosts lines carry ports already"
    for i in 1 2; do
        grep -q "^Port 2222" "$D/node$i/sshd_config" || { echo "Port 22"; echo "Port 2222"; } >>"$D/node$i/sshd_config"
        "$CL" sshd-stop "$D" "$i" && "$CL" sshd-start "$D" "$i"
    done
    grep -q "]:2222" "$D/known_hosts" && fail "known_hosts already has port lines"
    cp "$D/known_hosts" before_known
    run_capture rc out err "$DSL" --ssh_port 2222 "${SSH[@]}" "$W" env
    cat err
    assert_eq "$rc" 0
    assert_grep "RANK=3" out
    cmp "$D/known_hosts" before_known || fail "known_hosts was changed"
    ssh-keygen -q -t ed25519 -N "" -f portless_other
    awk -v k="$(cut -d" " -f1,2 portless_other.pub)" "{ if (\$1 ~ /$ADDR_2|node2/) print \$1, k; else print }" "$D/known_hosts" > portless_changed
    sed "s|UserKnownHostsFile .*|UserKnownHostsFile $T_TMP/portless_changed|" "$D/ssh_config" > cfg_portless
    run_capture rc out err "$DSL" --ssh_port 2222 --hostfile "$D/hostfile" --ssh-config cfg_portless "$W" env
    assert_eq "$rc" 201
    assert_grep "node2.*not known" err
'

expect_success "Ctrl-C on the launcher tears the job down on every node" '
    export FLOW_PIDFILE=$T_TMP/cc
    start_world4 "$FLOW_PIDFILE" "${SSH[@]}" --export FLOW_PIDFILE "$W" pidfile 600
    kill_wait INT $pid
    assert_eq "$rc" 130
    wait_ns_clean 15
'

expect_success "SIGKILL of the launcher: agents see EOF and kill their ranks, grandchildren and daemons" '
    export FLOW_PIDFILE=$T_TMP/kk
    start_world4 "$FLOW_PIDFILE" --term-timeout 2 "${SSH[@]}" --export FLOW_PIDFILE "$W" \
        descend grandchild 600
    gcs=$(grandchild_pids "$FLOW_PIDFILE" 0 1 2 3)
    ds=$(descendant_pids "$FLOW_PIDFILE" 0 1 2 3)
    assert_alive $gcs $ds
    kill -KILL $pid
    set +e; wait $pid; set -e
    wait_ns_clean 20
    wait_gone 20 $gcs $ds
'

# agent_on N: the pid of the node agent running under node N's sshd. The agent forks a
# clean-up process (its "keeper", contain.c) that has the same name and command line and
# also descends from the sshd, and after a pid wrap it may have the lower pid; what tells
# them apart is parentage: the agent's parent is the sshd's session (not a dslaunch), the
# keeper's parent is the agent. Exactly one such process, or none is named.
agent_on() {
    local sshd p q parent found=
    sshd=$(cat "$D/node$1/sshd.pid")
    for p in $(pgrep -x dslaunch); do
        tr "\0" "\n" <"/proc/$p/cmdline" 2>/dev/null | grep -qx -- --agent || continue
        parent=$(awk '{ print $4 }' "/proc/$p/stat" 2>/dev/null) || continue
        [ "$(cat "/proc/$parent/comm" 2>/dev/null)" = dslaunch ] && continue
        q=$parent
        while [ -n "$q" ] && [ "$q" -gt 1 ]; do
            if [ "$q" = "$sshd" ]; then
                [ -z "$found" ] || { echo "agent_on $1: both $found and $p look like the agent" >&2; return 1; }
                found=$p
                break
            fi
            q=$(awk '{ print $4 }' "/proc/$q/stat" 2>/dev/null)
        done
    done
    [ -n "$found" ] && echo "$found"
}

# node_contain N: the containment --check reports for node index N (0-based)
node_contain() {
    "$DSL" --check "${SSH[@]}" 2>&1 | sed -n "s/^node $1 ranks contained by: //p"
}

# Nodes see the machine's cgroup hierarchies (cluster.sh), so a node's agent contains
# ranks by whatever its --check line says; `cluster.sh contain` sets DSLAUNCH_CONTAIN
# for a node's agents through its sshd, the way a real node would (sshd SetEnv).
# contained_as N MODE-LINE: rank N of a 2x2 job ran in cgroups named for the job
# exactly when MODE-LINE says cgroup
contained_as() {
    local rank=$1 line=$2
    run_capture rc out err "$DSL" "${SSH[@]}" cat /proc/self/cgroup
    assert_eq "$rc" 0
    case $line in
        cgroup*) assert_grep "^\[node[12]:rank $rank\] [0-9]*:[^:]*:.*/dslaunch-[0-9a-f]*/rank$rank$" out ;;
        "process tracking") assert_not_grep "^\[node[12]:rank $rank\] .*/dslaunch-" out ;;
        *) fail "unknown containment '$line'" ;;
    esac
}

expect_success "every node's ranks are contained the way --check reports it, and DSLAUNCH_CONTAIN=tracking on a node switches it to process tracking" '
    trap "\"\$CL\" contain \"\$D\" node2 auto" EXIT
    one=$(node_contain 0); two=$(node_contain 1)
    [ -n "$one" ] && [ "$one" = "$two" ] || fail "the nodes report \"$one\" and \"$two\""
    echo "# nodes contained by: $one" >>"$T_TMP/measured"
    for r in 0 1 2 3; do contained_as $r "$one"; done
    "$CL" contain "$D" node2 tracking
    assert_eq "$(node_contain 1)" "process tracking" "node2 with DSLAUNCH_CONTAIN=tracking"
    assert_eq "$(node_contain 0)" "$one" "node1 unchanged"
    for r in 0 1; do contained_as $r "$one"; done
    for r in 2 3; do contained_as $r "process tracking"; done
    wait_ns_clean 10
'

# agent_killed MODE: SIGKILL of node2's agent while node2 contains by MODE (auto: the
# machine's cgroups where it has them; tracking)
agent_killed() {
    "$CL" contain "$D" node2 "$1"
    trap "\"\$CL\" contain \"\$D\" node2 auto" EXIT
    local line
    line=$(node_contain 1)
    echo "# agent SIGKILL case, node2 contained by: $line" >>"$T_TMP/measured"
    export FLOW_PIDFILE=$T_TMP/ak.$1
    "$DSL" --term-timeout 2 "${SSH[@]}" --export FLOW_PIDFILE "$W" descend sleep 600 >out 2>err &
    pid=$!
    for r in 0 1 2 3; do wait_for_file "$FLOW_PIDFILE.$r.ready" 20; done
    left=$(descendant_pids "$FLOW_PIDFILE" 0 1 2 3)
    assert_alive $left
    # under process tracking the agent tells its clean-up process every 0.5 s what it
    # found: let one report pass
    sleep 1.2
    agent=$(agent_on 2) || fail "no agent under the sshd of node2"
    kill -KILL $agent
    set +e; wait $pid; rc=$?; set -e
    assert_eq "$rc" 204 "exit code (a node agent died)"
    assert_grep "node 1 (node2) lost" err
    wait_gone 20 $left
    wait_ns_clean 20
    assert_job_clean 20 "$(head -n 1 "$FLOW_PIDFILE.0.ready")"
}

expect_success "SIGKILL of node2's agent (node2 in cgroups where the machine has them): the job stops (204) and nothing its ranks started survives" '
    agent_killed auto
'

expect_success "SIGKILL of node2's agent (node2 tracking processes): the job stops (204) and nothing its ranks started survives" '
    agent_killed tracking
'

# agent_stopped MODE: SIGSTOP of node2's agent while node2 contains by MODE. The
# launcher can only call node2 lost; node2's clean-up process, hearing nothing from the
# agent for the keepalive, ends the ranks and all they started while the agent stays
# stopped, and the agent, resumed, sweeps and removes what is left.
agent_stopped() {
    "$CL" contain "$D" node2 "$1"
    agent=""
    trap "[ -z \"\$agent\" ] || kill -CONT \$agent 2>/dev/null || true; \"\$CL\" contain \"\$D\" node2 auto" EXIT
    echo "# agent SIGSTOP case, node2 contained by: $(node_contain 1)" >>"$T_TMP/measured"
    export FLOW_PIDFILE=$T_TMP/as.$1
    "$DSL" --keepalive 3 --term-timeout 1 "${SSH[@]}" --export FLOW_PIDFILE "$W" descend pidfile 600 >out 2>err &
    pid=$!
    for r in 0 1 2 3; do wait_for_file "$FLOW_PIDFILE.$r.ready" 20; wait_for_file "$FLOW_PIDFILE.$r" 20; done
    left="$(descendant_pids "$FLOW_PIDFILE" 2 3) $(cat "$FLOW_PIDFILE.2" "$FLOW_PIDFILE.3")"
    assert_alive $left
    sleep 1.2  # process tracking: one report of what the agent found reaches its clean-up process
    agent=$(agent_on 2) || fail "no agent under the sshd of node2"
    kill -STOP $agent
    wait_exit $pid 40
    assert_eq "$rc" 200 "exit code (a lost node)"
    assert_grep "node 1 (node2) lost: no word from .node2. for [0-9.]* s" err
    wait_gone 30 $left
    assert_eq "$(process_state $agent)" T "node2's agent, still stopped"
    kill -CONT $agent
    wait_ns_clean 20
    assert_job_clean 20 "$(head -n 1 "$FLOW_PIDFILE.0.ready")"
}

expect_success "node2's agent SIGSTOPped (node2 in cgroups where the machine has them): node2 is lost (200), and its ranks and all they started end while the agent stays stopped" '
    agent_stopped auto
'

expect_success "node2's agent SIGSTOPped (node2 tracking processes): node2 is lost (200), and its ranks and all they started end while the agent stays stopped" '
    agent_stopped tracking
'

expect_success "stdout not read for 8 s (4x --keepalive) while 4 ranks print: the job survives" '
    export FLOW_PIDFILE=$T_TMP/unread FLOW_RUNIDS=$T_TMP/unread.ids
    # With a launcher blocked in write, no keepalive went out and every agent stopped
    # its healthy ranks after 2 s. The reader sleeps, then waits (bounded) until the
    # ranks have printed everything, which they can only do if the launcher reads on.
    set +e
    "$DSL" --keepalive 2 --output-buffer 256K --log-dir unread_logs "${SSH[@]}" \
        --export FLOW_PIDFILE --export FLOW_RUNIDS "$W" print 20000 4 2>err |
        ( sleep 8
          i=0; while [ $(ls "$FLOW_PIDFILE".[0-3] 2>/dev/null | wc -l) -lt 4 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
          cat > out )
    rc=${PIPESTATUS[0]}
    set -e
    assert_eq "$rc" 0 "exit code"
    assert_not_grep "error:" err
    for r in 0 1 2 3; do
        assert_eq "$(wc -l < unread_logs/rank$r.log)" 20000 "lines in rank$r.log"
    done
    delivered=$(grep -c "^\[node[12]:rank [0-3]\] out [0-3] [0-9]* the quick brown fox jumps over the lazy dog$" out || true)
    assert_eq "$(wc -l < out)" "$delivered" "every delivered line is whole"
    dropped=$(sed -n "s/.*: \([0-9]*\) output lines* w[a-z]* dropped because stdout was not read.*/\1/p" err)
    assert_eq "$((delivered + ${dropped:-0}))" 80000 "lines delivered ($delivered) + dropped (${dropped:-0})"
    wait_ns_clean 10
    assert_job_clean 10 $(run_ids "$FLOW_RUNIDS")
'

expect_success "SIGKILL of the launcher: ranks still get the whole --term-timeout to finish a save" '
    export FLOW_PIDFILE=$T_TMP/lostgrace FLOW_RUNIDS=$T_TMP/lostgrace.ids
    # each rank needs 4 s after SIGTERM (a checkpoint); the grace is 10 s
    start_world4 "$FLOW_PIDFILE" --term-timeout 10 "${SSH[@]}" --export FLOW_PIDFILE \
        --export FLOW_RUNIDS "$W" on-signal 0 4
    kill -KILL $pid
    set +e; wait $pid; set -e
    for r in 0 1 2 3; do wait_for_file "$FLOW_PIDFILE.$r.done" 30; done
    wait_ns_clean 20
    assert_job_clean 20 $(run_ids "$FLOW_RUNIDS")
'

expect_success "--launcher pdsh, no dslaunch at the remote path: 202 with what to do, as over ssh" '
    no_remote_dslaunch node2 ".*No such file or directory.*" --launcher pdsh "${SSH[@]}"
'

expect_success "--launcher pdsh runs the 2x2 job through the same agent" '
    run_capture rc out err "$DSL" --launcher pdsh "${SSH[@]}" "$W" env
    assert_eq "$rc" 0
    for r in 0 1 2 3; do assert_grep "rank $r\] RANK=$r$" out; done
    assert_grep "^\[node2:rank 3\] MASTER_ADDR=$ADDR_1$" out
    run_capture rc out err "$DSL" --launcher pdsh --term-timeout 3 "${SSH[@]}" "$W" only 2 exit 9 0.3
    assert_eq "$rc" 9
    wait_ns_clean 10
'

# "user@host" in the hostfile (DeepSpeed passes it to pdsh/ssh as the login): the
# cluster's ssh_config says "User root"; the hostfile's user wins over it.
expect_success "user@host in the hostfile: our own user runs on ssh and pdsh; a user the nodes lack is denied naming user@host" '
    me=$(id -un)
    printf "%s@node1 slots=2\nnode2 slots=2\n" "$me" > hf.user
    for l in ssh pdsh; do
        run_capture rc out err "$DSL" --launcher $l --hostfile hf.user --ssh-config "$D/ssh_config" "$W" env
        cat err
        assert_eq "$rc" 0 "exit ($l)"
        for r in 0 1 2 3; do assert_grep "rank $r\] RANK=$r$" out; done
        assert_grep "^\[node1:rank 0\] MASTER_ADDR=$ADDR_1$" out
    done
    printf "node1 slots=2\ndslnouser@node2 slots=2\n" > hf.nouser
    run_capture rc out err "$DSL" --hostfile hf.nouser --ssh-config "$D/ssh_config" "$W" env
    cat err
    assert_eq "$rc" 201 "exit for an unknown user"
    assert_grep "permission denied for dslnouser@node2 (" err
    assert_not_grep "RANK=" out
    run_capture rc out err "$DSL" --launcher pdsh --hostfile hf.nouser --ssh-config "$D/ssh_config" "$W" env
    cat err
    assert_eq "$rc" 201 "exit for an unknown user (pdsh)"
    assert_grep "dslnouser@.*Permission denied" err
    assert_not_grep "RANK=" out
    wait_ns_clean 10
'

# --launcher_args reach pdsh: -l sets its login user for the hosts -w names without one
expect_success "--launcher_args reach pdsh: -l dslnouser is its login for the hosts without a user" '
    run_capture rc out err "$DSL" --launcher pdsh --launcher_args "-l  dslnouser" "${SSH[@]}" "$W" env
    cat err
    assert_eq "$rc" 201 "exit"
    assert_grep "dslnouser@.*Permission denied" err
    assert_not_grep "RANK=" out
    printf "root@node1 slots=2\nroot@node2 slots=2\n" > hf.root
    [ "$(id -un)" = root ] || skip "the cluster logs in as root"
    run_capture rc out err "$DSL" --launcher pdsh --launcher_args "-l dslnouser" --hostfile hf.root --ssh-config "$D/ssh_config" "$W" env
    assert_eq "$rc" 0 "the hostfile user wins over -l"
    wait_ns_clean 10
'

[ -s "$T_TMP/measured" ] && cat "$T_TMP/measured"
done_testing
