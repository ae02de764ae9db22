#!/bin/bash
# dstrain at world 2 across two namespace nodes (tests/e2e/cluster/cluster.sh) against
# PyTorch DDP (Gloo) across the same two nodes (issue 17): the MLP 784-1024-1024-10 on
# Fashion-MNIST, global batch 128 (micro batch 64 per rank), AdamW, ZeRO stage 0 with
# overlapped gradient reduction (bench/train.sh's settings), 1 thread per rank, REPS
# rounds, each running every variant one after the other; medians.
#
#   bench/train_net.sh [--reps 3] [--local] [--buckets "500000 60000"] [--caps "25 0.25"]
#                      [--builds "DIR ..."]
#
# Both trainers reduce the gradient in buckets whose size is a setting: dstrain's
# reduce_bucket_size (elements; 500000 is bench/train.sh's) and DDP's bucket_cap_mb (25 is
# its default). Each runs at every size given, so that each is compared at its best
# size as well as at the same size (60000 elements are 0.23 MiB; 0.25 MB for DDP).
# --builds: dstrain from each of these build directories in turn (an A/B of two commits;
# default: $BUILD or build/); --caps "": no DDP runs.
#
# Time per step, split: dstrain prints its own split (forward+backward, the gradient
# reduction wait that overlap did not hide, loss/norm reduction, optimizer). For DDP
# the peer trains two epochs: the first inside DDP.no_sync() (no all-reduce: its time
# per step is the compute), the second as usual; the difference per step is what the
# all-reduce costs. dstrain runs one epoch. Ranks run with DSL_COMM_CMA=0 (the nodes
# share this kernel; no pair of real hosts could take the same-host path). --local: the
# same over loopback. Needs root, python3-torch, dataset-fashion-mnist.
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
root=$(dirname "$here")
build=${BUILD:-$root/build}
reps=3
mode=netns
buckets="500000 60000"
caps="25 0.25"
builds=$build
while (( $# )); do
    case $1 in
    --reps) reps=$2; shift 2 ;;
    --local) mode=local; shift ;;
    --buckets) buckets=$2; shift 2 ;;
    --caps) caps=$2; shift 2 ;;
    --builds) builds=$2; shift 2 ;;
    *) echo "usage: $0 [--reps N] [--local] [--buckets \"B ...\"] [--caps \"MB ...\"]" \
            "[--builds \"DIR ...\"]" >&2
       exit 2 ;;
    esac
done
python=/usr/bin/python3
# shellcheck source=bench/netnodes.sh
source "$here/netnodes.sh"
netnodes_up trnet 2

# Every program runs the same OpenBLAS kernels: the ones dstrain ends up with
# shellcheck source=bench/blascore.sh
source "$here/blascore.sh"
# shellcheck source=bench/mlp_config.sh
source "$here/mlp_config.sh"
bench_blascore "$build/dstrain" || true
echo "# OpenBLAS kernels (OPENBLAS_CORETYPE): ${OPENBLAS_CORETYPE:-chosen by OpenBLAS}" >&2

for b in $buckets; do
    mlp_config "$work/bench.$b.json" "$b" 1
done

# two W ranks of CMD (rank r on node r+1), rank 0's output into OUT
two() {
    local out=$1 r rc=0 port token
    shift
    port=$(( 20000 + RANDOM % 12000 ))
    token=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
    pids=()
    for r in 0 1; do
        on $((r + 1)) env RANK=$r LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 \
            MASTER_ADDR="${addr[1]}" MASTER_PORT="$port" DSLAUNCH_RUN_ID="trnet-$$" \
            DSLAUNCH_RUN_TOKEN="$token" DSLAUNCH_STORE_TIMEOUT=60 DSLAUNCH_COMM_TIMEOUT=120 \
            DSL_COMM_CMA=0 GLOO_SOCKET_IFNAME="${ifname[r + 1]}" OMP_NUM_THREADS=1 \
            "$@" >"$out.$r" 2>&1 &
        pids+=($!)
    done
    for r in 0 1; do wait "${pids[r]}" || rc=1; done
    pids=()
    (( rc == 0 )) || { echo "train_net.sh: failed: $*" >&2; tail -n 5 "$out".* >&2; return 1; }
    cp "$out.0" "$out"
}

echo "# $mode, $reps rounds; load before: $(uptime)" >&2
for (( k = 1; k <= reps; k++ )); do
    echo "## round $k: $(uptime)" >&2
    i=0
    for d in $builds; do
        i=$((i + 1))
        for b in $buckets; do
            two "$work/ds.$i.$b.$k" "$d/dstrain" --config "$work/bench.$b.json" --micro-batch 64
            grep -E "^summary:|ms per step" "$work/ds.$i.$b.$k" >&2
        done
    done
    for c in $caps; do
        two "$work/pt.$c.$k" "$python" "$here/peers/torch_mlp_fmnist.py" --env-rank --epochs 2 \
            --no-sync-epochs 1 --micro-batch 64 --threads 1 --bucket-cap-mb "$c"
        grep -E "^[12] \|" "$work/pt.$c.$k" >&2
    done
done
load_after=$(uptime)
echo "# load after: $load_after" >&2

"$python" - "$work" "$reps" "$mode" "$load_after" "$buckets" "$caps" "$builds" <<'PY'
import re, statistics, sys
work, reps, mode, load = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
buckets, caps, builds = sys.argv[5].split(), sys.argv[6].split(), sys.argv[7].split()
steps = 60000 // 128  # optimizer steps per epoch (global batch 128), the last partial one aside
med = statistics.median
ds, pt = {}, {}
for i, b in ((i, b) for i in range(1, len(builds) + 1) for b in buckets):
    rows = []
    for k in range(1, reps + 1):
        t = open(f"{work}/ds.{i}.{b}.{k}").read()
        sps = float(re.search(r"^summary: .*samples/s ([\d.]+)", t, re.M).group(1))
        m = re.search(r"forward\+backward ([\d.]+), gradient reduction wait ([\d.]+), "
                      r"loss/norm reduction ([\d.]+), optimizer ([\d.]+)", t)
        rows.append((sps, *map(float, m.groups())))
    ds[(builds[i - 1], b)] = [med([x[j] for x in rows]) for j in range(5)]
for c in caps:
    rows = []
    for k in range(1, reps + 1):
        t = open(f"{work}/pt.{c}.{k}").read()
        ep = {int(m.group(1)): (float(m.group(2)), float(m.group(3)))
              for m in re.finditer(r"^(\d) \| [\d.]+ \| [\d.]+ \| ([\d.]+) \| [\d.]+ \| ([\d.]+)",
                                   t, re.M)}
        nosync_s, sync_s, sps2 = ep[1][0], ep[2][0], ep[2][1]
        rows.append((sps2, nosync_s / steps * 1e3, (sync_s - nosync_s) / steps * 1e3))
    pt[c] = [med([x[j] for x in rows]) for j in range(3)]
print(f"\n{mode}, world 2, medians of {reps} rounds; load average at the end: "
      f"{load.split('load average:')[-1].strip()}\n")
print("| trainer, bucket | samples/s | ms/step compute | ms/step communication (not hidden) | ms/step other |")
print("|---|---:|---:|---:|---:|")
def name(key):
    return f"dstrain{f' ({key[0]})' if len(builds) > 1 else ''}, {int(key[1]):,} elements"
for key, d in ds.items():
    b = key[1]
    print(f"| {name(key)} ({int(b) * 4 / 2**20:.2f} MiB) | {d[0]:.0f} | "
          f"{d[1]:.2f} (forward+backward) | {d[2] + d[3]:.2f} (reduction wait + loss/norm) | "
          f"{d[4]:.2f} (optimizer) |")
for c, p in pt.items():
    print(f"| PyTorch DDP (Gloo), bucket_cap_mb {c} | {p[0]:.0f} | {p[1]:.2f} (no_sync epoch) | "
          f"{p[2]:.2f} (synced minus no_sync) | - |")
if pt:
    bd = max(ds, key=lambda k: ds[k][0])
    bp = max(pt, key=lambda c: pt[c][0])
    print(f"\ndstrain / DDP samples/s, each at its best bucket size here ({name(bd)}; "
          f"{bp} MB): {ds[bd][0] / pt[bp][0]:.2f}x")
    for k in ds:
        for c in pt:
            print(f"{name(k)} / DDP at {c} MB: {ds[k][0] / pt[c][0]:.2f}x")
PY
