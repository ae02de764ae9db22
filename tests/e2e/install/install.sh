#!/usr/bin/env bash
# The installed tree works on its own: `cmake --install BUILD --prefix P`, then, from a
# directory with no configs and a PATH without the build tree, P/bin/dslaunch runs the
# bundled trainer (a shipped config named by its bare name) and dsbench; the man pages
# and the bash completion are there and describe the real options.
# usage: install.sh BUILD_DIR SOURCE_DIR
set -u
BUILD=$1
SRC=$2
. "$SRC/tests/e2e/flow/lib.sh"
P=$T_TMP/prefix
export OMP_NUM_THREADS=1
cd "$T_TMP"

expect_success "cmake --install puts the three programs, configs, docs, man pages and completion in place" '
    cmake --install "$BUILD" --prefix "$P" >install.log 2>&1 || { cat install.log; fail "cmake --install failed"; }
    for f in bin/dslaunch bin/dstrain bin/dsbench; do [ -x "$P/$f" ] || fail "missing $f"; done
    for f in fashion_mnist.json fashion_mnist_zero2.json; do
        [ -f "$P/share/dslaunch/configs/$f" ] || fail "missing config $f"
    done
    for f in README.md config.md exit-codes.md hostfile.example; do
        [ -f "$P/share/doc/dslaunch/$f" ] || fail "missing doc $f"
    done
    for p in dslaunch dstrain dsbench; do
        [ -f "$P/share/man/man1/$p.1" ] || fail "missing man page $p.1"
        [ -e "$P/share/bash-completion/completions/$p" ] || fail "missing completion for $p"
    done
'

expect_success "installed dslaunch runs train with a shipped config named bare, from an empty directory" '
    mkdir -p empty && cd empty
    run_capture rc out err env -i HOME="$HOME" PATH=/usr/bin:/bin OMP_NUM_THREADS=1 \
        "$P/bin/dslaunch" --include localhost:0,1 train --config fashion_mnist \
        --data synthetic --synthetic-train 512 --synthetic-test 128 --synthetic-dim 24 \
        --hidden 32 --train-batch 32 --micro-batch 16 --steps 8 --backend tcp \
        --steps-per-print 4 --eval-interval 8
    cat out err
    assert_eq "$rc" 0 "exit code"
    assert_grep "^\[rank 0\] summary: steps 8 " out
'

expect_success "installed dslaunch runs dsbench" '
    run_capture rc out err env -i HOME="$HOME" PATH=/usr/bin:/bin \
        "$P/bin/dslaunch" --include localhost:0,1 dsbench -b 1K -e 4K -n 2 -w 1
    cat out err
    assert_eq "$rc" 0 "exit code"
    assert_grep "4096" out
'

expect_success "a bare --config that names no shipped config is still an error naming it, and the shipped ones" '
    run_capture rc out err "$P/bin/dstrain" --config no_such_config --steps 1
    cat out err
    assert_eq "$rc" 2
    assert_grep "no_such_config" err
    assert_grep "(the shipped configs in .$P/share/dslaunch/configs. are: .*fashion_mnist, fashion_mnist_zero0, fashion_mnist_zero2, " err
    run_capture rc out err "$P/bin/dstrain" --config ./no_such_config --steps 1
    assert_eq "$rc" 2
    assert_not_grep "shipped" err
'

expect_success "the man pages carry every option of --help" '
    for p in dslaunch dstrain dsbench; do
        page="$P/share/man/man1/$p.1"
        head -1 "$page" | grep -q "^\.TH ${p^^} 1" || fail "$p.1 has no .TH line"
        "$P/bin/$p" --help | sed -n "s/^ *\(-[A-Za-z0-9], \)\{0,1\}\(--[A-Za-z0-9][-A-Za-z0-9_]*\).*/\2/p" >opts
        [ -s opts ] || fail "no options in $p --help"
        while read -r o; do
            grep -qF -- "$(printf %s "$o" | sed "s/-/\\\\-/g")" "$page" || fail "$p.1 lacks $o"
        done <opts
    done
    grep -q "^\.SS dslaunch sync" "$P/share/man/man1/dslaunch.1" || fail "dslaunch.1 lacks the sync command"
    # a synopsis line and what it does stay apart (they ran together: "FILE copy files")
    grep -qF ".B dslaunch sync PATH... \-\-hostfile FILE" "$P/share/man/man1/dslaunch.1" || fail "no sync synopsis"
    grep -qF "\(em copy files to every node" "$P/share/man/man1/dslaunch.1" || fail "synopsis comment not set apart"
    if command -v man >/dev/null; then
        MANWIDTH=80 man -l "$P/share/man/man1/dslaunch.1" 2>manerr | grep -q -- "--hostfile" || fail "man cannot render dslaunch.1"
    fi
'

expect_success "the man pages give the exit codes a section of their own and dstrain its commands" '
    page="$P/share/man/man1/dslaunch.1"
    grep -q "^\.SH EXIT STATUS" "$page" || fail "dslaunch.1 has no EXIT STATUS section"
    sed -n "/^\.SH DESCRIPTION/,/^\.SH OPTIONS/p" "$page" | grep -q "202 preflight" &&
        fail "the exit codes ran into the DESCRIPTION"
    sed -n "/^\.SH EXIT STATUS/,/^\.SH COMMANDS/p" "$page" | grep -q "202 preflight" ||
        fail "EXIT STATUS lacks the exit codes"
    for c in consolidate tokenize sample; do
        grep -q "^\.SS dstrain $c" "$P/share/man/man1/dstrain.1" || fail "dstrain.1 lacks dstrain $c"
    done
    grep -qF "\-\-tag TAG" "$P/share/man/man1/dstrain.1" || fail "dstrain.1 lacks consolidate --tag"
'

expect_success "bash completion offers the options of dslaunch, of train and of the subcommands" '
    complete_words() { # WORDS...: the completions of the last word
        bash -c ". \"$P/share/bash-completion/completions/dslaunch\"
                 COMP_WORDS=(\"\$@\"); COMP_CWORD=\$((\$# - 1)); _dslaunch
                 printf \"%s\n\" \"\${COMPREPLY[@]}\"" _ "$@"
    }
    complete_words "$P/bin/dslaunch" --hostf >c1; assert_grep "^--hostfile$" c1
    complete_words "$P/bin/dslaunch" -H h train --zero >c2; assert_grep "^--zero-stage$" c2
    complete_words "$P/bin/dslaunch" sync --check >c3; assert_grep "^--checksum$" c3
    complete_words "$P/bin/dslaunch" --launcher p >c4; assert_grep "^pdsh$" c4
    complete_words "$P/bin/dslaunch" --launcher s >c5; assert_grep "^slurm$" c5; assert_grep "^ssh$" c5
    assert_not_grep "^--zero-stage$" c1
'

done_testing
