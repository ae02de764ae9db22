#!/bin/sh
# The CUDA GPT's model tests (tests/train/test_gpu_gpt.c: fp32, bf16 and fp16 against the
# CPU GPT, loss scaling, determinism) on a machine without a GPU: the kernels of
# src/model/model_gpt_kernels.cu and model_gpt_attention.cu compiled as C++ against a CPU
# emulation of CUDA (emu.h, rt.cpp), model_gpt_cuda.c against host-memory versions of
# the CUDA runtime, cuBLAS and cuBLASLt (rt.cpp defines them, so no CUDA library is
# linked), linked with the libraries of a CPU build. A developer check before a GPU session, not a CTest: a
# test takes a minute or two (one host thread per CUDA thread).
# The trainer test needs NCCL and is not run. A filter with "cuda_mlp" in it runs the
# CUDA MLP (model_mlp_cuda.c, model_mlp_kernels.cu) against the CPU MLP instead
# (drv_mlp.c: the need() calls, gradients, loss), a second or so. "cuda_worlds" builds and
# runs tests/train/test_gpu_worlds.c itself (world 2 and 4 on one device through the
# cuda-tcp backend, against the CPU trainer), with the device ops' kernels emulated too;
# TESTS, a filter on its test names (e.g. world_two), runs part of it, and
# GPU_WORLDS_STAGES (e.g. 3) only the variants of the ZeRO stages it lists. "cuda_launches"
# counts the CUDA GPT's launches per micro step (drv_launches.c), a few seconds.
#
#   scripts/cuda-emu/run.sh [CPU build dir] [test name filter]   (default: build, cuda_gpt)
#
# EMU_FLAGS adds compiler and linker flags, e.g. EMU_FLAGS=-fsanitize=address: device
# memory is host memory here, so a kernel reading or writing past a buffer is caught.
# EMU_GEMM_ALIGN=16 makes a GEMM whose matrix pointers or leading dimensions are not
# 16-byte multiples abort (the model's alignment rule, model_gpt_cuda.c; the vocabulary
# test sets it itself).
# EMU_SMEM_OPTIN sets the device's shared memory opt-in limit per block (default sm_90's
# 232448 bytes), e.g. 65536 for sm_75, where the GPT refuses head size 128. EMU_CC sets
# the architecture the kernels' binaries report (default 90), e.g. 75: no bf16 tensor-core
# attention there, so bf16 takes the scalar kernels.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-$ROOT/build}
FILTER=${2:-cuda_gpt}
CUDA=${CUDA_HOME:-/usr/local/cuda}
E=$ROOT/scripts/cuda-emu
[ -f "$B/src/model/libdslmodel.a" ] && [ -f "$B/src/device/libdsldevice.a" ] ||
    { echo "no $B/src/model/libdslmodel.a or $B/src/device/libdsldevice.a: build first" >&2; exit 1; }
[ -f "$CUDA/include/cuda_runtime.h" ] || { echo "no CUDA headers in $CUDA (set CUDA_HOME)" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/dsl-cuda-emu.XXXXXX")
trap 'rm -rf "$T"' EXIT
INC="-I$CUDA/include -I$ROOT/include -I$ROOT/src/model -I$E"
X=${EMU_FLAGS:-}
# the models' kernels (emulated) and host code, compiled here; linked by both drivers
KERNELS="model_gpt_kernels model_gpt_attention model_gpt_attention_tc model_mlp_kernels"
HOSTC="model_gpt_cuda model_gpt_cuda_gemm model_gpt_cuda_pass model_mlp_cuda model_cuda model_cuda_host"
MODEL_O=
for k in $KERNELS $HOSTC; do MODEL_O="$MODEL_O $T/$k.o"; done
for k in $KERNELS; do
    python3 "$E/launches.py" "$ROOT/src/model/$k.cu" "$T/$k.cpp"
    # shellcheck disable=SC2086 # INC and X are words
    g++ -std=c++20 -O1 -ffp-contract=off $X $INC -c "$T/$k.cpp" -o "$T/$k.o"
done
# shellcheck disable=SC2086 # X is words
g++ -std=c++20 -O1 -ffp-contract=off $X -I"$CUDA/include" -I"$E" -c "$E/rt.cpp" -o "$T/rt.o"
for f in $HOSTC; do
    # shellcheck disable=SC2086
    gcc -std=c11 -D_GNU_SOURCE -O1 -DDSL_HAVE_CUDA=1 $X $INC -c "$ROOT/src/model/$f.c" -o "$T/$f.o"
done
L=$B/src
# a build with oneDNN (bf16 products on the CPU) needs it and OpenMP's runtime linked too
DNNL=
if ar t "$L/device/libdsldevice.a" | grep -q cpugemm_bf16; then
    DNNL="-ldnnl -fopenmp"
fi
case $FILTER in
*cuda_worlds*)
    # the multi-rank GPU trainer test itself (tests/train/test_gpu_worlds.c): world 2
    # and 4 on one emulated device through the cuda-tcp backend against the CPU trainer;
    # the device ops' kernels (device_kernels.cu) emulated too, comm.c, comm_cudahost.c
    # and common/gpuprof.c compiled as in a CUDA build. device_kernels.o is linked before
    # rt.o, whose dsl_cuda_to_half it replaces (the same conversion).
    python3 "$E/launches.py" "$ROOT/src/device/device_kernels.cu" "$T/device_kernels.cpp"
    # shellcheck disable=SC2086
    g++ -std=c++20 -O1 -ffp-contract=off $X $INC -c "$T/device_kernels.cpp" -o "$T/device_kernels.o"
    for f in src/device/device_cuda src/comm/comm src/comm/comm_cudahost src/common/gpuprof \
        tests/train/test_gpu_worlds scripts/cuda-emu/emu_worlds; do
        # shellcheck disable=SC2086
        gcc -std=c11 -D_GNU_SOURCE -O1 -DDSL_HAVE_CUDA=1 $X $INC -I"$ROOT/src/comm" \
            -I"$ROOT/tests" -c "$ROOT/$f.c" -o "$T/$(basename "$f").o"
    done
    # shellcheck disable=SC2046,SC2086 # pkg-config's flags and X are words
    g++ "$T/test_gpu_worlds.o" "$T/comm.o" "$T/comm_cudahost.o" "$T/gpuprof.o" \
        "$T/device_cuda.o" "$T/device_kernels.o" $MODEL_O "$T/emu_worlds.o" "$T/rt.o" $X \
        -Wl,--allow-multiple-definition -o "$T/worlds" \
        "$L/train/libdsltrain.a" "$L/comm/libdslcomm.a" "$L/model/libdslmodel.a" \
        "$L/device/libdsldevice.a" "$L/common/libdslcommon.a" \
        $(pkg-config --libs openblas libcrypto) $DNNL -lz -lm \
        -lpthread
    EMU_DEVICES=1 GPU_WORLDS_ALARM_S=${GPU_WORLDS_ALARM_S:-7200} "$T/worlds" "${TESTS:-}"
    exit $?
    ;;
esac
# shellcheck disable=SC2086
DRV=drv
case $FILTER in *cuda_mlp*) DRV=drv_mlp ;; *cuda_launches*) DRV=drv_launches ;; esac
gcc -std=c11 -D_GNU_SOURCE -O1 -DDSL_HAVE_CUDA=1 $X $INC -I"$ROOT/tests" -I"$ROOT/tests/train" \
    -c "$E/$DRV.c" -o "$T/drv.o"
# a CUDA build's libraries name the runtime's stream, event and profiler calls (the nccl
# backend, the GPU timers) and define cuBLAS(Lt)'s names (common/cudalibs.c): emu_worlds.o
# stubs the former, and rt.o, linked before the libraries, wins over the latter
# shellcheck disable=SC2086
gcc -std=c11 -D_GNU_SOURCE -O1 -DDSL_HAVE_CUDA=1 $X $INC -c "$E/emu_worlds.c" -o "$T/emu_worlds.o"
# shellcheck disable=SC2046,SC2086 # pkg-config's flags and X are words
g++ "$T/drv.o" $MODEL_O "$T/emu_worlds.o" "$T/rt.o" $X -Wl,--allow-multiple-definition -o "$T/drv" \
    "$L/train/libdsltrain.a" "$L/comm/libdslcomm.a" "$L/model/libdslmodel.a" \
    "$L/device/libdsldevice.a" "$L/common/libdslcommon.a" $(pkg-config --libs openblas) $DNNL \
    -lz -lcrypto -lm -lpthread
"$T/drv" "$FILTER"
