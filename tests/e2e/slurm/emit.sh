#!/usr/bin/env bash
# `dslaunch --dry-run --emit sbatch` on the real Slurm test cluster (issue 16 item 5;
# run under with_slurm.sh 2: nodes n1 and n2, 2 CPUs each): the script dslaunch writes
# for a plan is submitted with sbatch as it is and runs that plan: 4 ranks on the 2
# nodes, the user's arguments and exported values byte for byte (spaces, quotes, '$',
# backquotes, newlines, an empty word); and, with dstrain --save-on-signal, the same
# script requeues itself on the warning signal and the requeued start resumes from
# the checkpoint to the parameters of an uninterrupted run, bit for bit.
#
# The warning is delivered with `scancel -b -s USR1` (what --signal=B:USR1@SECONDS does
# at its time) rather than by a time limit: Slurm's smallest limit is a minute and it
# sends the warning from a background pass that runs every 30 s or so, so a run ended
# by its limit would take well over a minute and stop at an unpredictable step.
# A requeued job is held for about two minutes (Slurm 22.05 sets its EligibleTime to
# now + 120 s); the test lifts the hold with `scontrol update JobId=J StartTime=now`
# once the job is pending again, as an operator may.
# usage: with_slurm.sh 2 emit.sh DSLAUNCH DSTRAIN SOURCE_DIR
set -u
DSL=$1
DSTRAIN=$2
SRC=$3
. "$SRC/tests/e2e/slurm/slurmlib.sh"
export DSLAUNCH_LOCAL_SLOTS=2 # the script asks for 2 ranks a node

# the argument printer: each rank writes its arguments NUL-separated, the exported value,
# and where it ran
cat >printargs.sh <<'EOS'
#!/bin/sh
printf '%s\0' "$@" >"args.$RANK"
printf '%s' "$NCCL_DSL_EMIT_TEST" >"env.$RANK"
echo "$DSLAUNCH_RUN_ID" >"runid.$RANK"
echo "rank=$RANK local=$LOCAL_RANK node=$NODE_RANK world=$WORLD_SIZE host=$(hostname)" >"who.$RANK"
EOS
chmod +x printargs.sh
NASTY=("two words" "it's" '"double"' '$HOME ${PATH} $(id) `id`' $'line1\nline2\n' ''
       '\\back\slash' '*' '; exit 3 #' '--help' $'tab\there' "é ü ✓")
printf '%s\0' "${NASTY[@]}" >args.expected

# agents: live node agents of this dslaunch (every node shares this machine's processes)
agents() {
    local p
    for p in /proc/[0-9]*; do
        case "$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)" in
        "$DSL --agent "*) [ "$(awk '{print $3}' "$p/stat" 2>/dev/null)" != Z ] && echo "${p#/proc/}" ;;
        esac
    done
}
# no_leftovers JOB RUNID...: the job, its steps, agents and the run's processes are gone
no_leftovers() {
    local job=$1 left
    shift
    for _ in $(seq 100); do
        left="$(squeue -h -s -j "$job" 2>/dev/null)$(agents)$(job_leftovers "$@")"
        [ -z "$left" ] && return 0
        sleep 0.1
    done
    fail "leftovers of job $job: $left"
}

# job_state JOB: JobState and Restarts of JOB, e.g. "COMPLETED 1"
job_state() {
    scontrol -o show job "$1" 2>/dev/null |
        sed -n 's/.*JobState=\([A-Z_]*\).* Restarts=\([0-9]*\).*/\1 \2/p'
}

expect_success "the emitted script runs under sbatch: 4 ranks on 2 nodes, argv and env byte for byte" '
    NCCL_DSL_EMIT_TEST=$(printf "x y\n\$z '\''q'\''") \
        run_capture rc out err "$DSL" --dry-run --emit sbatch=job.sh --num_nodes 2 \
        --term-timeout 5 ./printargs.sh "${NASTY[@]}"
    cat err >&2
    assert_eq "$rc" 0 "emit"
    assert_grep "^#SBATCH --nodes=2$" job.sh
    assert_grep "^#SBATCH --ntasks-per-node=2$" job.sh
    assert_not_grep "^#SBATCH --gpus" job.sh
    assert_not_grep "requeue" job.sh
    assert_grep "^exec .*--launcher. .slurm. .--term-timeout. .5. .--. .\./printargs.sh. " job.sh
    # only the script exports it: sbatch passes PATH and SLURM_CONF, not the variable
    run_capture rc out err sbatch --wait --export=PATH,SLURM_CONF -o "$PWD/job.out" job.sh
    cat job.out >&2
    assert_eq "$rc" 0 "sbatch --wait"
    cat who.* >who
    for r in 0 1 2 3; do
        cmp args.expected "args.$r" || fail "rank $r got other arguments"
        printf "x y\n\$z '\''q'\''" | cmp - "env.$r" || fail "rank $r got another value"
    done
    assert_eq "$(grep -c "world=4" who)" 4 "ranks of world 4"
    assert_eq "$(grep -c "host=n1" who)" 2 "ranks on n1"
    assert_eq "$(grep -c "host=n2" who)" 2 "ranks on n2"
    assert_grep "rank=3 local=1 node=1 world=4 host=n2" who
    no_leftovers "$(sed -n "s/^Submitted batch job //p" out)" "$(cat runid.0)"
    assert_slurm_clean
'

expect_success "emitted inside an uneven allocation (2 + 1): the script asks for the total and gets 3 ranks" '
    rm -f args.[0-9]* env.[0-9]* who.[0-9]* runid.[0-9]*
    run_capture rc out err salloc -N2 -n3 "$DSL" --dry-run --emit sbatch=uneven.sh \
        ./printargs.sh "${NASTY[@]}"
    cat err >&2
    assert_eq "$rc" 0 "emit"
    assert_grep "^# the plan.s nodes have unequal slots (2,1)" uneven.sh
    assert_grep "^#SBATCH --ntasks=3$" uneven.sh
    assert_not_grep "^#SBATCH --ntasks-per-node" uneven.sh
    run_capture rc out err sbatch --wait -o "$PWD/uneven.out" uneven.sh
    cat uneven.out >&2
    assert_eq "$rc" 0 "sbatch --wait"
    cat who.* >who
    assert_eq "$(grep -c "world=3" who)" 3 "ranks of world 3"
    assert_eq "$(grep -c "host=n1" who)" 2 "ranks on n1"
    assert_grep "rank=2 local=0 node=1 world=3 host=n2" who
    cmp args.expected args.2 || fail "rank 2 got other arguments"
    assert_slurm_clean
'

expect_success "on this CPU cluster --num_gpus and --nproc_per_node ask for tasks, and sbatch takes the script" '
    for how in "--num_gpus 2" "--nproc_per_node 2"; do
        rm -f who.[0-9]* cpu.sh
        run_capture rc out err "$DSL" --dry-run --emit sbatch=cpu.sh --num_nodes 2 $how ./printargs.sh
        cat err >&2
        assert_eq "$rc" 0 "emit $how"
        assert_grep "^#SBATCH --ntasks-per-node=2$" cpu.sh
        assert_not_grep "^#SBATCH --gpus" cpu.sh
        [ "$how" != "--num_gpus 2" ] ||
            assert_grep "^# sinfo lists no GPU on any node of the cluster: tasks are asked for" cpu.sh
        run_capture rc out err sbatch --wait -o "$PWD/cpu.out" cpu.sh
        cat cpu.out err >&2
        assert_eq "$rc" 0 "sbatch --wait ($how)"
        cat who.* >who
        assert_eq "$(grep -c "world=4" who)" 4 "ranks of world 4 ($how)"
    done
    assert_slurm_clean
'

expect_success "an emitted file is never written through an existing one" '
    echo keep >taken.sh
    run_capture rc out err "$DSL" --dry-run --emit sbatch=taken.sh ./printargs.sh
    assert_eq "$rc" 2 "exit"
    assert_grep "taken.sh" err
    assert_eq "$(cat taken.sh)" keep "the existing file"
    assert_slurm_clean
'

SIG="--data synthetic --synthetic-train 4096 --synthetic-test 64 --synthetic-dim 128
     --hidden 256,256 --train-batch 64 --micro-batch 16 --steps 400 --lr 0.001
     --steps-per-print 0 --eval-interval 0 --deterministic true"
export DSLAUNCH_COMM_TIMEOUT=120 DSLAUNCH_STORE_TIMEOUT=120

expect_success "requeue: the warning saves, the script requeues on 138, the next start resumes bit for bit" '
    run_capture rc out err "$DSL" --dry-run --emit sbatch=train.sh --num_nodes 2 \
        "$DSTRAIN" $SIG --save-on-signal --checkpoint-dir "$PWD/ck" --resume auto \
        --metrics "$PWD/m.json" --save-params "$PWD/p.requeued"
    cat err >&2
    assert_eq "$rc" 0 "emit"
    assert_grep "^#SBATCH --signal=B:USR1@90$" train.sh
    assert_grep "^#SBATCH --requeue$" train.sh
    job=$(sbatch --parsable -J dsl-requeue -o "$PWD/train.out" train.sh) || fail "sbatch"
    for _ in $(seq 600); do grep -q "\"type\":\"step\"" m.json 2>/dev/null && break; sleep 0.1; done
    grep -q "\"type\":\"step\"" m.json || { scancel "$job"; cat train.out >&2; fail "no training step"; }
    scancel -b -s USR1 "$job"
    for _ in $(seq 600); do
        scontrol -o show job "$job" | grep -q "JobState=PENDING.* Restarts=1 " && break
        sleep 0.1
    done
    scontrol update JobId="$job" StartTime=now || fail "the job was not requeued"
    # a liveness bound, not a speed check: the save, the requeue and the whole second run
    st=
    for _ in $(seq 1800); do
        st=$(job_state "$job")
        case $st in
        COMPLETED\ * | FAILED\ * | CANCELLED\ * | TIMEOUT\ *) break ;;
        "") st=gone; break ;; # MinJobAge=2: the record of an ended job goes after 2 s
        esac
        sleep 0.1
    done
    cat train.out >&2
    case $st in "COMPLETED 1" | gone) ;; *) fail "job state and restarts: $st" ;; esac
    assert_grep "requeueing job $job" train.out
    assert_grep "got SIGUSR1: passed it to the ranks of 2 nodes" train.out
    # the second start took up the checkpoint the first one saved on the warning
    assert_grep "starting at step [1-9]" train.out
    no_leftovers "$job"
    ls ck >&2
    [ -e ck/latest ] || fail "no checkpoint"
    DSLAUNCH_RUN_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d " \n") \
        run_capture rc out err srun -N2 -n4 "$DSTRAIN" $SIG --save-params p.full
    cat err >&2
    assert_eq "$rc" 0 "uninterrupted run"
    cmp p.full p.requeued || fail "the requeued run differs from the uninterrupted one"
    assert_slurm_clean
'

done_testing
