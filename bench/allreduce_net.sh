#!/bin/bash
# The socket path's allreduce between nodes (issue 17): dsbench (tcp backend) against
# PyTorch's Gloo on 2 and 4 nodes of the namespace cluster (tests/e2e/cluster/cluster.sh:
# each node its own network namespace, joined by veth links through a bridge), with the
# wire's limit measured in the same run by bench/tcp_ref.c (plain TCP moving a ring
# step's bytes: every node sends to the next while receiving from the previous).
# Float sum, MIN..MAX by factors of 2, REPS rounds; each round runs the three programs
# one after the other, so the load of this shared machine hits all alike, and the
# tables give the medians over the rounds and their ratios.
#
#   bench/allreduce_net.sh [--local] [--worlds "2 4"] [--reps 3] [--min 1M] [--max 512M]
#
# --local runs the same on this host over loopback instead of namespaces. Either way
# dsbench runs with DSL_COMM_CMA=0: the nodes share this kernel and its pid namespace,
# so without it the ranks would find each other's memory and take the same-host path,
# which no pair of real hosts can. Ranks are started directly with the env contract
# (RANK, WORLD_SIZE, MASTER_ADDR, ...): rank r on node r+1, Gloo's with
# GLOO_SOCKET_IFNAME set to the node's interface. Needs root for the namespaces, a C
# compiler, and python3-torch (Debian; /usr/bin/python3). Prints the raw lines to
# stderr and Markdown tables to stdout; RAW=DIR keeps the raw outputs.
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
root=$(dirname "$here")
build=${BUILD:-$root/build}
mode=netns
worlds="2 4"
reps=3
min=1M
max=512M
while (( $# )); do
    case $1 in
    --local) mode=local; shift ;;
    --worlds) worlds=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --min) min=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    *) echo "usage: $0 [--local] [--worlds \"2 4\"] [--reps N] [--min SIZE] [--max SIZE]" >&2; exit 2 ;;
    esac
done
minb=$(numfmt --from=iec "$min")
maxb=$(numfmt --from=iec "$max")
maxw=0
for w in $worlds; do (( w > maxw )) && maxw=$w; done
python=/usr/bin/python3
"$python" -c 'import torch.distributed' 2>/dev/null || {
    echo "allreduce_net.sh: $python cannot import torch (apt-get install python3-torch)" >&2; exit 1; }
[[ -x $build/dsbench ]] || { echo "allreduce_net.sh: no $build/dsbench (build first)" >&2; exit 1; }

# shellcheck source=bench/netnodes.sh
source "$here/netnodes.sh"
netnodes_up arnet "$maxw"
raw=${RAW:-$work/raw}
mkdir -p "$raw"

cc -std=c11 -O2 -pthread -o "$work/tcp_ref" "$here/tcp_ref.c"

free_port() {
    if [[ $mode == netns ]]; then echo $(( 20000 + RANDOM % 20000 )); else
        "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; fi
}

# ranks W OUT CMD...: CMD as ranks 0..W-1 of one job (rank r on node r+1), rank 0's
# stdout into OUT; fails if any rank does
ranks() {
    local w=$1 out=$2 r rc=0 port token
    shift 2
    port=$(free_port)
    token=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
    pids=()
    for (( r = 0; r < w; r++ )); do
        on $((r + 1)) env RANK=$r LOCAL_RANK=0 WORLD_SIZE=$w LOCAL_WORLD_SIZE=1 \
            MASTER_ADDR="${addr[1]}" MASTER_PORT="$port" DSLAUNCH_RUN_ID="arnet-$$" \
            DSLAUNCH_RUN_TOKEN="$token" DSLAUNCH_STORE_TIMEOUT=60 DSL_COMM_CMA=0 GLOO_SOCKET_IFNAME="${ifname[r + 1]}" \
            OMP_NUM_THREADS=1 "$@" > "$out.$r" 2>"$out.err$r" &
        pids+=($!)
    done
    for (( r = 0; r < w; r++ )); do wait "${pids[r]}" || rc=1; done
    pids=()
    cat "$out.0" >>"$out"
    if (( rc )); then echo "allreduce_net.sh: failed: $*" >&2; cat "$out".err* >&2; fi
    return $rc
}

# tcpref W OUT: the plain-TCP ring step at every size, rank 0's lines into OUT
tcpref() {
    local w=$1 out=$2 b r port it
    for (( b = minb; b <= maxb; b *= 2 )); do
        it=$(( b >= 16 << 20 ? 5 : 20 ))
        local -a lp=()
        port=$(free_port)
        for (( r = 0; r < w; r++ )); do # one address per node; on loopback one port per rank
            if [[ $mode == local ]]; then lp[r]=$(free_port); else lp[r]=$port; fi
        done
        pids=()
        for (( r = 0; r < w; r++ )); do
            local nx=$(( (r + 1) % w ))
            on $((r + 1)) "$work/tcp_ref" "${addr[r + 1]}" "${lp[r]}" "${addr[nx + 1]}" "${lp[nx]}" "$b" "$it" \
                > "$out.$r" &
            pids+=($!)
        done
        for (( r = 0; r < w; r++ )); do wait "${pids[r]}"; done
        pids=()
        cat "$out.0" >>"$out"
    done
}

echo "# $mode, worlds $worlds, $reps rounds, $min..$max; load before: $(uptime)" >&2
for w in $worlds; do
    for (( k = 1; k <= reps; k++ )); do
        echo "## world $w round $k: $(uptime)" >&2
        tcpref "$w" "$raw/ref$w.$k"
        ranks "$w" "$raw/ds$w.$k" "$build/dsbench" -o allreduce -b "$minb" -e $(( maxb < 8 << 20 ? maxb : 8 << 20 )) -f 2 -w 5 -n 20
        (( maxb >= 16 << 20 )) &&
            ranks "$w" "$raw/ds$w.$k" "$build/dsbench" -o allreduce -b $(( minb > 16 << 20 ? minb : 16 << 20 )) -e "$maxb" -f 2 -w 1 -n 5
        ranks "$w" "$raw/gloo$w.$k" "$python" "$here/gloo_allreduce_sweep.py" "$maxb" "$minb"
        cat "$raw/ref$w.$k" "$raw/ds$w.$k" "$raw/gloo$w.$k" >&2
    done
done
load_after=$(uptime)
echo "# load after: $load_after" >&2

"$python" - "$raw" "$reps" "$mode" "$load_after" $worlds <<'PY'
import re, statistics, sys
raw, reps, mode, load, worlds = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
def parse(path, kind):
    out = {}
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return out
    for line in lines:
        if kind == "ds":
            f = line.split()
            if len(f) == 7 and f[0].isdigit():
                out[int(f[0])] = (float(f[5]), int(f[6]))
        elif kind == "gloo":
            m = re.search(r'bytes=(\d+) .*busbw=([\d.]+)', line)
            if m:
                out[int(m.group(1))] = (float(m.group(2)), 0)
        else:
            m = re.search(r'bytes=(\d+) .*rate=([\d.]+)', line)
            if m:
                out[int(m.group(1))] = (float(m.group(2)), 0)
    return out
def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
print(f"\n{mode}: medians of {reps} rounds; load average at the end: {load.split('load average:')[-1].strip()}")
for w in worlds:
    runs = {k: [parse(f"{raw}/{k}{w}.{i}", k) for i in range(1, reps + 1)] for k in ("ds", "gloo", "ref")}
    sizes = sorted(set().union(*[set(r) for r in runs["ds"]]))
    print(f"\n### world {w}\n")
    print("| size | dsbench busbw GB/s | Gloo busbw GB/s | TCP ring step GB/s | dsbench / Gloo | dsbench / TCP | wrong |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for b in sizes:
        med = {}
        for k in runs:
            v = [r[b][0] for r in runs[k] if b in r]
            med[k] = statistics.median(v) if v else 0.0
        wrong = sum(r[b][1] for r in runs["ds"] if b in r)
        g = f"{med['ds'] / med['gloo']:.2f}x" if med["gloo"] else "-"
        t = f"{med['ds'] / med['ref']:.0%}" if med["ref"] else "-"
        print(f"| {size(b)} | {med['ds']:.3f} | {med['gloo']:.3f} | {med['ref']:.3f} | {g} | {t} | {wrong} |")
PY
