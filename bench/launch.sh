#!/usr/bin/env bash
# Launch overhead: wall time of starting two local ranks of /bin/true and waiting for
# them, dslaunch side by side with mpirun and torchrun, interleaved in one run so that
# machine noise hits all of them alike. Prints a markdown table of medians and ratios.
# usage: bench/launch.sh [BUILD_DIR] [RUNS]
set -euo pipefail
BUILD=${1:-build}
RUNS=${2:-20}
HERE=$(cd "$(dirname "$0")/.." && pwd)
PEERS=$HERE/peers
DSL="$BUILD/dslaunch"
[ -x "$DSL" ] || { echo "build dslaunch first ($DSL)" >&2; exit 1; }

declare -A CMD
CMD[dslaunch]="$DSL -q --include localhost:0,1 /bin/true"
if command -v mpirun >/dev/null; then
  CMD[mpirun]="mpirun --allow-run-as-root --oversubscribe -np 2 /bin/true"
fi
if /usr/bin/python3 -c 'import torch' 2>/dev/null && [ -f "$PEERS/torchrun_py311.py" ]; then
  CMD[torchrun]="/usr/bin/python3 $PEERS/torchrun_py311.py --standalone --nproc_per_node 2 $PEERS/noop.py"
fi

declare -A TIMES
for ((i = 0; i < RUNS; i++)); do
  for name in "${!CMD[@]}"; do
    [ "$name" = torchrun ] && [ $i -ge 5 ] && continue   # torchrun takes seconds: 5 runs
    t0=$(date +%s.%N)
    DSLAUNCH_LOCAL_SLOTS=2 OMP_NUM_THREADS=1 ${CMD[$name]} >/dev/null 2>&1
    t1=$(date +%s.%N)
    TIMES[$name]+="$(awk "BEGIN{print $t1 - $t0}") "
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
d=$(echo "${TIMES[dslaunch]}" | median)
echo "| launcher | runs | median wall time (s) | ratio to dslaunch |"
echo "|---|---|---|---|"
for name in dslaunch mpirun torchrun; do
  [ -n "${TIMES[$name]:-}" ] || continue
  m=$(echo "${TIMES[$name]}" | median)
  n=$(echo "${TIMES[$name]}" | wc -w)
  printf "| %s | %d | %.4f | %.1fx |\n" "$name" "$n" "$m" "$(awk "BEGIN{print $m / $d}")"
done
echo
echo "load: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)"
