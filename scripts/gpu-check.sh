#!/usr/bin/env bash
# The GPU tier on a machine with a GPU but without Debian's -dev packages (e.g. an
# Ubuntu image with CUDA): unpack the .deb files of libssh, cJSON, OpenBLAS and zlib
# (fetched beforehand with scripts/fetch-gpu-deps.sh) into /tmp/deps, build with
# CUDA + cuBLAS + NCCL, run the tests labelled gpu, then the GPU benchmarks.
# usage: scripts/gpu-check.sh [DEPS_DIR] [OUT_DIR]
set -euo pipefail
DEPS=${1:-.deps}
OUTDIR=${2:-${OUT:-/tmp/dsl-gpu-out}}
mkdir -p /tmp/deps "$OUTDIR"
for f in "$DEPS"/*.deb; do dpkg -x "$f" /tmp/deps; done
M=/tmp/deps/usr/lib/x86_64-linux-gnu
export PKG_CONFIG_SYSROOT_DIR=/tmp/deps
export PKG_CONFIG_PATH=$M/pkgconfig:$M/openblas-pthread/pkgconfig:/tmp/deps/usr/share/pkgconfig
export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH
export LD_LIBRARY_PATH=$M:$M/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
cmake -S . -B build-gpu -DDSL_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_BUILD_TYPE=Release >"$OUTDIR/cmake.log" 2>&1 || { tail -30 "$OUTDIR/cmake.log"; exit 1; }
cmake --build build-gpu -j"$(nproc)" >"$OUTDIR/build.log" 2>&1 || { grep -E "error" "$OUTDIR/build.log" | head -30; exit 1; }
echo "== gpu tests"
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | tee "$OUTDIR/gpu-tests.log" | tail -25
echo "== GPT benchmark: GPT-2 124M shapes, bf16, world 1 (PEAK_TFLOPS=${PEAK_TFLOPS:-989})"
bench/gpt_gpu.sh build-gpu 2>&1 | tee "$OUTDIR/gpt-gpu-bench.log" | tail -n 8
