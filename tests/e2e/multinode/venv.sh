#!/usr/bin/env bash
# Cluster tier (issue 33, item 3): an activated Python venv, or conda env, follows the
# job to the other nodes. Run under with_cluster.sh 2 (nodes node1 and node2 over ssh; the launching host
# is neither). The "venv" is a directory with bin/python3, a script that says which
# Python ran; the nodes see this machine's files, so it is at the same path on both,
# until node2's sshd namespace gets an empty directory mounted over it. The "conda env"
# is the same with conda-meta/ and bin/python3 a symlink to python3.11, as conda makes it.
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
mkdir -p conda/bin conda/conda-meta
cat >conda/bin/python3.11 <<'EOS'
#!/bin/sh
echo "conda python3 host=$(hostname) CONDA_PREFIX=$CONDA_PREFIX CONDA_DEFAULT_ENV=$CONDA_DEFAULT_ENV"
EOS
chmod +x conda/bin/python3.11
ln -s python3.11 conda/bin/python3
C=$T_TMP/conda

# python_everywhere KIND MARK ENV...: dslaunch, under env ENV..., runs the fake KIND's
# python3 on all 4 ranks, each line ending with MARK
python_everywhere() {
    local kind=$1 mark=$2
    shift 2
    run_capture rc out err env "$@" "$DSL" "${SSH[@]}" python3
    cat err
    assert_eq "$rc" 0
    assert_eq "$(grep -c "$kind python3 .*$mark\$" out)" 4 "ranks on the $kind s python3"
    assert_grep "^\[node2:rank 3\] $kind python3" out
}

# refused_without DIR ENV...: with DIR hidden on node2 (an empty directory mounted over
# it), dslaunch under env ENV... is refused before anything starts (202)
refused_without() {
    local dir=$1
    shift
    [ "$MODE" = netns ] || skip "loopback mode: the nodes share this machine s mounts"
    "$CL" mnt "$D" node2 mount --bind "$T_TMP/empty" "$dir"
    run_capture rc out err env "$@" "$DSL" "${SSH[@]}" python3
    "$CL" mnt "$D" node2 umount "$dir"
    cat err
    assert_eq "$rc" 202
}

expect_success "an activated venv at the same path on every node: every rank runs its python3" '
    python_everywhere venv "VIRTUAL_ENV=$V" VIRTUAL_ENV="$V" PATH="$V/bin:$PATH"
    assert_grep "the activated venv .$V. is at the same path on every node: its PATH and VIRTUAL_ENV go to every rank, which runs .$V/bin/python3." err
    wait_ns_clean 10
'

expect_success "a node without the venv: the preflight names it and what it would run, nothing starts" '
    refused_without "$V" VIRTUAL_ENV="$V" PATH="$V/bin:$PATH"
    assert_grep "error: preflight: .python3. is .$V/bin/python3. here, in the activated venv .$V., but ./[^ ]*python3. on node2: the ranks there would run another Python. Make the venv at the same path on every node (e.g. dslaunch sync $V with the same --hostfile), or deactivate it here" err
    assert_not_grep "on node1" err
    assert_not_grep "venv python3" out
    wait_ns_clean 10
'

expect_success "an activated conda env at the same path on every node: every rank runs its python3" '
    python_everywhere conda "CONDA_PREFIX=$C CONDA_DEFAULT_ENV=fakeenv" -u VIRTUAL_ENV \
        CONDA_PREFIX="$C" CONDA_DEFAULT_ENV=fakeenv PATH="$C/bin:$PATH"
    assert_grep "the activated conda env .$C. is at the same path on every node: its PATH, CONDA_PREFIX and CONDA_DEFAULT_ENV go to every rank, which runs .$C/bin/python3." err
    wait_ns_clean 10
'

expect_success "a node without the conda env: the preflight names it and how to fix it, nothing starts" '
    refused_without "$C" -u VIRTUAL_ENV CONDA_PREFIX="$C" CONDA_DEFAULT_ENV=fakeenv \
        PATH="$C/bin:$PATH"
    assert_grep "error: preflight: .python3. is .$C/bin/python3. here, in the activated conda env .$C., but ./[^ ]*python3. on node2: the ranks there would run another Python. Make the conda env at the same path on every node (e.g. dslaunch sync $C with the same --hostfile, or conda create -p PREFIX on each node), or deactivate it here (conda deactivate)" err
    assert_not_grep "on node1" err
    assert_not_grep "conda python3" out
    wait_ns_clean 10
'

expect_success "a venv made inside a conda env: the venv is what runs, and what is exported" '
    run_capture rc out err env VIRTUAL_ENV="$V" CONDA_PREFIX="$C" PATH="$V/bin:$C/bin:$PATH" \
        "$DSL" "${SSH[@]}" python3
    assert_eq "$rc" 0
    assert_eq "$(grep -c "venv python3 .*VIRTUAL_ENV=$V$" out)" 4
    assert_grep "the activated venv .$V. is at the same path on every node" err
    assert_not_grep "conda env" err
    wait_ns_clean 10
'

expect_success "no venv here: nothing is exported or compared" '
    run_capture rc out err env -u VIRTUAL_ENV -u CONDA_PREFIX "$DSL" "${SSH[@]}" sh -c "echo VE=\${VIRTUAL_ENV:-none}"
    assert_eq "$rc" 0
    assert_eq "$(grep -c "VE=none" out)" 4
    assert_not_grep "venv" err
'

done_testing
