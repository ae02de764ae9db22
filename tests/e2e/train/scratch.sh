# Sourced by the trainer's shell tests (POSIX sh). scratch NAME [SECONDS] makes the
# scratch directory TMP (removed on exit) and gives every rank one BLAS thread; with
# SECONDS the comm and the store give up after that long unless the caller's
# environment already says. fail and skip end the test (77: skipped, for CTest).
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }

scratch() {
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/dstrain-$1.XXXXXX")
    trap 'rm -rf "$TMP"' EXIT
    export OMP_NUM_THREADS=1
    if [ $# -gt 1 ]; then
        export DSLAUNCH_COMM_TIMEOUT="${DSLAUNCH_COMM_TIMEOUT:-$2}"
        export DSLAUNCH_STORE_TIMEOUT="${DSLAUNCH_STORE_TIMEOUT:-$2}"
    fi
}
