#!/usr/bin/env bash
# Cluster tier: the trust boundaries of dslaunch's remote paths (docs/security.md),
# tried as an attacker on the network or on a node would (run under with_cluster.sh,
# which brings a 2-node cluster with 2 slots each up and down).
# usage: with_cluster.sh 2 security.sh DSLAUNCH WORKER SOURCE_DIR
set -u
DSL=$1
W=$2
SRC=$3
HERE=$SRC/tests/e2e/security
. "$SRC/tests/e2e/flow/lib.sh"
. "$SRC/tests/e2e/multinode/nslib.sh"

command -v pdsh >/dev/null || { echo "not ok 1 - pdsh is not installed (apt-get install pdsh)"; exit 1; }
command -v mpirun >/dev/null || { echo "not ok 1 - mpirun is not installed (apt-get install openmpi-bin)"; exit 1; }

rand() { od -An -N8 -tx1 /dev/urandom | tr -d " \n"; }

# wait_lines FILE PATTERN N SECONDS: until FILE has N lines matching PATTERN (a
# liveness bound, not a speed check)
wait_lines() {
    local i=0
    while [ $i -lt $(($4 * 10)) ]; do
        n=$(grep -c -- "$2" "$1" 2>/dev/null || true)
        [ "${n:-0}" -ge "$3" ] && return 0
        sleep 0.1; i=$((i + 1))
    done
    fail "fewer than $3 lines '$2' in $1"
}

expect_success "pdsh: no plaintext of --export, env or argv canaries or the run token on a node's wire, none in ps" '
    [ "$MODE" = netns ] || skip "needs the namespace cluster (a capture on a node interface)"
    r=$(rand)
    can_exp=canaryEXP$r can_env=canaryENV$r can_arg=canaryARG$r
    export NCCL_DSL_CANARY=$can_env
    "$CL" exec "$D" 2 python3 "$HERE/sniff.py" "$IFNAME_2" "$T_TMP/cap" "$T_TMP/cap.ready" \
        2>"$T_TMP/sniff.err" &
    sniff=$!
    wait_for_file "$T_TMP/cap.ready" 20
    spid=$(cat "$T_TMP/cap.ready")
    trap "kill -TERM $spid 2>/dev/null || true" EXIT
    "$DSL" --launcher pdsh "${SSH[@]}" --export "CANARY=$can_exp" \
        /bin/sh -c "env; echo \"arg \$0\"; sleep 2" "$can_arg" >"$T_TMP/out" 2>"$T_TMP/err" &
    job=$!
    wait_lines "$T_TMP/out" DSLAUNCH_RUN_TOKEN= 4 60
    # this job'"'"'s processes only (other jobs may run on this machine): everything
    # that names this dslaunch or this cluster
    ps -eo args | grep -F -e "$DSL" -e "$D/" >"$T_TMP/ps" || true
    rc=0; wait $job || rc=$?
    kill -TERM "$spid"; wait $sniff || true
    cat "$T_TMP/err" "$T_TMP/sniff.err"
    assert_eq "$rc" 0
    # the values did travel: every rank got them
    assert_eq "$(grep -c "\] CANARY=$can_exp$" "$T_TMP/out")" 4 "ranks with the exported canary"
    assert_eq "$(grep -c "NCCL_DSL_CANARY=$can_env$" "$T_TMP/out")" 4 "ranks with the env canary"
    assert_eq "$(grep -c "arg $can_arg$" "$T_TMP/out")" 4 "ranks with the argv canary"
    token=$(grep -m1 "DSLAUNCH_RUN_TOKEN=" "$T_TMP/out" | sed "s/.*DSLAUNCH_RUN_TOKEN=//")
    [ -n "$token" ]
    # the capture saw node2 agent'"'"'s connection (the hello is the one clear part) ...
    [ -s "$T_TMP/cap" ] || fail "empty capture"
    grep -qaF "DSLCB2" "$T_TMP/cap" || fail "the capture does not show the control channel"
    # ... and nothing of what it carried
    for s in "$can_exp" "$can_env" "$can_arg" "$token" DSLAUNCH_RUN_TOKEN MASTER_ADDR \
             "\"type\"" "/bin/sh"; do
        if grep -qaF -- "$s" "$T_TMP/cap"; then fail "plaintext [$s] on the wire"; fi
    done
    # ps on the launcher and the nodes (one PID namespace): agents seen, no secret
    grep -qF -- "--launcher-key" "$T_TMP/ps" || fail "no agent in the ps snapshot"
    for s in "$can_env" "$token" "--token"; do
        if grep -F -- "$s" "$T_TMP/ps"; then fail "[$s] on a command line"; fi
    done
    wait_ns_clean 10
'

expect_success "an agent refuses a launcher that does not hold the key it was given, and sends it nothing" '
    [ "$MODE" = netns ] || skip "needs the namespace cluster"
    python3 "$HERE/impostor.py" "$HOST_ADDR" "$T_TMP/imp.port" "$T_TMP/imp.log" &
    imp=$!
    wait_for_file "$T_TMP/imp.port" 20
    port=$(cat "$T_TMP/imp.port")
    key=$(rand)$(rand)$(rand)$(rand)
    run_capture rc out err "$CL" exec "$D" 2 "$DSL" --agent --connect "$HOST_ADDR:$port" \
        --launcher-key "$key"
    wait $imp
    cat err "$T_TMP/imp.log"
    [ "$rc" != 0 ] || fail "the agent accepted a fake launcher"
    assert_grep "the launcher did not prove its key" err
    assert_grep "^DSLCB2-KEY 0 [0-9a-f]\{64\}$" out
    assert_grep "^hello 72$" "$T_TMP/imp.log"
    assert_grep "^magic DSLCB2$" "$T_TMP/imp.log"
    assert_grep "^after 0$" "$T_TMP/imp.log"
'

expect_success "an agent the launcher did not start cannot join a pdsh job, even with its --connect and --launcher-key" '
    "$DSL" --launcher pdsh "${SSH[@]}" "$W" sleep 14 >"$T_TMP/out" 2>"$T_TMP/err" &
    job=$!
    i=0
    while ! line=$(ps -eo args | grep -F -- "$DSL --agent" | grep -- "--launcher-key" |
                   grep -v grep | head -n 1) ||
          [ -z "$line" ]; do
        [ $i -lt 300 ] || fail "no agent appeared"
        sleep 0.1; i=$((i + 1))
    done
    set -- $line
    while [ $# -gt 1 ]; do
        case $1 in --connect) c=$2;; --launcher-key) k=$2;; esac
        shift
    done
    # the intruder dials with the real agent'"'"'s arguments, but its key line goes to
    # its own stdout, not through pdsh: the launcher never expects its key
    # files of its own: the job writes its stderr to err in this directory meanwhile
    run_capture rc intruder.out intruder.err \
        "$CL" exec "$D" 2 "$DSL" --agent --connect "$c" --launcher-key "$k"
    cat intruder.err
    [ "$rc" != 0 ] || fail "an intruding agent got in"
    assert_grep "launcher did not answer the handshake\|connect-back refused\|cannot connect back" \
        intruder.err
    rc=0; wait $job || rc=$?
    cat "$T_TMP/err"
    assert_eq "$rc" 0
    wait_ns_clean 10
'

# Directories whose names a shell would run: the issue's reproduction (no space, so
# the old space check let it through to plm_rsh_agent), and one with $(...),
# backticks, quotes, spaces, ";" and a newline. Markers appear if anything interprets
# them, here or on a node (the nodes share this file system).
nl="
"
q="'"
H1="$T_TMP/e\$(hostname>>$T_TMP/PWNED0)"
H2="$T_TMP/e\$(touch $T_TMP/PWNED1)/\`touch $T_TMP/PWNED2\`;touch $T_TMP/PWNED3; x${q}y\"z${nl}w"
for h in "$H1" "$H2"; do
    mkdir -p "$h"
    cp "$D/ssh_config" "$h/ssh_config"
    cp "$D/id_ed25519" "$h/id key"
    chmod 600 "$h/id key"
done

for l in ssh pdsh openmpi; do
    for h in H1 H2; do
        expect_success "--launcher $l: hostile --ssh-config and --ssh-identity paths ($h) run nothing and the job works" '
            h=$'"$h"'
            run_capture rc out err "$DSL" --launcher '"$l"' --hostfile "$D/hostfile" \
                --ssh-config "$h/ssh_config" --ssh-identity "$h/id key" "$W" env
            cat err
            for m in PWNED0 PWNED1 PWNED2 PWNED3; do
                [ ! -e "$T_TMP/$m" ] || fail "a shell ran part of the path ($m)"
            done
            if ls /tmp | grep PWNED; then fail "a marker in /tmp"; fi
            assert_eq "$rc" 0
            assert_eq "$(grep -c "\] RANK=" out)" 4 "ranks that ran"
            wait_ns_clean 10
        '
    done
done

expect_success "no private ssh directory is left behind" '
    left=$(find "${TMPDIR:-/tmp}" -maxdepth 1 -name "dslaunch-ssh.*" -newer "$T_TMP" 2>/dev/null)
    [ -z "$left" ] || fail "left behind: $left"
'

done_testing
