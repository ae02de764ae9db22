# The start of a flow script that runs dslaunch against the fake worker on this machine
# (sourced once SRC is set): the TAP helpers, 4 local slots whatever devices the machine
# has, none of the caller's devices or thread count, and the test's own directory.
. "$SRC/tests/e2e/flow/lib.sh"
export DSLAUNCH_LOCAL_SLOTS=4
unset CUDA_VISIBLE_DEVICES OMP_NUM_THREADS
cd "$T_TMP"
