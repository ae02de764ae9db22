# Sourced by the CPU benchmarks (sh and bash): bench_blascore DSTRAIN exports
# OPENBLAS_CORETYPE as the kernels dstrain ends up with, unless it is set already.
# dstrain replaces OpenBLAS's fallback kernels on a CPU model OpenBLAS does not know
# (src/device/blascore.c); with this every program of a benchmark (PyTorch, the sgemm
# reference) runs the same kernels as dstrain.
bench_blascore() {
    if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
        _core=$(RANK=0 WORLD_SIZE=1 "$1" --data synthetic --synthetic-train 64 \
            --synthetic-test 64 --micro-batch 64 --steps 1 2>/dev/null |
            sed -n 's/.*(OpenBLAS \([A-Za-z0-9]*\)).*/\1/p' | head -n 1)
        if [ -n "$_core" ]; then
            export OPENBLAS_CORETYPE="$_core"
        fi
    fi
}
