#!/bin/bash
# Cost of the sealed connect-back channel (docs/security.md): launch to exit of
# /bin/true, and of a job whose 4 ranks print 20 MB each (all of it through the
# control channel), over --launcher pdsh and --launcher openmpi, for a dslaunch
# before the seal (OLD) and this one (NEW), runs alternating so drift hits both alike,
# on a 2-node namespace cluster of 2 slots each (tests/e2e/cluster). Prints medians.
#
#   bench/sealed_channel.sh OLD_DSLAUNCH NEW_DSLAUNCH [reps]     (default 7 reps)
#
# Needs root (network namespaces), pdsh, mpirun and bc.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OLD=$1 NEW=$2 REPS=${3:-7}
if [ -z "${DSL_CLUSTER_DIR:-}" ]; then
    exec "$ROOT/tests/e2e/cluster/with_cluster.sh" 2 "$0" "$OLD" "$NEW" "$REPS"
fi
D=$DSL_CLUSTER_DIR
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dsseal.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
secs() { # run "$@", print its wall time in seconds
    local s e
    s=$(date +%s.%N)
    "$@" >/dev/null 2>&1 || echo "FAILED: $*" >&2
    e=$(date +%s.%N)
    echo "$e - $s" | bc
}
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
for l in pdsh openmpi; do
    for rep in $(seq 1 "$REPS"); do
        for which in OLD NEW; do
            bin=${!which}
            secs "$bin" --launcher $l --hostfile "$D/hostfile" --ssh-config "$D/ssh_config" \
                /bin/true >>"$TMP/$l-$which-true"
            secs "$bin" --launcher $l --hostfile "$D/hostfile" --ssh-config "$D/ssh_config" \
                /bin/sh -c 'head -c 20000000 /dev/zero | tr "\0" x | fold -w 99' \
                >>"$TMP/$l-$which-out"
        done
    done
    for which in OLD NEW; do
        echo "$l $which: /bin/true $(median <"$TMP/$l-$which-true") s, 4 x 20 MB output" \
             "$(median <"$TMP/$l-$which-out") s"
    done
done
