# The leftover census of the Slurm test cluster (sourced by the tests in this folder,
# after tests/e2e/flow/lib.sh): what the jobs of this cluster left behind.
#
#   slurm_leftovers        one line per leftover, nothing when clean:
#     job ID NAME STATE    a job or step Slurm still knows
#     process PID ARGS     a live process that is a task of one of this cluster's jobs or
#                          was started by one: its environment holds SLURM_JOB_ID and
#                          this cluster's SLURM_CONF, which salloc, sbatch and srun pass
#                          on (the nodes share this machine's process table, so this
#                          covers every node; another test's cluster has another
#                          SLURM_CONF)
#   assert_slurm_clean     wait until there is none (a liveness bound of 10 s, not a
#                          speed check), else print them and fail
slurm_leftovers() {
    squeue -h -o 'job %i %j %T' 2>/dev/null
    squeue -h -s -o 'job %i %j step' 2>/dev/null
    local e p
    for e in $(grep -lsxzF "SLURM_CONF=$SLURM_CONF" /proc/[0-9]*/environ); do
        p=${e%/environ}
        grep -qsz '^SLURM_JOB_ID=' "$e" || continue
        [ "$(cut -d' ' -f3 "$p/stat" 2>/dev/null)" != Z ] || continue
        [ -e "$p" ] && echo "process ${p#/proc/} $({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | cut -c1-100)"
    done
    return 0
}

assert_slurm_clean() {
    local left i
    for (( i = 0; i < 100; i++ )); do
        left=$(slurm_leftovers)
        [ -z "$left" ] && return 0
        sleep 0.1
    done
    echo "$left" >&2
    fail "the test's Slurm jobs left something behind"
}
