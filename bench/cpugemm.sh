#!/bin/sh
# fp32 against bf16 products on the CPU (bench/cpugemm.c): the GPT step's shapes through
# the models' own dsl_gemm_run, at 1 and 2 threads. Needs a build with oneDNN
# (libdnnl-dev) and a CPU with AVX512-BF16 or AMX; says so and exits 77 otherwise.
#
#   bench/cpugemm.sh [build dir] [rounds]      (default: build, 5)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-$ROOT/build}
ROUNDS=${2:-5}
T=$(mktemp -d "${TMPDIR:-/tmp}/dsbench-gemm.XXXXXX")
trap 'rm -rf "$T"' EXIT
[ -f "$B/src/model/libdslmodel.a" ] || { echo "no $B/src/model/libdslmodel.a: build first" >&2; exit 1; }
# shellcheck disable=SC2046 # pkg-config's flags are words
cc -O2 -fopenmp -I"$ROOT/src" -I"$ROOT/include" "$ROOT/bench/cpugemm.c" -o "$T/cpugemm" \
    "$B/src/model/libdslmodel.a" "$B/src/device/libdsldevice.a" "$B/src/common/libdslcommon.a" \
    $(pkg-config --libs openblas) -ldnnl -lz -lm -lpthread
echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC') $(nproc) cores; load: $(uptime | sed 's/.*load average: //')"
for th in 1 2; do
    "$T/cpugemm" "$th" "$ROUNDS"
done
echo "# load after: $(uptime | sed 's/.*load average: //')"
