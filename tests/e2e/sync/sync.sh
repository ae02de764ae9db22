#!/usr/bin/env bash
# Cluster tier: dslaunch sync against 3 namespace nodes whose sshds each run in a private
# mount namespace with a tmpfs over $DSL_CLUSTER_PRIVATE_DIR (cluster.sh), so what a node
# sees there is exactly what sync wrote to it. The source tree lives at the same path on
# this (host) side. Checked per node through `cluster.sh mnt`.
# usage: DSL_CLUSTER_PRIVATE_DIR=P with_cluster.sh 3 sync.sh DSLAUNCH SOURCE_DIR
set -u
DSL=$1
SRC=$2
. "$SRC/tests/e2e/flow/lib.sh"
. "$SRC/tests/e2e/multinode/nslib.sh"
P=$PRIVATE_DIR
[ -n "$P" ] || { echo "Bail out! the cluster has no private directory"; exit 1; }
trap 'rm -rf "$T_TMP" "$P"/tree "$P"/one "$P"/cs "$P"/cs2 "$P"/ckpt' EXIT
cd "$T_TMP"

# What a node (or this host with node 0) holds under $P/tree: types, modes, sizes,
# mtimes (not of links: SFTP cannot set those), link targets and content hashes.
listing() {
    local cmd='cd "$1" && find tree -printf "%y %m %s %p -> %l\n" | sed -e "s/^l [0-7]* [0-9]* /l /" -e "s/^d \([0-7]*\) [0-9]* /d \1 /" | sort &&
        find tree ! -type l -exec stat -c "%n %Y" {} + | sort &&
        find tree -type f -exec sha256sum {} + | sort'
    if [ "$1" = 0 ]; then sh -c "$cmd" sh "$P"; else "$CL" mnt "$D" "$1" sh -c "$cmd" sh "$P"; fi
}

same_on_nodes() { # every node listed in $@ matches this host
    listing 0 >want
    [ -s want ] || fail "empty source listing"
    for n in "$@"; do
        listing "$n" >"got$n" || fail "cannot list node$n"
        diff -u want "got$n" >&2 || fail "node$n differs from the source"
    done
}

rm -rf "$P"/tree "$P"/one
mkdir -p "$P/tree/a/b/c" "$P/tree/empty-dir"
printf 'hello\n' >"$P/tree/a/hello.txt"
: >"$P/tree/a/b/empty"
head -c 100000000 /dev/urandom >"$P/tree/a/b/c/big.bin"
printf '#!/bin/sh\necho run\n' >"$P/tree/run.sh"
chmod 755 "$P/tree/run.sh"
printf 'secret\n' >"$P/tree/a/private"
chmod 600 "$P/tree/a/private"
chmod 750 "$P/tree/a/b"
ln -s a/hello.txt "$P/tree/rel-link"
ln -s /nonexistent/target "$P/tree/dangling"
ln -s b "$P/tree/a/dir-link"
touch -d '2020-01-02 03:04:05' "$P/tree/a/hello.txt" "$P/tree/a/b/c"

# synced PATTERN ARGS...: dslaunch sync ARGS... succeeds, and the line of each of the 3
# nodes in its output matches "^nodeN: PATTERN"
synced() {
    local want=$1 n
    shift
    run_capture rc out err "$DSL" sync "$@"
    cat out err
    assert_eq "$rc" 0
    for n in 1 2 3; do assert_grep "^node$n: $want" out; done
}

# copied_once RUN COPIED: sync's output (out) says two nodes share the destination with
# the third, which copied it: its line starts with COPIED; failures name RUN
copied_once() {
    [ "$(grep -c "^node[123]: shares the destination with node[123], copied there once (1 path)$" out)" = 2 ] ||
        fail "$1: two nodes should say that they share the destination"
    [ "$(grep -c "^node[123]: $2" out)" = 1 ] || fail "$1: not copied once"
}

expect_success "nodes start empty: each sees its own tmpfs" '
    for n in 1 2 3; do
        [ -z "$("$CL" mnt "$D" $n ls -A "$P")" ] || fail "node$n: $P is not empty"
    done
'

expect_success "first sync: nested dirs, symlinks, empty file and 100 MB file byte for byte on every node" '
    run_capture rc out err "$DSL" sync "${SSH[@]}" "$P/tree"
    cat out err
    assert_eq "$rc" 0 "exit code"
    for n in 1 2 3; do assert_grep "^node$n: 8 copied (100.0 MB), 0 up to date, 0 deleted" out; done
    same_on_nodes 1 2 3
    for n in 1 2 3; do
        [ -z "$("$CL" mnt "$D" $n find "$P" -name "*.dsl-sync-*")" ] || fail "temp files left on node$n"
    done
'

expect_success "second sync copies nothing and says so" '
    synced "0 copied (0 B), 8 up to date, 0 deleted" "${SSH[@]}" "$P/tree"
    assert_grep "^sync: nothing to copy, 3 hosts up to date" out
'

expect_success "a changed file and a changed mode are copied, nothing else" '
    printf "hello again\n" >"$P/tree/a/hello.txt"
    chmod 700 "$P/tree/run.sh"
    synced "1 copied (12 B), 7 up to date" -v "${SSH[@]}" "$P/tree"
    assert_grep "^node2: copied $P/tree/a/hello.txt$" out
    same_on_nodes 1 2 3
'

expect_success "--checksum finds a same-size, same-mtime change that size+mtime miss" '
    f="$P/tree/a/private"
    touch -r "$f" ref
    printf "SECRET\n" >"$f"
    touch -r ref "$f"
    run_capture rc out err "$DSL" sync "${SSH[@]}" "$P/tree"
    assert_eq "$rc" 0
    assert_grep "nothing to copy" out
    synced "1 copied (7 B), 7 up to date" --checksum "${SSH[@]}" "$P/tree"
    same_on_nodes 1 2 3
'

expect_success "--checksum matches names with a backslash or a newline (sha256sum escapes them)" '
    mkdir -p "$P/cs"
    printf one >"$P/cs/back\\slash"
    printf two >"$P/cs/new
line"
    synced "2 copied (6 B), 0 up to date" --checksum "${SSH[@]}" "$P/cs"
    synced "0 copied (0 B), 2 up to date" --checksum "${SSH[@]}" "$P/cs"
'

# As root every file is readable, so node1 gets a sha256sum that drops the line of
# cs2/w, as for a file it cannot read. Remote lines used to be matched by position:
# w without a line made x (stale, same size and mtime) compare with the line of y, and
# y holds exactly what x should now hold, so x was judged current.
expect_success "--checksum matches sha256sum lines by path: a file without a line shifts nothing" '
    mkdir -p "$P/cs2"
    printf www >"$P/cs2/w"; printf old >"$P/cs2/x"; printf new >"$P/cs2/y"
    run_capture rc out err "$DSL" sync "${SSH[@]}" "$P/cs2"
    assert_eq "$rc" 0
    touch -r "$P/cs2/x" ref
    printf new >"$P/cs2/x"
    touch -r ref "$P/cs2/x"
    real=$(command -v sha256sum)
    cp "$real" "$T_TMP/sha256sum.real"
    printf "#!/bin/sh\n%s \"\$@\" | grep -v \"/cs2/w\\\$\"\nexit 0\n" "$T_TMP/sha256sum.real" >"$T_TMP/sha256sum"
    chmod 755 "$T_TMP/sha256sum"
    "$CL" mnt "$D" 1 mount --bind "$T_TMP/sha256sum" "$real" || fail "cannot wrap sha256sum on node1"
    run_capture rc out err "$DSL" sync --checksum "${SSH[@]}" "$P/cs2"
    "$CL" mnt "$D" 1 umount "$real"
    cat out err
    assert_eq "$rc" 0
    assert_grep "^node1: 2 copied (6 B), 1 up to date" out
    for n in 2 3; do assert_grep "^node$n: 1 copied (3 B), 2 up to date" out; done
    for n in 1 2 3; do
        [ "$("$CL" mnt "$D" $n cat "$P/cs2/x")" = new ] || fail "node$n: x is still stale"
    done
    rm -rf "$P/cs" "$P/cs2"
    for n in 1 2 3; do "$CL" mnt "$D" $n rm -rf "$P/cs" "$P/cs2"; done
'

expect_success "--delete removes what is gone at the source; without it nothing is removed" '
    rm -rf "$P/tree/a/b/c" "$P/tree/rel-link"
    run_capture rc out err "$DSL" sync "${SSH[@]}" "$P/tree"
    assert_eq "$rc" 0
    "$CL" mnt "$D" 1 test -f "$P/tree/a/b/c/big.bin" || fail "removed without --delete"
    synced "0 copied (0 B), .* 2 deleted" --delete "${SSH[@]}" "$P/tree"
    same_on_nodes 1 2 3
'

expect_success "type changes: file to directory, directory to file, file to symlink" '
    rm "$P/tree/a/hello.txt"
    mkdir "$P/tree/a/hello.txt"
    printf "inside\n" >"$P/tree/a/hello.txt/inner"
    rmdir "$P/tree/empty-dir"
    printf "now a file\n" >"$P/tree/empty-dir"
    rm "$P/tree/run.sh"
    ln -s a "$P/tree/run.sh"
    run_capture rc out err "$DSL" sync "${SSH[@]}" "$P/tree"
    cat out err
    assert_eq "$rc" 0
    same_on_nodes 1 2 3
'

expect_success "a read-only node fails naming the host and the file; the others succeed" '
    "$CL" mnt "$D" 2 mount -o remount,ro "$P"
    printf "new\n" >"$P/tree/a/new.txt"
    run_capture rc out err "$DSL" sync "${SSH[@]}" "$P/tree"
    "$CL" mnt "$D" 2 mount -o remount,rw "$P"
    cat out err
    [ "$rc" != 0 ] || fail "exit code 0 despite a failed node"
    assert_grep "node2: cannot create .*$P/tree/a/\.new\.txt\.dsl-sync-.*: read-only file system" err
    assert_grep "sync failed on 1 of 3 hosts" err
    assert_grep "^node1: 1 copied" out
    assert_grep "^node3: 1 copied" out
    same_on_nodes 1 3
    "$CL" mnt "$D" 2 test ! -e "$P/tree/a/new.txt" || fail "node2 has the file"
'

expect_success "--dest puts PATH under another directory" '
    printf "one\n" >"$P/one"
    run_capture rc out err "$DSL" sync --dest "$P/elsewhere/" "${SSH[@]}" "$P/one"
    cat out err
    assert_eq "$rc" 0
    for n in 1 2 3; do
        assert_eq "$("$CL" mnt "$D" $n cat "$P/elsewhere/one")" one "node$n content"
    done
'

expect_success "dslaunch --sync copies first (summary shown), then the job sees the files" '
    printf "job input\n" >"$P/tree/input"
    run_capture rc out err "$DSL" "${SSH[@]}" --sync "$P/tree" --num_gpus 1 cat "$P/tree/input"
    cat out err
    assert_eq "$rc" 0
    assert_grep "^\[node3:rank 2\] job input$" out
    for n in 1 3; do assert_grep "^node$n: 1 copied (10 B)" out; done
    assert_grep "^node2: 2 copied (14 B)" out # catches up on what the read-only test missed
    same_on_nodes 1 2 3
'

expect_success "dslaunch --sync that fails on a node starts no job" '
    "$CL" mnt "$D" 3 mount -o remount,ro "$P"
    printf "more\n" >"$P/tree/more"
    run_capture rc out err "$DSL" "${SSH[@]}" --sync "$P/tree" --num_gpus 1 echo STARTED
    "$CL" mnt "$D" 3 mount -o remount,rw "$P"
    cat out err
    [ "$rc" != 0 ] || fail "exit code 0"
    assert_grep "node3: cannot create" err
    assert_grep "the job was not started" err
    assert_not_grep STARTED out
'

expect_success "an unreachable node fails with exit 200 naming it; the others are synced" '
    "$CL" sshd-stop "$D" 3
    printf "late\n" >"$P/tree/late"
    run_capture rc out err "$DSL" sync --connect-timeout 5 "${SSH[@]}" "$P/tree"
    "$CL" sshd-start "$D" 3 # a fresh, empty tmpfs: nothing below looks at node3 data
    cat out err
    assert_eq "$rc" 200
    assert_grep "sync: cannot connect to root@node3 (" err
    assert_grep "sync failed on 1 of 3 hosts" err
    same_on_nodes 1 2
'

# The nodes do not share $P: a checkpoint_dir there is refused before the first step,
# by the rank that cannot see rank 0's probe file, instead of a bare ENOENT at the
# first save; a directory every node sees (this host's /tmp) works.
expect_success "dstrain checkpoints on storage the nodes do not share: refused at start, naming it" '
    TINY="--data synthetic --synthetic-train 256 --synthetic-test 64 --synthetic-dim 16 --hidden 16 --train-batch 12 --micro-batch 2 --steps 4 --backend tcp --steps-per-print 0"
    run_capture rc out err "$DSL" "${SSH[@]}" train $TINY --checkpoint-dir "$P/ckpt"
    cat out err
    [ "$rc" != 0 ] || fail "a job with an unshared checkpoint_dir succeeded"
    assert_grep "checkpoint_dir .$P/ckpt. is not shared" err
    assert_grep "on a filesystem they share" err
    assert_not_grep "step 4/4" out
    [ -z "$(ls -A "$P/ckpt" 2>/dev/null)" ] || fail "probe left on this host: $(ls -A "$P/ckpt")"
    for n in 1 2 3; do
        [ -z "$("$CL" mnt "$D" $n sh -c "ls -A \"$P/ckpt\" 2>/dev/null")" ] || fail "probe left on node$n"
    done
    run_capture rc out err "$DSL" "${SSH[@]}" train $TINY --checkpoint-dir "$T_TMP/ckpt"
    cat err
    assert_eq "$rc" 0 "exit code with a shared checkpoint_dir"
    [ -f "$T_TMP/ckpt/latest" ] || fail "no checkpoint in the shared directory"
    [ -z "$(ls -A "$T_TMP/ckpt" | grep dstrain-shared)" ] || fail "probe file left behind"
'

# $T_TMP is outside the nodes' private tmpfs: all three see one directory there, as
# nodes see NFS or a bind mount. Exactly one node copies; an updated file is never gone.
expect_success "a destination the nodes share: copied once, said so, 5 runs of 5, never missing" '
    S=$T_TMP/shared
    mkdir -p "$S" "$T_TMP/shsrc"
    printf "small\n" >"$T_TMP/shsrc/small"
    for i in 1 2 3 4 5; do
        head -c 20000000 /dev/urandom >"$T_TMP/shsrc/big.bin"
        touch -d "@$((1600000000 + i))" "$T_TMP/shsrc/big.bin"
        [ "$i" = 1 ] || touch -d "@$((1600000000 + i))" "$T_TMP/shsrc/small"
        : >"$T_TMP/missing"
        if [ "$i" -gt 1 ]; then # a reader during the update: old or new file, never none
            (while :; do
                s=$(stat -c %s "$S/shsrc/big.bin" 2>/dev/null) || echo "missing" >>"$T_TMP/missing"
                [ -z "$s" ] || [ "$s" = 20000000 ] || echo "size $s" >>"$T_TMP/missing"
            done) &
            reader=$!
        fi
        run_capture rc out err "$DSL" sync --dest "$S/" "${SSH[@]}" "$T_TMP/shsrc"
        [ "$i" = 1 ] || { kill "$reader"; wait "$reader" 2>/dev/null || true; }
        cat out err
        assert_eq "$rc" 0 "run $i: exit code"
        copied_once "run $i" "2 copied (20.0 MB)"
        assert_grep "^sync: 3 hosts, 2 entries copied" out
        [ ! -s "$T_TMP/missing" ] || { sort "$T_TMP/missing" | uniq -c >&2; fail "run $i: big.bin was missing or partial"; }
        cmp "$T_TMP/shsrc/big.bin" "$S/shsrc/big.bin" || fail "run $i: content differs"
        [ -z "$(find "$S" -name "*.dsl-sync-*")" ] || fail "run $i: temp or claim files left"
    done
'

expect_success "--fanout below the hosts onto a shared destination: copied once, the others told" '
    S=$T_TMP/sharedk
    mkdir -p "$S" "$T_TMP/shk"
    for k in 1 2; do
        head -c 3000000 /dev/urandom >"$T_TMP/shk/data.bin"
        touch -d "@$((1600000100 + k))" "$T_TMP/shk/data.bin"
        run_capture rc out err "$DSL" sync --fanout $k --dest "$S/" "${SSH[@]}" "$T_TMP/shk"
        cat out err
        assert_eq "$rc" 0 "--fanout $k: exit code"
        copied_once "--fanout $k" "1 copied (3.0 MB)"
        assert_not_grep "up to date instead of being told" out
        cmp "$T_TMP/shk/data.bin" "$S/shk/data.bin" || fail "--fanout $k: content differs"
        [ -z "$(find "$S" -name "*.dsl-sync-*")" ] || fail "--fanout $k: temp or claim files left"
    done
    # the private tmpfs of each node: nothing shared, every node copies, no claim left
    run_capture rc out err "$DSL" sync --fanout 1 --dest "$P/fk/" "${SSH[@]}" "$T_TMP/shk"
    cat out err
    assert_eq "$rc" 0
    [ "$(grep -c "^node[123]: 1 copied (3.0 MB)" out)" = 3 ] || fail "not copied to every node"
    assert_not_grep "shares the destination" out
    for n in 1 2 3; do
        [ -z "$("$CL" mnt "$D" $n find "$P/fk" -name "*.dsl-sync-*")" ] || fail "node$n: claim left"
    done
'

expect_success "dslaunch --sync onto a shared directory starts the job" '
    printf "shared input\n" >"$T_TMP/shsrc/input"
    run_capture rc out err "$DSL" "${SSH[@]}" --sync "$T_TMP/shsrc" --num_gpus 1 cat "$T_TMP/shsrc/input"
    cat out err
    assert_eq "$rc" 0
    assert_grep "^\[node3:rank 2\] shared input$" out
    [ "$(grep -c "^node[123]: shares the destination with" out)" = 2 ] || fail "sharing not said"
'

expect_success "usage errors: no paths, missing source" '
    run_capture rc out err "$DSL" sync "${SSH[@]}"
    assert_eq "$rc" 2
    assert_grep "nothing to copy: give one or more PATHs" err
    run_capture rc out err "$DSL" sync "${SSH[@]}" "$P/no-such"
    assert_eq "$rc" 2
    assert_grep "cannot read .*no-such.*: No such file or directory" err
'

done_testing
