#!/usr/bin/env bash
# Launch overhead: wall time of starting two local ranks of /bin/true and waiting for
# them, dslaunch side by side with mpirun and torchrun, interleaved in one run so that
# machine noise hits all of them alike. Prints a markdown table of medians and ratios,
# then where dslaunch's time goes: the median of each launch phase, from the marks
# DSLAUNCH_TIMINGS=1 prints (separate runs, interleaved with the others).
# usage: bench/launch.sh [BUILD_DIR] [RUNS] [BASELINE_BUILD_DIR]
#   BASELINE_BUILD_DIR: another build's dslaunch measured alongside ("baseline" row)
#   LAUNCH_TRACKING=1: also dslaunch under DSLAUNCH_CONTAIN=tracking ("dslaunch tracking")
set -euo pipefail
BUILD=${1:-build}
RUNS=${2:-20}
BASE=${3:-}
HERE=$(cd "$(dirname "$0")/.." && pwd)
PEERS=$HERE/peers
DSL="$BUILD/dslaunch"
[ -x "$DSL" ] || { echo "build dslaunch first ($DSL)" >&2; exit 1; }
[ -n "${EPOCHREALTIME:-}" ] || { echo "needs bash 5 (EPOCHREALTIME)" >&2; exit 1; }

declare -A CMD
CMD[dslaunch]="$DSL -q --include localhost:0,1 /bin/true"
if [ "${LAUNCH_TRACKING:-0}" = 1 ]; then
  CMD[dslaunch tracking]="env DSLAUNCH_CONTAIN=tracking $DSL -q --include localhost:0,1 /bin/true"
fi
if [ -n "$BASE" ]; then
  [ -x "$BASE/dslaunch" ] || { echo "no $BASE/dslaunch" >&2; exit 1; }
  CMD[baseline]="$BASE/dslaunch -q --include localhost:0,1 /bin/true"
fi
if command -v mpirun >/dev/null; then
  CMD[mpirun]="mpirun --allow-run-as-root --oversubscribe -np 2 /bin/true"
fi
if /usr/bin/python3 -c 'import torch' 2>/dev/null && [ -f "$PEERS/torchrun_py311.py" ]; then
  CMD[torchrun]="/usr/bin/python3 $PEERS/torchrun_py311.py --standalone --nproc_per_node 2 $PEERS/noop.py"
fi

MARKS=$(mktemp)
trap 'rm -f "$MARKS" "$MARKS.one"' EXIT
declare -A TIMES
for ((i = 0; i < RUNS; i++)); do
  for name in "${!CMD[@]}"; do
    [ "$name" = torchrun ] && [ $i -ge 5 ] && continue   # torchrun takes seconds: 5 runs
    # the environment is set before the clock starts (env(1) would be timed too)
    export DSLAUNCH_LOCAL_SLOTS=2 OMP_NUM_THREADS=1
    t0=$EPOCHREALTIME
    ${CMD[$name]} >/dev/null 2>&1
    t1=$EPOCHREALTIME
    TIMES[$name]+="$(awk "BEGIN{print $t1 - $t0}") "
  done
  # the phases, in a run of their own
  t0=$EPOCHREALTIME
  DSLAUNCH_TIMINGS=1 ${CMD[dslaunch]} >/dev/null 2>"$MARKS.one" || true
  t1=$EPOCHREALTIME
  awk -v t0="$t0" -v t1="$t1" -v run="$i" '
    /^dslaunch timing: / { w = $3; for (k = 4; k < NF; k++) w = w " " $k; m[w] = $NF }
    END {
      m["t0"] = t0; m["t1"] = t1
      split("t0|dslaunch main|dslaunch plan|dslaunch hellos|dslaunch agent start|dslaunch agent contained|dslaunch agent ranks started|dslaunch agent ranks reported|dslaunch agent cleaned|dslaunch byes|dslaunch channels closed|t1", s, "|")
      for (k = 1; k < length(s); k++)
        if ((s[k] in m) && (s[k + 1] in m))
          printf "%d\t%d\t%.3f\n", run, k, (m[s[k + 1]] - m[s[k]]) * 1000
      printf "%d\t0\t%.3f\n", run, (t1 - t0) * 1000
    }' "$MARKS.one" >>"$MARKS"
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
d=$(echo "${TIMES[dslaunch]}" | median)
echo "| launcher | runs | median wall time (s) | ratio to dslaunch |"
echo "|---|---|---|---|"
for name in dslaunch "dslaunch tracking" baseline mpirun torchrun; do
  [ -n "${TIMES[$name]:-}" ] || continue
  m=$(echo "${TIMES[$name]}" | median)
  n=$(echo "${TIMES[$name]}" | wc -w)
  printf "| %s | %d | %.4f | %.1fx |\n" "$name" "$n" "$m" "$(awk "BEGIN{print $m / $d}")"
done
echo
echo "dslaunch's phases (DSLAUNCH_TIMINGS=1, $RUNS runs of their own; medians, so they need not add up):"
echo
echo "| phase | median (ms) |"
echo "|---|---|"
names=("whole run (DSLAUNCH_TIMINGS=1)" "exec, dynamic linking" "options, plan" \
  "agent forked, its hello (containment detected)" "start message reaches the agent" \
  "containment set up (cgroups, clean-up process)" "ranks spawned (fork, cgroups, exec)" \
  "ranks run, reaped, reported" "leftovers checked, cgroups removed" "bye reaches the launcher" \
  "summary, channels closed, agent reaped" "launcher exits")
for k in 1 2 3 4 5 6 7 8 9 10 11 0; do
  m=$(awk -F'\t' -v k=$k '$2 == k { print $3 }' "$MARKS" | tr '\n' ' ' | median || true)
  [ -n "$m" ] && printf "| %s | %.2f |\n" "${names[$k]}" "$m"
done
echo
echo "load: $(cut -d' ' -f1-3 /proc/loadavg), $(getconf _NPROCESSORS_ONLN) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)"
