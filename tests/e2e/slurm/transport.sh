#!/usr/bin/env bash
# The slurm transport (issue 16 item 1) on the real Slurm test cluster (run under
# with_slurm.sh 2: nodes n1 and n2, 2 CPUs each): inside an allocation dslaunch starts
# one agent per node with one srun step, the agents connect back on the sealed channel,
# and the ranks get the plan's RANK/LOCAL_RANK/NODE_RANK/MASTER_ADDR on the right
# nodes; dstrain over it equals the same run on this machine bit for bit; a failing
# rank and scancel leave no agent, rank or step behind; --launcher_args reaches srun
# word by word, without a shell, also from outside an allocation.
# usage: with_slurm.sh 2 transport.sh DSLAUNCH DSTRAIN SOURCE_DIR
set -u
DSL=$1
DSTRAIN=$2
SRC=$3
. "$SRC/tests/e2e/slurm/slurmlib.sh"

# the env printer: one line per rank, the values the plan sets and Slurm's own
cat >envp.sh <<'EOS'
#!/bin/sh
echo "R rank=$RANK local=$LOCAL_RANK node=$NODE_RANK world=$WORLD_SIZE master=$MASTER_ADDR host=$(hostname) addr=$(hostname -I | cut -d' ' -f1) slurmd=${SLURMD_NODENAME-none} procid=${SLURM_PROCID-unset} step=${SLURM_STEP_ID-unset} job=${SLURM_JOB_ID-unset} name=${SLURM_JOB_NAME-unset}"
EOS
# the worker of the teardown tests: records its run id, then waits; rank 2 (on n2)
# fails after the others started when FAIL is set
cat >worker.sh <<'EOS'
#!/bin/sh
echo "$DSLAUNCH_RUN_ID" >"runid.$RANK"
echo "$(hostname)" >"started.$RANK"
if [ "$RANK" = 2 ] && [ -n "${FAIL-}" ]; then
    while [ ! -e started.0 ] || [ ! -e started.1 ] || [ ! -e started.3 ]; do sleep 0.1; done
    exit 3
fi
exec sleep 300
EOS
chmod +x envp.sh worker.sh
printf "n1 slots=1\nn2 slots=1\n" >hf2

# ranks FILE: the "R ..." lines without the [host:rank N] prefix, sorted by rank
ranks() { grep -o 'R rank=.*' "$1" | sort -t= -k2 -n; }
# field FILE RANK KEY: KEY's value on RANK's line
field() { ranks "$1" | grep "^R rank=$2 " | tr ' ' '\n' | sed -n "s/^$3=//p"; }

# agents: the pids of this dslaunch's node agents started by srun (every node shares
# this machine's process table; only the network, host name and mounts differ)
agents() {
    local p
    for p in /proc/[0-9]*; do
        case "$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)" in
        "$DSL --agent --slurm-nodes "*) [ "$(awk '{print $3}' "$p/stat" 2>/dev/null)" != Z ] &&
            echo "${p#/proc/}" ;;
        esac
    done
}
# steps JOB: the job's dslaunch steps that Slurm still knows
steps() { squeue -h -s -j "$1" -o '%i %j' 2>/dev/null | grep ' dslaunch$'; }

# census JOB RUNID...: wait (a liveness bound, not a speed check) until the job has no
# dslaunch step, no agent and no process of the run ids; else print them and fail
census() {
    local job=$1 i=0 left
    shift
    while :; do
        left="$(steps "$job")$(agents)$(job_leftovers "$@")"
        [ -z "$left" ] && return 0
        [ $i -ge 100 ] && break
        sleep 0.1
        i=$((i + 1))
    done
    echo "steps: $(steps "$job")" >&2
    for p in $(agents); do ps -o pid,stat,args -p "$p" >&2; done
    job_leftovers "$@" >&2
    fail "leftovers of job $job"
}

expect_success "salloc -N2 --ntasks-per-node=2: 4 ranks on 2 nodes through srun, the plan's rank env" '
    run_capture rc out err salloc -N2 --ntasks-per-node=2 "$DSL" ./envp.sh
    cat err >&2
    assert_eq "$rc" 0 "exit"
    assert_eq "$(ranks out | wc -l)" 4 "ranks"
    for r in 0 1 2 3; do
        host=$(field out $r host)
        [ $r -lt 2 ] && want=n1 || want=n2
        assert_eq "$host" "$want" "host of rank $r"
        assert_eq "$(field out $r local)" $((r % 2)) "LOCAL_RANK of rank $r"
        assert_eq "$(field out $r node)" $((r / 2)) "NODE_RANK of rank $r"
        assert_eq "$(field out $r world)" 4 "WORLD_SIZE of rank $r"
        assert_eq "$(field out $r master)" "$(field out 0 addr)" "MASTER_ADDR of rank $r (n1 address)"
        # started by slurmd on its own node, without the agents step ids
        assert_eq "$(field out $r slurmd)" "$want" "SLURMD_NODENAME of rank $r"
        assert_eq "$(field out $r procid)" unset "SLURM_PROCID of the agents step, rank $r"
        assert_eq "$(field out $r step)" unset "SLURM_STEP_ID of the agents step, rank $r"
    done
    assert_grep "no --hostfile: the hosts are those of Slurm job" err
    assert_slurm_clean
'

expect_success "sbatch: a batch script s dslaunch starts its ranks through srun too" '
    printf "#!/bin/sh\nexec %s %s/envp.sh\n" "$DSL" "$PWD" >job.sh
    run_capture rc out err sbatch --wait -N2 --ntasks-per-node=2 -o "$PWD/batch.out" job.sh
    cat err >&2
    assert_eq "$rc" 0 "sbatch --wait exit"
    assert_eq "$(ranks batch.out | sed "s/ addr=[^ ]*//; s/ master=[^ ]*//; s/ job=.*//")" \
"R rank=0 local=0 node=0 world=4 host=n1 slurmd=n1 procid=unset step=unset
R rank=1 local=1 node=0 world=4 host=n1 slurmd=n1 procid=unset step=unset
R rank=2 local=0 node=1 world=4 host=n2 slurmd=n2 procid=unset step=unset
R rank=3 local=1 node=1 world=4 host=n2 slurmd=n2 procid=unset step=unset"
    assert_slurm_clean
'

expect_success "--dry-run inside an allocation: launcher slurm and the srun line" '
    run_capture rc out err salloc -N2 --ntasks-per-node=2 "$DSL" --dry-run \
        --launcher_args "--exclusive  --time=5" ./envp.sh
    assert_eq "$rc" 0 "exit"
    assert_eq "$(python3 -c "import json,sys; p=json.load(open(\"out\")); print(p[\"launcher\"]); print(\" \".join(p[\"srun\"][1:10]))")" \
        "slurm
--nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --nodelist=n1,n2 --job-name=dslaunch --exclusive --time=5 $DSL"
    assert_slurm_clean
'

expect_success "salloc -N2 -n3: uneven tasks per node (2 + 1)" '
    run_capture rc out err salloc -N2 -n3 "$DSL" ./envp.sh
    cat err >&2
    assert_eq "$rc" 0 "exit"
    assert_eq "$(ranks out | sed "s/ addr=[^ ]*//; s/ master=[^ ]*//; s/ job=.*//")" \
"R rank=0 local=0 node=0 world=3 host=n1 slurmd=n1 procid=unset step=unset
R rank=1 local=1 node=0 world=3 host=n1 slurmd=n1 procid=unset step=unset
R rank=2 local=0 node=1 world=3 host=n2 slurmd=n2 procid=unset step=unset"
    assert_slurm_clean
'

expect_success "dslaunch run by a task of another step: its srun overlaps that step" '
    run_capture rc out err salloc -N2 --ntasks-per-node=2 srun -N2 --ntasks-per-node=2 sh -c \
        "[ \$SLURM_PROCID = 0 ] || exit 0; exec \"\$0\" --hostfile hf2 --launcher slurm ./envp.sh" \
        "$DSL"
    cat err >&2
    assert_eq "$rc" 0 "exit"
    assert_eq "$(ranks out | sed "s/ addr=.*//")" \
"R rank=0 local=0 node=0 world=2 master=$(field out 0 addr) host=n1
R rank=1 local=0 node=1 world=2 master=$(field out 0 addr) host=n2"
    assert_slurm_clean
'

TINY="--data synthetic --synthetic-train 512 --synthetic-test 128 --synthetic-dim 24
      --hidden 32,16 --micro-batch 8 --steps 12 --bucket-size 200
      --steps-per-print 0 --eval-interval 6 --lr 0.01 --deterministic true --train-batch 32"
expect_success "dstrain at world 4 over srun equals the run on this machine bit for bit" '
    echo "localhost slots=4" >hf4
    run_capture rc out err "$DSL" --hostfile hf4 "$DSTRAIN" $TINY --save-params p.local
    [ "$rc" = 0 ] || { cat err >&2; fail "reference run exited $rc"; }
    run_capture rc out err salloc -N2 --ntasks-per-node=2 "$DSL" "$DSTRAIN" $TINY --save-params p.slurm
    cat err >&2
    assert_eq "$rc" 0 "exit"
    assert_grep "ZeRO stage 0, 4 ranks" out
    cmp p.local p.slurm || fail "parameters differ from the run on this machine"
    assert_slurm_clean
'

# in_alloc: run dslaunch with the worker inside salloc, then count what is left while
# the allocation still exists (its end would make Slurm clean up for us)
cat >inner.sh <<'EOS'
#!/bin/bash
echo "$SLURM_JOB_ID" >job.txt
"$@" >run.out 2>run.err &
echo $! >launcher.pid
wait $!
echo $? >rc.txt
EOS
chmod +x inner.sh

expect_success "a rank failing on n2: the job is down and nothing is left on either node" '
    rm -f started.* runid.* rc.txt
    run_capture rc out err env FAIL=1 salloc -N2 --ntasks-per-node=2 ./inner.sh \
        "$DSL" --term-timeout 3 ./worker.sh
    cat err run.err >&2
    assert_eq "$(cat rc.txt)" 3 "dslaunch exit (the failed rank s code)"
    assert_eq "$(cat started.2)" n2 "the failing rank s node"
    assert_grep "rank 2" run.err
    wait_gone 0 $(cat launcher.pid)
    census "$(cat job.txt)" $(cat runid.*)
    assert_slurm_clean
'

expect_success "scancel during a run: every agent, rank and step is gone" '
    rm -f started.* runid.* rc.txt job.txt
    salloc -N2 --ntasks-per-node=2 ./inner.sh "$DSL" --term-timeout 3 ./worker.sh \
        >salloc.out 2>salloc.err &
    spid=$!
    for _ in $(seq 600); do [ -e started.0 ] && [ -e started.1 ] && [ -e started.2 ] && [ -e started.3 ] && break; sleep 0.1; done
    [ -e started.3 ] || { kill $spid; cat salloc.err run.err >&2; fail "the ranks did not start"; }
    job=$(cat job.txt)
    [ -n "$(agents)" ] || fail "no agent runs before scancel"
    [ -n "$(steps $job)" ] || fail "no dslaunch step before scancel"
    scancel "$job"
    for _ in $(seq 300); do pid_alive $spid || break; sleep 0.1; done
    pid_alive $spid && { kill $spid; fail "salloc still runs after scancel"; }
    wait $spid
    wait_gone 10 $(cat launcher.pid)
    census "$job" $(cat runid.*)
    assert_slurm_clean
'

expect_success "--launcher_args from outside an allocation: srun asks for one, words reach it unsplit by any shell" '
    printf "n1 slots=1\nn2 slots=2\n" >hf
    run_capture rc out err "$DSL" --launcher slurm --hostfile hf \
        --launcher_args "--time=5  --job-name=dsl\$(>pwned)*;x" ./envp.sh
    cat err >&2
    assert_eq "$rc" 0 "exit"
    assert_eq "$(ranks out | wc -l)" 3 "ranks"
    assert_eq "$(field out 2 host)" n2 "host of rank 2"
    job=$(field out 0 job)
    [ "$job" != unset ] || fail "no Slurm job id: not run by srun"
    assert_eq "$(field out 0 name)" "dsl\$(>pwned)*;x" "job name given through --launcher_args"
    [ ! -e pwned ] || fail "a shell ran the launcher args"
    assert_slurm_clean
'

expect_success "--launcher slurm with a host Slurm does not know: srun s reason, nothing started" '
    printf "n1 slots=1\nnosuchnode slots=1\n" >hf
    run_capture rc out err "$DSL" --launcher slurm --hostfile hf ./envp.sh
    [ "$rc" != 0 ] || fail "started"
    assert_grep "srun for .* ended (exit [0-9]*) before its agent connected back: .*error" err
    assert_eq "$(ranks out | wc -l)" 0 "ranks"
    assert_slurm_clean
'

expect_success "--launcher_args where the job would run no launcher command: a usage error" '
    run_capture rc out err "$DSL" --hostfile hf2 --launcher_args "-p x" ./envp.sh
    assert_eq "$rc" 2 "exit"
    assert_grep "launcher_args passes options to a launcher command (pdsh, mpirun, srun), but this job uses the ssh transport" err
    assert_slurm_clean
'

expect_success "--launcher slurm without srun in PATH: a usage error naming the package" '
    run_capture rc out err env PATH=/nonexistent "$DSL" --launcher slurm --hostfile hf2 ./envp.sh
    assert_eq "$rc" 2 "exit"
    assert_grep "needs .srun., which is not in PATH (Debian: apt install slurm-client)" err
    assert_slurm_clean
'

done_testing
