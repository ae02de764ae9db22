#!/bin/bash
# A throw-away cluster of N "nodes" on this machine, each a network namespace with its
# own interface name, address and sshd, for the cluster test tier and the benchmarks.
#
#   cluster.sh up N DIR [SLOTS]   create nodes node1..nodeN, write DIR/ssh_config,
#                                 DIR/known_hosts, DIR/hostfile, DIR/cluster.env
#   cluster.sh down DIR           stop the sshds, kill what runs in the namespaces,
#                                 delete namespaces and links (idempotent)
#   cluster.sh exec DIR NODE CMD  run CMD inside nodeN's namespace (node1 or 1)
#   cluster.sh ns DIR NODE        print the namespace name of a node (for ip netns pids)
#   cluster.sh sshd-stop DIR NODE / sshd-start DIR NODE
#   cluster.sh mnt DIR NODE CMD   run CMD in nodeN's namespaces, mount namespace included
#   cluster.sh contain DIR NODE MODE  make the agents of nodeN contain ranks by MODE
#                                 (DSLAUNCH_CONTAIN: auto, v1, v2, tracking); restarts its sshd
#
# Nodes see the machine's cgroup hierarchies (node_run below), so their agents contain
# ranks in cgroups as the machine allows; `contain` narrows that per node.
#
# DSL_CLUSTER_PRIVATE_DIR=/abs/dir at `up`: each sshd runs in its own mount namespace
# with a private tmpfs over that directory (DSL_CLUSTER_PRIVATE_SIZE, default 50%), so
# files written there over ssh are real per node (sync tests); `mnt` looks inside.
# Every sshd offers the SFTP subsystem (internal-sftp).
#
# Layout (namespace mode, needs CAP_NET_ADMIN):
#
#   root ns: <p>h0 10.213.X.1/24 ──veth── [<p>sw ns: bridge br0] ──veth── node1 ns: dsl0 10.213.X.2
#                                                          ├──veth── node2 ns: ens9 10.213.X.3 ...
#
# The bridge lives in its own namespace so that the host's firewall and bridge
# netfilter settings never see the test traffic; the launching host reaches the nodes
# through <p>h0. X is chosen so that 10.213.X.0/24 overlaps no route or address of the
# machine. Each sshd runs in its node's namespace and a UTS namespace whose hostname is
# the node name, so agents report distinct host names. Interface names differ per node
# (dsl0, ens9, eth1, enp3s0, ...) so NCCL_SOCKET_IFNAME tests mean something.
#
# Without CAP_NET_ADMIN (or with DSL_CLUSTER_MODE=loopback) it falls back to one sshd
# per node on 127.0.0.(1+i) with distinct ports; cluster.env says MODE=loopback, and
# tests that need a private network (link down) must check it. It never skips silently.
# Everything created is removed by `down`, and `up` tears down what it made if it fails.
set -euo pipefail

SELF=$(readlink -f "$0")
IFNAMES=(dsl0 ens9 eth1 enp3s0 ib0x net5 en6 eth7 wan8 lan9)

die() { echo "cluster.sh: error: $*" >&2; exit 1; }

ifname_of() { # node index (1-based)
    local i=$1
    if (( i <= ${#IFNAMES[@]} )); then echo "${IFNAMES[$((i - 1))]}"; else echo "eth$i"; fi
}

load_env() {
    local dir=$1
    [[ -f $dir/cluster.env ]] || die "no cluster in '$dir' (missing cluster.env)"
    # shellcheck disable=SC1091
    source "$dir/cluster.env"
}

node_index() { # node1 | 1 -> 1
    local n=${1#node}
    [[ $n =~ ^[0-9]+$ ]] && (( n >= 1 && n <= NODES )) || die "no node '$1' (1..$NODES)"
    echo "$n"
}

ip2int() { local IFS=.; read -r a b c d <<<"$1"; echo $(( (a << 24) | (b << 16) | (c << 8) | d )); }

# Is 10.213.X.0/24 free of every route and address of the root namespace?
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

gen_keys() {
    local dir=$1 nodes=$2 i
    ssh-keygen -q -t ed25519 -N '' -C "dslaunch-cluster-client" -f "$dir/id_ed25519"
    ssh-keygen -q -t ed25519 -N '' -C "dslaunch-cluster-wrong" -f "$dir/wrong_ed25519"
    cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
    for (( i = 1; i <= nodes; i++ )); do
        mkdir -p "$dir/node$i"
        ssh-keygen -q -t ed25519 -N '' -C "node$i" -f "$dir/node$i/ssh_host_ed25519_key"
    done
}

write_sshd_config() { # dir i addr port
    local dir=$1 i=$2 addr=$3 port=$4
    cat >"$dir/node$i/sshd_config" <<EOF
# generated by cluster.sh for node$i
Port $port
ListenAddress $addr
HostKey $dir/node$i/ssh_host_ed25519_key
PidFile $dir/node$i/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
X11Forwarding no
PrintMotd no
PrintLastLog no
MaxStartups 512
MaxSessions 64
LoginGraceTime 60
LogLevel VERBOSE
Subsystem sftp internal-sftp
EOF
}

write_client_files() { # dir nodes
    local dir=$1 nodes=$2 i
    : >"$dir/ssh_config"; : >"$dir/known_hosts"; : >"$dir/hostfile"
    for (( i = 1; i <= nodes; i++ )); do
        local addr=${ADDR[$i]} port=${PORT[$i]} kh
        cat >>"$dir/ssh_config" <<EOF
Host node$i
  HostName $addr
  Port $port
  User root
  IdentityFile $dir/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $dir/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 10
  LogLevel ERROR

EOF
        if [[ $port == 22 ]]; then kh="node$i,$addr"; else kh="[node$i]:$port,[$addr]:$port"; fi
        echo "$kh $(cut -d' ' -f1,2 "$dir/node$i/ssh_host_ed25519_key.pub")" >>"$dir/known_hosts"
        echo "node$i slots=$SLOTS" >>"$dir/hostfile"
    done
}

# Node namespaces. `ip netns exec` would mount a fresh sysfs over /sys in a new mount
# namespace, and with it an empty /sys/fs/cgroup: agents on nodes could make no cgroup
# and always tracked processes. So a node enters the network namespace with nsenter and
# makes its own mount namespace (private propagation, nothing leaks back): the machine's
# cgroup tree (a tmpfs of v1 hierarchies with a v2 one beside them, or one cgroup2
# mount) is moved aside, a sysfs of the node's network is mounted over /sys like ip netns
# exec does, and the cgroup tree is moved back into it. Whatever the machine mounts
# there, the node sees the same; where nothing is mounted the node has nothing either.
#
# node_run NS STAGE_DIR CMD...: CMD in namespace NS with that mount namespace (STAGE_DIR:
# an empty directory to move the cgroup tree through)
node_run() {
    local ns=$1 stage=$2
    shift 2
    nsenter --net="/run/netns/$ns" -- unshare --mount --propagation private /bin/sh -c '
        stage=$1; shift
        if mountpoint -q /sys/fs/cgroup; then mount --rbind /sys/fs/cgroup "$stage"; else stage=; fi
        umount -l /sys 2>/dev/null; mount -t sysfs sysfs /sys || exit 1
        if [ -n "$stage" ]; then mount --move "$stage" /sys/fs/cgroup || exit 1; fi
        exec "$@"' sh "$stage" "$@"
}

start_sshd() { # dir i
    local dir=$1 i=$2 t ns
    ns=${NS[$i]:-}
    rm -f "$dir/node$i/sshd.pid"
    mkdir -p /run/sshd "$dir/node$i/cgroup-stage"
    if [[ -n ${PRIVATE_DIR:-} ]]; then
        mkdir -p "$PRIVATE_DIR"
        ${ns:+node_run "$ns" "$dir/node$i/cgroup-stage"} unshare --uts --mount --propagation private /bin/sh -c \
            'hostname "$1" && mount -t tmpfs -o "size=$5,mode=0755" "dsl-$1" "$4" &&
             exec /usr/sbin/sshd -f "$2" -E "$3"' sh "node$i" \
            "$dir/node$i/sshd_config" "$dir/node$i/sshd.log" "$PRIVATE_DIR" "$PRIVATE_SIZE"
    elif [[ $MODE == netns ]]; then
        node_run "$ns" "$dir/node$i/cgroup-stage" unshare --uts /bin/sh -c \
            'hostname "$1" && exec /usr/sbin/sshd -f "$2" -E "$3"' sh "node$i" \
            "$dir/node$i/sshd_config" "$dir/node$i/sshd.log"
    else
        /usr/sbin/sshd -f "$dir/node$i/sshd_config" -E "$dir/node$i/sshd.log"
    fi
    for (( t = 0; t < 100; t++ )); do
        [[ -s $dir/node$i/sshd.pid ]] && return 0
        sleep 0.05
    done
    die "sshd of node$i did not start (see $dir/node$i/sshd.log)"
}

stop_sshd() { # dir i
    local dir=$1 i=$2 pid
    [[ -s $dir/node$i/sshd.pid ]] || return 0
    pid=$(cat "$dir/node$i/sshd.pid")
    # only the sshd that this cluster started: its command line names our config
    if [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' </proc/"$pid"/cmdline | grep -qF "$dir/node$i/sshd_config"; then
        kill "$pid" 2>/dev/null || true
        # gone, or a zombie waiting for a slow init to reap it
        for (( t = 0; t < 50; t++ )); do
            [[ $(cut -d' ' -f3 /proc/"$pid"/stat 2>/dev/null) =~ ^[RSDT]$ ]] || break
            sleep 0.05
        done
    fi
    rm -f "$dir/node$i/sshd.pid"
}

cmd_up() {
    local nodes=$1 dir=$2 i
    SLOTS=${3:-2}
    [[ $nodes =~ ^[0-9]+$ ]] && (( nodes >= 1 && nodes <= 250 )) || die "bad node count '$nodes'"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [[ ! -e $dir/cluster.env ]] || die "'$dir' already holds a cluster (cluster.sh down $dir)"
    NODES=$nodes
    MODE=${DSL_CLUSTER_MODE:-netns}
    PRIVATE_DIR=${DSL_CLUSTER_PRIVATE_DIR:-} PRIVATE_SIZE=${DSL_CLUSTER_PRIVATE_SIZE:-50%}
    [[ -z $PRIVATE_DIR || $PRIVATE_DIR == /?* ]] || die "DSL_CLUSTER_PRIVATE_DIR must be absolute"
    if [[ $MODE == netns ]] && ! ip netns add "dslprobe$$" 2>/dev/null; then
        echo "cluster.sh: cannot create network namespaces (no CAP_NET_ADMIN?): falling back to sshd on 127.0.0.x" >&2
        MODE=loopback
    elif [[ $MODE == netns ]]; then
        ip netns del "dslprobe$$"
    fi
    PREFIX="dsl$$"
    declare -gA NS ADDR PORT IFN
    # from here on a failure (die, or set -e) tears down what exists
    CL_DIR=$dir UP_DONE=0
    trap 'if [[ $UP_DONE != 1 ]]; then echo "cluster.sh: setup failed, tearing down" >&2; cmd_down "$CL_DIR" || true; fi' EXIT
    gen_keys "$dir" "$nodes"
    if [[ $MODE == netns ]]; then
        exec 9>/run/lock/dslaunch-cluster.lock
        flock 9
        SUBNET=$(pick_subnet)
        local sw="${PREFIX}sw"
        # record first, so that down can clean up a half-built cluster
        write_env "$dir"
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
            local ns="${PREFIX}n$i" ifn
            ifn=$(ifname_of "$i")
            NS[$i]=$ns; ADDR[$i]="10.213.$SUBNET.$((i + 1))"; PORT[$i]=22; IFN[$i]=$ifn
            ip netns add "$ns"
            ip -n "$ns" link set lo up
            ip link add "${PREFIX}s$i" netns "$sw" type veth peer name "$ifn" netns "$ns"
            ip -n "$sw" link set "${PREFIX}s$i" master br0 up
            ip -n "$ns" addr add "${ADDR[$i]}/24" dev "$ifn"
            ip -n "$ns" link set "$ifn" up
        done
    else
        SUBNET=""
        local base=$(( 20000 + ($$ % 400) * 100 ))
        for (( i = 1; i <= nodes; i++ )); do
            NS[$i]=""; ADDR[$i]="127.0.0.$((i + 1))"; PORT[$i]=$(( base + i )); IFN[$i]=lo
        done
    fi
    write_env "$dir"
    for (( i = 1; i <= nodes; i++ )); do
        write_sshd_config "$dir" "$i" "${ADDR[$i]}" "${PORT[$i]}"
        start_sshd "$dir" "$i"
    done
    write_client_files "$dir" "$nodes"
    # wait until every node answers ssh for real
    for (( i = 1; i <= nodes; i++ )); do
        local ok=0 t
        for (( t = 0; t < 50; t++ )); do
            if ssh -F "$dir/ssh_config" "node$i" true 2>/dev/null; then ok=1; break; fi
            sleep 0.1
        done
        (( ok )) || die "node$i does not answer ssh (see $dir/node$i/sshd.log)"
    done
    UP_DONE=1
    echo "cluster.sh: $nodes node(s) up in $MODE mode${SUBNET:+ on 10.213.$SUBNET.0/24}; ssh -F $dir/ssh_config node1" >&2
}

write_env() {
    local dir=$1 i
    {
        echo "MODE=$MODE"
        echo "PREFIX=$PREFIX"
        echo "NODES=$NODES"
        echo "SLOTS=$SLOTS"
        echo "SUBNET=$SUBNET"
        echo "CLUSTER_DIR=$dir"
        echo "PRIVATE_DIR=${PRIVATE_DIR:-}"
        echo "PRIVATE_SIZE=${PRIVATE_SIZE:-50%}"
        [[ $MODE == netns ]] && echo "HOST_ADDR=10.213.$SUBNET.1"
        for (( i = 1; i <= NODES; i++ )); do
            echo "NS_$i=${NS[$i]:-}"
            echo "ADDR_$i=${ADDR[$i]:-}"
            echo "PORT_$i=${PORT[$i]:-}"
            echo "IFNAME_$i=${IFN[$i]:-}"
        done
    } >"$dir/cluster.env"
}

var() { local n=$1; echo "${!n:-}"; }

cmd_down() {
    local dir=$1 i ns pid
    [[ -f $dir/cluster.env ]] || return 0
    load_env "$dir"
    for (( i = 1; i <= NODES; i++ )); do
        stop_sshd "$dir" "$i"
    done
    if [[ $MODE == netns ]]; then
        for (( i = 1; i <= NODES; i++ )); do
            ns=$(var "NS_$i")
            [[ -n $ns ]] && ip netns list | grep -qw "^$ns" || continue
            # whatever still runs in our namespace is ours: agents, workers, sessions
            for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
            ip netns del "$ns" 2>/dev/null || true
        done
        ip link del "${PREFIX}h0" 2>/dev/null || true
        ip netns del "${PREFIX}sw" 2>/dev/null || true
    fi
    rm -f "$dir/cluster.env"
}

cmd_exec() {
    local dir=$1 node=$2 i ns
    shift 2
    load_env "$dir"
    i=$(node_index "$node")
    ns=$(var "NS_$i")
    if [[ $MODE == netns ]]; then node_run "$ns" "$CLUSTER_DIR/node$i/cgroup-stage" "$@"; else exec "$@"; fi
}

# The agent's environment on a node is the one sshd gives its sessions, so the node's
# containment choice (DSLAUNCH_CONTAIN, docs/reliability.md) is an sshd SetEnv line:
# `auto` removes it. The sshd is restarted to read it; running sessions are not touched.
cmd_contain() {
    local dir=$1 i mode=$3 conf
    load_env "$dir"
    i=$(node_index "$2")
    [[ $mode =~ ^(auto|v1|v2|tracking)$ ]] || die "bad containment mode '$mode' (auto, v1, v2, tracking)"
    conf=$dir/node$i/sshd_config
    sed -i '/^SetEnv DSLAUNCH_CONTAIN=/d' "$conf"
    [[ $mode == auto ]] || echo "SetEnv DSLAUNCH_CONTAIN=$mode" >>"$conf"
    declare -gA NS
    NS[$i]=$(var "NS_$i")
    stop_sshd "$dir" "$i"
    start_sshd "$dir" "$i"
}

cmd_mnt() { # all namespaces of the node's sshd: its private mount namespace included
    local dir=$1 node=$2 i pid
    shift 2
    load_env "$dir"
    i=$(node_index "$node")
    pid=$(cat "$dir/node$i/sshd.pid" 2>/dev/null) || die "node$i has no running sshd"
    exec nsenter -t "$pid" -m -n -u -- "$@"
}

main() {
    local cmd=${1:-}
    shift || true
    case $cmd in
    up) (( $# >= 2 )) || die "usage: cluster.sh up N DIR [SLOTS]"; cmd_up "$@" ;;
    down) (( $# == 1 )) || die "usage: cluster.sh down DIR"; cmd_down "$1" ;;
    exec) (( $# >= 3 )) || die "usage: cluster.sh exec DIR NODE CMD..."; cmd_exec "$@" ;;
    mnt) (( $# >= 3 )) || die "usage: cluster.sh mnt DIR NODE CMD..."; cmd_mnt "$@" ;;
    contain) (( $# == 3 )) || die "usage: cluster.sh contain DIR NODE auto|v1|v2|tracking"; cmd_contain "$@" ;;
    ns) (( $# == 2 )) || die "usage: cluster.sh ns DIR NODE"; load_env "$1"; var "NS_$(node_index "$2")" ;;
    sshd-stop) load_env "$1"; stop_sshd "$1" "$(node_index "$2")" ;;
    sshd-start)
        load_env "$1"; i=$(node_index "$2")
        declare -gA NS; NS[$i]=$(var "NS_$i"); start_sshd "$1" "$i" ;;
    *) die "usage: cluster.sh up N DIR [SLOTS] | down DIR | exec DIR NODE CMD... | mnt DIR NODE CMD... | contain DIR NODE MODE | ns DIR NODE | sshd-stop DIR NODE | sshd-start DIR NODE" ;;
    esac
}

main "$@"
