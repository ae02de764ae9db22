#!/bin/bash
# A throw-away Slurm cluster of N nodes on this machine: a real slurmctld and one real
# slurmd per node, each node a network namespace, for the Slurm tests (issue 16).
#
#   slurm_cluster.sh up N DIR        nodes n1..nN; writes DIR/slurm.conf, DIR/slurm.env
#   slurm_cluster.sh down DIR        stop every daemon it started, delete namespaces,
#                                    links and the files under DIR (idempotent)
#   slurm_cluster.sh exec DIR NODE CMD   run CMD as on node NODE (n1 or 1): its network,
#                                    host name and mounts (munge, /etc/hosts)
#
# Clients (srun, sbatch, sinfo, scontrol) run in the root namespace with
# SLURM_CONF=DIR/slurm.conf (`source DIR/slurm.env`).
#
# Layout (needs root: namespaces, bind mounts, munged and slurmd as root):
#
#   root ns: slurmctld, munged (DIR/munge)  <p>h0 10.213.X.1/24
#        └─veth─ [<p>sw ns: bridge br0] ─veth─ n1 ns: eth0 10.213.X.2  munged, slurmd -N n1
#                                       └─veth─ n2 ns: eth0 10.213.X.3  munged, slurmd -N n2
#
# The bridge lives in its own namespace, as in tests/e2e/cluster/cluster.sh, so that the
# host's firewall never sees the test traffic; 10.213.X.0/24 is chosen the same way (no
# overlap with any route or address of the machine) under the same lock. Each node is
# entered with `nsenter --net=/var/run/netns/NS unshare --uts --mount --propagation
# private` (not `ip netns exec`, which remounts /sys and hides the cgroup mounts slurmd
# wants), sets its host name nK, bind-mounts a private /run/munge, /var/lib/munge,
# /var/log/munge and DIR/hosts over /etc/hosts (munged blocks on name lookups of an
# unknown host name), starts its own munged and execs `slurmd -D -N nK`. A bind mount
# needs its mount point: /run/munge, /var/lib/munge and /var/log/munge are made (empty)
# in the machine's tree when missing (munge's package makes the last two, its service
# the first). slurmctld runs
# in the root namespace with SlurmctldHost=<host>(10.213.X.1). One munge key, made for
# this cluster, is shared by every munged. The root namespace's munged listens on
# DIR/munge/munge.socket.2 (AuthInfo in slurm.conf), never on the system's /run/munge;
# inside a node the same path is bound to that node's own /run/munge.
#
# Ports: slurmctld listens on a port free in the root namespace, chosen at `up`; each
# slurmd listens on 6818 inside its own namespace. Everything created is recorded in
# DIR/slurm.env before it is made, removed by `down`, and `up` tears down what it made
# if it fails. Only processes this cluster started are signalled, by PID, after their
# command line was checked; whatever still runs inside a node's namespace (job steps)
# belongs to the cluster and is killed before the namespace is deleted.
set -euo pipefail

die() { echo "slurm_cluster.sh: error: $*" >&2; exit 1; }

ip2int() { local IFS=.; read -r a b c d <<<"$1"; echo $(( (a << 24) | (b << 16) | (c << 8) | d )); }

# Is 10.213.X.0/24 free of every route and address of the root namespace?
# (the same test as tests/e2e/cluster/cluster.sh, which has no library form)
subnet_free() {
    local x=$1 net lo hi dst plen base mask
    net=$(ip2int "10.213.$x.0"); lo=$net; hi=$(( net + 255 ))
    while read -r dst _; do
        [[ $dst == default ]] && continue
        [[ $dst == */* ]] && plen=${dst#*/} || plen=32
        dst=${dst%/*}
        [[ $dst =~ ^[0-9.]+$ ]] || continue
        base=$(ip2int "$dst"); mask=$(( plen == 0 ? 0 : (0xffffffff << (32 - plen)) & 0xffffffff ))
        base=$(( base & mask ))
        local end=$(( base | (~mask & 0xffffffff) ))
        (( end < lo || base > hi )) || return 1
    done < <(ip -4 route show table all 2>/dev/null | awk '{print $1=="local"||$1=="broadcast"?$2:$1}')
    while read -r dst; do
        dst=${dst%/*}
        base=$(ip2int "$dst")
        (( base < lo || base > hi )) || return 1
    done < <(ip -4 -o addr show | awk '{print $4}')
    return 0
}

pick_subnet() {
    local start=$(( $$ % 200 + 20 )) k x
    for (( k = 0; k < 230; k++ )); do
        x=$(( (start + k) % 230 + 20 ))
        if subnet_free "$x"; then echo "$x"; return 0; fi
    done
    die "no free 10.213.x.0/24 subnet"
}

port_free() { ! ss -Htan "sport = :$1" 2>/dev/null | grep -q .; }

pick_port() { # a TCP port nothing listens on in the root namespace
    local start=$(( 21000 + ($$ % 500) * 8 )) k p
    for (( k = 0; k < 400; k++ )); do
        p=$(( start + k ))
        port_free "$p" && { echo "$p"; return 0; }
    done
    die "no free port for slurmctld"
}

load_env() {
    local dir=$1
    [[ -f $dir/slurm.env ]] || die "no Slurm cluster in '$dir' (missing slurm.env)"
    # shellcheck disable=SC1091
    source "$dir/slurm.env"
}

node_index() { # n2 | 2 -> 2
    local n=${1#n}
    [[ $n =~ ^[0-9]+$ ]] && (( n >= 1 && n <= NODES )) || die "no node '$1' (n1..n$NODES)"
    echo "$n"
}

var() { local n=$1; echo "${!n:-}"; }

write_env() {
    local dir=$1 i
    {
        echo "PREFIX=$PREFIX"
        echo "NODES=$NODES"
        echo "SUBNET=$SUBNET"
        echo "CTL_PORT=${CTL_PORT:-}"
        echo "CTL_HOST=${CTL_HOST:-}"
        echo "SLURM_DIR=$dir"
        echo "export SLURM_CONF=$dir/slurm.conf"
        for (( i = 1; i <= NODES; i++ )); do
            echo "NS_$i=${PREFIX}n$i"
            echo "ADDR_$i=10.213.$SUBNET.$((i + 1))"
        done
    } >"$dir/slurm.env"
}

write_conf() {
    local dir=$1 i
    cat >"$dir/slurm.conf" <<EOF
# generated by slurm_cluster.sh
ClusterName=dsltest
SlurmctldHost=$CTL_HOST(10.213.$SUBNET.1)
SlurmctldPort=$CTL_PORT
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket.2
CredType=cred/munge
StateSaveLocation=$dir/ctl/state
SlurmctldPidFile=$dir/ctl/slurmctld.pid
SlurmctldLogFile=$dir/ctl/slurmctld.log
SlurmdSpoolDir=$dir/%n/spool
SlurmdPidFile=$dir/%n/slurmd.pid
SlurmdLogFile=$dir/%n/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MinJobAge=2
SlurmctldDebug=info
SlurmdDebug=info
EOF
    for (( i = 1; i <= NODES; i++ )); do
        echo "NodeName=n$i NodeAddr=10.213.$SUBNET.$((i + 1)) CPUs=$CPUS State=UNKNOWN" >>"$dir/slurm.conf"
    done
    echo "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" >>"$dir/slurm.conf"
    {
        echo "127.0.0.1 localhost"
        echo "10.213.$SUBNET.1 $CTL_HOST"
        for (( i = 1; i <= NODES; i++ )); do echo "10.213.$SUBNET.$((i + 1)) n$i"; done
    } >"$dir/hosts"
}

# The PID in FILE, if it is alive and its command line contains WORD (ours).
our_pid() { # file word
    local pid
    [[ -s $1 ]] || return 1
    pid=$(tr -dc 0-9 <"$1")
    [[ -n $pid && -r /proc/$pid/cmdline ]] || return 1
    tr '\0' ' ' </proc/"$pid"/cmdline | grep -qF -- "$2" || return 1
    echo "$pid"
}

wait_gone() { # pid
    local t
    for (( t = 0; t < 100; t++ )); do
        [[ $(cut -d' ' -f3 /proc/"$1"/stat 2>/dev/null) =~ ^[RSDT]$ ]] || return 0
        sleep 0.05
    done
    kill -KILL "$1" 2>/dev/null || true
}

stop_pidfile() { # file word
    local pid
    if pid=$(our_pid "$1" "$2"); then
        kill "$pid" 2>/dev/null || true
        wait_gone "$pid"
    fi
}

start_munged() { # socket pidfile logfile seedfile (root namespace)
    munged --socket="$1" --pid-file="$2" --log-file="$3" --seed-file="$4" \
        --key-file="$DIR/munge.key" --num-threads=2 ||
        die "munged did not start (see $3)"
}

start_node() { # i
    local i=$1 ns="${PREFIX}n$i" nd="$DIR/n$i"
    mkdir -p "$nd/run" "$nd/lib" "$nd/log" "$nd/spool"
    chmod 0755 "$nd/run"; chmod 0700 "$nd/lib" "$nd/log"
    # exec chain: nsenter and unshare exec in place, so $! is the slurmd in the end
    nsenter --net=/var/run/netns/"$ns" unshare --uts --mount --propagation private \
        /bin/sh -c '
        set -e
        hostname "n$1"
        mkdir -p /run/munge /var/lib/munge /var/log/munge
        mount --bind "$2/run" /run/munge
        mount --bind "$2/lib" /var/lib/munge
        mount --bind "$2/log" /var/log/munge
        mount --bind "$3/hosts" /etc/hosts
        mount --bind "$2/run" "$3/munge"
        munged --key-file="$3/munge.key" --num-threads=2
        export SLURM_CONF="$3/slurm.conf"
        exec slurmd -D -f "$3/slurm.conf" -N "n$1" >"$2/slurmd.out" 2>&1
        ' sh "$i" "$nd" "$DIR" </dev/null >"$nd/start.log" 2>&1 &
    echo $! >"$nd/slurmd.launch.pid"
}

show_logs() { # the tail of every log, for a failed start
    local f
    for f in "$1"/ctl/slurmctld.out "$1"/ctl/slurmctld.log "$1"/ctl/munged.log "$1"/n*/start.log \
             "$1"/n*/slurmd.out "$1"/n*/slurmd.log "$1"/n*/log/munged.log; do
        [[ -s $f ]] && { echo "--- $f"; tail -n 8 "$f"; } >&2
    done
    return 0
}

cmd_up() {
    local nodes=$1 dir=$2 i t
    [[ $nodes =~ ^[0-9]+$ ]] && (( nodes >= 1 && nodes <= 50 )) || die "bad node count '$nodes'"
    (( $(id -u) == 0 )) || die "needs root (namespaces, bind mounts, slurmd)"
    for t in slurmctld slurmd munged srun sinfo nsenter unshare; do
        command -v "$t" >/dev/null || die "'$t' is not installed (scripts/setup.sh installs slurmctld slurmd slurm-client munge)"
    done
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [[ ! -e $dir/slurm.env ]] || die "'$dir' already holds a Slurm cluster (slurm_cluster.sh down $dir)"
    local up=$dir
    while up=$(dirname "$up"); [[ $up != / ]]; do # munged refuses a socket below these
        [[ $(( 8#$(stat -c %a "$up") & 1 )) == 1 ]] ||
            die "munged needs every directory above '$dir' searchable by all, and '$up' is not"
    done
    DIR=$dir NODES=$nodes PREFIX="dsls$$" CPUS=${DSL_SLURM_CPUS:-2}
    CTL_HOST=$(hostname -s)
    # from here on a failure (die, or set -e) tears down what exists
    UP_DONE=0
    # (SIGPIPE ignored first: a reader of stderr that went away, `up ... | head`, must
    # not kill the teardown half way)
    trap 'if [[ $UP_DONE != 1 ]]; then trap "" PIPE; set +e
              echo "slurm_cluster.sh: setup failed, tearing down $PREFIX" >&2; show_logs "$DIR"
              cmd_down "$DIR"; fi' EXIT
    exec 9>/run/lock/dslaunch-cluster.lock
    flock 9
    SUBNET=$(pick_subnet)
    CTL_PORT=$(pick_port)
    write_env "$dir"
    local sw="${PREFIX}sw"
    ip netns add "$sw"
    ip -n "$sw" link set lo up
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
    ip link add "${PREFIX}h0" type veth peer name "${PREFIX}s0"
    ip link set "${PREFIX}s0" netns "$sw"
    ip -n "$sw" link set "${PREFIX}s0" master br0 up
    ip addr add "10.213.$SUBNET.1/24" dev "${PREFIX}h0"
    ip link set "${PREFIX}h0" up
    flock -u 9
    exec 9>&-
    for (( i = 1; i <= nodes; i++ )); do
        local ns="${PREFIX}n$i"
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip link add "${PREFIX}s$i" netns "$sw" type veth peer name eth0 netns "$ns"
        ip -n "$sw" link set "${PREFIX}s$i" master br0 up
        ip -n "$ns" addr add "10.213.$SUBNET.$((i + 1))/24" dev eth0
        ip -n "$ns" link set eth0 up
    done
    # munged wants every directory above its socket searchable by all
    chmod a+x "$dir"
    mkdir -p "$dir/ctl/state" "$dir/munge"
    chmod 0755 "$dir/munge"
    # the cluster's own key (munged wants 0400/0600, owned by its user)
    (umask 077; openssl rand 1024 >"$dir/munge.key")
    write_conf "$dir"
    start_munged "$dir/munge/munge.socket.2" "$dir/ctl/munged.pid" "$dir/ctl/munged.log" "$dir/ctl/munged.seed"
    slurmctld -D -i -f "$dir/slurm.conf" >"$dir/ctl/slurmctld.out" 2>&1 </dev/null &
    echo $! >"$dir/ctl/slurmctld.launch.pid"
    for (( i = 1; i <= nodes; i++ )); do start_node "$i"; done
    # wait until every node is idle (each slurmd registered with the controller)
    export SLURM_CONF=$dir/slurm.conf
    local idle=0
    for (( t = 0; t < 600; t++ )); do
        local states
        states=$(sinfo -h -N -o '%N %t' 2>/dev/null) || states=
        idle=$(awk '$2=="idle"' <<<"$states" | wc -l)
        (( idle == nodes )) && break
        # a node the controller refused (its slurmd disagrees with slurm.conf) stays so
        if grep -q ' inval' <<<"$states"; then
            sinfo -N -o '%N %t %E' >&2 || true
            die "the controller refused a node (state INVAL)"
        fi
        our_pid "$dir/ctl/slurmctld.launch.pid" slurmctld >/dev/null ||
            die "slurmctld exited (see $dir/ctl/slurmctld.log and slurmctld.out)"
        for (( i = 1; i <= nodes; i++ )); do
            our_pid "$dir/n$i/slurmd.launch.pid" "n$i" >/dev/null ||
                die "slurmd of n$i exited (see $dir/n$i/start.log, slurmd.log)"
        done
        sleep 0.1
    done
    (( idle == nodes )) || { sinfo -N >&2 || true; die "only $idle of $nodes nodes idle after 60 s"; }
    UP_DONE=1
    echo "slurm_cluster.sh: $nodes Slurm node(s) idle on 10.213.$SUBNET.0/24; export SLURM_CONF=$dir/slurm.conf" >&2
}

cmd_down() {
    local dir=$1 i ns pid
    [[ -f $dir/slurm.env ]] || return 0
    load_env "$dir"
    stop_pidfile "$dir/ctl/slurmctld.launch.pid" slurmctld
    for (( i = 1; i <= NODES; i++ )); do
        stop_pidfile "$dir/n$i/slurmd.launch.pid" "n$i"
    done
    for (( i = 1; i <= NODES; i++ )); do
        ns=$(var "NS_$i")
        ip netns list | grep -qw "^$ns" || continue
        # whatever still runs in the node's namespace is the cluster's: munged, steps
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        for pid in $(ip netns pids "$ns" 2>/dev/null); do wait_gone "$pid"; done
        ip netns del "$ns" 2>/dev/null || true
    done
    stop_pidfile "$dir/ctl/munged.pid" munged
    ip link del "${PREFIX}h0" 2>/dev/null || true
    ip netns del "${PREFIX}sw" 2>/dev/null || true
    # the files: only what up writes, then the directory if it is empty
    rm -rf "$dir/ctl" "$dir/munge" "$dir/munge.key" "$dir/slurm.conf" "$dir/hosts"
    for (( i = 1; i <= NODES; i++ )); do rm -rf "${dir:?}/n$i"; done
    rm -f "$dir/slurm.env"
    rmdir "$dir" 2>/dev/null || true
}

cmd_exec() {
    local dir=$1 node=$2 i pid
    shift 2
    load_env "$dir"
    i=$(node_index "$node")
    pid=$(our_pid "$dir/n$i/slurmd.launch.pid" "n$i") || die "n$i has no running slurmd"
    exec nsenter -t "$pid" -n -u -m -- "$@"
}

main() {
    local cmd=${1:-}
    shift || true
    case $cmd in
    up) (( $# == 2 )) || die "usage: slurm_cluster.sh up N DIR"; cmd_up "$@" ;;
    down) (( $# == 1 )) || die "usage: slurm_cluster.sh down DIR"; cmd_down "$1" ;;
    exec) (( $# >= 3 )) || die "usage: slurm_cluster.sh exec DIR NODE CMD..."; cmd_exec "$@" ;;
    *) die "usage: slurm_cluster.sh up N DIR | down DIR | exec DIR NODE CMD..." ;;
    esac
}

main "$@"
