#!/bin/bash
# Would a second thread per rank speed up the tcp engine? bench/tcp_ref.c moves a ring
# step's bytes (every node sends to the next while receiving from the previous) either
# with a sender thread beside the receiving one (TCP_REF_MODE=threads, the reference of
# bench/allreduce_net.sh) or from one thread with non-blocking send/recv and poll(), as
# src/comm/comm_tcp.c does (TCP_REF_MODE=poll). Both modes alternate within each round,
# on the namespace nodes of tests/e2e/cluster/cluster.sh (or over loopback with
# --local); the table gives the medians over the rounds and their ratio.
#
#   bench/tcp_modes.sh [--local] [--worlds "2 4"] [--reps 3] [--sizes "4M 64M"]
#
# Needs root for the namespaces (not with --local) and a C compiler.
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
root=$(dirname "$here")
mode=netns worlds="2 4" reps=3 sizes="4M 64M"
while (( $# )); do
    case $1 in
    --local) mode=local; shift ;;
    --worlds) worlds=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    *) echo "usage: $0 [--local] [--worlds \"2 4\"] [--reps N] [--sizes \"4M 64M\"]" >&2; exit 2 ;;
    esac
done
maxw=0
for w in $worlds; do
    if ! [[ $w =~ ^[0-9]+$ ]] || (( w < 2 )); then
        echo "tcp_modes.sh: bad world '$w' (2 or more)" >&2; exit 2
    fi
    (( w > maxw )) && maxw=$w
done
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "tcp_modes.sh: bad --reps '$reps'" >&2; exit 2; }
for s in $sizes; do
    numfmt --from=iec "$s" >/dev/null 2>&1 || { echo "tcp_modes.sh: bad size '$s'" >&2; exit 2; }
done

# shellcheck source=bench/netnodes.sh
source "$here/netnodes.sh"
netnodes_up tcpmodes "$maxw"
cc -std=c11 -O2 -pthread -o "$work/tcp_ref" "$here/tcp_ref.c"

free_port() {
    if [[ $mode == netns ]]; then echo $(( 20000 + RANDOM % 20000 )); else
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; fi
}

# one ring of W tcp_ref processes in MODE moving B bytes; prints the slowest rank's rate
ring() {
    local w=$1 m=$2 b=$3 r port it
    local -a lp=()
    it=$(( b >= 16 << 20 ? 5 : 20 ))
    port=$(free_port)
    for (( r = 0; r < w; r++ )); do
        if [[ $mode == local ]]; then lp[r]=$(free_port); else lp[r]=$port; fi
    done
    pids=()
    for (( r = 0; r < w; r++ )); do
        local nx=$(( (r + 1) % w ))
        on $((r + 1)) env TCP_REF_MODE="$m" "$work/tcp_ref" "${addr[r + 1]}" "${lp[r]}" \
            "${addr[nx + 1]}" "${lp[nx]}" "$b" "$it" >"$work/out.$r" &
        pids+=($!)
    done
    for (( r = 0; r < w; r++ )); do wait "${pids[r]}"; done
    pids=()
    cat "$work"/out.* | sed -n 's/.*rate=\([0-9.]*\) GB\/s/\1/p' | sort -g | head -n 1
    rm -f "$work"/out.*
}

echo "# $mode, worlds $worlds, $reps rounds, sizes $sizes; load before: $(uptime)" >&2
for w in $worlds; do
    for s in $sizes; do
        b=$(numfmt --from=iec "$s")
        for (( k = 1; k <= reps; k++ )); do
            for m in threads poll; do
                echo "$w $s $m $(ring "$w" "$m" "$b")" | tee -a "$work/rates" >&2
            done
        done
    done
done
load=$(uptime)
echo "# load after: $load" >&2
python3 - "$work/rates" "$mode" "$reps" "$load" <<'PY'
import statistics, sys
rates, mode, reps, load = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
by = {}
for line in open(rates):
    w, s, m, r = line.split()
    by.setdefault((int(w), s), {}).setdefault(m, []).append(float(r))
print(f"\n{mode}, medians of {reps} rounds, slowest rank of each ring; load average at the end: "
      f"{load.split('load average:')[-1].strip()}\n")
print("| world | size | two threads GB/s | one thread + poll GB/s | poll / threads |")
print("|---:|---:|---:|---:|---:|")
for (w, s), v in by.items():
    t, p = statistics.median(v["threads"]), statistics.median(v["poll"])
    print(f"| {w} | {s}iB | {t:.3f} | {p:.3f} | {p / t:.2f} |")
PY
