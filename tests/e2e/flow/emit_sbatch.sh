#!/usr/bin/env bash
# Flow tier: `dslaunch --dry-run --emit sbatch` asks Slurm for the warning signal and
# requeues exactly when the ranks save on SIGUSR1, whichever way that is turned on
# (docs/slurm.md, "A batch script from a plan"): dstrain's --save-on-signal flag, or
# dstrain.save_on_signal in its --config files (the last file that sets it wins, the
# flag overrides files, a bare name is found among the shipped configs); and a comment
# says what could not be known (an unreadable config, a program other than dstrain).
# Only the emitted text is checked here (test_emit runs the recipe, slurm_emit submits
# it to a real Slurm).
# usage: emit_sbatch.sh DSLAUNCH DSTRAIN SOURCE_DIR
set -u
DSL=$1
DSTRAIN=$2
SRC=$3
. "$SRC/tests/e2e/flow/lib.sh"
unset SLURM_JOB_ID SLURM_JOB_NODELIST

# emit OUT ARGS...: the script of `dslaunch --dry-run --emit sbatch ARGS` into OUT
# (stderr into OUT.err), which must parse as sh
emit() {
    local out=$1 rc
    shift
    run_capture rc "$out" "$out.err" "$DSL" --dry-run --emit sbatch --num_nodes 2 "$@"
    cat "$out.err" >&2
    assert_eq "$rc" 0 "dslaunch --dry-run --emit sbatch $*"
    sh -n "$out" || fail "$out is not valid sh"
}

# requeues OUT / execs OUT: the two shapes of script
requeues() {
    assert_grep "^#SBATCH --signal=B:USR1@90$" "$1"
    assert_grep "^#SBATCH --requeue$" "$1"
    assert_grep "^trap .* USR1$" "$1"
    assert_grep "scontrol requeue" "$1"
    assert_not_grep "^exec " "$1"
}
execs() {
    assert_not_grep "^#SBATCH --signal" "$1"
    assert_not_grep "^#SBATCH --requeue" "$1"
    assert_not_grep "^trap " "$1"
    assert_grep "^exec '" "$1"
}

expect_success "dstrain.save_on_signal in a --config asks for the warning and requeues" '
    cd "$T_TMP"
    echo "{\"dstrain\": {\"save_on_signal\": true}}" >on.json
    emit a.sh train --config on.json --checkpoint-dir ck
    requeues a.sh
    assert_grep "^# the ranks save a checkpoint on Slurm.s warning: dstrain.save_on_signal is true in --config .on.json." a.sh
    assert_grep "^# the program has no --resume: a requeued start begins afresh" a.sh
    # --config=FILE, a path to dstrain, a nested path from another directory
    mkdir -p sub/cfg && cp on.json sub/cfg/x.json
    emit b.sh "$DSTRAIN" --config=sub/cfg/x.json
    requeues b.sh
    assert_grep "true in --config .sub/cfg/x.json." b.sh
'

expect_success "dstrain with a checkpoint dir saves on a signal by default: warning and requeue" '
    cd "$T_TMP"
    emit a.sh train --checkpoint-dir ck --resume auto
    requeues a.sh
    assert_grep "^# the ranks save a checkpoint on Slurm.s warning: dstrain does by default when it has a checkpoint directory (--checkpoint-dir)" a.sh
    echo "{\"dstrain\": {\"checkpoint_dir\": \"ck\"}}" >ck.json
    emit b.sh train --config ck.json
    requeues b.sh
    assert_grep "by default when it has a checkpoint directory (dstrain.checkpoint_dir in --config .ck.json.)" b.sh
    # turned off in a file: no warning; no checkpoint dir at all: none either
    echo "{\"dstrain\": {\"checkpoint_dir\": \"ck\", \"save_on_signal\": false}}" >ckoff.json
    emit c.sh train --config ckoff.json
    execs c.sh
    emit d.sh train --steps 3
    execs d.sh
    # turned off with --no-save-on-signal: no warning; the last of the two flags decides
    emit e.sh train --checkpoint-dir ck --save-on-signal --no-save-on-signal
    execs e.sh
    assert_grep "^# no warning signal asked for: the program.s arguments hold --no-save-on-signal$" e.sh
    emit f.sh train --checkpoint-dir ck --no-save-on-signal --save-on-signal
    requeues f.sh
'

expect_success "dstrain.resume in a --config counts as resuming" '
    cd "$T_TMP"
    echo "{\"dstrain\": {\"save_on_signal\": true, \"resume\": \"auto\"}}" >onr.json
    emit a.sh train --config onr.json
    requeues a.sh
    assert_not_grep "has no --resume" a.sh
    assert_not_grep "begins afresh" a.sh.err
'

expect_success "the last --config that sets the key wins, and the flag overrides every file" '
    cd "$T_TMP"
    echo "{\"dstrain\": {\"save_on_signal\": true}}" >on.json
    echo "{\"train_batch_size\": 8, \"dstrain\": {\"save_on_signal\": false}}" >off.json
    echo "{\"train_batch_size\": 8}" >none.json
    emit a.sh train --config on.json --config off.json --config none.json
    execs a.sh
    assert_grep "^# no warning signal asked for: dstrain.save_on_signal is false in --config .off.json." a.sh
    emit b.sh train --config off.json --config on.json --config none.json
    requeues b.sh
    assert_grep "true in --config .on.json." b.sh
    emit c.sh train --config off.json --save-on-signal --resume auto
    requeues c.sh
    assert_grep "^# the ranks save a checkpoint on Slurm.s warning: the program.s arguments hold --save-on-signal" c.sh
    emit d.sh train --config none.json
    execs d.sh
    assert_not_grep "save_on_signal" d.sh
'

expect_success "a --config that cannot be read here is said to be unknown, in the script and on stderr" '
    cd "$T_TMP"
    echo "{ not json" >broken.json
    emit a.sh train --config nowhere.json --config broken.json
    execs a.sh
    assert_grep "^# could not read --config .nowhere.json. while writing this script (No such file or directory): whether it turns dstrain.save_on_signal on is not known" a.sh
    assert_grep "^# could not read --config .broken.json. while writing this script (not a JSON object)" a.sh
    assert_grep "^# so no warning signal is asked for" a.sh
    assert_grep "whether the ranks save a checkpoint on SIGUSR1 could not be known here" a.sh.err
    # with the flag the files do not matter (it overrides them)
    emit b.sh train --config nowhere.json --save-on-signal
    requeues b.sh
    assert_not_grep "could not read" b.sh
    # a name holding a newline cannot end the comment and start a command
    emit c.sh train --config "x
touch pwned #.json"
    assert_grep "^# could not read --config .x?touch pwned #.json. while writing" c.sh
    grep -A1 "^# could not read --config .x?touch" c.sh | tail -n 1 | grep -q "^# so no warning" ||
        fail "the comment was cut by the newline"
'

expect_success "a program other than dstrain: the script says its saving cannot be known" '
    cd "$T_TMP"
    echo "{\"dstrain\": {\"save_on_signal\": true}}" >on.json
    emit a.sh /bin/true --config on.json
    execs a.sh
    assert_grep "^# .true. is not dstrain: whether it saves a checkpoint on SIGUSR1 cannot be known here" a.sh
    assert_grep "could not be known here" a.sh.err
    # its own --save-on-signal is taken at its word, as before
    emit b.sh /bin/true --save-on-signal
    requeues b.sh
'

expect_success "a bare --config name is found among the configs shipped beside dstrain" '
    # an installed tree: bin/dslaunch, bin/dstrain, share/dslaunch/configs/NAME.json
    mkdir -p "$T_TMP/inst/bin" "$T_TMP/inst/share/dslaunch/configs" "$T_TMP/work"
    cp "$DSL" "$T_TMP/inst/bin/dslaunch"
    cp "$DSTRAIN" "$T_TMP/inst/bin/dstrain"
    echo "{\"dstrain\": {\"save_on_signal\": true}}" >"$T_TMP/inst/share/dslaunch/configs/sig.json"
    cd "$T_TMP/work"
    DSL="$T_TMP/inst/bin/dslaunch" emit a.sh train --config sig
    requeues a.sh
    assert_grep "true in --config .sig." a.sh
    # dstrain through a link looks beside the file the link names, as dstrain does
    mkdir -p "$T_TMP/links" && ln -sf "$T_TMP/inst/bin/dstrain" "$T_TMP/links/dstrain"
    emit l.sh "$T_TMP/links/dstrain" --config sig
    requeues l.sh
    # a file of that name in the working directory comes first, as in dstrain
    echo "{}" >sig
    DSL="$T_TMP/inst/bin/dslaunch" emit b.sh train --config sig
    execs b.sh
'

done_testing
