#!/bin/bash
# Launch-to-exit wall time of a trivial program on 4 and 16 namespace nodes
# (tests/e2e/cluster/cluster.sh), dslaunch side by side with pdsh and mpirun in the same
# run, plus one plain ssh as the floor. Needs root (network namespaces); without
# CAP_NET_ADMIN the cluster falls back to sshd on 127.0.0.x and says so.
#
#   bench/launch_multinode.sh [--reps N] [--sizes "4 16"] [--dslaunch PATH]
#
# Prints one line per (nodes, tool) with the median and min of N runs, then a Markdown
# table for docs/benchmarks.md. Every tool starts one process per node (slots=1).
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
root=$(dirname "$here")
reps=5
sizes="4 16"
dslaunch=""
for cand in "$root/build/dslaunch" "$root/build-net/dslaunch"; do
    [[ -x $cand ]] && { dslaunch=$cand; break; }
done
while (( $# )); do
    case $1 in
    --reps) reps=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --dslaunch) dslaunch=$2; shift 2 ;;
    *) echo "usage: $0 [--reps N] [--sizes \"4 16\"] [--dslaunch PATH]" >&2; exit 2 ;;
    esac
done

dir=""
cleanup() { [[ -n $dir ]] && { "$root/tests/e2e/cluster/cluster.sh" down "$dir" || true; rm -rf "$dir"; }; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# time_cmd REPS CMD...: prints "median min" in seconds; fails if any run fails
time_cmd() {
    local reps=$1 i t0 t1
    shift
    local -a ts=()
    for (( i = 0; i < reps; i++ )); do
        t0=$(date +%s.%N)
        "$@" >/dev/null 2>"$dir/last.err" || { echo "failed: $*" >&2; cat "$dir/last.err" >&2; return 1; }
        t1=$(date +%s.%N)
        ts+=("$(echo "$t1 - $t0" | bc -l)")
    done
    printf '%s\n' "${ts[@]}" | sort -g | awk '{a[NR]=$1} END {printf "%.3f %.3f\n", a[int((NR+1)/2)], a[1]}'
}

declare -A result
tools=(ssh1 pdsh mpirun)
[[ -n $dslaunch ]] && tools+=(dslaunch)
for n in $sizes; do
    dir=$(mktemp -d /tmp/dsl-bench.XXXXXX)
    "$root/tests/e2e/cluster/cluster.sh" up "$n" "$dir" 1
    # shellcheck disable=SC1091
    source "$dir/cluster.env"
    cfg=$dir/ssh_config
    : >"$dir/mpi_hosts"
    for (( i = 1; i <= n; i++ )); do echo "node$i slots=1" >>"$dir/mpi_hosts"; done
    mpi_if=()
    [[ $MODE == netns ]] && mpi_if=(--mca oob_tcp_if_include "10.213.$SUBNET.0/24"
                                    --mca btl_tcp_if_include "10.213.$SUBNET.0/24")
    for tool in "${tools[@]}"; do
        case $tool in
        ssh1) r=$(time_cmd "$reps" ssh -F "$cfg" node1 true) ;;
        pdsh) r=$(PDSH_RCMD_TYPE=ssh PDSH_SSH_ARGS_APPEND="-F $cfg" time_cmd "$reps" \
                  pdsh -f 256 -w "node[1-$n]" true) ;;
        mpirun) r=$(time_cmd "$reps" mpirun --allow-run-as-root --hostfile "$dir/mpi_hosts" \
                    -np "$n" --map-by node --mca plm_rsh_agent "ssh -F $cfg" "${mpi_if[@]}" true) ;;
        # ---- dslaunch: the same job through the launcher (ssh transport, libssh) ----
        dslaunch) r=$(time_cmd "$reps" "$dslaunch" --hostfile "$dir/hostfile" --ssh-config "$cfg" \
                      -- /bin/true) ;;
        esac
        result[$n,$tool]=$r
        echo "nodes=$n tool=$tool median_s=${r% *} min_s=${r#* } reps=$reps mode=$MODE"
    done
    cleanup
    dir=""
done

echo
echo "| nodes | $(printf '%s | ' "${tools[@]}")"
echo "|---|$(printf -- '---|%.0s' "${tools[@]}")"
for n in $sizes; do
    line="| $n |"
    for tool in "${tools[@]}"; do line+=" ${result[$n,$tool]% *} s |"; done
    echo "$line"
done
echo "(median of $reps runs, launch to exit of /bin/true on every node, $(nproc) CPUs)"
