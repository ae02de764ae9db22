# Sourced by the benchmarks that run one rank per node (allreduce_net.sh, train_net.sh):
# the nodes are those of the namespace cluster (tests/e2e/cluster/cluster.sh, each node its
# own network namespace), or this machine over loopback with mode=local. Needs $root.
#
#   netnodes_up NAME N  makes $work (a private temporary directory), brings up N nodes
#                       (mode=netns) and fills addr[1..N] and ifname[1..N]; everything,
#                       including the processes listed in pids, goes away on exit
#   on NODE CMD...      runs CMD on node NODE (1-based)

netnodes_cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    [[ -n $cdir ]] && { "$root/tests/e2e/cluster/cluster.sh" down "$cdir" || true; rm -rf "$cdir"; }
    [[ -n $work ]] && rm -rf "$work"
}

netnodes_up() {
    local name=$1 n=$2 i
    work=$(mktemp -d "/tmp/dsl-$name.XXXXXX")
    cdir=""
    pids=()
    trap netnodes_cleanup EXIT
    trap 'exit 130' INT TERM
    declare -ga addr ifname
    if [[ $mode == netns ]]; then
        cdir=$(mktemp -d "/tmp/dsl-$name-cluster.XXXXXX")
        "$root/tests/e2e/cluster/cluster.sh" up "$n" "$cdir" 1
        # shellcheck disable=SC1091
        source "$cdir/cluster.env"
        [[ $MODE == netns ]] || { echo "$name: no network namespaces here (needs root)" >&2; exit 1; }
        for (( i = 1; i <= n; i++ )); do
            addr[i]=$(eval echo "\$ADDR_$i")
            ifname[i]=$(eval echo "\$IFNAME_$i")
        done
    else
        for (( i = 1; i <= n; i++ )); do addr[i]=127.0.0.1; ifname[i]=lo; done
    fi
}

on() {
    local n=$1
    shift
    if [[ $mode == netns ]]; then "$root/tests/e2e/cluster/cluster.sh" exec "$cdir" "node$n" "$@"; else "$@"; fi
}
