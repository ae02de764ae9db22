#!/usr/bin/env bash
# Cluster tier (issue 33, item 3): an activated Python venv follows the job to the other
# nodes. Run under with_cluster.sh 2 (nodes node1 and node2 over ssh; the launching host
# is neither). The "venv" is a directory with bin/python3, a script that says which
# Python ran; the nodes see this machine's files, so it is at the same path on both,
# until node2's sshd namespace gets an empty directory mounted over it.
# usage: with_cluster.sh 2 venv.sh DSLAUNCH SOURCE_DIR
set -u
DSL=$1
SRC=$2
. "$SRC/tests/e2e/flow/lib.sh"
. "$SRC/tests/e2e/multinode/nslib.sh"

mkdir -p venv/bin empty
cat >venv/bin/python3 <<'EOS'
#!/bin/sh
echo "venv python3 host=$(hostname) VIRTUAL_ENV=$VIRTUAL_ENV"
EOS
chmod +x venv/bin/python3
V=$T_TMP/venv

expect_success "an activated venv at the same path on every node: every rank runs its python3" '
    run_capture rc out err env VIRTUAL_ENV="$V" PATH="$V/bin:$PATH" "$DSL" "${SSH[@]}" python3
    cat err
    assert_eq "$rc" 0
    assert_eq "$(grep -c "venv python3 .*VIRTUAL_ENV=$V$" out)" 4 "ranks on the venv s python3"
    assert_grep "^\[node2:rank 3\] venv python3" out
    assert_grep "the activated venv .$V. is at the same path on every node: its PATH and VIRTUAL_ENV go to every rank, which runs .$V/bin/python3." err
    wait_ns_clean 10
'

expect_success "a node without the venv: the preflight names it and what it would run, nothing starts" '
    [ "$MODE" = netns ] || skip "loopback mode: the nodes share this machine s mounts"
    "$CL" mnt "$D" node2 mount --bind "$T_TMP/empty" "$V"
    run_capture rc out err env VIRTUAL_ENV="$V" PATH="$V/bin:$PATH" "$DSL" "${SSH[@]}" python3
    "$CL" mnt "$D" node2 umount "$V"
    cat err
    assert_eq "$rc" 202
    assert_grep "error: preflight: .python3. is .$V/bin/python3. here, in the activated venv .$V., but ./[^ ]*python3. on node2: the ranks there would run another Python. Make the venv at the same path on every node (e.g. dslaunch sync $V with the same --hostfile), or deactivate it here" err
    assert_not_grep "on node1" err
    assert_not_grep "venv python3" out
    wait_ns_clean 10
'

expect_success "no venv here: nothing is exported or compared" '
    run_capture rc out err env -u VIRTUAL_ENV "$DSL" "${SSH[@]}" sh -c "echo VE=\${VIRTUAL_ENV:-none}"
    assert_eq "$rc" 0
    assert_eq "$(grep -c "VE=none" out)" 4
    assert_not_grep "venv" err
'

done_testing
