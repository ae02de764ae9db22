# Shared part of the cluster-tier scripts that drive dslaunch against the namespace
# cluster (run under tests/e2e/cluster/with_cluster.sh). Source it after tests/e2e/flow/lib.sh:
#   . "$SRC/tests/e2e/multinode/nslib.sh"
# It sets D (the cluster directory) and CL (cluster.sh), reads cluster.env (NODES, MODE,
# ADDR_i, IFNAME_i), clears the variables that would leak this host's GPU and network
# choices into the job, changes to the test's scratch directory, and defines the
# namespace leftover checks below.

D=$DSL_CLUSTER_DIR
CL=$DSL_CLUSTER_SH
. "$D/cluster.env"
unset CUDA_VISIBLE_DEVICES OMP_NUM_THREADS NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME
cd "$T_TMP" || exit 1

# Processes other than sshd left in a node's namespace.
ns_leftovers() {
    local ns p left=""
    for i in $(seq 1 "$NODES"); do
        ns=$("$CL" ns "$D" "$i" 2>/dev/null) || continue
        [ "$MODE" = netns ] || continue
        for p in $(ip netns pids "$ns" 2>/dev/null); do
            case "$(cat /proc/$p/comm 2>/dev/null)" in sshd|"") ;; *) left="$left $p";; esac
        done
    done
    echo $left
}

# Fail unless the namespaces are clean within $1 seconds (a liveness bound, not a speed
# check).
wait_ns_clean() {
    local i=0 left
    while [ $i -lt $(($1 * 10)) ]; do
        left=$(ns_leftovers)
        [ -z "$left" ] && return 0
        sleep 0.1; i=$((i + 1))
    done
    for p in $left; do ps -o pid,stat,args -p "$p" >&2 || true; done
    fail "processes left in the namespaces:$left"
}
