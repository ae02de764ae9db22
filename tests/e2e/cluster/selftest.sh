#!/bin/bash
# The test cluster itself (run through with_cluster.sh): every node answers ssh with
# its own host name, carries its own interface name and address, reaches the others,
# and `cluster.sh down` leaves no namespace, link or sshd behind.
set -euo pipefail
dir=${DSL_CLUSTER_DIR:?run through with_cluster.sh}
sh=${DSL_CLUSTER_SH:?}
source "$dir/cluster.env"
fail() { echo "not ok: $*" >&2; exit 1; }
n=0
for (( i = 1; i <= NODES; i++ )); do
    addr_var=ADDR_$i; if_var=IFNAME_$i
    out=$(ssh -F "$dir/ssh_config" "node$i" 'hostname; ip -o -4 addr show' ) || fail "ssh node$i"
    if [[ $MODE == netns ]]; then
        [[ $(head -n1 <<<"$out") == "node$i" ]] || fail "node$i reports hostname '$(head -n1 <<<"$out")'"
        grep -q "${!if_var} .*inet ${!addr_var}/" <<<"$out" || fail "node$i lacks ${!if_var} ${!addr_var}: $out"
        # node i reaches node 1's sshd over the private network
        "$sh" exec "$dir" "node$i" bash -c "exec 3<>/dev/tcp/$ADDR_1/22 && head -c 4 <&3" | grep -q SSH- ||
            fail "node$i cannot reach node1"
    fi
    echo "ok $((++n)) - node$i answers ssh (${!if_var} ${!addr_var})"
done
# a second cluster in a scratch dir must come up beside this one and vanish entirely
d2=$(mktemp -d /tmp/dsl-cluster2.XXXXXX)
"$sh" up 1 "$d2" 2>/dev/null
source "$d2/cluster.env"
p2=$PREFIX
ssh -F "$d2/ssh_config" node1 true || { "$sh" down "$d2"; fail "second cluster"; }
pid=$(cat "$d2/node1/sshd.pid")
"$sh" down "$d2"
rm -rf "$d2"
ip netns list | grep -q "^$p2" && fail "namespaces of $p2 left behind"
ip link show 2>/dev/null | grep -q "${p2}h0" && fail "link ${p2}h0 left behind"
[[ $(cut -d" " -f3 /proc/"$pid"/stat 2>/dev/null) =~ ^[RSDT]$ ]] && fail "sshd $pid left behind"
echo "ok $((++n)) - a second cluster comes up beside the first and down leaves nothing"
