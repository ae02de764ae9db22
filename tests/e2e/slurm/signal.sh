#!/usr/bin/env bash
# Slurm's warning signal reaching dstrain (issue 16 item 2, the trainer's part; run under
# with_slurm.sh 2): ranks started by srun get SIGUSR1 from Slurm (`scancel -s USR1`, the
# same delivery as `--signal=USR1@SECONDS` before the time limit), stop together after
# the current step with --save-on-signal, save a checkpoint and exit 138 (128 + SIGUSR1,
# for requeue scripts); the resumed run equals the uninterrupted one bit for bit.
# The same through dslaunch: `--signal=B:USR1@SECONDS` signals the batch shell, which
# is dslaunch when the script execs it; dslaunch passes SIGUSR1 to every rank on the
# control channel (the slurm transport here) and exits with the ranks' 138.
# usage: with_slurm.sh 2 signal.sh DSLAUNCH DSTRAIN SOURCE_DIR
set -u
DSL=$1
DSTRAIN=$2
SRC=$3
. "$SRC/tests/e2e/slurm/slurmlib.sh"
slurm_rank_env
SIG="--data synthetic --synthetic-train 4096 --synthetic-test 64 --synthetic-dim 128
     --hidden 256,256 --train-batch 64 --micro-batch 16 --steps 400 --lr 0.001
     --steps-per-print 0 --eval-interval 0 --deterministic true"

# signal_at_step NAME METRICS LOG SCANCEL_ARGS...: once the job NAME, started in the
# background as $bg, wrote a training step to METRICS, signal it with scancel
# SCANCEL_ARGS...; then wait for it (its exit status in rc) and show LOG
signal_at_step() {
    local name=$1 metrics=$2 log=$3 job
    shift 3
    for _ in $(seq 600); do grep -q "\"type\":\"step\"" "$metrics" 2>/dev/null && break; sleep 0.1; done
    grep -q "\"type\":\"step\"" "$metrics" || { kill $bg; cat "$log" >&2; fail "no training step"; }
    job=$(squeue -h -n "$name" -o %i)
    [ -n "$job" ] || fail "no job named $name"
    scancel "$@" "$job"
    rc=0
    wait $bg || rc=$?
    cat "$log" >&2
}

# resume_saved CKDIR PARAMS: the signal left a checkpoint in CKDIR from before the last
# step, and the run resumed from it ends well, its parameters in PARAMS
resume_saved() {
    tag=$(cat "$1/latest") || fail "no checkpoint written on SIGUSR1"
    [ "$tag" != global_step400 ] || fail "the run finished before the signal: $tag"
    run_capture rc out err srun -N2 -n4 "$DSTRAIN" $SIG --checkpoint-dir "$PWD/$1" \
        --resume latest --save-params "$2"
    cat err >&2
    assert_eq "$rc" 0 "resumed run"
}

expect_success "SIGUSR1 from Slurm: the ranks save, exit 138, and the resumed run equals the full one" '
    srun -N2 -n4 -J dsl-usr1 "$DSTRAIN" $SIG --save-on-signal --checkpoint-dir "$PWD/ck" \
        --metrics "$PWD/m.json" >run.out 2>run.err &
    bg=$!
    signal_at_step dsl-usr1 m.json run.err -s USR1
    assert_eq "$rc" 138 "srun exit (128 + SIGUSR1)"
    resume_saved ck p.resumed
    run_capture rc out err srun -N2 -n4 "$DSTRAIN" $SIG --save-params p.full
    assert_eq "$rc" 0 "full run"
    cmp p.full p.resumed || fail "the resumed run differs from the uninterrupted one"
    assert_slurm_clean
'

expect_success "SIGUSR1 to a batch script that execs dslaunch (B:USR1): every rank saves, exit 138" '
    [ -e p.full ] || srun -N2 -n4 "$DSTRAIN" $SIG --save-params p.full >/dev/null
    printf "#!/bin/sh\nexec %s %s %s --save-on-signal --checkpoint-dir %s/ckb --metrics %s/mb.json\n" \
        "$DSL" "$DSTRAIN" "$(echo $SIG)" "$PWD" "$PWD" >job.sh
    sbatch --wait -N2 --ntasks-per-node=2 -J dsl-busr1 -o "$PWD/batch.out" job.sh >sb.out 2>&1 &
    bg=$!
    signal_at_step dsl-busr1 mb.json batch.out -b -s USR1
    assert_eq "$rc" 138 "sbatch --wait exit (the job s: dslaunch s, the ranks 128 + SIGUSR1)"
    assert_grep "got SIGUSR1: passed it to the ranks of 2 nodes" batch.out
    resume_saved ckb p.bresumed
    cmp p.full p.bresumed || fail "the resumed run differs from the uninterrupted one"
    assert_slurm_clean
'

expect_success "SIGUSR1 to every task of the job (scancel --full, --signal without B:): agents pass it on, every rank saves once, exit 138" '
    # the agents are the tasks of dslaunch s step: they must not die of it; dslaunch (the
    # batch shell) passes it on too, so each rank gets it twice and saves once
    printf "#!/bin/sh\nexec %s %s %s --save-on-signal --checkpoint-dir %s/ckf --metrics %s/mf.json\n" \
        "$DSL" "$DSTRAIN" "$(echo $SIG)" "$PWD" "$PWD" >jobf.sh
    sbatch --wait -N2 --ntasks-per-node=2 -J dsl-fusr1 -o "$PWD/batchf.out" jobf.sh >sbf.out 2>&1 &
    bg=$!
    signal_at_step dsl-fusr1 mf.json batchf.out --full -s USR1
    assert_eq "$rc" 138 "sbatch --wait exit"
    tag=$(cat ckf/latest) || fail "no checkpoint written on SIGUSR1"
    [ -d "ckf/$tag" ] || fail "latest names $tag, which is not there: $(ls ckf)"
    assert_slurm_clean
'

done_testing
