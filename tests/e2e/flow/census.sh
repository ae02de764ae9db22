# The leftover census of a job, for tests (sourced by tests/e2e/flow/lib.sh, and by
# POSIX sh scripts directly): what a job with a given run id left on this machine. The
# nodes of the namespace cluster share this machine's processes, cgroup hierarchies and
# /dev/shm, so the census covers every node; what runs in a node's network namespace
# without a run id (an agent, its clean-up process) is nslib.sh's ns_leftovers.
#
# A job's leftovers, one per line:
#   process PID COMM    a live process whose environment holds DSLAUNCH_RUN_ID=<id>
#                       (every rank and all it starts, setsid or not, inherit it)
#   cgroup PATH         a cgroup named dslaunch-<id> in any hierarchy
#   file PATH           a progress file dslaunch-<id>-<rank>.<agent pid>.progress in
#                       /dev/shm or ${TMPDIR:-/tmp}
#
# Tests get the run ids from a rank's environment, a hang report's name, or a file the
# flow worker appends them to ($FLOW_RUNIDS).

# job_leftovers ID...: the leftovers of the jobs with these run ids (none: no output)
job_leftovers() {
    [ $# -gt 0 ] || return 0
    _cl_pat=""
    for _cl_id in "$@"; do
        case $_cl_id in '' | *[!0-9a-zA-Z_.-]*) continue ;; esac
        _cl_pat="$_cl_pat${_cl_pat:+|}DSLAUNCH_RUN_ID=$_cl_id"
    done
    [ -n "$_cl_pat" ] || return 0
    # one grep over every environment (NUL-separated entries, -z)
    for _cl_e in $(grep -lsxzE "$_cl_pat" /proc/[0-9]*/environ); do
        _cl_p=${_cl_e%/environ}
        # zombies are already dead; only live processes count
        [ "$(cut -d' ' -f3 "$_cl_p/stat" 2>/dev/null)" != Z ] || continue
        [ -e "$_cl_p" ] && echo "process ${_cl_p#/proc/} $(cat "$_cl_p/comm" 2>/dev/null)"
    done
    for _cl_id in "$@"; do
        case $_cl_id in '' | *[!0-9a-zA-Z_.-]*) continue ;; esac
        find /sys/fs/cgroup -maxdepth 8 -type d -name "dslaunch-$_cl_id" 2>/dev/null |
            sed 's/^/cgroup /'
        for _cl_f in /dev/shm/dslaunch-"$_cl_id"-* "${TMPDIR:-/tmp}"/dslaunch-"$_cl_id"-*; do
            [ -e "$_cl_f" ] && echo "file $_cl_f"
        done
    done
    return 0
}

# wait_job_clean BOUND ID...: succeed once the jobs left nothing; after BOUND seconds
# (a liveness bound, not a speed check) print the leftovers and return 1. Refuses an
# empty id list, so a census cannot pass for want of something to count.
wait_job_clean() {
    _cl_bound=$1
    shift
    _cl_ids=""
    for _cl_id in "$@"; do [ -n "$_cl_id" ] && _cl_ids="$_cl_ids $_cl_id"; done
    if [ -z "$_cl_ids" ]; then
        echo "census: no run id to count the leftovers of" >&2
        return 1
    fi
    _cl_end=$(($(date +%s) + _cl_bound))
    while :; do
        # shellcheck disable=SC2086
        _cl_left=$(job_leftovers $_cl_ids)
        [ -z "$_cl_left" ] && return 0
        [ "$(date +%s)" -ge $_cl_end ] && break
        sleep 0.1
    done
    echo "leftovers of run id(s)$_cl_ids after $_cl_bound s:" >&2
    echo "$_cl_left" >&2
    return 1
}
