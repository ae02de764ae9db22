#!/usr/bin/env bash
# Flow tier: `dslaunch ssh-setup` on this machine alone (no cluster, no root): usage
# errors, and an unreachable host failing its row with a non-zero exit while the key
# pair is still created. HOME is not touched: --key and --ssh-config point into a
# temporary directory.
# usage: sshsetup_flow.sh DSLAUNCH SOURCE_DIR
set -u
DSL=$1
SRC=$2
. "$SRC/tests/e2e/flow/lib.sh"
cd "$T_TMP"

# a port on 127.0.0.1 where nothing listens: bind one, note it, close it
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'Host deadhost\n  HostName 127.0.0.1\n  Port %s\n  UserKnownHostsFile %s/known_hosts\n' \
    "$PORT" "$T_TMP" >ssh_config
echo "deadhost slots=1" >hostfile

expect_success "usage errors exit 2 and name the problem" '
    run_capture rc out err "$DSL" ssh-setup --bogus
    assert_eq "$rc" 2 "exit code"
    assert_grep "unknown option .--bogus." err
    run_capture rc out err "$DSL" ssh-setup --hostfile "$T_TMP/missing"
    assert_eq "$rc" 2 "exit code"
    assert_grep "missing" err
    run_capture rc out err "$DSL" ssh-setup --hostfile hostfile --ssh_port 70000
    assert_eq "$rc" 2 "exit code"
    assert_grep "option .--ssh_port. is out of range: allowed 1..65535, got .70000." err
    run_capture rc out err "$DSL" ssh-setup --hostfile
    assert_eq "$rc" 2 "exit code"
    assert_grep "needs a value" err
    run_capture rc out err "$DSL" ssh-setup --help
    assert_eq "$rc" 0 "exit code"
    assert_grep "usage: dslaunch ssh-setup" out
'

expect_success "an unreachable host fails its row and the exit status" '
    run_capture rc out err "$DSL" ssh-setup --hostfile hostfile --ssh-config ssh_config \
        --key "$T_TMP/id_flow" --connect-timeout 5 --yes </dev/null
    cat out err
    assert_eq "$rc" 1 "exit code"
    grep -E "^deadhost +NO +- +- *\$" out || fail "row"
    assert_grep "deadhost: error: cannot connect to" out
    assert_eq "$(stat -c %a "$T_TMP/id_flow")" 600 "private key mode"
    grep -q "^ssh-ed25519 AAAA" "$T_TMP/id_flow.pub" || fail "public key"
'

expect_success "the password file descriptor and a --key option with = both parse" '
    run_capture rc out err "$DSL" ssh-setup --hostfile=hostfile --ssh_config=ssh_config \
        --key="$T_TMP/id_flow" --password_fd 3 --mesh 3</dev/null </dev/null
    assert_eq "$rc" 1 "exit code"
    grep -E "^deadhost +NO " out || fail "row"
    assert_grep "node-to-node" out
'

echo "1..$T_N"
[ "$T_FAILED" = 0 ]
