#!/usr/bin/env bash
# Sync benchmark: a tree of mixed file sizes (default ~1 GB) to 4 and 8 namespace nodes
# (tests/e2e/cluster/cluster.sh, each sshd with a private tmpfs over the data directory so
# every copy is real), in one run: dslaunch sync, pdcp -r (pdsh), and a loop of rsync
# over ssh (one host after another, as people script it), then no-change and
# one-file-changed reruns. Prints a markdown table.
#
# usage: bench/sync.sh BUILD_DIR [TOTAL_MB] [NODE_COUNTS]     (as root)
#   e.g. bench/sync.sh build 1024 "4 8"
set -euo pipefail
build=$(readlink -f "${1:?usage: bench/sync.sh BUILD_DIR [TOTAL_MB] [NODE_COUNTS]}")
total_mb=${2:-1024}
counts=${3:-"4 8"}
root=$(cd "$(dirname "$0")/.." && pwd)
dsl=$build/dslaunch
[[ -x $dsl ]] || { echo "no $dsl (build the dslaunch target)" >&2; exit 1; }
for t in pdcp rsync; do command -v $t >/dev/null || { echo "bench/sync.sh: $t is missing" >&2; exit 1; }; done
base=$(mktemp -d /tmp/dsl-sync-bench.XXXXXX)
P=$base/data
dir=""
cleanup() {
    [[ -n $dir ]] && { "$root/tests/e2e/cluster/cluster.sh" down "$dir" || true; rm -rf "$dir"; }
    rm -rf "$base"
}
trap cleanup EXIT

# The tree: sizes scale with TOTAL_MB; about 40% in 2 big files, 30% in 10 medium,
# 20% in 100 small, 10% in 1000 tiny ones spread over 50 directories, plus empties.
mkdir -p "$P/tree"
mk() { # count bytes subdir-pattern
    local c=$1 b=$2 pat=$3 i d
    for (( i = 0; i < c; i++ )); do
        d=$P/tree/$(printf "$pat" $(( i % 50 )))
        mkdir -p "$d"
        head -c "$b" /dev/urandom >"$d/f$i.bin"
    done
}
mb=$(( total_mb * 1000 * 1000 ))
mk 2 $(( mb * 40 / 100 / 2 )) "big"
mk 10 $(( mb * 30 / 100 / 10 )) "medium"
mk 100 $(( mb * 20 / 100 / 100 )) "small/s%02d"
mk 1000 $(( mb * 10 / 100 / 1000 )) "tiny/t%02d/x"
for i in $(seq 1 50); do : >"$P/tree/tiny/empty$i"; done
nfiles=$(find "$P/tree" -type f | wc -l)
bytes=$(du -sb "$P/tree" | cut -f1)
echo "tree: $nfiles files, $(( bytes / 1000000 )) MB" >&2

now() { date +%s.%N; }
secs() { echo "$2 - $1" | bc; }

clear_nodes() {
    local i
    for (( i = 1; i <= NODES; i++ )); do
        "$root/tests/e2e/cluster/cluster.sh" mnt "$dir" "$i" sh -c 'rm -rf "$1"/tree' sh "$P"
    done
}

check_nodes() { # every node holds all files with the right total size
    local i n b
    for (( i = 1; i <= NODES; i++ )); do
        n=$("$root/tests/e2e/cluster/cluster.sh" mnt "$dir" "$i" find "$P/tree" -type f | wc -l)
        b=$("$root/tests/e2e/cluster/cluster.sh" mnt "$dir" "$i" du -sb "$P/tree" | cut -f1)
        [[ $n == "$nfiles" ]] || { echo "node$i: $n files, want $nfiles" >&2; return 1; }
        (( b >= bytes - 1000000 && b <= bytes + 1000000 )) || { echo "node$i: $b bytes" >&2; return 1; }
    done
}

echo "| nodes | tool | first copy (s) | aggregate MB/s | no change (s) | one file changed (s) |"
echo "|---|---|---|---|---|---|"
for n in $counts; do
    dir=$(mktemp -d /tmp/dsl-cluster.XXXXXX)
    DSL_CLUSTER_PRIVATE_DIR=$P "$root/tests/e2e/cluster/cluster.sh" up "$n" "$dir" 1
    source "$dir/cluster.env"
    cfg=$dir/ssh_config
    hosts=$(seq -s, -f 'node%g' 1 "$n")

    # pdcp-aes: pdcp with the cipher dslaunch sync prefers, to separate cipher from method
    for tool in dslaunch pdcp pdcp-aes rsync; do
        clear_nodes
        sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
        cat "$P"/tree/big/* >/dev/null   # same warm page cache for every tool
        case $tool in
        dslaunch) run() { "$dsl" sync -q --hostfile "$dir/hostfile" --ssh-config "$cfg" "$P/tree"; } ;;
        pdcp) run() { PDSH_RCMD_TYPE=ssh PDSH_SSH_ARGS_APPEND="-F $cfg" \
                      pdcp -r -p -f 256 -w "node[1-$n]" "$P/tree" "$P/"; } ;;
        pdcp-aes) run() { PDSH_RCMD_TYPE=ssh PDSH_SSH_ARGS_APPEND="-F $cfg -c aes128-gcm@openssh.com" \
                      pdcp -r -p -f 256 -w "node[1-$n]" "$P/tree" "$P/"; } ;;
        rsync) run() { local h; for h in ${hosts//,/ }; do
                       rsync -a -e "ssh -F $cfg" "$P/tree" "$h:$P/"; done; } ;;
        esac
        t0=$(now); run; t1=$(now)
        check_nodes
        first=$(secs "$t0" "$t1")
        rate=$(echo "scale=0; $bytes * $n / 1000000 / $first" | bc)
        nochange="-"; changed="-"
        if [[ $tool != pdcp* ]]; then   # pdcp always copies everything
            t0=$(now); run; t1=$(now); nochange=$(secs "$t0" "$t1")
            head -c 1000 /dev/urandom >>"$P/tree/medium/f3.bin"
            t0=$(now); run; t1=$(now); changed=$(secs "$t0" "$t1")
            check_nodes
        fi
        printf "| %d | %s | %.2f | %d | %s | %s |\n" "$n" "$tool" "$first" "$rate" \
            "$( [[ $nochange == - ]] && echo - || printf %.2f "$nochange")" \
            "$( [[ $changed == - ]] && echo - || printf %.2f "$changed")"
    done
    "$root/tests/e2e/cluster/cluster.sh" down "$dir"
    rm -rf "$dir"
    dir=""
done
