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

done_testing
