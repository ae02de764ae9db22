# What every test on the Slurm test cluster starts with (sourced with SRC set): flow's
# TAP helpers and this cluster's leftover census, the test's own directory (the nodes
# see this machine's files, so it is theirs too), one thread a rank, and none of the
# variables an outer job or rank leaves behind, which would change the plan.
. "$SRC/tests/e2e/flow/lib.sh"
. "$SRC/tests/e2e/slurm/census.sh"
cd "$T_TMP" || exit 1
unset SLURM_JOB_ID SLURM_JOB_NODELIST SLURM_TASKS_PER_NODE CUDA_VISIBLE_DEVICES
unset RANK WORLD_SIZE MASTER_ADDR MASTER_PORT
export OMP_NUM_THREADS=1

# slurm_rank_env: for ranks srun starts without dslaunch: rendezvous bounds for a loaded
# cluster and the job's secret, which srun passes on from the caller's environment
slurm_rank_env() {
    export DSLAUNCH_COMM_TIMEOUT=120 DSLAUNCH_STORE_TIMEOUT=120
    DSLAUNCH_RUN_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    export DSLAUNCH_RUN_TOKEN
}
