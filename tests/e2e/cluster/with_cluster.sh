#!/bin/bash
# with_cluster.sh N CMD...: bring up an N-node test cluster (cluster.sh) in a fresh
# directory, run CMD with DSL_CLUSTER_DIR and DSL_CLUSTER_SH set, and tear the cluster
# down afterwards whatever happens (exit, failure, ^C). CMD's exit code is returned;
# on failure the tail of every node's sshd log is shown.
set -u
here=$(dirname "$(readlink -f "$0")")
(( $# >= 2 )) || { echo "usage: with_cluster.sh N CMD..." >&2; exit 2; }
n=$1
shift
dir=$(mktemp -d /tmp/dsl-cluster.XXXXXX)
cleanup() {
    "$here/cluster.sh" down "$dir" || echo "with_cluster.sh: teardown of '$dir' failed" >&2
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$here/cluster.sh" up "$n" "$dir" || exit 1
DSL_CLUSTER_DIR=$dir DSL_CLUSTER_SH=$here/cluster.sh "$@"
rc=$?
if (( rc != 0 )); then
    for log in "$dir"/node*/sshd.log; do
        [[ -s $log ]] && { echo "--- $log"; tail -n 5 "$log"; } >&2
    done
fi
exit $rc
