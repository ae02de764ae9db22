#!/usr/bin/env bash
# Ranks started by srun itself, without dslaunch, on the real Slurm test cluster (issue
# 16 item 3; run under with_slurm.sh 2, two nodes of 2 CPUs). dstrain and dsbench read
# the step's SLURM_* variables (common/rankenv.h); the rendezvous address is the first
# host of the step, resolved inside the nodes. The job's secret is exported before srun,
# which passes the caller's environment on.
# usage: with_slurm.sh 2 srun_ranks.sh DSLAUNCH DSTRAIN DSBENCH SOURCE_DIR
set -u
DSL=$1
DSTRAIN=$2
DSBENCH=$3
SRC=$4
. "$SRC/tests/e2e/slurm/slurmlib.sh"
slurm_rank_env
TINY="--data synthetic --synthetic-train 512 --synthetic-test 128 --synthetic-dim 24
      --hidden 32,16 --micro-batch 8 --steps 12 --bucket-size 200
      --steps-per-print 0 --eval-interval 6 --lr 0.01 --deterministic true"

# reference WORLD ARGS...: the same run under dslaunch on this machine
reference() {
    local world=$1
    shift
    echo "localhost slots=$world" >"hf$world"
    run_capture rc out err "$DSL" --hostfile "hf$world" "$DSTRAIN" $TINY "$@"
    [ "$rc" = 0 ] || { cat err >&2; fail "dslaunch reference at world $world exited $rc"; }
}

# same_as_reference WORLD BATCH NAME: srun -N2 -nWORLD dstrain at train batch BATCH ends
# with the parameters of the same run under dslaunch on this machine (NAME.dsl, NAME.srun)
same_as_reference() {
    reference "$1" --train-batch "$2" --save-params "$3.dsl"
    run_capture rc out err srun -N2 -n"$1" "$DSTRAIN" $TINY --train-batch "$2" --save-params "$3.srun"
    cat err >&2
    assert_eq "$rc" 0 "srun exit"
    assert_grep "ZeRO stage 0, $1 ranks" out
    cmp "$3.dsl" "$3.srun" || fail "parameters differ from the dslaunch run"
    assert_slurm_clean
}

expect_success "srun -N2 -n4 dstrain: 2 nodes x 2 ranks, bit for bit as dslaunch at world 4" '
    same_as_reference 4 32 p
'

expect_success "srun -N2 -n3 dstrain: uneven (2+1) tasks per node, bit for bit as dslaunch at world 3" '
    same_as_reference 3 24 p3
'

expect_success "srun -N2 -n4 dsbench: every rank right across the two nodes, the ranks agree" '
    run_capture rc out err srun -N2 -n4 "$DSBENCH" -b 1K -e 64K -f 8 -o allreduce
    cat err >&2
    assert_eq "$rc" 0
    assert_grep "world 4" out
    assert_grep "^# wrong values: 0$" out
    assert_grep "^# ranks agree: yes$" out
    assert_slurm_clean
'

expect_success "a dstrain in a batch script, not under srun, runs alone and equals world 1" '
    reference 1 --train-batch 32 --save-params p1.dsl
    printf "#!/bin/sh\nexec %s %s --train-batch 32 --save-params %s\n" "$DSTRAIN" "$(echo $TINY)" \
        "$PWD/p1.batch" >job.sh
    run_capture rc out err sbatch --wait -N2 -n4 -o "$PWD/batch.out" job.sh
    cat err batch.out >&2
    assert_eq "$rc" 0 "sbatch --wait exit"
    assert_grep ", 1 ranks" batch.out
    cmp p1.dsl p1.batch || fail "parameters differ from the world-1 run"
    assert_slurm_clean
'

expect_success "srun -m arbitrary puts task 0 on n2: refused without MASTER_ADDR, right with it" '
    printf "n2\nn1\nn2\nn1\n" >hosts
    run_capture rc out err env SLURM_HOSTFILE=$PWD/hosts srun -n4 -m arbitrary "$DSBENCH" -b 1K -e 1K
    assert_eq "$rc" 2
    assert_grep "arbitrary distribution, where task 0 need not run on the first node of SLURM_STEP_NODELIST: set MASTER_ADDR" err
    run_capture rc out err env SLURM_HOSTFILE=$PWD/hosts MASTER_ADDR=n2 srun -n4 -m arbitrary \
        "$DSBENCH" -b 1K -e 16K -f 4 -o allreduce
    cat err >&2
    assert_eq "$rc" 0
    assert_grep "^# ranks agree: yes$" out
    assert_slurm_clean
'

expect_success "a rank of an srun step with a wrong SLURM_STEP_NODELIST names the variable" '
    # srun sets SLURM_STEP_NODELIST itself, so the rank overrides it
    run_capture rc out err srun -N1 -n1 sh -c \
        "SLURM_STEP_NODELIST=\"n[2-1]\" exec \"$DSTRAIN\" $(echo $TINY) --train-batch 32"
    assert_eq "$rc" 2
    assert_grep "dstrain: error: SLURM_STEP_NODELIST: bad host range .n\[2-1\].: reversed range .2-1.$" err
    assert_slurm_clean
'

done_testing
