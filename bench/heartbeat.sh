#!/bin/sh
# Heartbeat overhead: dstrain's time per step with and without a progress file
# (DSLAUNCH_PROGRESS_FILE, common/progress.h), side by side in one run.
#
#   bench/heartbeat.sh [build dir] [reps]        (default: build, 7 reps)
#
# Three shapes, ranks started with the env contract (no launcher), 1 thread each:
# "collective-bound" is a tiny MLP with 200-element buckets, so a step is dozens of
# small allreduces and the two stores per collective weigh the most they can, at
# world 1 (one process: the least exposed to other load on the machine) and world 2;
# "compute-bound" is an MLP 784-1024-1024-10 on synthetic data at world 2, closer to
# real training. The runs of a shape alternate without/with so drift hits both alike.
# Each run's ms/step (rank 0's training wall time / steps, from its metrics) is
# printed; the ratio with/without is given for the medians and for the minimums (the
# best run of each is the one least disturbed by other processes). The files are made
# as the agent makes them (a zeroed page in /dev/shm).
#
# On a shared 2-core machine the run-to-run spread of a step time is far above 1%, so
# the script also gives the cost the way it adds up: ns per store in isolation
# (bench/progress_store.c, on a record in /dev/shm) times the stores a step makes
# (2 per collective + 1 per step, counted from the record itself after a run),
# divided by the step time.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
REPS=${2:-7}
DSTRAIN=$BUILD/dstrain
[ -x "$DSTRAIN" ] || { echo "no $DSTRAIN (build it first)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dshb.XXXXXX")
SHM=/dev/shm/dshb.$$
trap 'rm -rf "$TMP" "$SHM".*' EXIT
export OMP_NUM_THREADS=1
cc -O2 -I"$ROOT/include" -o "$TMP/progress_store" "$ROOT/bench/progress_store.c" \
    "$BUILD/src/common/libdslcommon.a" || exit 1
head -c 4096 /dev/zero >"$SHM.store"
NS=$("$TMP/progress_store" "$SHM.store")
echo "one progress store: $NS ns (best of 5 x 2e8)"

COLL="--backend tcp --data synthetic --synthetic-train 4096 --synthetic-test 128
      --synthetic-dim 24 --hidden 32,16 --train-batch 32 --micro-batch 16 --bucket-size 200
      --steps 20000 --steps-per-print 0 --eval-interval 100000 --lr 0.01"
COMP="--backend tcp --data synthetic --synthetic-train 8192 --synthetic-test 128
      --synthetic-dim 784 --hidden 1024,1024 --train-batch 128 --micro-batch 64
      --steps 100 --steps-per-print 0 --eval-interval 100000 --lr 0.001"

port() { echo $(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000 )); }

# one_run with|without WORLD ARGS...: prints rank 0's ms per step
one_run() {
    mode=$1 world=$2
    shift 2
    p=$(port)
    for r in $(seq 0 $((world - 1))); do
        f=""
        if [ "$mode" = with ]; then
            head -c 4096 /dev/zero >"$SHM.$r"
            f=$SHM.$r
        fi
        DSLAUNCH_PROGRESS_FILE=$f RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r LOCAL_WORLD_SIZE=$world \
            MASTER_ADDR=127.0.0.1 MASTER_PORT=$p DSLAUNCH_RUN_ID=hb DSLAUNCH_RUN_TOKEN=t \
            "$DSTRAIN" "$@" --metrics "$TMP/m.$r" >"$TMP/out.$r" 2>&1 &
    done
    wait
    sed -n 's/.*"type":"summary","steps":\([0-9]*\),"wall_s":\([0-9.]*\).*/\1 \2/p' "$TMP/m.0" |
        awk '{ printf "%.4f\n", 1000 * $2 / $1 }'
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for shape in collective-bound:1 collective-bound:2 compute-bound:2; do
    world=${shape#*:}
    shape="${shape%:*} world $world"
    args=$COLL
    case $shape in compute-bound*) args=$COMP ;; *1) args="$COLL --steps 200000" ;; esac
    : >"$TMP/with"
    : >"$TMP/without"
    i=0
    while [ $i -lt "$REPS" ]; do
        for mode in without with; do
            ms=$(one_run $mode "$world" $args)
            [ -n "$ms" ] || { echo "run failed:" >&2; cat "$TMP"/out.* >&2; exit 1; }
            echo "$ms" >>"$TMP/$mode"
        done
        i=$((i + 1))
    done
    # stores per step, from rank 0's record after the last run: (collective #, step)
    per=$(od -An -t u8 -j 8 -N 16 "$SHM.0" | awk '{ printf "%.2f", 2 * ($2 / 256) / $1 + 1 }')
    echo "$shape: ms/step without $(tr '\n' ' ' <"$TMP/without")"
    echo "$shape: ms/step with    $(tr '\n' ' ' <"$TMP/with")"
    awk -v w="$(median <"$TMP/with")" -v wo="$(median <"$TMP/without")" \
        -v wm="$(sort -n "$TMP/with" | head -n 1)" -v wom="$(sort -n "$TMP/without" | head -n 1)" \
        -v s="$shape" 'BEGIN { printf "%s: median %.4f / %.4f ms = ratio %.4f; best %.4f / %.4f ms = ratio %.4f\n", s, w, wo, w / wo, wm, wom, wm / wom }'
    awk -v per="$per" -v ns="$NS" -v wom="$(sort -n "$TMP/without" | head -n 1)" -v s="$shape" \
        'BEGIN { printf "%s: %s stores/step x %s ns = %.1f ns per step = %.3f%% of the best step\n", s, per, ns, per * ns, 100 * per * ns / (wom * 1e6) }'
done
