# Shared part of the cluster-tier scripts that drive dslaunch against the namespace
# cluster (run under tests/e2e/cluster/with_cluster.sh). Source it after tests/e2e/flow/lib.sh:
#   . "$SRC/tests/e2e/multinode/nslib.sh"
# It sets D (the cluster directory) and CL (cluster.sh), reads cluster.env (NODES, MODE,
# ADDR_i, IFNAME_i), sets SSH to the options that reach the nodes over ssh, clears the
# variables that would leak this host's GPU and network choices into the job, changes
# to the test's scratch directory, and defines the namespace leftover checks below.

D=$DSL_CLUSTER_DIR
CL=$DSL_CLUSTER_SH
. "$D/cluster.env"
SSH=(--hostfile "$D/hostfile" --ssh-config "$D/ssh_config")
unset CUDA_VISIBLE_DEVICES OMP_NUM_THREADS NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME
# Open MPI's session directories in this test's scratch directory, on the nodes too:
# every cluster names its nodes node1, node2, ..., so the orted daemons of two suites
# running at once shared /tmp/ompi.node1.UID, which the last one out removes, and an
# orted starting at that moment failed ("orte_session_dir failed"). mpirun hands the
# environment's OMPI_MCA_ parameters to the daemons it starts over ssh.
export OMPI_MCA_orte_tmpdir_base="$T_TMP" PRTE_MCA_prte_tmpdir_base="$T_TMP"
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

# start_world4 PIDFILE ARGS...: "$DSL" ARGS in the background (out, err), a job of 4
# ranks of the flow worker that write PIDFILE.RANK once they run; sets pid and returns
# when all 4 run
start_world4() {
    local f=$1 r
    shift
    "$DSL" "$@" >out 2>err &
    pid=$!
    for r in 0 1 2 3; do wait_for_file "$f.$r" 20; done
}

# no_remote_dslaunch NODE REASON [ARGS...]: a launch (ARGS before the program) whose
# --remote-dslaunch names no file fails with 202 before anything starts, naming the
# first node to find out, the reason it gave (a pattern) and what to do; every
# transport owes the same answer
no_remote_dslaunch() {
    local node=$1 why=$2
    shift 2
    run_capture rc out err "$DSL" "$@" --remote-dslaunch "/nonexistent-$$/dslaunch" "$W" env
    assert_eq "$rc" 202
    assert_grep "$node *dslaunch is not at ./nonexistent-$$/dslaunch. on .$node. ($why): install the same dslaunch at that path on every node" err
    assert_grep "nothing was started" err
    [ ! -s out ] || fail "a rank ran"
}

# assert_world_2x2 OUT: OUT, the prefixed `env` of a job of 2 nodes x 2 slots, holds
# every rank's contract, node 1's address as MASTER_ADDR everywhere, each node's own
# interface (netns mode) and one run id
assert_world_2x2() {
    local r
    for r in 0 1 2 3; do assert_grep "rank $r\] RANK=$r$" "$1"; done
    assert_grep "^\[node1:rank 0\] MASTER_ADDR=$ADDR_1$" "$1"
    assert_grep "^\[node2:rank 3\] MASTER_ADDR=$ADDR_1$" "$1"
    assert_grep "^\[node2:rank 3\] NODE_RANK=1$" "$1"
    assert_grep "^\[node2:rank 3\] LOCAL_RANK=1$" "$1"
    assert_grep "^\[node2:rank 2\] WORLD_SIZE=4$" "$1"
    if [ "$MODE" = netns ]; then
        assert_grep "^\[node1:rank 1\] NCCL_SOCKET_IFNAME=$IFNAME_1$" "$1"
        assert_grep "^\[node2:rank 2\] NCCL_SOCKET_IFNAME=$IFNAME_2$" "$1"
    fi
    [ $(grep "DSLAUNCH_RUN_ID=" "$1" | sed "s/.*=//" | sort -u | wc -l) = 1 ]
}
