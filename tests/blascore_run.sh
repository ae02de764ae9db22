#!/bin/sh
# Run a test under one OpenBLAS kernel family: tests/blascore_run.sh HELPER CORE CMD...
# HELPER is test_train_blascore, which says (exit 0) whether this CPU can execute CORE's
# kernels and this OpenBLAS has them; if not, the test is skipped (exit 77) with the
# family's name and the reason, never silently. Otherwise CMD runs with
# OPENBLAS_CORETYPE=CORE, which every dstrain rank it starts inherits.
set -u
helper=$1 core=$2
shift 2
why=$(OPENBLAS_CORETYPE=$core "$helper" runnable "$core")
st=$?
if [ $st -ne 0 ]; then
    echo "skip: OpenBLAS kernels $core: $why"
    exit 77
fi
echo "# OpenBLAS kernels: $core"
OPENBLAS_CORETYPE=$core
export OPENBLAS_CORETYPE
exec "$@"
