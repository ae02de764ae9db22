# Choosing a free 10.213.X.0/24 for a test cluster and making its switch (sourced by
# cluster.sh and tests/e2e/slurm/slurm_cluster.sh). pick_subnet calls the caller's die()
# when none is free.

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

# make_switch PREFIX X: the bridge in a namespace of its own (<PREFIX>sw, so that the
# host's firewall never sees the test traffic) and this host's leg, <PREFIX>h0 with
# 10.213.X.1/24; the nodes' veths are added to br0 by the caller.
make_switch() {
    local prefix=$1 x=$2 sw="$1sw"
    ip netns add "$sw"
    ip -n "$sw" link set lo up
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
    ip link add "${prefix}h0" type veth peer name "${prefix}s0"
    ip link set "${prefix}s0" netns "$sw"
    ip -n "$sw" link set "${prefix}s0" master br0 up
    ip addr add "10.213.$x.1/24" dev "${prefix}h0"
    ip link set "${prefix}h0" up
}
