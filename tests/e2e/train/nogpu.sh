#!/bin/sh
# One binary for CPU and GPU nodes (label flow; docs/trainer.md, "One binary for CPU and
# GPU nodes"): dstrain and dsbench, also when built with CUDA, start and train with
# --backend tcp on a node without the CUDA driver, runtime, cuBLAS or NCCL, and
# --backend nccl there fails at once with one line naming what is missing and exit 3
# (docs/exit-codes.md).
#   - neither program has a NEEDED entry for libcuda, libcudart, libcublas(Lt) or
#     libnccl (readelf -d);
#   - "a node without them": the programs run under their dynamic loader with
#     --inhibit-cache (ld.so.conf's folders, such as /usr/local/cuda/lib64, are not
#     searched), a library path of the folders of their own libraries only (those
#     holding no CUDA library), no LD_LIBRARY_PATH and CUDA_HOME an empty folder. A
#     library of the four that sits in a system folder the loader always searches
#     (/lib, /usr/lib and their multiarch and lib64 forms) cannot be hidden this way
#     and is not required in the message;
#   - tcp trains a tiny GPT 4 steps (summary line, exit 0, nothing on stderr); auto
#     does too, with one notice line saying why it is on the CPU (a build with CUDA)
#     or none (a build without);
#   - nccl: exit 3 and one line, "backend 'nccl' needs a GPU for this rank: missing
#     libcuda.so.1 (the NVIDIA driver), ..." (a build without CUDA: exit 2, "built
#     without CUDA"); the same for dsbench.
# Skipped (77) without readelf.
#
#   nogpu.sh <dstrain> <dsbench>       exit 0 pass, 1 fail, 77 skip
set -u
DSTRAIN=$1
DSBENCH=$2
. "$(dirname "$0")/scratch.sh"
scratch nogpu
command -v readelf >/dev/null || skip "no readelf"
GPULIBS='lib(cuda|cudart|cublas|cublasLt|nccl)\.so'

# 1. no NEEDED entry for the GPU's libraries
for b in "$DSTRAIN" "$DSBENCH"; do
    readelf -d "$b" | grep NEEDED >"$TMP/needed" || fail "readelf -d $b lists nothing"
    if grep -Eq "\[$GPULIBS" "$TMP/needed"; then
        cat "$TMP/needed" >&2
        fail "$(basename "$b") needs a GPU library at load time"
    fi
done

# 2. the node without them
LDSO=$(readelf -l "$DSTRAIN" | sed -n 's/.*Requesting program interpreter: \(.*\)\]/\1/p')
[ -x "$LDSO" ] || fail "no program interpreter for $DSTRAIN ('$LDSO')"
mkdir "$TMP/cuda_home"
# the folders of the programs' own libraries, less any that holds a GPU library
LIBPATH=
for d in $( (ldd "$DSTRAIN"; ldd "$DSBENCH") | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
        xargs -n1 dirname | sort -u); do
    gpu=0
    for f in "$d"/libcuda.so* "$d"/libcudart.so* "$d"/libcublas*.so* "$d"/libnccl.so*; do
        [ -e "$f" ] && gpu=1
    done
    [ "$gpu" -eq 1 ] && continue
    LIBPATH=${LIBPATH:+$LIBPATH:}$d
done
hidden() { # PROGRAM ARGS...: run with the GPU's libraries out of reach
    env -u LD_LIBRARY_PATH CUDA_HOME="$TMP/cuda_home" RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 \
        LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 \
        "$LDSO" --inhibit-cache --library-path "${LIBPATH:-/nonexistent}" "$@"
}
# the loader's own folders: what --inhibit-cache cannot hide
in_system() { # GLOB
    for d in /lib /usr/lib /lib64 /usr/lib64 /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu \
        /lib/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu; do
        for f in "$d"/$1; do [ -e "$f" ] && return 0; done
    done
    return 1
}

seq 1 200 | awk '{ print $1 % 7, "the quick brown fox jumps over the lazy dog" }' >"$TMP/text"
ARGS="--model gpt --layers 2 --dim 32 --heads 2 --context 16 --vocab 256
      --data text --data-path $TMP/text --train-batch 16 --micro-batch 8 --lr 0.003
      --steps 4 --eval-interval 4 --steps-per-print 0 --seed 3"

# tcp: trains, and says nothing about GPUs
# shellcheck disable=SC2086 # ARGS are words
hidden "$DSTRAIN" $ARGS --backend tcp >"$TMP/tcp.out" 2>"$TMP/tcp.err"
rc=$?
[ "$rc" -eq 0 ] || { cat "$TMP/tcp.err" >&2; fail "dstrain --backend tcp exited $rc without the GPU's libraries"; }
grep -q "^summary: steps 4 " "$TMP/tcp.out" || fail "no summary from the tcp run"
grep -v "wall time by phase" "$TMP/tcp.err" >"$TMP/tcp.rest"
[ -s "$TMP/tcp.rest" ] && { cat "$TMP/tcp.rest" >&2; fail "the tcp run wrote to stderr"; }

# nccl: one line and exit 3 (or 2 and "built without CUDA")
# shellcheck disable=SC2086
hidden "$DSTRAIN" $ARGS --backend nccl >"$TMP/nccl.out" 2>"$TMP/nccl.err"
rc=$?
cat "$TMP/nccl.err"
[ "$(wc -l <"$TMP/nccl.err")" -eq 1 ] || fail "dstrain --backend nccl: not one line on stderr"
if grep -q "built without CUDA" "$TMP/nccl.err"; then
    cuda=0
    [ "$rc" -eq 2 ] || fail "dstrain --backend nccl without CUDA built in: exit $rc, not 2"
else
    cuda=1
    [ "$rc" -eq 3 ] || fail "dstrain --backend nccl without the GPU's libraries: exit $rc, not 3"
    grep -q "^dstrain: error: backend 'nccl' needs a GPU for this rank: missing " \
        "$TMP/nccl.err" || fail "dstrain --backend nccl: not the expected error"
    in_system "libcuda.so.1" || grep -q "libcuda.so.1 (the NVIDIA driver)" "$TMP/nccl.err" ||
        fail "the error does not name the driver, libcuda.so.1"
    in_system "libnccl.so.*" || grep -q "libnccl.so.[0-9]* (NCCL)" "$TMP/nccl.err" ||
        fail "the error does not name NCCL"
    # cuBLAS is named only when the driver can be had (a GPU node): loaded, or named
    in_system "libcublasLt.so.*" || in_system "libcuda.so.1" ||
        grep -q "libcublasLt.so.[0-9]* (cuBLASLt)" "$TMP/nccl.err" ||
        fail "the error does not name cuBLASLt"
fi

# auto: trains on the CPU, with one line saying why (a build with CUDA)
# shellcheck disable=SC2086
hidden "$DSTRAIN" $ARGS >"$TMP/auto.out" 2>"$TMP/auto.err"
rc=$?
[ "$rc" -eq 0 ] || { cat "$TMP/auto.err" >&2; fail "dstrain (backend auto) exited $rc"; }
grep -q "^summary: steps 4 " "$TMP/auto.out" || fail "no summary from the auto run"
n=$(grep -c "backend auto" "$TMP/auto.err")
if [ "$cuda" -eq 1 ]; then
    [ "$n" -eq 1 ] || { cat "$TMP/auto.err" >&2; fail "auto on the CPU: $n notices, not 1"; }
    grep -q "^dstrain: backend auto: training on the CPU (tcp): missing " "$TMP/auto.err" ||
        fail "auto's notice does not say what is missing"
else
    [ "$n" -eq 0 ] || fail "auto in a build without CUDA printed a notice"
fi

# dsbench: tcp runs, nccl is one line and exit 3 (2 without CUDA)
hidden "$DSBENCH" --backend tcp -b 1K -e 1K >"$TMP/bench.out" 2>"$TMP/bench.err"
rc=$?
[ "$rc" -eq 0 ] || { cat "$TMP/bench.err" >&2; fail "dsbench --backend tcp exited $rc"; }
hidden "$DSBENCH" --backend nccl -b 1K -e 1K >"$TMP/bench.out" 2>"$TMP/bench.err"
rc=$?
cat "$TMP/bench.err"
[ "$(wc -l <"$TMP/bench.err")" -eq 1 ] || fail "dsbench --backend nccl: not one line on stderr"
if [ "$cuda" -eq 1 ]; then
    [ "$rc" -eq 3 ] || fail "dsbench --backend nccl without the GPU's libraries: exit $rc, not 3"
    in_system "libnccl.so.*" || grep -q "libnccl.so.[0-9]* (NCCL)" "$TMP/bench.err" ||
        fail "dsbench's error does not name NCCL"
else
    [ "$rc" -eq 2 ] || fail "dsbench --backend nccl without CUDA built in: exit $rc, not 2"
fi
echo "ok: tcp and auto train without the GPU's libraries, nccl says what is missing"
