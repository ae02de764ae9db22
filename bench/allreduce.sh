#!/bin/sh
# Side-by-side allreduce benchmark on this host (issue 5): dsbench (tcp backend) against
# Open MPI's MPI_Allreduce over TCP and over shared memory, and PyTorch's Gloo, at
# world sizes 2 and 4, float sum, 1 KiB .. MAX (default 512 MiB) by factors of 2.
# dsbench runs twice: with its buffers from dsl_comm_alloc (shared with the peers, the
# zero-copy path; the default) and with --malloc (plain malloc, the copying path).
#
#   bench/allreduce.sh [build-dir] [max-bytes] > results.md
#
# Environment: WORLDS (default "2 4"); RAW, a directory that keeps the raw outputs
# (default: a temporary one, removed at exit); PEER_TIMEOUT, seconds each peer run may
# take (default 900: Open MPI over TCP with 4 ranks on 2 busy cores can crawl); with
# REPORT_ONLY=1 only the table is made again from RAW.
#
# Every program uses the same timing method (one or more warm-up calls, a barrier, the
# mean of 50 calls below 16 MiB and of 5 calls from 16 MiB on). The peers are built and
# run from bench/*_sweep.* (size sweeps of the peers' all-reduce loops). Prints the raw
# lines to stderr and a markdown table with the ratios to stdout.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
max=${2:-536870912}
worlds=${WORLDS:-"2 4"}
pt=${PEER_TIMEOUT:-900}
if [ -n "${RAW:-}" ]; then
  raw=$RAW
  mkdir -p "$raw"
else
  raw=$(mktemp -d)
  trap 'rm -rf "$raw"' EXIT
fi
torchrun=$(dirname "$0")/peers/torchrun_py311.py

[ "${REPORT_ONLY:-0}" = 1 ] || {
mpicc -O2 -o "$raw/mpi_sweep" "$here/mpi_allreduce_sweep.c"
echo "# load before: $(uptime)" >&2
for w in $worlds; do
  echo "## world $w: dsbench" >&2
  "$here/run_ranks.sh" "$w" "$build/dsbench" -o allreduce -b 1K -e 8M -f 2 -w 5 -n 50 \
      > "$raw/ds$w.txt"
  if [ "$max" -ge 16777216 ]; then
    "$here/run_ranks.sh" "$w" "$build/dsbench" -o allreduce -b 16M -e "$max" -f 2 -w 1 -n 5 \
        >> "$raw/ds$w.txt"
  fi
  echo "## world $w: dsbench --malloc" >&2
  "$here/run_ranks.sh" "$w" "$build/dsbench" --malloc -o allreduce -b 1K -e 8M -f 2 -w 5 \
      -n 50 > "$raw/dsm$w.txt"
  if [ "$max" -ge 16777216 ]; then
    "$here/run_ranks.sh" "$w" "$build/dsbench" --malloc -o allreduce -b 16M -e "$max" -f 2 \
        -w 1 -n 5 >> "$raw/dsm$w.txt"
  fi
  echo "## world $w: open mpi tcp" >&2
  OMPI_MCA_btl=self,tcp timeout "$pt" mpirun --allow-run-as-root --oversubscribe -np "$w" \
      "$raw/mpi_sweep" "$max" > "$raw/mpitcp$w.txt" 2>/dev/null || echo "# (cut at ${pt}s)" >&2
  echo "## world $w: open mpi shared memory" >&2
  timeout "$pt" mpirun --allow-run-as-root --oversubscribe -np "$w" "$raw/mpi_sweep" "$max" \
      > "$raw/mpism$w.txt" 2>/dev/null || echo "# (cut at ${pt}s)" >&2
  echo "## world $w: gloo" >&2
  OMP_NUM_THREADS=1 timeout "$pt" /usr/bin/python3 "$torchrun" --standalone \
      --nproc_per_node "$w" "$here/gloo_allreduce_sweep.py" "$max" > "$raw/gloo$w.txt" \
      2>/dev/null || echo "# (cut at ${pt}s)" >&2
  cat "$raw/ds$w.txt" "$raw/dsm$w.txt" "$raw/mpitcp$w.txt" "$raw/mpism$w.txt" "$raw/gloo$w.txt" >&2
done
echo "# load after: $(uptime)" >&2
}

python3 - "$raw" $worlds <<'PY'
import re, sys
raw, worlds = sys.argv[1], sys.argv[2:]
def peer(path):
    out = {}
    for line in open(path):
        m = re.search(r'bytes=(\d+) time_us=([\d.]+) .*busbw=([\d.]+)', line)
        if m:
            out[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    return out
def dsb(path):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) == 7 and f[0].isdigit():
            out[int(f[0])] = (float(f[3]), float(f[5]), int(f[6]))
    return out
def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
for w in worlds:
    d = dsb(f"{raw}/ds{w}.txt")
    try:
        dm = dsb(f"{raw}/dsm{w}.txt")
    except OSError:
        dm = {}
    p = {k: peer(f"{raw}/{k}{w}.txt") for k in ("mpitcp", "mpism", "gloo")}
    print(f"\n### world {w}\n")
    print("| size | dsbench us | dsbench busbw | dsbench --malloc busbw | MPI tcp busbw | MPI sm busbw | Gloo busbw | ratio to best peer | --malloc ratio | wrong |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    cell = lambda v: f"{v:.3f}" if v >= 0 else "-"
    for b in sorted(d):
        t, bw, wrong = d[b]
        mbw = dm.get(b, (0, -1, 0))[1]
        wrong += dm.get(b, (0, 0, 0))[2]
        peers = [p[k].get(b, (0, -1))[1] for k in ("mpitcp", "mpism", "gloo")]
        best = max(peers)
        ratio = f"{bw / best:.2f}x" if best > 0 else "-"
        mratio = f"{mbw / best:.2f}x" if best > 0 and mbw >= 0 else "-"
        print(f"| {size(b)} | {t:.1f} | {bw:.3f} | {cell(mbw)} | {cell(peers[0])} | {cell(peers[1])} | {cell(peers[2])} | {ratio} | {mratio} | {wrong} |")
    if 1024 in d:
        lat = [(k, p[k][1024][0]) for k in ("mpitcp", "mpism", "gloo") if 1024 in p[k]]
        print("\n1 KiB latency: dsbench %.1f us; " % d[1024][0] +
              ", ".join(f"{k} {v:.1f} us (ratio {d[1024][0] / v:.2f})" for k, v in lat))
PY
