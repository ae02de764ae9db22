#!/bin/bash
# Launch and teardown over Slurm: dslaunch (--launcher slurm: one srun step of agents
# that start the ranks) side by side with DeepSpeed's SlurmRunner approach (plain
# `srun -n N --export=ALL,MASTER_ADDR=...,MASTER_PORT=...` starting the program as the
# ranks), in the same run, on the 2-node Slurm test cluster of tests/e2e/slurm
# (a real slurmctld and slurmd per network namespace; needs root).
#
#   bench/slurm_launch.sh [--reps N] [--cap SECONDS] [--dslaunch PATH]
#
# Every repetition gets its own allocation, salloc -N2 --ntasks-per-node=2 (4 ranks,
# 2 a node), whose shell stamps the time and starts the tool. Measured, per tool:
#   launch   the shell's stamp to the first rank's own stamp (launch-to-first-rank),
#            and to the tool's exit (every rank exits 0 at once)
#   fail     rank 3 (on n2) exits 3 once all 4 ranks run, the others sleep: its stamp
#            to the moment the tool has returned and no process of the run is left
#            (tool, agents, ranks: everything started with the run's tag in its env)
#   scancel  all 4 ranks run; scancel of the job: to the same "everything gone"
# A run that is not gone after --cap seconds (10) counts as "> cap" and is cancelled.
# Tools: dslaunch; srun as SlurmRunner runs it (no --kill-on-bad-exit, as DeepSpeed's
# command line has none); and srun --kill-on-bad-exit=1, plain srun at its best.
# Prints medians (min) of N runs and a Markdown table for docs/benchmarks.md.
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
root=$(dirname "$here")
reps=5
cap=10
dslaunch=$root/build/dslaunch
while (( $# )); do
    case $1 in
    --reps) reps=$2; shift 2 ;;
    --cap) cap=$2; shift 2 ;;
    --dslaunch) dslaunch=$2; shift 2 ;;
    *) echo "usage: $0 [--reps N] [--cap SECONDS] [--dslaunch PATH]" >&2; exit 2 ;;
    esac
done
[[ -x $dslaunch ]] || { echo "no dslaunch at '$dslaunch' (--dslaunch PATH)" >&2; exit 2; }
(( $(id -u) == 0 )) || { echo "needs root (the Slurm test cluster)" >&2; exit 2; }

dir=$(mktemp -d /tmp/dsl-slurmbench.XXXXXX)
chmod a+x "$dir"
cleanup() {
    "$root/tests/e2e/slurm/slurm_cluster.sh" down "$dir/slurm" || true
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir "$dir/slurm"
"$root/tests/e2e/slurm/slurm_cluster.sh" up 2 "$dir/slurm"
export SLURM_CONF=$dir/slurm/slurm.conf
cd "$dir"

# the rank: stamps its start; MODE exit: exit 0; fail: rank 3 waits for the others,
# stamps and exits 3, the others sleep; sleep: sleep
cat >rank.sh <<'EOS'
#!/bin/sh
r=${RANK:-$SLURM_PROCID}
# stamps are written whole, then renamed: a reader never sees an empty one
date +%s.%N >"$RUNDIR/.start.$r" && mv "$RUNDIR/.start.$r" "$RUNDIR/start.$r"
case $MODE in
exit) exit 0 ;;
fail) if [ "$r" = 3 ]; then
          while [ "$(ls "$RUNDIR" | grep -c '^start\.')" -lt 4 ]; do sleep 0.01; done
          date +%s.%N >"$RUNDIR/.fail" && mv "$RUNDIR/.fail" "$RUNDIR/fail"
          exit 3
      fi ;;
esac
exec sleep 300
EOS
# the allocation's shell: stamps, runs the tool with the run's tag, stamps its exit
cat >driver.sh <<'EOS'
#!/bin/sh
echo "$SLURM_JOB_ID" >"$RUNDIR/job"
date +%s.%N >"$RUNDIR/t0"
env DSL_BENCH_TAG="$TAG" "$@" >"$RUNDIR/tool.out" 2>&1
echo $? >"$RUNDIR/rc"
date +%s.%N >"$RUNDIR/end"
EOS
chmod +x rank.sh driver.sh

# tagged: the live processes of the run tagged $1
tagged() {
    local e p
    for e in $(grep -lsxz "DSL_BENCH_TAG=$1" /proc/[0-9]*/environ); do
        p=${e%/environ}
        [[ "$(cut -d' ' -f3 "$p/stat" 2>/dev/null)" != Z ]] && echo "${p#/proc/}"
    done
    return 0
}
now() { date +%s.%N; }
sub() { echo "$1 - $2" | bc -l; }

tool_cmd() { # tool_cmd TOOL: the command line of TOOL
    case $1 in
    dslaunch) echo "$dslaunch --launcher slurm -q ./rank.sh" ;;
    srun) echo "srun -n 4 --export=ALL,MASTER_ADDR=n1,MASTER_PORT=29500 ./rank.sh" ;;
    srun-kill) echo "srun -n 4 --kill-on-bad-exit=1 --export=ALL,MASTER_ADDR=n1,MASTER_PORT=29500 ./rank.sh" ;;
    esac
}

# one TOOL MODE REP: one run; prints "launch exit" (launch mode) or "teardown" seconds
one() {
    local tool=$1 mode=$2 rep=$3 run t_ev t_gone
    run=$dir/run.$tool.$mode.$rep
    mkdir "$run"
    export RUNDIR=$run MODE=$mode TAG="b$$x$rep$RANDOM"
    # shellcheck disable=SC2046
    salloc -Q -N2 --ntasks-per-node=2 ./driver.sh $(tool_cmd "$tool") >/dev/null 2>&1 &
    local sa=$!
    if [[ $mode == exit ]]; then
        wait $sa || true
        [[ $(cat "$run/rc") == 0 ]] || { echo "run failed: $(cat "$run/tool.out")" >&2; return 1; }
        local first
        first=$(sort -g "$run"/start.* | head -1)
        echo "$(sub "$first" "$(cat "$run/t0")") $(sub "$(cat "$run/end")" "$(cat "$run/t0")")"
        return 0
    fi
    # wait for all 4 ranks (and, for fail, rank 3's exit stamp)
    local want=4 i
    for (( i = 0; i < 3000; i++ )); do
        (( $(ls "$run" | grep -c '^start\.') >= want )) && { [[ $mode != fail ]] || [[ -e $run/fail ]]; } && break
        sleep 0.01
    done
    if [[ $mode == scancel ]]; then
        t_ev=$(now)
        scancel "$(cat "$run/job")"
    else
        t_ev=$(cat "$run/fail")
    fi
    t_gone=
    for (( i = 0; i < cap * 100; i++ )); do
        if ! kill -0 $sa 2>/dev/null && [[ -z $(tagged "$TAG") ]]; then t_gone=$(now); break; fi
        sleep 0.01
    done
    if [[ -z $t_gone ]]; then
        scancel "$(cat "$run/job")" 2>/dev/null || true
        wait $sa 2>/dev/null || true
        for (( i = 0; i < 500; i++ )); do [[ -z $(tagged "$TAG") ]] && break; sleep 0.02; done
        echo "inf"
        return 0
    fi
    wait $sa 2>/dev/null || true
    sub "$t_gone" "$t_ev"
}

# stats: "median min" of the numbers on stdin ("inf" sorts last)
stats() { sort -g | awk '{a[NR]=$1} END {m=a[int((NR+1)/2)]; printf "%s %s\n", m, a[1]}'; }
fmt() { [[ $1 == inf ]] && echo "> ${cap}" || printf '%.3f' "$1"; }

tools=(dslaunch srun srun-kill)
declare -A res
for tool in "${tools[@]}"; do
    l=() x=() f=() c=()
    for (( rep = 0; rep < reps; rep++ )); do
        read -r a b < <(one "$tool" exit "$rep")
        l+=("$a") x+=("$b")
        f+=("$(one "$tool" fail "$rep")")
        c+=("$(one "$tool" scancel "$rep")")
    done
    res[$tool.launch]=$(printf '%s\n' "${l[@]}" | stats)
    res[$tool.exit]=$(printf '%s\n' "${x[@]}" | stats)
    res[$tool.fail]=$(printf '%s\n' "${f[@]}" | stats)
    res[$tool.scancel]=$(printf '%s\n' "${c[@]}" | stats)
    for k in launch exit fail scancel; do
        read -r m n <<<"${res[$tool.$k]}"
        echo "$tool $k: median $(fmt "$m") s (min $(fmt "$n") s) over $reps"
    done
done
echo
echo "load: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
echo
echo "| tool | launch to first rank | launch to exit | rank fails: all gone | scancel: all gone |"
echo "|---|---|---|---|---|"
for tool in "${tools[@]}"; do
    row="| $tool"
    for k in launch exit fail scancel; do
        read -r m n <<<"${res[$tool.$k]}"
        row+=" | $(fmt "$m") s"
    done
    echo "$row |"
done
