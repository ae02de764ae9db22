#!/bin/bash
# with_slurm.sh N CMD...: bring up an N-node Slurm test cluster (slurm_cluster.sh) in a
# fresh directory, run CMD with SLURM_CONF, DSL_SLURM_DIR and DSL_SLURM_SH set, and tear
# the cluster down afterwards whatever happens: exit, failure, ^C, SIGTERM, and CMD
# running past DSL_SLURM_TIMEOUT seconds (default 240, below the tests' CTest timeout of
# 300, so that the teardown still runs when a test hangs: CTest's own timeout kills
# without a chance to clean up). CMD's exit code is returned; on failure the tail of the
# daemons' logs is shown.
#
# Skips (exit 77, with the reason on stderr) only where a Slurm cluster cannot exist
# here: not root, or the Slurm packages are missing and cannot be installed. Missing
# packages are installed first (scripts/setup.sh lists them).
set -u
here=$(dirname "$(readlink -f "$0")")
(( $# >= 2 )) || { echo "usage: with_slurm.sh N CMD..." >&2; exit 2; }
n=$1
shift
if (( $(id -u) != 0 )); then
    echo "SKIP: the Slurm test cluster needs root (network namespaces, bind mounts, slurmd)" >&2
    echo "1..0 # SKIP not root"
    exit 77
fi
pkgs=(slurmctld slurmd slurm-client munge)
have_slurm() { command -v slurmctld && command -v slurmd && command -v srun && command -v munged; } >/dev/null
if ! have_slurm; then
    echo "with_slurm.sh: installing ${pkgs[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -qq --no-install-recommends "${pkgs[@]}" ||
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${pkgs[@]}"; }; } >/dev/null 2>&1
    if ! have_slurm; then
        echo "SKIP: Slurm is not installed and could not be installed (apt-get install ${pkgs[*]})" >&2
        echo "1..0 # SKIP Slurm packages unavailable"
        exit 77
    fi
fi
dir=$(mktemp -d /tmp/dsl-slurm.XXXXXX)
child=
cleanup() {
    trap '' PIPE # a reader of our output that went away must not stop the teardown
    if [[ -n $child ]]; then # timeout leads CMD's process group: end that group only
        kill -TERM "$child" 2>/dev/null
        for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$child" 2>/dev/null || break; sleep 0.2; done
        kill -KILL -- "-$child" 2>/dev/null
    fi
    "$here/slurm_cluster.sh" down "$dir" || echo "with_slurm.sh: teardown of '$dir' failed" >&2
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
"$here/slurm_cluster.sh" up "$n" "$dir" || exit 1
export SLURM_CONF=$dir/slurm.conf DSL_SLURM_DIR=$dir DSL_SLURM_SH=$here/slurm_cluster.sh
timeout --kill-after=5 "${DSL_SLURM_TIMEOUT:-240}" "$@" &
child=$!
wait "$child"
rc=$?
# whatever CMD left in its process group (led by timeout) goes with it: an srun whose
# job the teardown below would orphan keeps retrying the controller for minutes
kill -KILL -- "-$child" 2>/dev/null
child=
if (( rc == 124 || rc == 137 )); then
    echo "with_slurm.sh: '$*' ran past ${DSL_SLURM_TIMEOUT:-240} s and was stopped" >&2
fi
if (( rc != 0 && rc != 77 )); then
    for log in "$dir"/ctl/slurmctld.log "$dir"/n*/slurmd.log; do
        [[ -s $log ]] && { echo "--- $log"; tail -n 8 "$log"; } >&2
    done
fi
exit $rc
