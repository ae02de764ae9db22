#!/usr/bin/env bash
# Ranks started by mpirun itself, without dslaunch (issue 16 item 3): dstrain and
# dsbench read Open MPI's rank variables (common/rankenv.h). On one node the rendezvous
# address is 127.0.0.1; the job's secret comes from the caller (mpirun -x).
# usage: ranks.sh DSLAUNCH DSTRAIN DSBENCH SOURCE_DIR         exit 0 pass, 1 fail, 77 skip
set -u
DSL=$1
DSTRAIN=$2
DSBENCH=$3
SRC=$4
. "$SRC/tests/e2e/flow/lib.sh"
cd "$T_TMP" || exit 1 # every file a test writes is in its own temporary directory
command -v mpirun >/dev/null || { echo "1..0 # SKIP mpirun is not installed (apt-get install openmpi-bin)"; exit 77; }
export OMP_NUM_THREADS=1 DSLAUNCH_COMM_TIMEOUT=120 DSLAUNCH_STORE_TIMEOUT=120
export DSLAUNCH_RUN_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
unset CUDA_VISIBLE_DEVICES RANK WORLD_SIZE MASTER_ADDR MASTER_PORT
MPI=(mpirun --oversubscribe -x DSLAUNCH_RUN_TOKEN -x OMP_NUM_THREADS -x DSLAUNCH_COMM_TIMEOUT
     -x DSLAUNCH_STORE_TIMEOUT)
[ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
TINY="--data synthetic --synthetic-train 512 --synthetic-test 128 --synthetic-dim 24
      --hidden 32,16 --train-batch 32 --micro-batch 8 --steps 12 --bucket-size 200
      --steps-per-print 0 --eval-interval 6 --lr 0.01 --deterministic true"
# a port below the ephemeral range; a clash with another test fails loudly
free_port() { echo $(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000 )); }

expect_success "mpirun -np 4 dstrain trains at world 4, bit for bit as under dslaunch" '
    echo "localhost slots=4" >hf
    run_capture rc out err "$DSL" --hostfile hf "$DSTRAIN" $TINY --save-params p.dsl
    assert_eq "$rc" 0 "dslaunch exit"
    port=$(free_port)
    run_capture rc out err "${MPI[@]}" -x MASTER_PORT=$port -np 4 "$DSTRAIN" $TINY --save-params p.mpi
    cat err >&2
    assert_eq "$rc" 0 "mpirun exit"
    assert_grep "ZeRO stage 0, 4 ranks" out
    cmp p.dsl p.mpi || fail "parameters differ from the dslaunch run"
'

expect_success "mpirun -np 3 dsbench: every rank right, the ranks agree" '
    # (not on the default port 29500: dslaunch runs of other tests take it at any time;
    # test_rankenv checks the default)
    run_capture rc out err "${MPI[@]}" -x MASTER_PORT=$(free_port) -np 3 "$DSBENCH" -b 1K -e 16K -f 4 -o allreduce
    assert_eq "$rc" 0
    assert_grep "world 3" out
    assert_grep "^# wrong values: 0$" out
    assert_grep "^# ranks agree: yes$" out
'

expect_success "dslaunch under mpirun: dslaunch own RANK wins over the OMPI_ variables" '
    echo "localhost slots=2" >hf2
    run_capture rc out err "${MPI[@]}" -np 1 "$DSL" --hostfile hf2 "$DSTRAIN" $TINY --train-batch 16 \
        --save-params p.inner
    assert_eq "$rc" 0
    assert_grep "ZeRO stage 0, 2 ranks" out
'

done_testing
