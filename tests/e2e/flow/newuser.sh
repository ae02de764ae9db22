#!/usr/bin/env bash
# Flow tests of what a new user meets in the second week (issue 33): which 'train'
# runs, how many ranks fit a node (--oversubscribe), logs of earlier runs and attempts
# (--log-dir), one config error said once. The real dslaunch on the local transport.
# usage: newuser.sh DSLAUNCH WORKER SOURCE_DIR [DSTRAIN]
set -u
DSL=$1
W=$2
SRC=$3
DST=${4:-}
. "$SRC/tests/e2e/flow/lib.sh"
unset CUDA_VISIBLE_DEVICES OMP_NUM_THREADS DSLAUNCH_LOCAL_SLOTS
cd "$T_TMP"

expect_success "a train of the user's PATH: dslaunch says dstrain runs, and how to run the other" '
    mkdir -p bin
    printf "#!/bin/sh\necho mine\n" >bin/train
    chmod +x bin/train
    run_capture rc out err env PATH="$T_TMP/bin:$PATH" "$DSL" --dry-run train
    assert_eq "$rc" 0
    assert_grep ".train. runs dslaunch.s trainer .*dstrain., not .$T_TMP/bin/train. of your PATH; to run that one, give its path: dslaunch \[options\] $T_TMP/bin/train" err
    # with its path, the user s own runs, and nothing is said
    run_capture rc out err env PATH="$T_TMP/bin:$PATH" "$DSL" --num_gpus 1 "$T_TMP/bin/train"
    assert_eq "$rc" 0
    assert_grep "^\[rank 0\] mine$" out
    assert_not_grep "trainer" err
    # no train on PATH: nothing to say
    run_capture rc out err "$DSL" --dry-run train
    assert_eq "$rc" 0
    assert_not_grep "of your PATH" err
'

expect_success "an error every rank prints is not printed once more by the summary" '
    # each rank says it, then waits for the other to have said it too
    cat >saysbad <<"EOS"
#!/bin/sh
echo "ds.json: bad value" >&2
: >"said.$RANK"
i=0
while [ ! -e said.0 ] || [ ! -e said.1 ]; do sleep 0.05; i=$((i+1)); [ $i -lt 400 ] || break; done
exit 2
EOS
    chmod +x saysbad
    run_capture rc out err "$DSL" --num_gpus 2 --oversubscribe ./saysbad
    assert_eq "$rc" 2
    assert_eq "$(grep -c "ds.json: bad value" err)" 2 "times the error is printed"
    assert_grep "exited with code 2" err
    assert_not_grep "last lines of rank" err
    if [ -n "$DST" ]; then
        printf "{\"train_batch_size\": 7, \"train_micro_batch_size_per_gpu\": 2}\n" >bad.json
        run_capture rc out err "$DSL" --num_gpus 2 --oversubscribe "$DST" --config bad.json
        assert_eq "$rc" 2
        [ "$(grep -c "batch sizes do not add up" err)" -le 2 ] || fail "said more than once a rank"
        assert_not_grep "last lines of rank" err
    fi
    # (a rank with more stderr than the summary quotes keeps its quote: flow_launch)
'

expect_success "the same error line of 4 ranks is shown once, and which ranks wrote it is said once" '
    # every rank says it, and exits only once all 4 have said it: 4 copies reach dslaunch
    cat >says4 <<"EOS"
#!/bin/sh
echo "error: config ds.json:3: bad value for train_batch_size" >&2
echo "ds.json: checked by rank $RANK" >&2
: >"said4.$RANK"
i=0
while [ "$(ls said4.* | wc -l)" -lt 4 ]; do sleep 0.05; i=$((i+1)); [ $i -lt 400 ] || break; done
exit 2
EOS
    chmod +x says4
    rm -f said4.*
    run_capture rc out err "$DSL" --num_gpus 4 --oversubscribe --log-dir logs4 ./says4
    cat err
    assert_eq "$rc" 2
    assert_eq "$(grep -c "bad value for train_batch_size" out err | awk -F: "{s+=\$2} END {print s}")" 1 \
        "copies of the error line"
    assert_eq "$(grep -c "wrote the same error line as rank" err)" 1 "notes of the fold"
    assert_grep "^dslaunch: ranks [0-3][-, 0-3]* wrote the same error line as rank [0-3] (shown once above)$" err
    # lines that differ, and lines that are no error, are all shown
    assert_eq "$(grep -c "ds.json: checked by rank" err)" 4
    # the --log-dir files keep every line of every rank
    assert_eq "$(cat logs4/* | grep -c "bad value for train_batch_size")" 4
    if [ -n "$DST" ]; then
        printf "{\"train_batch_size\": \"x\"}\n" >bad4.json
        run_capture rc out err "$DSL" --num_gpus 4 --oversubscribe "$DST" --config bad4.json
        cat err
        assert_eq "$rc" 2
        assert_eq "$(cat out err | grep -c "expected an integer for .train_batch_size.")" 1 \
            "copies of dstrain s config error"
        assert_not_grep "last lines of rank" err
    fi
'

expect_success "one oversubscription rule: counts above what the node has need --oversubscribe" '
    export DSLAUNCH_LOCAL_SLOTS=2
    for how in "--nproc_per_node 4" "--nnodes 1 --nproc_per_node 4" "--num_gpus 4" \
               "--num_processes 4"; do
        run_capture rc out err "$DSL" $how "$W" env
        assert_eq "$rc" 2 "$how"
        assert_grep "error: ${how#--nnodes 1 } asks for 4 ranks on this node, but it has 2 slots (DSLAUNCH_LOCAL_SLOTS): add --oversubscribe" err
        assert_not_grep "RANK=" out
        run_capture rc out err "$DSL" --oversubscribe $how "$W" env
        assert_eq "$rc" 0 "$how --oversubscribe"
        assert_grep "^\[rank 3\] WORLD_SIZE=4$" out
    done
    # a hostfile line states the slots itself: believed as written
    echo "localhost slots=4" >hf4
    run_capture rc out err "$DSL" --hostfile hf4 "$W" env
    assert_eq "$rc" 0
    assert_grep "^\[rank 3\] WORLD_SIZE=4$" out
    # and a filter cannot add slots to it, --oversubscribe or not
    run_capture rc out err "$DSL" --hostfile hf4 --oversubscribe --num_gpus 5 "$W" env
    assert_eq "$rc" 2
    assert_grep "num_gpus 5 but host .localhost. has only 4 slots" err
'

expect_success "--log-dir never replaces an earlier run: refused, or replaced with --log-dir-overwrite" '
    export DSLAUNCH_LOCAL_SLOTS=4
    run_capture rc out err "$DSL" --log-dir runlogs --num_gpus 3 sh -c "echo first \$RANK"
    assert_eq "$rc" 0
    assert_grep "^first 2$" runlogs/rank2.log
    # the rerun is refused before anything starts, and the first run s logs stay
    run_capture rc out err "$DSL" --log-dir runlogs --num_gpus 2 sh -c "echo second \$RANK"
    assert_eq "$rc" 2
    assert_grep "^dslaunch: error: --log-dir: directory .runlogs. holds the logs of an earlier run (.rank0.log. and 2 more), which dslaunch does not overwrite: give another --log-dir, move them away, or add --log-dir-overwrite to replace them$" err
    assert_not_grep "second" out
    assert_grep "^first 0$" runlogs/rank0.log
    # asked to, it replaces them all: no rank2.log of the larger run is left behind
    run_capture rc out err "$DSL" --log-dir runlogs --log-dir-overwrite --num_gpus 2 sh -c "echo second \$RANK"
    assert_eq "$rc" 0
    assert_grep "^second 0$" runlogs/rank0.log
    assert_not_grep "first" runlogs/rank0.log
    [ ! -e runlogs/rank2.log ] || fail "an earlier run s rank2.log was left"
    # an attempt that started no rank (--check here; a failed preflight) leaves no logs
    run_capture rc out err "$DSL" --check --log-dir checked --num_gpus 2
    assert_eq "$rc" 0
    [ -z "$(ls checked)" ] || fail "--check left logs: $(ls checked)"
    run_capture rc out err "$DSL" --log-dir checked --num_gpus 2 true
    assert_eq "$rc" 0
    # other files in the directory are not the logs of a run
    mkdir -m 0755 mixed && echo notes >mixed/notes.txt && echo x >mixed/rank0.log.bak
    run_capture rc out err "$DSL" --log-dir mixed --num_gpus 1 true
    assert_eq "$rc" 0
    run_capture rc out err "$DSL" --log-dir-overwrite --num_gpus 1 true
    assert_eq "$rc" 2
    assert_grep "error: --log-dir-overwrite replaces the logs of an earlier run in --log-dir, which is not given" err
'

expect_success "--log-dir: restarts get a file per rank per attempt; a requeued Slurm job s start keeps the first start s" '
    export DSLAUNCH_LOCAL_SLOTS=4
    # each rank says which attempt it is in, waits for the other to have said it, and
    # fails but in the third attempt
    cat >tries <<"EOS"
#!/bin/sh
echo "try $DSLAUNCH_RESTART_COUNT"
: >"tried.$DSLAUNCH_RESTART_COUNT.$RANK"
i=0
while [ ! -e "tried.$DSLAUNCH_RESTART_COUNT.0" ] || [ ! -e "tried.$DSLAUNCH_RESTART_COUNT.1" ]; do
    sleep 0.05; i=$((i+1)); [ $i -lt 400 ] || break
done
[ "$DSLAUNCH_RESTART_COUNT" = 2 ]
EOS
    chmod +x tries
    run_capture rc out err "$DSL" --log-dir rlogs --max-restarts 2 --num_gpus 2 ./tries
    assert_eq "$rc" 0
    for k in 0 1; do
        assert_eq "$(cat rlogs/rank$k.log)" "try 0" "rank $k, first attempt"
        assert_eq "$(cat rlogs/rank$k.restart1.log)" "try 1" "rank $k, restart 1"
        assert_eq "$(cat rlogs/rank$k.restart2.log)" "try 2" "rank $k, restart 2"
    done
    # Slurm requeued the batch job (same job, SLURM_RESTART_COUNT=1): its logs go beside
    echo "localhost slots=2" >hf2
    run_capture rc out err env SLURM_JOB_ID=77 SLURM_RESTART_COUNT=1 "$DSL" --hostfile hf2 --log-dir rlogs sh -c "echo requeued"
    assert_eq "$rc" 0
    assert_eq "$(cat rlogs/rank1.requeue1.log)" "requeued"
    assert_eq "$(cat rlogs/rank1.log)" "try 0"
    # a second start with the same requeue count is another run
    run_capture rc out err env SLURM_JOB_ID=77 SLURM_RESTART_COUNT=1 "$DSL" --hostfile hf2 --log-dir rlogs sh -c "echo again"
    assert_eq "$rc" 2
    assert_grep "holds the logs of an earlier run (.rank0.requeue1.log. and 1 more)" err
'

expect_success "--emit sbatch asks for GPUs only where they are: --num_gpus on a CPU cluster, --nproc_per_node" '
    export DSLAUNCH_LOCAL_SLOTS=2
    mkdir -p fakebin
    # a CPU cluster, as sinfo -h -o %G shows one: no gres on any node
    printf "#!/bin/sh\n[ \"\$*\" = \"-h -o %%G\" ] || exit 9\necho \"(null)\"\n" >fakebin/sinfo_cpu
    printf "#!/bin/sh\necho \"gpu:a100:4(S:0-1)\"\necho \"(null)\"\n" >fakebin/sinfo_gpu
    printf "#!/bin/sh\necho \"sinfo: error: Unable to contact slurm controller\" >&2\nexit 1\n" >fakebin/sinfo_down
    chmod +x fakebin/*
    run_capture rc out err env DSLAUNCH_SINFO="$T_TMP/fakebin/sinfo_cpu" "$DSL" --dry-run \
        --emit sbatch --num_nodes 2 --num_gpus 2 "$W" env
    assert_eq "$rc" 0
    assert_grep "^#SBATCH --nodes=2$" out
    assert_grep "^#SBATCH --ntasks-per-node=2$" out
    assert_not_grep "^#SBATCH --gpus" out
    assert_grep "^# sinfo lists no GPU on any node of the cluster: tasks are asked for, not the GPUs of --num_gpus 2 (sbatch would reject them)$" out
    # a GPU cluster: GPUs
    run_capture rc out err env DSLAUNCH_SINFO="$T_TMP/fakebin/sinfo_gpu" "$DSL" --dry-run \
        --emit sbatch --num_nodes 2 --num_gpus 2 "$W" env
    assert_eq "$rc" 0
    assert_grep "^#SBATCH --gpus-per-node=2$" out
    assert_not_grep "^# .*GPU" out
    # no answer: GPUs, as --num_gpus says, and both the script and stderr say how to ask for tasks
    run_capture rc out err env DSLAUNCH_SINFO="$T_TMP/fakebin/sinfo_down" "$DSL" --dry-run \
        --emit sbatch --num_gpus 2 "$W" env
    assert_eq "$rc" 0
    assert_grep "^#SBATCH --gpus-per-node=2$" out
    assert_grep "^# GPUs are asked for (--num_gpus 2); whether this cluster has any could not be told (sinfo failed: sinfo: error: Unable to contact slurm controller): for a CPU cluster use --nproc_per_node 2$" out
    assert_grep "for a CPU cluster, use --nproc_per_node instead" err
    # torchrun s and accelerate s counts are processes, whatever the cluster has
    for how in "--nproc_per_node 2" "--num_processes 2"; do
        run_capture rc out err env DSLAUNCH_SINFO="$T_TMP/fakebin/sinfo_gpu" "$DSL" --dry-run \
            --emit sbatch $how "$W" env
        assert_eq "$rc" 0 "$how"
        assert_grep "^#SBATCH --ntasks-per-node=2$" out
        assert_not_grep "^#SBATCH --gpus" out
        assert_grep "^# --n[a-z_]* counts processes: tasks are asked for, not GPUs" out
    done
    # CPU ranks asked for with CUDA_VISIBLE_DEVICES=-1
    run_capture rc out err env CUDA_VISIBLE_DEVICES=-1 DSLAUNCH_SINFO="$T_TMP/fakebin/sinfo_gpu" \
        "$DSL" --dry-run --emit sbatch --num_gpus 2 "$W" env
    assert_eq "$rc" 0
    assert_not_grep "^#SBATCH --gpus" out
'

done_testing
